"""The trees a side is built from, beside a commit's worktree (revisions.checkout): the working tree, and the files
of the git submodules a tree records.

    snapshot_working_tree(root, dest)   # a copy of the working tree (tracked and untracked files, not ignored)
    checkout_working_tree(root, dest)   # ... over a worktree of HEAD, checked-out submodules' files included
    fill_submodules(root, commit, dest) # a commit's worktree: each submodule at the commit `commit` records

A commit records each submodule as a commit of another repository, and `git worktree add` leaves its folder empty;
a side gets the files the user's own clone of each submodule holds, so that a package that builds from one (a
vendored CUTLASS, say) builds on both sides. A submodule the user has not checked out stays empty, as it is in their
tree; one whose clone lacks the recorded commit is a UsageError saying what to fetch. No file is ever written or
removed through a symbolic link: a path under a link (a folder replaced by a link to another checkout) is left out.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .. import gitio
from ..errors import UsageError

GIT_TIMEOUT_S = 300


def _git(folder: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    try:
        return gitio.run(folder, *args, timeout=GIT_TIMEOUT_S, env=env)
    except FileNotFoundError:
        raise UsageError("git is not installed: continuous needs it to check revisions out") from None


def _names(done: subprocess.CompletedProcess) -> set[str]:
    return set(filter(None, done.stdout.split("\0"))) if done.returncode == 0 else set()


def snapshot_working_tree(root: Path, dest: Path) -> None:
    """Copy the working tree as it is now into `dest`: tracked files (with uncommitted edits) and untracked files
    that git does not ignore; deleted files stay deleted, build outputs and caches stay behind. A symbolic link is
    copied as the link it is (to a folder, or outside the repository: never what it points to)."""
    _copy_over(root, dest, _listed(root))


def _listed(root: Path) -> set[str]:
    """The working tree's files as git lists them: tracked (deleted ones too) and untracked, not ignored."""
    return _names(_git(root, "ls-files", "-z", "-c", "-o", "--exclude-standard"))


def checkout_working_tree(root: Path, dest: Path) -> None:
    """The working tree as a side is built from it: `snapshot_working_tree`'s files, and the tracked files of each
    checked-out submodule, over a worktree of HEAD, so that a build that asks git (a version from setuptools-scm or
    hatch-vcs) finds HEAD with uncommitted changes, as in `root`. Without a commit, or where git cannot add a
    worktree (a read-only repository), that copy alone."""
    head = _git(root, "rev-parse", "--verify", "--quiet", "HEAD^{commit}").stdout.strip()
    added = head and _git(root, "worktree", "add", "--detach", "--force", "--quiet", str(dest), head).returncode == 0
    if not added:
        shutil.rmtree(dest, ignore_errors=True)
        return snapshot_working_tree(root, dest)
    submodules = _names(_git(root, "ls-files", "-z", "-c", "--recurse-submodules"))  # their untracked files stay out
    listed = _listed(root) | submodules
    for rel in _names(_git(dest, "ls-files", "-z")):  # HEAD's files (a submodule: its empty folder)
        src, target = root / rel, dest / rel
        if (rel not in listed or _under_link(root, rel) or not src.is_symlink() and not src.is_file()) and \
                (target.is_symlink() or not target.is_dir()):
            target.unlink(missing_ok=True)  # deleted or untracked since, or now a folder
    _copy_over(root, dest, listed)


def _under_link(base: Path, rel: str) -> bool:
    """Whether a folder on the way from `base` to `rel` is a symbolic link."""
    parts = Path(rel).parts
    return any(base.joinpath(*parts[:i]).is_symlink() for i in range(1, len(parts)))


def _copy_over(root: Path, dest: Path, listed: set[str]) -> None:
    for rel in sorted(listed):
        src, target = root / rel, dest / rel
        if not src.is_symlink() and not src.is_file() or _under_link(root, rel) or _under_link(dest, rel):
            continue  # deleted, a submodule's folder, or beyond a link (as git takes it): never written through one
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink() or target.exists():  # HEAD's: replaced, never written through (a link) nor into
            target.unlink() if target.is_symlink() or not target.is_dir() else shutil.rmtree(target)
        os.symlink(os.readlink(src), target) if src.is_symlink() else shutil.copy2(src, target)


def recorded_submodules(root: Path, commit: str) -> list[tuple[str, str]]:
    """(path, commit) of each submodule `commit`'s tree records, in `root`'s repository."""
    found = []
    for entry in _names(_git(root, "ls-tree", "-r", "-z", "--full-tree", commit)):
        meta, _, path = entry.partition("\t")
        if meta.split()[1:2] == ["commit"]:  # mode 160000: a gitlink
            found.append((path, meta.split()[2]))
    return sorted(found)


def fill_submodules(root: Path, commit: str, dest: Path) -> None:
    """Each submodule `commit` records that `root` has checked out, written into the worktree `dest` at the commit
    recorded (nested submodules too), as git checks files out (no export-ignore). UsageError naming the submodule
    where its clone lacks that commit or one of its files."""
    for path, sha in recorded_submodules(root, commit):
        clone = root / path
        if _under_link(root, path) or not (clone / ".git").exists():
            continue  # not checked out in the user's tree: empty there too
        if _git(clone, "cat-file", "-e", f"{sha}^{{commit}}").returncode != 0:
            raise UsageError(f"submodule {path} at {sha[:12]}, which {commit[:7]} records, is not in its clone "
                             f"{clone}: fetch it there (git -C {path} fetch), or `git submodule update --init` at "
                             "that commit")
        target = dest / path
        with tempfile.TemporaryDirectory(prefix="sdpa-submodule-") as tmp:  # an index of its own: the clone's stays
            env = os.environ | {"GIT_INDEX_FILE": os.path.join(tmp, "index")}
            for step in (["read-tree", sha], ["checkout-index", "--all", "--force", f"--prefix={target}{os.sep}"]):
                done = _git(clone, *step, env=env)
                if done.returncode != 0:
                    said = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
                    raise UsageError(f"submodule {path} at {sha[:12]}: git {step[0]} failed in {clone}: {said}")
        fill_submodules(clone, sha, target)
