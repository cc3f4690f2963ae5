"""The host-overhead check of `sdpa-bench continuous` on CUDA points (see continuous.verdict's docstring).

A CUDA point's time is its device time; its host overhead (eager − device time per call, one number per run) is
judged apart, and only where the host is a real part of the call. One process's host overhead can be ten times
the next's, so the order of a few runs is tested for significance, over the host-bound benchmarks together.
"""
from __future__ import annotations

from collections.abc import Sequence
from statistics import median

from ..fmt import fmt_factor
from ..gate.points import Point
from ..gate.ranktest import mann_whitney_u
from ..gate.rules import FAIL, INFO, PASS, Check

# The least growth of the host overhead per call that fails: below a couple of microseconds, a difference in one
# Python attribute lookup or allocator path moves it; a provisional floor until A/A data on a GPU sets it.
HOST_FLOOR_S = 2e-6
HOST_SHARE = 0.25  # host overhead judged where it is at least this share of base's eager time (host-bound calls)


def _overheads(base: Sequence[Point], head: Sequence[Point]) -> tuple[list[float], list[float], float] | None:
    """Each run's host overhead per call on both sides and base's median eager time per call; None where a run of
    either side has none (CPU points, calls timed eagerly)."""
    b, h = [p.host_overhead_s for p in base], [p.host_overhead_s for p in head]
    if not b or not h or any(v is None for v in b + h):
        return None
    eagers = [p.median_s + p.host_overhead_s for p in base if p.median_s is not None]
    return b, h, median(eagers) if eagers else 0.0


def host_judged(base: Sequence[Point], head: Sequence[Point]) -> float | None:
    """The one-sided rank p-value of head's host overheads above base's, one number per run, where the host
    overhead is judged (every run has one, and base's is at least `HOST_SHARE` of its eager time); else None."""
    found = _overheads(base, head)
    if found is None:
        return None
    b, h, eager = found
    if eager <= 0 or median(b) < HOST_SHARE * eager:
        return None
    return mann_whitney_u(h, b, "greater").pvalue


def host_check(base: Sequence[Point], head: Sequence[Point], factor: float, fdr: float,
               q: float | None = None, family: int = 0) -> tuple[Check, bool] | None:
    """The host-overhead check of one benchmark (see the module docstring), and whether it is undecided (every head
    run above every base run, not yet significant); None where a run of either side has no host overhead. `q`: its
    rank p-value adjusted over the `family` host-judged benchmarks (None: not judged)."""
    found = _overheads(base, head)
    if found is None:
        return None
    b, h, eager = found
    mb, mh = median(b), median(h)
    numbers = (f"host overhead {mb * 1e6:.1f} µs → {mh * 1e6:.1f} µs per call "
               f"({f'×{mh / mb:.3f}' if mb > 0 else f'{(mh - mb) * 1e6:+.1f} µs'}), head above base in "
               f"{sum(x > y for x in h for y in b)} of {len(b) * len(h)} pairs of runs")
    label = head[0].label
    if q is None:
        return Check("host", label, INFO, f"not judged, device-bound ({mb / eager:.0%} of the eager time is host "
                     f"overhead, < {HOST_SHARE:.0%}): {numbers}" if eager > 0 else f"not judged: {numbers}"), False
    numbers += f", BH-adjusted p {q:.2g} over {family} host-bound benchmarks"
    if min(h) - max(b) > HOST_FLOOR_S and min(h) > max(b) * factor:
        if q < fdr:
            return Check("host", label, FAIL, f"more host time: {numbers}; every head run above every base run by "
                                              f"more than ×{fmt_factor(factor)} and {HOST_FLOOR_S * 1e6:g} µs, "
                                              f"significant at FDR {fdr:g}"), False
        return Check("host", label, PASS, f"not shown: {numbers}; every head run above every base run, but not "
                                          f"significant at FDR {fdr:g}: undecided (more runs can show it)"), True
    return Check("host", label, PASS, numbers), False
