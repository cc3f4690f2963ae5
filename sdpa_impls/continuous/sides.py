"""One side of a side-by-side comparison: a source tree installed into its own folder for this interpreter, and
its own benchmark suite run in a separate process.

    install(tree, site, python)  -> None     # pip --target, no dependencies, no network, no build isolation
    check_import(side)           -> versions # the installed package imports and lists its implementations
    run_round(side, out, options) -> RoundRun
    run_pair(base, head, schedule, ...)  -> (base points, head points, head's failed tests)   # one round
    interleaved(base, head, rounds, ...) -> (base runs, head runs, head's failed tests)

Each side runs with its `python`, the interpreter of its environment (continuous.envs: the one running the
comparison, unless the revisions declare different dependencies or an environment was named), and so with that
environment's torch and every other package: `site` holds only that side's `sdpa-bench` (code and metadata, its
entry points included) and comes first on PYTHONPATH. Plug-ins installed in a side's environment are that side's
(the `sdpa_impls` entry-point group) and import whichever side's `sdpa_impls` is running. The benchmarks are that
side's own tests/test_benchmarks.py, run from its tree, so an older revision is measured with its own suite.
"""
from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from collections.abc import Callable, Sequence
from pathlib import Path

from ..errors import GateInputError
from ..gate.points import Point, load_points
from .schedule import PAD_ENV, Schedule
from .versions import PROBE

SUITE = Path("tests") / "test_benchmarks.py"


@dataclass(frozen=True)
class Side:
    """`role` (base, head) of the comparison: `name` for people, its source `tree` and its install folder `site`."""

    role: str
    name: str
    tree: Path
    site: Path
    python: str


@dataclass(frozen=True)
class RoundRun:
    """One pytest-benchmark process of one side: its JSON file, exit status, failed tests and output tail."""

    out: Path
    returncode: int
    failed: tuple[str, ...]
    tail: str


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def side_env(side: Side, cpu: bool, padding: str = "") -> dict[str, str]:
    """The environment of a side's processes: its install folder first on PYTHONPATH; one thread on CPU; `padding`
    (schedule.Schedule.padding) as the value of SDPA_CONTINUOUS_PAD, so the environment's size varies per process."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME",)}
    env["PYTHONPATH"] = os.pathsep.join([str(side.site)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env[PAD_ENV] = padding
    if cpu:
        env["OMP_NUM_THREADS"] = "1"  # a shared CPU runner: one other process stalls a multi-thread barrier
    return env


def install(side: Side) -> None:
    """pip-install the side's tree into `side.site` with this interpreter: no dependencies (torch and the rest are
    the environment's), no index, no build isolation. GateInputError with pip's last line when it fails."""
    if not (side.tree / "pyproject.toml").is_file() and not (side.tree / "setup.py").is_file():
        raise GateInputError(f"{side.role} {side.name}: does not install (no pyproject.toml or setup.py)")
    done = subprocess.run([side.python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                           "--no-build-isolation", "--disable-pip-version-check", "--target", str(side.site),
                           str(side.tree)], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise GateInputError(f"{side.role} {side.name}: does not install: {_last_line(done.stderr or done.stdout)}")


def check_import(side: Side, cpu: bool) -> dict[str, str | None]:
    """The installed package imports and lists its implementations, and the side has its benchmark suite;
    GateInputError with the error's last line otherwise. Returns the versions the side runs with (versions.PROBE,
    in the same process: no extra start-up)."""
    probe = "import sdpa_impls; sdpa_impls.names()\n" + PROBE
    done = subprocess.run([side.python, "-c", probe], cwd=side.site, env=side_env(side, cpu), capture_output=True,
                          text=True, timeout=300)
    if done.returncode != 0:
        raise GateInputError(f"{side.role} {side.name}: does not import: {_last_line(done.stderr)}")
    if not (side.tree / SUITE).is_file():
        raise GateInputError(f"{side.role} {side.name}: has no benchmark suite ({SUITE})")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_round(side: Side, out: Path, pytest_args: list[str], cpu: bool, timeout: float,
              padding: str = "", prefix: Sequence[str] = ()) -> RoundRun:
    """One run of the side's own benchmark suite into `out` (pytest-benchmark JSON with raw samples); `prefix`
    goes before the interpreter (e.g. `flock LOCK`, `taskset -c 0`)."""
    # hypothesis' pytest plugin is not used by the benchmarks, and importing it takes 0.8-0.9 s of every process
    cmd = [*prefix, side.python, "-m", "pytest", str(SUITE), "-q", "-rfE", "-p", "no:cacheprovider", "-p",
           "no:hypothesispytest", "--benchmark-only", *pytest_args, f"--benchmark-json={out}", "--benchmark-save-data"]
    try:
        done = subprocess.run(cmd, cwd=side.tree, env=side_env(side, cpu, padding), capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise GateInputError(f"{side.role} {side.name}: its benchmark run took more than {timeout:.0f} s "
                             "(--round-timeout)") from None
    text = done.stdout + done.stderr
    failed = tuple(line.strip() for line in text.splitlines() if line.startswith(("FAILED ", "ERROR ")))
    return RoundRun(out, done.returncode, failed, text[-3000:])


def _points(side: Side, done: RoundRun) -> list[Point]:
    if done.returncode not in (0, 1) or not done.out.is_file():
        raise GateInputError(f"{side.role} {side.name}: its benchmark suite did not run (pytest exit "
                             f"{done.returncode}): {_last_line(done.tail)}")
    _, points = load_points(done.out)
    if not points:
        raise GateInputError(f"{side.role} {side.name}: its benchmark run holds no benchmarks "
                             f"(every one skipped or failed): {_last_line(done.tail)}")
    return points


def run_pair(base: Side, head: Side, schedule: Schedule, pytest_args: list[str], cpu: bool, workdir: Path, tag: str,
             timeout: float = 600.0, progress: Callable[[str], None] | None = None
             ) -> tuple[list[Point], list[Point], list[str]]:
    """One round: a run of each side, the one `schedule.first()` names first, into `workdir/<role>-<tag>.json`.

    Returns (base's points, head's points, head's failed tests). A run that does not produce a usable file (the
    suite could not start, or everything failed) is GateInputError naming the side.
    """
    first = schedule.first()
    runs: dict[str, list[Point]] = {}
    failed: list[str] = []
    for side in (base, head) if first == "base" else (head, base):
        done = run_round(side, workdir / f"{side.role}-{tag}.json", pytest_args, cpu, timeout, schedule.padding())
        runs[side.role] = _points(side, done)
        if side.role == "head":
            failed += [f for f in done.failed if f not in failed]
        if progress:
            progress(f"round {tag}: {side.role} measured, {len(runs[side.role])} benchmarks")
    return runs["base"], runs["head"], failed


def interleaved(base: Side, head: Side, rounds: int, pytest_args: list[str], cpu: bool, workdir: Path,
                schedule: Schedule, progress: Callable[[str], None] | None = None, timeout: float = 600.0
                ) -> tuple[list[list[Point]], list[list[Point]], list[str]]:
    """`rounds` runs of each side alternating in time, which side starts each round drawn by `schedule` (one of
    each per two rounds), so a slow period, a drift of the machine or an advantage of starting first falls on both
    sides alike. Returns (base runs, head runs, head's failed tests); GateInputError as run_pair."""
    base_runs, head_runs, failed = [], [], []
    for i in range(rounds):
        b, h, f = run_pair(base, head, schedule, pytest_args, cpu, workdir, str(i + 1), timeout)
        base_runs.append(b)
        head_runs.append(h)
        failed += [x for x in f if x not in failed]
        if progress:
            progress(f"round {i + 1}/{rounds}: {schedule.orders[-1]} first; base and head measured, "
                     f"{len(b)} and {len(h)} benchmarks")
    return base_runs, head_runs, failed
