"""Git submodules in the trees `continuous` and `bisect` build. A commit records each submodule as a commit of another
repository, and `git worktree add` leaves its folder empty; a side gets the files of each submodule the user's own
clone holds, so that a package that builds from one (a vendored CUTLASS, say) builds on both sides:

    fill(root, commit, dest)     # a commit's worktree: each submodule at the commit `commit` records
    working_files(root) -> set   # the working tree: every tracked file, each checked-out submodule's too

A submodule the user has not checked out (`git submodule update --init` never ran) stays empty, as it is in their
tree; one whose recorded commit its clone lacks is a UsageError saying what to fetch.
"""
from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

from .. import gitio
from ..errors import UsageError

GIT_TIMEOUT_S = 300


def recorded(root: Path, commit: str) -> list[tuple[str, str]]:
    """(path, commit) of each submodule `commit`'s tree records, in `root`'s repository."""
    done = gitio.run(root, "ls-tree", "-r", "-z", "--full-tree", commit, timeout=GIT_TIMEOUT_S)
    found = []
    for entry in filter(None, done.stdout.split("\0")):
        meta, _, path = entry.partition("\t")
        mode, kind, sha = meta.split()
        if kind == "commit":  # mode 160000: a gitlink
            found.append((path, sha))
    return found


def fill(root: Path, commit: str, dest: Path) -> None:
    """Each submodule `commit` records, checked out in `root`, written into the worktree `dest` at the commit
    recorded (nested submodules too). UsageError naming the submodule where its clone lacks that commit."""
    for path, sha in recorded(root, commit):
        clone = root / path
        if not (clone / ".git").exists():
            continue  # not checked out in the user's tree: empty there too
        if gitio.run(clone, "cat-file", "-e", f"{sha}^{{commit}}", timeout=GIT_TIMEOUT_S).returncode != 0:
            raise UsageError(f"submodule {path} at {sha[:12]}, which {commit[:7]} records, is not in its clone "
                             f"{clone}: fetch it there (git -C {path} fetch), or `git submodule update --init` at "
                             "that commit")
        target = dest / path
        target.mkdir(parents=True, exist_ok=True)
        archive = subprocess.Popen(["git", "-C", str(clone), "archive", "--format=tar", sha], stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL)
        assert archive.stdout is not None
        try:
            with tarfile.open(fileobj=archive.stdout, mode="r|") as tar:
                tar.extractall(target, filter="tar")
        finally:
            archive.stdout.close()
            archive.wait(timeout=GIT_TIMEOUT_S)
        if archive.returncode != 0:
            raise UsageError(f"submodule {path}: git archive {sha[:12]} failed (exit {archive.returncode})")
        fill(clone, sha, target)


def working_files(root: Path) -> set[str]:
    """Every tracked file as a path from `root`, those of each checked-out submodule (nested too) included: what a
    copy of the working tree takes (a submodule's untracked files stay behind)."""
    done = gitio.run(root, "ls-files", "-z", "--cached", "--recurse-submodules", timeout=GIT_TIMEOUT_S)
    return set(filter(None, done.stdout.split("\0"))) if done.returncode == 0 else set()
