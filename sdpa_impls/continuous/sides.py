"""One side of a side-by-side comparison: a source tree and the sdpa-bench it runs with, installed into its own
folder for the side's interpreter, and the benchmark suite run in a separate process.

    install(side)                 -> None     # pip --target, no dependencies, no network, no build isolation
    check_import(side, cpu)       -> (side, versions)  # the package imports and lists its implementations
    run_round(side, out, options) -> RoundRun
    run_pair(base, head, schedule, ...)  -> (base points, head points, head's outcomes)   # one round
    interleaved(base, head, rounds, ...) -> (base runs, head runs, head's outcomes)

Each side runs with its `python`, the interpreter of its environment (continuous.envs: the one running the
comparison, unless the revisions declare different dependencies or an environment was named), and so with that
environment's torch and every other package; `site` comes first on PYTHONPATH and holds the side's own code:
- a revision of sdpa-bench itself: that revision installed (code and metadata), measured with its own suite;
- a revision of a plug-in package: the plug-in installed (its entry points included), beside a copy of the
  sdpa-bench that runs the command (`bundle_running`), whose suite measures it;
- no revision (two environments compared): the copy of the running sdpa-bench alone.
The suite is sdpa_impls.suite.test_sdpa of the installed package with its plug-in (the module sdpa_bench_pytest
beside it), run from `site` with no conftest, no pytest configuration of the caller (PYTEST_ADDOPTS, ini files)
and only the plug-ins it needs (pytest-benchmark and the suite's own), so what a user's environment or repository
sets for its own tests cannot change it. A revision of sdpa-bench from before the suite shipped in the package
runs its tests/test_benchmarks.py from its tree, as then.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from importlib import metadata
from collections.abc import Callable, Sequence
from pathlib import Path

from ..bench import allocator
from ..errors import GateInputError, SideError
from ..gate.points import Point, load_points
from .outcomes import SKIPPED, crash_said, labelled, last_line, outcome_lines
from .schedule import NO_CEILINGS_ENV, PAD_ENV, REPEAT_ENV, Schedule
from .versions import PROBE

SUITE_MODULE = "sdpa_impls.suite.test_sdpa"
SUITE_PLUGIN = "sdpa_bench_pytest"  # its pytest plug-in, a module beside the package
LEGACY_SUITE = Path("tests") / "test_benchmarks.py"  # sdpa-bench's revisions from before the suite was packaged
CALLER_PYTEST = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTHONHOME")  # settings of the caller's own test sessions
DIST = "sdpa-bench"
ALLOCATOR_ENV = allocator.ENV  # glibc's allocator thresholds, fixed in every process of either side's revision


@dataclass(frozen=True)
class Side:
    """`role` (base, head) of the comparison: `name` for people, its source `tree` (None: only the running
    sdpa-bench), its install folder `site`, its interpreter; `bundled`: sdpa-bench is a copy of the running one
    (a plug-in's revision, or no revision), not the tree; `impls`: the implementations it measures (empty: every
    one); `packaged`: its suite is the installed package's (check_import finds out); `ceilings`: its processes
    time the GEMM ceilings (only a ceiling rule reads them)."""

    role: str
    name: str
    tree: Path | None
    site: Path
    python: str
    bundled: bool = False
    impls: tuple[str, ...] = ()
    packaged: bool = True
    ceilings: bool = True


@dataclass(frozen=True)
class RoundRun:
    """One pytest-benchmark process of one side: its JSON file, exit status, failed and skipped tests, output tail."""

    out: Path
    returncode: int
    failed: tuple[str, ...]
    tail: str


def side_env(side: Side, cpu: bool, padding: str = "", repeat: bool = False) -> dict[str, str]:
    """The environment of a side's processes: its install folder first on PYTHONPATH; one thread on CPU; `padding`
    (schedule.Schedule.padding) as the value of SDPA_CONTINUOUS_PAD, so the environment's size varies per process;
    `repeat`, a process after the side's first: SDPA_CONTINUOUS_REPEAT=1 (schedule.REPEAT_ENV); a side without
    `ceilings`: SDPA_CONTINUOUS_NO_CEILINGS=1; glibc's allocator thresholds fixed (ALLOCATOR_ENV) unless the
    caller set any of glibc's MALLOC_ variables or GLIBC_TUNABLES."""
    env = {k: v for k, v in os.environ.items() if k not in CALLER_PYTEST}
    env["PYTHONPATH"] = os.pathsep.join([str(side.site)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # the plug-ins the suite needs are named on its command line
    env["COLUMNS"] = "1000"  # pytest cuts a failed test's summary line to the terminal's width: the message whole
    env[PAD_ENV] = padding
    for name, on in ((REPEAT_ENV, repeat), (NO_CEILINGS_ENV, not side.ceilings)):  # read by the suite (test_sdpa)
        if on:
            env[name] = "1"
        else:
            env.pop(name, None)
    if not allocator.caller_chose(env):
        env.update(ALLOCATOR_ENV)
    if cpu:
        env["OMP_NUM_THREADS"] = "1"  # a shared CPU runner: one other process stalls a multi-thread barrier
    return env


def _run(side: Side, what: str, cmd: list[str], timeout: float, **kwargs: object) -> subprocess.CompletedProcess:
    """A step of a side in a process of its own; SideError (a GateInputError) naming the side and the step when the
    process cannot start or runs past `timeout`."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired:
        raise SideError(side.role, f"{side.role} {side.name}: its {what} step took more than {timeout:.0f} s") from None
    except OSError as exc:
        raise SideError(side.role, f"{side.role} {side.name}: its {what} step could not start {cmd[0]} "
                             f"({exc.strerror or exc})") from None


def bundle_running(site: Path) -> None:
    """Copy the sdpa-bench that runs this command into `site`: its package folder, the suite's pytest plug-in beside
    it, and a dist-info folder with its name, version and entry points, so the side imports exactly this sdpa-bench
    whatever its environment holds (an editable install is copied from its source folder)."""
    import sdpa_impls

    plugin = importlib.util.find_spec(SUITE_PLUGIN)  # found, not imported: it imports pytest, which the side's
    if plugin is None or plugin.origin is None:      # own import check asks for, by name (check_import)
        raise GateInputError(f"{SUITE_PLUGIN}, the suite's pytest plug-in, is not installed beside sdpa_impls: "
                             "reinstall sdpa-bench")
    shutil.copytree(Path(sdpa_impls.__file__).parent, site / "sdpa_impls",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"), dirs_exist_ok=True)
    shutil.copy2(plugin.origin, site / f"{SUITE_PLUGIN}.py")
    version = sdpa_impls.__version__
    info = site / f"sdpa_bench-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    texts = {"METADATA": f"Metadata-Version: 2.1\nName: {DIST}\nVersion: {version}\n"}
    try:
        dist = metadata.distribution(DIST)
        if dist.version == version:  # the installed metadata describes the running code
            texts["entry_points.txt"] = dist.read_text("entry_points.txt") or ""
    except metadata.PackageNotFoundError:  # run from a source folder on PYTHONPATH
        pass
    for name, text in texts.items():
        (info / name).write_text(text, encoding="utf-8")


def install(side: Side) -> None:
    """pip-install the side's tree into `side.site` with its interpreter: no dependencies (torch and the rest are
    the environment's), no index, no build isolation; then, for a bundled side, the running sdpa-bench beside it.
    GateInputError with pip's last line when it fails."""
    side.site.mkdir(parents=True, exist_ok=True)
    (side.site.parent / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")  # no ini of the caller's
    if side.tree is not None:
        if not (side.tree / "pyproject.toml").is_file() and not (side.tree / "setup.py").is_file():
            raise SideError(side.role, f"{side.role} {side.name}: does not install (no pyproject.toml or setup.py)")
        done = _run(side, "install", [side.python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                                      "--no-build-isolation", "--disable-pip-version-check", "--target",
                                      str(side.site), str(side.tree)], timeout=600)
        if done.returncode != 0:
            raise SideError(side.role, f"{side.role} {side.name}: does not install: "
                                 f"{last_line(done.stderr or done.stdout)}")
    if side.bundled:
        bundle_running(side.site)


# Runs in the side's interpreter before versions.PROBE: the package imports, lists its implementations, and says
# whether its suite is packaged and which of the side's implementations are missing or failed to load.
CHECK = r"""
import importlib.util, json, sys
import sdpa_impls, sdpa_impls.registry
broken_type = getattr(sdpa_impls.registry, "BrokenPlugin", ())
known = sdpa_impls.names()
wanted = json.loads(sys.argv[1])
print(json.dumps({"packaged": None not in (importlib.util.find_spec("sdpa_impls.suite"),
                                           importlib.util.find_spec("sdpa_bench_pytest")),
                  "missing": [n for n in wanted if n not in known], "known": known,
                  "lacks": [m for m in ("pytest", "pytest_benchmark") if importlib.util.find_spec(m) is None],
                  "broken": {n: sdpa_impls.get(n).error for n in wanted
                             if n in known and isinstance(sdpa_impls.get(n), broken_type)}}))
"""


def check_import(side: Side, cpu: bool, reference: str = "",
                 reference_from: str = "") -> tuple[Side, dict[str, str | None]]:
    """The package imports, lists the side's `impls` and the time `reference` (set in `reference_from`, a config's
    source) among its implementations, none broken, and has its suite; GateInputError saying why otherwise. Returns
    the side with `packaged` set, and its versions."""
    done = _run(side, "import", [side.python, "-c", CHECK + PROBE, json.dumps(list(side.impls))], timeout=300,
                cwd=side.site, env=side_env(side, cpu))
    if done.returncode != 0:
        raise SideError(side.role, f"{side.role} {side.name}: does not import: {last_line(done.stderr)}")
    try:
        lines = done.stdout.strip().splitlines()
        found, versions = json.loads(lines[-2]), json.loads(lines[-1])
        assert isinstance(found, dict) and isinstance(versions, dict)
    except (IndexError, ValueError, AssertionError):
        raise SideError(side.role, f"{side.role} {side.name}: its import check printed no result (its last line: "
                             f"{last_line(done.stdout)})") from None
    if found.get("lacks"):  # the suite runs under pytest-benchmark, which the package's test extra brings
        raise SideError(side.role, f"{side.role} {side.name}: its environment ({side.python}) lacks "
                                   f"{' and '.join(m.replace('_', '-') for m in found['lacks'])}, which run the "
                                   "benchmark suite: install sdpa-bench's test extra there (pip install "
                                   "'sdpa-bench[test]')")
    set_in = f" (from {reference_from})" if reference_from else ""  # where: a head's typo is met in base first
    for what, names, where in (("time_reference", [reference] if reference else [], set_in),
                               ("--impl", found["missing"], "")):
        if [n for n in names if n not in found.get("known", ())]:  # the reference first: it is among --impl's too
            raise SideError(side.role, f"{side.role} {side.name}: {what} {','.join(names)}{where}: no implementation "
                                       f"of that name here (it has {', '.join(found.get('known', ()))})")
    if found["broken"]:
        raise SideError(side.role, f"{side.role} {side.name}: " + "; ".join(
            f"{name}: plug-in failed to load: {error}" for name, error in found["broken"].items()))
    side = dataclasses.replace(side, packaged=bool(found["packaged"]))
    if not side.packaged and (side.tree is None or not (side.tree / LEGACY_SUITE).is_file()):
        raise SideError(side.role, f"{side.role} {side.name}: has no benchmark suite (neither {SUITE_MODULE} nor "
                             f"{LEGACY_SUITE})")
    return side, versions


def suite_command(side: Side, pytest_args: Sequence[str]) -> tuple[list[str], Path]:
    """The pytest command line of the side's suite, and the folder it runs in."""
    common = ["-q", "-rfE", "-p", "no:cacheprovider", "-p", "pytest_benchmark.plugin", "--benchmark-only",
              *(a for name in side.impls for a in ("--sdpa-impl", name)), *pytest_args]
    if side.packaged:
        return [side.python, "-m", "pytest", "--pyargs", SUITE_MODULE, "-p", SUITE_PLUGIN, "--noconftest",
                "-c", str(side.site.parent / "pytest.ini"), "--rootdir", str(side.site), *common], side.site
    assert side.tree is not None
    return [side.python, "-m", "pytest", str(LEGACY_SUITE), *common], side.tree


def run_round(side: Side, out: Path, pytest_args: list[str], cpu: bool, timeout: float,
              padding: str = "", prefix: Sequence[str] = (), repeat: bool = False) -> RoundRun:
    """One run of the side's own benchmark suite into `out` (pytest-benchmark JSON with raw samples); `prefix`
    goes before the interpreter (e.g. `flock LOCK`, `taskset -c 0`); `repeat`: not the side's first run, whose
    checks against fp64 this one does not repeat (side_env)."""
    # no plug-in is loaded but pytest-benchmark and the suite's: hypothesis' alone took 0.8-0.9 s of every process
    junit = out.with_suffix(".junit.xml")  # each test's outcome: a skip's reason names why a benchmark is missing
    cmd, cwd = suite_command(side, [*pytest_args, f"--benchmark-json={out}", "--benchmark-save-data",
                                    f"--junitxml={junit}"])
    try:
        done = subprocess.run([*prefix, *cmd], cwd=cwd, env=side_env(side, cpu, padding, repeat),
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SideError(side.role, f"{side.role} {side.name}: its benchmark run took more than {timeout:g} s "
                             "(--round-timeout)") from None
    except OSError as exc:
        raise SideError(side.role, f"{side.role} {side.name}: its benchmark run could not start ({exc.strerror or exc})"
                             ) from None
    text = done.stdout + done.stderr
    tail = text[-3000:] if done.returncode >= 0 else crash_said(done.returncode, text)
    return RoundRun(out, done.returncode, outcome_lines(text, junit), tail)


NO_TESTS_COLLECTED = 5  # pytest's where the selection (-k, --sdpa-impl, preset) left no test; ours where all skipped


def _points(side: Side, done: RoundRun) -> list[Point]:
    skips = [labelled(line) for line in done.failed if line.startswith(SKIPPED)]
    if done.returncode == NO_TESTS_COLLECTED and not skips:
        raise SideError(side.role, f"{side.role} {side.name}: no benchmark of its suite is selected (pytest "
                                   "collected none): check the implementations, the -k expression and the preset")
    if skips and (done.returncode == NO_TESTS_COLLECTED or done.returncode == 0 and not done.out.is_file()):
        raise SideError(side.role, f"{side.role} {side.name}: its benchmark run measured nothing: all {len(skips)} "
                                   f"benchmarks were skipped (first, {skips[0][0]}: {skips[0][1] or 'no reason'})")
    if done.returncode < 0:  # a crash, in the suite or a kernel it called: not a run that did not start
        raise SideError(side.role, f"{side.role} {side.name}: its benchmark run crashed before it wrote its results, "
                                   f"{done.tail}")
    if done.returncode not in (0, 1) or not done.out.is_file():
        raise SideError(side.role, f"{side.role} {side.name}: its benchmark suite did not run (pytest exit "
                             f"{done.returncode}): {last_line(done.tail)}")
    _, points = load_points(done.out)
    if not points:
        raise SideError(side.role, f"{side.role} {side.name}: its benchmark run holds no benchmarks "
                             f"(every one skipped or failed): {last_line(done.tail)}")
    return points


def run_pair(base: Side, head: Side, schedule: Schedule, pytest_args: list[str], cpu: bool, workdir: Path, tag: str,
             timeout: float = 600.0, progress: Callable[[str], None] | None = None, repeat: bool = True,
             first: str | None = None) -> tuple[list[Point], list[Point], list[str]]:
    """One round: a run of each side, the one `schedule.first()` names first, into `workdir/<role>-<tag>.json`;
    `repeat` unless it is the first round, whose runs check every point against fp64 (the later ones time only);
    `first`, the side already drawn for this round (a paired round measured apart after all), else drawn here.

    Returns (base's points, head's points, head's failed and skipped tests, `outcomes.outcome_lines`); a run that
    does not produce a usable file (the suite could not start, or everything failed) is GateInputError naming it."""
    first = first or schedule.first()
    runs: dict[str, list[Point]] = {}
    failed: list[str] = []
    for side in (base, head) if first == "base" else (head, base):
        done = run_round(side, workdir / f"{side.role}-{tag}.json", pytest_args, cpu, timeout, schedule.padding(),
                         repeat=repeat)
        runs[side.role] = _points(side, done)
        if side.role == "head":
            failed += [f for f in done.failed if f not in failed]
        if progress:
            progress(f"round {tag}: {side.role} measured, {len(runs[side.role])} benchmarks")
    return runs["base"], runs["head"], failed


def interleaved(base: Side, head: Side, rounds: int, pytest_args: list[str], cpu: bool, workdir: Path,
                schedule: Schedule, progress: Callable[[str], None] | None = None, timeout: float = 600.0,
                first_tag: int = 1, last: int | None = None
                ) -> tuple[list[list[Point]], list[list[Point]], list[str]]:
    """`rounds` runs of each side alternating in time, which side starts each round drawn by `schedule` (one of
    each per two rounds), so a slow period, a drift of the machine or an advantage of starting first falls on both
    sides alike. The first round checks every point against fp64; the later ones, the same code, environment and
    inputs, only time them (run_pair's `repeat`). `first_tag`: the number of the first of these rounds (files, progress
    lines) when earlier rounds ran otherwise; `last`: the comparison's last planned round when later rounds run
    otherwise ("round n/last"). Returns (base runs, head runs, head's outcomes); GateInputError as run_pair."""
    base_runs, head_runs, failed = [], [], []
    for n in range(first_tag, first_tag + rounds):
        b, h, f = run_pair(base, head, schedule, pytest_args, cpu, workdir, str(n), timeout, repeat=n > 1)
        base_runs.append(b)
        head_runs.append(h)
        failed += [x for x in f if x not in failed]
        if progress:  # with `last`, paired processes time the rounds after this one, which checks
            progress(f"round {n}/{last or first_tag + rounds - 1}"
                     f"{' (checks every point; the timed rounds follow)' if last and n == 1 else ''}: "
                     f"{schedule.orders[-1]} first; base and head measured, {len(b)} and {len(h)} benchmarks")
    return base_runs, head_runs, failed
