"""Clocks and the repetition loop, for CPU and CUDA: what one timed sample is."""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

@dataclass(frozen=True)
class Timing:
    """Seconds per call: median and inter-quartile range over `samples` (each one call)."""

    median: float
    iqr: float
    samples: tuple[float, ...]


def summarize(samples: list[float]) -> Timing:
    if len(samples) >= 4:
        q1, _, q3 = statistics.quantiles(samples, n=4)
    else:
        q1 = q3 = statistics.median(samples)
    return Timing(statistics.median(samples), q3 - q1, tuple(samples))


def synchronize(device: torch.device | str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


class CudaEventClock:
    """A clock that reads GPU time: each reading records an event on the current stream and waits for it.

    The difference of two readings is the GPU time of the work launched between them, so it can
    stand in for a host timer (e.g. pytest-benchmark's `timer`) without timing asynchronous launches.
    """

    def __init__(self) -> None:
        self._origin: torch.cuda.Event | None = None

    def __call__(self) -> float:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        event.synchronize()
        if self._origin is None:
            self._origin = event
            return 0.0
        return self._origin.elapsed_time(event) / 1e3


cuda_event_clock = CudaEventClock()  # for `pytest --benchmark-timer sdpa_impls.bench.timing.cuda_event_clock`


def _l2_flusher(device: torch.device) -> Callable[[], None]:
    """Overwrite a buffer twice the L2 size so the next repetition starts with a cold cache."""
    props = torch.cuda.get_device_properties(device)
    buf = torch.empty(2 * max(getattr(props, "L2_cache_size", 0), 64 << 20), dtype=torch.uint8, device=device)
    return lambda: buf.zero_()


def time_closure(fn: Callable[[], object], device: torch.device | str, *, budget_s: float = 1.0,
                 min_reps: int = 5, max_reps: int = 200, warmup: int = 2, flush_l2: bool = False,
                 cuda_graph: bool = False) -> Timing:
    """Time `fn` after `warmup` calls: CUDA events on GPU, a monotonic clock on CPU.

    Repeats until `budget_s` of measured time is spent (at least `min_reps`, at most `max_reps`).
    `flush_l2` clears the GPU L2 before each repetition (outside the timed events); `cuda_graph`
    captures `fn` once and times graph replays (small shapes, where launch overhead dominates).
    """
    device = torch.device(device)
    for _ in range(warmup):
        fn()
    synchronize(device)
    samples: list[float] = []
    if device.type != "cuda":
        while len(samples) < max_reps and (len(samples) < min_reps or sum(samples) < budget_s):
            start = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - start)
        return summarize(samples)
    if cuda_graph:
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            fn()  # warm the side stream before capture
        torch.cuda.current_stream(device).wait_stream(stream)
        with torch.cuda.graph(graph):
            fn()
        fn = graph.replay
    flush = _l2_flusher(device) if flush_l2 else None
    while len(samples) < max_reps and (len(samples) < min_reps or sum(samples) < budget_s):
        if flush is not None:
            flush()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1e3)
    return summarize(samples)
