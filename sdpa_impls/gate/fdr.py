"""Benjamini–Hochberg: control the false discovery rate over a family of p-values (one per benchmark of a preset)."""
from __future__ import annotations

from collections.abc import Sequence


def bh_adjusted(pvalues: Sequence[float]) -> list[float]:
    """Benjamini–Hochberg adjusted p-values ("q-values"), in the input order.

    Rejecting every hypothesis whose adjusted value is below q keeps the expected share of false discoveries
    among the rejections at most q (for independent or positively dependent tests). q_(i) = min over j >= i of
    p_(j) · m / j, with the p-values sorted ascending and capped at 1.
    """
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [1.0] * m
    running = 1.0
    for rank in range(m, 0, -1):  # from the largest p-value down, so each value is the min over j >= i
        i = order[rank - 1]
        running = min(running, float(pvalues[i]) * m / rank)
        adjusted[i] = min(1.0, running)
    return adjusted


def bh_reject(pvalues: Sequence[float], q: float) -> list[bool]:
    """Which hypotheses Benjamini–Hochberg rejects at false discovery rate `q`."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"the false discovery rate should be between 0 and 1, got {q!r}")
    return [a <= q for a in bh_adjusted(pvalues)]
