"""The answers a command writes to --json and --markdown files: the earlier one such a file holds, whether a command
may replace it, and its removal where argparse refuses a command line before the command runs (which removes it
itself, `outputs.writable`); writing them, credentials masked, before the verdict is printed (`answer`), and their
removal where a run ends with no answer (exit 2, `drop_answers`).

    write(path, text)                    # the file, credentials masked; GateInputError when it cannot be written
    answer(printed, [(path, text), ...]) # the answer files, then the printed verdict; an error there keeps neither
    drop_answers(paths)                  # the answer files written, removed: a run that ends in exit 2 keeps none
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from ..credentials import redact
from ..errors import GateInputError

# how the answers of these commands start: as text (a verdict, a comparison, a search), and as JSON
ANSWER_HEAD = re.compile(r'(## )?sdpa-bench (gate|continuous|compare|bisect): |\{\s*"(verdict|answer)": ')


def an_answer(path: Path) -> bool:
    """Whether an existing --json / --markdown file may be replaced: empty, or an answer sdpa-bench wrote, by how it
    starts (one cut short by a killed run too); never a file the user named by mistake."""
    try:
        with path.open("rb") as fh:
            head = fh.read(256).decode("utf-8", "replace").lstrip("\ufeff \t\r\n")
    except OSError:
        return False
    return not head or ANSWER_HEAD.match(head) is not None


def drop_earlier_answers(argv: Sequence[str], parser: argparse.ArgumentParser | None) -> None:
    """A command line refused before its command runs (argparse's error: an empty SPEC, an unknown preset): the
    earlier answer in a --json or --markdown file it names is removed, as the command itself removes it before its
    work (`writable`), so that a CI step that reads the file does not post it as this run's. Only a file that holds
    an answer (`an_answer`), and never one the line also names otherwise (--resume's steps, --from's verdict)."""
    if parser is None:
        return
    options = {o for a in parser._actions for o in a.option_strings}
    outputs, others = [], []
    skip = False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        name, eq, value = arg.partition("=")
        if name in ("--json", "--markdown") and name in options:
            skip = not eq
            outputs.append(value if eq else argv[i + 1] if i + 1 < len(argv) else "")
        else:
            others.append(value if eq else arg)
    kept = {os.path.realpath(v) for v in others if v}
    for path in (Path(v) for v in outputs if v):
        if path.is_file() and os.path.realpath(path) not in kept and an_answer(path):
            with contextlib.suppress(OSError):
                path.unlink()


def write(path: str, text: str) -> None:
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(redact(text), encoding="utf-8")
    except OSError as exc:
        raise GateInputError(f"{path}: cannot write ({exc.strerror or exc})") from None


def drop_answers(paths: Iterable[str | Path | None]) -> None:
    """Remove the answer files at `paths` (None: not asked for): a run that ends with no answer (exit 2) leaves
    none for a CI step to read as this run's. Only a file: a link itself, not the file it names; never /dev/stdout,
    a link to a descriptor, or a pipe."""
    for path in (Path(p) for p in paths if p):
        if path.is_file():
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def answer(printed: str, files: Iterable[tuple[str | None, Callable[[], str]]]) -> None:
    """Write each answer file (path, text) that was asked for (path None: not), then print `printed` and flush it. The
    files first: a reader that went away (`| head`, BrokenPipeError, exit 141) must not lose them. Any other error on
    the way (a file, or a stdout that takes nothing, /dev/full) is an exit 2, which leaves no answer file behind."""
    files = list(files)
    try:
        try:
            for path, text in files:
                if path:
                    write(path, text())
        finally:  # the verdict printed even where a file could not be written (its error follows)
            sys.stdout.write(printed)
            sys.stdout.flush()  # a stdout that takes nothing fails here, not as the process ends
    except BrokenPipeError:
        raise
    except Exception:
        drop_answers(path for path, _ in files)
        raise
