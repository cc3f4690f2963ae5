"""The numpy Mann–Whitney U test against textbook counts, values computed with scipy 1.17.1, and brute force."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdpa_impls.gate.ranktest import mann_whitney_u, rank_average, u_distribution

MALES, FEMALES = [19, 22, 16, 29, 24], [20, 11, 17, 12]  # the example of scipy's mannwhitneyu docstring
TIES_SMALL = ([1, 2, 2, 3, 3, 3], [2, 3, 4, 4, 5])
TIES_LARGE = ([1.5, 2, 2, 3, 3, 3, 4, 4, 5, 6], [1, 1, 2, 2, 2, 3, 3, 3, 3, 4, 5])
LARGE = (list(range(0, 40, 2)), list(range(1, 30, 2)))

# (x, y, alternative, U of x, p, method), p from scipy.stats.mannwhitneyu 1.17.1 (method="auto")
KNOWN = [
    (MALES, FEMALES, "greater", 17.0, 0.05555555555555555, "exact"),
    (MALES, FEMALES, "less", 17.0, 0.9682539682539683, "exact"),
    (MALES, FEMALES, "two-sided", 17.0, 0.1111111111111111, "exact"),
    (*TIES_SMALL, "greater", 5.5, 0.970711726568604, "asymptotic"),  # ties: normal approximation
    (*TIES_SMALL, "less", 5.5, 0.04435684599838808, "asymptotic"),
    (*TIES_SMALL, "two-sided", 5.5, 0.08871369199677616, "asymptotic"),
    (*TIES_LARGE, "greater", 70.5, 0.1388357652524997, "asymptotic"),
    (*TIES_LARGE, "two-sided", 70.5, 0.2776715305049994, "asymptotic"),
    ([6, 7, 8, 9, 10], [1, 2, 3, 4, 5], "greater", 25.0, 1 / 252, "exact"),
    ([6, 7, 8, 9, 10], [1, 2, 3, 4, 5], "less", 25.0, 1.0, "exact"),
    (*LARGE, "greater", 180.0, 0.1627217048241571, "asymptotic"),
    (*LARGE, "two-sided", 180.0, 0.3254434096483142, "asymptotic"),
]


@pytest.mark.parametrize("x,y,alternative,u,p,method", KNOWN)
def test_known_values(x: list, y: list, alternative: str, u: float, p: float, method: str) -> None:
    res = mann_whitney_u(x, y, alternative)
    assert res.u == u
    assert res.pvalue == pytest.approx(p, rel=1e-12)
    assert res.method == method


def test_textbook_null_distribution() -> None:
    # coefficients of the Gaussian binomial [6 choose 3]_q: the 20 orderings of 3 x's among 6 values by U
    assert u_distribution(3, 3) == [1, 1, 2, 3, 3, 3, 3, 2, 1, 1]
    assert u_distribution(2, 2) == [1, 1, 2, 1, 1]
    assert u_distribution(1, 4) == [1] * 5
    counts = u_distribution(8, 40)
    assert sum(counts) == math.comb(48, 8) and counts == counts[::-1]


def test_ranks_average_ties() -> None:
    ranks, sizes = rank_average(np.array([3.0, 1.0, 3.0, 2.0, 3.0]))
    assert ranks.tolist() == [4.0, 1.0, 4.0, 2.0, 4.0]
    assert sorted(sizes.tolist()) == [1, 1, 3]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=12), st.lists(st.integers(0, 6), min_size=1, max_size=12))
def test_u_counts_pairs(x: list[int], y: list[int]) -> None:
    """U is the number of pairs with x > y, ties counted one half (the textbook definition)."""
    brute = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a, b in itertools.product(x, y))
    assert mann_whitney_u(x, y).u == brute


@settings(max_examples=150, deadline=None)
@given(st.lists(st.floats(-5, 5), min_size=1, max_size=7), st.lists(st.floats(-5, 5), min_size=1, max_size=7))
def test_exact_p_is_a_permutation_count(x: list[float], y: list[float]) -> None:
    """Without ties, the exact one-sided p is the share of relabellings whose U is at least the observed one."""
    if len(set(x + y)) < len(x + y):
        return  # ties take the normal approximation
    pooled = x + y
    observed = mann_whitney_u(x, y).u
    at_least = total = 0
    for idx in itertools.combinations(range(len(pooled)), len(x)):
        xs = [pooled[i] for i in idx]
        ys = [pooled[i] for i in range(len(pooled)) if i not in idx]
        at_least += mann_whitney_u(xs, ys).u >= observed
        total += 1
    assert mann_whitney_u(x, y, "greater").pvalue == pytest.approx(at_least / total, rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 20), min_size=1, max_size=30), st.lists(st.integers(0, 20), min_size=1, max_size=30),
       st.sampled_from(["greater", "less", "two-sided"]))
def test_matches_scipy(x: list[int], y: list[int], alternative: str) -> None:
    stats = pytest.importorskip("scipy.stats")  # a development cross-check; scipy is not a dependency
    want = stats.mannwhitneyu(x, y, alternative=alternative)
    got = mann_whitney_u(x, y, alternative)
    assert got.u == float(want.statistic)
    if math.isnan(want.pvalue):  # every value equal: scipy says nan, we say "no evidence"
        assert got.pvalue == 1.0
    else:
        assert got.pvalue == pytest.approx(float(want.pvalue), rel=1e-9, abs=1e-15)


def test_slower_samples_are_significant() -> None:
    rng = np.random.default_rng(0)
    base = rng.lognormal(0.0, 0.05, 200)
    assert mann_whitney_u(base * 1.25, base[::-1], "greater").pvalue < 1e-6
    assert mann_whitney_u(rng.permutation(base), base, "greater").pvalue > 0.01


@pytest.mark.parametrize("x,y,alternative,message", [
    ([], [1.0], "greater", "non-empty"),
    ([1.0], [float("nan")], "greater", "finite"),
    ([1.0], [2.0], "bigger", "alternative"),
])
def test_bad_input_is_named(x: list, y: list, alternative: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        mann_whitney_u(x, y, alternative)
