"""One side of a side-by-side comparison: a source tree installed into its own folder for this interpreter, and
its own benchmark suite run in a separate process.

    install(tree, site, python)  -> None     # pip --target, no dependencies, no network, no build isolation
    check_import(side)           -> None     # the installed package imports and lists its implementations
    run_round(side, out, options) -> RoundRun

Each side runs with the interpreter (and so torch and every other package) of the environment that runs the
comparison: `site` holds only that side's `sdpa-bench` (code and metadata, its entry points included) and comes
first on PYTHONPATH. A user's plug-ins installed in the environment stay visible to both sides through the
`sdpa_impls` entry-point group and import whichever side's `sdpa_impls` is running. The benchmarks are that
side's own tests/test_benchmarks.py, run from its tree, so an older revision is measured with its own suite.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from collections.abc import Callable
from pathlib import Path

from ..errors import GateInputError
from ..gate.points import Point, load_points

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


def side_env(side: Side, cpu: bool) -> dict[str, str]:
    """The environment of a side's processes: its install folder first on PYTHONPATH; one thread on CPU."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME",)}
    env["PYTHONPATH"] = os.pathsep.join([str(side.site)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
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


def check_import(side: Side, cpu: bool) -> None:
    """The installed package imports and lists its implementations, and the side has its benchmark suite;
    GateInputError with the error's last line otherwise."""
    probe = "import sdpa_impls; sdpa_impls.names()"
    done = subprocess.run([side.python, "-c", probe], cwd=side.site, env=side_env(side, cpu), capture_output=True,
                          text=True, timeout=300)
    if done.returncode != 0:
        raise GateInputError(f"{side.role} {side.name}: does not import: {_last_line(done.stderr)}")
    if not (side.tree / SUITE).is_file():
        raise GateInputError(f"{side.role} {side.name}: has no benchmark suite ({SUITE})")


def run_round(side: Side, out: Path, pytest_args: list[str], cpu: bool, timeout: float) -> RoundRun:
    """One run of the side's own benchmark suite into `out` (pytest-benchmark JSON with raw samples)."""
    cmd = [side.python, "-m", "pytest", str(SUITE), "-q", "-rfE", "-p", "no:cacheprovider", "--benchmark-only",
           *pytest_args, f"--benchmark-json={out}", "--benchmark-save-data"]
    try:
        done = subprocess.run(cmd, cwd=side.tree, env=side_env(side, cpu), capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise GateInputError(f"{side.role} {side.name}: its benchmark run took more than {timeout:.0f} s") from None
    text = done.stdout + done.stderr
    failed = tuple(line.strip() for line in text.splitlines() if line.startswith(("FAILED ", "ERROR ")))
    return RoundRun(out, done.returncode, failed, text[-3000:])


def interleaved(base: Side, head: Side, rounds: int, pytest_args: list[str], cpu: bool, workdir: Path,
                progress: Callable[[str], None] | None = None, timeout: float = 600.0
                ) -> tuple[list[list[Point]], list[list[Point]], list[str]]:
    """`rounds` runs of each side alternating in time, each pair in the order opposite to the one before
    (base, head, head, base, ...), so a slow period or a drift of the machine falls on both sides alike.

    Returns (base runs, head runs, head's failed tests): each run a list of gate Points. A run that does not
    produce a usable file (the suite could not start, or everything failed) is GateInputError naming the side.
    """
    runs: dict[str, list[list[Point]]] = {"base": [], "head": []}
    failed: list[str] = []
    for i in range(rounds):
        for side in (base, head) if i % 2 == 0 else (head, base):
            out = workdir / f"{side.role}-{i + 1}.json"
            done = run_round(side, out, pytest_args, cpu, timeout)
            if done.returncode not in (0, 1) or not out.is_file():
                raise GateInputError(f"{side.role} {side.name}: its benchmark suite did not run (pytest exit "
                                     f"{done.returncode}): {_last_line(done.tail)}")
            _, points = load_points(out)
            if not points:
                raise GateInputError(f"{side.role} {side.name}: its benchmark run holds no benchmarks "
                                     f"(every one skipped or failed): {_last_line(done.tail)}")
            runs[side.role].append(points)
            if side.role == "head":
                failed += [f for f in done.failed if f not in failed]
            if progress:
                progress(f"round {i + 1}/{rounds}: {side.role} measured, {len(points)} benchmarks")
    return runs["base"], runs["head"], failed
