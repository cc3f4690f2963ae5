"""The earlier answer a --json or --markdown file holds: whether a command may replace it, and its removal where
argparse refuses a command line before the command runs (which removes it itself, `outputs.writable`)."""
from __future__ import annotations

import argparse
import contextlib
import os
import re
from collections.abc import Sequence
from pathlib import Path

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
