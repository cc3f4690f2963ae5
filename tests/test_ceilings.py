"""The ceilings a run is judged against are measured in that run: sampled again while it runs, never cached."""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sdpa_impls.bench.ceilings import MIN_GEMM_CALL_S, RunCeilings, ceiling_closure
from sdpa_impls.bench.timing import time_closure

ROOT = Path(__file__).resolve().parents[1]


def test_each_sample_adds_one_rate_per_ceiling_and_the_run_is_judged_on_their_median(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # nothing may be written outside the run: no cache file
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    meter = RunCeilings("cpu", ("gemm_flops_bf16", "copy_bytes_per_s"), every_s=3600.0)
    for _ in range(3):
        meter.sample()
    assert {k: len(v) for k, v in meter.samples.items()} == {"gemm_flops_bf16": 3, "copy_bytes_per_s": 3}
    assert meter.values() == {k: statistics.median(v) for k, v in meter.samples.items()}
    spread = meter.spread()["gemm_flops_bf16"]
    assert spread["min"] <= spread["median"] <= spread["max"] and spread["n"] == 3 and "x" in spread["shape"]
    assert not meter.sample_if_due()  # sampled just now; the next one is due in an hour
    cpu_clock = RunCeilings("cpu", ("copy_bytes_per_s",), clock=time.process_time)  # the points' clock, if given
    cpu_clock.sample()
    assert cpu_clock.samples["copy_bytes_per_s"][0] > 0
    assert list(tmp_path.iterdir()) == []
    resumed = RunCeilings("cpu", ("gemm_flops_bf16",), meter.meta()["ceiling_samples"])
    resumed.sample()
    assert len(resumed.samples["gemm_flops_bf16"]) == 4  # a resumed run continues its own samples


def test_the_gemm_ceiling_grows_until_one_call_is_long_enough_to_reach_its_rate() -> None:
    fn, flops, shape = ceiling_closure("cpu", "gemm_flops_fp32")
    n = int(shape.split("x")[0])
    assert flops == 2.0 * n**3
    took = time_closure(fn, "cpu", budget_s=0.0, min_reps=3, max_reps=3, warmup=1).median
    assert n == 4096 or took >= MIN_GEMM_CALL_S / 2  # half: this machine's speed moves between the two timings


def test_pytest_benchmark_points_are_judged_against_the_sessions_own_ceilings(tmp_path: Path) -> None:
    from sdpa_impls.bench.grid import Case
    from sdpa_impls.bench.result import Result

    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, "-m", "pytest", "tests/test_benchmarks.py", "-q", "-p", "no:cacheprovider",
                           "--benchmark-only", "--sdpa-preset", "smoke", "--sdpa-device", "cpu", "--sdpa-impl", "naive",
                           "--benchmark-max-time=0.01", f"--benchmark-json={out}",
                           "--benchmark-timer=time.process_time"],  # continuous's clock: the ceilings use it too
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    benches = json.loads(out.read_text())["benchmarks"]
    assert len(benches) == 5
    for b in benches:
        x = b["extra_info"]
        assert set(x["ceilings"]) == {"gemm_flops_fp32", "gemm_flops_bf16", "copy_bytes_per_s"}
        case = Case(**{f: x[f] for f in ("lq", "lk", "e", "ev", "dtype", "causal", "mode", "mask", "batch",
                                          "heads_q", "heads_kv")})
        judged = Result("naive", case, "cpu", "ok", median_s=x["median_s"]).on_roofline(x["ceilings"])
        assert x["roofline_pct"] == pytest.approx(judged.roofline_pct) and 0 < x["roofline_pct"]


def test_a_ceiling_rule_holds_an_implementation_to_a_fraction_of_the_runs_gemm() -> None:
    from sdpa_impls.gate.points import Point, ceiling_fraction
    from sdpa_impls.gate.rules import RatioRule

    rule = RatioRule.parse("ceiling: fused / gemm >= 0.5 when dtype == fp32 and L >= 1024")
    case = {"lq": 1024, "dtype": "fp32", "device": "cpu"}
    fast, slow = (Point("fused", cid, 1e-3, case=case, ceiling_fraction=f) for cid, f in (("a", 0.62), ("b", 0.41)))
    other = Point("fused", "c", 1e-3, case=case | {"dtype": "bf16"}, ceiling_fraction=0.1)  # not selected
    checks = {c.subject.rsplit("@ ", 1)[1]: c for c in rule.check([fast, slow, other], 0.01)}
    assert set(checks) == {"a", "b"} and checks["a"].status == "pass" and checks["b"].failed
    assert "41.0% of this run's GEMM ceiling, not >= 50%" in checks["b"].message
    unknown = rule.check([Point("fused", "d", 1e-3, case=case)], 0.01)  # a run without ceilings: not a pass
    assert [c.status for c in unknown] == ["n/a"]
    for bad in ("ceiling: fused / naive >= 0.5", "time: fused / gemm <= 2"):
        with pytest.raises(ValueError, match="ceiling: IMPL / gemm"):
            RatioRule.parse(bad)
    assert ceiling_fraction(0.1, "gemm_flops_fp32", {"gemm_flops_fp32": 2e11}) == pytest.approx(0.5)
    assert ceiling_fraction(0.1, "gemm_flops_fp32", None) is None
