"""pytest-benchmark suite: one benchmark per (implementation, case) of the selected preset, grouped by case.

`pytest --benchmark-only [--sdpa-preset NAME] [--sdpa-impl NAME ...]` times them; plain `pytest` runs each once.
Every point is checked against the fp64 reference first: a wrong implementation fails and never gets a time.
"""
from __future__ import annotations

import pytest

from sdpa_impls import Unsupported
from sdpa_impls.bench.check import CaseContext
from sdpa_impls.bench.grid import Case
from sdpa_impls.bench.measure import prepare_point
from sdpa_impls.bench.memory import peak_memory
from sdpa_impls.bench.result import SPEED_BASELINE, Result
from sdpa_impls.bench.timing import call_context, calls_per_sample, one_sample, summarize

MAX_ROUNDS = 10_000
_context: dict[tuple[Case, str], CaseContext] = {}
_baseline_median: dict[tuple[Case, str], float] = {}


def case_context(case: Case, device: str) -> CaseContext:
    """Inputs + fp64 reference of a case, kept only while its implementations run (points are case-major)."""
    key = (case, device)
    if key not in _context:
        _context.clear()  # free the previous case's reference before building the next
        _context[key] = CaseContext(case, device)
    return _context[key]


def test_sdpa(benchmark, request: pytest.FixtureRequest, sdpa_point: tuple[str, Case], sdpa_device: str,
              sdpa_preset_name: str) -> None:
    impl_name, case = sdpa_point
    benchmark.group = case.id
    try:  # a WrongResult (an AssertionError) fails the test before any timing
        point = prepare_point(impl_name, case_context(case, sdpa_device))
    except Unsupported as exc:
        pytest.skip(f"{impl_name}: {'; '.join(exc.reasons)}")
    config = request.config
    with call_context(point.fn):  # e.g. a pinned backend: entered once, outside the timed region
        memory = peak_memory(point.fn, sdpa_device)
        calls = 1
        if benchmark.disabled:  # plain pytest: one call, as a smoke test
            benchmark(point.fn)
        else:  # one sample = `calls` back-to-back calls between two clock readings, as in time_closure and asv
            point.fn()  # warm-up
            calls = calls_per_sample(point.fn, sdpa_device)
            sample_s = max(one_sample(point.fn, sdpa_device, calls) * calls, 1e-9)
            rounds = min(max(int(config.getoption("benchmark_min_rounds")),
                             int(float(config.getoption("benchmark_max_time")) / sample_s)), MAX_ROUNDS)
            benchmark.pedantic(point.fn, iterations=calls, rounds=rounds, warmup_rounds=1)
    result = Result(impl_name, case, sdpa_device, "ok", peak_memory_bytes=memory, max_error=point.max_error,
                    error_tolerance=point.error_tolerance, kernels=point.kernels)
    if benchmark.stats is not None:  # None when benchmarks are disabled (smoke mode)
        result = result.timed(summarize(list(benchmark.stats.stats.data), calls))
        key = (case, sdpa_device)
        if impl_name == SPEED_BASELINE:
            _baseline_median[key] = result.median_s
        result = result.with_speedup(_baseline_median.get(key))
    benchmark.extra_info.update(result.extra_info() | {"preset": sdpa_preset_name})
