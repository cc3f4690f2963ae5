"""Clocks, the repetition loop, peak-memory counting and this machine's measured ceilings, for CPU and CUDA."""
from __future__ import annotations

import contextlib
import json
import os
import sys
import platform
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

CEILINGS_CACHE = Path(os.environ.get("SDPA_BENCH_CACHE", Path.home() / ".cache" / "sdpa-bench")) / "ceilings.json"


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


cuda_event_clock = CudaEventClock()  # for `pytest --benchmark-timer sdpa_impls.timing.cuda_event_clock`


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


def peak_memory(fn: Callable[[], object], device: torch.device | str) -> int:
    """Bytes allocated at the peak of one call of `fn`, above what was allocated before it.

    CUDA: the caching allocator's peak counter. CPU: PyTorch's own allocation events (the profiler's
    memory events, replayed in time order); process RSS would not see one operator.
    """
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        result = fn()
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) - before
        del result
        return int(peak)
    from torch.profiler import ProfilerActivity, profile

    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    with _quiet_stderr():  # kineto prints a line to fd 2 on every start and stop
        prof.start()
    try:
        result = fn()
    finally:
        with _quiet_stderr():
            prof.stop()
    del result
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]" and str(e.device_type()).endswith("CPU"))
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return int(peak)


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence the process's file descriptor 2 (C++ logging) for the duration of the block."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def machine_key(device: torch.device | str) -> str:
    device = torch.device(device)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = f"{platform.processor() or platform.machine()}-{cpu_model()}-{torch.get_num_threads()}threads"
    return f"{name}|torch-{torch.__version__}"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _measure_ceiling(device: torch.device, what: str) -> float:
    """`gemm_flops_<dtype>`: FLOP/s of a square GEMM, grown until one call takes >= 20 ms (slow dtypes
    such as fp16 on CPU stay small); `copy_bytes_per_s`: read + write bytes/s of a large copy."""
    if what == "copy_bytes_per_s":
        src = torch.empty(64 << 20 if device.type == "cpu" else 1 << 30, dtype=torch.uint8, device=device).fill_(1)
        dst = torch.empty_like(src)
        t = time_closure(lambda: dst.copy_(src), device, budget_s=0.5, min_reps=3, max_reps=50, warmup=1)
        return 2.0 * src.numel() / min(t.samples)  # a ceiling is the best rate seen, not the typical one
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[what.rsplit("_", 1)[1]]
    for n in (256, 512, 1024, 2048, 4096, 8192):
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        t = time_closure(lambda: a @ b, device, budget_s=0.3, min_reps=3, max_reps=50, warmup=1)
        if t.median >= 0.02 or n == (8192 if device.type == "cuda" else 2048):
            return 2.0 * n**3 / min(t.samples)
    raise AssertionError("unreachable")


def ceilings(device: torch.device | str, needed: tuple[str, ...] = ("gemm_flops_fp32", "copy_bytes_per_s"),
             cache: Path = CEILINGS_CACHE) -> dict[str, float]:
    """This machine's measured ceilings (each measured once, cached per machine and torch version)."""
    device = torch.device(device)
    key = machine_key(device)
    try:
        stored = json.loads(cache.read_text())
    except (OSError, ValueError):
        stored = {}
    mine = stored.setdefault(key, {})
    missing = [w for w in needed if w not in mine]
    for what in missing:
        mine[what] = _measure_ceiling(device, what)
    if missing:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(stored, indent=1))
            tmp.replace(cache)
        except OSError:
            pass  # an unwritable cache only costs a re-measurement next time
    return dict(mine)


def roofline_pct(flops: float, nbytes: float, seconds: float, dtype: str, ceil: dict[str, float]) -> float:
    """Achieved FLOP/s as a percentage of min(GEMM peak, arithmetic intensity × copy bandwidth)."""
    attainable = min(ceil[f"gemm_flops_{dtype}"], flops / nbytes * ceil["copy_bytes_per_s"])
    return 100.0 * flops / seconds / attainable
