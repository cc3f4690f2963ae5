"""Input a user or a CI may give by mistake: each is one line and exit 2 before any work, and none destroys a file
the user has (an input named as an output, a folder of theirs named as the environment cache)."""
from __future__ import annotations

import contextlib
import io
import json
import os
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import sdpa_impls
from sdpa_impls import registry, testing
from sdpa_impls.bench.check import WrongResult
from sdpa_impls.bench.grid import Case
from sdpa_impls.bench.measure import Options, run_case, run_case_interleaved
from sdpa_impls.cli import main
from held import lock_held_elsewhere
from sdpa_impls.protocol import Implementation, SDPAInputs, Support

FAST = ["--preset", "smoke", "--impl", "naive", "--budget", "0.01", "--min-reps", "2", "--max-reps", "3", "--no-plots"]


def said(argv: list[str], cwd: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """(exit status, stderr) of the command line `argv` run in `cwd`."""
    monkeypatch.chdir(cwd)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue()


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished smoke sweep of naive, made once."""
    out = tmp_path_factory.mktemp("sweep") / "a"
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        assert main(["run", *FAST, "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("argv, named", [
    (["run", "--preset", ""], "--preset: an empty value"),
    (["run", "--preset", "smoke", "--impl", " "], "--impl: an empty value"),
    (["run", "--preset", "smoke", "--impl", ",,"], "--impl ',,': names no implementation"),
    (["run", "--preset", "smoke", "--impl", "naive,,fused"], "--impl 'naive,,fused': an empty name between commas"),
    (["continuous", "HEAD~1", "--impl", "naive,"], "--impl 'naive,': an empty name between commas"),
    (["run", "--preset", "smoke", "--shard="], "--shard: an empty value"),
    (["run", "--pre", "smoke"], "unrecognized arguments: --pre smoke"),  # no abbreviation means another option
    (["run", "--preset", "smoke", "--warmup", "100000000000"], "--warmup must be at most 10000"),  # never ends
    (["run", "--preset", "smoke", "--min-reps", "20000"], "--min-reps must be at most 10000"),
    (["merge", "", "a", "b"], "an empty argument ('')"),
    (["envs", "--env-cache", ""], "--env-cache: an empty value"),
    (["quickstart", "--dest", "", "--name", "x"], "--dest: an empty value"),
    (["quickstart", "--name", "torch"], "a package named 'torch' is installed here already ("),  # pip would replace
    (["quickstart", "--name", "sdpa-bench"], "a package named 'sdpa-bench' is installed here already ("),
    (["quickstart", "--name", "json"], "'json' is a module Python imports already ("),  # one would shadow the other
    (["run", "--seed", "-1"], "--seed: should be from 0 to 2**63 - 1, got -1"),
    (["continuous", "HEAD~1", "--env-cache", "/etc/passwd"], "--env-cache /etc/passwd: is a file, not a folder"),
    (["bisect", "HEAD~1", "--env-cache", "/etc/passwd"], "--env-cache /etc/passwd: is a file, not a folder"),
    (["run", "--preset", "smoke", "--point-timeout", "-5"], "--point-timeout must be >= 0 seconds and finite"),
    (["run", "--preset", "smoke", "--point-timeout", "inf"], "--point-timeout must be >= 0 seconds and finite"),
    (["run", "--seed", "100000000000000000000000"], "should be from 0 to 2**63 - 1"),
    (["run", "--preset", "smoke", "--out", "new", "--resume", "--overwrite"], "--overwrite replaces it: choose one"),
    (["envs", "--prune", "--max-gb", "inf"], "--max-gb should be a number of GB from 0 to 1e+09 (leave it out"),
    (["envs", "--prune", "--max-gb", "1e308"], "--max-gb should be a number of GB from 0 to 1e+09"),  # overflowed
    (["continuous", "HEAD~1", "--round-timeout", "1e308"], "--round-timeout should be more than 0 seconds and at "
                                                           "most 604800 (a week), got 1e+308"),  # after both installs
    (["continuous", "HEAD~1", "--max-time", "1e308"], "--max-time should be more than 0 seconds and at most 604800"),
    (["continuous", "HEAD~1", "--rounds", "99999999999"], "--rounds should be from 1 to 1000, got 99999999999"),
    (["bisect", "HEAD~1", "--adaptive-budget", "1e308"], "--adaptive-budget should be from 0 to 604800 seconds"),
    (["quickstart", "--name", "a" * 300], "is 300 characters long: give a name of at most 100"),  # 3 files written
    (["targets", "--overwrite"], "--overwrite replaces the sweep in --out: give --out too"),  # ran, keeping nothing
])
def test_an_empty_or_out_of_range_value_is_refused_before_any_work(argv, named, tmp_path, monkeypatch) -> None:
    code, err = said(argv, tmp_path, monkeypatch)
    assert code == 2 and named in err and len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []  # nothing written into the working folder


def test_a_budget_no_point_timeout_can_hold_is_named_before_the_folder_is_made(tmp_path) -> None:
    """The default point timeout, 4 x --budget, stops at a week: past it the run stopped, naming a --point-timeout
    no one gave, once its folder was made. (Called in-process a run has no point timeout, so this runs the CLI.)"""
    done = subprocess.run([sys.executable, "-m", "sdpa_impls", "run", "--preset", "smoke", "--impl", "naive",
                           "--budget", "700000", "--out", "o1"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "sdpa-bench run: error: --budget must be under 604800 seconds (a week, the longest --point-timeout); got "
        "700000"], done.stderr
    assert list(tmp_path.iterdir()) == []


def test_quickstart_refuses_the_name_of_sdpa_benchs_own_package_in_an_editable_install(tmp_path) -> None:
    """An editable install serves sdpa_impls through its own import finder, which a search of sys.path missed: the
    plug-in was written, and its package shadowed sdpa-bench's. Run as a user runs it, outside the clone."""
    done = subprocess.run([str(Path(sys.executable).parent / "sdpa-bench"), "quickstart", "--name", "sdpa_impls",
                           "--dest", "q"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "'sdpa_impls' is a module Python imports already (" in done.stderr, done.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_resumes_point_timeout_is_judged_against_the_sweeps_own_budget(sweep, tmp_path, monkeypatch) -> None:
    """The sweep measured with --budget 0.01: a --point-timeout of 0.5 on its resume is more than that, and was
    refused against the 1 s default --budget of the command line, a --budget no one typed."""
    shutil.copytree(sweep, tmp_path / "a")
    code, err = said(["run", "--out", "a", "--resume", "--point-timeout", "0.5", "--no-plots"], tmp_path, monkeypatch)
    assert code == 0 and "would stop points" not in err, err


def test_a_keep_runs_folder_nothing_can_be_made_in_is_refused_before_any_work(tmp_path, monkeypatch) -> None:
    """It failed once both revisions were installed, as the head's error ("its benchmark suite did not run")."""
    (tmp_path / "notes").write_text("a file\n")
    code, err = said(["continuous", "HEAD~1", "--keep-runs", "notes/runs"], tmp_path, monkeypatch)
    assert code == 2 and f"--keep-runs notes/runs: cannot write in {tmp_path / 'notes'} (Not a directory)" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes"]


def test_an_output_that_is_an_input_or_another_output_is_refused_and_the_input_kept(sweep, tmp_path,
                                                                                   monkeypatch) -> None:
    results = sweep / "results.json"
    before = results.read_bytes()
    code, err = said(["compare", str(sweep), str(sweep), "--markdown", str(results)], tmp_path, monkeypatch)
    assert code == 2 and "is also DIR_" in err and results.read_bytes() == before
    bench = tmp_path / "cand.json"
    bench.write_text(json.dumps({"benchmarks": []}))
    code, err = said(["gate", "--candidate", "cand.json", "--json", "./cand.json"], tmp_path, monkeypatch)
    assert code == 2 and "is also --candidate cand.json" in err and json.loads(bench.read_text()) == {"benchmarks": []}
    code, err = said(["gate", "--candidate", "cand.json", "--json", "v.out", "--markdown", "v.out"], tmp_path,
                     monkeypatch)
    assert code == 2 and "--json v.out: is --markdown's file too" in err
    verdict = tmp_path / "v.json"
    verdict.write_text("{}")
    code, err = said(["bisect", "HEAD~1", "--from", "v.json", "--json", "v.json"], tmp_path, monkeypatch)
    assert code == 2 and "is also --from" in err and verdict.read_text() == "{}"


def test_a_results_file_with_a_wrong_type_is_named_as_corrupt(sweep, tmp_path, monkeypatch) -> None:
    edits = (("median_s", "abc", "results[0].median_s should be float | None, got 'abc'"),
             ("case", "L99", "results[0] should be an object"),
             ("status", "weird", "results[0].status should be one of ok, skipped"),
             ("median_s", -1.0, "results[0].median_s should be finite and >= 0, got -1.0"),
             ("samples", [1e-3, -2.0], "results[0].samples should be finite and >= 0"),
             ("max_error", -1.0, "results[0].max_error should be >= 0"),  # each read as a pass by `compare`
             ("error_tolerance", math.inf, "results[0].error_tolerance should be finite and >= 0"))
    for n, (field, value, named) in enumerate(edits):
        bad = tmp_path / f"{field}-{n}"
        shutil.copytree(sweep, bad)
        doc = json.loads((bad / "results.json").read_text())
        doc["results"][0][field] = value
        (bad / "results.json").write_text(json.dumps(doc))
        code, err = said(["report", str(bad)], tmp_path, monkeypatch)
        assert code == 2 and f"{bad / 'results.json'} has a malformed entry" in err and named in err, err
    code, err = said(["report", str(sweep / "results.json")], tmp_path, monkeypatch)
    assert code == 2 and "is a file: give the --out folder of a `run`" in err
    benchmark = tmp_path / "pytest-benchmark"  # its --benchmark-json saved as results.json: the gate reads it
    benchmark.mkdir()
    (benchmark / "results.json").write_text(json.dumps({"machine_info": {}, "benchmarks": []}))
    code, err = said(["report", str(benchmark)], tmp_path, monkeypatch)
    assert code == 2 and "it is pytest-benchmark's JSON, which `sdpa-bench gate --baseline A --candidate B` compares" \
        in err, err
    code, err = said(["gate", "--candidate", str(sweep)], tmp_path, monkeypatch)  # a `run`'s folder to the gate
    assert code == 2 and (f"{sweep}: a folder, not a pytest-benchmark JSON file; it holds a `run`'s results: compare "
                          "two of those with `sdpa-bench compare DIR_A DIR_B`") in err, err
    for field, value, named in (("ceilings", {"gemm_flops_fp32": "x"}, "meta.ceilings['gemm_flops_fp32'] is not"),
                                ("ceilings", 5, "meta.ceilings should be a dict, not int"),
                                ("sessions", [1, 2], "meta.sessions[0] is not what a sweep writes there"),
                                ("sessions", [{"started": 1}], "meta.sessions[0] is not what a sweep writes there"),
                                ("wall_s", "x", "meta.wall_s should be a number of seconds, got 'x'"),
                                ("machine", lambda m: m | {"threads": "many"},
                                 "meta.machine.threads should be a whole number of CPUs, got 'many'"),
                                ("device", "tpu", "meta.device should be cpu or cuda (cuda:N), got 'tpu'")):
        bad = tmp_path / f"meta-{field}-{type(value).__name__}"  # each was an error nobody foresaw in `report`
        shutil.copytree(sweep, bad, dirs_exist_ok=True)
        doc = json.loads((bad / "results.json").read_text())
        doc["meta"][field] = value(doc["meta"][field]) if callable(value) else value
        (bad / "results.json").write_text(json.dumps(doc))
        code, err = said(["report", str(bad)], tmp_path, monkeypatch)
        assert code == 2 and f"{bad / 'results.json'} has a malformed entry" in err and named in err, err
    doc = json.loads((sweep / "results.json").read_text())
    (tmp_path / "no-meta").mkdir()
    (tmp_path / "no-meta" / "results.json").write_text(json.dumps(doc | {"meta": None}))
    code, err = said(["report", str(tmp_path / "no-meta")], tmp_path, monkeypatch)  # named no field
    assert code == 2 and "malformed entry (TypeError: meta should be an object, not NoneType)" in err, err
    doc["results"][0]["impl"] = "nosuch"  # read as the sweep's: a resume then said "nothing left to measure"
    (tmp_path / "no-meta" / "results.json").write_text(json.dumps(doc))
    code, err = said(["report", str(tmp_path / "no-meta")], tmp_path, monkeypatch)
    assert code == 2 and "results[0] is nosuch on " in err and "not a point of the sweep's meta.impls" in err, err


@pytest.mark.parametrize("edit, named", [
    ({"budget_s": "x"}, "meta.options.budget_s should be float, got 'x'"),  # was a TypeError nobody foresaw
    ({"budget_s": -5}, "meta.options.budget_s must be >= 0 seconds and finite; got -5"),  # was taken
    ({"min_reps": 500}, "meta.options.min_reps 500 exceeds meta.options.max_reps"),
    ({"memory": 1}, "meta.options.memory should be bool, got 1"),
    ({"seed": "7"}, "meta.seed should be an int, not str"),  # was taken: a text seed in the report
])
def test_a_resume_of_hand_edited_timing_options_is_refused_as_corrupt(sweep, edit, named, tmp_path,
                                                                       monkeypatch) -> None:
    """The options a sweep was started with are checked as the command line's are, before anything is measured."""
    bad = tmp_path / "bad"
    shutil.copytree(sweep, bad)
    doc = json.loads((bad / "results.json").read_text())
    del doc["meta"]["finished"]  # an unfinished sweep, so that --resume would measure
    doc["results"] = doc["results"][:1]
    (doc["meta"] if "seed" in edit else doc["meta"]["options"]).update(edit)
    (bad / "results.json").write_text(json.dumps(doc))
    before = (bad / "results.json").read_bytes()
    code, err = said(["run", "--resume", "--out", str(bad), "--no-plots"], tmp_path, monkeypatch)
    assert code == 2 and f"{bad / 'results.json'} has a malformed entry" in err and named in err, err
    assert len(err.strip().splitlines()) == 1 and (bad / "results.json").read_bytes() == before, err


def test_a_file_nested_deeper_than_python_reads_is_named(tmp_path, monkeypatch) -> None:
    """json.loads raises RecursionError, not a JSONDecodeError, on a document nested 100000 deep: it was an error
    nobody foresaw, naming no file."""
    (tmp_path / "deep").mkdir()
    for path in (tmp_path / "deep.json", tmp_path / "deep" / "results.json"):
        path.write_text("[" * 100000 + "]" * 100000)
    code, err = said(["gate", "--candidate", "deep.json"], tmp_path, monkeypatch)
    assert code == 2 and "deep.json: not a pytest-benchmark JSON file (nested deeper than" in err, err
    code, err = said(["report", "deep"], tmp_path, monkeypatch)
    assert code == 2 and "results.json is not valid JSON (nested deeper than Python reads)" in err, err


def test_a_sweep_whose_meta_names_no_shard_resumes(sweep, tmp_path, monkeypatch) -> None:
    """meta.shard is not required of a results file (report, compare and merge read one without it): a resume of
    one failed on it, "KeyError: 'shard'", as an error nobody foresaw."""
    old = tmp_path / "old"
    shutil.copytree(sweep, old)
    doc = json.loads((old / "results.json").read_text())
    assert doc["meta"].pop("shard", "absent") is None and doc["meta"].pop("finished")
    doc["results"] = doc["results"][:-1]  # the last point to measure again
    (old / "results.json").write_text(json.dumps(doc))
    code, err = said(["run", "--resume", "--out", str(old), "--no-plots"], tmp_path, monkeypatch)
    whole = json.loads((sweep / "results.json").read_text())["results"]
    assert code == 0 and len(json.loads((old / "results.json").read_text())["results"]) == len(whole), err


@pytest.mark.parametrize("shard", ["2/x", "3/2", "0/2", 2, "1/2/3"])
def test_a_hand_edited_shard_is_refused_as_corrupt_before_merge_counts_by_it(sweep, shard, tmp_path,
                                                                              monkeypatch) -> None:
    """merge counts a sweep's shards by meta.shard's N and reports name it: one no `run --shard` writes ("3/2", a
    number) was read, and merge's count and names came from it."""
    bad = tmp_path / "bad"
    shutil.copytree(sweep, bad)
    doc = json.loads((bad / "results.json").read_text())
    doc["meta"]["shard"] = shard
    (bad / "results.json").write_text(json.dumps(doc))
    code, err = said(["report", str(bad)], tmp_path, monkeypatch)
    assert code == 2 and f"meta.shard should be I/N with 1 <= I <= N (run --shard), or null; got {shard!r}" in err, err


def test_a_table_may_not_set_an_option_twice_leave_it_empty_or_decide_overwrite(tmp_path, monkeypatch) -> None:
    for body, named in (('overwrite = true', "'overwrite' decides what one run does"),
                        ('out = ""', "out: is empty"), ("impl = []", "impl: is empty"),
                        ("adaptive-budget = 5\nadaptive_budget = 6", "set the same option")):
        command = "continuous" if "adaptive" in body else "run"
        (tmp_path / "pyproject.toml").write_text(f"[tool.sdpa_bench.{command}]\n{body}\n")
        code, err = said([command, "--preset", "smoke"], tmp_path, monkeypatch)
        assert code == 2 and named in err, err


def test_quickstart_takes_a_name_a_folder_beside_it_has(tmp_path, monkeypatch) -> None:
    """`python -m sdpa_impls` puts the folder it runs in first on the path, where any folder reads as a namespace
    package: a name a folder there has is no module Python imports, and was refused."""
    (tmp_path / "myk").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    code, err = said(["quickstart", "--name", "myk", "--dest", "plugin"], tmp_path, monkeypatch)
    assert code == 0 and (tmp_path / "plugin" / "src" / "myk" / "__init__.py").is_file(), err


def test_quickstart_into_a_file_says_so(tmp_path, monkeypatch) -> None:
    (tmp_path / "afile").write_text("mine\n")
    for dest in ("afile", "afile/x"):
        code, err = said(["quickstart", "--dest", dest, "--name", "x"], tmp_path, monkeypatch)
        assert code == 2 and "afile is a file, not a folder" in err and "did not foresee" not in err, err
    assert (tmp_path / "afile").read_text() == "mine\n"


class Exits(Implementation):
    """An implementation that calls sys.exit, as a plug-in's error path might."""

    name = "exits_midway"

    def forward(self, inp: SDPAInputs) -> torch.Tensor:
        raise SystemExit(3)


def test_an_implementation_calling_sys_exit_fails_its_point_and_the_sweep_goes_on(monkeypatch) -> None:
    monkeypatch.setitem(registry._REGISTRY, Exits.name, Exits())
    rows = list(run_case(Case(lq=32, lk=32, e=16), [Exits.name, "naive"], "cpu",
                         Options(budget_s=0.01, min_reps=2, max_reps=3, memory=False)))
    assert rows[0].status == "failed" and rows[0].reason.startswith("SystemExit: 3")
    assert rows[1].status == "ok"


class Misbehaves(Implementation):
    """naive's answer, bent as a plug-in's bug might bend it (`how`)."""

    name = "misbehaves"
    how = ""
    support = Support(backward=True)

    def forward(self, inp: SDPAInputs) -> torch.Tensor:
        out = sdpa_impls.get("naive").forward(inp)
        if self.how == "writes its inputs":
            with torch.no_grad():
                inp.value.zero_()
        if self.how == "writes them unseen":  # through .data, as a raw pointer would: no version counter moves
            inp.value.data.add_(1.0)
        if self.how == "one thread":
            torch.set_num_threads(1)
        return {"batch dim dropped": lambda: out[0], "fp64": out.double, "None": lambda: None,
                "cut": lambda: out[..., :-1]}.get(self.how, lambda: out)()


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("mode", ["fwd", "fwd+bwd"])  # fwd+bwd: the gradient check's inputs are the ones written
@pytest.mark.parametrize("how, said", [
    ("batch dim dropped", "returned (8, 64, 16) torch.float32 on cpu; the call's answer is (1, 8, 64, 16) "
                          "torch.float32 on cpu"),
    ("fp64", "returned (1, 8, 64, 16) torch.float64 on cpu; the call's answer is (1, 8, 64, 16) torch.float32"),
    ("None", "returned NoneType; the call's answer is (1, 8, 64, 16)"),
    ("cut", "returned (1, 8, 64, 15) torch.float32"),
    ("writes its inputs", "value); put back for the implementations after it"),  # (gradient check's value)
    ("writes them unseen", "value); put back for the implementations after it"),
    ("one thread", "changed torch's settings (torch threads 2 -> 1); put back"),
])
def test_an_answer_torch_would_not_give_fails_its_point_and_no_other(how, said, interleaved, mode,
                                                                     monkeypatch) -> None:
    """A wrong shape that broadcasts against the reference, or a dtype more accurate than the case's, passed the
    check; a plug-in writing into q, k or v had the next implementation marked wrong, one setting the thread count
    had the next ones timed on one thread. Each is now its own point's failure, named, and the implementations
    after it are checked and timed on the case's own inputs and settings."""
    impl = Misbehaves()
    impl.how = how
    monkeypatch.setitem(registry._REGISTRY, impl.name, impl)
    case, options = Case(lq=64, lk=64, e=16, mode=mode), Options(budget_s=0.01, min_reps=2, max_reps=3, memory=False)
    names = [impl.name, "naive", "torch_sdpa"]
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # "2 -> 1" on any machine
    try:
        rows = run_case_interleaved(case, names, "cpu", options) if interleaved else list(
            run_case(case, names, "cpu", options))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
    assert rows[0].status in ("wrong", "failed") and said in rows[0].reason, rows[0].reason
    assert [r.status for r in rows[1:]] == ["ok", "ok"], [r.reason for r in rows]


def test_an_input_too_large_to_copy_is_watched_by_its_sum_and_nan_is_no_write(monkeypatch) -> None:
    """The copies that catch a write no version counter sees: an input over COPY_MAX_BYTES (a GPU case's dense
    mask) is kept as its sum instead, and an input that holds NaN, unwritten, is not taken for a written one."""
    from sdpa_impls.bench import check
    monkeypatch.setattr(check, "COPY_MAX_BYTES", 0)
    impl = Misbehaves()
    impl.how = "writes them unseen"
    monkeypatch.setitem(registry._REGISTRY, impl.name, impl)
    with pytest.raises(WrongResult, match=re.escape("wrote into its inputs in place (value)")):
        testing.check(impl.name, Case(lq=64, lk=64, e=16))
    for limit in (0, 1 << 30):  # its sum, then its copy
        monkeypatch.setattr(check, "COPY_MAX_BYTES", limit)
        ctx = check.CaseContext(Case(lq=64, lk=64, e=16), "cpu", 0)
        ctx.inputs.value[0, 0, 0, 0] = float("nan")
        ctx.mark(contents=True)
        assert ctx.changed() == ([], []), limit


WRITES_UNSEEN = """
import sdpa_impls


@sdpa_impls.register
class WritesUnseen(sdpa_impls.Implementation):
    name = "writes_unseen"
    support = sdpa_impls.Support()

    def forward(self, inp):
        out = sdpa_impls.get("naive").forward(inp)
        inp.value.data.add_(1.0)  # as a kernel's raw pointer would: no version counter moves
        return out
"""


def test_the_pytest_suites_implementations_on_the_command_line_replace_those_of_addopts(tmp_path) -> None:
    """--sdpa-impl in addopts is a default (docs/reference/configuration.md): the command line's replaced nothing and
    was added to it, so no session could narrow it; and one in an @file of arguments was added to it still."""
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\naddopts = "--sdpa-preset smoke '
                                             '--sdpa-impl naive"\n')

    def collected(*args: str, addopts: str = "") -> set[str]:
        done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                               "--pyargs", "sdpa_impls.suite.test_sdpa", *args], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120, env=os.environ | {"PYTEST_ADDOPTS": addopts})
        assert done.returncode == 0, done.stdout + done.stderr
        return {line.split("[")[1].split("-")[0] for line in done.stdout.splitlines() if "test_sdpa[" in line}

    assert collected("--sdpa-impl", "fused") == {"fused"}
    assert collected("--sdpa-impl=chunked", "--sdpa-impl", "fused", addopts="--sdpa-impl torch_sdpa") == \
        {"chunked", "fused"}
    assert collected(addopts="--sdpa-impl torch_sdpa") == {"naive", "torch_sdpa"}  # defaults both, as given
    (tmp_path / "args.txt").write_text("--sdpa-impl\nchunked\n")
    assert collected("@args.txt") == {"chunked"}
    (tmp_path / "defaults.txt").write_text("--sdpa-preset\nsmoke\n@inner.txt\n")  # an @file among the defaults
    (tmp_path / "inner.txt").write_text("--sdpa-impl\ntorch_sdpa\n")  # and one inside it: counted
    assert collected("--sdpa-impl", "fused", addopts="@defaults.txt") == {"fused"}


def test_a_pytest_benchmark_option_the_suite_replaces_is_told_wherever_it_is_given(tmp_path) -> None:
    """--benchmark-min-time and its kin do not change the suite's samples; the warning had read only the command line
    and the ini file's addopts, not $PYTEST_ADDOPTS or an @file of arguments."""
    (tmp_path / "args.txt").write_text("--benchmark-warmup=on\n")

    def warned(*args: str, addopts: str = "") -> str:
        done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                               "--pyargs", "sdpa_impls.suite.test_sdpa", "--sdpa-preset", "smoke", "--sdpa-impl",
                               "naive", *args], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                              env=os.environ | {"PYTEST_ADDOPTS": addopts})
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout + done.stderr

    assert "do not change its benchmarks" not in warned()
    assert "--benchmark-min-time do not change its benchmarks" in warned(addopts="--benchmark-min-time=0.1")
    assert "--benchmark-warmup do not change its benchmarks" in warned("@args.txt")
    assert "times at most 10,000 rounds a point: --benchmark-min-rounds 12000 gets 10,000" in warned(
        "--benchmark-min-rounds=12000")  # capped quietly, where measurement.md says "at least"


def test_the_pytest_suite_fails_the_point_that_writes_its_inputs_not_the_next(tmp_path) -> None:
    """The suite's case inputs are shared by the case's implementations: one that wrote into them unseen passed, and
    naive after it failed as wrong. Now its own test fails, naming what it did, and naive's passes."""
    (tmp_path / "writes_unseen_plugin.py").write_text(WRITES_UNSEEN)
    done = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "sdpa_impls.suite.test_sdpa", "-p",
                           "writes_unseen_plugin", "-p", "no:cacheprovider", "--benchmark-disable", "-rA",
                           "--sdpa-device", "cpu", "--sdpa-preset", "smoke", "--sdpa-impl", "writes_unseen,naive",
                           "-k", "L128-E64-fp32-fwd"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env=os.environ | {"PYTHONPATH": str(tmp_path)})
    said = [line.split(" - ")[0] for line in done.stdout.splitlines() if line.startswith(("PASSED", "FAILED"))]
    assert said == ["PASSED ::test_sdpa[naive-L128-E64-fp32-fwd]",
                    "FAILED ::test_sdpa[writes_unseen-L128-E64-fp32-fwd]"], done.stdout[-3000:]
    assert ("WrongResult: writes_unseen wrote into its inputs in place (value); put back for the implementations "
            "after it") in done.stdout, done.stdout[-3000:]


@pytest.mark.parametrize("how, said", [("batch dim dropped", "returned (8, 64, 16) torch.float32"),
                                       ("writes its inputs", "wrote into its inputs in place (value)"),
                                       ("writes them unseen", "wrote into its inputs in place (value)"),
                                       ("one thread", "changed torch's settings (torch threads 2 -> 1)")])
def test_a_plugin_authors_own_check_names_the_same_mistakes(how, said, monkeypatch) -> None:
    """`sdpa_impls.testing.check`, which the quickstart's test calls, had passed a dropped batch dim and inputs
    written in place."""
    impl = Misbehaves()
    impl.how = how
    monkeypatch.setitem(registry._REGISTRY, impl.name, impl)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with pytest.raises(WrongResult, match=re.escape(said)):
            testing.check(impl.name, Case(lq=64, lk=64, e=16))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)


def test_more_mistakes_are_named_for_what_they_are(sweep, tmp_path, monkeypatch) -> None:
    (tmp_path / "afile").write_text("mine\n")
    (tmp_path / "badgate.toml").write_text("time = 5\n")
    bench = tmp_path / "cand.json"
    bench.write_text(json.dumps({"benchmarks": []}))
    (tmp_path / "loop1").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop1")
    (tmp_path / "stopped").mkdir()  # a merge interrupted in its report: its results.json and no report.md
    shutil.copy(sweep / "results.json", tmp_path / "stopped" / "results.json")
    for argv, named in (
        (["run", *FAST, "--out", "a" * 300], "cannot write to output folder " + "a" * 60 + "...a"),
        (["report", "a" * 300], "a" * 60 + "..." + "a" * 40 + ": File name too long"),
        (["run", *FAST, "--out", "loop1"], "loop1 is a symbolic link to nothing (its target is missing, or the links"),
        (["compare", "loop1", "loop2"], "loop1/results.json does not exist"),
        (["merge", "loop1", str(sweep)], "loop1 is a symbolic link to nothing"),
        (["merge", "stopped", str(sweep)], "(a merge stopped before its report? `sdpa-bench report stopped` writes"),
        (["gate", "--candidate", "cand.json", "--candidate", "./cand.json"], "--candidate ./cand.json: given twice"),
        (["run", *FAST, "--out", "afile/x"], "afile is a file, not a folder"),
        (["run", *FAST, "--budget", "2", "--point-timeout", "1"], "--point-timeout 1 would stop points that are still"),
        (["merge", "m", str(sweep), str(sweep)], "is no shard (run without --shard)"),
        (["gate", "--candidate", str(sweep / "results.json")], "compare two of those with `sdpa-bench compare"),
        (["envs", "--env-cache", "afile"], "--env-cache afile: is a file, not a folder"),
        (["envs", "--env-cache", "afile/sub"], "--env-cache afile/sub: cannot be a folder, afile is a file"),
        # the user's file, never "head working tree of ...: badgate.toml"; before any work (no repository here)
        *([[cmd, "HEAD~1", "--config", "badgate.toml"],
           "error: --config badgate.toml, over sdpa-bench's defaults: time should be a str, got 5"]
          for cmd in ("continuous", "bisect")),
    ):
        code, err = said(argv, tmp_path, monkeypatch)
        assert code == 2 and named in err and len(err.strip().splitlines()) == 1, (argv, err)
        # the prefix argparse gives the same command's errors (`sdpa-bench run: error: argument --budget: ...`)
        assert err.startswith(f"sdpa-bench {argv[0]}: error: "), err
    monkeypatch.setenv("SDPA_BENCH_CPU_BF16", "fp16")
    code, err = said(["list"], tmp_path, monkeypatch)  # before the table, not after it
    assert code == 2 and err.startswith("sdpa-bench list: error: SDPA_BENCH_CPU_BF16 should be bf16 or fp32")
    monkeypatch.delenv("SDPA_BENCH_CPU_BF16")
    monkeypatch.setenv("SDPA_BENCH_CPU_EXP", "exp10")
    for argv in (["list"], ["run", *FAST, "--out", "exp"]):
        code, err = said(argv, tmp_path, monkeypatch)
        assert code == 2 and err.startswith(f"sdpa-bench {argv[0]}: error: SDPA_BENCH_CPU_EXP should be exp or exp2"), err
        assert len(err.strip().splitlines()) == 1 and not (tmp_path / "exp").exists()
    monkeypatch.delenv("SDPA_BENCH_CPU_EXP")
    code, _ = said(["envs", "--env-cache", "not-there"], tmp_path, monkeypatch)
    assert code == 0 and not (tmp_path / "not-there").exists()  # listing makes no folder
    monkeypatch.setenv("SDPA_BENCH_ENV_CACHE", str(tmp_path / "afile"))  # a setting nobody typed: named
    for argv in (["envs"], ["envs", "--prune"], ["continuous", "HEAD~1"], ["bisect", "HEAD~1"]):
        code, err = said(argv, tmp_path, monkeypatch)
        assert code == 2 and f"error: $SDPA_BENCH_ENV_CACHE {tmp_path / 'afile'}: " in err, (argv, err)
        assert len(err.strip().splitlines()) == 1, err


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine where torch_sdpa_cudnn cannot run")
def test_a_sweep_that_measured_nothing_is_no_success(tmp_path, monkeypatch) -> None:
    argv = ["run", *FAST[:2], "--impl", "torch_sdpa_cudnn", "--no-plots", "--out", "o"]
    code, err = said(argv, tmp_path, monkeypatch)
    assert code == 2 and "nothing was measured: every point was skipped here" in err.strip().splitlines()[-1]
    assert (tmp_path / "o" / "report.md").is_file()  # the reasons, saved


@pytest.mark.parametrize("rule, named", [
    ("time: naive / torch_sdpa <= 2 when dtype == fp23", "dtype is one of fp32, bf16, fp16, not 'fp23'"),
    ("time: naive / torch_sdpa <= 2 when mode == forward", "mode is one of fwd, bwd, fwd+bwd, not 'forward'"),
    ("time: naive / torch_sdpa <= 2 when L >= 1k", "lq is a number, not '1k'"),
])
def test_a_gate_rule_whose_condition_could_never_hold_is_refused(rule, named, tmp_path, monkeypatch) -> None:
    """A misspelt value made a rule n/a everywhere, and the gate passed."""
    (tmp_path / "pyproject.toml").write_text(f'[tool.sdpa_bench.gate]\nratios = ["{rule}"]\n')
    (tmp_path / "cand.json").write_text(json.dumps({"benchmarks": []}))
    code, err = said(["gate", "--candidate", "cand.json"], tmp_path, monkeypatch)
    assert code == 2 and named in err, err


def test_a_blank_time_reference_is_refused_not_read_as_times_as_measured(tmp_path, monkeypatch) -> None:
    """`time_reference = " "` (a name deleted, a space left) had switched the reference off as `""` does."""
    (tmp_path / "pyproject.toml").write_text('[tool.sdpa_bench.gate]\ntime_reference = "  "\n')
    (tmp_path / "cand.json").write_text(json.dumps({"benchmarks": []}))
    code, err = said(["gate", "--candidate", "cand.json"], tmp_path, monkeypatch)
    assert code == 2 and "time_reference: '  ' is blank" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("encoding", ["cp1252", "ascii"])
def test_output_in_an_encoding_without_its_symbols_keeps_the_answer(sweep, encoding, tmp_path) -> None:
    """A Windows console or PYTHONIOENCODING=ascii has no →, µ or ×: they print as ?, and compare's table and exit
    status stand (a UnicodeEncodeError ended the command with exit 2 before it printed its answer)."""
    env = os.environ | {"PYTHONIOENCODING": encoding}
    twin = shutil.copytree(sweep, tmp_path / "twin")
    proc = subprocess.run([sys.executable, "-m", "sdpa_impls", "compare", str(sweep), str(twin), "--markdown",
                           str(tmp_path / "c.md")], capture_output=True, env=env, cwd=tmp_path, timeout=120)
    out = proc.stdout.decode(encoding)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr.decode(encoding), proc.stderr
    assert "?" in out and "L128-E64-fp32-fwd" in out, out
    assert "×" in (tmp_path / "c.md").read_text(encoding="utf-8")  # files stay UTF-8, whatever the console


def test_compare_heads_its_table_as_the_gates_rules_and_refuses_an_unknown_time_reference(sweep, tmp_path,
                                                                                          monkeypatch) -> None:
    out = io.StringIO()
    monkeypatch.chdir(tmp_path)
    twin = shutil.copytree(sweep, tmp_path / "twin")
    with contextlib.redirect_stdout(out):
        assert main(["compare", str(sweep), str(twin)]) == 0
    assert "sdpa-bench compare: the gate's rules would PASS (" in out.getvalue(), out.getvalue()
    (tmp_path / "typo.toml").write_text('time_reference = "torch_sdap"\n')
    code, err = said(["compare", str(sweep), str(twin), "--config", "typo.toml"], tmp_path, monkeypatch)
    assert code == 2 and "time_reference 'torch_sdap': no implementation of that name" in err, err


def test_a_sweep_merged_from_shards_of_two_machines_has_no_absolute_time_compared(sweep, tmp_path,
                                                                                  monkeypatch) -> None:
    """merge keeps each shard's machine under merged_from; compare must not judge their times as one machine's."""
    merged = tmp_path / "merged"
    shutil.copytree(sweep, merged)
    doc = json.loads((merged / "results.json").read_text())
    machine = doc["meta"]["machine"]
    doc["meta"]["merged_from"] = [{"dir": "s1", "shard": "1/2", "machine": machine},
                                  {"dir": "s2", "shard": "2/2", "machine": machine | {"cpu": "Intel Xeon"}}]
    (merged / "results.json").write_text(json.dumps(doc))
    out = io.StringIO()
    monkeypatch.chdir(tmp_path)
    with contextlib.redirect_stdout(out):
        assert main(["compare", str(sweep), str(merged)]) == 0
    assert "absolute time rules refused" in out.getvalue() and "Intel Xeon" in out.getvalue(), out.getvalue()
    with contextlib.redirect_stdout(io.StringIO()) as same:  # one machine's shards: compared as before
        doc["meta"]["merged_from"][1]["machine"] = machine
        (merged / "results.json").write_text(json.dumps(doc))
        assert main(["compare", str(sweep), str(merged)]) == 0
    assert "absolute time rules refused" not in same.getvalue(), same.getvalue()


def test_a_keep_runs_folder_another_comparison_uses_is_refused_before_any_work(tmp_path, monkeypatch) -> None:
    """A second comparison there cleared the first one's run files as an earlier comparison's, and the first then
    read the second's as its own: refused while the folder's lock is held, before any environment is built."""
    runs = tmp_path / "runs"
    runs.mkdir()
    with lock_held_elsewhere(runs) as holder:
        code, err = said(["continuous", "--base-env", "torch==2.13.0", "--head-env", "torch==2.13.0 six",
                          "--env-cache", "cache", "--keep-runs", "runs"], tmp_path, monkeypatch)
    assert code == 2 and f"{runs} is being written by another `sdpa-bench continuous` (process " \
        f"{holder}): wait for it to finish, or choose another --keep-runs" in err, err
    assert not (tmp_path / "cache").exists()  # no environment was built


def test_a_line_argparse_refuses_removes_an_earlier_answer_it_names_but_never_a_resume_or_a_users_file(
        tmp_path, monkeypatch) -> None:
    """An empty SPEC or an unknown preset is refused before the command runs: an earlier --json / --markdown answer
    stayed, which a CI step (`test -f continuous.md`) then posted as this run's. The command itself removes it first."""
    verdict, comment = tmp_path / "v.json", tmp_path / "v.md"
    for line in (["continuous", "--base-env=", "--json", str(verdict), f"--markdown={comment}"],
                 ["continuous", "--preset", "nosuch", "--json", str(verdict), "--markdown", str(comment)],
                 ["gate", "--candidate", "c.json", "--json", str(verdict), "--nosuch"]):
        verdict.write_text('{"verdict": "PASS", "exit_code": 0}\n')
        comment.write_text("## sdpa-bench continuous: PASS\n")
        code, _ = said(line, tmp_path, monkeypatch)
        assert code == 2 and not verdict.exists(), line
        assert comment.exists() == (line[0] == "gate"), line  # the gate's line names no --markdown
    search, mine = tmp_path / "search.json", tmp_path / "mine.md"
    search.write_text('{"answer": "interrupted"}\n')  # the steps a --resume goes on from
    mine.write_text("my notes\n")  # not an answer: a file named by mistake
    code, _ = said(["bisect", "HEAD~1", "--preset", "nosuch", "--json", str(search), "--resume", str(search),
                    "--markdown", str(mine)], tmp_path, monkeypatch)
    assert code == 2 and search.read_text() == '{"answer": "interrupted"}\n' and mine.read_text() == "my notes\n"
    verdict.write_text('{"verdict": "FAIL", "exit_code": 1}\n')  # the rows a search is --from: an input
    code, _ = said(["bisect", "HEAD~1", "--preset", "nosuch", f"--from={verdict}", "--json", str(verdict)], tmp_path,
                   monkeypatch)
    assert code == 2 and verdict.exists()
