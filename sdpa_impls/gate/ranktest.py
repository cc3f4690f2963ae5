"""The Mann–Whitney U rank test in numpy: is one sample of timings stochastically larger than another?

    mann_whitney_u(x, y, alternative="greater") -> RankTest(u, pvalue, method)

`u` is the statistic of `x` (the number of pairs with x > y, ties counted ½). The p-value
is exact (the null distribution of U, by the Gaussian binomial coefficient) when one
sample has at most 8 values and there are no ties, otherwise the normal approximation with
tie correction and continuity correction. This is the same choice and the same numbers as
`scipy.stats.mannwhitneyu(x, y, alternative=..., method="auto")`, without depending on scipy.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

ALTERNATIVES = ("greater", "less", "two-sided")
EXACT_MAX_SMALLER = 8  # the exact distribution is used when a sample is this small and there are no ties


@dataclass(frozen=True)
class RankTest:
    """U of the first sample, the p-value under the stated alternative, and how it was computed."""

    u: float
    pvalue: float
    method: str  # "exact" | "asymptotic"


def rank_average(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """1-based ranks with ties given their average rank, and the size of every tie group."""
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    sizes = np.diff(np.r_[starts, len(ordered)])
    average = starts + (sizes + 1) / 2.0  # mean of the ranks starts+1 .. starts+size
    ranks = np.empty(len(values), dtype=float)
    ranks[order] = np.repeat(average, sizes)
    return ranks, sizes


def u_distribution(n1: int, n2: int) -> list[int]:
    """How many of the C(n1+n2, n1) orderings give U = 0, 1, ..., n1·n2 (exact integers).

    The counts are the coefficients of the Gaussian binomial [n1+n2 choose n1]_q =
    prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i) with m = min(n1, n2), n = max(n1, n2).
    """
    m, n = min(n1, n2), max(n1, n2)
    size = m * n + 1
    coef = [0] * size
    coef[0] = 1
    for i in range(1, m + 1):
        shift = n + i
        for k in range(size - 1, shift - 1, -1):  # multiply by (1 - q^shift)
            coef[k] -= coef[k - shift]
        for k in range(i, size):  # divide by (1 - q^i)
            coef[k] += coef[k - i]
    return coef


def _exact_sf(u: float, n1: int, n2: int) -> float:
    """P(U >= u) under the null hypothesis, from the exact distribution."""
    counts = u_distribution(n1, n2)
    start = max(0, math.ceil(u))
    return sum(counts[start:]) / sum(counts)


def _normal_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def mann_whitney_u(x: Sequence[float], y: Sequence[float], alternative: str = "greater") -> RankTest:
    """Test whether `x` tends to be larger ("greater"), smaller ("less") or different ("two-sided") than `y`.

    Needs at least one value in each sample and only finite values; raises ValueError otherwise.
    """
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {', '.join(ALTERNATIVES)}; got {alternative!r}")
    a = np.asarray(x, dtype=float).ravel()
    b = np.asarray(y, dtype=float).ravel()
    if a.size == 0 or b.size == 0:
        raise ValueError(f"the Mann-Whitney U test needs two non-empty samples; got {a.size} and {b.size} values")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("the Mann-Whitney U test needs finite values; a sample holds NaN or infinity")
    n1, n2 = a.size, b.size
    ranks, ties = rank_average(np.concatenate([a, b]))
    u1 = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2.0)
    u2 = n1 * n2 - u1
    u, factor = {"greater": (u1, 1), "less": (u2, 1), "two-sided": (max(u1, u2), 2)}[alternative]
    if min(n1, n2) <= EXACT_MAX_SMALLER and not np.any(ties > 1):
        p = factor * _exact_sf(u, n1, n2)
        method = "exact"
    else:
        n = n1 + n2
        tie_term = float(np.sum(ties.astype(float) ** 3 - ties)) / (n * (n - 1))
        sigma = math.sqrt(n1 * n2 / 12.0 * ((n + 1) - tie_term))
        if sigma == 0.0:  # every value identical: no evidence either way
            p = 1.0
        else:
            p = factor * _normal_sf((u - n1 * n2 / 2.0 - 0.5) / sigma)
        method = "asymptotic"
    return RankTest(u=u1, pvalue=min(1.0, max(0.0, p)), method=method)
