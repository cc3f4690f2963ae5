"""Device time and host overhead, and samples taken again on a throttled GPU: what the CPU can check of them.

The throttle rule runs on a synthetic SM clock series (the rule is plain Python; on CUDA the series comes from
NVML). The graph-or-eager choice is checked where it is decided without a GPU: a closure that declares why it
cannot be captured, and the CPU's one time. The result fields are checked through every writer.
"""
from __future__ import annotations

import csv
import json
from dataclasses import replace

import pytest

from sdpa_impls.bench.check import CaseContext
from sdpa_impls.bench.clocks import MAX_RETRIES, RETRY_SLEEP_S, ClockLog, SMClock, sm_clock, steady_sample
from sdpa_impls.bench.devicetime import EAGER, GRAPH, HOST, HOST_REASON, DeviceTiming, graph_sampler, not_captured
from sdpa_impls.bench.grid import Case
from sdpa_impls.bench.measure import Options, run_case_interleaved, run_point
from sdpa_impls.bench.result import Result
from sdpa_impls.bench.timing import summarize
from sdpa_impls.report.csvfile import write_csv
from sdpa_impls.report.markdown import device_time

FAST = Options(budget_s=0.0, min_reps=2, max_reps=2, warmup=1, memory=False)


class Series:
    """A clock that reads the next value of a fixed series of MHz (two readings per sample: before, after)."""

    def __init__(self, values: list[float]) -> None:
        self.values = list(values)

    def __call__(self) -> float:
        return self.values.pop(0)


def sampler_of(times: list[float]):
    it = iter(times)
    return lambda: next(it)


def test_a_sample_below_three_quarters_of_the_max_clock_is_taken_again() -> None:
    clock, log, slept = SMClock(Series([1980, 1400, 1980, 1975]), 1980.0), ClockLog(), []
    got = steady_sample(sampler_of([2.0, 1.0]), clock, log, sleep=slept.append)
    assert got == 1.0  # the second sample: the first saw 1400 MHz (< 0.75 × 1980 = 1485)
    assert log.discarded == 1 and log.kept_throttled == 0 and slept == [RETRY_SLEEP_S]
    assert log.seen_mhz == [1975] and log.summary()["sm_clock_mhz"] == [1975, 1975, 1975]


def test_the_lower_reading_around_a_sample_decides_and_a_steady_clock_keeps_the_first() -> None:
    log = ClockLog()
    assert steady_sample(sampler_of([3.0]), SMClock(Series([1500, 1490]), 1980.0), log) == 3.0
    assert log.discarded == 0 and log.seen_mhz == [1490]  # 1490 >= 1485: kept


def test_retries_are_bounded_and_the_last_sample_is_kept_as_throttled() -> None:
    clock, log = SMClock(Series([900] * (2 * (MAX_RETRIES + 1))), 1980.0), ClockLog()
    got = steady_sample(sampler_of([float(i) for i in range(MAX_RETRIES + 1)]), clock, log, sleep=lambda s: None)
    assert got == float(MAX_RETRIES)
    assert log.discarded == MAX_RETRIES and log.kept_throttled == 1
    summary = log.summary()
    assert summary["clock_discarded"] == MAX_RETRIES and summary["sm_clock_max_mhz"] == 1980.0


def test_without_a_clock_a_sample_is_taken_once() -> None:
    log = ClockLog()
    assert steady_sample(sampler_of([4.0]), None, log) == 4.0
    assert log.summary() == {"sm_clock_mhz": None, "sm_clock_max_mhz": None, "clock_discarded": 0,
                             "clock_kept_throttled": 0}


def test_the_cpu_has_no_sm_clock_and_says_so() -> None:
    assert sm_clock("cpu") == (None, "no SM clock on the CPU")


def test_a_closure_that_declares_it_cannot_be_captured_is_timed_eagerly_with_its_reason() -> None:
    def fn() -> None:
        return None

    fn.not_capturable = "reads a length from the GPU (.item()) in every call"  # type: ignore[attr-defined]
    assert not_captured(fn) == "reads a length from the GPU (.item()) in every call"
    sampler, reason = graph_sampler(fn, "cuda", 1e-3)  # decided before anything touches a GPU
    assert sampler is None and reason == "reads a length from the GPU (.item()) in every call"
    assert not_captured(lambda: None) == ""


@pytest.mark.parametrize("interleaved", [False, True])
def test_a_cpu_point_has_one_time_and_its_fields_say_so(interleaved: bool) -> None:
    case = Case(lq=64, lk=64, e=16)
    r = run_case_interleaved(case, ["fused"], "cpu", FAST)[0] if interleaved else \
        run_point("fused", CaseContext(case, "cpu"), FAST)
    assert r.status == "ok", r.reason
    assert (r.device_time_method, r.device_time_reason) == (HOST, HOST_REASON)
    assert r.device_time_s is None and r.host_overhead_s is None and r.clocks is None and r.device_samples == ()
    assert r.speed_s == r.median_s and r.tflops == pytest.approx(case.flops() / r.median_s / 1e12)


def _gpu_like(method: str) -> Result:
    """A result as a CUDA point records it: eager samples of 3 ms, device samples of 2 ms (GRAPH) or none."""
    case = Case(lq=1024, lk=1024, e=64, dtype="bf16")
    eager = summarize([3e-3, 3e-3, 3.2e-3], 4)
    graph = summarize([2e-3, 2e-3, 2.1e-3], 5) if method == GRAPH else None
    how = DeviceTiming(method, "" if graph else "not captured in a CUDA graph: RuntimeError: sync", graph)
    clocks = {"sm_clock_mhz": [1700.0, 1980.0, 1980.0], "sm_clock_max_mhz": 1980.0, "clock_discarded": 2,
              "clock_kept_throttled": 0}
    return replace(Result("fused", case, "cuda", "ok").timed(eager, how), clocks=clocks)


def test_graph_device_time_drives_throughput_and_the_overhead_is_eager_minus_device() -> None:
    r = _gpu_like(GRAPH)
    assert r.median_s == 3e-3 and r.device_time_s == 2e-3 and r.host_overhead_s == pytest.approx(1e-3)
    assert r.device_samples == (2e-3, 2e-3, 2.1e-3) and r.device_calls_per_sample == 5
    assert r.tflops == pytest.approx(r.case.flops() / 2e-3 / 1e12)  # from the device time, not the eager one
    e = _gpu_like(EAGER)
    assert e.device_time_s == e.median_s and e.host_overhead_s is None and e.device_samples == ()
    assert e.device_time_reason.startswith("not captured in a CUDA graph")


def test_device_fields_reach_results_json_csv_report_and_extra_info(tmp_path) -> None:
    rows = [_gpu_like(GRAPH), replace(_gpu_like(EAGER), impl="chunked")]
    back = [Result.from_dict(json.loads(json.dumps(r.as_dict()))) for r in rows]
    assert back == rows  # results.json keeps every field, samples included
    with open(write_csv(tmp_path / "results.csv", rows), encoding="utf-8") as f:
        table = list(csv.DictReader(f))
    assert [t["device_time_method"] for t in table] == [GRAPH, EAGER]
    assert float(table[0]["device_time_s"]) == 2e-3 and float(table[0]["host_overhead_s"]) == pytest.approx(1e-3)
    assert table[1]["host_overhead_s"] == "" and table[1]["device_time_reason"].startswith("not captured")
    text = device_time(rows)
    assert "`chunked`: not captured in a CUDA graph: RuntimeError: sync (1 point: L1024-E64-bf16-fwd)" in text
    assert "1700–1980 MHz (maximum 1980 MHz); 4 samples taken again" in text
    info = rows[0].extra_info()
    assert info["device_time_s"] == 2e-3 and info["host_overhead_s"] == pytest.approx(1e-3)
    assert info["device_time_method"] == GRAPH and info["clocks"]["clock_discarded"] == 2
    assert device_time([Result("fused", rows[0].case, "cpu", "ok")]) == ""  # a CPU sweep has no such section


def test_an_older_results_file_without_device_fields_still_loads() -> None:
    d = _gpu_like(GRAPH).as_dict()
    for key in ("device_time_method", "device_time_reason", "device_time_s", "device_iqr_s", "device_samples",
                "device_calls_per_sample", "host_overhead_s", "clocks"):
        del d[key]
    r = Result.from_dict(d)
    assert r.device_time_s is None and r.speed_s == r.median_s
