"""Every implementation against the float64 reference: outputs and gradients, under the flash-attention tolerance rule."""
from __future__ import annotations

import functools
import math
import zlib
from dataclasses import dataclass

import pytest
import torch

import sdpa_impls
from sdpa_impls import max_abs_error, reference, tolerance
from sdpa_impls.reference import naive_rounding, vetted_baseline
from sdpa_impls.impls._tiled.backward import tiled_backward
from sdpa_impls.impls._tiled.online_softmax import chunked_forward
from sdpa_impls.impls._tiled.tiles import grouped
from sdpa_impls.impls._tiled.tilemap import MaskTiles, Tiling
from sdpa_impls.impls.fused import KEY_BLOCK, fused_forward
from sdpa_impls.protocol import SDPAInputs

ALL_IMPLS = [sdpa_impls.get(n) for n in sdpa_impls.names()]
# Implementations that compile spend seconds per new shape: tests/test_compiled.py holds them to the same rule
# (check_against_fp64) on a few of these specs, so CI's time stays in budget.
IMPLS = [i for i in ALL_IMPLS if not getattr(i, "compiles", False)]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                   reason="no CUDA device on this machine"))]


@dataclass(frozen=True)
class Spec:
    name: str
    lq: int = 64
    lk: int | None = None
    e: int = 64
    ev: int | None = None
    b: int = 1
    hq: int = 2
    hkv: int | None = None
    causal: bool = False
    mask: str = "none"  # none | bool2d | bool4d | float_bcast | full_rows | bool1d | float3d
    scale: float | None = None
    score_std: float = 1.0  # std of the scaled scores
    grad: bool = False

    def make(self, dtype: torch.dtype, device: str) -> dict:
        return make_case(self, dtype, device)


SPECS = [
    Spec("L1", lq=1, grad=True),
    Spec("odd-E16", lq=37, e=16, grad=True),
    Spec("tiles-ragged", lq=300, lk=257, grad=True),
    Spec("L1100", lq=1100, b=1, hq=2),
    Spec("decode-Lq1", lq=1, lk=513, hq=4, hkv=2),
    Spec("Lq>Lk-causal", lq=200, lk=50, causal=True, grad=True),
    Spec("Lq<Lk-causal", lq=50, lk=200, causal=True),
    Spec("E128", lq=130, e=128),
    Spec("E256", lq=70, e=256),
    Spec("Ev!=E", lq=96, e=64, ev=32, grad=True),
    Spec("causal", lq=333, causal=True, grad=True),
    Spec("bool-broadcast", lq=150, lk=140, mask="bool2d", grad=True),
    Spec("bool-4d", lq=64, b=2, mask="bool4d"),
    Spec("float-broadcast", lq=100, mask="float_bcast", grad=True),
    Spec("mask+causal", lq=90, mask="bool2d", causal=True),
    Spec("gqa", lq=129, hq=8, hkv=2, grad=True),
    Spec("gqa-causal-mask", lq=77, hq=6, hkv=3, causal=True, mask="bool2d", grad=True),
    Spec("scale", lq=80, scale=0.3, grad=True),
    Spec("fully-masked-rows", lq=48, mask="full_rows", grad=True),
    Spec("scores-1e4", lq=64, e=16, score_std=3000.0),
    Spec("causal-Lq3-Lk799", lq=3, lk=799, causal=True, grad=True),  # row 0 attends to one key
    Spec("causal-Lk1", lq=146, lk=1, b=3, causal=True, grad=True),  # every row attends to one key
    Spec("mask-1d", lq=40, lk=70, mask="bool1d", grad=True),
    Spec("mask-3d-float", lq=40, lk=70, hq=3, mask="float3d", grad=True),
]


def make_case(spec: Spec, dtype: torch.dtype, device: str) -> dict:
    """Seeded inputs for a spec; the score scale is set through the std of Q and K."""
    gen = torch.Generator(device=device).manual_seed(zlib.crc32(spec.name.encode()))
    lk, ev, hkv = spec.lk or spec.lq, spec.ev or spec.e, spec.hkv or spec.hq
    sigma = math.sqrt(spec.score_std)

    def randn(*shape: int, std: float = 1.0) -> torch.Tensor:
        return (torch.randn(shape, generator=gen, device=device) * std).to(dtype)

    args = {"query": randn(spec.b, spec.hq, spec.lq, spec.e, std=sigma),
            "key": randn(spec.b, hkv, lk, spec.e, std=sigma),
            "value": randn(spec.b, hkv, lk, ev), "is_causal": spec.causal, "scale": spec.scale,
            "enable_gqa": hkv != spec.hq}
    if spec.scale is not None:  # keep the scaled scores of order 1
        args["query"] = args["query"] * (1.0 / math.sqrt(spec.e) / spec.scale)
    if spec.mask == "bool2d":
        args["attn_mask"] = torch.rand((spec.lq, lk), generator=gen, device=device) < 0.8
    elif spec.mask == "bool4d":
        args["attn_mask"] = torch.rand((spec.b, 1, spec.lq, lk), generator=gen, device=device) < 0.7
    elif spec.mask == "float_bcast":
        args["attn_mask"] = torch.randn((1, spec.hq, 1, lk), generator=gen, device=device).to(dtype)
    elif spec.mask == "bool1d":  # (Lk,): a key padding pattern shared by every query
        args["attn_mask"] = torch.rand((lk,), generator=gen, device=device) < 0.7
    elif spec.mask == "float3d":  # (Hq, 1, Lk): a per-head bias over the keys
        args["attn_mask"] = torch.randn((spec.hq, 1, lk), generator=gen, device=device).to(dtype)
    elif spec.mask == "full_rows":
        mask = torch.rand((spec.lq, lk), generator=gen, device=device) < 0.8
        mask[::7] = False  # every 7th query row sees no key at all
        args["attn_mask"] = mask
    return args


@pytest.fixture(scope="module")
def one_intra_op_thread():
    """For modules of many small cases: one intra-op thread is faster on them, and on a shared machine two
    threads spin-wait against other jobs for every small op (measured: 18 s instead of 120 s at load 3)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@functools.lru_cache(maxsize=8)
def inputs(case, dtype: torch.dtype, device: str) -> dict:
    """The call's keyword arguments for any frozen case with `make(dtype, device) -> kwargs` (never modified)."""
    return case.make(dtype, device)


@functools.lru_cache(maxsize=8)
def expected(case, dtype: torch.dtype, device: str):
    """(args, grad_out, fp64 output, fp64 grads or None, naive's errors) for any frozen case with
    `make(dtype, device) -> kwargs` and `grad` — shared by every implementation."""
    args = inputs(case, dtype, device)
    gen = torch.Generator(device=device).manual_seed(zlib.crc32(repr(case).encode()))  # not the global RNG
    grad_out = torch.randn(args["query"].shape[:-1] + (args["value"].shape[-1],), generator=gen,
                           device=device).to(dtype)
    ref, ref_grads = _run(reference, args, grad_out if case.grad else None)
    naive_errs = _errors(sdpa_impls.get("naive"), args, grad_out if case.grad else None, ref, ref_grads)
    names = ("out", "dq", "dk", "dv")[:len(naive_errs)]

    def rounded() -> float:  # the benchmarks' rule: naive's own error vetted (reference.vetted_baseline)
        with torch.no_grad():
            return max_abs_error(reference(**args, rounding=naive_rounding(dtype)), ref)
    vetted = vetted_baseline(dict(zip(names, naive_errs)), dict(zip(names, (ref, *(ref_grads or ())))), dtype,
                             rounded)
    return args, grad_out, ref, ref_grads, [vetted[n] for n in names]


def _run(fn, args: dict, grad_out: torch.Tensor | None):
    if grad_out is None:
        with torch.no_grad():
            return fn(**args), None
    leaves = {k: args[k].detach().clone().requires_grad_(True) for k in ("query", "key", "value")}
    out = fn(**(args | leaves))
    grads = torch.autograd.grad(out, tuple(leaves.values()), grad_out.to(out.dtype))
    return out.detach(), grads


def _errors(impl, args, grad_out, ref, ref_grads) -> list[float]:
    out, grads = _run(impl, args, grad_out)
    errs = [max_abs_error(out, ref)]
    if grads is not None:
        errs += [max_abs_error(g, r) for g, r in zip(grads, ref_grads)]
    return errs


def check_against_fp64(impl, case, dtype: torch.dtype, device: str = "cpu"):
    """The rule of this suite for one implementation on one case: skip with the implementation's own reasons;
    else the output (and dq, dk, dv when `case.grad`) has the inputs' shapes and dtype, holds no NaN or inf
    where fp64 is finite, and is within 2 × naive's error in the same dtype plus the floor. Returns (out, grads)."""
    asked = inputs(case, dtype, device)
    if case.grad:  # asked as it is called (`_run`): a reason can hang on the inputs requiring grad
        asked = asked | {k: asked[k].detach().requires_grad_(True) for k in ("query", "key", "value")}
    reasons = impl.unsupported_reasons(**asked)
    if reasons:
        pytest.skip("; ".join(reasons))
    args, grad_out, ref, ref_grads, naive_errs = expected(case, dtype, device)
    out, grads = _run(impl, args, grad_out if case.grad else None)
    assert out.shape == ref.shape and out.dtype == dtype
    checks = [("out", out, ref)]
    if grads is not None:
        for name, g, r, x in zip(("dq", "dk", "dv"), grads, ref_grads, (args["query"], args["key"], args["value"])):
            assert g.shape == x.shape and g.dtype == x.dtype, f"{name}: {g.shape} {g.dtype}"
            checks.append((name, g, r))
    for (name, got, want), naive_err in zip(checks, naive_errs):
        err, tol = max_abs_error(got, want), tolerance(naive_err, dtype, want)
        assert math.isfinite(err), f"{name}: NaN or inf where the fp64 reference is finite"
        assert err <= tol, f"{name}: max |error| {err:.3g} > {tol:.3g} (2 × naive's {naive_err:.3g} + floor)"
    return out, grads


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
@pytest.mark.parametrize("impl", IMPLS, ids=lambda i: i.name)
def test_matches_fp64_reference(impl, spec: Spec, dtype: torch.dtype, device: str) -> None:
    out, grads = check_against_fp64(impl, spec, dtype, device)
    if spec.mask == "full_rows":
        assert (out[..., ::7, :] == 0).all(), "a query row with every key masked must give zeros"
        if grads is not None:
            assert (grads[0][..., ::7, :] == 0).all(), "fully masked rows must get zero dq"


class _Returns:
    """A stand-in implementation that returns a fixed tensor (with gradients through a product with zero)."""

    name = "stand-in"

    def __init__(self, value: float) -> None:
        self.value = value

    def __call__(self, query, key, value, **_) -> torch.Tensor:
        return torch.full_like(query, self.value) + 0.0 * (query + key.sum() + value.sum())


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_measure_check_rejects_nan_even_when_naive_is_not_finite(bad: float) -> None:
    """NaN and inf are wrong outright: a non-finite naive error must not make the tolerance infinite."""
    from sdpa_impls.bench.check import CaseContext, WrongResult
    from sdpa_impls.bench.grid import Case

    ctx = CaseContext(Case(lq=8, lk=8, e=8, heads_q=1, heads_kv=1), "cpu")
    ref_out, ref_grads, baseline = ctx.expected()
    ctx._expected = (ref_out, ref_grads, {name: math.inf for name in baseline})  # as if naive had overflowed
    with pytest.raises(WrongResult, match="NaN or inf where the fp64 reference is finite"):
        ctx.check(_Returns(bad))
    assert tolerance(math.inf, torch.float32, ref_out) < 1  # a non-finite baseline excuses nothing


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_a_wrong_naive_is_wrong_itself_and_loosens_no_other_tolerance(monkeypatch, dtype: str) -> None:
    """naive is the error baseline, so a naive 5 % off must fail the rule itself, and the tolerance it hands the
    others must stay within 3 floors (2 × at most one floor, + the floor), not grow with its error."""
    from sdpa_impls.bench.check import CaseContext, WrongResult
    from sdpa_impls.bench.grid import Case
    from sdpa_impls.reference import ERROR_FLOOR

    naive = sdpa_impls.get("naive")
    right = naive.forward
    monkeypatch.setattr(naive, "forward", lambda inp: right(inp) * 1.05)
    case = Case(lq=128, lk=128, e=64, dtype=dtype, mode="fwd+bwd")
    ctx = CaseContext(case, "cpu")
    with pytest.raises(WrongResult, match=r"naive: max \|error\| of .* vs fp64 is"):
        ctx.check(naive)
    monkeypatch.setattr(naive, "forward", right)
    err, tol = ctx.check(sdpa_impls.get("chunked"))  # the baseline was measured with the wrong naive
    ref_out, ref_grads, _ = ctx.expected()
    magnitude = max(1.0, *(float(t.abs().max()) for t in (ref_out, *ref_grads)))
    assert err <= tol <= 3 * ERROR_FLOOR[case.torch_dtype] * magnitude, (err, tol)


def test_fp16_overflow_bound_keeps_the_usual_case_in_fp16() -> None:
    """On CUDA fused and chunked compute fp16 in fp32 only when the inputs could overflow fp16 (the bound is plain
    torch, so it is checked here); on CPU fp16 always runs in fp32, where it is also faster."""
    from sdpa_impls.impls._tiled.compute import fp16_in_fp32, fp16_may_overflow
    from sdpa_impls.protocol import SDPAInputs

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 64, 80, generator=gen).half() for _ in range(3))
    usual = SDPAInputs(q, k, v)
    assert not fp16_may_overflow(usual, 1) and not fp16_may_overflow(usual, 1024)
    big = torch.full_like(q, 256.0)
    assert fp16_may_overflow(SDPAInputs(big, big, v), 1)  # scores near 6e5: past fp16
    assert fp16_may_overflow(SDPAInputs(q, k, v * 40), 1024)  # 1024 keys of |v| ~ 160 summed: past 32752
    assert fp16_may_overflow(SDPAInputs(q, k, v, attn_mask=torch.full((64, 64), 4e4)), 1)  # a huge float bias
    assert fp16_in_fp32(usual, 1) is True  # CPU: always fp32
    assert fp16_in_fp32(SDPAInputs(q.float(), k.float(), v.float()), 1) is False  # only fp16 is widened


SMALL_GRAD_SPECS = [s for s in SPECS if s.grad and s.lq <= 256]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("spec", SMALL_GRAD_SPECS, ids=lambda s: s.name)
def test_fused_backward_from_its_saved_p_equals_the_recomputing_one(spec: Spec, dtype: torch.dtype,
                                                                     one_intra_op_thread) -> None:
    """fused hands its backward the forward's P when one score tile holds every head and row (these cases, at
    most 256 rows: the row cap of a CPU tile); otherwise the backward recomputes P from the log-sum-exp. On the
    same inputs both must meet the fp64 rule, fully masked rows included."""
    args, grad_out, _, ref_grads, naive_errs = expected(spec, dtype, "cpu")
    inp = SDPAInputs(args["query"], args["key"], args["value"], args.get("attn_mask"), 0.0, spec.causal,
                     args["scale"], True)
    q5, k4, v4, mask5 = grouped(inp)
    scale, lq, lk = inp.softmax_scale, q5.shape[-2], k4.shape[-2]
    tiles = MaskTiles.of(inp)
    out5, lse, p5 = fused_forward(q5, k4, v4, mask5, spec.causal, scale, True, tiles)
    assert lse is None and p5 is not None and p5.dtype == dtype, "a single tile: P is kept instead of the lse"
    _, lse, _ = chunked_forward(q5, k4, v4, mask5, spec.causal, scale, True, q_tile=32, k_tile=32, tiles=tiles)
    dout5 = grad_out.unflatten(1, q5.shape[1:3])
    saved = tiled_backward(q5, k4, v4, mask5, spec.causal, scale, out5, None, p5, dout5,
                           Tiling(lq, lk, KEY_BLOCK, True), tiles)
    recomputed = tiled_backward(q5, k4, v4, mask5, spec.causal, scale, out5, lse, None, dout5,
                                Tiling(32, lk, KEY_BLOCK, True), tiles)
    for way, grads in (("saved P", saved), ("recomputed P", recomputed)):
        dq, dk, dv = grads[0].flatten(1, 2), grads[1].to(dtype), grads[2].to(dtype)
        for name, got, want, naive_err in zip(("dq", "dk", "dv"), (dq, dk, dv), ref_grads, naive_errs[1:]):
            err, tol = max_abs_error(got, want), tolerance(naive_err, dtype, want)
            assert err <= tol, f"{way}, {name}: max |error| {err:.3g} > {tol:.3g}"
        if spec.mask == "full_rows":
            assert (dq[..., ::7, :] == 0).all(), f"{way}: fully masked rows must get zero dq"


def test_fused_recomputes_p_when_one_tile_cannot_hold_it() -> None:
    """Past a CPU tile's 256 rows the forward returns each row's max and log-sum, so the backward's memory stays
    O(L)."""
    q = torch.randn(1, 1, 1024, 16)
    inp = SDPAInputs(q, q, q)
    q5, k4, v4, _ = grouped(inp)
    out5, lse, p5 = fused_forward(q5, k4, v4, None, False, 0.25, True, MaskTiles.of(inp))
    assert p5 is None and lse is not None and lse.shape == (1, 1, 1, 1024, 2)  # each row's max and log-sum
