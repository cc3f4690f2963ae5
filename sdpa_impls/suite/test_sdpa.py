"""pytest-benchmark suite: one benchmark per (implementation, case) of the selected preset, grouped by case.

`pytest --pyargs sdpa_impls.suite.test_sdpa --benchmark-only [--sdpa-preset NAME] [--sdpa-impl NAME ...]` times
them; with --benchmark-disable each runs once, as a smoke test. The options, the parametrization and the timer come
from the suite's pytest plug-in (sdpa_bench_pytest, beside the package).
On CUDA the benchmark's time is the device time (the call captured in a CUDA graph and replayed; where it cannot
be captured, eager calls, and `extra_info["device_time_method"]` says "eager" with the reason); `extra_info` holds
the eager time (`median_s`) and the host overhead. On the CPU the one time is the benchmark's.
Every point is checked against the fp64 reference first: a wrong implementation fails and never gets a time. The
one exception is a process `continuous` starts to repeat a side's round (SDPA_CONTINUOUS_REPEAT=1): that side's
first process checked, profiled and measured the peak memory of the same points (exact, the same in every process),
so this one only times them (`extra_info["checked"]` false, no `peak_memory_bytes`).
Where no rule of a comparison reads the ceilings, `continuous` sets SDPA_CONTINUOUS_NO_CEILINGS=1 and none are timed.
The ceilings its `roofline_pct` is a percentage of are measured in the same session: before the first point, between
points (at most every 30 s) and after the last (`run_ceilings`); every point is judged against their medians.
"""
from __future__ import annotations

import functools
import os

import pytest

from sdpa_impls import Unsupported
from sdpa_impls.bench import contention
from sdpa_impls.bench.ceilings import RunCeilings, needed_ceilings
from sdpa_impls.bench.check import CaseContext, WrongResult
from sdpa_impls.bench.grid import Case, preset
from sdpa_impls.bench.measure import prepare_point
from sdpa_impls.bench.memory import peak_memory
from sdpa_impls.bench.probe import WORK as PROBE_WORK, SpeedProbe
from sdpa_impls.bench.result import SPEED_BASELINE, Result
from sdpa_impls.bench.devicetime import EAGER, GRAPH, HOST, HOST_REASON, DeviceTiming, graph_sampler
from sdpa_impls.bench.timing import MIN_SAMPLE_S, call_context, round_sample, summarize, time_closure
from sdpa_impls.continuous.schedule import NO_CEILINGS_ENV, REPEAT_ENV
from sdpa_impls.suite.session import MAX_ROUNDS
from sdpa_bench_pytest import suite_timer

_context: dict[tuple[Case, str], CaseContext] = {}
_baseline_median: dict[tuple[Case, str], float] = {}


@functools.cache
def cases_by_id(preset_name: str) -> dict[str, Case]:
    """The preset's cases by id, once a session: each point is parametrized by its case's id."""
    return {c.id: c for c in preset(preset_name)}


def case_context(case: Case, device: str) -> CaseContext:
    """Inputs + fp64 reference of a case, kept only while its implementations run (points are case-major)."""
    key = (case, device)
    if key not in _context:
        _context.clear()  # free the previous case's reference before building the next
        _context[key] = CaseContext(case, device)
    return _context[key]


class SessionCeilings:
    """This session's ceilings, and the timed points to judge against them when it ends."""

    def __init__(self, device: str, preset_name: str, clock) -> None:
        dtypes = sorted({c.dtype for c in preset(preset_name)})  # timed with the points' clock (--benchmark-timer)
        self.meter = RunCeilings(device, needed_ceilings(dtypes, device), clock=clock)
        self.timed: list[tuple[dict, Result]] = []

    def judge(self) -> None:
        self.meter.sample()
        values = self.meter.values()
        for extra_info, result in self.timed:
            judged = result.on_roofline(values)
            extra_info.update(roofline_pct=judged.roofline_pct, roofline_gemm=judged.roofline_gemm,
                              roofline_bound=judged.roofline_bound, ceilings=values)


@pytest.fixture(scope="module")
def run_ceilings(request: pytest.FixtureRequest, sdpa_device: str, sdpa_preset_name: str):
    session = SessionCeilings(sdpa_device, sdpa_preset_name, suite_timer(request.config, sdpa_device))
    yield session
    if session.timed:  # before pytest-benchmark writes its JSON, which happens at the end of the session
        session.judge()


# a point that fails before it is timed (a wrong answer, an error) never uses the fixture, and its failure already says
# why: pytest-benchmark's "fixture was not used" would read as a fault of the suite
@pytest.mark.filterwarnings("ignore:Benchmark fixture was not used at all:pytest_benchmark.logger.PytestBenchmarkWarning")
def test_sdpa(benchmark, request: pytest.FixtureRequest, sdpa_point: tuple[str, str], sdpa_device: str,
              sdpa_preset_name: str, run_ceilings: SessionCeilings) -> None:
    impl_name, case_id = sdpa_point
    case = cases_by_id(sdpa_preset_name)[case_id]
    benchmark.group = case.id
    check, ceilings = os.environ.get(REPEAT_ENV) != "1", os.environ.get(NO_CEILINGS_ENV) != "1"
    context = case_context(case, sdpa_device)  # shared by the case's implementations, so watched for writes
    context.mark(contents=check)  # a copy to compare only where the check makes the first calls
    try:  # a WrongResult (an AssertionError) fails the test before any timing
        point = prepare_point(impl_name, context, check=check)
    except BaseException as exc:
        context.put_back()  # the case as it was, for the implementations after it
        if isinstance(exc, Unsupported):
            pytest.skip(f"{impl_name}: {'; '.join(exc.reasons)}")
        raise
    said = context.put_back()  # its inputs written or torch's settings changed: its failure, not the next one's
    if said:
        raise WrongResult(f"{impl_name} {said}")
    config = request.config
    max_time = float(config.getoption("benchmark_max_time"))
    how = DeviceTiming(HOST, HOST_REASON)
    with call_context(point.fn):  # e.g. a pinned backend: entered once, outside the timed region
        memory = peak_memory(point.fn, sdpa_device) if check else None  # exact: the side's first process has it
        calls, other = 1, None
        if benchmark.disabled:  # plain pytest: one call, as a smoke test
            benchmark(point.fn)
        else:  # one sample = `calls` back-to-back calls between two clock readings, as in time_closure and asv
            if ceilings:
                run_ceilings.meter.sample_if_due()
            point.fn()  # warm-up
            target = point.fn
            if sdpa_device.startswith("cuda"):  # the benchmark's time is the device time: CUDA-graph replays
                graph, reason = graph_sampler(point.fn, sdpa_device, MIN_SAMPLE_S)
                how = DeviceTiming(GRAPH if graph else EAGER, reason)
                target = graph.fn if graph else point.fn
            least = int(config.getoption("benchmark_min_rounds"))
            calls, sample_s = round_sample(target, sdpa_device, max_time, least)  # calibrated, its reading confirmed
            rounds = min(max(least, int(max_time / max(sample_s, 1e-9))), MAX_ROUNDS)
            # CPU: the machine's speed next to each sample, recorded for the side-by-side verdict (bench.probe)
            probe = None if sdpa_device.startswith("cuda") else SpeedProbe(suite_timer(config, sdpa_device))
            before = contention.snapshot()
            benchmark.pedantic(target, iterations=calls, rounds=rounds, warmup_rounds=1, teardown=probe)
            other = contention.other_cpus(before)  # other processes' work beside the samples, as `run` records it
            if probe is not None:
                benchmark.extra_info.update(probe_s=probe.around(rounds), probe=PROBE_WORK)
    kind = sdpa_device.split(":")[0]  # what a result records, as `run`'s do (cuda:1 is cuda; the gate's rules read it)
    result = Result(impl_name, case, kind, "ok", peak_memory_bytes=memory, max_error=point.max_error,
                    error_tolerance=point.error_tolerance, kernels=point.kernels, compile_s=point.compile_s,
                    op=point.op, other_cpus=other)
    if benchmark.stats is not None:  # None when benchmarks are disabled (smoke mode)
        timed = summarize(list(benchmark.stats.stats.data), calls)
        if how.method == GRAPH:  # the eager time, and so the host overhead, goes to extra_info
            eager = time_closure(point.fn, sdpa_device, budget_s=max_time, warmup=1)
            result = result.timed(eager, DeviceTiming(GRAPH, "", timed))
        else:  # the eager samples are the only time (CPU), or the device time marked eager (CUDA)
            result = result.timed(timed, how)
        key = (case, sdpa_device)
        if impl_name == SPEED_BASELINE:
            _baseline_median[key] = result.speed_s
        result = result.with_speedup(_baseline_median.get(key))
    benchmark.extra_info.update(result.extra_info() | {"preset": sdpa_preset_name, "checked": check})
    if result.median_s is not None and ceilings:
        run_ceilings.timed.append((benchmark.extra_info, result))
