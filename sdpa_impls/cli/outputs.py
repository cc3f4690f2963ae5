"""What the commands that compare (`continuous`, `bisect`) share at the command line: how each comparison measures,
progress lines with the time since the start, answers written to files, and the exit-code contract held against
any error (exit 2 for anything that is not an answer).

    add_measuring(parser)                # --rounds, --max-time, --adaptive-budget, --adaptive-rounds,
                                         # --separate-processes, --round-timeout
    impl_names(values) -> (name, ...)    # --impl's values, repeated or comma-separated (run takes them so too)
    progress = timed_progress()          # progress(text) prints "[  12s] text" to stderr
    writable(outputs, inputs, stale)     # GateInputError up front where an answer's file could not be written
    config_file(path)                    # GateInputError up front, naming --config, for a gate config that is unusable
    guarded(command, body, source) -> int  # body()'s exit code, or 2 with one line for any error, never a traceback
    check_time_reference(config, impls)  # GateInputError for a time_reference no implementation has (gate, compare)

The answer files themselves (write, answer, drop_answers) are cli.answers'.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import math
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from .. import settings
from ..continuous.comparison import ADAPTIVE_BUDGET, ENV_BUDGET_FACTOR, MAX_TIME, ROUND_TIMEOUT, ROUNDS
from ..credentials import redact
from ..errors import USAGE_EXIT, GateInputError, UsageError, unforeseen
from ..fmt import fmt_duration
from ..gate.config import GateConfig, load_config
from ..paths import cannot_write
from ..registry import names as registered
from .answers import an_answer, drop_answers


def impl_names(values: list[str] | None) -> tuple[str, ...]:
    """The names given as `--impl a --impl b` or `--impl a,b`, each once, in order; UsageError where --impl was
    given and names none (`--impl ,,` is no request for every implementation), or an empty name beside others
    (`--impl a,,b` and `--impl a,` are typos, not a request for a and b)."""
    names = tuple(dict.fromkeys(n.strip() for item in values or () for n in item.split(",") if n.strip()))
    if values and not names:
        raise UsageError(f"--impl {','.join(values)!r}: names no implementation")
    for item in values or ():
        if not all(n.strip() for n in item.split(",")):
            raise UsageError(f"--impl {item!r}: an empty name between commas")
    return names


def seed(text: str) -> int:
    """--seed's value, the same range for every command: a whole number from 0 to 2⁶³ − 1 (torch's generator and
    the comparisons' orders take it; a larger one overflowed in every point's inputs)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"should be a whole number, got {text!r}") from None
    if not 0 <= value < 2 ** 63:
        raise argparse.ArgumentTypeError(f"should be from 0 to 2**63 - 1, got {text}")
    return value


def budget(text: str) -> float | None:
    """--adaptive-budget's value: seconds, or "auto" (None: continuous.comparison.choose_budget); a negative number
    is Plan.check's to refuse, with the other options' values."""
    if text.strip().lower() == "auto":
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds):
        raise argparse.ArgumentTypeError(f"should be a number of seconds or 'auto', got {text!r}")
    return seconds


def add_measuring(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The options of how both sides of a comparison are measured (continuous.comparison.Plan)."""
    parser.add_argument("--rounds", type=int, default=ROUNDS,
                        help=f"timed rounds (default {ROUNDS}): each a process of each side, alternating, or, where "
                             "the sides can share one (see --separate-processes), one process timing both after a first "
                             "round that checks them; more, shorter runs spread a slow period of the machine thinner; with 1 "
                             "and no adaptive rounds nothing is judged slower (that must hold with any one round left "
                             "out), only bigger or wrong")
    parser.add_argument("--max-time", type=float, default=MAX_TIME, metavar="S",
                        help=f"pytest-benchmark's --benchmark-max-time per benchmark and process (default {MAX_TIME})")
    parser.add_argument("--adaptive-budget", type=budget, default=None, metavar="S",
                        help=f"seconds of extra rounds (base and head again, undecided benchmarks only) after the "
                             f"planned ones, until each benchmark is decided (0: none; default, or 'auto': "
                             f"{ADAPTIVE_BUDGET:g} where both sides share an environment, {ENV_BUDGET_FACTOR:g}x the "
                             f"planned rounds' time, at least {ADAPTIVE_BUDGET:g}, where their environments differ)")
    parser.add_argument("--adaptive-rounds", type=int, default=None, metavar="N",
                        help="at most N extra rounds within the budget (default: as many as fit; a number of rounds "
                             "is the same on any machine, a budget in seconds is not)")
    parser.add_argument("--separate-processes", action="store_true",
                        help="time each side in processes of its own in every round; by default, where both sides "
                             "share an interpreter on the CPU, the first round checks them apart and each later round "
                             "is one process timing both in turn, which cancels the process's own speed")
    parser.add_argument("--round-timeout", type=float, default=ROUND_TIMEOUT, metavar="S",
                        help=f"the longest one side's benchmark process may run before the comparison stops with exit "
                             f"2 (default {ROUND_TIMEOUT:g}; a large preset on a slow CPU needs more)")


def timed_progress() -> Callable[[str], None]:
    start = time.perf_counter()

    def progress(text: str) -> None:
        print(redact(f"[{fmt_duration(time.perf_counter() - start):>5}] {text}"), file=sys.stderr, flush=True)

    return progress


def folders(named: dict[str, object], written: tuple[str, ...] = ()) -> None:
    """GateInputError for a folder option (--keep-runs, --env-cache) whose path is a file, or, for the flags in
    `written`, where nothing can be made in it (or in the folder above that it would be made in): refused before any
    work, not once (or whether) the run reaches it, where it would read as a revision's error."""
    for flag, path in named.items():
        folder = Path(str(path)).expanduser() if path else None
        if folder is not None and (folder.exists() or folder.is_symlink()) and not folder.is_dir():
            raise GateInputError(f"{flag} {path}: is a file, not a folder")
        if folder is not None and flag in written:
            there = next(p for p in (folder.absolute(), *folder.absolute().parents) if p.exists())
            try:  # made and removed: what the run's files will need (os.access says yes to root, and to /proc)
                os.rmdir(tempfile.mkdtemp(prefix=".sdpa-bench-probe-", dir=there))
            except OSError as exc:
                raise GateInputError(f"{flag} {path}: cannot write in {there} ({exc.strerror or exc})") from None


def writable(outputs: dict[str, str | Path | None], inputs: dict[str, str | Path | None] | None = None,
             stale: bool = False) -> None:
    """GateInputError now, before any measuring, where an output (`{"--json": path}`; None: not asked for) could not
    be written at the end (a folder; a folder that cannot be made or written in; a file system that takes no new
    file, such as /proc), is one of the `inputs` it would overwrite, or is another output's file too. `stale`: an
    existing output that is a file (an earlier run's answer, or empty: any other file is refused, untouched; a link
    to a file loses the link, not the file) is removed once all are checked, so that a run that ends with no answer
    (exit 2) leaves none for a CI step to read as this run's; anything else, /dev/stdout or a pipe, is where the
    answer goes, and stays."""
    seen: dict[Path, str] = {}
    sources = {_same(path): flag for flag, path in (inputs or {}).items() if path}
    for flag, path in ((f, p) for f, p in outputs.items() if p):
        target = Path(path)
        if _same(target) in sources:
            raise GateInputError(f"{flag} {path}: is also {sources[_same(target)]}, which writing it would destroy; "
                                 "write it elsewhere")
        if _same(target) in seen:
            raise GateInputError(f"{flag} {path}: is {seen[_same(target)]}'s file too: give each its own")
        seen[_same(target)] = flag
        why = cannot_write(target)
        if why:
            raise GateInputError(f"{path}: {why}")
        # a link is removed, not the file it names; a file of the user's, named by mistake, is not removed
        if stale and target.is_file() and not target.is_symlink() and not an_answer(target):
            raise GateInputError(f"{flag} {path}: a file that holds no earlier answer of sdpa-bench, which this "
                                 "run would replace: name another file, or remove it first")
    if stale:
        drop_answers(outputs.values())


def config_file(path: str | None) -> None:
    """GateInputError now, before any side is checked out, where the --config file is missing or not a gate config
    sdpa-bench can read, labelled as the user's file: a side's error would call it the head's, and a search would skip
    every commit over it."""
    if path is None:
        return
    if not Path(path).is_file():
        raise GateInputError(f"--config {path}: " + ("a folder, not a file" if Path(path).is_dir() else "no such file"))
    try:
        load_config(path)
    except UsageError as exc:  # each message starts with the file's path
        raise GateInputError(f"--config {exc}") from None


def _same(path: str | Path) -> Path:
    """One spelling of a path, links resolved: the file a write through it would replace (realpath: a loop of links
    raises nothing, it stays a path that names no file)."""
    return Path(os.path.realpath(Path(path).expanduser()))


def guarded(command: str, body: Callable[[], int], source: str = "") -> int:
    """body()'s exit code; a UsageError (a side that does not install, import or run included) or any error nobody
    foresaw is exit 2 and one line on stderr, credentials masked (SDPA_BENCH_TRACEBACK=1 shows the traceback of
    the latter): a CI must never read exit 1 from something that is not the answer."""
    try:
        return body()
    except UsageError as exc:
        print(redact(f"sdpa-bench {command}: error: {exc}{settings.note(source)}"), file=sys.stderr)
        return USAGE_EXIT
    except BrokenPipeError:  # the reader of stdout went away: the command's main says so
        raise
    except Exception as exc:
        return unforeseen(f"sdpa-bench {command}", exc)


class Terminated(KeyboardInterrupt):
    """SIGTERM during a sweep or a search (a batch scheduler's time limit, `kill`): stopped as Ctrl-C stops it."""


class HungUp(Terminated):
    """SIGHUP (the terminal closed, an ssh session dropped): stopped as SIGTERM stops it (under nohup: ignored)."""


STOPS = (signal.SIGINT, signal.SIGTERM, *((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ()))


def stopped_how(exc: BaseException) -> tuple[str, int]:
    """What an ending says of the signal that stopped the command, and its exit status (128 + the signal's number,
    what a shell reports)."""
    if isinstance(exc, HungUp):
        return "hung up (SIGHUP)", 128 + signal.SIGHUP
    if isinstance(exc, Terminated):
        return "terminated (SIGTERM)", 128 + signal.SIGTERM
    return "interrupted", 130


def _race_unsaid(unraisable, before) -> None:
    """sys.unraisablehook once Ctrl-C and SIGTERM are ignored: a signal already on its way then (a CI's SIGTERM
    arriving with its SIGINT, both caught at the end of one torch call) is ignored as meant, and Python's warning of
    it ("Signal 15 ignored due to race condition", a traceback) would read as a crash; anything else goes on."""
    if not (isinstance(unraisable.exc_value, OSError) and "ignored due to race condition" in str(unraisable.exc_value)):
        before(unraisable)


def ignore_stops(signals=STOPS) -> None:
    """Ignore these signals from here on, without a word for one already on its way (main thread only)."""
    if not isinstance(sys.unraisablehook, functools.partial) or sys.unraisablehook.func is not _race_unsaid:
        sys.unraisablehook = functools.partial(_race_unsaid, before=sys.unraisablehook)
    for s in signals:
        signal.signal(s, signal.SIG_IGN)


@contextlib.contextmanager
def terminate_as_interrupt():
    """While a sweep or a search runs, SIGTERM raises `Terminated` (and Ctrl-C KeyboardInterrupt), so a killed job
    saves what it finished the way an interrupted one does. From the first of them both are ignored, to the
    process's exit: the ending that saves and says how to go on runs whole, and the first signal's exit code stands,
    through a second Ctrl-C or the SIGTERM a CI sends after its SIGINT. Where no signal came, the previous handlers
    come back afterwards; a SIGINT the process was started to ignore stays ignored. Off the main thread, nothing
    changes."""
    def stop(signum, frame):
        ignore_stops(previous)
        for held in _ACTIVE:  # the command is ending: nothing to give back, here nor in an enclosing one (main's)
            held.clear()
        STOPPED.append(HungUp if signum == getattr(signal, "SIGHUP", None) else
                       Terminated if signum == signal.SIGTERM else KeyboardInterrupt)
        raise STOPPED[-1]()
    previous: dict[int, object] = {}
    if not _ACTIVE:  # a command of its own (tests run several in one process): an earlier one's stop is not its
        STOPPED.clear()
    try:
        for s in STOPS:
            if signal.getsignal(s) is not signal.SIG_IGN:
                previous[s] = signal.signal(s, stop)
    except ValueError:  # signal handlers belong to the main thread
        yield
        return
    _ACTIVE.append(previous)
    try:
        yield
    finally:
        _ACTIVE[:] = [held for held in _ACTIVE if held is not previous]  # by identity: cleared ones are all {}
        for s, handler in previous.items():
            signal.signal(s, handler)


_ACTIVE: list[dict] = []  # the handlers each terminate_as_interrupt now open would give back, innermost last
STOPPED: list[type] = []  # the exception each stop raised: one that code under a point swallowed is raised again


def raise_if_stopped() -> None:
    """Raise the first stop's exception again where a signal came and its exception was swallowed on the way (a
    library's broad `except` around a point): the loop that calls this between points ends as the signal asked."""
    if STOPPED:
        raise STOPPED[0]()


def check_time_reference(config: GateConfig, impls: set[str]) -> None:
    """GateInputError where the config's time_reference names no implementation installed here or measured in
    `impls`: a typo in it would only compare times as measured, with a note."""
    reference = config.time_reference
    if reference and reference not in registered() and reference not in impls:
        raise GateInputError(f"{config.source}: time_reference {reference!r}: no implementation of that name, "
                             f"here or in these results (known here: {', '.join(registered())})")
