"""Rounds in which one process times both sides in turn, for two sides that share an interpreter on the CPU.

    unpairable(base, head, cpu)  -> str | None    # why these sides cannot share a process; None when they can
    paired_round(base, head, templates, names, first, workdir, tag, ...) -> (base points, head points)

A process's own speed, which moves a benchmark by 2-5 % (SD) from one process to the next on a shared VM for the
whole process, is shared by both sides' code in one process: their ratio spreads 0.5-1.2 %
(docs/records/2026-11-28-xeon-bf16-pairs.md). The process is continuous.pair_process, run as a script with the
sides' interpreter; each side's samples come out as a pytest-benchmark file shaped like its first process's
(`templates`), so the verdict reads them as it reads any run. Anything that keeps the process from writing both
files is PairUnavailable, with the process's last line: the caller measures that round in separate processes.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from ..gate.points import Point, load_points
from .outcomes import last_line
from .schedule import Schedule
from .sides import Side, run_pair, side_env

class RoundPlan(Protocol):
    """What the paired rounds read of the comparison's plan (continuous.comparison.Plan)."""

    rounds: int
    max_time: float
    round_timeout: float


PAIR_SCRIPT = Path(__file__).with_name("pair_process.py")


class PairUnavailable(Exception):
    """A paired round could not be measured; the message says why."""


def unpairable(base: Side, head: Side, cpu: bool) -> str | None:
    """Why the two sides cannot share one process (None: they can)."""
    if not cpu:
        return "on CUDA each side runs in processes of its own (the device time is the GPU's, not the process's)"
    if base.python != head.python:
        return "the sides run in different environments"
    if not (base.packaged and head.packaged):
        return "a side's benchmark suite is not in its package (a revision from before it was)"
    return None


def pair_env(base: Side, head: Side, padding: str) -> dict[str, str]:
    """A repeat process's environment (continuous.sides.side_env), without either side's folder on PYTHONPATH:
    the paired process puts each first in turn."""
    env = side_env(head, True, padding, repeat=True)
    theirs = {str(base.site), str(head.site)}
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in theirs]
    if rest:
        env["PYTHONPATH"] = os.pathsep.join(rest)
    else:
        env.pop("PYTHONPATH", None)
    return env


def paired_round(base: Side, head: Side, templates: tuple[Path, Path], names: Sequence[str], first: str,
                 workdir: Path, tag: str, max_time: float, min_rounds: int, timeout: float, padding: str = ""
                 ) -> tuple[list[Point], list[Point]]:
    """One process timing `names` (every benchmark of both templates when empty) of both sides in turn, `first`
    taking the first sample; its files are `workdir/<role>-<tag>.json`. PairUnavailable when it cannot."""
    outs = {side.role: workdir / f"{side.role}-{tag}.json" for side in (base, head)}
    spec = {"sides": {side.role: {"site": str(side.site), "template": str(template), "out": str(outs[side.role])}
                      for side, template in zip((base, head), templates)},
            "names": list(names), "first": first, "max_time": max_time, "min_rounds": min_rounds}
    try:
        with tempfile.TemporaryDirectory(prefix="sdpa-pair-") as tmp:  # not among the runs a caller keeps
            spec_path = Path(tmp) / "spec.json"
            spec_path.write_text(json.dumps(spec), encoding="utf-8")
            done = subprocess.run([head.python, str(PAIR_SCRIPT), str(spec_path)], cwd=tmp,
                                  env=pair_env(base, head, padding), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise PairUnavailable(f"the paired process took more than {timeout:g} s (--round-timeout)") from None
    except OSError as exc:
        raise PairUnavailable(f"the paired process could not start ({exc.strerror or exc})") from None
    if done.returncode != 0 or not all(path.is_file() for path in outs.values()):
        raise PairUnavailable(f"the paired process stopped (exit {done.returncode}): {last_line(done.stderr)}")
    points = [load_points(outs[role])[1] for role in ("base", "head")]
    if not points[0] or not points[1]:
        raise PairUnavailable(f"no benchmark could be prepared on both sides: {last_line(done.stderr)}")
    return points[0], points[1]


class Pairing:
    """The rounds after the first, each one process timing both sides in turn (continuous.pairs), while the sides
    can share one; `why_not` says why they cannot from the start. A paired process that fails turns the pairing off
    when it was the first (the comparison goes on in separate processes), else measures that round in separate
    processes. `plan` is the comparison's Plan (rounds, max_time, round_timeout)."""

    def __init__(self, base: Side, head: Side, schedule: Schedule, runs: Path, plan: RoundPlan,
                 progress: Callable[[str], None], why_not: str | None, min_rounds: int) -> None:
        self.base, self.head, self.schedule, self.runs, self.plan, self.progress = base, head, schedule, runs, plan, \
            progress
        self.why_not, self.min_rounds, self.used, self.fallbacks = why_not, min_rounds, 0, []

    @property
    def on(self) -> bool:
        return self.why_not is None

    def round(self, names: list[str], tag: str, args: list[str]) -> tuple[list, list, list[str]]:
        first = self.schedule.first()
        try:
            b, h = paired_round(self.base, self.head, (self.runs / "base-1.json", self.runs / "head-1.json"), names,
                                first, self.runs, tag, self.plan.max_time, self.min_rounds, self.plan.round_timeout,
                                self.schedule.padding())
        except PairUnavailable as exc:
            if not self.used:
                self.why_not = str(exc)
            self.fallbacks.append(f"round {tag}: {exc}")
            self.progress(f"round {tag}: not paired ({exc}); separate processes")
            return run_pair(self.base, self.head, self.schedule, args, True, self.runs, tag, self.plan.round_timeout,
                            self.progress, first=first)  # the side this round drew: one draw per round
        self.used += 1
        of = "" if tag.startswith("a") else f"/{1 + self.plan.rounds}"  # an adaptive round's number is its own
        self.progress(f"round {tag}{of}: one process, base and head in turn ({first} first), {len(b)} benchmarks")
        return b, h, []

    def note(self) -> str:
        if not self.used:
            return f"rounds: each side in processes of its own ({self.why_not})."
        text = (f"rounds: the first in separate processes (checks, memory, kernels); {self.used} more each one "
                f"process timing base and head in turn, their times the ones compared")
        return text + (f"; measured apart: {'; '.join(self.fallbacks)}." if self.fallbacks else ".")
