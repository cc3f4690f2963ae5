"""For a plug-in's own tests: an implementation checked against the float64 reference on the suite's cases, with
the rule every benchmark applies before it times a point (at most 2× naive's error in the same dtype, plus a floor;
gradients too in the backward modes).

    cases(name="smoke")                    -> (Case, ...)            # the cases of a preset (bench.grid)
    check(name, case, device="cpu", seed=0) -> (max error, tolerance)
        Unsupported (a NotImplementedError) with the implementation's reasons: a skip, not a failure;
        WrongResult (an AssertionError) naming the tensor and its error: a failure;
        PluginLoadError (an ImportError) where the plug-in named does not load: a failure, not a skip;
        RuntimeError where `device` is CUDA and this torch has none: a failure too.
"""
from __future__ import annotations

from .bench.check import CaseContext, WrongResult, no_device
from .bench.grid import Case, preset
from .protocol import Unsupported
from .registry import PluginLoadError, loaded

__all__ = ["Case", "PluginLoadError", "Unsupported", "WrongResult", "cases", "check"]


def cases(name: str = "smoke") -> tuple[Case, ...]:
    """The cases of preset `name` (docs/reference/presets.md); ValueError naming the known ones otherwise."""
    return preset(name)


def check(name: str, case: Case, device: str = "cpu", seed: int = 0) -> tuple[float, float]:
    """Run implementation `name` once on `case`'s seeded inputs (and its backward, in a backward mode) and compare
    with float64: (worst error, its tolerance), or Unsupported / WrongResult / PluginLoadError as the module says."""
    impl = loaded(name)
    why = no_device(device)
    if why:  # a failure, not a skip: a GPU runner that lost its GPU must not pass on skips
        raise RuntimeError(f"check on {device}: {why}")
    context = CaseContext(case, device, seed)
    reasons = context.inputs.reasons(impl)
    if reasons:
        raise Unsupported(impl.name, reasons)
    context.mark(contents=True)
    worst = context.check(impl)
    said = context.put_back()  # its inputs written in place, or torch's thread count, grad mode or default dtype
    if said:
        raise WrongResult(f"{impl.name} {said}")
    return worst
