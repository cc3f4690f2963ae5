"""Progress of a sweep on stderr: a live status line on a terminal, one line per finished point elsewhere."""
from __future__ import annotations

import os
import shutil
import statistics
import sys
import time
from collections import defaultdict
from typing import TextIO

import torch

from ..bench.contention import advice, contended, threads_text
from ..bench.grid import Case
from ..bench.measure import Options
from ..bench.result import Result
from ..fmt import fmt_duration, fmt_seconds


class Eta:
    """Seconds left, predicted point by point from how `time_closure` spends its time, then calibrated.

    A point costs about max(budget, min_reps·s) (capped at max_reps·s; s = max(t, min_sample_s)) plus warm-up, memory and
    correctness calls, where t = FLOPs / the throughput this implementation reached on finished
    points of the same dtype and mode. The sum is scaled by observed / predicted time so far (case
    set-up, the fp64 reference and overheads). Implementations that only ever skipped cost ~nothing.
    """

    def __init__(self, options: Options) -> None:
        self.options = options
        self.throughput: dict[tuple, list[float]] = defaultdict(list)  # (impl[, dtype, mode]) -> FLOP/s
        self.skips: dict[str, list[float]] = defaultdict(list)
        self.skipped_before: set[str] = set()  # skipped before a resume, at a cost not saved
        self.ran: set[str] = set()
        self.walls: list[float] = []
        self.observed = self.predicted = 0.0

    def _call_time(self, impl: str, case: Case) -> float | None:
        for key in ((impl, case.dtype, case.mode), (impl,), ()):
            if self.throughput.get(key):
                return case.flops() / statistics.median(self.throughput[key])
        return None

    def predict(self, impl: str, case: Case) -> float | None:
        if impl not in self.ran and (impl in self.skips or impl in self.skipped_before):
            return statistics.mean(self.skips[impl]) if self.skips.get(impl) else 0.0
        t = self._call_time(impl, case)
        if t is None:
            return None
        o = self.options
        sample = max(t, o.min_sample_s)  # a sample is back-to-back calls lasting at least min_sample_s
        timed = min(max(o.budget_s, o.min_reps * sample), o.max_reps * sample) + o.min_sample_s  # + calibration
        return timed + (o.warmup + (2 if o.memory else 1)) * t

    def _learn(self, result: Result) -> bool:
        """Record the throughput of a point that ran; False when it did not run."""
        if result.status != "ok" or not result.median_s:
            return False
        self.ran.add(result.impl)
        rate = result.case.flops() / result.median_s
        for key in ((result.impl, result.case.dtype, result.case.mode), (result.impl,), ()):
            self.throughput[key].append(rate)
        return True

    def resume(self, finished: list[Result]) -> None:
        """Learn from the points a resumed sweep finished before: their throughput (their wall times were not
        saved, so the calibration starts with this run). A skip is decided before any call: about no time."""
        for result in finished:
            if not self._learn(result) and result.status == "skipped":
                self.skipped_before.add(result.impl)

    def add(self, result: Result, seconds: float) -> None:
        self.walls.append(seconds)
        if not self._learn(result) and result.status == "skipped":
            self.skips[result.impl].append(seconds)
        guess = self.predict(result.impl, result.case)
        if guess is not None:
            self.observed += seconds
            self.predicted += guess

    def remaining(self, pending: list[tuple[str, Case]]) -> float | None:
        """Seconds for the (implementation, case) points still to run; None before anything finished."""
        if not self.walls:
            return None
        scale = self.observed / self.predicted if self.predicted > 0 else 1.0
        fallback = statistics.mean(self.walls)
        guesses = (self.predict(impl, case) for impl, case in pending)
        return sum(fallback if g is None else g * scale for g in guesses)


class Progress:
    """Reports each point of a sweep; `start` before a point runs, `finish` when its Result exists."""

    def __init__(self, total: int, options: Options, finished: list[Result] = (),
                 stream: TextIO | None = None) -> None:
        """`finished`: the points a resumed sweep already has; they count as done and inform the ETA."""
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.total = total
        self.done = len({(r.case.id, r.impl) for r in finished})
        self.eta = Eta(options)
        self.eta.resume(list(finished))
        self._t0 = time.monotonic()
        self._started = self._t0
        self._status = ""
        self._said_contended = False

    def _eta_text(self, pending: list[tuple[str, Case]]) -> str:
        if not pending:
            return "done"
        left = self.eta.remaining(pending)
        return "ETA ?" if left is None else f"ETA {fmt_duration(left)}"

    def _write_status(self, text: str) -> None:
        width = shutil.get_terminal_size((100, 20)).columns - 1
        text = text[:width]
        self.stream.write("\r" + text.ljust(len(self._status)))
        self._status = text
        self.stream.flush()

    def _clear(self) -> None:
        if self.tty and self._status:
            self.stream.write("\r" + " " * len(self._status) + "\r")
            self._status = ""

    def note(self, text: str) -> None:
        self._clear()
        print(text, file=self.stream, flush=True)

    def start(self, pending: list[tuple[str, Case]]) -> None:
        """`pending`: every (implementation, case) still to run, the one starting now first."""
        self._started = time.monotonic()
        if self.tty and pending:
            impl, case = pending[0]
            self._write_status(f"[{self.done + 1}/{self.total}] {case.id}  {impl} …  {self._eta_text(pending)}")

    def finish(self, result: Result, pending: list[tuple[str, Case]]) -> None:
        """`pending`: the points still to run after this one (for the ETA)."""
        elapsed = time.monotonic() - self._started
        self.eta.add(result, elapsed)
        self.done += 1
        if result.status == "ok":
            what = f"{fmt_seconds(result.median_s)}"
            if result.tflops is not None:
                what += f", {result.tflops:.3g} TFLOP/s"
            if contended(result.other_cpus, torch.get_num_threads(), os.cpu_count()):
                what += f", other processes busy on {result.other_cpus:g} CPUs"
                if not self._said_contended:
                    self._said_contended = True
                    self.note(f"warning: other processes kept {result.other_cpus:g} CPUs busy while "
                              f"{result.case.id} {result.impl} was measured, and torch uses "
                              f"{threads_text(torch.get_num_threads())} of {os.cpu_count()} CPUs: its threads wait "
                              "for each other, so times are slowed and scattered (report.md marks such points). "
                              f"Measure {advice(torch.get_num_threads())}")
        else:
            what = f"{result.status}: {result.reason}"
            if len(what) > 110:
                what = what[:107] + "..."
        pct = 100 * self.done // max(self.total, 1)
        self.note(f"[{self.done}/{self.total} {pct:3d}%] {result.case.id}  {result.impl}: {what}  "
                  f"({self._eta_text(pending)})")

    def close(self) -> None:
        self._clear()
        self.stream.flush()

    @property
    def wall_s(self) -> float:
        return time.monotonic() - self._t0
