"""`compare DIR_A DIR_B` on what real sweeps hold: a point that failed on both sides, sweeps of two presets, points
measured on busy CPUs, a sweep that `run` is still writing, and no earlier comparison left behind by an exit 2.

One real smoke sweep of naive, made once; each test copies it and edits its results.json as a run would have
written it otherwise."""
from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import shlex
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from sdpa_impls.bench.grid import preset
from sdpa_impls.cli import main
from sdpa_impls.gate.compare import compare_points
from sdpa_impls.gate.config import load_config
from sdpa_impls.gate.points import points_from_results
from sdpa_impls.report import results as store
from sdpa_impls.report.tables import SweepTable
from sdpa_impls.report.writer_lock import only_writer
from held import lock_held_elsewhere

FAST = ["--preset", "smoke", "--impl", "naive", "--device", "cpu", "--budget", "0.005", "--min-reps", "2",
        "--max-reps", "3", "--no-plots"]
OOM = "out of memory: tried to allocate 80.00 GiB"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished smoke sweep of naive, every point ok and none marked busy (other_cpus 0)."""
    out = tmp_path_factory.mktemp("sweep") / "a"
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        assert main(["run", *FAST, "--out", str(out)]) == 0
    doc = json.loads((out / store.RESULTS_FILE).read_text())
    assert {r["status"] for r in doc["results"]} == {"ok"}, doc["results"]
    for r in doc["results"]:  # this machine may be busy while the tests run: quiet, as each test then marks it
        r["other_cpus"] = 0.0
    (out / store.RESULTS_FILE).write_text(json.dumps(doc))
    return out


def edited(sweep: Path, to: Path, edit: Callable[[dict], None]) -> Path:
    """A copy of `sweep` at `to` whose results.json `edit` changed."""
    shutil.copytree(sweep, to)
    doc = json.loads((to / store.RESULTS_FILE).read_text())
    edit(doc)
    (to / store.RESULTS_FILE).write_text(json.dumps(doc))
    return to


def compare(*argv: str | Path) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `sdpa-bench compare ARGV` (run in a folder without a gate config)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["compare", *map(str, argv)])
    return code, out.getvalue(), err.getvalue()


def row(stdout: str, label: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith(label))


def ended(case_id: str, status: str, reason: str) -> Callable[[dict], None]:
    """An edit: naive's point on `case_id` ended `status` (nothing timed or sized; a wrong one keeps its error)."""
    def edit(doc: dict) -> None:
        r = next(r for r in doc["results"] if r["case"]["id"] == case_id)
        r.update(status=status, reason=reason, median_s=None, iqr_s=None, samples=[], tflops=None, gbps=None,
                 roofline_pct=None, roofline_gemm=None, roofline_bound=None, peak_memory_bytes=None, kernels=[])
        if status == "failed":
            r.update(max_error=None, error_tolerance=None)
        else:
            r.update(max_error=r["error_tolerance"] * 10)
    return edit


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # the built-in gate config, not the nearest pyproject.toml's
    return tmp_path


def test_a_point_that_failed_in_both_sweeps_is_no_change_and_one_ok_before_still_fails(sweep, in_tmp) -> None:
    case = "L128-E64-fp32-boolmask-fwd"
    a = edited(sweep, in_tmp / "a", ended(case, "failed", OOM))
    b = edited(sweep, in_tmp / "b", ended(case, "failed", OOM))
    code, out, _ = compare(a, b)
    assert code == 0 and "the gate's rules would PASS (0 failed check(s)" in out, out
    assert row(out, f"naive[{case}]").rstrip().endswith("  failed in both"), out
    assert "in-run rule(s) n/a, applying to no case that ran" in out and "--json" not in out, out  # compare has none
    assert "Failures:" not in out and (f"correctness naive[{case}]: status 'failed' in both the baseline and the "
                                       f"candidate, no change and nothing measured to compare: {OOM}") in out, out
    code, out, _ = compare(sweep, b)  # ok in A, failed in B: a change that fails, with B's reason
    assert code == 0 and "the gate's rules would FAIL (1 failed check(s)" in out, out
    assert f"correctness naive[{case}]: status 'failed', not 'ok': {OOM}" in out, out
    wrong = "max |error| of naive 1e-3 > tolerance 1e-4"
    code, out, _ = compare(edited(sweep, in_tmp / "wa", ended(case, "wrong", wrong)),
                           edited(sweep, in_tmp / "wb", ended(case, "wrong", wrong)))  # wrong twice: wrong still
    assert "would FAIL" in out and f"correctness naive[{case}]: status 'wrong', not 'ok': {wrong}" in out, out
    points = [points_from_results(store.load(d).results) for d in (a, b)]  # the gate's points (its sessions
    gate = compare_points(*points, load_config(None))  # record a failed point too): the same rule
    assert gate.exit_code == 0 and [r.verdict for r in gate.rows if r.case_id == case] == ["failed in both"]
    alone = compare_points(None, points[1], load_config(None))  # no baseline: the candidate's failure fails
    assert alone.exit_code == 1 and {(c.kind, c.subject) for c in alone.failures} == {("correctness", f"naive[{case}]")}
    ok = points_from_results(store.load(sweep).results)  # ... and so does one in a further run of the candidate
    later = compare_points(ok, ok, load_config(None), repeats=[points[1]])
    assert later.exit_code == 1 and {(c.kind, c.subject) for c in later.failures} == {("correctness", f"naive[{case}]")}


def _ci(doc: dict) -> None:
    """The sweep as a `run --preset ci` would have saved it: smoke's cases, and ci's own measured as its first."""
    doc["meta"]["preset"] = "ci"
    doc["meta"]["case_ids"] = [c.id for c in preset("ci")]
    ours = {r["case"]["id"] for r in doc["results"]}
    for c in (c for c in preset("ci") if c.id not in ours):
        doc["results"].append(copy.deepcopy(doc["results"][0]) | {"case": c.as_dict()})


def test_sweeps_of_two_presets_compare_the_cases_they_share_and_call_none_missing(sweep, in_tmp) -> None:
    ci = edited(sweep, in_tmp / "ci", _ci)
    only_ci = sorted({c.id for c in preset("ci")} - {c.id for c in preset("smoke")})
    assert only_ci  # else this test tells nothing
    code, out, err = compare(ci, sweep)
    assert code == 0 and "would PASS (0 failed check(s)" in out and "missing from" not in out, out
    assert (f"A and B ran different presets (A, {ci}: ci; B, {sweep}: smoke): only the {len(preset('smoke'))} case(s) "
            f"they share are compared; the case(s) one alone has ({len(only_ci)} of ci's) are left out, not "
            "missing.") in out, out
    assert not any(f"naive[{c}]" in out for c in only_ci) and "note" not in err, (out, err)

    def ci_alone(doc: dict) -> None:
        _ci(doc)
        doc["meta"]["case_ids"] = only_ci
        doc["results"] = [r for r in doc["results"] if r["case"]["id"] in only_ci]
    code, _, err = compare(sweep, edited(sweep, in_tmp / "ci-alone", ci_alone))  # nothing shared: exit 2 still
    assert code == 2 and "nothing comparable: they ran different presets (smoke and ci) and share no case" in err, err


def test_a_whole_sweep_and_one_shard_of_it_compare_the_shard_cases_and_call_none_missing(sweep, in_tmp) -> None:
    ids = [c.id for c in preset("smoke")]
    mine = ids[0::2]  # run --shard 1/2: the cases whose index is 0 mod 2
    assert len(mine) < len(ids)

    def shard(doc: dict) -> None:
        doc["meta"] |= {"shard": "1/2", "case_ids": mine}
        doc["results"] = [r for r in doc["results"] if r["case"]["id"] in mine]
    one = edited(sweep, in_tmp / "shard-1of2", shard)
    code, out, _ = compare(sweep, one)
    assert code == 0 and "would PASS (0 failed check(s)" in out and "missing from" not in out, out
    assert (f"A and B ran different shards of a preset (A, {sweep}: smoke; B, {one}: smoke shard 1/2): only the "
            f"{len(mine)} case(s) they share are compared; the case(s) one alone has ({len(ids) - len(mine)} of "
            "smoke's) are left out, not missing.") in out, out


def test_points_measured_on_busy_cpus_are_counted_per_side_as_the_report_marks_them(sweep, in_tmp) -> None:
    code, out, _ = compare(sweep, edited(sweep, in_tmp / "quiet", lambda doc: None))
    assert code == 0 and "busy CPUs" not in out, out

    def busy(doc: dict) -> None:
        cpus = doc["meta"]["machine"].get("cpus") or 1
        for r in doc["results"][:2]:
            r["other_cpus"] = float(cpus + 1)  # every CPU's worth taken by other work, and one more
    b = edited(sweep, in_tmp / "busy", busy)
    layout = SweepTable(store.load(b))
    assert sum(layout.busy(r) for r in layout.results) == 2  # what b's report marks `busy`
    timed = len(store.load(b).results)
    code, out, _ = compare(sweep, b)
    assert code == 0 and (f"busy CPUs: A 0 of {timed}, B 2 of {timed} timed points were measured while other "
                          "processes kept busy CPUs that torch's threads needed (marked `busy` in each sweep's "
                          "report)") in out, out


def test_a_busy_point_that_only_one_side_measured_is_not_counted_as_compared(sweep, in_tmp) -> None:
    """The busy count is of the points compared: a point B measured on busy CPUs that A lacks is left out of it."""
    first = store.load(sweep).results[0]

    def quiet(doc: dict) -> None:
        for r in doc["results"]:
            r["other_cpus"] = 0.0

    def without_first(doc: dict) -> None:
        quiet(doc)
        doc["results"] = doc["results"][1:]

    def first_busy(doc: dict) -> None:
        quiet(doc)
        doc["results"][0]["other_cpus"] = float((doc["meta"]["machine"].get("cpus") or 1) + 1)
    a, b = edited(sweep, in_tmp / "a", without_first), edited(sweep, in_tmp / "b", first_busy)
    assert SweepTable(store.load(b)).busy(store.load(b).results[0])  # b's report marks it `busy`
    code, out, _ = compare(a, b)
    assert code == 0 and f"{first.impl}[{first.case.id}]" in out and "busy CPUs" not in out, out


def test_an_exit_2_leaves_no_earlier_comparison_behind(sweep, in_tmp) -> None:
    verdict = in_tmp / "v.md"
    for other in (in_tmp / "nowhere", sweep):  # no sweep there; a sweep against itself
        verdict.write_text("## sdpa-bench compare: the gate's rules would FAIL (an earlier comparison)\n")
        code, _, err = compare(sweep, other, "--markdown", verdict)
        assert code == 2 and not verdict.exists(), err
    code, _, _ = compare(sweep, edited(sweep, in_tmp / "b", lambda doc: None), "--markdown", verdict)
    assert code == 0 and "sdpa-bench compare: the gate's rules would PASS" in verdict.read_text()


def test_a_sweep_with_no_measured_point_is_named_on_either_side(sweep, in_tmp) -> None:
    """Every point skipped: "nothing comparable, no benchmark of the baseline is in the candidate" had blamed the
    other sweep where the empty one was the baseline."""
    def skipped(doc: dict) -> None:
        for r in doc["results"]:
            r.update(status="skipped", reason="not here", median_s=None, iqr_s=None, samples=[])
    empty = edited(sweep, in_tmp / "empty", skipped)
    for a, b in ((empty, sweep), (sweep, empty)):
        code, _, err = compare(a, b)
        assert code == 2 and err == f"sdpa-bench compare: error: {empty} holds no measured point to compare\n", err


def test_a_sweep_that_run_is_still_writing_is_said_to_be_so_not_to_need_a_resume(sweep, in_tmp) -> None:
    def unfinished(doc: dict) -> None:
        doc["results"] = doc["results"][:-1]
    live = edited(sweep, in_tmp / "live", unfinished)
    planned = len(store.load(sweep).results)
    with only_writer(live):  # as `run --out live` holds it while it measures
        code, _, err = compare(sweep, live)
    assert code == 0 and (f"note: {live} (process {os.getpid()}): still being written by `run` ({planned - 1} of "
                          f"{planned} points so far)") in err and "resume" not in err, err
    code, _, err = compare(sweep, live)  # the run gone, the sweep unfinished: resume it
    assert code == 0 and f"note: {live} is unfinished ({planned - 1} of {planned} points)" in err, err


def test_a_report_of_a_sweep_another_process_still_measures_does_not_ask_for_a_resume(sweep, in_tmp) -> None:
    """`sdpa-bench report DIR` while `run --out DIR` measures: the resume it had suggested would be refused."""
    def unfinished(doc: dict) -> None:
        doc["results"] = doc["results"][:-1]
    live = edited(sweep, in_tmp / "live", unfinished)
    with lock_held_elsewhere(live) as holder:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            assert main(["report", str(live), "--no-plots"]) == 0
    text = (live / "report.md").read_text()
    assert f"`sdpa-bench run` (process {holder}) is still measuring it, and rewrites this report" in text, text
    assert "--resume" not in text
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["report", str(live), "--no-plots"]) == 0  # the run gone, the sweep unfinished: resume it
    assert f"continue with `sdpa-bench run --out {live} --resume`" in (live / "report.md").read_text()


def test_the_resume_a_report_asks_for_runs_as_printed_where_the_folder_starts_with_a_dash(sweep, tmp_path,
                                                                                         monkeypatch) -> None:
    """`--out -x --resume` is refused by argparse (expected one argument): the command is printed as `--out=-x`."""
    def unfinished(doc: dict) -> None:
        doc["results"] = doc["results"][:-1]
    monkeypatch.chdir(tmp_path)
    edited(sweep, tmp_path / "-x", unfinished)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["report", "--no-plots", "--", "-x"]) == 0
    said = next(line for line in (tmp_path / "-x" / "report.md").read_text().splitlines() if "**Incomplete**" in line)
    command = said.split("continue with `")[1].split("`")[0]
    assert command == "sdpa-bench run --out=-x --resume", said
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(shlex.split(command)[1:]) == 0
    assert store.load(tmp_path / "-x").complete
