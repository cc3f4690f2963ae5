"""One point = implementation × case: check against fp64, then time and count memory; never raises for a bad point.

Shared by pytest-benchmark, asv and the command line, so all three measure the same thing.
"""
from __future__ import annotations

import math
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace

import torch

from .grid import Case, Inputs, make_inputs
from .protocol import Unsupported
from .reference import max_abs_error, reference, tolerance
from .registry import get
from .timing import Timing, ceilings, peak_memory, roofline_pct, summarize, time_closure

BASELINE_IMPL = "naive"  # the error every other implementation is allowed twice of
SPEED_BASELINE = "torch_sdpa"  # speedups are reported against this one
GRAD_CHECK_MAX_SCORES = 1 << 27  # larger cases check the forward output only (fp64 autograd would not fit)


class WrongResult(AssertionError):
    """An implementation's output (or gradient) is further from the fp64 reference than the tolerance."""


@dataclass(frozen=True)
class Options:
    budget_s: float = 1.0
    min_reps: int = 5
    max_reps: int = 200
    warmup: int = 2
    flush_l2: bool = False
    cuda_graph: bool = False
    memory: bool = True


@dataclass(frozen=True)
class Result:
    """One measured (or skipped / failed / wrong) point. Times in seconds, memory in bytes."""

    impl: str
    case: Case
    device: str
    status: str  # "ok" | "skipped" | "failed" | "wrong"
    reason: str = ""
    median_s: float | None = None
    iqr_s: float | None = None
    samples: tuple[float, ...] = ()
    tflops: float | None = None
    gbps: float | None = None
    roofline_pct: float | None = None
    peak_memory_bytes: int | None = None
    max_error: float | None = None
    error_tolerance: float | None = None
    speedup_vs_torch_sdpa: float | None = None

    def as_dict(self) -> dict:
        d = asdict(self)
        d["case"] = self.case.as_dict()
        d["samples"] = list(self.samples)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Result:
        case = {k: v for k, v in d["case"].items() if k != "id"}
        return cls(**{**d, "case": Case(**case), "samples": tuple(d.get("samples", ()))})


@dataclass
class CaseContext:
    """Inputs, the fp64 reference and the naive baseline errors of one case, computed once for all implementations."""

    case: Case
    device: str
    inputs: Inputs
    ref_out: torch.Tensor
    ref_grads: tuple[torch.Tensor, ...] | None
    baseline: dict[str, float] = field(default_factory=dict)  # "out", "dq", "dk", "dv" -> naive's error

    @classmethod
    def build(cls, case: Case, device: str, seed: int = 0) -> CaseContext:
        inputs = make_inputs(case, device, seed)
        check_grads = case.mode != "fwd" and case.batch * case.heads_q * case.lq * case.lk <= GRAD_CHECK_MAX_SCORES
        q, k, v = (t.detach().requires_grad_(check_grads) for t in (inputs.query, inputs.key, inputs.value))
        ref = reference(q, k, v, inputs.attn_mask, is_causal=case.causal, enable_gqa=inputs.enable_gqa)
        grads = None
        if check_grads:
            grads = torch.autograd.grad(ref, (q, k, v), inputs.grad_out.double())
        ctx = cls(case, device, inputs, ref.detach(), grads)
        try:
            ctx.baseline = ctx.errors(get(BASELINE_IMPL))
        except Exception:  # naive may not fit (OOM): the tolerance falls back to the floor alone
            ctx.baseline = {}
        if device == "cuda":
            torch.cuda.empty_cache()
        return ctx

    def errors(self, impl) -> dict[str, float]:
        """Max |error| of the output (and of dq, dk, dv when checked) against fp64."""
        inp = self.inputs
        args = inp.args()
        if self.ref_grads is None:
            with torch.no_grad():
                return {"out": max_abs_error(impl(**args), self.ref_out)}
        q, k, v = (t.detach().requires_grad_(True) for t in (inp.query, inp.key, inp.value))
        out = impl(**(args | {"query": q, "key": k, "value": v}))
        grads = torch.autograd.grad(out, (q, k, v), inp.grad_out)
        errs = {"out": max_abs_error(out.detach(), self.ref_out)}
        for name, g, r in zip(("dq", "dk", "dv"), grads, self.ref_grads):
            errs[name] = max_abs_error(g, r)
        return errs

    def check(self, impl) -> tuple[float, float]:
        """(worst error, its tolerance); raises WrongResult when any checked tensor is out of tolerance."""
        errs = self.errors(impl)
        refs = {"out": self.ref_out}
        if self.ref_grads is not None:
            refs |= dict(zip(("dq", "dk", "dv"), self.ref_grads))
        dtype = self.case.torch_dtype
        worst = (0.0, 0.0, 0.0)  # (error / tolerance, error, tolerance)
        for name, err in errs.items():
            if not math.isfinite(err):  # a NaN or inf no tolerance excuses, even when naive's is not finite either
                raise WrongResult(f"{impl.name}: {name} holds NaN or inf where the fp64 reference is finite")
            tol = tolerance(self.baseline.get(name, 0.0), dtype, refs[name])
            if not err <= tol:
                raise WrongResult(f"{impl.name}: max |error| of {name} vs fp64 is {err:.3g} > tolerance {tol:.3g} "
                                  f"(2 × naive's {self.baseline.get(name, float('nan')):.3g} + floor)")
            worst = max(worst, (err / tol, err, tol))
        return worst[1], worst[2]


def mode_closure(impl, inputs: Inputs, mode: str) -> Callable[[], object]:
    """The zero-argument closure to time: forward, backward only (forward done outside), or both."""
    fwd = impl.prepare(**inputs.args())
    if mode == "fwd":
        return fwd
    leaves = (inputs.query, inputs.key, inputs.value)
    if mode == "fwd+bwd":
        return lambda: torch.autograd.grad(fwd(), leaves, inputs.grad_out)
    out = fwd()
    return lambda: torch.autograd.grad(out, leaves, inputs.grad_out, retain_graph=True)


def _timed_closure(impl_name: str, ctx: CaseContext) -> tuple[Result, Callable[[], object] | None]:
    """The point's Result so far and the closure to time; no closure when the point is decided (skipped, wrong,
    failed) before any timing. Never raises."""
    base = Result(impl=impl_name, case=ctx.case, device=ctx.device, status="ok")
    try:
        impl = get(impl_name)
        reasons = impl.unsupported_reasons(**ctx.inputs.args())
        if reasons:
            return replace(base, status="skipped", reason="; ".join(reasons)), None
        err, tol = ctx.check(impl)
        return replace(base, max_error=err, error_tolerance=tol), mode_closure(impl, ctx.inputs, ctx.case.mode)
    except Exception as exc:
        return _failed(base, exc), None


def _failed(base: Result, exc: Exception) -> Result:
    """What an exception during a point means, as a Result: one failing point never kills a sweep."""
    if isinstance(exc, Unsupported):
        return replace(base, status="skipped", reason="; ".join(exc.reasons))
    if isinstance(exc, WrongResult):
        return replace(base, status="wrong", reason=str(exc))
    if isinstance(exc, torch.OutOfMemoryError):
        return replace(base, status="failed", reason=f"out of memory: {str(exc).splitlines()[0]}")
    where = traceback.extract_tb(exc.__traceback__)[-1]
    return replace(base, status="failed",
                   reason=f"{type(exc).__name__}: {exc} (at {where.filename.split('/')[-1]}:{where.lineno})")


def _finished(base: Result, fn: Callable[[], object], timing: Timing, options: Options) -> Result:
    mem = peak_memory(fn, base.device) if options.memory else None
    return replace(base, peak_memory_bytes=mem, **derived_metrics(base.case, base.device, timing))


def _context_or_failures(case: Case, impl_names: list[str], device: str, seed: int) -> CaseContext | list[Result]:
    """The case's shared context, or one failed Result per implementation when the case cannot be prepared."""
    try:
        return CaseContext.build(case, device, seed)
    except Exception as exc:
        return [Result(impl=name, case=case, device=device, status="failed",
                       reason=f"could not prepare the case: {type(exc).__name__}: {exc}") for name in impl_names]


def run_point(impl_name: str, ctx: CaseContext, options: Options = Options()) -> Result:
    """Check, then time and measure one implementation on one case. Every failure becomes a Result."""
    base, fn = _timed_closure(impl_name, ctx)
    try:
        if fn is None:
            return base
        timing = time_closure(fn, ctx.device, budget_s=options.budget_s, min_reps=options.min_reps,
                              max_reps=options.max_reps, warmup=options.warmup, flush_l2=options.flush_l2,
                              cuda_graph=options.cuda_graph)
        return _finished(base, fn, timing, options)
    except Exception as exc:
        return _failed(base, exc)
    finally:
        if ctx.device == "cuda":
            torch.cuda.empty_cache()


def run_case_interleaved(case: Case, impl_names: list[str], device: str, options: Options = Options(),
                         seed: int = 0) -> list[Result]:
    """Every implementation on one case, timed in rounds of one call each (A B C, A B C, ...).

    For ratios between implementations on a shared machine: a slower period lasting seconds then lands on
    every implementation of the rounds it covers instead of on one implementation's whole measurement, and
    the median over rounds drops it. Rounds continue until `options.min_reps` rounds are done and every
    implementation has `options.budget_s` of samples, or `options.max_reps` rounds. Never raises.
    """
    ctx = _context_or_failures(case, impl_names, device, seed)
    if not isinstance(ctx, CaseContext):
        return ctx
    results: dict[str, Result] = {}
    live: dict[str, tuple[Result, Callable[[], object]]] = {}
    for name in impl_names:
        base, fn = _timed_closure(name, ctx)
        try:
            for _ in range(options.warmup if fn is not None else 0):
                fn()
        except Exception as exc:
            base, fn = _failed(base, exc), None
        if fn is None:
            results[name] = base
        else:
            live[name] = (base, fn)
    samples: dict[str, list[float]] = {name: [] for name in live}
    rounds = 0
    while live and rounds < options.max_reps and (
            rounds < options.min_reps or min(sum(samples[n]) for n in live) < options.budget_s):
        for name, (base, fn) in list(live.items()):
            try:
                samples[name] += time_closure(fn, device, budget_s=0.0, min_reps=1, max_reps=1, warmup=0).samples
            except Exception as exc:
                results[name] = _failed(base, exc)
                del live[name]
        rounds += 1
    for name, (base, fn) in live.items():
        try:
            results[name] = _finished(base, fn, summarize(samples[name]), options)
        except Exception as exc:
            results[name] = _failed(base, exc)
    if device == "cuda":
        torch.cuda.empty_cache()
    return [results[name] for name in impl_names]


def derived_metrics(case: Case, device: str, timing: Timing) -> dict:
    """Median/IQR plus TFLOP/s, GB/s of the minimal traffic and % of this machine's measured roofline."""
    ceil = ceilings(device, (f"gemm_flops_{case.dtype}", "copy_bytes_per_s"))
    t = timing.median
    return {"median_s": t, "iqr_s": timing.iqr, "samples": timing.samples,
            "tflops": case.flops() / t / 1e12 if t > 0 else None,
            "gbps": case.min_bytes() / t / 1e9 if t > 0 else None,
            "roofline_pct": roofline_pct(case.flops(), case.min_bytes(), t, case.dtype, ceil) if t > 0 else None}


def with_speedups(results: list[Result]) -> list[Result]:
    """Fill `speedup_vs_torch_sdpa` (torch_sdpa time / this time) for results of the same case and device."""
    base = {(r.case, r.device): r.median_s for r in results if r.impl == SPEED_BASELINE and r.status == "ok"}
    out = []
    for r in results:
        b = base.get((r.case, r.device))
        if r.status == "ok" and b and r.median_s:
            r = replace(r, speedup_vs_torch_sdpa=b / r.median_s)
        out.append(r)
    return out


def run_case(case: Case, impl_names: list[str], device: str, options: Options = Options(),
             seed: int = 0) -> Iterator[Result]:
    """Every implementation on one case, sharing one context; yields each result as soon as it exists."""
    ctx = _context_or_failures(case, impl_names, device, seed)
    if not isinstance(ctx, CaseContext):
        yield from ctx
        return
    for name in impl_names:
        yield run_point(name, ctx, options)


def is_finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)
