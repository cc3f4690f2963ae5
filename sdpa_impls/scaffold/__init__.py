"""The files `sdpa-bench quickstart` writes: a plug-in package made from the template folder beside this module, a
working plug-in itself (package `my_attention`, class `MyAttention`, distribution `my-attention`), renamed. Each
template file ends in `.tmpl`, so no tool takes the template for a part of sdpa-bench (a module, a test, a project).

    names_for(text)        -> Names                 # the names of a plug-in called `text`
    renaming(text, names)  -> str                   # what quickstart says of a --name not used as given ("": none)
    top_level()            -> {name: path}          # what `import` finds in the plug-in's folder (tests, ...)
    origin()               -> (url, vcs_info) | None   # where this sdpa-bench was installed from (PEP 610)
    requirement()          -> (requirement, note)   # how the plug-in's CI installs this sdpa-bench
    files(names, requirement, asv) -> {relative path: text}   # asv: asv.conf.json's replacements (scaffold.asv)
    write(dest, files)     -> [Path]                # UsageError when any is in the way, or a module shadows one
"""
from __future__ import annotations

import json
import keyword
import os
import re
import shlex
import sys
from dataclasses import dataclass
from importlib import metadata
from importlib.machinery import PathFinder
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from ..errors import UsageError
from .dest import kind, shadowing

TEMPLATE = Path(__file__).parent / "template"
HIDDEN = {"github": ".github", "gitignore": ".gitignore"}  # stored without the dot: package data globs skip dot-files
SUFFIX = ".tmpl"
# the workflow's install line as the template has it: a place to fill in that fails loudly, never a name a public
# index could serve (sdpa-bench is on none, and whoever took the name there would run in every such CI)
PLACEHOLDER = "sdpa-bench[test] @ git+https://HOST/OWNER/sdpa-bench@COMMIT"
TEMPLATE_REQUIREMENT = f'"{PLACEHOLDER}"'
DIST = "sdpa-bench"
MAX_NAME = 100  # characters of --name: the test module adds "test_" and ".py" to a file name of at most 255 bytes


@dataclass(frozen=True)
class Names:
    """A plug-in's distribution name (`my-attention`), package and implementation name (`my_attention`) and
    class (`MyAttention`)."""

    dist: str
    package: str
    cls: str


TEMPLATE_NAMES = Names("my-attention", "my_attention", "MyAttention")


def names_for(text: str) -> Names:
    """The names of a plug-in called `text` ("Flash Mine" -> flash-mine, flash_mine, FlashMine); UsageError for a
    name that is no Python identifier once normalized, that an implementation has, or that an installed package or
    an importable module has (its install would replace the one, its import shadow the other)."""
    from ..registry import names

    ident = re.sub(r"\W+", "_", text.strip().lower()).strip("_")
    if not ident or not ident.isidentifier() or not ident.isascii():
        raise UsageError(f"{text!r} makes no package name: give --name a name of ASCII letters, digits and _ that "
                         "does not start with a digit")
    if keyword.iskeyword(ident):  # `import class` is a syntax error
        raise UsageError(f"{text!r}{'' if text == ident else f' (as {ident!r})'} is a Python keyword, which no "
                         "package can be named: give --name another")
    cls = "".join(part.capitalize() for part in ident.split("_"))
    if keyword.iskeyword(cls):  # none, true, false: `class None(Implementation)` is a syntax error
        raise UsageError(f"{text!r} would name the plug-in's class {cls}, a Python keyword: give --name another")
    if len(ident) > MAX_NAME:  # a file name of the package's folder and module: refused before any is written
        raise UsageError(f"--name {text[:20]!r}... is {len(ident)} characters long: give a name of at most {MAX_NAME}")
    written = top_level().get(ident)
    if written is not None:  # `python -m pytest` and asv run there, with that folder first on the path
        raise UsageError(f"{ident!r} is the name of {written}, which quickstart writes at the plug-in's top: `import "
                         f"{ident}` run there (python -m pytest, asv) can find that instead of the package; give "
                         "--name another")
    if ident in names():
        raise UsageError(f"an implementation named {ident!r} exists already (sdpa-bench list): give --name another")
    dist = ident.replace("_", "-")
    try:  # its next step, `pip install -e .`, would replace that package (a library the kernel wraps, torch)
        installed = metadata.version(dist)
    except metadata.PackageNotFoundError:
        installed = None
    if installed is not None:
        raise UsageError(f"a package named {dist!r} is installed here already ({installed}): installing the plug-in "
                         "would replace it; give --name another")
    here = os.path.realpath(os.getcwd())  # `python -m` puts the folder it runs in first: a folder there is no module
    path = [p for p in sys.path if p and os.path.realpath(p) != here]
    spec = None if ident in sys.builtin_module_names else PathFinder.find_spec(ident, path) or next(
        (found for found in map(_found_by(ident), sys.meta_path) if found is not None), None)  # an editable install's
    if spec is not None or ident in sys.builtin_module_names:  # one of the two would shadow the other
        where = "built in" if spec is None else spec.origin or "a namespace package"
        raise UsageError(f"{ident!r} is a module Python imports already ({where}): a plug-in package of that name "
                         "would shadow it or be shadowed; give --name another")
    return Names(dist, ident, cls)


def renaming(text: str, names: Names) -> str:
    """What quickstart says of a --name `text` that it did not use as given ("" for one it did): lower-cased
    ("Kern" -> kern), stripped of its outer _, or no Python name at all ("My Attn" -> my_attn)."""
    if text == names.package:
        return ""
    became = f"the implementation and its package are {names.package}, the distribution {names.dist}"
    if not text.isidentifier():
        return f"{text!r} is not a Python name: {became}"
    done = [how for how, changed in (("lower-cased", text.lower() != text),
                                     ("stripped of its leading and trailing _", text.strip("_") != text)) if changed]
    if text.lower().strip("_") != names.package:  # a letter whose lower case is two characters (U+0130)
        done = ["made a package name"]
    return f"{text!r} is {' and '.join(done)}: {became}"


def _found_by(ident: str):
    """A module spec of `ident` from one of sys.meta_path's other finders (an editable install's, which serves
    sdpa_impls itself in a development install), or None."""
    def find(finder) -> object:
        if finder is PathFinder or not hasattr(finder, "find_spec"):
            return None
        try:
            return finder.find_spec(ident, None)
        except Exception:  # noqa: BLE001 - a third-party finder's error is no answer
            return None
    return find


def _without_credentials(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    return urlunsplit(parts._replace(netloc=host + (f":{parts.port}" if parts.port else ""))) if parts.netloc else url


def origin() -> tuple[str, dict] | None:
    """Where this sdpa-bench was installed from, by its PEP 610 record: (URL without credentials, the record's
    vcs_info); None when it came from an index."""
    try:
        recorded = metadata.distribution(DIST).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        recorded = None
    if not recorded:
        return None
    record = json.loads(recorded)
    return _without_credentials(str(record.get("url", ""))), record.get("vcs_info") or {}


def requirement() -> tuple[str, str]:
    """The requirement the plug-in's CI installs sdpa-bench with: the git address and commit this one was installed
    from (its PEP 610 record, credentials removed), else this version from the index it came from; installed from a
    local folder or file, the template's placeholder (PLACEHOLDER), with a note for the user to fill it in."""
    import sdpa_impls

    found = origin()
    if found is None:
        return f"{DIST}[test]>={sdpa_impls.__version__}", ""
    url, vcs = found
    if vcs.get("vcs") == "git" and not url.startswith("file:"):
        return f"{DIST}[test] @ git+{url}@{vcs.get('commit_id', '')}", ""
    return PLACEHOLDER, (f"this sdpa-bench was installed from {url}, which a CI runner cannot "
                         "install from: in .github/workflows/sdpa-bench.yml, replace HOST/OWNER/sdpa-bench@COMMIT "
                         "with where your CI gets sdpa-bench (it is on no public index)")


def _renamed(text: str, names: Names) -> str:
    for old, new in zip((TEMPLATE_NAMES.dist, TEMPLATE_NAMES.package, TEMPLATE_NAMES.cls),
                        (names.dist, names.package, names.cls)):
        text = text.replace(old, new)
    return text


def _template_files() -> list[Path]:
    return sorted(p for p in TEMPLATE.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def _written(path: Path) -> list[str]:
    """The parts of the path a template file is written to, before renaming (github/x.yml.tmpl: .github, x.yml)."""
    parts = list(path.relative_to(TEMPLATE).parts)
    parts[-1] = parts[-1].removesuffix(SUFFIX)  # first: a file at the top (gitignore.tmpl) is hidden by its name
    parts[0] = HIDDEN.get(parts[0], parts[0])
    return parts


def top_level() -> dict[str, str]:
    """The names `import` finds in the plug-in's folder, which `python -m pytest` and asv put first on the path, by
    what quickstart writes there: {"benchmarks": "benchmarks/", "src": "src/", "tests": "tests/"} (a folder is a
    package, or a namespace one, a .py file a module); a plug-in package of one of these names can be shadowed by it
    (benchmarks/, asv's suite, always is: a PluginLoadError in the plug-in's own test)."""
    found = {}
    for parts in map(_written, _template_files()):
        name, folder = parts[0], len(parts) > 1
        module = name if folder else name.removesuffix(".py") if name.endswith(".py") else ""
        if module.isidentifier() and TEMPLATE_NAMES.package not in module:  # the package's own name: renamed
            found[module] = f"{name}/" if folder else name
    return found


def files(names: Names, install: str, asv: dict[str, str] | None = None, branch: str | None = None
          ) -> dict[str, str]:
    """Every file of the plug-in, by path relative to its folder, renamed for `names`; the workflow installs
    sdpa-bench with the requirement `install`; asv.conf.json gets the replacements `asv` (scaffold.asv); the
    README's gate compares against `branch`, the repository's (None: the template's main)."""
    out = {}
    for path in _template_files():
        parts = _written(path)
        text = _renamed(path.read_text(encoding="utf-8"), names)
        if parts[-1].endswith(".yml"):
            text = text.replace(TEMPLATE_REQUIREMENT, json.dumps(install))
        if parts[-1] == "asv.conf.json":
            for old, new in (asv or {}).items():
                if old not in text:
                    raise RuntimeError(f"the template's asv.conf.json has no {old}")
                text = text.replace(old, new)
        if parts == ["README.md"] and branch:
            text = _readme_base(text, branch)
        out[_renamed("/".join(parts), names)] = text
    return out


README_BASE = "sdpa-bench continuous main        # this working tree against main,"  # the template README's gate


def _readme_base(text: str, branch: str) -> str:
    """The README's gate line against `branch`, with its comment where it was (a plug-in made in a repository on
    `master` was told to run `sdpa-bench continuous main`, which names no revision there)."""
    if README_BASE not in text:
        raise RuntimeError(f"the template's README.md has no {README_BASE!r}")
    head = f"sdpa-bench continuous {shlex.quote(branch)}"
    return text.replace(README_BASE, f"{head:<33} # this working tree against {branch},")


def write(dest: Path, plan: dict[str, str]) -> list[Path]:
    """Write `plan` into `dest` (made if missing); before any is written, UsageError naming what is in the way: the
    files that exist already, a broken link or fifo at a path it writes (scaffold.dest.kind), a module there that
    the plug-in's test would import instead of one it needs (scaffold.dest.shadowing)."""
    in_the_way = next((p for p in (dest, *dest.parents) if kind(p) or p.exists() and not p.is_dir()), None)
    if in_the_way is not None:
        raise UsageError(f"--dest {dest}: {in_the_way} is {kind(in_the_way) or 'a file'}, not a folder")
    folders = sorted({str(parent) for rel in plan for parent in Path(rel).parents if str(parent) != "."})
    taken = [f"{rel} ({kind(dest / rel) or 'a file'}, where quickstart writes a folder)" for rel in folders
             if (dest / rel).is_file() or kind(dest / rel)]
    # a broken link is no file to os.path.exists, but a write follows it; a fifo blocks the write
    taken += [f"{rel} ({kind(dest / rel)})" if kind(dest / rel) else rel for rel in plan
              if (dest / rel).exists() or kind(dest / rel)]
    if taken:
        raise UsageError(f"{dest} already has {', '.join(taken[:5])}{' ...' if len(taken) > 5 else ''}: quickstart "
                         "writes a new plug-in and overwrites nothing; run it in an empty folder or give --dest")
    shadowed = shadowing(dest, plan)
    if shadowed:
        raise UsageError(shadowed)
    written = []
    try:
        for rel, text in plan.items():
            path = dest / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            written.append(path)
    except OSError as exc:
        raise UsageError(f"--dest {dest}: cannot write {exc.filename or dest} ({exc.strerror or exc})"
                         + (f"; {len(written)} file(s) written before it" if written else "")) from None
    return written
