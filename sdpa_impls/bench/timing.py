"""Clocks and the repetition loop, for CPU and CUDA: what one timed sample is.

One sample, in every front end (the command line, pytest-benchmark, asv): `n` back-to-back calls between two
readings of one clock (CUDA events on the GPU, `time.perf_counter` on the CPU), divided by `n`, where `n` is
the smallest count that makes a sample last at least `MIN_SAMPLE_S` (`calls_per_sample`). The device is idle
when a sample starts; the launch of its first call is then spread over `n` calls instead of adding to each.
With an L2 flush every call must start cold, so a sample is one call.
"""
from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..compilation import compiles, no_recompile
from .clocks import ClockLog, SMClock, steady_sample

MIN_SAMPLE_S = 1e-3  # the least duration of one sample: n back-to-back calls
MAX_CALLS_PER_SAMPLE = 10_000
CONFIRM_BELOW = 20  # a reading under this many minimum samples is read twice (calibrate): at most 20 ms more a point


@dataclass(frozen=True)
class Timing:
    """Seconds per call: median and inter-quartile range over `samples` (each the mean of `calls_per_sample`
    back-to-back calls)."""

    median: float
    iqr: float
    samples: tuple[float, ...]
    calls_per_sample: int = 1


def summarize(samples: list[float], calls_per_sample: int = 1) -> Timing:
    if len(samples) >= 4:
        q1, _, q3 = statistics.quantiles(samples, n=4)
    else:
        q1 = q3 = statistics.median(samples)
    return Timing(statistics.median(samples), q3 - q1, tuple(samples), calls_per_sample)


def synchronize(device: torch.device | str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def call_context(fn: Callable[[], object]) -> contextlib.AbstractContextManager:
    """The context a prepared closure's calls must run in (e.g. a pinned SDPA backend), to enter once around
    many calls and outside every timed region; a closure declares it as a `context` attribute. A closure that
    compiles (`compilation.compiles`) also runs where a recompile raises `compilation.Recompiled`: call
    `compilation.compile_once` on it first."""
    context = getattr(fn, "context", None)
    if not compiles(fn):
        return context() if context is not None else contextlib.nullcontext()
    stack = contextlib.ExitStack()
    if context is not None:
        stack.enter_context(context())
    stack.enter_context(no_recompile())
    return stack


def same_context(wrapper: Callable[[], object], inner: Callable[[], object]) -> Callable[[], object]:
    """`wrapper` (a closure that calls `inner`) declaring `inner`'s context, and its compilation, as its own."""
    if getattr(inner, "context", None) is not None:
        wrapper.context = inner.context  # type: ignore[attr-defined]
    if compiles(inner):
        wrapper.compiles = True  # type: ignore[attr-defined]
    return wrapper


class CudaEventClock:
    """A clock that reads GPU time: each reading records an event on the current stream and waits for it.

    The difference of two readings is the GPU time of the work launched between them, so it can stand in
    for a host timer (pytest-benchmark's `timer`, asv's `timer`). Each reading adds the float32 milliseconds
    between this event and the previous one to a float64 total: precise to about a microsecond however long
    the run (an `elapsed_time` from the first event would lose ~62 µs of resolution after 10 minutes).
    """

    __name__ = "cuda_event_clock"  # pytest-benchmark names a timer by module + __name__

    def __init__(self) -> None:
        self._last: torch.cuda.Event | None = None
        self._total_s = 0.0

    def __call__(self) -> float:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        event.synchronize()
        if self._last is not None:
            self._total_s += self._last.elapsed_time(event) / 1e3
        self._last = event
        return self._total_s

    def __repr__(self) -> str:
        return f"{__name__}.{self.__name__}"

    __str__ = __repr__


cuda_event_clock = CudaEventClock()  # for `pytest --benchmark-timer sdpa_impls.bench.timing.cuda_event_clock`


def _l2_flusher(device: torch.device) -> Callable[[], None]:
    """Overwrite a buffer twice the L2 size so the next repetition starts with a cold cache."""
    props = torch.cuda.get_device_properties(device)
    buf = torch.empty(2 * max(getattr(props, "L2_cache_size", 0), 64 << 20), dtype=torch.uint8, device=device)
    return lambda: buf.zero_()


def one_sample(fn: Callable[[], object], device: torch.device | str, calls: int = 1,
               before: Callable[[], None] | None = None) -> float:
    """Seconds per call of `calls` back-to-back calls of `fn` (GPU time between two events on CUDA);
    `before` runs untimed first (e.g. an L2 flush)."""
    device = torch.device(device)
    if device.type != "cuda":
        if before is not None:
            before()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - start) / calls
    torch.cuda.synchronize(device)
    if before is not None:
        before()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / calls


def calls_per_sample(fn: Callable[[], object], device: torch.device | str, min_sample_s: float = MIN_SAMPLE_S,
                     flush_l2: bool = False) -> int:
    """The fewest back-to-back calls of `fn` whose sample lasts `min_sample_s` (1 with an L2 flush: every call
    starts cold). Calls `fn` a few times; call it after warm-up."""
    if flush_l2 or min_sample_s <= 0:
        return 1
    return calibrate(fn, device, min_sample_s)[0]


def calibrate(fn: Callable[[], object], device: torch.device | str, min_sample_s: float = MIN_SAMPLE_S
              ) -> tuple[int, float]:
    """(calls_per_sample's answer, the seconds of one sample of that many calls, as last measured): what a
    benchmark needs to size its rounds, without timing one more sample. Call it after warm-up.

    A short reading that reaches the minimum is read again and the faster one kept: a call held up once (a thread
    descheduled for a scheduler tick, 4 ms at 250 Hz, on a busy CPU) would otherwise fix one call per sample for
    the whole point, and its samples of a sub-millisecond call would be as noisy as single calls."""
    calls = 1
    while True:
        per_call = one_sample(fn, device, calls)
        if min_sample_s <= per_call * calls < CONFIRM_BELOW * min_sample_s and calls < MAX_CALLS_PER_SAMPLE:
            per_call = min(per_call, one_sample(fn, device, calls))
        if per_call * calls >= min_sample_s or calls >= MAX_CALLS_PER_SAMPLE:
            return calls, per_call * calls
        calls = min(MAX_CALLS_PER_SAMPLE, max(2 * calls, math.ceil(1.2 * min_sample_s / max(per_call, 1e-9))))


def round_sample(fn: Callable[[], object], device: torch.device | str, max_time: float, least: int
                 ) -> tuple[int, float]:
    """(calls per sample, the seconds of one sample) for a benchmark that sizes its rounds from them (pytest-benchmark's
    rounds = max_time / sample, at least `least`): calibrate's, its reading read again for at most a fifth of what
    the rounds would take on it. One call held up once would otherwise size every round: a 1 ms call read as 70 ms
    on a busy CPU left 14 rounds of a 1 s budget instead of hundreds; and where that reading had fixed one call per
    sample for a call shorter than the minimum sample, calibration is done again."""
    calls, sample_s = calibrate(fn, device)
    confirmed = confirmed_sample_s(fn, device, calls, sample_s, max(max_time, least * sample_s) / 5)
    if confirmed < MIN_SAMPLE_S <= sample_s and calls < MAX_CALLS_PER_SAMPLE:
        return calibrate(fn, device)
    return calls, confirmed


def confirmed_sample_s(fn: Callable[[], object], device: torch.device | str, calls: int, sample_s: float,
                       spare_s: float) -> float:
    """`sample_s`, one reading of `calls` calls, or a faster one of up to two more readings, taken while their seconds
    stay within `spare_s`."""
    spent = 0.0
    for _ in range(2):
        if spent + sample_s > spare_s:
            break
        again = one_sample(fn, device, calls) * calls
        spent += again
        sample_s = min(sample_s, again)
    return sample_s


def _graph_replay(fn: Callable[[], object], device: torch.device) -> Callable[[], object]:
    """Capture one call of `fn` into a CUDA graph on a side stream; its replay. A closure with a `rebuild`
    method (backward only: it holds a forward output) rebuilds that output on the capture stream first, so
    autograd launches the backward kernels on the stream being captured."""
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        rebuild = getattr(fn, "rebuild", None)
        if rebuild is not None:
            rebuild()
        for _ in range(3):  # warm the side stream before capture, as torch.cuda.graphs recommends
            fn()
    torch.cuda.current_stream(device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        fn()
    return graph.replay


class Sampler:
    """`fn` made ready to sample, inside its `call_context`: warmed up, captured into a CUDA graph (`cuda_graph`),
    with an L2 flush before each sample (`flush_l2`) and its calls per sample chosen. Both options need CUDA:
    asking for them elsewhere is a ValueError. With an SM `clock`, a sample taken while the GPU was throttled is
    taken again (`clocks.steady_sample`), and `log` (one per point) keeps the clocks and the discards."""

    def __init__(self, fn: Callable[[], object], device: torch.device | str, *, warmup: int = 2,
                 flush_l2: bool = False, cuda_graph: bool = False, min_sample_s: float = MIN_SAMPLE_S,
                 clock: SMClock | None = None, log: ClockLog | None = None) -> None:
        self.device = torch.device(device)
        if self.device.type != "cuda" and (flush_l2 or cuda_graph):
            raise ValueError(f"{'flush_l2' if flush_l2 else 'cuda_graph'} needs a CUDA device; this point runs "
                             f"on {self.device.type}")
        self.closure = fn
        self.clock, self.log = clock, log if log is not None else ClockLog()
        with call_context(fn):
            for _ in range(warmup):
                fn()
            synchronize(self.device)
            self.fn = _graph_replay(fn, self.device) if cuda_graph else fn
            self.flush = _l2_flusher(self.device) if flush_l2 else None
            self.calls = calls_per_sample(self.fn, self.device, min_sample_s, flush_l2)

    def sample(self) -> float:
        """One sample (seconds per call), its context entered and left around it, outside the timed region."""
        with call_context(self.closure):
            return self.take()

    def take(self) -> float:
        """One sample inside a context already entered (the loop of `sample_for`)."""
        return steady_sample(lambda: one_sample(self.fn, self.device, self.calls, self.flush), self.clock, self.log)


def sample_for(sampler: Sampler, budget_s: float, min_reps: int, max_reps: int) -> Timing:
    """Samples until `budget_s` of measured time is spent (at least `min_reps`, at most `max_reps`); call it inside
    the closure's `call_context`."""
    samples: list[float] = []
    while len(samples) < max_reps and (len(samples) < min_reps or sum(samples) * sampler.calls < budget_s):
        samples.append(sampler.take())
    return summarize(samples, sampler.calls)


def time_closure(fn: Callable[[], object], device: torch.device | str, *, budget_s: float = 1.0,
                 min_reps: int = 5, max_reps: int = 200, warmup: int = 2, flush_l2: bool = False,
                 cuda_graph: bool = False, min_sample_s: float = MIN_SAMPLE_S, clock: SMClock | None = None,
                 log: ClockLog | None = None) -> Timing:
    """Time `fn` after `warmup` calls, inside its `call_context`: samples as the module docstring defines them.

    Repeats until `budget_s` of measured time is spent (at least `min_reps`, at most `max_reps` samples).
    `flush_l2` clears the GPU L2 before each sample (outside the timed events; one call per sample);
    `cuda_graph` captures `fn` once and times graph replays (small shapes, where launch overhead dominates);
    `clock` and `log`: see `Sampler`.
    """
    sampler = Sampler(fn, device, warmup=warmup, flush_l2=flush_l2, cuda_graph=cuda_graph,
                      min_sample_s=min_sample_s, clock=clock, log=log)
    with call_context(fn):
        return sample_for(sampler, budget_s, min_reps, max_reps)
