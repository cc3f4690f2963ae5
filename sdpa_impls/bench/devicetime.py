"""Device time: the prepared call captured in a CUDA graph and replayed back to back, so that a sample times the
GPU's work and not the host's launches; where a call cannot be captured, the eager time, marked so, with the reason.

The eager time (`timing.time_closure`) is what a user's loop of calls costs: on a small call it is the host
launching kernels. The replay of a captured graph launches the whole call at once, so the same kernels are timed
back to back. Their difference per call is the host overhead. On the CPU the host runs the call: one time.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .clocks import ClockLog, SMClock
from .timing import Sampler, Timing, call_context, sample_for

GRAPH, EAGER, HOST = "cuda-graph", "eager", "cpu"  # what a point's device time is
HOST_REASON = "one time on the CPU: the host runs the call"


@dataclass(frozen=True)
class DeviceTiming:
    """How the device time was taken (`method`: GRAPH, EAGER or HOST), why not from a graph (`reason`), and the
    graph's samples (None unless GRAPH: the eager timing is then the device time)."""

    method: str
    reason: str = ""
    timing: Timing | None = None


def not_captured(fn: Callable[[], object]) -> str:
    """Why a closure declares it cannot be captured (a host synchronization in the call, a library that refuses
    capture), from its `not_capturable` attribute; "" when it declares nothing and capture is tried."""
    return str(getattr(fn, "not_capturable", "") or "")


def graph_sampler(fn: Callable[[], object], device: torch.device | str, min_sample_s: float,
                  clock: SMClock | None = None, log: ClockLog | None = None) -> tuple[Sampler | None, str]:
    """A sampler of `fn`'s CUDA-graph replays, or None and the reason it could not be captured. `fn` is warm."""
    declared = not_captured(fn)
    if declared:
        return None, declared
    try:
        return Sampler(fn, device, warmup=0, cuda_graph=True, min_sample_s=min_sample_s, clock=clock, log=log), ""
    except Exception as exc:  # torch's capture errors: cudaErrorStreamCaptureUnsupported, a sync inside, ...
        torch.cuda.synchronize(device)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return None, f"not captured in a CUDA graph: {type(exc).__name__}: {first}"


def device_timing(fn: Callable[[], object], device: torch.device | str, *, budget_s: float, min_reps: int,
                  max_reps: int, min_sample_s: float, clock: SMClock | None = None,
                  log: ClockLog | None = None) -> DeviceTiming:
    """The device time of a warm closure `fn`: graph replays sampled as `timing.time_closure` samples eager
    calls (the same budget and counts), or EAGER with the reason, or HOST on the CPU."""
    if torch.device(device).type != "cuda":
        return DeviceTiming(HOST, HOST_REASON)
    sampler, reason = graph_sampler(fn, device, min_sample_s, clock, log)
    if sampler is None:
        return DeviceTiming(EAGER, reason)
    with call_context(fn):
        return DeviceTiming(GRAPH, "", sample_for(sampler, budget_s, min_reps, max_reps))
