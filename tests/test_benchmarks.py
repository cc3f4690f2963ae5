"""pytest-benchmark suite: one benchmark per (implementation, case) of the selected preset, grouped by case.

`pytest --benchmark-only [--sdpa-preset NAME] [--sdpa-impl NAME ...]` times them; plain `pytest` runs each once.
Every point is checked against the fp64 reference first: a wrong implementation fails and never gets a time.
"""
from __future__ import annotations

from collections import OrderedDict

import pytest

import sdpa_impls
from sdpa_impls.grid import Case
from sdpa_impls.measure import SPEED_BASELINE, CaseContext, derived_metrics, mode_closure
from sdpa_impls.timing import peak_memory, summarize

_contexts: OrderedDict[tuple[Case, str], CaseContext] = OrderedDict()
_baseline_median: dict[tuple[Case, str], float] = {}


def case_context(case: Case, device: str) -> CaseContext:
    """Inputs + fp64 reference of a case, kept only while its implementations run (points are case-major)."""
    key = (case, device)
    if key not in _contexts:
        _contexts.clear()  # free the previous case's reference before building the next
        _contexts[key] = CaseContext.build(case, device)
    return _contexts[key]


def test_sdpa(benchmark, sdpa_point: tuple[str, Case], sdpa_device: str, sdpa_preset_name: str) -> None:
    impl_name, case = sdpa_point
    benchmark.group = case.id
    impl = sdpa_impls.get(impl_name)
    ctx = case_context(case, sdpa_device)
    reasons = impl.unsupported_reasons(**ctx.inputs.args())
    if reasons:
        pytest.skip(f"{impl_name}: {'; '.join(reasons)}")
    max_error, error_tolerance = ctx.check(impl)  # raises WrongResult (an AssertionError) before any timing
    fn = mode_closure(impl, ctx.inputs, case.mode)
    memory = peak_memory(fn, sdpa_device)
    benchmark(fn)
    info = {"impl": impl_name, "case": case.id, "preset": sdpa_preset_name, "device": sdpa_device, "status": "ok",
            "peak_memory_bytes": memory, "max_error": max_error, "error_tolerance": error_tolerance,
            "speedup_vs_torch_sdpa": None, **{k: v for k, v in case.as_dict().items() if k != "id"}}
    if benchmark.stats is not None:  # None when benchmarks are disabled (smoke mode)
        stats = benchmark.stats.stats
        samples = list(stats.data)
        metrics = derived_metrics(case, sdpa_device, summarize(samples))
        info |= {k: v for k, v in metrics.items() if k != "samples"}
        key = (case, sdpa_device)
        if impl_name == SPEED_BASELINE:
            _baseline_median[key] = metrics["median_s"]
        if key in _baseline_median and metrics["median_s"]:
            info["speedup_vs_torch_sdpa"] = _baseline_median[key] / metrics["median_s"]
    benchmark.extra_info.update(info)
