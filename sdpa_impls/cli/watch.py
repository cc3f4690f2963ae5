"""`run --point-timeout`: a point that never returns (a deadlocked kernel, a spinning plug-in) is stopped, recorded
as failed, and the sweep goes on, as it does after a point that raises.

A thread cannot stop another that is inside a kernel, so the watcher replaces the whole process: it prints where
every thread is, saves the point as failed with the finished ones, and runs the same command line again in this
process (exec), which resumes the sweep after that point (CONTINUE_ENV tells it to, whatever --overwrite said).
It does so only where sdpa-bench is the process's command (`sdpa-bench run …`, `python -m sdpa_impls run …`):
called from other Python code (`sdpa_impls.cli.main([...])` in a test), a run has no point timeout.

The watcher is a Python thread, which runs while the stuck call has released the GIL (torch's ops, a CUDA wait, a
sleep, a Python loop). For a call that holds it, an interval timer's SIGALRM ends the process a minute later (exit
142) with every thread's stack (faulthandler); the point is then noted in DIR as one the process ended inside, as
after a segfault (report.running), and --resume goes on.
"""
from __future__ import annotations

import argparse
import contextlib
import faulthandler
import os
import signal
import sys
import threading
import time
from pathlib import Path

from ..bench.grid import Case
from ..bench.result import Result
from ..errors import USAGE_EXIT, UsageError
from ..fmt import fmt_duration, option_text
from ..report import results as store
from ..report import running
from ..report.writer_lock import keep_lock_across_exec
from .progress import Progress

DEFAULT_S = 1800.0
LONGEST_S = 7 * 24 * 3600.0  # a week: the alarm's clock takes no value near 1e10 s, and 0 is "no limit"
CONTINUE_ENV = "SDPA_BENCH_CONTINUE"  # set to --out for the process that replaces a timed-out one
HELD_GIL_GRACE_S = 60.0  # after the timeout: SIGALRM ends a process whose stuck call holds the GIL
TIMED_OUT_EXIT = 124  # as timeout(1): where exec fails


def add_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--point-timeout", type=float, metavar="SECONDS", default=None,
                   help=f"a point still running after this long is stopped and recorded as failed, and the sweep "
                        f"goes on in a new process (default {DEFAULT_S:g}, or 4 × --budget where longer; 0: no "
                        f"limit; more than --budget); kept with the sweep, so that --resume goes on with it unless "
                        f"given again")


def checked(seconds: float, budget_s: float = 0.0) -> float | None:
    """--point-timeout's seconds, None for no limit; ValueError for a negative, non-finite or over-a-week value, or
    one that `budget_s` (--budget, the time a point measures for before its check and memory) reaches."""
    if not 0 <= seconds < float("inf"):
        raise ValueError(f"--point-timeout must be >= 0 seconds and finite (0: no limit); got {seconds}")
    if seconds > LONGEST_S:
        raise ValueError(f"--point-timeout must be at most {LONGEST_S:g} seconds, a week (0: no limit); got {seconds:g}")
    if 0 < seconds <= budget_s:
        raise ValueError(f"--point-timeout {seconds:g} would stop points that are still measuring: each measures for "
                         f"up to --budget {budget_s:g} s, then its memory; it is for a point that never returns, so "
                         f"give it several times the budget (0: no limit)")
    return seconds or None


def kept(given: float | None, meta: dict, budget_s: float) -> float | None:
    """The sweep's point timeout, kept in its `meta`: `given` (--point-timeout), else the one it was started or last
    resumed with (report.contents checks the file's), else DEFAULT_S or 4 × `budget_s` (the sweep's --budget) where
    that is longer; as `checked` returns it (None: no limit); UsageError where the budget reaches it."""
    saved = meta.get("point_timeout")
    if given is None and saved is None and budget_s >= LONGEST_S:  # no default could let such a point finish
        raise UsageError(f"--budget must be under {LONGEST_S:g} seconds (a week, the longest --point-timeout); "
                         f"got {budget_s:g}")
    seconds = float(given if given is not None else saved if saved is not None else max(DEFAULT_S, 4 * budget_s))
    meta["point_timeout"] = seconds
    try:
        return checked(seconds if given is not None else min(seconds, LONGEST_S), budget_s)  # typed: as typed
    except ValueError as exc:
        raise UsageError(str(exc)) from None


CONTINUED: list[str] = []  # the sweep this process took over from a timed-out one (its CONTINUE_ENV, once read)


def continuing(out: Path) -> bool:
    """True in the process that replaced a timed-out one writing `out`: it resumes that sweep."""
    said = os.environ.pop(CONTINUE_ENV, None)
    CONTINUED.extend([said] if said is not None else [])
    return said is not None and said == str(Path(out).resolve())


class PointWatch:
    """Notes the point being measured in `out` (report.running) and stops one that runs past `seconds`.

    `point(case, impl)` before each point, `point(None)` after the last; `lock` is held while the sweep saves a
    finished point, so that a point which finishes as it times out is recorded once. `own`: sdpa-bench is this
    process's command, which can be run again in its place (else nothing is timed)."""

    def __init__(self, out: Path, sweep: store.Sweep, progress: Progress, seconds: float | None,
                 own: bool) -> None:
        self.out, self.sweep, self.progress, self.seconds = out.absolute(), sweep, progress, seconds if own else None
        self.wall_before = float(sweep.meta.get("wall_s") or 0.0)  # the earlier sessions' measuring time
        self.cwd = os.getcwd()  # where the command line's paths mean what they meant, whatever a plug-in did since
        self._term_ignored = signal.getsignal(signal.SIGTERM) is signal.SIG_IGN  # as the process started
        self.lock = threading.RLock()
        self._woken = threading.Condition(self.lock)
        self._point: tuple[Case, str] | None = None
        self._since = 0.0
        self._alarm = False  # SIGALRM's default action ends the process; faulthandler prints the stacks first
        if self.seconds and hasattr(signal, "setitimer") and hasattr(faulthandler, "register"):
            with contextlib.suppress(ValueError, OSError, RuntimeError):  # a stderr with no file descriptor
                faulthandler.register(signal.SIGALRM, file=sys.__stderr__, all_threads=True, chain=True)
                self._alarm = True
        if self.seconds:
            threading.Thread(target=self._watch, name="sdpa-bench point timeout", daemon=True).start()

    def clock(self, session_s: float | None = None) -> None:
        """The sweep's measuring time, this session's so far (or `session_s`) included, set before each save: a
        session killed (SIGKILL, the machine lost) keeps what it measured until its last point."""
        now = self.progress.wall_s if session_s is None else session_s
        self.sweep.meta["wall_s"] = self.wall_before + now

    def point(self, case: Case | None, impl: str = "") -> None:
        with self.lock:
            running.mark(self.out, case and case.id, impl)
            self._point, self._since = (case, impl) if case else None, time.monotonic()
            self._woken.notify()
        if self._alarm:
            signal.setitimer(signal.ITIMER_REAL, self.seconds + HELD_GIL_GRACE_S if case else 0.0)

    def _watch(self) -> None:
        with self.lock:
            while True:
                left = self._point and self._since + self.seconds - time.monotonic()
                if left is None or left > 0:
                    self._woken.wait(left)
                    continue
                self._expired(*self._point)  # never returns: the process is replaced or ends

    def _expired(self, case: Case, impl: str) -> None:
        """With the lock held for good (the sweep's thread saves nothing more): say where it is stuck, save the
        point as failed, and replace the process (or end it, where exec fails)."""
        self.progress.note(f"sdpa-bench: {impl} on {case.id} is still running after {fmt_duration(self.seconds)} "
                           "(--point-timeout): stopping it. Where each thread is:")
        with contextlib.suppress(ValueError, OSError, RuntimeError):
            faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        meta = self.sweep.meta
        self.sweep.results.append(Result(impl=impl, case=case, device=meta["device"], status="failed", reason=(
            f"still running after {self.seconds:g} s (--point-timeout): stopped, not measured again")))
        self.clock()
        try:
            store.save(self.out, self.sweep)
        except UsageError as exc:  # a full disk: said as the sweep's thread says it, and no crash is noted
            with contextlib.suppress(OSError):
                running.mark(self.out, None)
            self.progress.note(f"sdpa-bench run: error: {exc}")
            sys.stderr.flush()
            os._exit(USAGE_EXIT)
        running.mark(self.out, None)
        sys.stdout.flush()
        if self._alarm:  # an interval timer outlives exec, and the new process would die of it
            signal.setitimer(signal.ITIMER_REAL, 0.0)
        if signal.getsignal(signal.SIGTERM) is signal.SIG_IGN and not self._term_ignored:
            # a Ctrl-C or SIGTERM came meanwhile (outputs.terminate_as_interrupt ignores both from then on, and a new
            # process would inherit that): the command ends as interrupted, its report left to --resume
            self.progress.note(f"sdpa-bench: interrupted; {len(self.sweep.done())} of {self.sweep.planned} points "
                               f"are saved; continue with: sdpa-bench run {option_text('--out', str(self.out))} --resume")
            sys.stderr.flush()
            os._exit(130)
        self.progress.note(f"sdpa-bench: recorded as failed; {len(self.sweep.done())} of {self.sweep.planned} "
                           "points saved; the sweep goes on in a new process")
        sys.stderr.flush()
        os.environ[CONTINUE_ENV] = str(Path(self.out).resolve())
        try:
            keep_lock_across_exec(self.out)
            os.chdir(self.cwd)
            os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
        except OSError as exc:
            self.progress.note(f"sdpa-bench: could not start the new process ({exc}); continue with: sdpa-bench run "
                               f"{option_text('--out', str(self.out))} --resume")
            sys.stderr.flush()
            os._exit(TIMED_OUT_EXIT)
