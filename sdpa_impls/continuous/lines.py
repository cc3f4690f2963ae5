"""What `sdpa-bench bisect` searches: a line of points from GOOD to BAD, and how any two of them become one
comparison's request.

    commits(project, good, bad, request)            -> Line   # first-parent commits of a repository
    releases(project, package, good, bad, request)  -> Line   # versions of a package the index offers

A line names its points for people (`abc1234 subject`, `torch==2.14.1`), says which point comes before another
(the parent commit, the previous release), and what differs between two (files changed, or the package's
versions). Between two commits the code differs and the environment is what they declare; between two releases the
code is the same on both sides (the working tree, or the running sdpa-bench) and each side's environment is this
one with that release installed on top (continuous.envs, built once and cached).
"""
from __future__ import annotations

import dataclasses
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..errors import UsageError
from .assemble import Request
from .project import Project
from .revisions import changed_files, describe, first_parents, merged_branch, parent, resolve

if TYPE_CHECKING:
    from pathlib import Path

    from packaging.version import Version

    from .bisect_answer import Search

PACKAGE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclasses.dataclass(frozen=True)
class Line:
    """Points GOOD first, BAD last; `name(point)`; `request(base, head)` of one comparison; `before(point)`, what
    the point is confirmed against; `differences(before, after)`, what changed between them; `unit`, what a point
    is called ("commit" or "release")."""

    points: tuple[str, ...]
    name: Callable[[str], str]
    request: Callable[[str, str], Request]
    before: Callable[[str], str]
    differences: Callable[[str, str], list[str]]
    unit: str
    project: Project
    inside: Callable[[str], str] = lambda point: ""  # a point that is a merge: how to search among its branch's

    def ended_at(self, search: Search) -> list[str]:
        """A note where the search ended at one point (the culprit, or the one left) that is a merge."""
        names = [search.culprit] if search.culprit else search.among
        said = self.inside(search.ids[names[0]]) if len(names) == 1 and names[0] in search.ids else ""
        return [said] if said else []


def commits(project: Project, good: str, bad: str, template: Request, options: Sequence[str] = ()) -> Line:
    """The commits of BAD's first-parent line after GOOD (revisions.first_parents), GOOD first; `options`, the
    search's own, go with the command that searches inside a merge."""
    if project.root is None:
        raise UsageError("bisect searches the commits of a git repository: run it in sdpa-bench's repository or at "
                         "the root of a plug-in's (or give --package to search a package's releases)")
    root = project.root
    first, last = resolve(root, good), resolve(root, bad)
    points = (first, *first_parents(root, first, last))
    return Line(points, lambda c: describe(root, c),
                lambda b, h: dataclasses.replace(template, base=b, head=h),
                lambda c: parent(root, c), lambda a, b: changed_files(root, a, b), "commit", project,
                lambda c: _inside(root, c, options))


def _inside(root: Path, commit: str, options: Sequence[str] = ()) -> str:
    branch = merged_branch(root, commit)
    if branch is None:
        return ""
    again = shlex.join(["sdpa-bench", "bisect", branch[0][:12], branch[1][:12], *options])
    return (f"{describe(root, commit)} is a merge: the commits of the branch it brought in were one step of this "
            f"search; to search among them: {again}")


def _key(version: str) -> "Version":
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version)
    except InvalidVersion:
        raise UsageError(f"{version!r} is not a version (PEP 440)") from None


def index_versions(package: str, python: str = sys.executable, pre: bool = False) -> list[str]:
    """The versions of `package` the package index offers, as pip sees it (its configuration: index URLs, find-links,
    a nightly index): `pip index versions`. UsageError when pip cannot list them."""
    cmd = [python, "-m", "pip", "index", "versions", package, "--disable-pip-version-check"] + (["--pre"] if pre
                                                                                                  else [])
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"pip index versions {package}: {exc}") from None
    found = re.search(r"Available versions:\s*(.+)", done.stdout)
    if done.returncode != 0 or not found:
        last = ((done.stderr or done.stdout).strip().splitlines() or ["no versions listed"])[-1]
        raise UsageError(f"pip index versions {package}: {last}")
    return [v.strip() for v in found.group(1).split(",") if v.strip()]


def between(versions: Sequence[str], good: str, bad: str) -> list[str]:
    """GOOD, the releases after it up to BAD, and BAD, in version order; UsageError when GOOD is not older."""
    # a local build (2.13.0+cpu, a nightly's +cu126) is the same release as its public version to a search, and
    # `==2.13.0` installs whichever build the index has: each release once, by its public version, between the ends
    low, high = _public(good), _public(bad)
    if not low < high:
        raise UsageError(f"GOOD {good} is not older than BAD {bad}: " + ("the same release: name two" if low == high
                                                                        else "swap them, or name an older GOOD"))
    inside = sorted({v for v in map(_public, versions) if low < v < high})
    return [good, *(str(v) for v in inside), bad]


def offered_ends(offered: Sequence[str], package: str, good: str, bad: str, pre: bool = False) -> None:
    """UsageError naming GOOD or BAD where the index does not offer that release (by its public version)."""
    have = sorted({_public(v) for v in offered})
    absent = [v for v in (good, bad) if _public(v) not in have]
    if absent:
        span = f"{len(have)} releases, {have[0]} to {have[-1]}" if have else "none"
        hint = "; a pre-release or nightly needs --pre" if not pre and any(_public(v).is_prerelease
                                                                            for v in absent) else ""
        what = "a release" if len(absent) == 1 else "releases"
        raise UsageError(f"{package} {' and '.join(absent)}: not {what} the package index offers ({span}: "
                         f"pip index versions {package}{' --pre' if pre else ''}){hint}")


def _public(version: str) -> "Version":
    return _key(_key(version).public)


def releases(project: Project, package: str, good: str, bad: str, template: Request,
             versions: Sequence[str] | None = None, pre: bool = False) -> Line:
    """Releases of `package` from GOOD to BAD: `versions` when given, else what the index offers between them."""
    if not PACKAGE_NAME.fullmatch(package):
        raise UsageError(f"--package {package!r} is not a package name")
    offered = versions if versions is not None else index_versions(package, pre=pre)
    if versions is None:  # before any environment is built: one of a release pip cannot find would fail only after
        offered_ends(offered, package, good, bad, pre)  # the other's download (a CUDA torch is several GB)
    points = tuple(between(offered, good, bad))
    outside = [v for v in versions or () if not _public(good) <= _public(v) <= _public(bad)]
    if outside:  # named, not left out unsaid: a typo would search fewer releases than asked
        raise UsageError(f"--versions: {', '.join(outside)} not from GOOD {good} to BAD {bad}; name the releases "
                         "between them")
    order = {v: i for i, v in enumerate(points)}

    def spec(version: str) -> str:
        return f"{package}=={version}"

    return Line(points, spec,
                lambda b, h: dataclasses.replace(template, base=None, head=None, base_env=spec(b), head_env=spec(h)),
                lambda v: points[order[v] - 1], lambda a, b: [f"{package} {a} → {b}"], "release", project)

