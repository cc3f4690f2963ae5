"""The measurement of one point: every outcome becomes a Result, interleaved rounds time implementations alike."""
from __future__ import annotations

import pytest

from sdpa_impls.bench.check import CaseContext
from sdpa_impls.bench.grid import Case
from sdpa_impls.bench.measure import Options, run_case_interleaved, run_point
from sdpa_impls.bench.result import with_speedups


def test_run_point_turns_every_outcome_into_a_result() -> None:
    ctx = CaseContext(Case(lq=64, lk=64, e=32), "cpu")
    fast = Options(budget_s=0.01, min_reps=2, warmup=1)
    ok = run_point("fused", ctx, fast)
    assert ok.status == "ok" and ok.median_s > 0 and ok.max_error <= ok.error_tolerance
    assert ok.peak_memory_bytes > 0 and ok.tflops > 0 and 0 < ok.roofline_pct
    skipped = run_point("torch_sdpa_cudnn", ctx, fast)
    assert skipped.status == "skipped" and "cuda" in skipped.reason
    unknown = run_point("does_not_exist", ctx, fast)
    assert unknown.status == "failed" and "unknown implementation" in unknown.reason
    base = run_point("torch_sdpa", ctx, fast)
    sped = {r.impl: r for r in with_speedups([base, ok, skipped])}
    assert sped["torch_sdpa"].speedup_vs_torch_sdpa == 1.0
    assert sped["fused"].speedup_vs_torch_sdpa == pytest.approx(base.median_s / ok.median_s)
    assert sped["torch_sdpa_cudnn"].speedup_vs_torch_sdpa is None


def test_interleaved_rounds_time_every_implementation_alike() -> None:
    """One call of each implementation per round: all get the same number of samples; a bad one is a Result."""
    names = ["naive", "torch_sdpa_cudnn", "fused", "does_not_exist", "chunked"]
    rows = run_case_interleaved(Case(lq=64, lk=64, e=32), names, "cpu",
                                Options(budget_s=0.0, min_reps=4, max_reps=4, warmup=1, memory=False))
    assert [r.impl for r in rows] == names  # in the order asked for
    by = {r.impl: r for r in rows}
    assert by["torch_sdpa_cudnn"].status == "skipped" and by["does_not_exist"].status == "failed"
    timed = [by[n] for n in ("naive", "fused", "chunked")]
    assert all(r.status == "ok" and len(r.samples) == 4 and r.max_error <= r.error_tolerance for r in timed)
    assert all(r.peak_memory_bytes is None for r in timed)  # memory=False: no memory pass
    more = run_case_interleaved(Case(lq=64, lk=64, e=32), ["fused", "naive"], "cpu",
                                Options(budget_s=0.02, min_reps=2, max_reps=50, warmup=0))
    assert all(sum(r.samples) >= 0.02 or len(r.samples) == 50 for r in more)  # the budget holds for the slowest too
    assert len(more[0].samples) == len(more[1].samples) and more[0].peak_memory_bytes > 0
