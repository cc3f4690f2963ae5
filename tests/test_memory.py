"""The CPU peak-memory method against known allocations, and the structural memory growth of chunked vs naive."""
from __future__ import annotations

import pytest
import torch

import sdpa_impls
from sdpa_impls.bench.grid import Case
from sdpa_impls.bench.inputs import make_inputs
from sdpa_impls.bench.measure import mode_closure
from sdpa_impls.bench.memory import peak_memory


def test_peak_memory_counts_a_known_allocation() -> None:
    assert peak_memory(lambda: torch.empty(3_000_000, dtype=torch.uint8), "cpu") == 3_000_000


def test_peak_memory_is_the_peak_not_the_total() -> None:
    def work() -> torch.Tensor:
        big = torch.empty(1000, 1000)  # 4 MB, freed before the next allocation
        del big
        return torch.empty(250, 1000)  # 1 MB

    assert peak_memory(work, "cpu") == 4_000_000


def test_peak_memory_ignores_what_existed_before() -> None:
    held = torch.empty(10_000_000, dtype=torch.uint8)
    assert peak_memory(lambda: held.add_(1), "cpu") < 64  # only the wrapped scalar 1, not the 10 MB held


def growth(impl: str, mode: str, l1: int, l2: int) -> float:
    peaks = []
    for length in (l1, l2):
        inputs = make_inputs(Case(lq=length, lk=length, e=64, mode=mode, heads_q=2, heads_kv=2), "cpu")
        peaks.append(peak_memory(mode_closure(sdpa_impls.get(impl), inputs, mode), "cpu"))
    return peaks[1] / peaks[0]


@pytest.mark.parametrize("mode", ["fwd", "fwd+bwd"])
def test_chunked_memory_grows_linearly_naive_quadratically(mode: str) -> None:
    """Doubling L: chunked's peak grows ~2× (O(L)), naive's ~4× (the O(L²) score matrix)."""
    assert growth("chunked", mode, 2048, 4096) < 2.5
    assert growth("naive", mode, 2048, 4096) > 3.5
