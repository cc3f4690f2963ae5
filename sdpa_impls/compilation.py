"""Compilation is set-up, never a sample: a closure that compiles says so, is compiled once (timed) before any
sample, and runs where a recompile is an error.

A prepared closure declares compilation with a true `compiles` attribute (`declare_compiles`). The measuring code
(`bench.measure`, the pytest-benchmark suite, asv) then calls `compile_once` on it before its first timed or
profiled call, and enters `no_recompile()` (through `timing.call_context`) around every later call: a torch.compile
cache miss there raises `Recompiled` instead of compiling inside a timed sample.
"""
from __future__ import annotations

import contextlib
import functools
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator

import torch

# A sweep compiles each (shape, dtype, mask) of a compiled implementation once, for static shapes (as attention-gym
# and tritonbench do); torch's default of 8 entries per function would fall back to eager after 8 cases.
RECOMPILE_LIMIT = 1024
_STANCE_MESSAGE = "fail_on_recompile"  # torch 2.13's RuntimeError text names the stance


def compiler_reasons(device: torch.device) -> list[str]:
    """Why torch.compile cannot build a kernel here, as a reason ([] where it can): on the CPU inductor writes C++
    and compiles it with $CXX, else g++ (torch's default on Linux; clang++ on macOS); without one, every point failed
    with InvalidCxxCompiler, read as a broken kernel. CUDA kernels are Triton's."""
    if device.type != "cpu":
        return []
    cxx = os.environ.get("CXX", "clang++" if sys.platform == "darwin" else "g++")
    if _found(cxx):
        return []
    named = "$CXX" if "CXX" in os.environ else "torch's default"
    return [f"torch.compile on the CPU needs a C++ compiler: {cxx} ({named}) is not found"]


@functools.lru_cache(maxsize=8)
def _found(cxx: str) -> bool:  # once per compiler name: a drop-in call checks its reasons on every call
    return shutil.which(cxx) is not None


class Recompiled(RuntimeError):
    """A compiled closure would have compiled again during timing (a torch.compile guard failed)."""


@contextlib.contextmanager
def raised_recompile_limit() -> Iterator[None]:
    """torch's per-function recompile limits raised to at least RECOMPILE_LIMIT while compiling."""
    import torch._dynamo.config as dynamo_config

    limit = max(dynamo_config.recompile_limit, RECOMPILE_LIMIT)
    total = max(dynamo_config.accumulated_recompile_limit, RECOMPILE_LIMIT)
    with dynamo_config.patch(recompile_limit=limit, accumulated_recompile_limit=total):
        yield


class FirstCallCompiles:
    """A prepared closure over a torch.compile'd function: its first call compiles (under the raised recompile
    limit, however it is called: by `compile_once`, the fp64 check or a user), later calls only run."""

    compiles = True

    def __init__(self, fn: Callable[[], torch.Tensor]) -> None:
        self.fn = fn
        self.compiled = False

    def __call__(self) -> torch.Tensor:
        if self.compiled:
            return self.fn()
        with raised_recompile_limit():
            out = self.fn()
        self.compiled = True
        return out


def declare_compiles(fn: Callable[[], torch.Tensor]) -> FirstCallCompiles:
    """`fn` (a closure over a torch.compile'd function) as a closure that declares compilation."""
    return FirstCallCompiles(fn)


def compiles(fn: Callable[[], object]) -> bool:
    """Whether `fn` declared that its first call compiles."""
    return bool(getattr(fn, "compiles", False))


def compile_once(fn: Callable[[], object], device: torch.device | str) -> float | None:
    """Seconds of `fn`'s first call (compilation plus one execution) when `fn` declares compilation, else None.

    Runs outside any timed region and outside `no_recompile`, with torch's per-function recompile limit raised to
    RECOMPILE_LIMIT so that the hundredth case of a sweep is compiled like the first, not run eagerly. A closure
    that compiled a part of itself when it was built (the backward-only closure's forward) declares those seconds
    as `compile_s_before`; they are added."""
    if not compiles(fn):
        return None
    before = getattr(fn, "compile_s_before", None) or 0.0
    device = torch.device(device)
    context = getattr(fn, "context", None)  # the closure's own context (not the recompile guard)
    with raised_recompile_limit(), (context() if context is not None else contextlib.nullcontext()):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - start + before


@contextlib.contextmanager
def no_recompile() -> Iterator[None]:
    """torch.compile may run what it compiled but not compile again (`set_stance("fail_on_recompile")`); a cache
    miss inside raises `Recompiled` with torch's guard failures."""
    try:
        with torch.compiler.set_stance(_STANCE_MESSAGE):
            yield
    except RuntimeError as exc:
        if _STANCE_MESSAGE not in str(exc) or isinstance(exc, Recompiled):
            raise
        detail = " ".join(str(exc).split())
        raise Recompiled(f"recompiled during timing, after its compile step (a silent slow sample otherwise): "
                         f"{detail}") from exc
