"""Revisions of a git repository as directories: resolve a name, check it out into a temporary worktree, or copy
the working tree (uncommitted and untracked files included, ignored files left out); and how CI names its base.

    git_root(start) -> Path | None
    resolve(root, rev) -> commit
    describe(root, commit) -> "abc1234 subject"
    first_parents(root, good, bad) -> [commit]    # the commits after GOOD up to BAD, oldest first
    parent(root, commit) -> commit  /  changed_files(root, old, new) -> [path]
    checkout(root, commit, dest)  /  remove_checkout(root, dest)
    snapshot_working_tree(root, dest)  /  checkout_working_tree(root, dest)   # from trees: what a side is built from
    uncommitted(root, untracked=False) -> [path] # tracked files the working tree changes, against HEAD
    new_workdir() -> Path  /  sweep_stale(root) -> [Path]   # a run's own folder; those that killed runs left
    ci_base(root, environ) -> (revision, why)
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from .. import gitio
from ..errors import UsageError
from .trees import checkout_working_tree, fill_submodules, snapshot_working_tree

BASE_ENV = "SDPA_CONTINUOUS_BASE"
WORKDIR_PREFIX = "sdpa-continuous-"
OWNER = "owner.pid"  # the process a work folder belongs to
STALE_WITHOUT_OWNER_S = 86400.0  # a work folder that names no process (made before they did) is stale after a day
MAIN_REFS = ("origin/main", "main")


def _git(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """git's answer as `gitio.run` reads it (no byte of any locale ends it); UsageError with git's last line where
    it fails and `check`, or where git is missing."""
    try:
        done = gitio.run(root, *args, timeout=300)
    except FileNotFoundError:
        raise UsageError("git is not installed: continuous needs it to check revisions out") from None
    if check and done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise UsageError(f"git {' '.join(args)}: {last}")
    return done


def git_root(start: Path) -> Path | None:
    """The top folder of the git working tree that holds `start`; None outside a git repository. UsageError, with
    git's own words, where git refuses the repository: owned by another user (a container's mounted checkout)."""
    done = _git(start, "rev-parse", "--show-toplevel", check=False)
    if done.returncode != 0 and "safe.directory" in done.stderr:
        raise UsageError(f"git refuses the repository that holds {start}: {' '.join(done.stderr.split())}")
    return Path(done.stdout.strip()) if done.returncode == 0 else None


def resolve(root: Path, rev: str) -> str:
    """The full commit hash `rev` names (a branch, tag, hash, HEAD~2, ...); UsageError when it names none."""
    done = _git(root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
    if done.returncode != 0:
        shallow = _git(root, "rev-parse", "--is-shallow-repository", check=False).stdout.strip() == "true"
        hint = ("; the clone is shallow: fetch the history (git fetch --unshallow; in GitHub Actions, "
                "actions/checkout with fetch-depth: 0)") if shallow else ""
        other = {"main": "master", "master": "main"}.get(rev)  # `git init` names its branch either, by its version
        if not hint and other and _git(root, "rev-parse", "--verify", "--quiet", other, check=False).returncode == 0:
            hint = f"; this repository's branch is {other!r}"
        remote = next((r for r in _git(root, "for-each-ref", "--format=%(refname:short)", "refs/remotes",
                                       check=False).stdout.split() if r.split("/", 1)[-1] == rev), None)
        if not hint and remote:  # a CI checkout (actions/checkout) has the remote's branches, not local ones
            hint = f"; the remote's branch is {remote!r} (a CI checkout has no local {rev!r}): name that"
        raise UsageError(f"{rev!r} is not a revision of {root} (git rev-parse found no commit){hint}")
    return done.stdout.strip()


def describe(root: Path, commit: str) -> str:
    """A short name for people: abbreviated hash and subject (git's UTF-8, whatever the locale)."""
    return gitio.utf8(_git(root, "log", "-1", "--format=%h %s", commit).stdout.strip())


def first_parents(root: Path, good: str, bad: str) -> list[str]:
    """The commits of BAD's first-parent line that descend from GOOD, oldest first, BAD last: what a search
    between them tests (a merge is one step; bisect again inside it). UsageError when GOOD is not an ancestor of BAD
    or is BAD itself."""
    if good == bad:
        raise UsageError("GOOD and BAD are the same commit: there is nothing between them to search")
    if _git(root, "merge-base", "--is-ancestor", good, bad, check=False).returncode != 0:
        swapped = _git(root, "merge-base", "--is-ancestor", bad, good, check=False).returncode == 0
        raise UsageError(f"GOOD ({describe(root, good)}) is not an ancestor of BAD ({describe(root, bad)}): "
                         + ("BAD is GOOD's ancestor, swap them" if swapped else "they are on diverged branches; "
                            "name as GOOD a commit both descend from (git merge-base GOOD BAD)"))
    line = _git(root, "rev-list", "--first-parent", "--reverse", bad, f"^{good}").stdout.split()
    # GOOD merged in from a side branch: BAD's first-parent line before that merge lacks GOOD's code, so it is not
    # between GOOD and BAD; the line starts at the merge
    after_good = set(_git(root, "rev-list", "--ancestry-path", f"{good}..{bad}").stdout.split())
    return [c for c in line if c in after_good]


def merged_branch(root: Path, commit: str) -> tuple[str, str] | None:
    """(where the branch a merge commit brought in began, that branch's last commit), or None for a commit of one
    parent, or where git cannot tell (unrelated histories, a shallow clone): what a search inside the branch is
    between."""
    parents = _git(root, "rev-parse", f"{commit}^@", check=False).stdout.split()
    base = _git(root, "merge-base", *parents[:2], check=False) if len(parents) > 1 else None
    if base is None or base.returncode != 0 or not base.stdout.strip():
        return None
    return base.stdout.strip(), parents[1]


def parent(root: Path, commit: str) -> str:
    """The first parent of `commit`; UsageError for a root commit."""
    return resolve(root, f"{commit}^1")


def changed_files(root: Path, old: str, new: str) -> list[str]:
    """The paths that differ between two commits, with git's status letter: `M sdpa_impls/fused.py`."""
    out = _git(root, "diff", "--name-status", "--no-renames", old, new).stdout
    return [" ".join(line.split("\t", 1)) for line in out.splitlines() if line.strip()]


def checkout(root: Path, commit: str, dest: Path) -> None:
    """`commit` checked out (detached) into the new temporary worktree `dest`, with its submodules as `root`'s clones
    of them hold them (`trees.fill_submodules`)."""
    _git(root, "worktree", "add", "--detach", "--force", "--quiet", str(dest), commit)
    fill_submodules(root, commit, dest)


def remove_checkout(root: Path, dest: Path) -> None:
    """Remove a worktree made by `checkout`, files and git's record of it; never raises. Only its own record: not
    `git worktree prune`, which forgets the user's worktrees too where their folder is away (an unmounted disk)."""
    if _git(root, "worktree", "remove", "--force", str(dest), check=False).returncode != 0:
        shutil.rmtree(dest, ignore_errors=True)  # git could not (a file it cannot delete): the record goes once
        _git(root, "worktree", "remove", "--force", str(dest), check=False)  # the folder is gone
    shutil.rmtree(dest, ignore_errors=True)


def uncommitted(root: Path, untracked: bool = False) -> list[str]:
    """The tracked files whose working-tree content differs from HEAD (untracked files left out: a search over
    commits never had them), and with `untracked` the files git does not ignore and has no record of too."""
    done = _git(root, "status", "--porcelain", f"--untracked-files={'normal' if untracked else 'no'}", check=False)
    return [line[3:] for line in done.stdout.splitlines() if len(line) > 3] if done.returncode == 0 else []


def tree_name(root: Path) -> str:
    """The working tree as a verdict names it, by the commit it is on and whether it holds uncommitted changes:
    `working tree of ROOT (abc1234 subject, with uncommitted changes to 2 files)`."""
    try:
        head = describe(root, "HEAD")
    except UsageError:  # no commit yet
        head = ""
    edits = len(uncommitted(root, untracked=True))  # untracked files too: the snapshot has them
    said = ", ".join(filter(None, (head, edits and f"with uncommitted changes to {edits} file{'s' * (edits != 1)}")))
    return f"working tree of {root}" + (f" ({said})" if said else "")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def new_workdir() -> Path:
    """A run's own temporary folder, naming the process it belongs to (so a later run can tell it was left)."""
    work = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))
    (work / OWNER).write_text(str(os.getpid()), encoding="utf-8")
    return work


def remove_workdir(root: Path | None, work: Path) -> int | None:
    """Remove a run's folder from `new_workdir` and its git worktrees, whole: a SIGINT, SIGTERM or SIGHUP is held
    until it is done, and returned (else None) for the caller to act on. Its owner.pid goes last, so that a kill
    part way leaves a folder the next run sees is stale, not one naming no process (kept a day)."""
    held: list[int] = []
    previous = {}
    try:
        for s in (signal.SIGINT, signal.SIGTERM, *((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ())):
            if signal.getsignal(s) is not signal.SIG_IGN:
                previous[s] = signal.signal(s, lambda signum, frame: held.append(signum))
    except ValueError:  # not the main thread: its signals are not this thread's to hold
        pass
    try:
        _remove(root, work)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return held[0] if held else None


def _remove(root: Path | None, work: Path) -> None:
    """A run's folder, its git worktrees first (each from the repository it is a worktree of: a stale folder may be
    a run's in another repository than `root`'s), its owner.pid last."""
    for tree in work.glob("*/tree"):
        if (tree / ".git").is_file():  # a git worktree, not a copy
            found = _git(tree, "rev-parse", "--git-common-dir", check=False).stdout.strip()  # relative to tree
            owner = tree / found if found and "\n" not in found and (tree / found).is_dir() else root
            if owner is not None:
                remove_checkout(owner, tree)
    for child in work.iterdir() if work.is_dir() else ():
        if child.name != OWNER:
            shutil.rmtree(child, ignore_errors=True) if child.is_dir() and not child.is_symlink() else \
                child.unlink(missing_ok=True)
    shutil.rmtree(work, ignore_errors=True)


def sweep_stale(root: Path | None, now: float | None = None) -> list[Path]:
    """Remove the work folders of runs that were killed (their process is gone), with their git worktrees, and
    git's records of such worktrees whose folder is gone (in `root`'s repository); returns the folders removed."""
    now = time.time() if now is None else now
    removed = []
    for work in Path(tempfile.gettempdir()).glob(f"{WORKDIR_PREFIX}*"):
        try:
            if not work.is_dir() or work.is_symlink() or work.stat().st_uid != os.getuid():
                continue
            owner = work / OWNER
            pid = int(owner.read_text(encoding="utf-8").strip()) if owner.is_file() else None
        except (OSError, ValueError):
            continue
        if (pid is not None and _alive(pid)) or (pid is None and now - work.stat().st_mtime < STALE_WITHOUT_OWNER_S):
            continue
        _remove(root, work)
        removed.append(work)
    if root is not None:
        _forget_gone_checkouts(root)
    return removed


def _forget_gone_checkouts(root: Path) -> None:
    """git's records of the worktrees a run of ours made (in a WORKDIR_PREFIX folder) whose folder is gone; not
    `git worktree prune`, which forgets the user's own worktrees too where their folder is away for a while (an
    unmounted disk)."""
    listed = _git(root, "worktree", "list", "--porcelain", check=False)
    ours = Path(tempfile.gettempdir()).resolve()
    for line in listed.stdout.splitlines() if listed.returncode == 0 else ():
        path = Path(line.removeprefix("worktree ")).resolve() if line.startswith("worktree ") else None
        if path is not None and path.is_relative_to(ours) and len(path.relative_to(ours).parts) > 1 and \
                path.relative_to(ours).parts[0].startswith(WORKDIR_PREFIX) and not path.exists():
            _git(root, "worktree", "remove", "--force", str(path), check=False)


def ci_base(root: Path, environ: Mapping[str, str] = os.environ) -> tuple[str, str]:
    """The revision CI compares HEAD with — main as it was before the change — and how it was chosen.

    1. `$SDPA_CONTINUOUS_BASE` when set (any revision name);
    2. else the fork point of HEAD from main (`git merge-base HEAD origin/main`, else `main`) when that is not
       HEAD itself: a clone or checkout of the submitted branch, whose main still names the landed state;
    3. else HEAD's first parent (HEAD~1): main already is the submission, and a clone keeps no record of where
       main was before; set the variable to compare the whole series.
    """
    named = environ.get(BASE_ENV, "").strip()
    if named:
        try:  # a CI's setting, not a name the user typed here: say where it came from
            resolve(root, named)
        except UsageError as exc:
            raise UsageError(f"${BASE_ENV}={named!r}: {exc}") from None
        return named, f"${BASE_ENV}"
    try:
        head = resolve(root, "HEAD")
    except UsageError:
        raise UsageError(f"{root} has no commit yet, so no BASE can be chosen for it: commit, then compare (or "
                         "name BASE and HEAD)") from None
    present = []  # the main refs this clone has
    for ref in MAIN_REFS:
        done = _git(root, "merge-base", "HEAD", ref, check=False)
        fork = done.stdout.strip()
        if done.returncode == 0 and fork and fork != head:
            return fork, f"the fork point of HEAD from {ref} (git merge-base HEAD {ref})"
        if done.returncode == 0 and fork:  # HEAD is that ref, or lies behind it (a detached checkout of the past)
            at = _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False).stdout.strip()
            present.append(f"{ref} {'points at HEAD' if at == head else 'already holds HEAD (HEAD is behind it)'}")
    where = "; ".join(present) if present else f"this repository has no {' or '.join(MAIN_REFS)}"
    if _git(root, "rev-parse", "--verify", "--quiet", "HEAD~1^{commit}", check=False).returncode != 0 and \
            _git(root, "rev-parse", "--is-shallow-repository", check=False).stdout.strip() != "true":
        raise UsageError(f"no BASE given, and HEAD is the first commit of {root} ({where}): nothing before it to "
                         f"compare with; name BASE, or set ${BASE_ENV}")  # a shallow clone: resolve says to fetch
    return "HEAD~1", (f"HEAD's parent: {where}, so the state before the change is not named in this clone (set "
                      f"${BASE_ENV} to compare a longer series)")
