"""tools/gpu_gate_evidence.py on the CPU: its scenario branches build and run here, its resampling judges real kept
runs, and without a GPU it says so. What it measures needs a GPU; none of that is checked here."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import gpu_gate_evidence as ev  # noqa: E402


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gpu-evidence")
    ev.build_repo(out)
    return out


def _show(repo: Path, rev: str, path: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "show", f"{rev}:{path}"], check=True, capture_output=True,
                          text=True).stdout


@pytest.mark.parametrize("scenario", ["dev2", "dev5", "host20"])
def test_each_regression_is_one_planted_change_to_fused_that_compiles(scratch: Path, scenario: str) -> None:
    repo = scratch / "repo"
    base, changed = _show(repo, "base", ev.FUSED), _show(repo, scenario, ev.FUSED)
    assert ev.RETURN in base and ev.RETURN not in changed and "# a regression:" in changed
    compile(changed, ev.FUSED, "exec")
    diff = subprocess.run(["git", "-C", str(repo), "diff", "--stat", "base", scenario], capture_output=True,
                          text=True, check=True).stdout
    assert ev.FUSED in diff and "1 file changed" in diff
    assert {"dev2": "0.02 *", "dev5": "0.05 *", "host20": "0.2 *"}[scenario] in changed


def test_the_aa_branch_changes_docs_only(scratch: Path) -> None:
    diff = subprocess.run(["git", "-C", str(scratch / "repo"), "diff", "--name-only", "base", "aa"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert diff == ["README.md"]


def test_a_planted_branch_still_answers_right_on_the_cpu(scratch: Path) -> None:
    """The planted code is CUDA-only: on the CPU the branch's fused is the base's, checked against fp64."""
    repo = scratch / "repo"
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "host20"], check=True)
    try:
        code = ("import torch, sdpa_impls; from sdpa_impls import reference, max_abs_error\n"
                "q = torch.randn(1, 2, 70, 16); print(sdpa_impls.__file__)\n"
                "print(max_abs_error(sdpa_impls.get('fused')(q, q, q, is_causal=True), reference(q, q, q, is_causal=True)))")
        done = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True,
                              env=os.environ | {"PYTHONPATH": str(repo)})
        assert done.returncode == 0, done.stderr
        where, error = done.stdout.split()
        assert Path(where).resolve().is_relative_to(repo.resolve())  # the branch's code ran
        assert float(error) < 1e-4
    finally:
        subprocess.run(["git", "-C", str(repo), "checkout", "-q", "base"], check=True)


def test_subsets_are_distinct_seeded_and_sized() -> None:
    picks = ev.subsets(5, 5, 3, 20, seed=1)
    assert len(picks) == len(set(picks)) == 20 and all(len(b) == len(h) == 3 for b, h in picks)
    assert picks == ev.subsets(5, 5, 3, 20, seed=1) and picks != ev.subsets(5, 5, 3, 20, seed=2)
    assert len(ev.subsets(2, 2, 3, 50, seed=0)) == 1  # 2 runs a side: one subset, the runs themselves


def test_outcomes_count_a_catch_only_where_the_scenario_changed() -> None:
    assert ev.outcome("aa", [], 0) is False and ev.outcome("aa", ["time naive[x]"], 1) is True
    assert ev.outcome("dev2", ["time fused[L4096]"], 1) and not ev.outcome("dev2", ["time naive[L4096]"], 1)
    assert ev.outcome("host20", ["host fused[Lq1]"], 1)
    assert not ev.outcome("host20", ["host fused[Lq1]", "time fused[Lq1]"], 1)  # its device time must not move


def test_a_real_trial_is_kept_and_resampled_into_the_table(scratch: Path) -> None:
    """One real `continuous` (the smoke preset on this CPU, two rounds a side, short) through the script's own
    runner, then resampled trials judged on the runs it kept, and the table."""
    repo = scratch / "repo"
    # separate processes, as on a GPU (where the sides never share one): the runs the script resamples
    r = ev.real_trial(repo, "aa", scratch, ["--preset", "smoke", "--rounds", "2", "--separate-processes",
                                             "--max-time", "0.01", "--adaptive-budget", "0"])
    assert r["exit"] in (0, 1) and r["kind"] == "real" and r["wall_s"] > 0, r["stderr_tail"]
    kept = sorted((scratch / "aa-00").glob("*.json"))
    assert [f.name for f in kept] == ["base-1.json", "base-2.json", "head-1.json", "head-2.json"]
    again = ev.resampled(scratch, "aa", 3, 2, seed=0)
    assert len(again) == 1 and again[0]["kind"] == "resampled"  # two runs a side: one subset of two
    by_default = ev.resampled(scratch, "aa", 3, None, seed=0)  # one fewer than the 2 runs a side: 1 of 2, 4 pairs
    assert len(by_default) == 3 and all(t["trial"].count(",)") == 2 for t in by_default), by_default
    text = ev.table([r, *again])
    assert "| aa | real | 1 |" in text and "| aa | resampled | 1 |" in text and "≤" in text
    # the trial's own timing, and from it the wall time of a continuous at the defaults (4 rounds), marked estimated
    assert r["rounds"] == 2 and r["timing"]["setup_s"] > 0 and r["timing"]["per_round_s"] > 0
    assert r["timing"]["total_s"] <= r["wall_s"]
    wall = ev.estimated_wall([r, *again])
    low = r["timing"]["setup_s"] + 4 * r["timing"]["per_round_s"]
    assert f"takes about {low:.0f}–{low + 30:.0f} s (estimated from these, not measured)" in wall, wall


def test_without_a_gpu_it_stops_with_one_message(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device: the script would measure")
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_gate_evidence.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True)
    assert done.returncode == 1 and "needs a CUDA device" in done.stderr


@pytest.mark.parametrize("args, steps, message", [
    (["12x"], "", "SECONDS must be a whole number of seconds, not '12x'"),
    (["--impl", "fused"], "", "steps tests,serve,masks within 540 s"),  # SECONDS left out before --impl: default
    (["60", "--impl", "fused"], "gate,variants", "steps gate,variants within 60 s"),
    (["60"], "tests,varaints", "unknown step 'varaints'"),  # named before any step runs, not after the tests
])
def test_gpu_checks_reads_its_arguments_then_stops_without_a_gpu(tmp_path: Path, args: list[str], steps: str,
                                                                 message: str) -> None:
    """tools/gpu_checks.sh's usage, `OUTDIR [SECONDS] [--impl NAME ...]` and GPU_CHECKS_STEPS: a bad SECONDS or step
    is named, and a SECONDS left out before --impl is the default, not an error of the shell; on this CPU the script
    then stops with one message that says what it would have run."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device: the script would measure")
    env = os.environ | {"PYTHON": sys.executable, "GPU_CHECKS_STEPS": steps}
    if not steps:
        del env["GPU_CHECKS_STEPS"]
    done = subprocess.run(["bash", str(ROOT / "tools" / "gpu_checks.sh"), str(tmp_path / "out"), *args],
                          capture_output=True, text=True, cwd=ROOT, env=env)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "unbound variable" not in done.stderr


@pytest.mark.parametrize("seconds, steps, plan", [
    ("540", "", "tests 216s serve 162s masks 147s"),  # the tests 40 %, serve half the rest, masks the rest − 15 s
    ("590", "gate:380,variants:100,llm", "gate 380s variants 100s llm 95s"),
    ("590", "tests,gate:300,llm", "tests 116s gate 300s llm 159s"),  # gate's 300 s kept for it from the start
    ("200", "gate:300,variants:100", "gate 185s variants 0s"),  # fixed seconds past the budget are cut
    ("590", "peers,gate,plugin:60", "peers 265s gate 250s plugin 60s"),  # the scaffolded plug-in's CUDA path
])
def test_gpu_checks_splits_its_seconds_between_the_steps(tmp_path: Path, seconds: str, steps: str, plan: str
                                                         ) -> None:
    """GPU_CHECKS_DRY_RUN=1 prints each step's seconds, every step taking all of its share, and runs nothing."""
    env = os.environ | {"PYTHON": sys.executable, "GPU_CHECKS_STEPS": steps, "GPU_CHECKS_DRY_RUN": "1"}
    done = subprocess.run(["bash", str(ROOT / "tools" / "gpu_checks.sh"), str(tmp_path / "out"), seconds],
                          capture_output=True, text=True, cwd=ROOT, env=env, check=True)
    shares = [line for line in done.stdout.splitlines() if not line.startswith(" ")]  # indented: a step's command
    assert " ".join(" ".join(shares).split()) == plan
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("gate_args, scenarios", [("", ""), ("--rounds 3 --adaptive-budget 0", "aa")])
def test_the_gate_step_passes_its_continuous_arguments_on(tmp_path: Path, gate_args: str, scenarios: str) -> None:
    """The dry run prints the gate step's command: the evidence script with the step's budget less a minute and,
    from GPU_CHECKS_GATE_ARGS, each real continuous's arguments as one --continuous-args, from
    GPU_CHECKS_GATE_SCENARIOS its --scenarios; that command line is one the script accepts (on this CPU it then
    stops for want of a GPU, not with a usage error)."""
    import torch

    env = os.environ | {"PYTHON": sys.executable, "GPU_CHECKS_STEPS": "variants:150,gate", "GPU_CHECKS_DRY_RUN": "1",
                        "GPU_CHECKS_GATE_ARGS": gate_args, "GPU_CHECKS_GATE_SCENARIOS": scenarios,
                        "GPU_CHECKS_WORK": str(tmp_path / "work")}
    done = subprocess.run(["bash", str(ROOT / "tools" / "gpu_checks.sh"), str(tmp_path / "out"), "590"],
                          capture_output=True, text=True, cwd=ROOT, env=env, check=True)
    lines = [line for line in done.stdout.splitlines() if not line.startswith("  carried")]  # what calls carry
    assert lines[:2] == ["variants 150s", "gate 425s"] and len(lines) == 3, done.stdout
    cmd = shlex.split(lines[2])
    tail = (["--continuous-args", gate_args] if gate_args else []) + (["--scenarios", scenarios] if scenarios else [])
    assert cmd == [sys.executable, "tools/gpu_gate_evidence.py", "--out", str(tmp_path / "work" / "gate"),
                   "--budget", "365", *tail]
    if torch.cuda.is_available():
        return
    ran = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert ran.returncode == 1 and "needs a CUDA device" in ran.stderr, ran.stderr


def test_the_scenario_with_the_fewest_real_trials_runs_next() -> None:
    """Every chosen scenario gets a real trial before any gets a second, counting trials an earlier run kept."""
    order = ["aa", "dev2", "dev5", "host20"]
    trials: list[dict] = []
    for _ in range(6):
        trials.append({"scenario": ev.next_scenario(order, trials), "kind": "real"})
    assert [t["scenario"] for t in trials] == ["aa", "dev2", "dev5", "host20", "aa", "dev2"]
    earlier = [{"scenario": "aa", "kind": "real"}, {"scenario": "dev2", "kind": "real"},
               {"scenario": "dev2", "kind": "resampled"}]  # a resampled trial is not a real one
    assert ev.next_scenario(order, earlier) == "dev5"
    assert ev.next_scenario(["host20", "dev5"], earlier) == "host20"  # --scenarios sets the order


def test_the_scratch_repository_builds_where_git_has_no_identity(tmp_path: Path, monkeypatch) -> None:
    """A bare GPU image has no user.name or user.email: the scenario branches still commit."""
    (tmp_path / "gitconfig").write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL"):
        monkeypatch.delenv(name, raising=False)
    repo = ev.build_repo(tmp_path / "out")
    branches = subprocess.run(["git", "-C", str(repo), "branch", "--format=%(refname:short)"], capture_output=True,
                              text=True, check=True).stdout.split()
    assert sorted(branches) == ["aa", "base", "dev2", "dev5", "host20"]


def test_a_trial_is_not_started_that_the_budget_cannot_hold() -> None:
    """Before any real trial has run, the next is taken to last FIRST_TRIAL_S (the shortest seen on an H200), so a
    small --budget starts none instead of one its step's timeout kills unfinished; after one, the longest seen."""
    assert ev.trial_s([]) == ev.FIRST_TRIAL_S >= 120
    assert ev.trial_s([{"wall_s": 150.0}, {"wall_s": 210.5}]) == 210.5


@pytest.mark.parametrize("steps, warned, files", [
    ("peers,gate,variants,llm,asv,plugin", True, 13),  # the gate's 98 s share holds no trial
    ("variants:150,gate", False, 0),  # 6 files: all come back
])
def test_the_dry_run_says_what_a_call_would_waste_or_not_bring_back(tmp_path: Path, steps: str, warned: bool,
                                                                     files: int) -> None:
    env = os.environ | {"PYTHON": sys.executable, "GPU_CHECKS_STEPS": steps, "GPU_CHECKS_DRY_RUN": "1"}
    done = subprocess.run(["bash", str(ROOT / "tools" / "gpu_checks.sh"), str(tmp_path / "out"), "590"],
                          capture_output=True, text=True, cwd=ROOT, env=env, check=True)
    assert ("its --budget is under one real trial" in done.stdout) == warned, done.stdout
    assert (f"  {files} files in OUTDIR, more than the 8" in done.stdout) == bool(files), done.stdout


def test_more_than_eight_result_files_come_back_as_env_txt_and_one_archive(tmp_path: Path) -> None:
    """The device tool brings back at most 8 files from a call: gpu_bundle.sh puts all but env.txt into one gzip
    archive, byte for byte, where there are more; 8 or fewer are left as they are."""
    import tarfile

    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    written = {f"{name}": os.urandom(64) for name in ["env.txt", "a.log", "b.tar", "c.json", *"defghi"]}
    for name, data in written.items():
        (out / name).write_bytes(data)
    done = subprocess.run(["bash", str(ROOT / "tools" / "gpu_bundle.sh"), str(out)], capture_output=True, text=True,
                          check=True)
    assert "10 files" in done.stdout
    assert sorted(p.name for p in out.iterdir()) == ["checks.tar.gz", "env.txt", "sub"]
    with tarfile.open(out / "checks.tar.gz") as tar:
        inside = {m.name.removeprefix("./"): tar.extractfile(m).read() for m in tar.getmembers()}
    assert inside == {k: v for k, v in written.items() if k != "env.txt"}
    few = tmp_path / "few"
    few.mkdir()
    for name in "abcdefgh":
        (few / name).write_text(name)
    subprocess.run(["bash", str(ROOT / "tools" / "gpu_bundle.sh"), str(few)], check=True)
    assert sorted(p.name for p in few.iterdir()) == list("abcdefgh")


def test_a_file_over_the_size_a_call_brings_back_is_bundled_in_pieces_under_it(tmp_path: Path) -> None:
    """A call brings back no file over 16 MiB: two files, one of 17 MiB that does not compress, are bundled and
    the archive cut into pieces of at most 15 MiB, which joined give every file byte for byte."""
    import io
    import tarfile

    out = tmp_path / "big"
    out.mkdir()
    written = {"env.txt": b"H200", "results.json": os.urandom(17 << 20), "log.txt": b"done"}
    for name, data in written.items():
        (out / name).write_bytes(data)
    # the archive as it is written is never in it: left by a bundling that was stopped, or made by the shell before
    # the folder is listed (a race that once put an empty checks.tar.gz.part in the archive)
    (out / "checks.tar.gz.part").write_bytes(b"stopped")
    done = subprocess.run(["bash", str(ROOT / "tools" / "gpu_bundle.sh"), str(out)], capture_output=True, text=True,
                          check=True)
    assert "1 of them over 15 MiB" in done.stdout and "cut in 2 pieces" in done.stdout, done.stdout
    assert sorted(p.name for p in out.iterdir()) == ["checks.tar.gz.00", "checks.tar.gz.01", "env.txt"]
    assert all((out / f"checks.tar.gz.0{i}").stat().st_size <= 15 << 20 for i in (0, 1))
    joined = b"".join((out / f"checks.tar.gz.0{i}").read_bytes() for i in (0, 1))
    with tarfile.open(fileobj=io.BytesIO(joined)) as tar:
        inside = {m.name.removeprefix("./"): tar.extractfile(m).read() for m in tar.getmembers()}
    assert inside == {k: v for k, v in written.items() if k != "env.txt"}
