"""One point = implementation × case: reasons, the check against fp64, then time and memory; never raises.

`prepare_point` (reasons → check → the closure to time) is the one sequence pytest-benchmark, asv and the
command line share, so all three measure the same thing.
"""
from __future__ import annotations

import random
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import torch

from . import allocator, contention
from ..protocol import Unsupported
from ..registry import get
from .check import CaseContext, WrongResult, no_device
from ..compilation import Recompiled, compile_once
from .fits import ensure_fits, point_bytes
from .grid import Case
from .inputs import Inputs
from .kernels import DispatchMismatch, check_pinned, profile_call
from .memory import peak_memory
from .result import Result
from .clocks import ClockLog, sm_clock
from .devicetime import EAGER, GRAPH, HOST, HOST_REASON, DeviceTiming, device_timing, graph_sampler
from .timing import MIN_SAMPLE_S, Sampler, Timing, call_context, same_context, summarize, time_closure


@dataclass(frozen=True)
class Options:
    budget_s: float = 1.0
    min_reps: int = 5
    max_reps: int = 200
    warmup: int = 2
    flush_l2: bool = False
    cuda_graph: bool = False
    memory: bool = True
    min_sample_s: float = MIN_SAMPLE_S

    def sampler(self, fn: Callable[[], object], device: str, warmup: bool = True, log: ClockLog | None = None
                ) -> Sampler:
        """`fn` ready to sample under every one of these options (and, on CUDA, the SM clock's throttle rule)."""
        return Sampler(fn, device, warmup=self.warmup if warmup else 0, flush_l2=self.flush_l2,
                       cuda_graph=self.cuda_graph, min_sample_s=self.min_sample_s, clock=sm_clock(device)[0], log=log)


@dataclass(frozen=True)
class PreparedPoint:
    """A point that passed its check: the closure to time, the check's worst error and its tolerance, and what
    the closure ran (None, None and () where an earlier process already checked and profiled it)."""

    fn: Callable[[], object]
    max_error: float | None
    error_tolerance: float | None
    kernels: tuple[str, ...] = ()  # what one profiled call ran: CUDA kernels, or aten ops on CPU; longest first
    compile_s: float | None = None  # the first call of a closure that compiles (compilation.compile_once)
    op: str = ""  # the library's own name for what the closure runs, where it says (its `op` attribute)


class BackwardOnly:
    """The backward-only closure: the forward output is built once, outside the timed calls. `rebuild()` builds
    it again on the current stream (a CUDA graph capture calls it on the capture stream: autograd launches
    each backward kernel on the stream its forward ran on)."""

    def __init__(self, fwd: Callable[[], torch.Tensor], leaves: tuple[torch.Tensor, ...], grad_out: torch.Tensor):
        self.fwd, self.leaves, self.grad_out = fwd, leaves, grad_out
        same_context(self, fwd)
        # a forward that compiles is compiled here, outside the recompile guard that `rebuild` runs under (the
        # guard refuses a first compile too); compile_once adds these seconds to the backward's own
        self.compile_s_before = compile_once(fwd, grad_out.device)
        self.rebuild()

    def rebuild(self) -> None:
        # The old output goes first. Its graph holds the leaves' gradient accumulators, and a forward built while
        # it lives reuses them, with the stream each was made on. On CUDA the accumulators would then stay on
        # the stream of the first build (the default one), and autograd would sync that stream with the capture
        # stream: a stream that is not capturing cannot wait on one that is, so the capture fails.
        self.out = None
        with call_context(self.fwd):
            self.out = self.fwd()

    def __call__(self) -> tuple[torch.Tensor, ...]:
        if self.compile_s_before is None:
            return torch.autograd.grad(self.out, self.leaves, self.grad_out, retain_graph=True)
        # A compiled forward's backward may be built to free ("donate") the tensors it saved; called again on the
        # same graph (retain_graph) it then refuses to run (seen with torch 2.11 on CUDA) unless donation is off
        # while it runs: torch 2.13 checks on every backward, so the setting is turned off around each call (two
        # attribute writes). With the graph kept, AOTAutograd builds a backward that keeps them, so what is timed
        # is the backward a user who retains the graph gets.
        config = torch._functorch.config
        donated, config.donated_buffer = config.donated_buffer, False
        try:
            return torch.autograd.grad(self.out, self.leaves, self.grad_out, retain_graph=True)
        finally:
            config.donated_buffer = donated


def mode_closure(impl, inputs: Inputs, mode: str) -> Callable[[], object]:
    """The zero-argument closure to time: forward, backward only (forward done outside), or both. It declares
    the implementation's call context (see `timing.call_context`) and the `op` it runs as its own."""
    fwd = inputs.prepare(impl)
    if mode == "fwd":
        return fwd
    leaves = (inputs.query, inputs.key, inputs.value)
    if mode == "fwd+bwd":
        fn = same_context(lambda: torch.autograd.grad(fwd(), leaves, inputs.grad_out), fwd)
    else:
        fn = BackwardOnly(fwd, leaves, inputs.grad_out)
    if getattr(fwd, "op", ""):
        fn.op = fwd.op  # type: ignore[attr-defined]
    return fn


def prepare_point(impl_name: str, ctx: CaseContext, check: bool = True) -> PreparedPoint:
    """Reasons first (Unsupported, cheap: no reference yet), then whether it fits in memory (Unsupported), then the
    closure to time, compiled once when it declares compilation (`compile_s`: before the check, whose own call
    would otherwise compile it unseen), then the check against fp64 (WrongResult; Unsupported when the reference
    does not fit), then one profiled call outside any timed region (what it ran; DispatchMismatch when a pinned
    backend ran another backend's kernel). Raises; the callers decide what a skip or a failure means to them.

    `check=False` leaves out the check and the profiled call: only for a process that repeats the very points an
    earlier process of the same code, environment and inputs checked (the later rounds of `continuous`).

    The first call in a process fixes glibc's allocator thresholds (bench.allocator), before anything is timed."""
    allocator.fix()
    impl = get(impl_name)
    reasons = ctx.inputs.reasons(impl)  # with the mask's structure, as the closure will be prepared
    if reasons:
        raise Unsupported(impl.name, reasons)
    ensure_fits(impl.name, point_bytes(impl.name, ctx.case), ctx.device)  # a skip, never an out-of-memory
    fn = mode_closure(impl, ctx.inputs, ctx.case.mode)
    compile_s = compile_once(fn, ctx.device)
    if not check:
        return PreparedPoint(fn, None, None, (), compile_s, str(getattr(fn, "op", "") or ""))
    err, tol = ctx.check(impl)
    prof = profile_call(fn, ctx.device)  # a closure that compiles runs here where a recompile raises Recompiled
    check_pinned(impl, prof)  # DispatchMismatch: a pinned backend that ran another backend's kernel
    return PreparedPoint(fn, err, tol, prof.kernels, compile_s, str(getattr(fn, "op", "") or ""))


# what one point may raise and still leave the sweep going: any error, and a SystemExit of an implementation's own
# (a plug-in calling sys.exit; it ended the whole sweep, with no report); an interrupt still stops the sweep
POINT_ERRORS = (Exception, SystemExit)


def failed(base: Result, exc: BaseException) -> Result:
    """What an exception during a point means, as a Result: one failing point never kills a sweep."""
    if isinstance(exc, Unsupported):
        return replace(base, status="skipped", reason="; ".join(exc.reasons))
    if isinstance(exc, WrongResult):
        return replace(base, status="wrong", reason=str(exc), max_error=exc.error, error_tolerance=exc.tolerance)
    if isinstance(exc, (DispatchMismatch, Recompiled)):
        return replace(base, status="failed", reason=f"{base.impl}: {exc}")
    if isinstance(exc, torch.OutOfMemoryError):
        return replace(base, status="failed", reason=f"out of memory: {str(exc).splitlines()[0]}")
    where = traceback.extract_tb(exc.__traceback__)[-1]
    return replace(base, status="failed",
                   reason=f"{type(exc).__name__}: {exc} (at {where.filename.split('/')[-1]}:{where.lineno})")


def _prepared(impl_name: str, ctx: CaseContext) -> tuple[Result, Callable[[], object] | None]:
    """The point's Result so far and the closure to time; no closure when the point is decided (skipped, wrong,
    failed) before any timing. Never raises."""
    base = Result(impl=impl_name, case=ctx.case, device=ctx.device, status="ok")
    try:
        point = prepare_point(impl_name, ctx)
    except POINT_ERRORS as exc:
        return failed(base, exc), None
    finally:
        ctx.settle()  # its first calls made: the inputs compared with their copies, which go before any timing
    return replace(base, max_error=point.max_error, error_tolerance=point.error_tolerance,
                   kernels=point.kernels, compile_s=point.compile_s, op=point.op), point.fn


def _finished(base: Result, fn: Callable[[], object], timing: Timing, device: DeviceTiming, log: ClockLog,
              options: Options) -> Result:
    with call_context(fn):
        mem = peak_memory(fn, base.device) if options.memory else None
    clocks = log.summary() if base.device == "cuda" else None
    return replace(base.timed(timing, device), peak_memory_bytes=mem, clocks=clocks)


def _device_timing(fn: Callable[[], object], device: str, options: Options, log: ClockLog) -> DeviceTiming:
    """The point's device time (`devicetime.device_timing`) with the same budget as its eager time; with
    `--cuda-graph` the eager samples already are graph replays, so they are the device time."""
    if options.cuda_graph:
        return DeviceTiming(EAGER, "the eager samples are CUDA-graph replays already (--cuda-graph)")
    return device_timing(fn, device, budget_s=options.budget_s, min_reps=options.min_reps, max_reps=options.max_reps,
                         min_sample_s=options.min_sample_s, clock=sm_clock(device)[0], log=log)


def _context_or_failures(case: Case, impl_names: list[str], device: str, seed: int) -> CaseContext | list[Result]:
    """The case's shared context, or one failed Result per implementation when its inputs cannot be made (skipped,
    with the one reason, where the device is CUDA and this torch has none)."""
    why = no_device(device)
    if why:
        return [Result(impl=name, case=case, device=device, status="skipped", reason=why) for name in impl_names]
    try:
        return CaseContext(case, device, seed)
    except POINT_ERRORS as exc:
        return [Result(impl=name, case=case, device=device, status="failed",
                       reason=f"could not prepare the case: {type(exc).__name__}: {exc}") for name in impl_names]


def run_point(impl_name: str, ctx: CaseContext, options: Options = Options()) -> Result:
    """Check, then time and measure one implementation on one case. Every failure becomes a Result."""
    ctx.mark(contents=True)
    return ctx.kept(_run_point(impl_name, ctx, options))


def _run_point(impl_name: str, ctx: CaseContext, options: Options) -> Result:
    base, fn = _prepared(impl_name, ctx)
    try:
        if fn is None:
            return base
        log = ClockLog()
        before = contention.snapshot()
        timing = time_closure(fn, ctx.device, budget_s=options.budget_s, min_reps=options.min_reps,
                              max_reps=options.max_reps, warmup=options.warmup, flush_l2=options.flush_l2,
                              cuda_graph=options.cuda_graph, min_sample_s=options.min_sample_s,
                              clock=sm_clock(ctx.device)[0], log=log)
        other = contention.other_cpus(before)
        result = _finished(base, fn, timing, _device_timing(fn, ctx.device, options, log), log, options)
        return replace(result, other_cpus=other)
    except POINT_ERRORS as exc:
        return failed(base, exc)
    finally:
        if ctx.device == "cuda":
            torch.cuda.empty_cache()


def run_case(case: Case, impl_names: list[str], device: str, options: Options = Options(),
             seed: int = 0) -> Iterator[Result]:
    """Every implementation on one case, sharing one context; yields each result as soon as it exists."""
    ctx = _context_or_failures(case, impl_names, device, seed)
    if not isinstance(ctx, CaseContext):
        yield from ctx
        return
    for name in impl_names:
        yield run_point(name, ctx, options)


def _interleaved_graph(fn: Callable[[], object], device: str, options: Options, log: ClockLog
                       ) -> tuple[Sampler | None, DeviceTiming]:
    """For interleaved rounds: a sampler of `fn`'s graph replays (None off CUDA, with --cuda-graph, or where it
    cannot be captured) and the device timing to report when there is none."""
    if torch.device(device).type != "cuda":
        return None, DeviceTiming(HOST, HOST_REASON)
    if options.cuda_graph:
        return None, _device_timing(fn, device, options, log)
    graph, reason = graph_sampler(fn, device, options.min_sample_s, sm_clock(device)[0], log)
    return graph, DeviceTiming(EAGER, reason)


def run_case_interleaved(case: Case, impl_names: list[str], device: str, options: Options = Options(),
                         seed: int = 0, after_round: Callable[[], object] | None = None) -> list[Result]:
    """Every implementation on one case, timed in rounds of one sample each, in an order shuffled anew each round
    (seeded by `seed`): a call runs a few percent slower right after a larger one (2-4 % after torch's fp32 SDPA at
    L 4096 on the 2-vCPU EPYC), and in a fixed order (or one turned by one place, which keeps who follows whom) that
    would always fall on the same implementation.

    For ratios between implementations on a shared machine: a slower period lasting seconds then lands on
    every implementation of the rounds it covers instead of on one implementation's whole measurement, and
    the median over rounds drops it. Rounds continue until `options.min_reps` rounds are done and every
    implementation has `options.budget_s` of samples, or `options.max_reps` rounds. `after_round` runs after
    each round (e.g. one sample of a ceiling, interleaved with the cases). Never raises.
    """
    ctx = _context_or_failures(case, impl_names, device, seed)
    if not isinstance(ctx, CaseContext):
        return ctx
    results: dict[str, Result] = {}
    live: dict[str, tuple[Result, Callable[[], object], Sampler, Sampler | None, DeviceTiming]] = {}
    for name in impl_names:  # every option of `options` applies, as in run_point
        ctx.mark(contents=True)
        base, fn = _prepared(name, ctx)
        if fn is None or any(ctx.changed()):
            results[name] = ctx.kept(base)
            continue
        try:
            eager = options.sampler(fn, device, log=ClockLog())
            graph, how = _interleaved_graph(fn, device, options, eager.log)
            live[name] = (base, fn, eager, graph, how)
        except POINT_ERRORS as exc:
            results[name] = failed(base, exc)
    samples: dict[str, list[float]] = {name: [] for name in live}
    graph_samples: dict[str, list[float]] = {name: [] for name in live}
    rounds, before, order = 0, contention.snapshot(), random.Random(seed)
    while live and rounds < options.max_reps and (rounds < options.min_reps or min(
            sum(samples[n]) * live[n][2].calls for n in live) < options.budget_s):
        for name, (base, fn, sampler, graph, _) in order.sample(list(live.items()), len(live)):
            ctx.mark()
            try:
                samples[name].append(sampler.sample())
                if graph is not None:  # the device time in the same round, right after the eager sample
                    graph_samples[name].append(graph.sample())
            except POINT_ERRORS as exc:
                results[name] = failed(base, exc)
            if name not in results and any(ctx.changed()):
                results[name] = ctx.kept(base)
            if name in results:
                del live[name]
        rounds += 1
        if after_round is not None and live:
            after_round()
    other = contention.other_cpus(before)  # over every implementation's rounds: they shared the machine's state
    for name, (base, fn, sampler, graph, how) in live.items():
        try:
            if graph is not None:
                how = DeviceTiming(GRAPH, "", summarize(graph_samples[name], graph.calls))
            results[name] = replace(_finished(base, fn, summarize(samples[name], sampler.calls), how, sampler.log,
                                              options), other_cpus=other)
        except POINT_ERRORS as exc:
            results[name] = failed(base, exc)
    if device == "cuda":
        torch.cuda.empty_cache()
    return [results[name] for name in impl_names]
