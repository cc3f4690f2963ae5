"""The lock files of the environment cache: one per key, held while that key's environment is built, found or
removed, so that a run never uses an environment another is building or removing.

    hold(path, progress, wait_s, shared) -> fd   # waits for another run's lock, saying so, at most wait_s
    try_hold(path) -> fd | None                  # exclusive at once, or None while another run holds it
    with in_use(): ... keep(fd)                  # a used environment's lock, shared until the block ends

A run holds the lock of each environment it uses, shared, for as long as its comparison runs (`in_use`): a build
or a prune (exclusive) waits for it or skips that environment, and other runs use it beside this one.

A lock file is opened without following a link and never truncated. A prune removes the lock file of a removed
entry while it holds it; a run that opened that file before then finds, once it holds it, that the path no longer
names the file it holds, and opens the new one: two runs never each hold a lock of their own for one key.
"""
from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ..errors import GateInputError, UsageError
from ..report.files import still_at

try:
    import fcntl
except ImportError:  # not a POSIX system: the commands that use these locks refuse to start (sdpa_impls.cli)
    fcntl = None  # type: ignore[assignment]


def _open(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)


_scopes: list[list[int]] = []  # the shared locks of the environments in use, one list for each open in_use()


@contextlib.contextmanager
def in_use() -> Iterator[None]:
    """The environments kept (`keep`) inside the block stay locked, shared, until it ends: no prune removes an
    environment a comparison is running in."""
    _scopes.append([])
    try:
        yield
    finally:
        for fd in _scopes.pop():
            os.close(fd)


def keep(fd: int) -> None:
    """`fd`'s lock, turned shared and held until the innermost in_use() ends; released now outside one."""
    if not _scopes:
        os.close(fd)
        return
    fcntl.flock(fd, fcntl.LOCK_SH)
    _scopes[-1].append(fd)


def hold(path: Path, progress: Callable[[str], None] | None, wait_s: float, shared: bool = False) -> int:
    """A lock on `path` (exclusive, or `shared` with the other runs using it); waits for another run's build,
    saying so, at most `wait_s`."""
    deadline = time.monotonic() + wait_s
    said = False
    while True:  # once more for each time a prune removed the file this run waited on
        try:
            fd = _open(path)
        except OSError as exc:
            raise UsageError(f"{path}: cannot open the environment's lock ({exc.strerror or exc})") from None
        while True:
            try:
                fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not said and progress:
                    progress(f"waiting for {path}: another sdpa-bench is building this environment")
                    said = True
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise GateInputError(f"{path}: another run has held this environment's lock for more than "
                                         f"{wait_s:.0f} s") from None
                time.sleep(0.5)
            except OSError as exc:  # a file system without locks
                os.close(fd)
                raise UsageError(f"{path}: cannot lock it ({exc.strerror or exc}): use an environment cache on a "
                                 "local file system (--env-cache DIR)") from None
        if still_at(fd, path):
            return fd
        os.close(fd)


def try_hold(path: Path) -> int | None:
    try:
        fd = _open(path)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # in use, or no locks here
        os.close(fd)
        return None
    if still_at(fd, path):
        return fd
    os.close(fd)
    return None
