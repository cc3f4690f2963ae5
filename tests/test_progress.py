"""The sweep's ETA: predicted from each implementation's throughput, also across a resume."""
from __future__ import annotations

import io

import pytest

from sdpa_impls.bench.grid import Case
from sdpa_impls.bench.measure import Options
from sdpa_impls.bench.result import Result
from sdpa_impls.cli.progress import Eta, Progress

SMALL = Case(lq=2048, lk=2048, e=64)
LARGE = Case(lq=8192, lk=8192, e=64)  # 16x the FLOPs of SMALL
OPTS = Options()


def ran(impl: str, case: Case, seconds: float) -> Result:
    return Result(impl=impl, case=case, device="cpu", status="ok", median_s=seconds)


def skipped(impl: str, case: Case) -> Result:
    return Result(impl=impl, case=case, device="cpu", status="skipped", reason="not installed")


def test_a_resumed_eta_predicts_from_the_points_finished_before():
    """After a resume the first point finished here may be a skip; the ETA of a large pending point must still
    come from that implementation's throughput on the earlier points, not from the skip's few milliseconds."""
    eta = Eta(OPTS)
    eta.resume([ran("naive", SMALL, 0.3), skipped("xformers", SMALL)])
    eta.add(skipped("xformers", LARGE), 0.01)
    call = 16 * 0.3  # the same throughput on 16x the FLOPs
    expected = OPTS.min_reps * call + OPTS.min_sample_s + (OPTS.warmup + 2) * call
    assert eta.remaining([("naive", LARGE)]) == pytest.approx(expected)

    fresh = Eta(OPTS)  # what the same run predicted before it learned from the finished points: the mean wall
    fresh.add(skipped("xformers", LARGE), 0.01)
    assert fresh.remaining([("naive", LARGE)]) == pytest.approx(0.01)


def test_a_skip_finished_before_a_resume_counts_as_about_no_time():
    eta = Eta(OPTS)
    eta.resume([skipped("xformers", SMALL)])
    eta.add(ran("naive", SMALL, 0.3), 10.0)
    assert eta.remaining([("xformers", LARGE)]) == pytest.approx(0.0)


def test_progress_counts_the_points_finished_before_a_resume():
    out = io.StringIO()
    progress = Progress(4, OPTS, [ran("naive", SMALL, 0.3), skipped("xformers", SMALL)], stream=out)
    progress.start([("naive", LARGE)])
    progress.finish(ran("naive", LARGE, 4.8), [("xformers", LARGE)])
    assert out.getvalue().startswith("[3/4  75%] L8192-E64-fp32-fwd  naive: ")
