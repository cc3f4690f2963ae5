"""What a comparison measures, found from the folder it runs in: sdpa-bench's own repository (each revision is the
package and brings its own suite), a plug-in package's repository (each revision is the plug-in, installed over the
sdpa-bench that runs the command, whose suite measures both sides), or no repository at all (two environments,
this sdpa-bench on both sides).

    find(start, revisions, command, compared) -> Project   # UsageError that says what is needed where nothing fits
    declared_impls(tree)   -> (names, ...)   # the sdpa_impls entry points a plug-in's pyproject.toml declares
"""
from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import gitio
from ..errors import GateInputError, UsageError
from ..registry import ENTRY_POINT_GROUP
from ..settings import read_toml
from .revisions import ci_base, git_root

SELF, PLUGIN, NONE = "sdpa-bench", "plug-in", "none"
DIST = "sdpa-bench"
PLUGIN_HOWTO = ("a plug-in declares its implementations as entry points, [project.entry-points.sdpa_impls] in its "
                "pyproject.toml (`sdpa-bench quickstart` writes one)")


@dataclass(frozen=True)
class Project:
    """`kind` SELF, PLUGIN or NONE; the git top folder `root` (None without one); a plug-in's distribution name
    `package` and the implementations its working tree declares, `impls`."""

    kind: str
    root: Path | None
    package: str = ""
    impls: tuple[str, ...] = ()


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pyproject(tree: Path) -> dict | None:
    path = tree / "pyproject.toml"
    if not path.is_file():
        return None
    try:
        return read_toml(path)
    except UsageError as exc:
        raise GateInputError(str(exc)) from None


def _entry_points(doc: dict) -> tuple[str, ...]:
    group = doc.get("project", {}).get("entry-points", {}).get(ENTRY_POINT_GROUP, {})
    return tuple(sorted(group)) if isinstance(group, dict) else ()


def declared_impls(tree: Path) -> tuple[str, ...]:
    """The names of the `sdpa_impls` entry points `tree`'s pyproject.toml declares (none: an empty tuple)."""
    return _entry_points(_pyproject(tree) or {})


def _declared_at(root: Path, rev: str) -> bool:
    """Whether the committed pyproject.toml of revision `rev` declares implementations (False where git cannot show
    it or it does not parse: that side's own error comes when it is checked out)."""
    if rev.startswith("-"):  # never an option to git (`--output=FILE` writes one); resolving it says what is wrong
        return False
    text = gitio.answer(root, "show", f"{rev}:pyproject.toml")
    try:
        return bool(text) and bool(_entry_points(tomllib.loads(text)))
    except tomllib.TOMLDecodeError:
        return False


def _compared_declare(root: Path, compared: Sequence[str | None]) -> bool:
    """Whether a compared revision declares implementations where the working tree does not: a HEAD (the working
    tree, or the commit CI checked out) that drops the plug-in's entry points is still the plug-in's change. None in
    `compared` is the base CI would choose (revisions.ci_base)."""
    for rev in compared:
        if rev is None:
            try:
                rev = ci_base(root)[0]
            except UsageError:  # no base to choose: the command says so itself
                continue
        if _declared_at(root, rev):
            return True
    return False


# what each command does without git revisions, for the error that names what is missing
WITHOUT_REVISIONS = {"continuous": ("compares", "two environments (--base-env and --head-env)"),
                     "bisect": ("searches", "the releases of a package (--package NAME)")}


def find(start: Path, revisions: bool, command: str = "continuous", compared: Sequence[str | None] = ()) -> Project:
    """The project at `start`. `revisions`: the command (`continuous` or `bisect`) compares git revisions (BASE,
    HEAD, or CI's base), so `start` must be in the repository of sdpa-bench or of a plug-in; without them (two
    environments, a package's releases) any folder does. A working tree that declares no implementations is a
    plug-in's still where one of the `compared` revisions (None: CI's base) declares them. UsageError naming what
    is missing otherwise."""
    verb, instead = WITHOUT_REVISIONS[command]
    try:
        root = git_root(start)
    except UsageError:  # git is not installed: needed for revisions only
        if revisions:
            raise
        root = None
    if root is None:
        if revisions:
            raise UsageError(f"{start} is not inside a git repository: {command} {verb} git revisions of "
                             f"sdpa-bench or of a plug-in package, or {instead}")
        return Project(NONE, None)
    doc = _pyproject(root)
    name = str((doc or {}).get("project", {}).get("name", ""))
    if _normalized(name) == DIST:
        return Project(SELF, root, DIST)
    impls = declared_impls(root)
    if impls or (revisions and _compared_declare(root, compared)):
        return Project(PLUGIN, root, name or root.name, impls)
    if not revisions:
        return Project(NONE, root)
    what = (f"{root} has no pyproject.toml" if doc is None else
            f"{root / 'pyproject.toml'} declares no implementations" + (f" (package {name})" if name else ""))
    if Path(start).resolve() != Path(root).resolve() and declared_impls(Path(start)):  # a package in a subfolder
        what += (f" (the repository's root; {start}'s own pyproject.toml declares implementations, but {command} "
                 "installs whole revisions of the repository, so the package must sit at its root)")
    raise UsageError(f"{what}: {command} {verb} revisions of sdpa-bench or of a plug-in package; {PLUGIN_HOWTO}. "
                     + ("Two environments compare from any folder: --base-env SPEC --head-env SPEC" if command ==
                        "continuous" else "A package's releases are searched from any folder: --package NAME"))
