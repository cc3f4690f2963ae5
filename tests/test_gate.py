"""The CI gate: real pytest-benchmark runs (A/A passes, injected slowdown / memory / in-run ratio fail) and every
unusable input answered with exit 2 and a message naming it.

The real runs measure time: run this file under `flock /tmp/sdpa-measure.lock` on a shared machine.
"""
from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from plugin_env import build_plugin_env, run_gate_benchmarks
from sdpa_impls.cli import main
from sdpa_impls.errors import GateInputError
from sdpa_impls.gate.compare import compare_points
from sdpa_impls.gate.config import load_config
from sdpa_impls.gate.points import Point, load_points
from sdpa_impls.gate.render import render_verdict
from sdpa_impls.registry import names
from sdpa_impls.gate.rules import FAIL, NA, PASS, MemoryRule, RatioRule, TimeRule

ROOT = Path(__file__).resolve().parents[1]
# test_tunable is naive repeated: in units of naive's time on the same case and run, a busier machine during one
# run (other work on these 2 cores) cancels out, and the comparison is about the injected work. These tests check
# the gate's mechanics on a CI machine shared with other jobs, so they inject +100 % work and judge at 25 %;
# the false-alarm and catch rates of the 15 % default are measured in
# docs/records/2026-11-21-epyc-gate-false-alarms.md, not asserted here.
REF_NAIVE = 'time_reference = "naive"\ntime = "median:25%"\n'
SLOWDOWN = "2.0"


def gate(tmp_path: Path, *args: str | Path, config: str | None = None) -> tuple[int, str, str]:
    """Run `sdpa-bench gate` in this process from `tmp_path`, with an optional TOML config text.

    A traceback would fail the test: user errors must come back as exit 2 with a message.
    """
    argv = ["gate", *map(str, args)]
    if config is not None:
        (tmp_path / "gate.toml").write_text(config)
        argv += ["--config", str(tmp_path / "gate.toml")]
    out, err = io.StringIO(), io.StringIO()
    here = Path.cwd()
    os.chdir(tmp_path)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    finally:
        os.chdir(here)
    return code, out.getvalue(), err.getvalue()


def test_command_line_entry_point(tmp_path: Path) -> None:
    """`python -m sdpa_impls gate` as a user types it: exit 2 and one line naming the file, no traceback."""
    (tmp_path / "cut.json").write_text('{"benchmarks": [')
    out = subprocess.run([sys.executable, "-m", "sdpa_impls", "gate", "--candidate", "cut.json"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        "sdpa-bench gate: error: cut.json: not valid JSON, truncated or corrupt (Expecting value at line 1 column 17)"]


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One real pytest-benchmark session of a project's own benchmark beside the suite's (naive, smoke), saved twice:
    `both` with --benchmark-json (raw samples always kept) and `unsampled` with --benchmark-autosave (no raw samples,
    as pytest-benchmark saves without --benchmark-save-data)."""
    root = tmp_path_factory.mktemp("gate-session")
    (root / "test_mine.py").write_text("def test_my_kernel(benchmark):\n    benchmark(sum, range(100))\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_mine.py", "--pyargs",
                           "sdpa_impls.suite.test_sdpa", "--benchmark-only", "--sdpa-preset", "smoke", "--sdpa-impl",
                           "naive", "--benchmark-max-time", "0.01", "--benchmark-json", "both.json",
                           "--benchmark-autosave"], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "6 passed" in done.stdout, done.stdout + done.stderr
    saved = list(root.glob(".benchmarks/*/0001_*.json"))
    assert len(saved) == 1, saved
    return {"both": root / "both.json", "unsampled": saved[0]}


def edited(source: Path, target: Path, edit) -> Path:
    """`target`: a copy of the pytest-benchmark file `source` after `edit(doc)`."""
    doc = json.loads(source.read_text())
    edit(doc)
    target.write_text(json.dumps(doc))
    return target


def suite_benchmark(doc: dict) -> dict:
    """The first benchmark of sdpa-bench's suite in a pytest-benchmark document, which may hold others."""
    return next(b for b in doc["benchmarks"] if "test_sdpa[" in b["fullname"])


def test_a_session_with_other_benchmarks_is_gated_on_the_suites_alone(session: dict[str, Path],
                                                                      tmp_path: Path) -> None:
    """A project's own benchmarks saved in the same pytest-benchmark file as the suite's: the gate judges the
    suite's, names what it left out, and a file with none of the suite's is one clear error."""
    (tmp_path / "both.json").write_text(session["both"].read_text())
    (tmp_path / "base.json").write_text((tmp_path / "both.json").read_text())
    code, out, err = gate(tmp_path, "--baseline", "base.json", "--candidate", "both.json", "--markdown",
                          "new/folder/verdict.md")  # a folder made for it, as compare and continuous do
    assert code == 0 and "naive" in out and (tmp_path / "new/folder/verdict.md").is_file(), out + err
    for path in ("base.json", "both.json"):
        left = f"{path}: left out 1 benchmark not from sdpa-bench's suite (test_mine.py::test_my_kernel)"
        assert left in err, err
    mine = json.loads((tmp_path / "both.json").read_text())
    mine["benchmarks"] = [b for b in mine["benchmarks"] if "test_my_kernel" in b["fullname"]]
    (tmp_path / "mine.json").write_text(json.dumps(mine))
    code, out, err = gate(tmp_path, "--candidate", "mine.json")
    assert code == 2 and err.strip().splitlines() == [
        "sdpa-bench gate: error: mine.json: nothing comparable, none of its 1 benchmarks comes from sdpa-bench's "
        "suite (e.g. test_mine.py::test_my_kernel)"], err
    with pytest.raises(GateInputError, match="not written by the sdpa-bench suite"):  # the strict form stays
        load_points(tmp_path / "both.json")

    def own_impl(doc: dict) -> None:  # a project's benchmark that records an "impl" of its own is still its own
        next(b for b in doc["benchmarks"] if "test_my_kernel" in b["fullname"])["extra_info"] = {"impl": "mine"}
    edited(session["both"], tmp_path / "impl.json", own_impl)
    code, out, err = gate(tmp_path, "--baseline", "base.json", "--candidate", "impl.json")
    assert code == 0 and "impl.json: left out 1 benchmark not from sdpa-bench's suite" in err, out + err


def test_a_verdict_that_cannot_be_delivered_leaves_no_answer_file(session: dict[str, Path], tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """`gate --markdown F --json J > /dev/full`, or a J that cannot be written after F was: exit 2 and one line, and
    neither file is left for a CI step to post as this run's verdict (the files are written first: a reader that goes
    away, `| head`, keeps them)."""
    (tmp_path / "both.json").write_text(session["both"].read_text())
    # stdout buffered, as under tox or a CI: what it still holds when the command ends is flushed at exit (exit 120)
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    with open("/dev/full", "w") as full:  # noqa: PTH123 (a stdout that takes nothing)
        done = subprocess.run([sys.executable, "-m", "sdpa_impls", "gate", "--candidate", "both.json", "--markdown",
                               "v.md", "--json", "v.json"], cwd=tmp_path, stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=120, env=buffered)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1] == ("sdpa-bench gate: error: cannot write to standard output (No "
                                                    "space left on device)"), done.stderr
    assert not (tmp_path / "v.md").exists() and not (tmp_path / "v.json").exists()
    code, out, _ = gate(tmp_path, "--candidate", "both.json", "--markdown", "v.md", "--json", "v.json")
    assert code == 0 and (tmp_path / "v.md").is_file() and json.loads((tmp_path / "v.json").read_text()), out
    (tmp_path / "v.md").unlink()
    (tmp_path / "v.json").unlink()
    from sdpa_impls.cli import answers
    real = answers.write

    def refused(path: str, text: str) -> None:
        if path.endswith("v.json"):
            raise GateInputError(f"{path}: cannot write (No space left on device)")
        real(path, text)

    monkeypatch.setattr(answers, "write", refused)
    code, out, err = gate(tmp_path, "--candidate", "both.json", "--markdown", "v.md", "--json", "v.json")
    assert code == 2 and "v.json: cannot write (No space left" in err and "PASS" in out.upper(), out + err
    assert not (tmp_path / "v.md").exists() and not (tmp_path / "v.json").exists()


def test_a_markdown_verdict_of_many_benchmarks_fits_in_one_pr_comment(session: dict[str, Path],
                                                                     tmp_path: Path) -> None:
    """A verdict of 800 benchmarks (the suite's five cases copied) with one wrong answer: the Markdown lists that
    row and counts the passes (GitHub refuses a comment over 65,536 characters, and nothing is posted); stdout
    keeps every row."""
    def copies(wrong: str | None):
        def edit(doc: dict) -> None:
            suite = [b for b in doc["benchmarks"] if "test_sdpa[" in b["fullname"]]
            doc["benchmarks"] = []
            for i in range(160):
                for b in copy.deepcopy(suite):
                    b["extra_info"]["case"] += f"-copy{i}"
                    b["name"], b["fullname"] = (f"{b[k][:-1]}-copy{i}]" for k in ("name", "fullname"))
                    if f"{b['extra_info']['impl']}[{b['extra_info']['case']}]" == wrong:
                        b["extra_info"]["max_error"] = 10 * b["extra_info"]["error_tolerance"]
                    doc["benchmarks"].append(b)
        return edit
    edited(session["both"], tmp_path / "base.json", copies(None))
    case = suite_benchmark(json.loads(session["both"].read_text()))["extra_info"]["case"]
    wrong = f"naive[{case}-copy77]"
    edited(session["both"], tmp_path / "cand.json", copies(wrong))
    code, out, err = gate(tmp_path, "--baseline", "base.json", "--candidate", "cand.json", "--markdown", "v.md")
    md = (tmp_path / "v.md").read_text()
    assert code == 1 and len(md.encode()) <= 65536 and f"`{wrong}`" in md, (len(md.encode()), err)
    assert "799 more benchmark(s) passed, not listed (nor what was not checked on them)" in md and "-copy76]" not in md
    assert len(out.encode()) > 65536 and sum(line.startswith("naive[") for line in out.splitlines()) == 800


def test_an_interrupted_session_is_no_verdict(session: dict[str, Path], tmp_path: Path) -> None:
    """A session stopped inside one of the suite's benchmarks saves it with no extra_info, and none of the ones after
    it: exit 2 naming the benchmark, as a candidate or a baseline, never exit 1 for the benchmarks it did not reach
    (they read as "missing", a regression to CI)."""
    def interrupted(doc: dict) -> None:
        suite_benchmark(doc)["extra_info"] = {}
    edited(session["both"], tmp_path / "int.json", interrupted)
    name = suite_benchmark(json.loads((tmp_path / "int.json").read_text()))["fullname"]
    for args in (("--candidate", "int.json"), ("--baseline", session["both"], "--candidate", "int.json"),
                 ("--baseline", "int.json", "--candidate", session["both"])):
        code, out, err = gate(tmp_path, *args)
        assert code == 2 and not out, out + err
        assert err.splitlines() == [f"sdpa-bench gate: error: int.json: the pytest session that wrote it was "
                                    f"interrupted, inside {name} (saved with no extra_info), so the benchmarks after "
                                    "it are missing; run the suite to the end"], err


# two implementations for one session each, registered by a conftest.py beside it: one answers wrong on the causal
# case, the other stops the session there (Ctrl-C while the point is checked: after benchmarks saved, before its own)
FAILING_IMPLS = """
import os, signal
import sdpa_impls
from sdpa_impls.impls.naive import Naive


@sdpa_impls.register
class Wrongy(Naive):
    name = "wrongy"

    def forward(self, inp):
        out = super().forward(inp)
        return out * 1.1 if inp.is_causal else out


@sdpa_impls.register
class Stopper(Naive):
    name = "stopper"

    def forward(self, inp):
        if inp.is_causal:
            os.kill(os.getpid(), signal.SIGINT)
        return super().forward(inp)
"""


def test_a_point_that_failed_or_a_session_that_stopped_is_read_from_the_file(tmp_path: Path) -> None:
    """A point that answers wrong saves no benchmark, and nothing in pytest-benchmark's file said that a session
    stopped between two benchmarks (Ctrl-C while a point was checked, -x): the gate passed both. The suite's plug-in
    records them in the file: a wrong point fails with its error, a session that stopped early is no verdict."""
    (tmp_path / "conftest.py").write_text(FAILING_IMPLS)

    def session(impl: str, *more: str) -> subprocess.CompletedProcess:
        (tmp_path / "s.json").unlink(missing_ok=True)
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs",
                               "sdpa_impls.suite.test_sdpa", "--benchmark-only", "--sdpa-preset", "smoke",
                               "--sdpa-impl", impl, "--benchmark-max-time", "0.01", "--benchmark-json", "s.json",
                               "--benchmark-save-data", *more], cwd=tmp_path, capture_output=True, text=True,
                              timeout=300)

    done = session("wrongy")
    assert done.returncode == 1 and "1 failed, 4 passed" in done.stdout, done.stdout + done.stderr
    (tmp_path / "w.json").write_bytes((tmp_path / "s.json").read_bytes())
    code, out, err = gate(tmp_path, "--candidate", "w.json", "--json", "v.json")
    failures = json.loads((tmp_path / "v.json").read_text())["failures"]
    assert code == 1 and [(f["kind"], f["subject"][:12]) for f in failures] == [("correctness", "wrongy[L128-")], out
    assert "causal" in failures[0]["subject"] and "status 'wrong', not 'ok': WrongResult: wrongy: max |error| of " \
        "out vs fp64 is" in failures[0]["message"], failures
    for impl, more, why in (("stopper", (), "(interrupted)"), ("wrongy", ("-x",), "(stopping after 1 failures; "
                                                                                 "wrongy[L128-E64-bf16-causal-fwd]")):
        done = session(impl, *more)
        assert done.returncode in (1, 2) and (tmp_path / "s.json").is_file(), done.stdout + done.stderr
        for args in (("--candidate", "s.json"), ("--baseline", "s.json", "--candidate", "w.json")):
            code, out, err = gate(tmp_path, *args)
            assert code == 2 and f"s.json: the pytest session that wrote it stopped before its end {why}" in err, err
    done = session("wrongy", "-x", "-k", "L128-E64-fp32-fwd or causal")  # -x on the last point: none left unrun
    assert done.returncode == 1 and "1 failed, 1 passed" in done.stdout, done.stdout + done.stderr
    code, out, err = gate(tmp_path, "--candidate", "s.json")
    assert code == 1 and "status 'wrong', not 'ok'" in out, out + err


def test_an_unusable_input_leaves_no_earlier_verdict_behind(tmp_path: Path) -> None:
    """Exit 2 is no verdict: a --json or --markdown file of an earlier run in a kept workspace was left as it was
    (still FAIL, or PASS), for a CI step to read as this run's answer."""
    (tmp_path / "v.json").write_text('{"verdict": "FAIL", "exit_code": 1, "rows": []}\n')
    (tmp_path / "v.md").write_text("## sdpa-bench gate: FAIL (1 failed check(s); config: defaults)\n")
    mine = tmp_path / "README.md"  # a file that is no answer, named by mistake: refused before anything, kept
    mine.write_text("# my project\n")
    code, out, err = gate(tmp_path, "--candidate", "missing.json", "--json", "v.json", "--markdown", "README.md")
    assert code == 2 and "--markdown README.md: a file that holds no earlier answer of sdpa-bench" in err, err
    assert mine.read_text() == "# my project\n" and (tmp_path / "v.json").is_file()
    code, out, err = gate(tmp_path, "--candidate", "missing.json", "--json", "v.json", "--markdown", "v.md")
    assert code == 2 and "missing.json: no such file" in err, err
    assert not (tmp_path / "v.json").exists() and not (tmp_path / "v.md").exists()
    kept = tmp_path / "notes.md"  # --markdown through a link: the link goes, not the file it names
    kept.write_text("mine\n")
    (tmp_path / "l.md").symlink_to(kept)
    code, out, err = gate(tmp_path, "--candidate", "missing.json", "--markdown", "l.md")
    assert code == 2 and kept.read_text() == "mine\n" and not (tmp_path / "l.md").is_symlink(), err
    (tmp_path / "out.md").symlink_to(os.devnull)  # as /dev/stdout is a link to a descriptor: where answers go, kept
    code, out, err = gate(tmp_path, "--candidate", "missing.json", "--markdown", "out.md")
    assert code == 2 and os.readlink(tmp_path / "out.md") == os.devnull and Path(os.devnull).is_char_device(), err
    for name in ("a.json", "b.json"):  # two empty files are two unreadable runs, not one run given twice
        (tmp_path / name).write_text("")
    code, out, err = gate(tmp_path, "--baseline", "a.json", "--candidate", "b.json")
    assert code == 2 and "same bytes" not in err and "(the file is empty)" in err, err


def test_an_output_through_a_link_to_a_file_not_yet_made_is_written_there(session: dict[str, Path],
                                                                          tmp_path: Path) -> None:
    """A link to a file a run is to make (where a CI step reads the answer) was refused as "File exists"."""
    (tmp_path / "v.md").symlink_to(tmp_path / "answers" / "v.md")
    code, out, err = gate(tmp_path, "--candidate", session["both"], "--markdown", "v.md")
    made = Path(os.path.realpath(tmp_path)) / "answers" / "v.md"
    assert code == 2 and f"v.md: cannot write, a link to {made} (No such file" in err, err
    (tmp_path / "answers").mkdir()
    code, out, err = gate(tmp_path, "--candidate", session["both"], "--markdown", "v.md")
    assert code == 0 and "naive" in (tmp_path / "answers" / "v.md").read_text(), out + err
    (tmp_path / "loop.md").symlink_to("loop2.md")
    (tmp_path / "loop2.md").symlink_to("loop.md")
    (tmp_path / "dir.md").symlink_to("newdir/")  # a folder's name: the write would find no file to make
    for name, why in (("loop.md", "a loop of links"), ("dir.md", "a folder")):
        code, out, err = gate(tmp_path, "--candidate", session["both"], "--markdown", name)
        assert code == 2 and err.rstrip().endswith(f"({why})"), err


def test_a_run_against_itself_or_another_preset_is_no_verdict(session: dict[str, Path], tmp_path: Path) -> None:
    """The same file as baseline and candidate passed whatever it held, and beside a slower candidate run hid its
    regression; runs of two presets failed on every case of one alone, as "missing". Both are exit 2, naming why
    (another preset is judged on the shared cases where allow_missing is set)."""
    def slower(doc: dict) -> None:  # every sample above the slowest of its own: a regression on a busy machine too
        for b in doc["benchmarks"]:
            top = 3 * max(b["stats"]["data"])
            b["stats"]["median"] += top
            b["stats"]["data"] = [top + v for v in b["stats"]["data"]]
    slow = edited(session["both"], tmp_path / "slow.json", slower)
    code, out, err = gate(tmp_path, "--baseline", session["both"], "--candidate", slow)
    assert code == 1, out + err  # the regression the next calls must not hide
    for args in (("--baseline", session["both"], "--baseline", slow, "--candidate", slow),
                 ("--baseline", session["both"], "--candidate", slow, "--candidate", session["both"]),
                 ("--baseline", slow, "--candidate", tmp_path / "." / "slow.json")):
        code, out, err = gate(tmp_path, *args)
        assert code == 2 and not out, out + err
        assert err.startswith("sdpa-bench gate: error: ") and "given as both --baseline and --candidate" in err, err
    def faster(doc: dict) -> None:  # 300 times faster: its ratio said, not rounded to ×0.00
        for b in doc["benchmarks"]:
            b["stats"]["median"] /= 300
            b["stats"]["data"] = [v / 300 for v in b["stats"]["data"]]
    code, out, err = gate(tmp_path, "--baseline", session["both"], "--candidate",
                          edited(session["both"], tmp_path / "fast.json", faster), config="time_reference = ''\n")
    assert " ×0.0033 " in out and " ×0.00 " not in out, out + err

    def other_preset(doc: dict) -> None:
        for b in doc["benchmarks"]:
            if "extra_info" in b and "preset" in b["extra_info"]:
                b["extra_info"]["preset"] = "ci"
    ci = edited(session["both"], tmp_path / "ci.json", other_preset)
    code, out, err = gate(tmp_path, "--baseline", ci, "--candidate", session["both"])
    assert code == 2 and not out, out + err
    assert f"{session['both']} ran the preset smoke and {ci} ci: their cases differ" in err, err
    smoke = tmp_path / "smoke.json"  # a further run of either tree, or candidates alone, named by its own file
    smoke.write_text(session["both"].read_text())
    for args in (("--candidate", session["both"], "--candidate", ci),
                 ("--baseline", smoke, "--candidate", session["both"], "--candidate", ci)):
        code, out, err = gate(tmp_path, *args)
        assert code == 2 and f"{session['both']} ran the preset smoke and {ci} ci: their" in err, err
    code, out, err = gate(tmp_path, "--baseline", ci, "--candidate", session["both"], config="allow_missing = true\n")
    assert code == 0 and "PASS" in out, out + err


def test_a_file_saved_without_raw_samples_is_judged_by_the_factor_alone(session: dict[str, Path],
                                                                        tmp_path: Path) -> None:
    """pytest-benchmark's --benchmark-autosave without --benchmark-save-data keeps no stats.data: such a file is a
    usable baseline or candidate, and a slowdown is judged by the factor alone, saying so."""
    unsampled, sampled = session["unsampled"], session["both"]
    assert all("data" not in b["stats"] for b in json.loads(unsampled.read_text())["benchmarks"])

    def slower(doc: dict) -> None:
        for b in doc["benchmarks"]:
            b["stats"]["median"] *= 2
            if "data" in b["stats"]:
                b["stats"]["data"] = [2 * v for v in b["stats"]["data"]]

    code, out, err = gate(tmp_path, "--candidate", unsampled)
    assert code == 0 and "sdpa-bench gate: PASS" in out, out + err
    for base, cand in ((sampled, edited(unsampled, tmp_path / "slow-unsampled.json", slower)),
                       (unsampled, edited(sampled, tmp_path / "slow.json", slower))):
        code, out, err = gate(tmp_path, "--baseline", base, "--candidate", cand)
        assert code == 1 and "error" not in err, out + err
        assert out.count("(no raw samples (save with --benchmark-save-data): factor alone)") == 5, out
    bad = edited(sampled, tmp_path / "bad-data.json", lambda doc: suite_benchmark(doc)["stats"].update(data="x"))
    code, out, err = gate(tmp_path, "--candidate", bad)  # present but wrong stays an error
    assert code == 2 and not out and "bad-data.json: benchmark " in err, err
    assert "stats.data should be a list of finite times >= 0, got 'x'" in err, err


def _set(*path_and_value):
    """An edit of a pytest-benchmark document: the suite's first benchmark's `section.field` (or machine_info's)."""
    *keys, value = path_and_value

    def edit(doc: dict) -> None:
        where = doc if keys[0] == "machine_info" else suite_benchmark(doc)
        for key in keys[:-1]:
            where = where[key]
        where[keys[-1]] = value
    return edit


@pytest.mark.parametrize("edit, said", [
    (_set("extra_info", "kernels", 5), "extra_info.kernels should be a list of kernel names, got 5"),
    (_set("extra_info", "ceilings", {"gemm_flops_fp32": "fast"}),
     "extra_info.ceilings['gemm_flops_fp32'] should be a finite number, got 'fast'"),
    (_set("extra_info", "roofline_gemm", ["gemm_flops_fp32"]),
     "extra_info.roofline_gemm should be a ceiling's name, got ['gemm_flops_fp32']"),
    (_set("extra_info", "status", "weird"),  # not a wrong result (exit 1): a corrupt file
     "extra_info.status should be one of ok, skipped, failed, wrong, got 'weird'"),
    (_set("machine_info", "sdpa_bench", "x"), "machine_info.sdpa_bench should be an object, got 'x'"),
    (_set("extra_info", "error_tolerance", -0.1), "extra_info.error_tolerance should be >= 0, got -0.1"),  # not exit 1
    # impossible times and sizes: read as they were, an infinite median passed as "inf s ×inf", a negative one as a
    # speed-up, an infinite peak memory was an OverflowError naming no file, and impl 5 a "missing" benchmark
    (_set("stats", "median", float("inf")), "stats.median should be a finite number, got inf"),
    (_set("stats", "median", -1.0), "stats.median should be >= 0, got -1.0"),
    (_set("stats", "data", [-1.0, -2.0]), "stats.data should be a list of finite times >= 0, got [-1.0, -2.0]"),
    (_set("extra_info", "peak_memory_bytes", float("inf")),
     "extra_info.peak_memory_bytes should be a finite number, got inf"),
    (_set("extra_info", "impl", 5), "extra_info.impl should be a name, got 5"),
], ids=["kernels", "ceilings", "roofline_gemm", "status", "machine", "tolerance", "inf-median", "negative-median",
        "negative-data", "inf-memory", "impl-number"])
def test_a_field_of_the_wrong_type_is_one_line_naming_it(session: dict[str, Path], tmp_path: Path, edit,
                                                         said: str) -> None:
    """A hand-edited or corrupt field is exit 2 with the file, the benchmark and the field, as a candidate and as a
    baseline; never exit 1 (a regression, to CI) nor the line of an error sdpa-bench did not foresee."""
    bad = edited(session["both"], tmp_path / "bad.json", edit)
    name = suite_benchmark(json.loads(bad.read_text()))["fullname"]
    where = f"{bad}" if said.startswith("machine_info") else f"{bad}: benchmark {name}"
    for args in (("--candidate", bad), ("--baseline", bad, "--candidate", session["both"])):
        code, out, err = gate(tmp_path, *args)
        assert code == 2 and not out, out + err
        assert err.splitlines() == [f"sdpa-bench gate: error: {where}: {said}"], err


def test_a_benchmark_missing_from_any_candidate_run_is_reported(session: dict[str, Path], tmp_path: Path) -> None:
    """With repeated --candidate, a baseline benchmark absent from the second run is missing as from the first."""
    again = edited(session["both"], tmp_path / "again.json", lambda doc: None)
    dropped = {}

    def drop_one(doc: dict) -> None:
        bench = suite_benchmark(doc)
        dropped.update(bench["extra_info"])
        doc["benchmarks"].remove(bench)
    fewer = edited(session["both"], tmp_path / "fewer.json", drop_one)
    label = f"{dropped['impl']}[{dropped['case']}]"
    code, out, err = gate(tmp_path, "--baseline", session["both"], "--candidate", again, "--candidate", fewer)
    assert code == 1, out + err
    assert f"missing {label}: in the baseline but missing from candidate run 2 (a point that failed or was skipped " \
           "leaves none, and the candidate's own output says why" in out, out
    code, out, err = gate(tmp_path, "--baseline", session["both"], "--candidate", again, "--candidate", fewer,
                          "--json", tmp_path / "v.json", config="allow_missing = true\n")
    assert code == 0 and any(line.startswith(label) and line.endswith("  missing") for line in out.splitlines()), out
    row = next(r for r in json.loads((tmp_path / "v.json").read_text())["rows"] if r["verdict"] == "missing")
    assert "in the baseline but missing from candidate run 2 (allowed by allow_missing)" in str(row["checks"]), row


# ---------- real pytest-benchmark runs ----------

@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Interleaved runs of one tree: base, base2, base3 (baseline), same, again, again3 (A/A candidate), slow
    (SDPA_TUNABLE_SLOWDOWN=2: 8 repeats of naive instead of 4, +100 % work) and big (+1 MiB at the peak)."""
    root = tmp_path_factory.mktemp("gate-runs")
    python = build_plugin_env(root)
    variants = {"base": {}, "same": {}, "slow": {"SDPA_TUNABLE_SLOWDOWN": SLOWDOWN}, "base2": {}, "again": {},
                "big": {"SDPA_TUNABLE_EXTRA_BYTES": str(1 << 20)},
                "base3": {}, "again3": {}}
    files = {}
    for name, extra in variants.items():
        files[name] = root / f"{name}.json"
        out = run_gate_benchmarks(python, files[name], extra)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return files


def test_saved_runs_have_raw_samples(runs: dict[str, Path]) -> None:
    machine, points = load_points(runs["base"])
    assert {p.impl for p in points} == {"naive", "test_tunable"} and len(points) == 10
    assert all(len(p.samples) >= 20 and p.peak_memory_bytes and p.error_tolerance for p in points)
    assert machine["threads"] == 1 and machine["torch"]


def test_same_tree_passes(runs: dict[str, Path], tmp_path: Path) -> None:
    """A/A as CI runs it on a shared machine: both trees measured three times, a time regression must show in
    every pair.

    Judged at 60 %, not 25 %, and on three runs a side, not two: on shared 2-vCPU VMs one case of one run has come
    out 1.9x slower, and naive's 90 µs decode case ran 1.5-1.8x slower for a tenth of a second in two of six runs
    while the probe beside it slowed 1.17x (a neighbour's slow period that the time reference, measured half a second
    later, does not share). Two such runs on one side and none on the other failed a 2 + 2 A/A at 60 %. This checks
    the mechanics on six real runs; the false-alarm rate of the 15 % default is measured in
    docs/records/2026-11-21-epyc-gate-false-alarms.md."""
    code, out, err = gate(tmp_path, "--baseline", runs["base"], "--baseline", runs["base2"], "--baseline", runs["base3"],
                          "--candidate", runs["same"], "--candidate", runs["again"], "--candidate", runs["again3"],
                          config=REF_NAIVE.replace("median:25%", "median:60%"))
    assert code == 0, out + err
    assert "sdpa-bench gate: PASS" in out and "test_tunable[L128-E64-fp32-fwd]" in out
    assert "3 baseline and 3 candidate runs" in out and "in units of naive's time" in out


def test_a_time_reference_that_did_not_run_is_said_so(runs: dict[str, Path], tmp_path: Path) -> None:
    """These runs hold no torch_sdpa: the times are compared as measured, and the verdict must say that, not that
    they were compared in units of torch_sdpa's time."""
    _, out, err = gate(tmp_path, "--baseline", runs["base"], "--candidate", runs["same"],
                       config='time_reference = "torch_sdpa"\ntime = "median:60%"\n')
    assert "times compared as measured: torch_sdpa (time_reference) did not run" in out, out + err
    assert "in units of torch_sdpa" not in out, out


def test_a_time_reference_named_nowhere_is_refused(runs: dict[str, Path], tmp_path: Path) -> None:
    """A typo in time_reference is a config error, while a name the results hold is one, even when no
    implementation of that name is installed in the gate's own environment (a plug-in measured elsewhere)."""
    code, out, err = gate(tmp_path, "--baseline", runs["base"], "--candidate", runs["same"],
                          config='time_reference = "torch_sdpaa"\n')
    assert code == 2 and not out, out + err
    assert "time_reference 'torch_sdpaa': no implementation of that name, here or in these results" in err, err
    assert "test_tunable" not in names()
    code, out, err = gate(tmp_path, "--baseline", runs["base"], "--candidate", runs["same"],
                          config='time_reference = "test_tunable"\ntime = "median:60%"\n')
    # accepted and applied; the verdict itself is these two runs' noise measured in a plug-in's time (test_tunable
    # at L 128 moved ×0.63 between them on a 2-vCPU EPYC), not what this test asks
    assert code in (0, 1) and "in units of test_tunable's time" in out and "time is the reference" in out, out + err
    assert "time_reference" not in err, err


def test_injected_slowdown_fails_naming_the_benchmark(runs: dict[str, Path], tmp_path: Path) -> None:
    code, out, err = gate(tmp_path, "--baseline", runs["base"], "--baseline", runs["base2"],
                          "--candidate", runs["slow"], "--json", tmp_path / "verdict.json", config=REF_NAIVE)
    assert code == 1, out + err
    failed = json.loads((tmp_path / "verdict.json").read_text())["failures"]
    assert failed and {f["kind"] for f in failed} == {"time"}
    assert {f["subject"].split("[")[0] for f in failed} == {"test_tunable"}  # naive is the yardstick
    assert len(failed) >= 2  # of five cases; fwd+bwd is slowed less (only the forward repeats)
    assert "× naive × 1.25 (p=" in out and "in all 2 pairs of runs" in out
    assert "one baseline and one candidate run" not in out
    code, out, _ = gate(tmp_path, "--baseline", runs["base"], "--candidate", runs["slow"], config=REF_NAIVE)
    assert code == 1 and "one baseline and one candidate run" not in out, out  # naive's time, in the same process
    code, out, _ = gate(tmp_path, "--baseline", runs["base"], "--candidate", runs["slow"])  # times as measured
    assert code == 1 and "one baseline and one candidate run: " in out and "give each side two or more" in out, out


def test_a_regression_must_show_in_every_pair_of_runs(runs: dict[str, Path], tmp_path: Path) -> None:
    """One candidate run without the regression refutes it: one disturbed run cannot fail the gate.

    The refuting run is a copy of the first baseline run, so its pair with that baseline is exact. A separately
    measured unchanged run would make this check of the rule depend on the machine staying quiet through that run:
    on a shared CI machine one such run once came out 1.9x slower in one case, and the rule rightly failed it.
    """
    unchanged = tmp_path / "unchanged.json"
    unchanged.write_bytes(runs["base"].read_bytes())
    code, out, _ = gate(tmp_path, "--baseline", runs["base"], "--baseline", runs["base2"], "--candidate", runs["slow"],
                        "--candidate", unchanged, config=REF_NAIVE)
    assert code == 0, out
    assert "2 baseline and 2 candidate runs: a time regression must show in every pair of runs" in out
    refuted = re.search(r"\((\d+) that did not, taken as noise\)", out)
    assert refuted and int(refuted.group(1)) >= 2  # the slowed cases, each refuted by the unchanged run
    slow_again = tmp_path / "slow_again.json"  # the same numbers as a second file: one file twice is refused
    slow_again.write_bytes(runs["slow"].read_bytes())
    code, out, _ = gate(tmp_path, "--baseline", runs["base"], "--candidate", runs["slow"], "--candidate", slow_again,
                        config=REF_NAIVE)
    assert code == 1 and "in all 2 pairs of runs" in out
    code, _, err = gate(tmp_path, "--baseline", runs["base"], "--candidate", runs["slow"], "--candidate", runs["slow"])
    assert code == 2 and "given twice" in err
    doc = json.loads(runs["again"].read_text())
    doc["machine_info"]["sdpa_bench"]["torch"] = "9.9.9"
    (tmp_path / "elsewhere.json").write_text(json.dumps(doc))
    code, _, err = gate(tmp_path, "--candidate", runs["same"], "--candidate", tmp_path / "elsewhere.json")
    assert code == 2 and "elsewhere.json comes from another machine" in err


def test_injected_memory_increase_fails(runs: dict[str, Path], tmp_path: Path) -> None:
    code, out, err = gate(tmp_path, "--baseline", runs["base"], "--candidate", runs["big"],
                          "--markdown", tmp_path / "verdict.md")
    assert code == 1, out + err
    memory_lines = [line for line in out.splitlines() if line.startswith("  memory ")]
    assert len(memory_lines) == 5 and all("test_tunable[" in line for line in memory_lines)
    assert "+1048576 B" in out
    assert (tmp_path / "verdict.md").read_text().startswith("## sdpa-bench gate: FAIL")


def test_in_run_ratio_rules_need_no_baseline(runs: dict[str, Path], tmp_path: Path) -> None:
    config = """ratios = [
        "time: test_tunable / naive <= 1.0",
        "time: naive / test_tunable <= 1.0",
        "peak_memory: naive / test_tunable <= 1.0 when L >= 96",
        "time: fused / naive <= 2 when dtype == fp32",
    ]
    """
    code, out, err = gate(tmp_path, "--candidate", runs["base"], "--json", tmp_path / "v.json", config=config)
    assert code == 1, out + err
    ratios = json.loads((tmp_path / "v.json").read_text())["ratios"]
    by_rule: dict[str, set[str]] = {}
    for c in ratios:
        by_rule.setdefault(c["subject"].split(" @ ")[0], set()).add(c["status"])
    assert by_rule == {"time: test_tunable / naive <= 1.0": {FAIL}, "time: naive / test_tunable <= 1.0": {PASS},
                       "peak_memory: naive / test_tunable <= 1.0 when L >= 96": {PASS},
                       "time: fused / naive <= 2 when dtype == fp32": {NA}}  # fused did not run: not a failure
    assert sum(c["status"] == PASS for c in ratios if c["subject"].startswith("peak_memory")) == 4  # not Lq1
    code, out, _ = gate(tmp_path, "--candidate", runs["base"], "--candidate", runs["same"], config=config)
    assert code == 1 and "2 candidate runs: an in-run time rule must fail in every run" in out


def test_wrong_result_fails_whatever_its_speed(runs: dict[str, Path], tmp_path: Path) -> None:
    doc = json.loads(runs["same"].read_text())
    bench = doc["benchmarks"][0]
    bench["extra_info"]["max_error"] = bench["extra_info"]["error_tolerance"] * 3
    (tmp_path / "wrong.json").write_text(json.dumps(doc))
    code, out, _ = gate(tmp_path, "--baseline", runs["base"], "--candidate", tmp_path / "wrong.json")
    assert code == 1
    assert f"correctness {bench['extra_info']['impl']}[{bench['extra_info']['case']}]" in out and "wrong result" in out


def test_missing_benchmarks_fail_unless_allowed(runs: dict[str, Path], tmp_path: Path) -> None:
    doc = json.loads(runs["same"].read_text())
    doc["benchmarks"] = [b for b in doc["benchmarks"] if b["extra_info"]["impl"] != "test_tunable"]
    (tmp_path / "fewer.json").write_text(json.dumps(doc))
    no_time = 'time = "off"\n'  # this test is about the benchmark lists, not about timing noise
    code, out, _ = gate(tmp_path, "--baseline", runs["base"], "--candidate", tmp_path / "fewer.json", config=no_time)
    assert code == 1 and out.count("missing from the candidate") == 5
    code, out, _ = gate(tmp_path, "--baseline", runs["base"], "--candidate", tmp_path / "fewer.json",
                        config=no_time + '[[override]]\nimpl = "test_*"\nallow_missing = true\n')
    assert code == 0 and sum(line.endswith("  missing") for line in out.splitlines()) == 5
    assert "matched no benchmark" not in out, out
    # a misspelt pattern allowed nothing, unsaid: the runs fail as without it, and the verdict names the override
    code, out, _ = gate(tmp_path, "--baseline", runs["base"], "--candidate", tmp_path / "fewer.json",
                        config=no_time + '[[override]]\nimpl = "tset_*"\nallow_missing = true\n')
    assert code == 1 and "override #1 (impl 'tset_*', case '*') matched no benchmark of these runs" in out, out
    # runs of the time reference alone: a pass that judged no time says so
    only = {name: json.loads(runs[name].read_text()) for name in ("base", "same")}
    for name, doc in only.items():
        doc["benchmarks"] = [b for b in doc["benchmarks"] if b["extra_info"]["impl"] == "naive"]
        (tmp_path / f"naive-{name}.json").write_text(json.dumps(doc))
    code, out, _ = gate(tmp_path, "--baseline", tmp_path / "naive-base.json", "--candidate",
                        tmp_path / "naive-same.json", config=REF_NAIVE)
    assert code == 0 and "no time judged: every timed benchmark here is naive's, the time_reference" in out, out
    code, out, _ = gate(tmp_path, "--baseline", tmp_path / "fewer.json", "--candidate", runs["same"], config=no_time)
    assert code == 0 and sum(line.endswith("  new") for line in out.splitlines()) == 5


def test_other_machine_refuses_times_but_checks_the_rest(runs: dict[str, Path], tmp_path: Path) -> None:
    doc = json.loads(runs["slow"].read_text())
    doc["machine_info"]["sdpa_bench"]["torch"] = "9.9.9"
    doc["machine_info"]["sdpa_bench"]["cpu"] = "Another CPU"
    (tmp_path / "other.json").write_text(json.dumps(doc))
    code, out, _ = gate(tmp_path, "--baseline", runs["base"], "--candidate", tmp_path / "other.json")
    assert code == 0, out  # the slowdown is not judged across machines
    assert "absolute time rules refused" in out and "torch: " in out and "vs 9.9.9" in out
    code, out, _ = gate(tmp_path, "--baseline", runs["base"], "--candidate", tmp_path / "other.json",
                        "--allow-different-machines")
    assert code == 1 and "times compared anyway" in out
    doc = json.loads(runs["slow"].read_text())  # the same machine, timed under coverage.py's sys.monitoring tool
    doc["machine_info"]["sdpa_bench"]["tracer"] = "sys.monitoring: coverage.py"
    (tmp_path / "traced.json").write_text(json.dumps(doc))
    code, out, _ = gate(tmp_path, "--baseline", runs["base"], "--candidate", tmp_path / "traced.json")
    assert code == 0 and "absolute time rules refused" in out and "tracer: none vs sys.monitoring: coverage.py" in out
    doc["machine_info"]["sdpa_bench"] = json.loads(runs["big"].read_text())["machine_info"]["sdpa_bench"] | {
        "torch": "9.9.9"}
    doc["benchmarks"] = json.loads(runs["big"].read_text())["benchmarks"]
    (tmp_path / "other-big.json").write_text(json.dumps(doc))
    code, out, _ = gate(tmp_path, "--baseline", runs["base"], "--candidate", tmp_path / "other-big.json")
    assert code == 1 and "memory test_tunable[" in out  # memory still applies
    doc["machine_info"]["sdpa_bench"]["threads"] += 1  # but not across thread counts: a buffer per thread
    (tmp_path / "other-threads.json").write_text(json.dumps(doc))
    code, out, _ = gate(tmp_path, "--baseline", runs["base"], "--candidate", tmp_path / "other-threads.json")
    assert code == 0 and "CPU peak memory not compared: the runs had 1 vs 2 threads" in out, out
    assert "memory (on the CPU only where the thread counts match) still apply" in out, out  # not "memory applies"


# ---------- unusable input: exit 2, one message naming the problem ----------

def test_corrupt_truncated_missing_and_empty_files(runs: dict[str, Path], tmp_path: Path) -> None:
    text = runs["base"].read_text()
    (tmp_path / "truncated.json").write_text(text[: len(text) // 2])
    (tmp_path / "corrupt.json").write_text("<html>not json</html>")
    (tmp_path / "empty.json").write_text("")
    (tmp_path / "none.json").write_text(json.dumps({"machine_info": {}, "benchmarks": []}))
    (tmp_path / "other.json").write_text(json.dumps({"results": []}))
    for name, words in [("truncated.json", "not valid JSON"), ("corrupt.json", "not valid JSON"),
                        ("empty.json", "the file is empty"), ("absent.json", "no such file"),
                        ("none.json", "nothing comparable"), ("other.json", "not a pytest-benchmark JSON")]:
        code, out, err = gate(tmp_path, "--candidate", tmp_path / name)
        assert code == 2 and name in err and words in err and out == "", (name, err)
    code, _, err = gate(tmp_path, "--baseline", tmp_path / "truncated.json", "--candidate", runs["base"])
    assert code == 2 and "truncated.json" in err


def test_config_errors(runs: dict[str, Path], tmp_path: Path) -> None:
    for text, words in [('tme = "median:10%"', "unknown gate config key 'tme'"),
                        ('time = "mean:10%"', "'median:10%'"),
                        ("alpha = 2.0", "alpha should be between 0 and 1"),
                        ('ratios = ["time: a / b is small"]', "ratio rule 'time: a / b is small'"),
                        ('ratios = ["speed: a / b <= 1"]', "metric 'speed'"),
                        ('ratios = ["time: a / b <= 1 when colour == red"]', "condition 'colour == red'"),
                        ('[[override]]\nimpl = "x"\nthreshold = 3', "unknown key 'threshold'"),
                        ("correctness = 'yes'", "correctness should be a bool"),
                        ("time = [", "not valid TOML"),
                        # a bad value in an override is named by its place, not as a top-level key set nowhere
                        ('[[override]]\nimpl = "x"\ntime = "median:20"', "gate.toml, over sdpa-bench's defaults: "
                         "override #1: time rule 'median:20' should look like"),
                        ("[[override]]\nalpha = 2.0", "override #1: alpha should be between 0 and 1"),
                        # 'off' is the gate's time rule alone: continuous judges every row's time
                        ('continuous_time = "off"', "continuous_time: 'off' is not taken here (time = \"off\" "
                         "switches time off in `continuous` too); give a size such as 'median:3%'"),
                        (f'time = "median:{"9" * 400}%"', "% is too large a number"),
                        ('ratios = ["time: a / b <= 1e400"]', "its limit is too large a number")]:  # never fails
        code, _, err = gate(tmp_path, "--candidate", runs["base"], config=text)
        assert code == 2 and "gate.toml" in err and words in err, (text, err)
    (tmp_path / "pyproject.toml").write_text('[tool.other]\nx = 1\n')
    code, _, err = gate(tmp_path, "--candidate", runs["base"], "--config", tmp_path / "pyproject.toml")
    assert code == 2 and "no [tool.sdpa_bench.gate] section" in err
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')  # a project's file without [tool] at all
    code, _, err = gate(tmp_path, "--candidate", runs["base"], "--config", tmp_path / "pyproject.toml")
    assert code == 2 and "no [tool.sdpa_bench.gate] section" in err, err  # not "unknown gate config key 'project'"
    (tmp_path / "keys.toml").write_text('time = "median:5%"\n[project]\nname = "x"\n')  # says why its keys go unread
    code, _, err = gate(tmp_path, "--candidate", runs["base"], "--config", tmp_path / "keys.toml")
    assert code == 2 and "[project] or [build-system] is read as a pyproject.toml" in err, err
    # a file with [tool] is read from its gate table: keys beside it at the top level were dropped without a word
    (tmp_path / "both.toml").write_text('time = "median:20%"\n[tool.sdpa_bench.gate]\nalpha = 0.05\n')
    code, _, err = gate(tmp_path, "--candidate", runs["base"], "--config", tmp_path / "both.toml")
    assert code == 2 and "both.toml: time at the top level would not be read: a file with a [tool] table is read " \
        "from [tool.sdpa_bench.gate]" in err, err


def test_nothing_comparable(runs: dict[str, Path], tmp_path: Path) -> None:
    doc = json.loads(runs["base"].read_text())
    for b in doc["benchmarks"]:
        b["extra_info"]["case"] = "renamed-" + b["extra_info"]["case"]
    (tmp_path / "renamed.json").write_text(json.dumps(doc))
    code, _, err = gate(tmp_path, "--baseline", runs["base"], "--candidate", tmp_path / "renamed.json")
    assert code == 2 and "nothing comparable" in err and "renamed.json" in err


def test_project_config_is_found_from_the_working_directory(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.sdpa_bench.gate]\ntime = "median:25%"\n'
                                             '[[tool.sdpa_bench.gate.override]]\ncase = "*-bf16-*"\nmemory = "off"\n')
    (tmp_path / "sub").mkdir()
    config = load_config(start=tmp_path / "sub")
    assert "pyproject.toml" in config.source
    assert config.thresholds("naive", "L128-E64-fp32-fwd").time.factor == pytest.approx(1.25)
    assert config.thresholds("naive", "L128-E64-bf16-causal-fwd").memory is None
    assert load_config(start=ROOT).ratios  # this project's own CI rules parse


# ---------- the rule objects ----------

def test_time_rule_messages_carry_their_numbers() -> None:
    rule = TimeRule.parse("median:10%", alpha=0.01)
    base = Point("naive", "c", 10.1e-3, tuple(10.1e-3 + i * 1e-6 for i in range(30)))
    slow = Point("naive", "c", 12.3e-3, tuple(12.3e-3 + i * 1e-6 for i in range(30)))
    check = rule.check(base, slow)
    assert check.status == FAIL and check.message.startswith("median 12.3 ms > baseline 10.1 ms × 1.10 (p=")
    assert rule.check(base, base).status == PASS
    no_samples = rule.check(Point("naive", "c", 10.1e-3), Point("naive", "c", 12.3e-3))
    assert no_samples.status == FAIL and "no raw samples" in no_samples.message
    overlapping = Point("naive", "c", 11.5e-3, (8e-3, 11.5e-3, 15e-3))
    assert "samples cannot reach" in rule.check(Point("naive", "c", 10e-3, (9e-3, 10e-3, 11e-3)), overlapping).message
    # a threshold under 1 % reads as configured, not as × 1.00 ("any growth fails")
    fine = TimeRule.parse("median:0.4%", alpha=0.01).check(base, slow)
    assert fine.failed and "baseline 10.1 ms × 1.004 (p=" in fine.message, fine.message
    tiny = TimeRule.parse("median:0.0004%", alpha=0.01).check(base, slow)  # a change, however small, is no × 1
    assert "baseline 10.1 ms × 1.000004 (p=" in tiny.message, tiny.message
    from sdpa_impls.fmt import fmt_factor
    assert [fmt_factor(f) for f in (1.0, 1.1, 1 + 1e-12, 1 - 1e-7, 1 + 2**-52)] == [
        "1.00", "1.10", "1.000000000001", "0.9999999", "1.0000000000000002"]
    bigger = MemoryRule.parse("peak:0.1%").check(Point("naive", "c", 1.0, peak_memory_bytes=1000 * 2**20),
                                                 Point("naive", "c", 1.0, peak_memory_bytes=1005 * 2**20))
    assert bigger.failed and bigger.message.startswith("peak 1005 MiB > baseline 1000 MiB × 1.001 (+"), bigger.message
    from sdpa_impls.fmt import fmt_bytes, fmt_seconds
    # a value that .3g rounds up to 1000 is written whole, never as 1e+03
    assert (fmt_bytes(999.6 * 2**20), fmt_bytes(999.7 * 2**10), fmt_seconds(0.9996)) == \
        ("1000 MiB", "1000 KiB", "1000 ms")
    assert (fmt_bytes(999.4 * 2**20), fmt_seconds(0.9994)) == ("999 MiB", "999 ms")


def test_significance_guards_a_noisy_median() -> None:
    rule = TimeRule.parse("median:10%", alpha=0.01)
    base = Point("x", "c", 1.0, tuple([1.0] * 10 + [1.3] * 10))
    cand = Point("x", "c", 1.15, tuple([1.0] * 9 + [1.3] * 11))
    check = rule.check(base, cand)
    assert check.status == PASS and "not significant" in check.message


def test_time_reference_divides_out_a_busier_run() -> None:
    busy = [Point(i, "c", 2 * t, tuple(2 * t + k * 1e-6 for k in range(30))) for i, t in (("x", 10e-3), ("ref", 5e-3))]
    calm = [Point(i, "c", t, tuple(t + k * 1e-6 for k in range(30))) for i, t in (("x", 10e-3), ("ref", 5e-3))]
    rule = TimeRule.parse("median:10%", alpha=0.01)
    assert rule.check(calm[0], busy[0]).failed  # the whole run was twice as slow
    relative = rule.check(calm[0], busy[0], calm[1], busy[1])
    assert relative.status == PASS and relative.message.startswith("median 2× ref <= baseline 2× ref")
    slower = Point("x", "c", 2.6 * 10e-3, tuple(2.6 * 10e-3 + k * 1e-6 for k in range(30)))
    assert rule.check(calm[0], slower, calm[1], busy[1]).failed  # 2.6× ref vs 2× ref: 30 % slower relative


def test_a_row_judged_in_the_references_units_shows_that_ratio_beside_the_measured_one() -> None:
    """A row whose own time did not move fails where the reference ran 1.3× faster in the candidate's run: its
    table cell says so, not only ×1.00 as measured beside FAIL."""
    def pt(impl: str, t: float) -> Point:
        return Point(impl, "c", t, tuple(t + k * 1e-7 for k in range(30)))
    config = load_config(None)
    assert config.time_reference == "torch_sdpa"
    same = {"allow_different_machines": True}  # points with no machine recorded
    verdict = compare_points([pt("naive", 10e-3), pt("torch_sdpa", 5e-3)],
                             [pt("naive", 10e-3), pt("torch_sdpa", 5e-3 / 1.3)], config, **same)
    naive = next(r for r in verdict.rows if r.impl == "naive")
    assert naive.verdict == FAIL and next(c for c in naive.checks if c.kind == "time").referenced[1] == "torch_sdpa"
    text = render_verdict(verdict)
    assert "10 ms → 10 ms ×1.00, ×1.30 in torch_sdpa's units" in text, text
    calm = render_verdict(compare_points([pt("naive", 10e-3), pt("torch_sdpa", 5e-3)],
                                         [pt("naive", 10e-3), pt("torch_sdpa", 5e-3)], config, **same))
    assert "10 ms → 10 ms ×1.00, ×1.00 in torch_sdpa's units" in calm and "FAIL" not in calm, calm
    as_measured = render_verdict(compare_points([pt("naive", 10e-3)], [pt("naive", 10e-3)], config, **same))
    assert "10 ms → 10 ms ×1.00 " in as_measured and "units" not in as_measured, as_measured


def test_memory_rule_and_ratio_rule_parsing() -> None:
    rule = MemoryRule.parse("peak:1%")
    assert rule.check(Point("a", "c", 1.0, peak_memory_bytes=1000), Point("a", "c", 1.0, peak_memory_bytes=1010)).status == PASS
    assert rule.check(Point("a", "c", 1.0, peak_memory_bytes=1000), Point("a", "c", 1.0, peak_memory_bytes=1011)).failed
    r = RatioRule.parse("peak_memory: chunked / naive <= 0.5 when L >= 2048 and dtype == bf16")
    assert (r.metric, r.numerator, r.denominator, r.op, r.limit) == ("peak_memory", "chunked", "naive", "<=", 0.5)
    assert [(c.field, c.op, c.value) for c in r.conditions] == [("lq", ">=", "2048"), ("dtype", "==", "bf16")]
    pts = [Point(i, "L4096-bf16", 1.0, peak_memory_bytes=m, case={"lq": 4096, "dtype": "bf16"})
           for i, m in (("chunked", 10), ("naive", 100))]
    assert [c.status for c in r.check(pts, 0.01)] == [PASS]
    on_gpu = RatioRule.parse("peak_memory: chunked / naive <= 0.01 when device == cuda")
    assert [c.status for c in on_gpu.check(pts, 0.01)] == [NA]  # no device recorded: the rule does not apply
    cpu_pts = [Point(p.impl, p.case_id, 1.0, peak_memory_bytes=p.peak_memory_bytes, case=p.case | {"device": "cpu"})
               for p in pts]
    assert [c.status for c in on_gpu.check(cpu_pts, 0.01)] == [NA]
    assert [c.status for c in RatioRule.parse(on_gpu.text.replace("cuda", "cpu")).check(cpu_pts, 0.01)] == [FAIL]
    assert compare_points(None, pts, load_config(start=Path("/"))).exit_code == 0


def test_in_process_api_refuses_nothing_comparable() -> None:
    with pytest.raises(GateInputError, match="nothing comparable"):
        compare_points([Point("a", "c1", 1.0)], [Point("a", "c2", 1.0)], load_config(start=Path("/")))


def test_cli_error_for_missing_candidate_option(capsys: pytest.CaptureFixture) -> None:
    assert main(["gate"]) == 2 and "--candidate" in capsys.readouterr().err


def test_json_report_round_trips(runs: dict[str, Path], tmp_path: Path) -> None:
    code, _, _ = gate(tmp_path, "--baseline", runs["base"], "--baseline", runs["base2"], "--candidate", runs["same"],
                      "--candidate", runs["again"], "--json", tmp_path / "v.json", config=REF_NAIVE)
    verdict = json.loads((tmp_path / "v.json").read_text())
    # the subject is the file, not the A/A's verdict (a VM whose speed drifts for seconds can fail one time check at
    # 25 % here; the false-alarm rates have their own tests and records): the file says what the command returned
    assert verdict["exit_code"] == code and code in (0, 1) and len(verdict["rows"]) == 10
    row = copy.deepcopy(verdict["rows"][0])
    assert {c["kind"] for c in row["checks"]} == {"time", "memory", "correctness"}
    assert row["candidate"]["n_samples"] >= 20


def test_this_projects_fused_memory_rule_has_one_limit_per_device() -> None:
    """On CUDA one fused score tile (up to 512 MiB) holds every row of the ci preset's L=1024 cases, so fused's
    peak is ~0.38 of naive's there; the CPU limit (cache-sized tiles) must not be applied to CUDA points."""
    import torch

    from sdpa_impls.bench.grid import preset
    from sdpa_impls.impls.fused import tile_shape

    for case in (c for c in preset("ci") if c.lq >= 1024):
        rows, _ = tile_shape(torch.device("cuda"), case.batch, case.heads_kv, case.heads_q // case.heads_kv,
                             case.lq, case.lk, case.torch_dtype.itemsize)
        assert rows >= case.lq  # one tile: the whole score matrix, as naive holds it
    rules = [r for r in load_config(start=Path(__file__).parent).ratios
             if (r.metric, r.numerator, r.denominator) == ("peak_memory", "fused", "naive")
             and any(c.field == "device" for c in r.conditions)]  # each device's O(L) rule, not the general <= 0.9
    for device, ratio, expected in (("cuda", 0.38, PASS), ("cpu", 0.38, FAIL), ("cpu", 0.2, PASS)):
        pts = [Point(i, "L1024", 1.0, peak_memory_bytes=m, case={"lq": 1024, "mode": "fwd", "device": device})
               for i, m in (("fused", int(ratio * 1000)), ("naive", 1000))]
        statuses = {c.status for r in rules for c in r.check(pts, 0.01)} - {NA}
        assert statuses == {expected}, (device, ratio, statuses)


def test_rules_that_applied_to_no_case_are_one_line_not_a_row_each() -> None:
    """A plug-in's run has none of sdpa-bench's own implementations: the default rules about them are one line of
    the verdict (and each is still in --json), not five rows of n/a in every PR comment."""
    from sdpa_impls.gate.render import rules_and_failures
    from sdpa_impls.gate.rules import Check, NA

    idle = [RatioRule.parse(text).check([], 0.01)[0] for text in (
        "peak_memory: fused / naive <= 0.9 when L >= 512", "peak_memory: chunked / naive <= 0.25 when L >= 1024",
        "ceiling: fused / gemm >= 0.5")]
    assert all(c.status == NA for c in idle)
    held = Check("ratio", "time: mine / torch_sdpa <= 2 @ L128", PASS, "0.91")
    lines = rules_and_failures([*idle, held], [], markdown=True)
    assert sum("time: mine / torch_sdpa" in line for line in lines) == 1
    assert not any("fused / naive" in line for line in lines), lines
    assert "3 in-run rule(s) n/a, applying to no case that ran (on `chunked`, `fused`, `naive`); each is in --json." \
        in lines, lines


def test_points_timed_on_busy_cpus_are_counted_per_side_as_compare_counts_them(session: dict[str, Path],
                                                                                tmp_path: Path) -> None:
    """The suite records, per point, the CPUs other processes kept busy while it was timed (`other_cpus`); the gate's
    verdict says how many of each side's timed points that was, as `compare` does for two sweeps."""
    def other_cpus(value: float):
        def edit(doc: dict) -> None:
            for b in doc["benchmarks"]:
                if "test_sdpa[" in b["fullname"]:
                    b["extra_info"]["other_cpus"] = value
        return edit
    edited(session["both"], tmp_path / "quiet.json", other_cpus(0.0))
    edited(session["both"], tmp_path / "busy.json", other_cpus(1e6))  # more CPUs than any machine leaves free
    code, out, err = gate(tmp_path, "--baseline", "quiet.json", "--candidate", "busy.json")
    assert code in (0, 1) and "busy CPUs: baseline 0 of 5, candidate 5 of 5 timed points were measured while other " \
        "processes kept busy CPUs that torch's threads needed (the JSON's extra_info.other_cpus)" in out, out + err
    edited(session["both"], tmp_path / "quiet2.json", other_cpus(0.0))
    code, out, err = gate(tmp_path, "--baseline", "quiet.json", "--candidate", "quiet2.json")
    assert code in (0, 1) and "busy CPUs" not in out and "verdict" in out.lower(), out + err


def test_a_busy_point_the_baseline_lacks_is_not_counted_as_compared(session: dict[str, Path], tmp_path: Path) -> None:
    """The busy count is of the points compared: a candidate's point timed on busy CPUs that the baseline did not
    measure (a new benchmark) is left out of it."""
    def first(doc: dict) -> dict:
        return next(b for b in doc["benchmarks"] if "test_sdpa[" in b["fullname"])

    def quiet(doc: dict) -> None:  # as measured, a point may have been busy in this test session
        for b in doc["benchmarks"]:
            b["extra_info"]["other_cpus"] = 0.0

    def without_first(doc: dict) -> None:
        quiet(doc)
        doc["benchmarks"].remove(first(doc))

    def first_busy(doc: dict) -> None:
        quiet(doc)
        first(doc)["extra_info"]["other_cpus"] = 1e6  # more CPUs than any machine leaves free
    edited(session["both"], tmp_path / "base.json", without_first)
    edited(session["both"], tmp_path / "cand.json", first_busy)
    code, out, err = gate(tmp_path, "--baseline", "base.json", "--candidate", "cand.json")
    assert code in (0, 1) and "verdict" in out.lower() and "busy CPUs" not in out, out + err
