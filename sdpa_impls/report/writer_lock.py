"""The lock that keeps a folder to one writer (a sweep's: `run`, `targets`; a comparison's --keep-runs), and its
hand-over when `run --point-timeout` replaces its own process.

    with only_writer(DIR): ...          # UsageError naming the holder where another process writes DIR
    writer(DIR)                         # "process N" while a run holds it, else None
    keep_lock_across_exec(DIR)          # before exec: the new process takes the lock over, with no moment free
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path

from ..errors import UsageError
from .files import remove_leftovers, still_at

LOCK_FILE = ".sdpa-bench-run.lock"
LOCK_FD_ENV = "SDPA_BENCH_LOCK_FD"  # the lock's descriptor, kept open across --point-timeout's exec
_held: dict[str, int] = {}  # folder -> the descriptor of its lock, while only_writer holds it


@contextlib.contextmanager
def only_writer(directory: Path, who: str = "`sdpa-bench run`", option: str = "--out"):
    """While it is held, no other `run` may write DIR: a second one, started before the first saved anything or
    resuming it meanwhile, would measure the same points on the same CPUs and replace the first one's file. An
    advisory lock (flock) on DIR/.sdpa-bench-run.lock, which is removed as it ends (a process killed leaves the file,
    unlocked: the next one takes it), released when the process ends however it ends; UsageError naming the holder
    (as `who`, with the `option` that named DIR) where another process has it. Where the system or the file system
    has no flock (some network file systems answer ENOLCK), nothing is locked: the sweep runs as it did before there
    was a lock."""
    try:
        import fcntl
    except ImportError:  # not a POSIX system
        yield
        return
    path = Path(directory) / LOCK_FILE
    handle, tries = _inherited(path), 0
    while handle is None:
        tries += 1
        existed = path.exists()
        try:  # not through a link: the file is truncated, then removed
            handle = os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644), "a+",
                               encoding="utf-8")
        except OSError as exc:
            if not path.is_symlink():
                raise
            raise UsageError(f"{path} is a link: sdpa-bench writes its lock there; remove the link") from exc
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise UsageError(f"{directory} is being written by another {who} ({holder}): wait for it to finish, "
                             f"or choose another {option}") from None
        except OSError:  # no locks on this file system: nothing locked, nothing left
            handle.close()
            if not existed:
                path.unlink(missing_ok=True)
            yield
            return
        if not still_at(handle.fileno(), path) and tries < 100:  # its holder removed it as it ended: lock the new one
            handle.close()  # (a file system whose inode numbers never agree is given up on: it is locked as is)
            handle = None
    with handle:
        handle.seek(0)
        handle.truncate()
        handle.write(f"process {os.getpid()}\n")
        handle.flush()
        remove_leftovers(directory)  # the temp files of a writer killed while it saved
        held = str(path.resolve())  # once: where the working folder is deleted meanwhile, resolve() fails
        _held[held] = handle.fileno()
        try:
            yield
        finally:
            _held.pop(held, None)
            if still_at(handle.fileno(), path):  # the folder is left as the sweep made it (or as it was, if refused);
                with contextlib.suppress(OSError):  # a file put in its place meanwhile is another run's lock
                    path.unlink()
            fcntl.flock(handle, fcntl.LOCK_UN)


def writer(directory: Path) -> str | None:
    """Who holds DIR's lock now ("process N"), or None: a `run` still writing the sweep there."""
    try:
        import fcntl
        with open(Path(directory) / LOCK_FILE, encoding="utf-8") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return handle.read().strip() or "another process"
            fcntl.flock(handle, fcntl.LOCK_UN)
    except (ImportError, OSError):  # no lock file, no locks on this system or file system
        pass
    return None


def keep_lock_across_exec(directory: Path) -> None:
    """Before the process replaces itself (exec) to go on with DIR's sweep: its lock's descriptor stays open in the
    new process, which takes it over in `only_writer`, so that no other `run` can take the folder in between."""
    fd = _held.get(str((Path(directory) / LOCK_FILE).resolve()))
    if fd is not None:
        os.set_inheritable(fd, True)
        os.environ[LOCK_FD_ENV] = str(fd)


def _inherited(path: Path):
    """The lock on `path` a process that replaced itself left open for this one (keep_lock_across_exec), else None."""
    said = os.environ.pop(LOCK_FD_ENV, None)
    if not said:
        return None
    try:
        fd = int(said)
        if os.path.samestat(os.fstat(fd), os.stat(path)):
            os.set_inheritable(fd, False)  # none of this process's children holds it
            return os.fdopen(fd, "a+", encoding="utf-8")
        os.close(fd)  # another folder's: this process does not write there
    except (ValueError, OSError):
        pass
    return None
