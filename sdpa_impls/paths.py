"""Whether a file a command writes at its end can be written, asked at its start: one answer for the command line's
outputs (cli.outputs) and for the pytest suite's --benchmark-json (suite.session), which must not import cli/."""
from __future__ import annotations

import os
from pathlib import Path


def cannot_write(path: str | Path) -> str:
    """Why a file could not be written at `path` ("cannot write (it is a folder)", with ", a link to X" where the path
    is a link to no file yet), or "" where it could. Its folder is made where missing, as the write will need; an
    existing file is left as it is (os.access on it), a new one is made and removed (os.access says yes to /proc)."""
    target = Path(path)
    in_the_way = next((p for p in target.parents if p.exists() and not p.is_dir()), None)
    if in_the_way is not None:
        return f"cannot write ({in_the_way} is a file, not a folder)"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot write ({exc.strerror or exc})"
    if target.is_dir():
        return "cannot write (it is a folder)"
    if target.exists():
        return "" if os.access(target, os.W_OK) else "cannot write (permission denied)"
    made = Path(os.path.realpath(target))  # a link to no file yet: the write makes the file it names
    link = f", a link to {made}" if target.is_symlink() else ""
    if link and (made.is_symlink() or os.readlink(target).endswith("/")):  # resolved to a link: a loop
        return f"cannot write{link} ({'a loop of links' if made.is_symlink() else 'a folder'})"
    try:
        os.close(os.open(made, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        made.unlink()
    except OSError as exc:
        return f"cannot write{link} ({exc.strerror or exc})"
    return ""
