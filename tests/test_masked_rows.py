"""Query rows that see no key: zeros in the output and zero gradients from them, in every implementation that runs
on the CPU, at lengths on both sides of every block size the tiled kernels use, under each oneDNN instruction set
this CPU has.

Why the instruction sets: a GEMM may spread a NaN row of its left operand into other rows. oneDNN's AMX bf16 kernels
do (a bf16 (64 × 65) @ (65 × 8) product with NaN in every other row gives NaN in half of the others), its AVX-512
and AVX2 kernels do not, so a softmax row of 0/0 that reaches a GEMM passes on one CPU and fails on another. Each
instruction set below AMX runs this module's half-type checks again in a subprocess with `ONEDNN_MAX_CPU_ISA`
capped; one the CPU lacks is skipped with that reason.

The product of lengths × masks × causal × GQA is too large for CI's time: `COMBOS` is a seeded subset of 25 in which
every length appears as Lq and as Lk, every mask five times, with and without causal and with and without GQA; each
combination runs in fp32, bf16 and fp16, forward and backward. The implementations that compile (flex, compiled:
seconds per new shape) run `COMPILED_COMBOS`, one combination.
"""
from __future__ import annotations

import math
import os
import random
import subprocess
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import sdpa_impls
from sdpa_impls import max_abs_error, reference, scaffold, tolerance
from sdpa_impls.bench.machine import ONEDNN_ISA_ENV, cpu_flags
from sdpa_impls.impls import fused
from sdpa_impls.impls._tiled.budget import CpuTiling
from test_correctness import one_intra_op_thread  # noqa: F401 (fixture)

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")

# Both sides of each block the tiled kernels use (fused's key block, chunked's query tile), taken from the code so
# that a retuning moves the test with it, plus PyTorch's mask-vs-math lengths (267 × 514)
BLOCKS = sorted({fused.KEY_BLOCK, CpuTiling.CHUNKED_Q_TILE})
LENGTHS = sorted({1, *(n + d for n in BLOCKS for d in (-1, 0, 1)), 267, 514})
MASKS = ("alternate", "ends", "column", "padding", "float-inf")
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
ISA_ENV = ONEDNN_ISA_ENV
_PROBE = torch.ones(1, 1, 2, 8)
# every implementation that runs on the CPU (the others say "device=cpu (supported: cuda)" and are held to the same
# rule on a GPU by test_gpu.py); one that cannot run a combination skips it with its own reasons
ON_CPU = [i for i in map(sdpa_impls.get, sdpa_impls.names())
          if not any(r.startswith("device=cpu") for r in i.unsupported_reasons(_PROBE, _PROBE, _PROBE))]
COMPILES = [i for i in ON_CPU if getattr(i, "compiles", False)]
EAGER = [i for i in ON_CPU if i not in COMPILES]


@dataclass(frozen=True)
class Combo:
    lq: int
    lk: int
    mask: str
    causal: bool
    gqa: bool

    @property
    def name(self) -> str:
        return f"{self.lq}x{self.lk}-{self.mask}" + "-causal" * self.causal + "-gqa" * self.gqa

    def args(self, dtype: torch.dtype) -> dict:
        """Seeded inputs (B 2, E 16; Hq 4 over Hkv 2 and Ev 8 with GQA, else 2 × 2 and Ev 16) and the mask."""
        gen = torch.Generator().manual_seed(zlib.crc32(self.name.encode()))
        b, hkv, hq = 2, 2, 4 if self.gqa else 2
        q = torch.randn(b, hq, self.lq, 16, generator=gen)
        ev = 8 if self.gqa else 16  # E ≠ Ev with GQA; E = Ev elsewhere, which torch's flash kernel needs
        k, v = torch.randn(b, hkv, self.lk, 16, generator=gen), torch.randn(b, hkv, self.lk, ev, generator=gen)
        return {"query": q.to(dtype), "key": k.to(dtype), "value": v.to(dtype), "attn_mask": self._mask(gen, b),
                "is_causal": self.causal, "enable_gqa": self.gqa}

    def _mask(self, gen: torch.Generator, b: int) -> torch.Tensor:
        lq, lk = self.lq, self.lk
        if self.mask == "alternate":  # every other query row sees no key
            m = torch.ones(lq, lk, dtype=torch.bool)
            m[::2] = False
        elif self.mask == "ends":  # the first and the last row see nothing; the others a random 70 % of the keys
            m = torch.rand(lq, lk, generator=gen) < 0.7
            m[0] = m[-1] = False
        elif self.mask == "column":  # (Lq, 1): a query sees every key or none (the first none, the second all)
            m = torch.rand(lq, 1, generator=gen) < 0.5
            m[0], m[1:2] = False, True
        elif self.mask == "padding":  # (B, 1, Lq, Lk): row 0 unpadded, row 1 with padded queries and keys
            nq, nk = torch.tensor([lq, lq * 2 // 3]), torch.tensor([lk, max(1, lk // 2)])  # Lq 1: row 1 all padding
            m = (torch.arange(lq)[:, None] < nq[:, None, None]) & (torch.arange(lk)[None, :] < nk[:, None, None])
            m = m[:, None]
        else:  # a float bias with every third row -inf throughout
            m = torch.randn(lq, lk, generator=gen)
            m[::3] = -math.inf
        return m


def _combos(seed: int, per_mask: int) -> list[Combo]:
    """`per_mask` (Lq, Lk) pairs for each mask, drawn from one seeded pairing of the lengths in which every length
    appears as Lq and as Lk (the masks take turns along it); with or without causal and GQA, each in turn."""
    rng = random.Random(seed)
    lks = LENGTHS[:]
    rng.shuffle(lks)
    pairs = list(zip(LENGTHS, lks))
    out = []
    for k in range(per_mask * len(MASKS)):
        lq, lk = pairs[k % len(pairs)]
        if k >= len(pairs):  # past one round of the pairing: a second, shifted, so the pairs differ
            lq, lk = pairs[k % len(pairs)][0], pairs[(k + 1) % len(pairs)][1]
        out.append(Combo(lq, lk, MASKS[k % len(MASKS)], causal=k % 2 == 1, gqa=(k // 2) % 2 == 0))
    return out


# the subset (every length on both sides, each mask 5 times, 25 in all), and the two shapes where fused once gave
# NaN on AMX: a 64 × 65 bf16 call with every other row masked, and PyTorch's mask-vs-math test (267 × 514, a (Lq, 1)
# mask)
COMBOS = _combos(seed=1, per_mask=5) + [Combo(64, 65, "alternate", False, False),
                                        Combo(267, 514, "column", False, False)]
# each is a compilation per dtype (about 5 s): a bool mask with rows without keys, lengths past a key block
COMPILED_COMBOS = [Combo(65, 129, "alternate", True, True)]


def dead_rows(args: dict) -> torch.Tensor:
    """(B, Hq, Lq) bool: the query rows that see no key (mask and causal together), computed from the inputs."""
    q, k, mask = args["query"], args["key"], args["attn_mask"]
    b, hq, lq, lk = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    seen = mask if mask.dtype == torch.bool else mask != -math.inf
    seen = seen.expand(b, hq, lq, lk)
    if args["is_causal"]:
        seen = seen & torch.ones(lq, lk, dtype=torch.bool).tril()
    return ~seen.any(dim=-1)


def run(impl, args: dict, grad_out: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    leaves = {n: args[n].detach().requires_grad_(True) for n in ("query", "key", "value")}
    out = impl(**(args | leaves))
    out.backward(grad_out)
    return out.detach(), [leaves[n].grad for n in ("query", "key", "value")]


_expected: dict[tuple[Combo, torch.dtype], tuple] = {}


def expected(combo: Combo, dtype: torch.dtype) -> tuple:
    """(args, grad_out, fp64 output and gradients, naive's errors): once per combination and dtype."""
    key = (combo, dtype)
    if key not in _expected:
        args = combo.args(dtype)
        grad_out = torch.randn(args["query"].shape[:-1] + (args["value"].shape[-1],),
                               generator=torch.Generator().manual_seed(7)).to(dtype)
        ref_out, ref_grads = run(reference, args, grad_out.double())
        out, grads = run(sdpa_impls.get("naive"), args, grad_out)
        errors = [max_abs_error(g, r) for g, r in zip([out, *grads], [ref_out, *ref_grads])]
        _expected[key] = (args, grad_out, [ref_out, *ref_grads], errors)
    return _expected[key]


def check(impl, combo: Combo, dtype: torch.dtype) -> None:
    args, grad_out, refs, naive_errors = expected(combo, dtype)
    with_grad = not impl.unsupported_reasons(**(args | {"query": args["query"].detach().requires_grad_(True)}))
    if impl.unsupported_reasons(**args):
        pytest.skip("; ".join(impl.unsupported_reasons(**args)))
    if with_grad:
        out, grads = run(impl, args, grad_out)
    else:  # forward-only here (flex on CPU): its reasons say so
        out, grads = impl(**args), []
    dead = dead_rows(args)
    assert dead.any(), f"{combo.name}: the mask was meant to leave some row without keys"
    assert (out[dead] == 0).all(), f"{combo.name}: {int((out[dead] != 0).any(-1).sum())} of {int(dead.sum())} " \
                                   f"rows without keys are not zeros (NaN: {int(out[dead].isnan().any(-1).sum())})"
    if grads:
        assert (grads[0][dead] == 0).all(), f"{combo.name}: dq of rows without keys is not zero"
    for name, got, want, naive_err in zip(("out", "dq", "dk", "dv"), [out, *grads], refs, naive_errors):
        err, tol = max_abs_error(got, want), tolerance(naive_err, dtype, want)
        assert math.isfinite(err), f"{combo.name} {name}: NaN or inf where the fp64 reference is finite"
        assert err <= tol, f"{combo.name} {name}: max |error| {err:.3g} > {tol:.3g} (2 × naive's {naive_err:.3g} " \
                           "+ floor)"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("combo", COMBOS, ids=lambda c: c.name)
@pytest.mark.parametrize("impl", EAGER, ids=lambda i: i.name)
def test_rows_without_keys_are_zeros(impl, combo: Combo, dtype: torch.dtype) -> None:
    check(impl, combo, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("combo", COMPILED_COMBOS, ids=lambda c: c.name)
@pytest.mark.parametrize("impl", COMPILES, ids=lambda i: i.name)
def test_rows_without_keys_are_zeros_compiled(impl, combo: Combo, dtype: torch.dtype) -> None:
    check(impl, combo, dtype)


def test_the_subset_covers_every_length_and_mask() -> None:
    assert {c.lq for c in COMBOS} == {c.lk for c in COMBOS} == set(LENGTHS)
    for mask in MASKS:
        mine = [c for c in COMBOS if c.mask == mask]
        assert len(mine) >= 5 and {c.causal for c in mine} == {c.gqa for c in mine} == {False, True}, mask
    assert {fused.KEY_BLOCK - 1, fused.KEY_BLOCK + 1, CpuTiling.CHUNKED_Q_TILE + 1} <= set(LENGTHS)


# --- the same checks under each oneDNN instruction set this CPU has --------------------------------------------------

# oneDNN's caps, lowest first, and the CPU flags each needs
ISAS = {"AVX2": {"avx2"}, "AVX512_CORE": {"avx512f", "avx512bw"}, "AVX512_CORE_BF16": {"avx512_bf16"},
        "AVX512_CORE_AMX": {"amx_bf16", "amx_tile"}}


@pytest.mark.skipif(bool(os.environ.get(ISA_ENV)), reason=f"already under {ISA_ENV}={os.environ.get(ISA_ENV)}")
@pytest.mark.parametrize("isa", list(ISAS))
def test_rows_without_keys_under_each_instruction_set(isa: str) -> None:
    """This module's eager bf16 and fp16 checks again in a fresh interpreter (the test environment's own) with oneDNN
    capped at `isa`, for each path below the CPU's best: the uncapped run above takes the best (AMX's on a CPU that
    has it), so every path the CPU has is checked wherever the tests run. A path the CPU lacks skips with the
    reason. Half types only: they are what AVX-512 BF16 and AMX change (fp32 GEMMs take neither)."""
    flags = cpu_flags()
    missing = ISAS[isa] - flags
    if missing:
        pytest.skip(f"this CPU has no {isa} ({', '.join(sorted(missing))} not in /proc/cpuinfo)")
    best = [name for name, needs in ISAS.items() if needs <= flags][-1]
    if isa == best:
        pytest.skip(f"{isa} is this CPU's best path: the uncapped tests of this module ran on it")
    env = os.environ | {ISA_ENV: isa}
    cmd = [sys.executable, "-m", "pytest", __file__, "-q", "-p", "no:cacheprovider", "-x", "-k",
           "test_rows_without_keys_are_zeros and not compiled and (bfloat16 or float16)"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900,
                          cwd=Path(__file__).resolve().parents[1])
    tail = "\n".join(done.stdout.splitlines()[-15:])
    assert done.returncode == 0, f"under {ISA_ENV}={isa}:\n{tail}\n{done.stderr[-2000:]}"
    assert " passed" in tail and " failed" not in tail, tail


# Lk 600: across chunked's key tiles with one thread (512); Lq 3000: more rows than fused's training forward keeps P
# of (its backward computes P again)
@pytest.mark.parametrize("lq, lk", [(8, 64), (8, 600), (3000, 64)], ids=lambda n: str(n))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("impl", EAGER, ids=lambda i: i.name)
def test_rows_whose_scores_are_all_minus_inf_from_the_data_get_torchs_answer(impl, dtype: torch.dtype, lq: int,
                                                                            lk: int) -> None:
    """No mask: a query row of -inf against keys of positive entries scores -inf on every key. torch's SDPA answers
    such a row 0 (a safe softmax), as a masked row, with dq 0 there, dv finite and dk NaN (0 · -inf); a NaN query
    row stays NaN. Every output and gradient is torch's, NaN where torch's is NaN."""
    gen = torch.Generator().manual_seed(lk)
    q = torch.randn(2, 2, lq, 16, generator=gen)
    k, v = torch.rand(2, 2, lk, 16, generator=gen) + 0.1, torch.randn(2, 2, lk, 16, generator=gen)
    q[0, 0, 3], q[1, 1, 5] = -math.inf, math.nan
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    grad = not impl.unsupported_reasons(q.requires_grad_(), k, v)
    if impl.unsupported_reasons(q.detach(), k, v):
        pytest.skip("; ".join(impl.unsupported_reasons(q.detach(), k, v)))
    answers = []
    for fn in (torch.nn.functional.scaled_dot_product_attention, impl):
        leaves = [t.detach().clone().requires_grad_(grad) for t in (q, k, v)]
        out = fn(*leaves)
        if grad:
            out.backward(torch.ones_like(out))
        answers.append([out.detach(), *(t.grad for t in leaves if grad)])
    want, got = answers
    assert (want[0][0, 0, 3] == 0).all() and want[0][1, 1, 5].isnan().all(), "torch's own answer changed"
    assert (got[0][0, 0, 3] == 0).all(), f"the row of -inf scores: {got[0][0, 0, 3, :4].tolist()}, torch's is 0"
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    for name, g, w in zip(("out", "dq", "dk", "dv"), got, want):
        assert torch.equal(g.isnan(), w.isnan()), f"{name}: NaN in {int(g.isnan().sum())} places, torch's in " \
                                                   f"{int(w.isnan().sum())}"
        torch.testing.assert_close(g, w, atol=tol * max(1.0, w.nan_to_num().abs().max().item()), rtol=0,
                                   equal_nan=True, msg=lambda m: f"{name}: {m}")


def test_the_quickstart_plugins_class_answers_these_rows_as_torch_does() -> None:
    """The class `sdpa-bench quickstart` writes is what a kernel author runs these tests on first (`-k NAME`, as
    the guide says): its row test (isfinite) read a NaN row as a masked one and answered 0 where torch gives NaN."""
    namespace: dict = {}
    exec(compile(scaffold.files(scaffold.names_for("toy"), "x")["src/toy/__init__.py"], "toy", "exec"), namespace)
    toy = namespace["Toy"]()
    for dtype in (torch.float32, torch.bfloat16):
        for lq, lk in ((8, 64), (3000, 64)):
            test_rows_whose_scores_are_all_minus_inf_from_the_data_get_torchs_answer(toy, dtype, lq, lk)
        for combo in COMBOS:
            check(toy, combo, dtype)


def test_only_inputs_that_can_score_minus_inf_pay_for_the_check() -> None:
    """The check for such rows (a sum of the answer, a second pass where it is NaN) runs only where q or k is not
    finite or the scores could pass 1e30: every other call, the benchmarks' among them, skips it."""
    from sdpa_impls.impls._tiled.compute import scores_may_be_inf
    from sdpa_impls.protocol import SDPAInputs

    q, k = torch.randn(1, 2, 16, 8), torch.randn(1, 2, 16, 8)
    inf_q = q.clone()
    inf_q[0, 0, 0, 0] = -math.inf
    assert not scores_may_be_inf(SDPAInputs(q, k, k, scale=0.35))
    assert not scores_may_be_inf(SDPAInputs(q.bfloat16() * 1e12, k.bfloat16() * 1e12, k.bfloat16(), scale=0.35))
    assert scores_may_be_inf(SDPAInputs(inf_q, k, k, scale=0.35))
    assert scores_may_be_inf(SDPAInputs(q, k * math.nan, k, scale=0.35))
    assert scores_may_be_inf(SDPAInputs(q, k, k, scale=-1e30))
