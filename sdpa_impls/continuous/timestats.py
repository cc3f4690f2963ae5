"""The time statistics of one benchmark of a side-by-side comparison (continuous.verdict): each run's samples, the
head/base ratio of the pooled medians with its interval, the rank test, and the same with one run (or round) left out.

    sample_runs(points) -> [samples of a run]
    time_stats(base, head, paired=False) -> (ratio, (low, high), p, runs where head is slower) | None
    paired_rounds(base_runs, head_runs, key, start) -> ((base point, head point), ...)
    without_one(base, head, pairs=()) -> the lowest interval low end with one run (round) left out | None

`paired`: run i of each side came from one process that timed both in turn (continuous.pairs): the interval keeps a
round's two sides together, and head is slower in a round when its median is.
"""
from __future__ import annotations

from collections.abc import Sequence
from statistics import median

from ..gate.interval import ratio_interval
from ..gate.points import Point
from ..gate.ranktest import mann_whitney_u


def sample_runs(points: Sequence[Point]) -> list[tuple[float, ...]]:
    """Each run's samples (its median alone where it kept none); runs with neither left out."""
    return [r for r in (p.samples or ((p.median_s,) if p.median_s else ()) for p in points) if r]


def time_stats(base: list[Point], head: list[Point], paired: bool = False
                ) -> tuple[float, tuple[float, float], float, int] | None:
    b_runs, h_runs = sample_runs(base), sample_runs(head)
    if not b_runs or not h_runs or (paired and len(b_runs) != len(h_runs)):
        return None
    b_all, h_all = [s for r in b_runs for s in r], [s for r in h_runs for s in r]
    ratio = median(h_all) / median(b_all) if median(b_all) > 0 else float("inf")
    p = mann_whitney_u(h_all, b_all, "greater").pvalue
    if paired:
        slower = sum(median(h) > median(b) for b, h in zip(b_runs, h_runs))
    else:
        slower = sum(median(h) > median(b) for b in b_runs for h in h_runs)
    return ratio, ratio_interval(b_runs, h_runs, paired=paired), p, slower


def paired_rounds(base: list[dict], head: list[dict], key: tuple[str, str], start: int) -> tuple[tuple[Point, Point], ...]:
    """The (base, head) points of `key` in the rounds from `start` on that hold it on both sides with samples."""
    return tuple((b[key], h[key]) for b, h in list(zip(base, head))[start:] if key in b and key in h
                 and sample_runs([b[key]]) and sample_runs([h[key]]))


def without_one(base: list[Point], head: list[Point], pairs: Sequence[tuple[Point, Point]] = ()) -> float | None:
    """The lowest lower end of the head/base interval over every way of leaving one run of either side out (a side
    of one run is kept whole), or with `pairs`, one round; None when there is nothing to leave out."""
    if pairs:
        runs = [(sample_runs([b])[0], sample_runs([h])[0]) for b, h in pairs]
        lows = [ratio_interval([b for b, _ in runs[:i] + runs[i + 1:]], [h for _, h in runs[:i] + runs[i + 1:]],
                               paired=True)[0] for i in range(len(runs)) if len(runs) > 1]
        return min(lows) if lows else None
    b_runs, h_runs = sample_runs(base), sample_runs(head)
    lows = [ratio_interval(b_runs[:i] + b_runs[i + 1:], h_runs)[0] for i in range(len(b_runs)) if len(b_runs) > 1]
    lows += [ratio_interval(b_runs, h_runs[:i] + h_runs[i + 1:])[0] for i in range(len(h_runs)) if len(h_runs) > 1]
    return min(lows) if lows else None
