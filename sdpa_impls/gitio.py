"""One way to read git's answers, whatever the locale: the paths git prints are read as the file system reads names
(byte for byte), the names and subjects it prints as UTF-8 (git's convention), its messages in the locale's
encoding, and no byte ever ends a command. A process in an ASCII or EUC-JP locale would otherwise fail to decode a
UTF-8 branch, subject or path.

    run(folder, *args, timeout, env) -> CompletedProcess  # OSError where git is missing, TimeoutExpired
    answer(folder, *args, timeout)  -> str | None         # stdout stripped; None where git fails, is missing or hangs
    utf8(text)                      -> str                # a subject from stdout, as git wrote it (U+FFFD for what
                                                          # is not UTF-8)
    ref_name(text)                  -> str | None         # a branch name from stdout; None where it is not UTF-8
"""
from __future__ import annotations

import locale
import os
import subprocess
from pathlib import Path


def run(folder: Path, *args: str, timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`git -C folder args` (in `env`, else this process's environment): stdout as the file system reads names,
    stderr in the locale's encoding."""
    done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, timeout=timeout, env=env)
    done.stdout = os.fsdecode(done.stdout)
    done.stderr = done.stderr.decode(locale.getpreferredencoding(False), "replace")
    return done


def answer(folder: Path, *args: str, timeout: float = 30) -> str | None:
    """git's stdout in `folder`, stripped; None where git fails, is missing or hangs."""
    try:
        done = run(folder, *args, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def utf8(text: str) -> str:
    """A commit subject (to be read) from `run`'s stdout, decoded as git wrote it (UTF-8) rather than as a path."""
    return os.fsencode(text).decode("utf-8", "replace")


def ref_name(text: str) -> str | None:
    """A branch name from `run`'s stdout, as git wrote it (UTF-8), for a file that names it (asv.conf.json); None
    where its bytes are no UTF-8: a name with U+FFFD in place of them would name no branch."""
    try:
        return os.fsencode(text).decode("utf-8")
    except UnicodeDecodeError:
        return None
