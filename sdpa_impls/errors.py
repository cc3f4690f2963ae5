"""Errors a user can fix: raised anywhere below, caught once by the command line (exit status 2).

Nothing in the package imports `cli`; lower layers raise these and the command line prints one line.
"""
from __future__ import annotations

import os
import sys
import traceback

from .credentials import redact

USAGE_EXIT = 2
TRACEBACK_ENV = "SDPA_BENCH_TRACEBACK"  # but "", 0, false, no, off: an unforeseen error's traceback too


class UsageError(Exception):
    """A mistake the user can fix (bad name, bad path, bad file): printed as one line, exit status 2."""


class GateInputError(UsageError):
    """An input the gate cannot use (missing, corrupt or truncated file, bad config); the message says which."""


class MachineError(GateInputError):
    """What this machine lacks (a full disk), not either side's fault: a search over revisions stops on it rather
    than skip a revision that would install elsewhere."""


class SideError(GateInputError):
    """One side of a comparison does not install, import or run; `role` says which ("base" or "head"), so a search
    over revisions can skip that revision instead of giving up."""

    def __init__(self, role: str, message: str) -> None:
        super().__init__(message)
        self.role = role


def _stdout_refuses() -> bool:
    """Whether stdout's descriptor refuses even an empty write (/dev/full, a terminal gone): an OSError in hand is
    then the output's, not the command's."""
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):  # a stream with no descriptor (captured in-process)
        return False
    try:
        os.write(fd, b"")
    except OSError:
        return True
    return False


def unforeseen(prefix: str, exc: Exception) -> int:
    """An error nobody foresaw, as every command reports it: one line on stderr, "PREFIX: error: Type: first line
    (an error sdpa-bench did not foresee; SDPA_BENCH_TRACEBACK=1 shows where)" (or "cannot write to standard
    output" where stdout refuses writes: the error is the output's), credentials masked, the traceback
    above it where SDPA_BENCH_TRACEBACK is set (and the line says so); exit 2, never the 1 a CI reads as the answer."""
    if isinstance(exc, OSError) and exc.filename is None and _stdout_refuses():  # /dev/full, a terminal gone
        print(f"{prefix}: error: cannot write to standard output ({exc.strerror or exc})", file=sys.stderr)
        try:  # what stdout still holds goes nowhere: flushed at the interpreter's exit, it would fail again (exit 120)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return USAGE_EXIT
    shown = os.environ.get(TRACEBACK_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")
    if shown:
        print(redact(traceback.format_exc()), file=sys.stderr, end="")
    first = (str(exc).strip().splitlines() or [""])[0]
    where = "its traceback is above" if shown else f"{TRACEBACK_ENV}=1 shows where"
    print(redact(f"{prefix}: error: {type(exc).__name__}: {first} (an error sdpa-bench did not foresee; {where})"),
          file=sys.stderr)
    return USAGE_EXIT
