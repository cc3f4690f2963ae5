"""`sdpa-bench continuous` across environments: each side runs in the environment its revision declares, or the
one named with --base-env / --head-env. Real pip, real virtual environments layered on the test environment (no
download: pip finds the plug-in's wheels in a folder made here), real pytest-benchmark runs.

The plug-in package of tests/plugins at two versions stands for any dependency: 0.2.0's test_tunable does three
times the work of 0.1.0's. The real runs measure time: run this file under `flock /tmp/sdpa-measure.lock` on a
shared machine.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sdpa_impls.continuous.comparison import ADAPTIVE_BUDGET, ENV_BUDGET_FACTOR
from sdpa_impls.continuous.envcache import READY, prepare
from sdpa_impls.continuous.envs import Declared, EnvSpec, declared, parse_spec, unmet
from sdpa_impls.continuous.revisions import snapshot_working_tree
from sdpa_impls.continuous.verdict import judge
from sdpa_impls.continuous.versions import differences, torch_differs
from sdpa_impls.continuous.render import render
from sdpa_impls.errors import GateInputError, UsageError
from sdpa_impls.gate.config import config_from_dict
from sdpa_impls.gate.points import Point
from test_continuous import commit, continuous, git

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "tests" / "plugins" / "sdpa_test_plugins"
FAST = ["--preset", "smoke", "--impl", "test_tunable", "--rounds", "2", "--max-time", "0.05", "--adaptive-budget",
        "0"]


def plugin_at(dest: Path, version: str, repeats: int) -> Path:
    """The test plug-in package as version `version`, its test_tunable doing `repeats` units of work."""
    shutil.copytree(PLUGIN, dest, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    meta = dest / "pyproject.toml"
    meta.write_text(meta.read_text().replace('version = "0.1.0"', f'version = "{version}"'))
    module = dest / "src" / "sdpa_test_plugins" / "__init__.py"
    text = module.read_text()
    assert "BASE_REPEATS = 4 " in text
    module.write_text(text.replace("BASE_REPEATS = 4 ", f"BASE_REPEATS = {repeats} "))
    return dest


@pytest.fixture(scope="module")
def plugins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The plug-in at 0.1.0 and 0.2.0 as folders and as wheels in `house` (pip's only source in these tests)."""
    root = tmp_path_factory.mktemp("plugins")
    out = {"v1": plugin_at(root / "v1", "0.1.0", 4), "v2": plugin_at(root / "v2", "0.2.0", 12), "house": root / "house"}
    for v in ("v1", "v2"):
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-index",
                        "--no-build-isolation", "-w", str(out["house"]), str(out[v])], check=True, timeout=300)
    return out


@pytest.fixture()
def offline(plugins: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """pip sees no index, only the plug-in's wheels."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(plugins["house"]))


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """This project as a fresh repository whose revisions pin the plug-in: `old` at 0.1.0 (its test extra requires
    it, constraints-cpu.txt pins it), `new` only changing the pin to 0.2.0. Judged at a 25 % floor."""
    path = tmp_path_factory.mktemp("envs") / "repo"
    snapshot_working_tree(ROOT, path)
    meta = path / "pyproject.toml"
    text = meta.read_text()
    old = 'test = ["pytest>=8",'
    assert old in text
    meta.write_text(text.replace(old, 'test = ["sdpa-test-plugins", "pytest>=8",')
                    + '\n[tool.sdpa_bench.gate]\ncontinuous_time = "median:25%"\n')
    pins = path / "constraints-cpu.txt"
    pins.write_text(pins.read_text() + "sdpa-test-plugins==0.1.0\n")
    git(path, "init", "-q", "-b", "main")
    old = commit(path, "pin the plug-in at 0.1.0")
    pins.write_text(pins.read_text().replace("sdpa-test-plugins==0.1.0", "sdpa-test-plugins==0.2.0"))
    new = commit(path, "upgrade the plug-in to 0.2.0")
    return {"path": path, "old": old, "new": new}


def test_a_pin_change_is_measured_in_both_environments(repo: dict, offline: None, tmp_path: Path) -> None:
    """A commit that changes only a pin: each side gets its own environment, the header names the versions, and
    the dependency's slower implementation fails by name. torch is the same on both sides, so times are scaled as
    with one environment, by the CPU speed probe (a torch upgrade is compared as measured:
    `test_torch_differs_where_its_kernels_may`). The extra rounds' budget is the one for two environments (at most
    one round here: the budget's size, not its use, is under test)."""
    code, out, err = continuous(repo["path"], repo["old"], repo["new"], *FAST, "--adaptive-budget", "auto",
                                "--adaptive-rounds", "1", "--env-cache", str(tmp_path / "c"),
                                "--json", str(tmp_path / "v.json"))
    assert code == 1, out + err
    verdict = json.loads((tmp_path / "v.json").read_text())
    failed = {f["subject"] for f in verdict["failures"]}
    assert failed and all(s.startswith("test_tunable[") for s in failed), out
    assert "Environments:" in out and "sdpa-test-plugins (plug-ins) 0.1.0 → 0.2.0" in out
    assert "base only: sdpa-test-plugins==0.1.0 (constraint); head only: sdpa-test-plugins==0.2.0 (constraint)" in out
    assert len(list((tmp_path / "c").glob(f"*/{READY}"))) == 2 and "building" in err
    assert all(r["unit"] == "speed probe" for r in verdict["rows"])
    adaptive, planned_s = verdict["run"]["adaptive"], verdict["run"]["timing"]["planned_s"]
    assert "environments differ" in adaptive["budget_from"] and len(adaptive["selected"]) <= 1
    assert adaptive["budget_s"] == pytest.approx(max(ADAPTIVE_BUDGET, ENV_BUDGET_FACTOR * planned_s), abs=0.5)
    assert f"budget {adaptive['budget_s']:.0f} s, {adaptive['budget_from']}." in out
    assert "times scaled as with one environment (by the CPU speed probe, else in units of torch_sdpa): torch and " \
           "the libraries it calls (Python, torch" in out


def test_an_environment_is_built_once_and_never_trusted_half_built(plugins: dict, offline: None,
                                                                   tmp_path: Path) -> None:
    spec = parse_spec(str(plugins["v1"]))
    first = prepare(spec, tmp_path)
    assert first.how.startswith("built in ")
    probe = "import sdpa_test_plugins, torch, importlib.metadata as m; print(m.version('sdpa-test-plugins'), torch.__file__)"
    seen = subprocess.run([first.python, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    import torch

    assert seen == ["0.1.0", torch.__file__]  # the plug-in on top of this environment's own torch, not a copy
    assert prepare(spec, tmp_path).how.startswith("cached in ")
    folder = Path(first.python).parents[1]
    (folder / READY).unlink()  # as a build killed before its end leaves it
    assert prepare(spec, tmp_path).how.startswith("built in ")
    (plugins["v1"] / "README.txt").write_text("a local package that changed is another environment\n")
    try:
        assert Path(prepare(spec, tmp_path).python).parents[1] != folder
    finally:
        (plugins["v1"] / "README.txt").unlink()


def test_a_requirement_pip_cannot_satisfy_is_unusable(repo: dict, offline: None, tmp_path: Path) -> None:
    code, out, err = continuous(repo["path"], "--head-env", "sdpa-no-such-package==1.0", *FAST,
                                "--env-cache", str(tmp_path))
    assert code == 2 and out == "" and "Traceback" not in err
    assert "environment 'sdpa-no-such-package==1.0': pip could not install it" in err
    assert "No matching distribution found for sdpa-no-such-package==1.0" in err
    said = [line for line in err.splitlines() if not line.startswith("[")]  # pip's reasons in its one line
    assert len(said) == 1 and said[0].startswith("sdpa-bench continuous: error: "), err
    assert not [p for p in tmp_path.iterdir() if p.is_dir()]  # nothing half-built left for a later run


def test_specs_name_an_interpreter_or_requirements(tmp_path: Path) -> None:
    assert parse_spec(sys.executable).python == str(Path(sys.executable).absolute())
    assert parse_spec(str(Path(sys.prefix))).python  # a virtual environment's folder
    assert parse_spec("torch==2.14.1  xformers==0.0.35").requirements == ("torch==2.14.1", "xformers==0.0.35")
    with pytest.raises(UsageError, match="no such interpreter, environment or package folder"):
        parse_spec(str(tmp_path / "missing" / "python"))
    with pytest.raises(UsageError, match="empty"):
        parse_spec("  ")
    (tmp_path / "venv-half").mkdir()  # a folder with neither an interpreter nor a package: named as such, not pip's
    with pytest.raises(UsageError, match=r"neither a virtual environment \(bin/python missing\) nor a package"):
        parse_spec(str(tmp_path / "venv-half"))
    (tmp_path / "python3").write_text("")  # an interpreter copied without its mode: not given to pip as a name
    with pytest.raises(UsageError, match="a file that is not executable, so no interpreter, and not a package arch"):
        parse_spec(str(tmp_path / "python3"))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "pyproject.toml").write_text("[project]\nname = 'pkg'\n")
    (tmp_path / "pkg-1.0-py3-none-any.whl").write_bytes(b"")
    assert parse_spec(str(tmp_path / "pkg")).requirements == (str(tmp_path / "pkg"),)  # what pip installs stays
    assert parse_spec(str(tmp_path / "pkg-1.0-py3-none-any.whl")).requirements
    (tmp_path / "venv-old" / "bin").mkdir(parents=True)  # its interpreter removed by an upgrade
    (tmp_path / "venv-old" / "bin" / "python").symlink_to(tmp_path / "python3.9-gone")
    with pytest.raises(UsageError, match=r"bin/python links to nothing that runs"):
        parse_spec(str(tmp_path / "venv-old"))
    url = "git+https://example.org/me/pkg@0123abc"  # a URL is pip's, never a path that does not exist
    assert parse_spec(url).requirements == (url,)
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").symlink_to(sys.executable)
    here = Path.cwd()
    os.chdir(tmp_path)
    try:  # a bare word naming a virtual environment here: which one is meant is asked, not guessed
        with pytest.raises(UsageError, match=r"Write ./venv for the environment, venv== .or a version. for the pack"):
            parse_spec("venv")
    finally:
        os.chdir(here)
    with pytest.raises(UsageError, match="does not run as a Python interpreter"):
        script = tmp_path / "python"
        script.write_text("#!/bin/sh\nexit 3\n")
        script.chmod(0o755)
        prepare(parse_spec(str(script)))


def test_declared_dependencies_and_what_this_environment_lacks(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    shutil.copy(ROOT / "pyproject.toml", tree)
    (tree / "constraints-cpu.txt").write_text("# a comment\ntorch==1.0.0\nsdpa-not-installed==1.0\n")
    dec = declared(tree, cpu=True)
    assert "torch==1.0.0" in dec.constraints and any(r.startswith("pytest") for r in dec.requirements)
    assert declared(tree, cpu=False).constraints == ()  # CPU pins are no declaration on a GPU
    import torch

    assert unmet(dec) == [f"torch==1.0.0 (this environment has {torch.__version__})"]  # an unused pin is no need
    assert unmet(Declared(("sdpa-not-installed>=1",), ())) == ["sdpa-not-installed>=1 (not installed)"]
    assert unmet(Declared(("sdpa-bench>=0.1", "SDPA_Bench[test]>=0"), ())) == []  # sdpa-bench: the one running
    with pytest.raises(GateInputError, match=r"declares sdpa-bench>=99, but both sides run over the sdpa-bench"):
        unmet(Declared(("sdpa-bench>=99",), ()))
    assert Declared(("sdpa.bench[test]>=0.1", "torch>=2.5"), ()).installable() == ("torch>=2.5",)  # never pip's
    with pytest.raises(GateInputError, match="not a requirement"):
        unmet(Declared(("torch===",), ()))
    (tree / "pyproject.toml").write_text('[project]\nname = "x"\ndependencies = "torch"\n')  # not a list
    with pytest.raises(GateInputError, match=r"\[project\] dependencies must be a list of requirement strings, not str"):
        declared(tree, cpu=True)


def test_a_failed_build_is_named_by_its_own_last_line(tmp_path: Path) -> None:
    """pip ends a build backend's failure with its notes and a hint ("See above for details"): the reason given is
    the build step's own last line, above pip's "[end of output]"."""
    from sdpa_impls.continuous.outcomes import last_line

    pip_said = """  error: subprocess-exited-with-error
  × Preparing metadata (pyproject.toml) did not run successfully.
  ╰─> [3 lines of output]
      Traceback (most recent call last):
      ValueError: invalid pyproject.toml config: `project.dependencies`.
      configuration error: `project.dependencies` must be array
      [end of output]
  note: This error originates from a subprocess, and is likely not a problem with pip.
error: metadata-generation-failed
hint: See above for details.
"""
    assert last_line(pip_said) == "configuration error: `project.dependencies` must be array"
    assert last_line("ERROR: No matching distribution found for x\nhint: See above for details.\n") == \
        "ERROR: No matching distribution found for x"
    assert last_line("ModuleNotFoundError: No module named 'setuptools'\n") == \
        "ModuleNotFoundError: No module named 'setuptools'"
    cloned = """  Running command git clone --filter=blob:none --quiet 'https://****@127.0.0.1:9/o/r.git' /tmp/pip-req-build-x
  fatal: unable to access 'https://127.0.0.1:9/o/r.git/': Failed to connect to 127.0.0.1 port 9
  error: subprocess-exited-with-error

  × git clone --filter=blob:none --quiet 'https://****@127.0.0.1:9/o/r.git' /tmp/pip-req-build-x did not run successfully.
  │ exit code: 128
  ╰─> See above for output.

  note: This error originates from a subprocess, and is likely not a problem with pip.
"""  # as pip 24 says it: what git said is the reason, not pip's pointer to it
    assert last_line(cloned).startswith("fatal: unable to access 'https://127.0.0.1:9/o/r.git/'")
    twice = cloned + """error: subprocess-exited-with-error

  × git clone --filter=blob:none --quiet https://127.0.0.1:9/o/r.git /tmp/pip-install-x did not run successfully.
  │ exit code: 128
  ╰─> See above for output.

note: This error originates from a subprocess, and is likely not a problem with pip.
"""  # as pip 23 says it: the block again after pip's note, with nothing from git
    assert last_line(twice).startswith("fatal: unable to access 'https://127.0.0.1:9/o/r.git/'")

    from sdpa_impls.continuous.envbuild import build  # pip's own words, cloning from a port no one listens on
    with pytest.raises(GateInputError, match=r"pip could not install it \(exit 1\): .*fatal: unable to access "
                                             r"'https://127\.0\.0\.1:9/o/r\.git/'"):
        build(tmp_path / "env", ["--no-deps", "git+https://token@127.0.0.1:9/o/r.git"], what="a git URL")


def test_a_full_disk_is_the_machines_error_not_the_sides() -> None:
    """pip's "No space left on device" made a search over revisions skip the revision as one that does not install
    (exit 3, and a --resume kept the skip after the disk was freed): it is the machine's error, which no side takes.
    (A process that ends as pip does on a full disk stands in for filling this machine's disk.)"""
    from sdpa_impls.continuous.assemble import _as_side
    from sdpa_impls.continuous.envbuild import _pip
    from sdpa_impls.continuous.sides import Side
    from sdpa_impls.errors import MachineError, SideError

    head = Side("head", "HEAD", None, Path("."), sys.executable)

    said = "ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device"
    with pytest.raises(MachineError, match=r"No space left on device \(a full disk is this machine's, not the "):
        with _as_side(head):
            _pip([sys.executable, "-c", f"import sys; sys.exit(print({said!r}, file=sys.stderr) or 1)"], "x")
    with pytest.raises(SideError):  # any other failure is still the side's
        with _as_side(head):
            _pip([sys.executable, "-c", "import sys; sys.exit(print('ERROR: no such package', file=sys.stderr) or 1)"],
                 "x")


def test_pips_usage_error_is_one_line_without_its_usage_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An interpreter's flag typed into a SPEC of requirements reaches pip as an option it lacks: pip prints its
    usage text above the reason; the error is the reason alone."""
    from sdpa_impls.continuous.envbuild import build

    monkeypatch.setenv("PIP_NO_INDEX", "1")
    with pytest.raises(GateInputError) as caught:
        build(tmp_path / "env", [sys.executable, "-X", "dev"], what="python -X dev")
    said = str(caught.value)
    assert said.endswith("pip could not install it (exit 2): no such option: -X") and "Usage" not in said, said


def test_kernels_that_differ_are_named_on_their_row() -> None:
    def run(kernels: tuple[str, ...]) -> list[Point]:
        return [Point(impl, "L8-E8-fp32-fwd", 1.0, (1.0,) * 10, 100, 0.0, 1e-3, kernels=kernels)
                for impl in ("torch_sdpa", "naive")]

    flash = ("aten::_scaled_dot_product_flash_attention_for_cpu", "aten::empty")
    math = ("aten::_scaled_dot_product_attention_math", "aten::bmm", "aten::empty")
    report = judge([run(flash)] * 2, [run(math)] * 2, config_from_dict({}, "test"))
    assert report.exit_code == 0
    text = render(report, "b", "h", header=["versions that differ: torch 2.13.0 → 2.14.1."])
    assert "Environments:\n  versions that differ: torch 2.13.0 → 2.14.1." in text
    assert ("torch_sdpa[L8-E8-fp32-fwd]: base only: aten::_scaled_dot_product_flash_attention_for_cpu; head only: "
            "aten::_scaled_dot_product_attention_math, aten::bmm") in text
    assert "Kernels that differ" not in render(judge([run(flash)] * 2, [run(flash)] * 2, config_from_dict({}, "t")),
                                               "b", "h")


def test_torch_differs_where_its_kernels_may() -> None:
    """torch_sdpa stays the time unit across environments only where torch and what its kernels call agree."""
    base = {"Python": "3.11.7", "torch": "2.13.0+cpu", "CUDA": None, "oneDNN": "3.12.0", "xformers": None,
            "sdpa-test-plugins (plug-ins)": "0.1.0"}
    assert not torch_differs(base, base | {"sdpa-test-plugins (plug-ins)": "0.2.0", "xformers": "0.0.35"})
    for name, other in (("torch", "2.14.1"), ("oneDNN", "3.13.0"), ("CUDA", "13.0"), ("Python", "3.12.3")):
        assert torch_differs(base, base | {name: other}), name
    assert differences(base, base | {"torch": "2.14.1+cu130", "CUDA": "13.0"}) == [
        "torch 2.13.0+cpu → 2.14.1+cu130", "CUDA - → 13.0"]


def test_an_environment_without_the_test_extra_is_named_with_the_cure(tmp_path: Path) -> None:
    """A side whose interpreter has torch and sdpa-bench's dependencies but not pytest-benchmark (the package
    installed without its `test` extra): exit 2 with one line that names what is missing and how to install it,
    before any round runs. The environment is real: a virtual environment whose only packages are this one's,
    pytest and its plug-ins left out."""
    import sysconfig

    stage = tmp_path / "stage"
    stage.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.lower().startswith(("pytest", "_pytest", "pytest_benchmark", "sdpa", "__editable__")) \
                and not entry.name.endswith(".pth"):
            (stage / entry.name).symlink_to(entry)
    venv = tmp_path / "no-test-extra"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next(venv.glob("lib/python3*/site-packages"))
    (site / "stage.pth").write_text(f"{stage}\n")
    python = venv / "bin" / "python"
    probe = ("import importlib.util as u, torch\n"
             "print(*(u.find_spec(m) is None for m in ('pytest', 'pytest_benchmark')))")
    premise = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=120)
    assert premise.stdout.split() == ["True", "True"], premise.stderr  # torch imports there, pytest does not
    code, out, err = continuous(tmp_path, "--base-env", str(python), "--head-env", sys.executable, "--preset", "smoke",
                                "--impl", "naive", *FAST[4:])
    message = [line for line in err.splitlines() if not line.startswith("[")]
    assert code == 2 and out == "" and "Traceback" not in err and len(message) == 1, err
    assert "base sdpa-bench " in message[0] and f"its environment ({python}) lacks pytest and pytest-benchmark" \
        in message[0] and "pip install 'sdpa-bench[test]'" in message[0], message


def test_a_build_stopped_by_ctrl_c_lets_pip_remove_its_temporary_folders(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C (or SIGTERM, which a command turns into the same) while pip builds a side's environment: pip, in a
    session of its own, was killed at once and left its pip-* folders in the temporary folder at every stop; it is
    now given Ctrl-C first, which it answers by removing them."""
    import signal
    import threading
    import time

    from sdpa_impls.continuous import envbuild
    from sdpa_impls.continuous.envbuild import _pip

    monkeypatch.setattr(envbuild, "PIP_STOP_S", 30.0)  # a loaded machine's pip takes its time: Ctrl-C first is tested
    package, temp = tmp_path / "slowbuild", tmp_path / "tmp"
    package.mkdir()
    temp.mkdir()
    (package / "pyproject.toml").write_text('[project]\nname = "slowbuild"\nversion = "1.0"\n[build-system]\n'
                                            'requires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n')
    (package / "backend.py").write_text(  # a build that takes long: the stop lands while pip waits on it
        "import pathlib, time\n"
        f"def build_wheel(*args, **kwargs):\n    pathlib.Path({str(tmp_path / 'building')!r}).touch()\n"
        "    time.sleep(60)\n")
    monkeypatch.setenv("TMPDIR", str(temp))

    def ctrl_c_once_building() -> None:
        deadline = time.monotonic() + 60
        while not (tmp_path / "building").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=ctrl_c_once_building, daemon=True).start()
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        _pip([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--no-build-isolation",
              "--disable-pip-version-check", "--target", str(tmp_path / "site"), str(package)], "slowbuild")
    assert (tmp_path / "building").exists() and time.monotonic() - start < 55  # not the build's 60 s
    assert sorted(p.name for p in temp.iterdir() if p.name.startswith("pip-")) == []
