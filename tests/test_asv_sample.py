"""The asv suite takes the same sample as the other front ends: back-to-back calls, per-call seconds, pinned
backends entered once in setup."""
from __future__ import annotations

import pytest

suite = pytest.importorskip("benchmarks.bench_sdpa", reason="run from the repository root")

from sdpa_impls.impls import torch_sdpa  # noqa: E402  (after the skip)


def test_the_asv_clock_reads_seconds_per_call_of_the_sample() -> None:
    readings = iter([0.0, 1.0, 1.0, 3.0])
    clock = suite.PerCallClock(lambda: next(readings))
    assert clock() == 0.0
    clock.calls = 4
    assert clock() == 0.25  # one sample of 4 calls took 1 s
    clock.calls = 2
    assert clock() == 0.25 and clock() == 1.25  # the next sample: 2 calls in 2 s


def test_setup_chooses_the_calls_per_sample_and_enters_a_pinned_backend_once() -> None:
    case = next(c for c in suite.cases_of("fwd"))
    bench = suite.Forward()
    bench.setup("torch_sdpa_math", case)
    try:
        assert bench.calls >= 1 and suite.CLOCK.calls == bench.calls
        assert torch_sdpa._pinned_now is not None and torch_sdpa._pinned_now.name == "MATH"
        bench.setup("torch_sdpa_math", case)  # asv re-runs setup before every sample: still entered once
        bench.time_sdpa("torch_sdpa_math", case)
    finally:
        bench.teardown("torch_sdpa_math", case)
    assert torch_sdpa._pinned_now is None
