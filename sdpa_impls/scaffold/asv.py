"""What the plug-in's asv.conf.json takes from the machine quickstart runs on: the git repository the plug-in is in
(its branch, and the plug-in's folder there), the torch release to pin in asv's environments, and where asv
installs this sdpa-bench from.

    branch(dest)          -> str | None        # the branch of the repository dest is in, None outside one
    detached(dest)        -> (branch, why) | None   # a detached HEAD's: the branch asv follows instead, and why
    repo_place(dest)      -> (repo, subdir)    # asv's "repo" and "repo_subdir": (".", "") unless below a top
    torch_pin(version)    -> (release, note)   # "2.11.0" for 2.11.0+cu130; the template's for a pre-release
    sdpa_requirement()    -> (str, note)       # pip's requirement for this sdpa-bench (URL, folder, wheel or version)
    replacements(...)     -> {template text: text}
"""
from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

from .. import gitio

TEMPLATE_TORCH, TEMPLATE_BRANCH = "2.13.0", "main"  # what the template's asv.conf.json holds
# the template's install of sdpa-bench into asv's environments: a place to fill in, never a bare name, which a
# copy of the template would fetch from whichever index serves that name
TEMPLATE_SDPA = "git+https://HOST/OWNER/sdpa-bench@COMMIT"
RELEASE = re.compile(r"\d+(\.\d+)*")  # a final release: what pip finds by `==` on an index


def _git(dest: Path, *args: str) -> str | None:
    """git's answer in `dest`, or in the nearest folder above it where dest is yet to be made, stripped; None where
    git fails, is missing or hangs."""
    return gitio.answer(next((p for p in (dest, *dest.parents) if p.is_dir()), dest), *args)


def top(dest: Path) -> Path | None:
    """The top of the git work tree that holds `dest`, made or not (dest itself, or a folder above it), else None."""
    found = _git(dest, "rev-parse", "--show-toplevel")
    return Path(found).resolve() if found else None


def branch(dest: Path) -> str | None:
    """The current branch of the git repository that holds `dest`, at its top or below it (unborn too: `git init`
    names it before the first commit), for asv to follow. None outside a repository, on a detached HEAD, or without
    git: the plug-in then gets the template's branch and is told to make it."""
    name = _git(dest, "symbolic-ref", "--short", "-q", "HEAD") if top(dest) is not None else None
    return gitio.ref_name(name) if name else None


def detached(dest: Path) -> tuple[str, str] | None:
    """Where the repository that holds `dest` has a detached HEAD (a CI checkout, a rebase), the branch asv follows
    instead and why: the one local branch at HEAD, else origin's default branch, else the template's. None outside a
    repository or on a branch."""
    if top(dest) is None or branch(dest) is not None:
        return None
    at_head = gitio.ref_name(_git(dest, "for-each-ref", "--points-at", "HEAD", "--format=%(refname:short)",
                                  "refs/heads") or "") or ""
    if len(at_head.split()) == 1:
        return at_head, "the one branch at HEAD"
    remote = gitio.ref_name(_git(dest, "symbolic-ref", "--short", "-q", "refs/remotes/origin/HEAD") or "")
    if remote and "/" in remote:
        return remote.split("/", 1)[1], f"{remote}, origin's default branch"
    return TEMPLATE_BRANCH, "the template's: no single branch is at HEAD, and origin names no default branch"


def enclosing(dest: Path) -> Path | None:
    """The top of a git repository that holds `dest` below its top (quickstart into a subfolder), else None."""
    found = top(dest)
    return found if found is not None and found != dest.resolve() else None


def repo_place(dest: Path) -> tuple[str, str]:
    """asv's "repo" and "repo_subdir" for a plug-in written into `dest`: (".", "") at a repository's top or outside
    one; below the top, the path from dest up to it and dest's path within it (asv clones the top, which "." is not,
    and builds the package from the subfolder)."""
    outer = enclosing(dest)
    if outer is None:
        return ".", ""
    return os.path.relpath(outer, dest.resolve()), dest.resolve().relative_to(outer).as_posix()


def torch_pin(version: str) -> tuple[str, str]:
    """The torch release asv's environments pin: this one's public part (pip's index picks the build, CPU or CUDA,
    as your pip configuration says); the template's, with a note, where this torch is no release pip can find by
    `==` (a nightly, a source build, a vendor's pre-release)."""
    public = version.split("+")[0]
    if RELEASE.fullmatch(public):
        return public, ""
    return TEMPLATE_TORCH, (f"torch {version} is no release pip installs by version: asv.conf.json pins torch "
                            f"{TEMPLATE_TORCH}; change it there, or measure in this Python with "
                            "`asv run --environment existing:python`")


def sdpa_requirement() -> tuple[str, str]:
    """(pip's requirement for the sdpa-bench that runs now (scaffold.origin): the git address and commit, the folder
    or archive (a file: URL: asv builds on this machine), credentials removed; installed from an index, this version
    from it, and a note where that requirement cannot work: a file: URL that is gone, such as the temporary wheel
    of an editable install by tox or a build front-end)."""
    import sdpa_impls
    from urllib.parse import unquote, urlparse

    from . import DIST, origin

    found = origin()
    if found is None:
        return f"{DIST}=={sdpa_impls.__version__}", ""
    url, vcs = found
    if vcs.get("vcs") == "git":
        return f"{DIST} @ git+{url}@{vcs.get('commit_id', '')}", ""
    parsed = urlparse(url)
    if parsed.scheme == "file" and not Path(unquote(parsed.path)).exists():
        return f"{DIST} @ {url}", (f"this sdpa-bench was installed from {url}, which is no longer there: asv's own "
                                   "environments cannot install it from asv.conf.json's install_command; put a "
                                   "folder, wheel or git address of sdpa-bench there, or measure in an environment "
                                   "that has it (`asv run --environment existing:python`)")
    return f"{DIST} @ {url}", ""


def replacements(torch_release: str, own_branch: str | None, requirement: str,
                 place: tuple[str, str] = (".", "")) -> dict[str, str]:
    """The template asv.conf.json's texts and what replaces each; `place` is repo_place's."""
    repo, subdir = place
    where = {} if not subdir else {  # only below a repository's top: the template stays asv's plain form
        '"repo": ".",': ('// the git repository above, and this plug-in\'s folder in it\n'
                         f'    "repo": {json.dumps(repo)},\n    "repo_subdir": {json.dumps(subdir)},')}
    return where | {
        f'"torch": [{json.dumps(TEMPLATE_TORCH)}]': f'"torch": [{json.dumps(torch_release)}]',
        f'"branches": [{json.dumps(TEMPLATE_BRANCH)}]': f'"branches": [{json.dumps(own_branch or TEMPLATE_BRANCH)}]',
        f"--no-deps {TEMPLATE_SDPA}": "--no-deps " + json.dumps(shlex.quote(requirement))[1:-1]}
