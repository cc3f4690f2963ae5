"""What in a quickstart's destination folder stops it before it writes anything: what is at the paths it writes (a
file where a folder goes, a broken link or a fifo where a file goes).

    kind(path)                  -> str | None   # what non-folder, non-regular thing is at `path` ("a fifo"), if any
"""
from __future__ import annotations

import os
import stat
from pathlib import Path


def kind(path: Path) -> str | None:
    """What is at `path` when it is neither a folder nor a regular file (nor a link to one): "a broken symbolic
    link" (writing follows it, to wherever it points), "a fifo", "a socket", "a device"; None otherwise."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:  # nothing there (or a parent that is no folder: said of the parent)
        return None
    if stat.S_ISLNK(mode):
        if not path.exists():
            return "a broken symbolic link"
        mode = os.stat(path).st_mode
    if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
        return None
    return "a fifo" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
