"""The grid: exact FLOP counts, readable unique ids, clear errors, seeded non-zero inputs, shards."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from sdpa_impls.bench.grid import PRESETS, Case, default_preset_name, preset, shard_of
from sdpa_impls.bench.inputs import make_inputs


@pytest.mark.parametrize("lq,lk", [(1, 1), (7, 7), (5, 9), (9, 5), (1, 300)])
def test_causal_pairs_count_exactly_the_unmasked_ones(lq: int, lk: int) -> None:
    case = Case(lq=lq, lk=lk, e=16, causal=True)
    assert case.pairs() == int(torch.ones(lq, lk).tril().sum())
    assert Case(lq=lq, lk=lk, e=16).pairs() == lq * lk


def test_flops_follow_the_design_formula() -> None:
    case = Case(lq=128, lk=128, e=64, ev=32, batch=2, heads_q=4, heads_kv=4)
    assert case.flops() == 2 * 2 * 4 * 128 * 128 * (64 + 32)
    assert Case(lq=8, lk=8, e=8, mode="fwd+bwd").flops() == 3.5 * Case(lq=8, lk=8, e=8).flops()


def test_preset_ids_are_unique_and_readable() -> None:
    for name, cases in PRESETS.items():
        ids = [c.id for c in cases]
        assert len(ids) == len(set(ids)), name
    assert Case(lq=1024, lk=1024, e=64, dtype="bf16", causal=True).id == "L1024-E64-bf16-causal-fwd"


def test_unknown_preset_and_bad_case_are_clear_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="unknown preset 'nope'; known: smoke"):
        preset("nope")
    with pytest.raises(ValueError, match="dtype 'fp8'"):
        Case(lq=1, lk=1, e=8, dtype="fp8")
    monkeypatch.setenv("SDPA_BENCH_PRESET", "decode")
    assert default_preset_name("cpu") == "decode"
    monkeypatch.setenv("SDPA_BENCH_PRESET", "smok")  # the variable is named: asv's traceback shows only this line
    with pytest.raises(ValueError, match="^SDPA_BENCH_PRESET='smok': unknown preset 'smok'; known: smoke"):
        default_preset_name("cpu")
    monkeypatch.delenv("SDPA_BENCH_PRESET")
    assert default_preset_name("cpu") == "cpu" and default_preset_name("cuda") == "gpu"
    assert default_preset_name("cuda:1") == "gpu" and default_preset_name("cpu:0") == "cpu"  # the suite's cuda:N


@pytest.mark.parametrize("field,value,said", [
    ("heads_kv", 0, "heads_kv=0 is not a whole number of at least 1"),  # was ZeroDivisionError
    ("lq", 0, "lq=0 is not"), ("batch", 0, "batch=0 is not"),  # were timed as "ok" at 0 FLOP/s
    ("e", -1, "e=-1 is not"), ("lq", 128.0, "lq=128.0 is not"), ("lq", "128", "lq='128' is not"),
    ("lk", True, "lk=True is not"), ("ev", -1, "ev=-1 is not a whole number of at least 0"),
    ("causal", "yes", "causal='yes' is not True or False"), ("mask", None, "mask=None is not a name"),
])
def test_a_case_of_sizes_that_are_no_sizes_is_one_clear_error(field: str, value: object, said: str) -> None:
    """A custom case's nonsense was a traceback (ZeroDivisionError, AttributeError), an id such as L128.0, points
    that all failed in torch, or a timed result of an empty computation."""
    with pytest.raises(ValueError, match="^Case " + re.escape(said)):
        Case(**{"lq": 128, "lk": 128, "e": 64} | {field: value})
    case = Case(lq=np.int64(128), lk=128, e=64)  # a NumPy integer is a size, kept as an int
    assert type(case.lq) is int and case.id == "L128-E64-fp32-fwd"
    assert Case(lq=8, lk=8, e=8, causal=np.bool_(True)).causal is True


def test_inputs_are_seeded_random_never_zero() -> None:
    case = Case(lq=64, lk=64, e=32, mode="fwd+bwd", mask="bool")
    a, b = make_inputs(case, "cpu"), make_inputs(case, "cpu")
    assert torch.equal(a.query, b.query) and torch.equal(a.attn_mask, b.attn_mask)
    assert a.query.std() > 0.5 and not torch.equal(a.query, a.key)
    assert a.query.requires_grad and a.grad_out is not None
    other = make_inputs(Case(lq=64, lk=64, e=32), "cpu")
    assert not torch.equal(a.query.detach(), other.query)


def test_shards_are_disjoint_and_complete() -> None:
    cases = PRESETS["quick"]
    shards = [shard_of(cases, i, 3) for i in (1, 2, 3)]
    assert sorted(c for s in shards for c in s) == sorted(cases)
    assert len({c for s in shards for c in s}) == len(cases) and all(shards)
    with pytest.raises(ValueError, match="1 <= I <= N"):
        shard_of(cases, 4, 3)
