"""The CUDA tiling of fused and chunked, forced on CPU tensors: aten ops per call on the llm preset, no host
synchronization inside a call, answers and gradients against fp64, and the memory one call holds.

What is counted is every aten op the dispatcher sees in one prepared call (forward, and for fwd+bwd the
backward): on a GPU each op that is not a view is a kernel launch or an allocator call, each costing host time,
so fewer ops is the first thing a CUDA plan must buy. Nothing here runs on a GPU; tests/test_gpu.py does.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import math

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

import sdpa_impls
from sdpa_impls import max_abs_error, reference, tolerance
from sdpa_impls.bench.grid import Case, preset
from sdpa_impls.bench.inputs import make_inputs
from sdpa_impls.bench.memory import peak_memory
from sdpa_impls.impls import chunked, fused
from sdpa_impls.impls._tiled import tilemap
from sdpa_impls.impls._tiled.budget import MiB, CpuTiling, CudaTiling, cuda_tiling, forced_tiling, tiling_for
from test_correctness import one_intra_op_thread  # noqa: F401 (fixture)
from test_masked_rows import Combo

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")

TILED = ("fused", "chunked")
CPU = torch.device("cpu")
LLM = preset("llm")
# ops that wait for the device (a value read back to the host) or whose output shape depends on the data
HOST_SYNC = {"aten::_local_scalar_dense", "aten::item", "aten::is_nonzero", "aten::nonzero", "aten::masked_select",
             "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive", "aten::equal", "aten::allclose"}
# The most aten ops (views and allocations included) one call may issue with the CUDA tiling, per implementation,
# L and mode. The 128 × 1024 tiles chunked had on CUDA before issued 275 / 763 ops at L 1024 and 2051 / 5592 at
# L 4096 (fwd / fwd+bwd); `test_the_limits_catch_chunked_with_128_row_tiles` keeps that failing.
OP_LIMITS = {
    ("fused", 1024, "fwd"): 40, ("fused", 1024, "fwd+bwd"): 120,
    ("fused", 4096, "fwd"): 120, ("fused", 4096, "fwd+bwd"): 460,
    ("chunked", 1024, "fwd"): 60, ("chunked", 1024, "fwd+bwd"): 170,
    ("chunked", 4096, "fwd"): 330, ("chunked", 4096, "fwd+bwd"): 900,
}


class OpCounter(TorchDispatchMode):
    """Counts every aten op the dispatcher runs, by name (in-place, out= and view overloads included). `prim::`
    ops are not counted: they are a fake tensor's metadata queries (its device), which a real tensor answers
    without dispatching and no GPU runs."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace != "prim":
            self.ops[func.name()] += 1
        return func(*args, **(kwargs or {}))


@functools.lru_cache(maxsize=None)
def ops_per_call(name: str, case: Case, policy: CudaTiling, fake: bool = True) -> collections.Counter[str]:
    """The aten ops of one call of `name`'s prepared closure (and the backward, for fwd+bwd) planned by `policy`.

    The plan is built on real tensors, outside the counted call (it reads the tile map's values). With `fake`, the
    call then runs on fake tensors: every op is dispatched with its shapes, dtypes and strides, and none computes.
    So the llm preset is counted at its full size in well under a second a case, where computing it in bf16 took up
    to 70 s a case on a CPU without a fast bf16 GEMM. `test_a_fake_call_issues_the_ops_of_a_real_one` holds the
    two counts equal."""
    with forced_tiling(policy):
        inputs = make_inputs(case, "cpu")
        fn = inputs.prepare(sdpa_impls.get(name))  # the plan is built here, outside the counted call
        no_data = FakeTensorMode(allow_non_fake_inputs=True) if fake else contextlib.nullcontext()
        with no_data, OpCounter() as counter:
            out = fn()
            if inputs.grad_out is not None:
                out.backward(inputs.grad_out)
    return counter.ops


def test_cuda_tiling_is_forced_inside_the_block_only() -> None:
    cpu_rows = fused.tile_shape(CPU, 1, 32, 1, 4096, 4096, 2)
    with cuda_tiling() as policy:
        assert isinstance(tiling_for(CPU), CudaTiling)
        assert fused.tile_shape(CPU, 1, 32, 1, 4096, 4096, 2) == (1024, 32)  # every head, 1024 of the 4096 rows
        assert chunked.tile_size(CPU, 32) == (1024, 1024)
        assert policy.score_tile_bytes == 512 * MiB
    assert isinstance(tiling_for(CPU), CpuTiling)
    assert fused.tile_shape(CPU, 1, 32, 1, 4096, 4096, 2) == cpu_rows and cpu_rows[0] <= 256
    assert chunked.tile_size(CPU, 32)[0] == CpuTiling.CHUNKED_Q_TILE
    with pytest.raises(ValueError, match="free_bytes"):
        cuda_tiling(0)


@pytest.mark.parametrize("free_gib, budget_mib, rows", [(139, 512, 1024), (8, 512, 1024), (4, 256, 1024),
                                                        (1, 64, 256), (0.125, 8, 64)])
def test_the_cuda_budget_follows_the_free_memory(free_gib: float, budget_mib: int, rows: int) -> None:
    """A sixteenth of the free memory, at most 512 MiB; fused's bf16 rows of 32 heads × 4096 keys (256 KiB a row)
    follow it down to 64 rows, and below that the heads are split into groups that fit."""
    policy = CudaTiling(int(free_gib * (1 << 30)))
    assert policy.score_tile_bytes == budget_mib * MiB
    got_rows, heads = policy.fused_tile(1, 32, 1, 4096, 4096, 2)
    assert got_rows == rows
    assert heads == (32 if rows * 32 * 4096 * 2 <= budget_mib * MiB else budget_mib * MiB // (rows * 4096 * 2))
    q_tile, k_tile = policy.chunked_tile(32)
    assert 32 * q_tile * k_tile * 6 <= max(budget_mib * MiB, 32 * 64 * 128 * 6)  # fp32 and bf16 score tiles


@pytest.mark.parametrize("name", TILED)
@pytest.mark.parametrize("case", LLM, ids=lambda c: c.id)
def test_ops_per_call_of_the_llm_preset_are_bounded(case: Case, name: str) -> None:
    ops = ops_per_call(name, case, CudaTiling(64 << 30))
    limit = OP_LIMITS[(name, case.lq, case.mode)]
    assert sum(ops.values()) <= limit, f"{sum(ops.values())} ops > {limit}: {ops.most_common(8)}"
    assert ops["aten::bmm"] + ops["aten::bmm.out"] + ops["aten::baddbmm.out"] > 0  # it did compute something
    assert ops["aten::triu_"] == 0, "the causal triangle is built in prepare_inputs, not in every call"


@pytest.mark.parametrize("name", TILED)
@pytest.mark.parametrize("case", LLM, ids=lambda c: c.id)
def test_a_call_never_waits_for_the_device(case: Case, name: str) -> None:
    ops = ops_per_call(name, case, CudaTiling(64 << 30))
    assert not set(ops) & HOST_SYNC, sorted(set(ops) & HOST_SYNC)


@pytest.mark.parametrize("name", TILED)
def test_a_fake_call_issues_the_ops_of_a_real_one(name: str) -> None:
    """Op for op, on a case small enough to compute here (4 query heads sharing 1 key head, E 16) that still has
    what the llm preset has: two 1024-row tiles of the CUDA plan, the causal band, GQA and a backward."""
    case = Case(lq=2048, lk=2048, e=16, dtype="bf16", causal=True, mode="fwd+bwd", heads_q=4, heads_kv=1)
    policy = CudaTiling(64 << 30)
    real = ops_per_call(name, case, policy, fake=False)
    assert ops_per_call(name, case, policy) == real
    one_tile = ops_per_call(name, dataclasses.replace(case, lq=1024, lk=1024), policy)
    assert sum(real.values()) > sum(one_tile.values())  # the second row tile issued ops of its own


class Chunked128Rows(CudaTiling):
    """chunked's CUDA tiles before this tiling: 128 query rows × 1024 keys."""

    CHUNKED_Q_TILE = (128, 128, 128)


@pytest.mark.parametrize("mode", ["fwd", "fwd+bwd"])
def test_the_limits_catch_chunked_with_128_row_tiles(mode: str) -> None:
    case = next(c for c in LLM if c.lq == 1024 and c.e == 128 and c.heads_kv < c.heads_q and c.mode == mode)
    ops = ops_per_call("chunked", case, Chunked128Rows(64 << 30))
    assert sum(ops.values()) > 3 * OP_LIMITS[("chunked", 1024, mode)]


# --- answers of the CUDA plan: lengths on both sides of its 1024-row tiles, masks that leave rows without keys -----
TILE = CudaTiling.FUSED_ROWS[1]
assert TILE == CudaTiling.CHUNKED_Q_TILE[1] == CudaTiling.CHUNKED_K_TILE[1]
COMBOS = [
    Combo(TILE + 1, TILE + 1, "none", True, True),
    Combo(TILE, TILE - 1, "none", False, True),
    Combo(2 * TILE + 52, TILE + 1, "ends", True, False),
    Combo(TILE - 1, 2 * TILE + 52, "alternate", False, True),
    Combo(TILE + 1, TILE, "padding", True, True),
    Combo(65, TILE + 1, "float-inf", True, False),
    Combo(TILE + 1, 63, "ends", False, True),
    Combo(1, TILE + 1, "padding", True, False),
]
DTYPES = [torch.float32, torch.bfloat16]


def inputs_of(combo: Combo, dtype: torch.dtype) -> tuple[dict, torch.Tensor]:
    args = combo.args(dtype)
    if combo.mask == "none":
        args["attn_mask"] = None
    grad_out = torch.randn(args["query"].shape[:-1] + (args["value"].shape[-1],),
                           generator=torch.Generator().manual_seed(7)).to(dtype)
    return args, grad_out


def run(name_or_fn, args: dict, grad_out: torch.Tensor, prepare: bool = True
        ) -> tuple[torch.Tensor, list[torch.Tensor], collections.Counter[str]]:
    """Output, dq, dk, dv of one call, and the aten ops of the prepared call (its preparation not counted)."""
    leaves = {n: args[n].detach().requires_grad_(True) for n in ("query", "key", "value")}
    impl = sdpa_impls.get(name_or_fn) if isinstance(name_or_fn, str) else name_or_fn
    fn = impl.prepare(**(args | leaves)) if prepare else functools.partial(impl, **(args | leaves))
    with OpCounter() as counter:
        out = fn()
        out.backward(grad_out)
    return out.detach(), [leaves[n].grad for n in ("query", "key", "value")], counter.ops


@functools.lru_cache(maxsize=None)
def expected(combo: Combo, dtype: torch.dtype) -> tuple[list[torch.Tensor], list[float]]:
    """fp64 output and gradients, and naive's errors in `dtype` against them."""
    args, grad_out = inputs_of(combo, dtype)
    out, grads, _ = run(reference, args, grad_out.double(), prepare=False)
    n_out, n_grads, _ = run("naive", args, grad_out)
    refs = [out, *grads]
    return refs, [max_abs_error(g, r) for g, r in zip([n_out, *n_grads], refs)]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("combo", COMBOS, ids=lambda c: c.name)
@pytest.mark.parametrize("name", TILED)
def test_the_cuda_plan_matches_fp64(name: str, combo: Combo, dtype: torch.dtype) -> None:
    args, grad_out = inputs_of(combo, dtype)
    refs, naive_errors = expected(combo, dtype)
    with cuda_tiling():
        out, grads, ops = run(name, args, grad_out)
    assert not set(ops) & HOST_SYNC, sorted(set(ops) & HOST_SYNC)
    for what, got, want, naive_err in zip(("out", "dq", "dk", "dv"), [out, *grads], refs, naive_errors):
        err, tol = max_abs_error(got, want), tolerance(naive_err, dtype, want)
        assert math.isfinite(err), f"{what}: NaN or inf where the fp64 reference is finite"
        assert err <= tol, f"{what}: max |error| {err:.3g} > {tol:.3g} (2 × naive's {naive_err:.3g} + floor)"


class SoftmaxFromCopy(CudaTiling):
    """The CUDA plan with fused's fp16 score tile copied into fp32 before the softmax (its choice before a GPU
    timed the other)."""

    SOFTMAX_FROM_HALF = False


@pytest.mark.parametrize("combo", [COMBOS[0], COMBOS[2], COMBOS[4], COMBOS[6]], ids=lambda c: c.name)
def test_fp16_softmax_from_the_half_tile_gives_the_same_answers(combo: Combo,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """fused's fp16 training forward with `SOFTMAX_FROM_HALF` (the causal band and the row max on the fp16 tile,
    softmax into fp32 P), the CUDA plan's choice, gives the output and gradients of copying the tile into fp32
    first bit for bit: adding 0 or -inf and taking a max round nothing, and the softmax sees the same values. fp16
    on the CPU is always widened to fp32 (`in_fp32`), so that is switched off here to reach the fp16 path CUDA
    takes. The forward needs the fp32 tile only where it keeps the lse, which it does where the backward's plan
    has a row across several key runs: these combos have none, so that plan is said to have one."""
    assert CudaTiling.SOFTMAX_FROM_HALF
    monkeypatch.setattr(fused, "in_fp32", lambda inp, keys: (False, ""))
    monkeypatch.setattr(tilemap.Plan, "multi_tile", lambda self: True)  # the forward keeps the lse
    args, grad_out = inputs_of(combo, torch.float16)
    with forced_tiling(SoftmaxFromCopy(64 << 30)):
        want = run("fused", args, grad_out)
    with forced_tiling(CudaTiling(64 << 30)):
        got = run("fused", args, grad_out)
    for what, g, w in zip(("out", "dq", "dk", "dv"), [got[0], *got[1]], [want[0], *want[1]]):
        assert torch.equal(g, w), f"{what}: max |diff| {(g.float() - w.float()).abs().max().item():.3g}"
    assert got[2]["aten::copy_"] < want[2]["aten::copy_"]  # the fp16 -> fp32 copy of each tile is gone
    refs, naive_errors = expected(combo, torch.float16)  # and both are right
    for what, g, r, naive_err in zip(("out", "dq", "dk", "dv"), [got[0], *got[1]], refs, naive_errors):
        assert max_abs_error(g, r) <= tolerance(naive_err, torch.float16, r), what


class OnePassDs(CudaTiling):
    """The CUDA plan with fused's dS through torch's softmax-backward kernel, as the CPU's plan computes it."""

    SOFTMAX_BACKWARD = True


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("combo", [COMBOS[0], COMBOS[2], COMBOS[3], COMBOS[7]], ids=lambda c: c.name)
def test_ds_in_one_softmax_backward_pass_agrees_with_three(combo: Combo, dtype: torch.dtype) -> None:
    """`SOFTMAX_BACKWARD`: dS = P ⊙ (dP − rowsum(P ⊙ dP)) by torch's kernel, written over the fp32 dP, against the
    product, row sum and addcmul: the same output, gradients that differ by fp32 rounding at most (then rounded to
    the input dtype), both within the fp64 tolerance; and the kernel is what ran."""
    args, grad_out = inputs_of(combo, dtype)
    with forced_tiling(CudaTiling(64 << 30)):
        want = run("fused", args, grad_out)
    with forced_tiling(OnePassDs(64 << 30)):
        got = run("fused", args, grad_out)
    assert torch.equal(got[0], want[0])  # the forward does not change
    for what, g, w in zip(("dq", "dk", "dv"), got[1], want[1]):
        scale = w.float().abs().max().item()
        assert (g.float() - w.float()).abs().max().item() <= scale * (1e-5 if dtype == torch.float32 else 2 ** -7), what
    assert got[2]["aten::_softmax_backward_data.out"] > 0 and got[2]["aten::addcmul_"] == 0
    assert want[2]["aten::_softmax_backward_data.out"] == 0 and want[2]["aten::addcmul_"] > 0
    refs, naive_errors = expected(combo, dtype)
    for what, g, r, naive_err in zip(("dq", "dk", "dv"), got[1], refs[1:], naive_errors[1:]):
        assert max_abs_error(g, r) <= tolerance(naive_err, dtype, r), what


# --- memory of the CUDA plan ---------------------------------------------------------------------------------------
def peak_of(name: str, case: Case, free_bytes: int) -> int:
    with cuda_tiling(free_bytes):
        inputs = make_inputs(case, "cpu")
        fn = inputs.prepare(sdpa_impls.get(name))
        return peak_memory(fn, "cpu")


def test_chunked_holds_at_most_an_eighth_of_naive_at_l4096() -> None:
    """bf16 causal forward at L 4096 with 4 heads instead of the llm preset's 32 (both grow linearly with the heads
    at this size: chunked's 1024 × 1024 tiles hold every head, naive's scores too) and E 16 instead of 128: what
    either holds is scores, whose size does not depend on E, and where the bf16 GEMM is emulated (1 GF/s on an
    AVX2-only EPYC) E 128 made this test take 28 s."""
    case = Case(lq=4096, lk=4096, e=16, dtype="bf16", causal=True, heads_q=4, heads_kv=4)
    naive, tiled = peak_of("naive", case, 64 << 30), peak_of("chunked", case, 64 << 30)
    assert tiled * 8 <= naive, f"chunked {tiled / MiB:.0f} MiB, naive {naive / MiB:.0f} MiB"


@pytest.mark.parametrize("name", TILED)
def test_one_call_stays_within_the_score_tile_budget(name: str) -> None:
    """With 1 GiB free the budget is 64 MiB: the score tiles of a call fit it, and the rest of what a bf16 forward
    holds at L 2048 with 32 heads is O(L): its output and one tile of outputs. On the CPU (not on CUDA, which casts
    inside the kernel) chunked's bf16 S - fp32 max makes a temporary fp32 copy of S: one more fp32 tile here. The
    budget binds: with 2 GiB free fused holds 131 MiB here (L 4096 took 13-16 s where the bf16 GEMM is emulated)."""
    e = 16  # the bound is on score tiles, which do not depend on E; a smaller E only makes this CPU's GEMMs shorter
    length = 2048
    case = Case(lq=length, lk=length, e=e, dtype="bf16", causal=True, heads_q=32, heads_kv=32)
    free = 1 << 30
    budget = CudaTiling(free).score_tile_bytes
    assert budget == 64 * MiB
    cpu_cast = 0
    if name == "chunked":
        with cuda_tiling(free):
            q_tile, k_tile = chunked.tile_size(CPU, 32)
        cpu_cast = 32 * q_tile * k_tile * 4
    out_bytes = 32 * length * e * 2
    peak = peak_of(name, case, free)
    assert peak <= budget + cpu_cast + 4 * out_bytes + MiB, f"{peak / MiB:.0f} MiB"
