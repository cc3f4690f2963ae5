"""How fast the machine was while each sample was taken, to divide it out before two sides are compared
(continuous.verdict):

    probe_typical(runs) -> seconds | None      # the CPU speed probe's median, where every point carries probes
    probe_scaled(runs, typical) -> runs        # each sample × typical / the mean of the probes beside it
    run_speeds(runs, reference) -> [factor] | None   # one factor per run, from the time reference's times
    scaled(runs, speeds) -> runs

`runs` are lists of {(impl, case): Point}, one per process.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from statistics import median

from ..gate.points import Point
from ..gate.rules import relative_to

PROBE_UNIT = "speed probe"  # Row.unit of times scaled by the speed probe beside each sample


def run_speeds(runs: Sequence[dict[tuple[str, str], Point]], reference: str) -> list[float] | None:
    """How slow each run was, as the reference saw it: the median over cases of the reference's median in that
    run divided by its median over all runs (1.0 = a typical run). None when some run lacks the reference.

    One factor per run, not one per case: dividing each case by the reference's time on that case adds the
    reference's own noise on that case (a disturbance of a second hits one benchmark, not the whole run).
    """
    if not reference:
        return None
    per_case: dict[str, list[float]] = {}
    for run in runs:
        for (impl, case_id), point in run.items():
            if impl == reference and point.median_s:
                per_case.setdefault(case_id, []).append(point.median_s)
    typical = {case: median(values) for case, values in per_case.items()}
    speeds = []
    for run in runs:
        mine = [run[(reference, c)].median_s / t for c, t in typical.items() if (reference, c) in run
                and run[(reference, c)].median_s]
        if not mine:
            return None
        speeds.append(median(mine))
    return speeds


def probe_typical(runs: Sequence[dict[tuple[str, str], Point]]) -> float | None:
    """The median speed-probe duration over every point of `runs` when every point carries probes of the same work
    (bench.probe), else None: each sample is then scaled by this over the probes beside it (`probe_scaled`)."""
    points = [p for run in runs for p in run.values()]
    if not points or not all(p.probe_s for p in points) or len({p.probe_work for p in points}) != 1:
        return None
    return median(x for p in points for x in p.probe_s)


def probe_scaled(runs: list[dict], typical: float) -> list[dict]:
    """Every sample times `typical` / the mean of the probes right before and after it: the sample as it would
    have taken at the machine's typical speed."""
    out = []
    for run in runs:
        new = {}
        for key, p in run.items():
            samples = tuple(s * typical / ((p.probe_s[i] + p.probe_s[i + 1]) / 2) for i, s in enumerate(p.samples))
            new[key] = replace(p, samples=samples, median_s=median(samples))
        out.append(new)
    return out


def scaled(runs: list[dict], speeds: list[float] | None) -> list[dict]:
    if speeds is None:
        return runs
    return [{k: relative_to(p, s) for k, p in run.items()} for run, s in zip(runs, speeds)]
