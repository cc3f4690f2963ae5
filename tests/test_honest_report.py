"""What a report must not hide from the reader choosing an implementation: times taken while other processes held
the CPUs, a roof an implementation can pass, a summary over different sets of cases, a win within the noise, and
how wrong a wrong point was."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import sdpa_impls
from sdpa_impls.bench import contention
from sdpa_impls.bench.check import CaseContext, WrongResult
from sdpa_impls.bench.grid import Case
from sdpa_impls.bench.measure import Options, failed, run_point
from sdpa_impls.protocol import Implementation, SDPAInputs
from sdpa_impls.report.markdown import write_markdown
from sdpa_impls.report.results import Sweep
from sdpa_impls.report.tables import SweepTable, summary, tables

FAST = Options(budget_s=0.01, min_reps=3, max_reps=5, warmup=1, memory=False)


class Shifted(Implementation):
    """torch's answer plus 0.05 everywhere: wrong in fp32 by far more than any tolerance."""

    name = "shifted"

    def forward(self, inp: SDPAInputs) -> torch.Tensor:
        return sdpa_impls.get("torch_sdpa")(inp.query, inp.key, inp.value, inp.attn_mask,
                                            is_causal=inp.is_causal) + 0.05


def _sweep(results: list, threads: int = 2, cpus: int = 2) -> Sweep:
    impls = list(dict.fromkeys(r.impl for r in results))
    cases = list(dict.fromkeys(r.case.id for r in results))
    return Sweep({"preset": "test", "impls": impls, "case_ids": cases, "options": {},
                  "machine": {"threads": threads, "cpus": cpus}}, results)


def test_another_process_work_is_read_and_this_process_own_is_not() -> None:
    """A child spinning for a second reads as the CPU it took (os.wait4's count: on a 2-core machine already busy,
    less than one CPU); this process spinning reads as none. Other work of the machine adds to both windows, and
    may move between them: three tries."""
    if contention.snapshot() is None:
        pytest.skip("this system keeps no /proc/stat")
    seen = []
    for _ in range(3):
        before = contention.snapshot()
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            pass
        own = contention.other_cpus(before)
        start = time.monotonic()
        before = contention.snapshot()
        child = subprocess.Popen([sys.executable, "-c", "import time\nend = time.monotonic() + 1.0\n"
                                  "while time.monotonic() < end: pass\n"])
        _, _, usage = os.wait4(child.pid, 0)
        other = contention.other_cpus(before)
        took = (usage.ru_utime + usage.ru_stime) / (time.monotonic() - start)  # CPUs the child used
        assert own is not None and other is not None
        seen.append((own, other, round(took, 2)))
        if took >= 0.3 and other - own >= 0.6 * took:
            break
    else:
        raise AssertionError(f"(this process's window, the child's, the child's CPUs) in three tries: {seen}")
    assert contention.contended(1.2, threads=2, cpus=2) and not contention.contended(1.2, threads=2, cpus=8)


def test_busy_points_are_marked_in_the_tables_and_said_at_the_top(tmp_path) -> None:
    ctx = CaseContext(Case(lq=64, lk=64, e=32), "cpu")
    quiet, busy = run_point("torch_sdpa", ctx, FAST), run_point("naive", ctx, FAST)
    assert quiet.status == busy.status == "ok" and quiet.other_cpus is not None  # read on every point (Linux)
    sweep = _sweep([replace(quiet, other_cpus=0.02), replace(busy, other_cpus=1.4)])
    report = write_markdown(tmp_path / "report.md", sweep, SweepTable(sweep), []).read_text()
    assert "**Busy CPUs**: 1 of 2 timed points" in report and "up to 1.4 CPUs" in report
    time_row = next(line for line in report.splitlines() if line.startswith(f"| {ctx.case.id} "))
    cells = [c.strip() for c in time_row.strip("|").split("|")]
    assert "busy (1)" not in cells[1] and cells[2].endswith("busy (1)")  # torch_sdpa's cell, naive's cell
    assert "(1) busy: other processes kept CPUs busy that torch's 2 threads needed" in report
    assert "Measure again on a quiet machine, or with fewer threads (OMP_NUM_THREADS=1)" in report
    alone = _sweep(sweep.results, threads=1, cpus=2)  # one thread: nothing fewer to suggest
    text = write_markdown(tmp_path / "r1.md", alone, SweepTable(alone), []).read_text()
    assert "torch's 1 thread needed" in text and "busy (1)" in text and "fewer threads" not in text, text
    error_row = report.split("### Max |error|")[1].split("###")[0]
    assert "busy" not in error_row  # the error does not depend on the machine's load
    roomy = _sweep(sweep.results, threads=2, cpus=8)  # 1.4 CPUs of other work beside 6 free ones: no contention
    assert "busy" not in write_markdown(tmp_path / "r2.md", roomy, SweepTable(roomy), []).read_text()


def test_the_summary_says_over_how_many_cases_and_counts_no_win_within_the_spread_or_alone() -> None:
    ctx = CaseContext(Case(lq=64, lk=64, e=32), "cpu")
    base = run_point("torch_sdpa", ctx, FAST)
    other = replace(base, impl="naive")
    second = replace(base, case=Case(lq=64, lk=64, e=16))
    rows = [replace(base, median_s=1.00, iqr_s=0.10), replace(other, median_s=0.97, iqr_s=0.10),  # a tie
            replace(second, median_s=1.0, iqr_s=0.01)]  # naive did not run the second case
    text = summary(SweepTable(_sweep(rows)))
    line = {row.split()[0]: row for row in text.splitlines()[3:]}
    assert "1.00× (2)" in line["torch_sdpa"] and "1.03× (1)" in line["naive"]
    assert "0 of 1 cases" in line["naive"] and "0 of 1 cases" in line["torch_sdpa"]  # a case run alone: no win
    apart = [rows[0], replace(rows[1], median_s=0.5, iqr_s=0.01), rows[2]]
    assert "1 of 1 cases" in {r.split()[0]: r for r in summary(SweepTable(_sweep(apart))).splitlines()[3:]}["naive"]
    alone = {r.split()[0]: r for r in summary(SweepTable(_sweep(rows[2:]))).splitlines()[3:]}["torch_sdpa"]
    assert alone.endswith("- (ran beside none)"), alone  # every other implementation skipped: nothing won
    assert "speed-up vs torch_sdpa (higher" in tables(SweepTable(_sweep(rows)), metrics=99)
    assert "speed-up vs torch_sdpa (higher" not in tables(SweepTable(_sweep([rows[1]])), metrics=99)  # all "-"


def test_a_wrong_point_keeps_its_error_and_the_limit_it_broke_and_is_named_once(tmp_path) -> None:
    ctx = CaseContext(Case(lq=64, lk=64, e=32), "cpu")
    with pytest.raises(WrongResult) as caught:
        ctx.check(Shifted())
    base = run_point("torch_sdpa", ctx, FAST)
    wrong = failed(replace(base, impl="shifted", max_error=None, error_tolerance=None), caught.value)
    assert wrong.status == "wrong" and wrong.max_error == pytest.approx(0.05, rel=0.05)
    assert wrong.error_tolerance is not None and wrong.max_error > wrong.error_tolerance
    sweep = _sweep([replace(base, other_cpus=0.0), wrong])
    report = write_markdown(tmp_path / "report.md", sweep, SweepTable(sweep), []).read_text()
    assert "- (1) shifted: max |error| of out vs fp64" in report and "shifted: shifted:" not in report


def test_a_bf16_point_on_a_cpu_is_held_to_the_faster_gemm_and_names_the_bound() -> None:
    """An implementation that computes bf16 in fp32 where that is faster would pass a bf16 GEMM roof."""
    ctx = CaseContext(Case(lq=64, lk=64, e=32, dtype="bf16"), "cpu")
    r = run_point("torch_sdpa", ctx, FAST)
    rate = r.tflops * 1e12
    judged = r.on_roofline({"gemm_flops_bf16": rate / 2, "gemm_flops_fp32": rate * 2, "copy_bytes_per_s": 1e15})
    assert judged.roofline_gemm == "gemm_flops_fp32" and judged.roofline_pct == pytest.approx(50.0)
    assert judged.roofline_bound == "gemm_flops_fp32"
    starved = r.on_roofline({"gemm_flops_bf16": rate * 4, "copy_bytes_per_s": 1.0})  # memory-bound
    assert starved.roofline_gemm == "gemm_flops_bf16" and starved.roofline_bound == "copy_bytes_per_s"


def test_compare_says_which_rows_had_their_time_judged(tmp_path) -> None:
    """A row whose time was not compared (other machine) or is the time reference does not read a bare "pass"."""
    from sdpa_impls.bench.machine import machine_info
    from sdpa_impls.gate.compare import compare_points
    from sdpa_impls.gate.config import load_config
    from sdpa_impls.gate.points import points_from_results
    from sdpa_impls.gate.render import render_verdict

    ctx = CaseContext(Case(lq=64, lk=64, e=32), "cpu")
    points = points_from_results([run_point(i, ctx, FAST) for i in ("torch_sdpa", "naive")])
    here = machine_info("cpu")
    config = load_config(None, start=tmp_path)  # the defaults: time_reference torch_sdpa
    same = render_verdict(compare_points(points, points, config, here, here))
    rows = {line.split()[0]: line for line in same.splitlines() if "[L64-E32-fp32-fwd]" in line}
    assert rows[f"torch_sdpa[{ctx.case.id}]"].endswith("pass, time is the reference")
    assert rows[f"naive[{ctx.case.id}]"].rstrip().endswith(" pass")
    other = render_verdict(compare_points(points, points, config, here, {**here, "cpu": "another CPU"}))
    assert other.count("pass, time not compared") == 2 and "absolute time rules refused" in other
    untimed = [replace(p, median_s=None, samples=()) if p.impl == "naive" else p for p in points]
    rows = {line.split()[0]: line for line in render_verdict(compare_points(points, untimed, config, here, here))
            .splitlines() if "[L64-E32-fp32-fwd]" in line}  # naive's time is missing: not called the reference
    assert rows[f"naive[{ctx.case.id}]"].rstrip().endswith("pass, time not compared"), rows


PLUGIN_CODE = '''
import sdpa_impls
from sdpa_impls.impls.naive import Naive


@sdpa_impls.register
class KernImpl(Naive):
    name = "kern_impl"
'''


def test_a_plugins_own_code_is_named_beside_sdpa_benchs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel author's sweep measures their plug-in: which revision of it ran is recorded, not only sdpa-bench's."""
    from sdpa_impls import registry
    from sdpa_impls.bench.machine import plugin_sources

    repo = tmp_path / "kern"
    repo.mkdir()
    (repo / "kern_plug.py").write_text(PLUGIN_CODE)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@localhost"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "kern"], check=True)
    commit = subprocess.run([*git, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True).stdout.strip()
    monkeypatch.syspath_prepend(str(repo))
    try:
        __import__("kern_plug")
        assert plugin_sources(["naive", "torch_sdpa"]) == ""  # built in: sdpa-bench's own revision says it
        assert plugin_sources(["naive", "kern_impl"]) == f"; plug-in kern_plug, git {commit} for kern_impl"
        (repo / "kern_plug.py").write_text(PLUGIN_CODE + "# an edit\n")
        assert plugin_sources(["kern_impl"]) == f"; plug-in kern_plug, git {commit} + uncommitted changes for kern_impl"
    finally:
        registry._REGISTRY.pop("kern_impl", None)
        sys.modules.pop("kern_plug", None)
