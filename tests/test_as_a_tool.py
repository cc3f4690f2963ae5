"""sdpa-bench as a kernel author uses it, from a wheel and from their own repository: a wheel built from this tree,
installed into an environment layered on the test environment (real pip, no index); a plug-in written by
`sdpa-bench quickstart` into a new git repository; its own test, `list`, `run` and the packaged pytest suite from
folders outside any sdpa-bench clone; `continuous` at the plug-in's root (a docs-only commit passes, a slower one
fails naming the implementation) and between two environments from a folder outside any repository.

The real runs measure time: run this file under `flock /tmp/sdpa-measure.lock` on a shared machine.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sdpa_impls.continuous.envbuild import build
from sdpa_impls.continuous.envs import python_of
from sdpa_impls.continuous.revisions import snapshot_working_tree
from test_continuous import commit, git

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = "toy_attention"
FAST = ["--preset", "smoke", "--max-time", "0.05", "--adaptive-budget", "0"]
# the toy's kernel made slower: the whole attention computed twice more, its answers dropped
SLOWER = ("    def forward(self, inp: SDPAInputs) -> torch.Tensor:\n",
          "    def forward(self, inp: SDPAInputs) -> torch.Tensor:\n"
          "        for _ in range(2):\n"
          "            self._once(inp)\n"
          "        return self._once(inp)\n\n"
          "    def _once(self, inp: SDPAInputs) -> torch.Tensor:\n")


def run(tool: dict, *args: str, cwd: Path, timeout: float = 600, **extra: str) -> subprocess.CompletedProcess:
    """A command of the wheel's environment (`sdpa-bench`, `python`), as a user types it, from `cwd`, with the
    environment variables `extra` set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SDPA_", "PYTEST_")) and k != "PYTHONPATH"}
    env |= extra
    exe = tool["bin"] / args[0] if (tool["bin"] / args[0]).exists() else Path(args[0])
    return subprocess.run([str(exe), *args[1:]], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def tool(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """sdpa-bench from a wheel of this tree in `venv` (layered on the test environment: torch and the test tools come
    from there, sdpa-bench from the wheel), and the toy plug-in written by its quickstart, committed in `plugin`."""
    root = tmp_path_factory.mktemp("tool")
    source = root / "source"
    snapshot_working_tree(ROOT, source)  # built from a copy: the build leaves nothing in this tree
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-index", "--no-build-isolation",
                    "-w", str(root / "dist"), str(source)], check=True, timeout=300)
    wheel = next((root / "dist").glob("sdpa_bench-*.whl"))
    # --ignore-installed: the test environment's own sdpa-bench, behind the layer, stays as it is
    build(root / "venv", ["--no-deps", "--no-index", "--ignore-installed", str(wheel)])
    out = {"root": root, "venv": root / "venv", "bin": python_of(root / "venv").parent, "plugin": root / "toy-attention"}
    done = run(out, "sdpa-bench", "quickstart", "--name", PLUGIN, "--dest", str(out["plugin"]), cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    out["quickstart"] = done.stderr
    meta = out["plugin"] / "pyproject.toml"  # judged at 25 %: a CI machine is shared with other jobs
    meta.write_text(meta.read_text() + 'continuous_time = "median:25%"\n')
    done = run(out, "python", "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--no-build-isolation",
               "-e", str(out["plugin"]), cwd=root)
    assert done.returncode == 0, done.stderr
    git(out["plugin"], "init", "-q", "-b", "main")
    out["first"] = commit(out["plugin"], "toy attention from quickstart")
    readme = out["plugin"] / "README.md"
    readme.write_text(readme.read_text() + "\nA line of documentation.\n")
    out["docs"] = commit(out["plugin"], "docs only")
    kernel = out["plugin"] / "src" / PLUGIN / "__init__.py"
    text = kernel.read_text()
    assert text.count(SLOWER[0]) == 1
    kernel.write_text(text.replace(SLOWER[0], SLOWER[1]))
    out["slow"] = commit(out["plugin"], "toy attention: the attention three times")
    git(out["plugin"], "checkout", "-q", out["docs"])  # the working tree as it was before the slower commit
    return out


def test_the_wheel_is_what_runs_and_carries_its_data(tool: dict) -> None:
    code = "import json, sdpa_impls, sdpa_impls.gate.config as c; print(json.dumps([sdpa_impls.__file__, str(c.DEFAULTS_FILE)]))"
    done = run(tool, "python", "-c", code, cwd=tool["root"])
    assert done.returncode == 0, done.stderr
    package, defaults = json.loads(done.stdout)
    assert Path(package).is_relative_to(tool["venv"]) and Path(defaults).is_file(), (package, defaults)
    workflow = (tool["plugin"] / ".github" / "workflows" / "sdpa-bench.yml").read_text()  # the template is package data
    # installed from a wheel, which no CI runner has: a place to fill in, never a name a public index could serve
    assert '"sdpa-bench[test] @ git+https://HOST/OWNER/sdpa-bench@COMMIT"' in workflow, workflow
    assert "replace HOST/OWNER/sdpa-bench@COMMIT" in tool["quickstart"], tool["quickstart"]
    # its .gitignore kept what `pip install -e .` made out of the first commit
    tracked = git(tool["plugin"], "ls-files").split()
    assert ".gitignore" in tracked and not [f for f in tracked if ".egg-info" in f], tracked


def test_the_scaffolded_plugin_is_listed_and_its_test_passes(tool: dict) -> None:
    listed = run(tool, "sdpa-bench", "list", cwd=tool["root"])
    assert listed.returncode == 0 and any(line.startswith(f"{PLUGIN} ") and " yes " in line
                                          for line in listed.stdout.splitlines()), listed.stdout
    tested = run(tool, "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=tool["plugin"])
    assert tested.returncode == 0 and " passed" in tested.stdout and "failed" not in tested.stdout, tested.stdout


def test_run_and_the_packaged_suite_work_outside_any_repository(tool: dict) -> None:
    away = tool["root"] / "elsewhere"
    away.mkdir()
    done = run(tool, "sdpa-bench", "run", "--preset", "smoke", "--impl", f"{PLUGIN},torch_sdpa", "--budget", "0.05",
               "--out", str(away / "results"), "--no-plots", cwd=away)
    assert done.returncode == 0, done.stderr
    results = json.loads((away / "results" / "results.json").read_text())["results"]
    assert {(r["impl"], r["status"]) for r in results} == {(PLUGIN, "ok"), ("torch_sdpa", "ok")}
    suite = run(tool, "python", "-m", "pytest", "--pyargs", "sdpa_impls.suite.test_sdpa", "-q", "-p",
                "no:cacheprovider", "--benchmark-disable", "--sdpa-impl", PLUGIN, cwd=away)
    assert suite.returncode == 0 and "5 passed" in suite.stdout, suite.stdout + suite.stderr


def test_the_plugins_asv_history_measures_it_against_torch_sdpa(tool: dict) -> None:
    """The asv configuration quickstart wrote, under real asv, as a GPU user with their own torch runs it: the machine
    registered by the packaged module, one commit measured in this environment, the site published with the
    plug-in's own series and none of sdpa-bench's legacy ones."""
    asv_util = pytest.importorskip("asv.util", reason="asv is not installed (pip install -e .[asv])")
    plugin, home = tool["plugin"], tool["root"] / "home"
    home.mkdir()
    conf = asv_util.load_json(str(plugin / "asv.conf.json"), js_comments=True)
    assert conf["branches"] == ["main"] and conf["matrix"]["req"]["torch"] == [torch_public_version()]
    wheel = next((tool["root"] / "dist").glob("sdpa_bench-*.whl"))  # where asv installs sdpa-bench from: the wheel
    assert conf["install_command"][1].endswith(f"--no-deps 'sdpa-bench @ {wheel.as_uri()}'"), conf["install_command"]
    assert ".asv/" in (plugin / ".gitignore").read_text().splitlines()
    env = {"HOME": str(home), "SDPA_BENCH_PRESET": "smoke"}
    machine = run(tool, "python", "-m", "sdpa_impls.suite.asv_machine", cwd=tool["root"], **env)
    assert machine.returncode == 0, machine.stderr
    measured = run(tool, "python", "-m", "asv", "run", "--quick", "--show-stderr", "--environment",
                   f"existing:{tool['bin'] / 'python'}", "--set-commit-hash", tool["first"], "--bench",
                   rf"^bench_{PLUGIN}\.Forward\.", cwd=plugin, **env)
    assert measured.returncode == 0, measured.stdout[-3000:] + measured.stderr[-3000:]
    published = run(tool, "python", "-m", "asv", "publish", cwd=plugin, **env)
    assert published.returncode == 0, published.stdout[-3000:] + published.stderr[-3000:]
    index = json.loads((plugin / ".asv" / "html" / "index.json").read_text())
    forward = {name for name in index["benchmarks"] if name.startswith(f"bench_{PLUGIN}.Forward.")}
    time_series = f"bench_{PLUGIN}.Forward.track_time_sdpa"
    # CUDA adds the device time and the host overhead; sdpa-bench's own legacy series is never a plug-in's
    assert {time_series, f"bench_{PLUGIN}.Forward.track_peak_memory"} <= forward
    assert f"bench_{PLUGIN}.Forward.time_sdpa" not in forward
    assert sorted(index["benchmarks"][time_series]["params"][0]) == ["'torch_sdpa'", repr(PLUGIN)]  # registry order
    results = next((plugin / ".asv" / "results").glob(f"{machine.stdout.split()[-1]}/{tool['first'][:8]}-*.json"))
    times = json.loads(results.read_text())["results"][time_series][0]
    assert times and all(t is not None and t > 0 for t in times), times


def torch_public_version() -> str:
    done = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                          text=True, check=True, timeout=120)
    return done.stdout.strip().split("+")[0]


SUITE = ("python", "-m", "pytest", "--pyargs", "sdpa_impls.suite.test_sdpa", "-q", "-p", "no:cacheprovider")


@pytest.mark.parametrize("args, env, said", [
    (("--sdpa-preset", "smok"), {}, "unknown preset 'smok'"),
    (("--sdpa-impl", "naive,nope"), {}, "unknown implementation 'nope'"),
    (("--sdpa-device", "meta"), {}, "--sdpa-device meta: the suite runs on cpu or cuda"),
    ((), {"SDPA_BENCH_PRESET": "smok"}, "SDPA_BENCH_PRESET='smok': unknown preset 'smok'"),
    (("--sdpa-preset", ""), {}, "--sdpa-preset: an empty value"),  # not the whole cpu preset
    (("--sdpa-impl", ",,"), {}, "--sdpa-impl ',,': names no implementation"),  # not every implementation
    (("--sdpa-impl", "naive,,fused"), {}, "--sdpa-impl 'naive,,fused': an empty name between commas"),  # a typo
    (("--sdpa-impl", "naive", "--sdpa-impl="), {}, "--sdpa-impl: an empty value"),  # was dropped silently
    (("--sdpa-impl", "naive"), {"SDPA_BENCH_CPU_BF16": "bf61"}, "SDPA_BENCH_CPU_BF16 should be bf16 or fp32"),
    (("--sdpa-impl", "naive", "--benchmark-json", "/dev/null/x.json"), {},  # not after the last point, a traceback
     "--benchmark-json /dev/null/x.json: cannot write (/dev/null is a file, not a folder)"),
    (("--sdpa-impl", "naive", "-p", "no:benchmark"), {},  # one fixture error per point
     "sdpa-bench's suite needs pytest-benchmark's plug-in, which this session does not load (-p no:benchmark)"),
])
def test_the_packaged_suite_refuses_a_typo_in_one_line(tool: dict, args: tuple[str, ...], env: dict[str, str],
                                                       said: str) -> None:
    """pytest's own usage error (exit 4, one line), as for pytest's options, not a collection error's traceback."""
    done = run(tool, *SUITE, *args, cwd=tool["root"], **env)
    assert done.returncode == 4 and f"ERROR: {said}" in done.stderr, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr and "collecting" not in done.stdout, done.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a CUDA device")
def test_the_suite_on_a_cuda_device_this_machine_lacks_stops_instead_of_passing_as_skips(tool: dict) -> None:
    """`--sdpa-device cuda` where torch has no CUDA device measured nothing: pytest's usage error (exit 4) naming the
    device and torch, not a green run of skipped benchmarks that a CI would read as passing (`run --device cuda`
    refuses it too)."""
    done = run(tool, *SUITE, "--benchmark-only", "--sdpa-preset", "smoke", "--sdpa-impl", "naive", "--sdpa-device",
               "cuda", "--benchmark-json", "g.json", cwd=tool["root"])
    assert done.returncode == 4, done.stdout + done.stderr
    said = done.stdout + done.stderr  # one line, as pytest prints an unknown preset: no "_pytest.outcomes.Exit"
    assert f"ERROR: --sdpa-device cuda: no CUDA device is available to this torch ({torch.__version__}" in said, said
    assert "outcomes" not in said, said
    assert "Traceback" not in done.stdout + done.stderr and "skipped" not in done.stdout


def test_the_suite_that_skipped_every_point_exits_5_as_run_exits_2(tool: dict, tmp_path: Path) -> None:
    """A plug-in that runs nowhere on this machine (cudnn_frontend: CUDA only), named to the suite: every point
    skipped, pytest's "nothing ran" (exit 5) with one line saying so, not a green job that measured nothing (as
    `run` exits 2); --benchmark-skip asks for the skips and keeps 0. continuous says that side measured nothing, and
    why, not that its selection collected none."""
    from sdpa_impls.continuous.outcomes import outcome_lines
    from sdpa_impls.continuous.sides import RoundRun, Side, _points
    from sdpa_impls.errors import SideError

    out, junit = tmp_path / "skipped.json", tmp_path / "skipped.junit.xml"
    named = (*SUITE, "--benchmark-only", "--sdpa-preset", "smoke", "--sdpa-impl", "cudnn_frontend")
    done = run(tool, *named, f"--benchmark-json={out}", f"--junitxml={junit}", cwd=tmp_path)
    said = done.stdout + done.stderr
    assert done.returncode == 5 and "5 skipped" in said, said
    assert "sdpa-bench: nothing was measured: all 5 of the suite's points were skipped here" in said, said
    (tmp_path / "test_own.py").write_text("def test_own():\n    pass\n")  # beside a test of one's own: its status
    mixed = run(tool, *SUITE, "test_own.py", "--sdpa-preset", "smoke", "--sdpa-impl", "cudnn_frontend", cwd=tmp_path)
    assert mixed.returncode == 0 and "1 passed, 5 skipped" in mixed.stdout, mixed.stdout + mixed.stderr
    asked = run(tool, *named, "--benchmark-skip", cwd=tmp_path)
    assert asked.returncode == 0 and "5 skipped" in asked.stdout and "nothing was measured" not in asked.stdout, \
        asked.stdout + asked.stderr
    side = Side("head", "HEAD", None, tmp_path, sys.executable)
    with pytest.raises(SideError, match=r"head HEAD: its benchmark run measured nothing: all 5 benchmarks were "
                                        r"skipped \(first, cudnn_frontend\[L128-.*\]: .*device=cpu"):
        _points(side, RoundRun(out, done.returncode, outcome_lines(said, junit), said))


def test_benchmark_compare_compares_the_suites_machine_fields(tool: dict) -> None:
    """pytest-benchmark compares the saved run's machine before anything is collected: the suite's own fields
    (torch, threads, timer) are compared then too, so a run saved here a moment ago is the same machine, and
    another thread count is not."""
    away = tool["root"] / "compare"
    away.mkdir()
    timed = (*SUITE, "--benchmark-only", "--sdpa-preset", "smoke", "--sdpa-impl", "naive,torch_sdpa",
             "--benchmark-max-time", "0.01")
    saved = run(tool, *timed, "--benchmark-autosave", cwd=away)
    assert saved.returncode == 0 and "10 passed" in saved.stdout, saved.stdout + saved.stderr
    again = run(tool, *timed, "--benchmark-compare", cwd=away)
    said = again.stdout + again.stderr
    assert again.returncode == 0 and "Comparing against benchmarks from" in said, said
    assert "machine_info is different" not in said, said
    threads = run(tool, *timed, "--benchmark-compare", "--benchmark-min-time=0.01", cwd=away, OMP_NUM_THREADS="1")
    said = threads.stdout + threads.stderr
    assert threads.returncode == 0 and "machine_info is different" in said, said
    assert "--benchmark-min-time do not change its benchmarks" in said, said  # the suite samples as run does
    assert '"threads": 1' in said.split("machine_info is different", 1)[1], said


def test_a_plugin_that_does_not_load_fails_where_it_is_named(tool: dict) -> None:
    """A plug-in whose import fails is a reason in `list` and a skip in a sweep over everything, but where it is
    named (its own test, `run --impl`, the suite's --sdpa-impl) it fails: a CI that runs them never stays green with
    a kernel that never ran."""
    kernel = tool["plugin"] / "src" / PLUGIN / "__init__.py"
    text = kernel.read_text()
    kernel.write_text(text + "\nimport toy_kernel_library_that_is_not_installed\n")
    try:
        tested = run(tool, "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=tool["plugin"])
        assert tested.returncode == 1 and "PluginLoadError" in tested.stdout and " skipped" not in tested.stdout, \
            tested.stdout[-3000:]
        swept = run(tool, "sdpa-bench", "run", "--preset", "smoke", "--impl", PLUGIN, "--out",
                    str(tool["root"] / "never"), cwd=tool["root"])
        assert swept.returncode == 2 and swept.stderr.count("\n") == 1, swept.stderr
        assert f"plug-in {PLUGIN!r} failed to load: ModuleNotFoundError" in swept.stderr, swept.stderr
        suite = run(tool, "python", "-m", "pytest", "--pyargs", "sdpa_impls.suite.test_sdpa", "-q", "-p",
                    "no:cacheprovider", "--benchmark-disable", "--sdpa-impl", PLUGIN, cwd=tool["root"])
        assert suite.returncode == 4 and "failed to load" in suite.stderr, suite.stdout + suite.stderr
        assert "Traceback" not in suite.stdout + suite.stderr, suite.stdout + suite.stderr
    finally:
        kernel.write_text(text)


def verdict(tool: dict, *args: str, cwd: Path, rounds: int = 2) -> tuple[int, dict, str]:
    out = tool["root"] / f"verdict-{len(list(tool['root'].glob('verdict-*')))}.json"
    done = run(tool, "sdpa-bench", "continuous", *args, *FAST, "--rounds", str(rounds), "--json", str(out), cwd=cwd)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(out.read_text()) if out.is_file() else {}, done.stdout + done.stderr


def test_continuous_in_the_plugin_repository(tool: dict) -> None:
    code, docs, text = verdict(tool, tool["first"], tool["docs"], cwd=tool["plugin"])
    assert code == 0 and not docs["failures"], text
    project = docs["run"]["project"]
    assert project["kind"] == "plug-in" and project["package"] == "toy-attention"
    assert project["impls"] == {"base": [PLUGIN, "torch_sdpa"], "head": [PLUGIN, "torch_sdpa"]}
    assert f"Compared: plug-in toy-attention ({tool['plugin']}) at each revision" in text
    assert docs["config"] == "head's pyproject.toml [tool.sdpa_bench.gate], over sdpa-bench's defaults"
    assert "more each one process timing base and head in turn" in docs["run"]["pairing"], text  # each its plug-in
    code, slow, text = verdict(tool, tool["docs"], tool["slow"], cwd=tool["plugin"])
    failed = {f["subject"].split("[")[0] for f in slow.get("failures", [])}
    assert code == 1 and failed == {PLUGIN}, text  # torch_sdpa is the yardstick, never a failure


def test_a_wrong_answer_is_named_wrong_with_its_error(tool: dict) -> None:
    """A head whose kernel answers wrongly fails as wrong, naming the point, its error and the tolerance, not as a
    benchmark missing from head."""
    kernel = tool["plugin"] / "src" / PLUGIN / "__init__.py"
    text = kernel.read_text()
    last = "        return (p @ v.float()).to(q.dtype)"
    assert text.count(last) == 1
    kernel.write_text(text.replace(last, "        return (1.1 * (p @ v.float())).to(q.dtype)"))
    try:
        code, wrong, said = verdict(tool, tool["docs"], cwd=tool["plugin"], rounds=1)
    finally:
        kernel.write_text(text)
    failed = {(f["kind"], f["subject"].split("[")[0]) for f in wrong.get("failures", [])}
    assert code == 1 and ("correctness", PLUGIN) in failed and ("missing", PLUGIN) not in failed, said  # once
    messages = [f["message"] for f in wrong["failures"] if f["kind"] == "correctness"]
    assert all(m.startswith("wrong, so not timed: ") and "> tolerance" in m for m in messages), messages
    assert len(messages) == 5 and "wrong, so not timed" in said, said  # every smoke point, in the printed verdict


def test_a_plugin_that_requires_another_sdpa_bench_is_refused_not_installed_from_an_index(tool: dict) -> None:
    """Both sides run over the sdpa-bench that runs `continuous`: a head declaring a version it is not is one line,
    exit 2, and pip is never asked for a package of that name (anyone may register it on an index)."""
    meta = tool["plugin"] / "pyproject.toml"
    text = meta.read_text()
    assert text.count('"sdpa-bench>=0.1"') == 1
    meta.write_text(text.replace('"sdpa-bench>=0.1"', '"sdpa-bench>=99"'))
    try:
        code, _, said = verdict(tool, tool["docs"], cwd=tool["plugin"], rounds=1)
    finally:
        meta.write_text(text)
    assert code == 2 and "declares sdpa-bench>=99, but both sides run over the sdpa-bench running this" in said, said
    assert "building" not in said and "pip" not in said, said


def test_a_side_without_the_entry_point_measures_the_reference_alone(tool: dict) -> None:
    """A head whose package no longer declares the plug-in's implementation fails with its benchmarks missing, and
    measures the time reference alone: not every implementation installed beside it (another's plug-in included,
    whose errors were then blamed on this change). A base from before the entry point does the same, and passes.
    The head is the working tree checked out at the change, as CI has it: a plug-in's change still, since BASE
    declares the implementation (the working tree's pyproject.toml alone had made it exit 2, "no implementations")."""
    meta = tool["plugin"] / "pyproject.toml"
    text = meta.read_text()
    assert text.count("[project.entry-points.sdpa_impls]") == 1
    meta.write_text(text.replace("[project.entry-points.sdpa_impls]", "[project.entry-points.not_sdpa_impls]"))
    try:
        gone_commit = commit(tool["plugin"], "entry point dropped")
        code, gone, said = verdict(tool, tool["docs"], cwd=tool["plugin"], rounds=1)
    finally:
        git(tool["plugin"], "checkout", "-q", tool["docs"])  # the working tree as the other tests have it
    assert code == 1 and {f["kind"] for f in gone["failures"]} == {"missing"}, said
    assert gone["run"]["project"]["impls"]["head"] == ["torch_sdpa"]
    assert {r["impl"] for r in gone["rows"]} == {PLUGIN, "torch_sdpa"}, said
    assert f"head declares no implementation (base: {PLUGIN}), so head measured torch_sdpa." in said
    # the other way round, the change that adds the entry point: base measures the reference, not every
    # implementation installed (whose rows head then missed), and the plug-in's rows are new at head
    code, added, said = verdict(tool, gone_commit, tool["docs"], cwd=tool["plugin"], rounds=1)
    assert code == 0 and not added["failures"], said
    assert added["run"]["project"]["impls"] == {"base": ["torch_sdpa"], "head": [PLUGIN, "torch_sdpa"]}
    assert f"base declares no implementation (head: {PLUGIN}), so base measured torch_sdpa." in said


def test_two_environments_compare_from_any_folder(tool: dict) -> None:
    away = tool["root"] / "no-repository"
    away.mkdir()
    python = str(python_of(tool["venv"]))
    # one round: the mechanics (nothing checked out, the running sdpa-bench on both sides), not a verdict on time
    code, env, text = verdict(tool, "--base-env", python, "--head-env", python, "--impl", PLUGIN, cwd=away, rounds=1)
    assert code == 0 and env["run"]["project"]["kind"] == "none", text  # one run a side decides nothing slower
    # one interpreter on both sides: the round that checks, then one process timing both sides in turn
    assert len(env["rows"]) == 10 and all(r["base_runs"] == r["head_runs"] == 2 for r in env["rows"])
    assert "1 more each one process timing base and head in turn" in env["run"]["pairing"], text
    assert f"on both sides, in the same environment ({python}): any difference is noise" in text  # an A/A run


@pytest.mark.parametrize("where, args, message", [
    ("plain", ["continuous"], "is not inside a git repository: continuous compares git revisions"),
    ("plain", ["continuous", "--head-env", ""], "continuous: error: --head-env: an empty value; give one"),
    ("no-plugin", ["continuous"], "declares no implementations (package other): continuous compares revisions of "
                                  "sdpa-bench or of a plug-in package"),
    ("plain", ["bisect", "v1", "v2"], "is not inside a git repository: bisect searches git revisions of sdpa-bench "
                                      "or of a plug-in package, or the releases of a package (--package NAME)"),
])
def test_a_folder_the_gate_cannot_use_is_one_message(tool: dict, where: str, args: list[str], message: str) -> None:
    folder = tool["root"] / where
    if not folder.exists():
        folder.mkdir()
        if where == "no-plugin":
            (folder / "pyproject.toml").write_text('[project]\nname = "other"\nversion = "1"\n')
            git(folder, "init", "-q")
    done = run(tool, "sdpa-bench", *args, cwd=folder)
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr, done.stderr
    said = [line for line in done.stderr.splitlines() if not line.startswith("[")]  # progress lines start with [
    assert len(said) == 1 and message in said[0], done.stderr
