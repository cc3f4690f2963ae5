"""The grid and the measurement of one point: exact FLOP counts, seeded non-zero inputs, failures become results."""
from __future__ import annotations

import pytest
import torch

from sdpa_impls.grid import PRESETS, Case, default_preset_name, make_inputs, preset
from sdpa_impls.measure import CaseContext, Options, run_case_interleaved, run_point, with_speedups


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
    monkeypatch.delenv("SDPA_BENCH_PRESET")
    assert default_preset_name("cpu") == "cpu" and default_preset_name("cuda") == "gpu"


def test_inputs_are_seeded_random_never_zero() -> None:
    case = Case(lq=64, lk=64, e=32, mode="fwd+bwd", mask="bool")
    a, b = make_inputs(case, "cpu"), make_inputs(case, "cpu")
    assert torch.equal(a.query, b.query) and torch.equal(a.attn_mask, b.attn_mask)
    assert a.query.std() > 0.5 and not torch.equal(a.query, a.key)
    assert a.query.requires_grad and a.grad_out is not None
    other = make_inputs(Case(lq=64, lk=64, e=32), "cpu")
    assert not torch.equal(a.query.detach(), other.query)


def test_run_point_turns_every_outcome_into_a_result() -> None:
    ctx = CaseContext.build(Case(lq=64, lk=64, e=32), "cpu")
    fast = Options(budget_s=0.01, min_reps=2, warmup=1)
    ok = run_point("fused", ctx, fast)
    assert ok.status == "ok" and ok.median_s > 0 and ok.max_error <= ok.error_tolerance
    assert ok.peak_memory_bytes > 0 and ok.tflops > 0 and 0 < ok.roofline_pct
    skipped = run_point("torch_sdpa_cudnn", ctx, fast)
    assert skipped.status == "skipped" and "cuda" in skipped.reason
    unknown = run_point("does_not_exist", ctx, fast)
    assert unknown.status == "failed" and "unknown implementation" in unknown.reason
    base = run_point("torch_sdpa", ctx, fast)
    sped = {r.impl: r for r in with_speedups([base, ok, skipped])}
    assert sped["torch_sdpa"].speedup_vs_torch_sdpa == 1.0
    assert sped["fused"].speedup_vs_torch_sdpa == pytest.approx(base.median_s / ok.median_s)
    assert sped["torch_sdpa_cudnn"].speedup_vs_torch_sdpa is None


def test_interleaved_rounds_time_every_implementation_alike() -> None:
    """One call of each implementation per round: all get the same number of samples; a bad one is a Result."""
    names = ["naive", "torch_sdpa_cudnn", "fused", "does_not_exist", "chunked"]
    rows = run_case_interleaved(Case(lq=64, lk=64, e=32), names, "cpu",
                                Options(budget_s=0.0, min_reps=4, max_reps=4, warmup=1, memory=False))
    assert [r.impl for r in rows] == names  # in the order asked for
    by = {r.impl: r for r in rows}
    assert by["torch_sdpa_cudnn"].status == "skipped" and by["does_not_exist"].status == "failed"
    timed = [by[n] for n in ("naive", "fused", "chunked")]
    assert all(r.status == "ok" and len(r.samples) == 4 and r.max_error <= r.error_tolerance for r in timed)
    assert all(r.peak_memory_bytes is None for r in timed)  # memory=False: no memory pass
    more = run_case_interleaved(Case(lq=64, lk=64, e=32), ["fused", "naive"], "cpu",
                                Options(budget_s=0.02, min_reps=2, max_reps=50, warmup=0))
    assert all(sum(r.samples) >= 0.02 or len(r.samples) == 50 for r in more)  # the budget holds for the slowest too
    assert len(more[0].samples) == len(more[1].samples) and more[0].peak_memory_bytes > 0
