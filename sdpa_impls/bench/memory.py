"""Peak memory of one call: the CUDA allocator's peak, or on CPU the bytes PyTorch allocates (profiler events)."""
from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator

import torch


class CpuProfile(torch.autograd.profiler.profile):
    """torch.autograd's profiler (the one torch.profiler wraps) with torch.profiler's start/stop/events. Used on CPU
    because torch.profiler's start imports torch._inductor and with it torch._dynamo: 1.5 s in every measuring
    process on a 2-core EPYC, for a record that takes milliseconds."""

    def start(self) -> None:
        self.__enter__()

    def stop(self) -> None:
        self.__exit__(None, None, None)

    def events(self) -> list:
        return self.function_events


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
    prof = CpuProfile(use_cpu=True, profile_memory=True)
    with quiet_stderr():  # kineto prints a line to fd 2 on every start and stop
        prof.start()
    try:
        result = fn()
    finally:
        with quiet_stderr():
            prof.stop()
    del result
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.kineto_results.events()
                    if e.name() == "[memory]" and str(e.device_type()).endswith("CPU"))
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return int(peak)


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
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
