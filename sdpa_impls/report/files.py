"""Files written whole or not at all, and the temp files of a process killed while writing one.

    write_whole(path, text)     # a temp file beside it, then os.replace
    remove_leftovers(DIR)       # the temp files of processes that no longer run
    still_at(fd, path)          # whether a lock file just locked is still the one at its path
"""
from __future__ import annotations

import contextlib
import os
import re
import stat
from pathlib import Path


def write_whole(path: Path, text: str | bytes) -> Path:
    """Write `path` atomically (a temp file beside it, then os.replace): a killed process or a full disk leaves the
    file as it was, never cut short (a results.csv of fewer rows reads as a whole one, a PNG cut short as an image),
    and no temp file behind to keep the disk full. OSError as writing raised it."""
    target = Path(os.path.realpath(path)) if os.path.islink(path) else path  # a link is written through
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with (open(tmp, "wb") if isinstance(text, bytes) else open(tmp, "w", encoding="utf-8", newline="")) as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(OSError):  # the file's own mode kept (group-readable, say)
            os.chmod(tmp, stat.S_IMODE(os.stat(target).st_mode))
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(exc, OSError) and exc.errno is not None:  # the file meant, not its temp file
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise
    return path


def remove_leftovers(directory: Path) -> None:
    """Remove the temp files of `write_whole` that a killed process left in DIR (its pid no longer runs): the results,
    the report and the plots."""
    for path in Path(directory).glob(".*.tmp"):
        found = re.fullmatch(r"\.(?:results\.json|results\.csv|report\.md|[\w-]+\.png)\.(\d+)\.tmp", path.name)
        if found and int(found[1]) != os.getpid():
            try:
                os.kill(int(found[1]), 0)
            except ProcessLookupError:
                path.unlink(missing_ok=True)
            except (PermissionError, OverflowError):  # another user's process runs under that pid
                pass


def still_at(fd: int, path: Path) -> bool:
    """Whether the file open as `fd` is still the one at `path` itself (a link there is another file). A lock file's
    holder removes it as it ends (or a prune does, holding it), and a process that opened it before then must lock
    the path's new file, or two processes would each hold a lock of their own. False where either cannot be read."""
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path, follow_symlinks=False))
    except OSError:
        return False
