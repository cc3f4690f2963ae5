"""A confidence interval of the ratio of two medians when each side's samples come in runs (separate processes).

    ratio_interval(base_runs, head_runs, level=0.95, resamples=400, seed=0, paired=False) -> (low, high)

Samples within one run share that run's conditions (a slow period of the machine, the process's memory layout),
so they are not independent: resampling the pooled samples would give an interval far too narrow. This is a
two-stage (cluster) bootstrap: each replicate draws runs with replacement, then samples with replacement within
every drawn run (the same number from each, so every run weighs the same), and takes the ratio of the medians.
The percentile interval of the replicates is returned; the seed is fixed, so the same data give the same interval.
`paired`: run i of base and run i of head were measured together (one process timing both in turn), so each
replicate draws the same runs on both sides: what the two shared, the process's own speed, cancels in the ratio.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

MAX_PER_RUN = 256  # samples drawn per run and replicate: enough for a median, bounded work on fast benchmarks


def _replicate_medians(runs: Sequence[np.ndarray], resamples: int, rng: np.random.Generator,
                       picks: np.ndarray | None = None) -> np.ndarray:
    k = len(runs)
    m = min(MAX_PER_RUN, min(len(r) for r in runs))
    if picks is None:
        picks = rng.integers(0, k, size=(resamples, k))  # which run fills each of the k slots of a replicate
    slots = []
    for j in range(k):
        drawn = np.empty((resamples, m))
        for r, run in enumerate(runs):
            rows = np.flatnonzero(picks[:, j] == r)
            if rows.size:
                drawn[rows] = run[rng.integers(0, len(run), size=(rows.size, m))]
        slots.append(drawn)
    return np.median(np.concatenate(slots, axis=1), axis=1)


def ratio_interval(base_runs: Sequence[Sequence[float]], head_runs: Sequence[Sequence[float]], level: float = 0.95,
                   resamples: int = 400, seed: int = 0, paired: bool = False) -> tuple[float, float]:
    """(low, high): the `level` percentile interval of median(head) / median(base) under the two-stage bootstrap.

    Every run needs at least one sample, and `paired` runs as many on each side; raises ValueError otherwise.
    """
    base = [np.asarray(r, dtype=float) for r in base_runs]
    head = [np.asarray(r, dtype=float) for r in head_runs]
    if not base or not head or any(r.size == 0 for r in base + head):
        raise ValueError("ratio_interval needs at least one non-empty run on each side")
    if paired and len(base) != len(head):
        raise ValueError(f"paired runs should be as many on each side, got {len(base)} and {len(head)}")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(head), size=(resamples, len(head))) if paired else None
    ratios = _replicate_medians(head, resamples, rng, picks) / _replicate_medians(base, resamples, rng, picks)
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.percentile(ratios, [tail, 100.0 - tail])
    return float(low), float(high)
