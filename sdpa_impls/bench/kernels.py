"""What one call actually ran, from torch's profiler: the CUDA kernels (on a GPU) or aten ops (on CPU), and whether a
pinned torch SDPA backend really ran its own kernel and not another backend's."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .memory import CpuProfile, quiet_stderr
from .timing import call_context, synchronize

# The aten ops that identify each SDPA backend (forward and backward, CPU and CUDA; prefixes of torch 2.13's op
# names, e.g. aten::_scaled_dot_product_flash_attention_for_cpu_backward). MATH's backward is composite: none.
BACKEND_OPS: dict[str, tuple[str, ...]] = {
    "MATH": ("aten::_scaled_dot_product_attention_math",),
    "FLASH_ATTENTION": ("aten::_scaled_dot_product_flash_attention", "aten::_flash_attention_"),
    "EFFICIENT_ATTENTION": ("aten::_scaled_dot_product_efficient_attention", "aten::_efficient_attention_"),
    "CUDNN_ATTENTION": ("aten::_scaled_dot_product_cudnn_attention",),
}


INDUCTOR_GRAPH = "## Call CompiledFxGraph "  # torch 2.13's profiler event around one compiled graph's call


class DispatchMismatch(RuntimeError):
    """A pinned backend's profile shows another backend's kernel (or none of its own)."""


@dataclass(frozen=True)
class Profile:
    """One profiled call: `kernels` is what ran (CUDA kernels on a GPU, aten ops on CPU), longest first; `ops` the
    aten ops on any device."""

    kernels: tuple[str, ...]
    ops: tuple[str, ...]


def _by_time(pairs: list[tuple[str, float]]) -> tuple[str, ...]:
    total: dict[str, float] = defaultdict(float)
    order: dict[str, int] = {}
    for name, t in pairs:
        total[name] += t
        order.setdefault(name, len(order))
    return tuple(sorted(total, key=lambda n: (-total[n], order[n])))


def _profiler(device: torch.device) -> object:
    """A profiler of the aten ops, and on a GPU of the CUDA kernels too."""
    if device.type != "cuda":
        return CpuProfile(use_cpu=True)
    from torch.profiler import ProfilerActivity, profile

    return profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])


def profile_call(fn: Callable[[], object], device: torch.device | str) -> Profile:
    """Profile one call of `fn` (after one warm-up call), inside its call context and outside any timed region."""
    device = torch.device(device)
    with call_context(fn):
        fn()
        synchronize(device)
        prof = _profiler(device)
        with quiet_stderr():  # kineto prints a line to fd 2 on every start and stop
            prof.start()
        try:
            fn()
            synchronize(device)
        finally:
            with quiet_stderr():
                prof.stop()
    events = list(prof.events())
    aten = [(e.name, e.self_cpu_time_total) for e in events if e.name.startswith("aten::")]
    ops = _by_time(aten)
    if device.type != "cuda":  # inductor's generated CPU code shows as its graph's call, with that code's own time
        graphs = [(f"inductor graph {e.name.split()[3][:12]}", e.self_cpu_time_total) for e in events
                  if e.name.startswith(INDUCTOR_GRAPH)]
        return Profile(_by_time(aten + graphs), ops)
    cuda = torch.autograd.DeviceType.CUDA
    kernels = _by_time([(e.name, e.time_range.elapsed_us()) for e in events if e.device_type == cuda])  # durations
    return Profile(kernels, ops)


def backends_in(ops: tuple[str, ...]) -> dict[str, list[str]]:
    """The SDPA backends whose identifying aten ops appear in `ops`, with those ops."""
    found: dict[str, list[str]] = {}
    for backend, prefixes in BACKEND_OPS.items():
        hits = [op for op in ops if op.startswith(prefixes)]
        if hits:
            found[backend] = hits
    return found


def check_pinned(impl: object, prof: Profile) -> None:
    """Raise DispatchMismatch when `impl` pins a torch SDPA backend (its `backend` attribute) and the profile shows
    another backend's op, or (except MATH, whose backward is composite) none of its own."""
    backend = getattr(impl, "backend", None)
    name = getattr(backend, "name", None)
    if name not in BACKEND_OPS:
        return
    found = backends_in(prof.ops)
    others = {b: ops for b, ops in found.items() if b != name}
    if others:
        ran = "; ".join(f"{b}: {', '.join(ops)}" for b, ops in others.items())
        raise DispatchMismatch(f"pinned to {name} but ran another backend ({ran})")
    if name != "MATH" and name not in found:
        raise DispatchMismatch(f"pinned to {name} but none of its ops ran (aten ops: {', '.join(prof.ops[:8])})")
