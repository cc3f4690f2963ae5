"""The environment each side of a comparison runs in: what a revision declares, and what --base-env / --head-env
name (an interpreter, or requirements to build an environment from: continuous.envcache builds and caches it).

    declared(tree, cpu)              -> Declared    # the dependencies a revision declares
    unmet(declared)                  -> [str]       # which of them this interpreter does not satisfy
    parse_spec(text)                 -> EnvSpec     # --base-env / --head-env: an interpreter or requirements
    python_of(folder)                -> Path        # a virtual environment's interpreter

What a revision declares (`declared`): `[project].dependencies` and the `test` extra of its pyproject.toml (the
suite runs its benchmarks with pytest-benchmark), every other extra whose package this environment has installed,
and, on a machine without a GPU, the pins of its constraints-cpu.txt (the CPU environments of tox and CI install
with them). GPU users keep their own torch, so on CUDA the CPU pins are not a declaration. sdpa-bench itself is
never installed for a side (`unmet`, `Declared.installable`).

A SPEC is read as tox, nox and uv read an environment: one word that is an executable file, a virtual
environment's folder or a Python on PATH (`python3.12`) is an interpreter; anything else is pip's arguments, where,
as for pip, a local folder or file is a path only when written as one (`./my-plugin`, `/x/y`, `~/z`), and a bare
word is a requirement name (one that also names a virtual environment in the working folder is refused, asking
which is meant). A one-word path must be what pip installs (a package folder or archive) or an interpreter.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from ..errors import GateInputError, UsageError

CONSTRAINTS = "constraints-cpu.txt"
SUITE = "sdpa-bench"  # both sides run over the one running the command: never one pip would fetch by that name
INTERPRETER_NAME = re.compile(r"(python|pypy)(\d+(\.\d+)*t?)?")  # `python3.12`: looked up on PATH, as tox and uv do
COMMENT = re.compile(r"(^|\s+)#.*$")  # pip's rule: `#` starts a comment at a line's start or after whitespace


@dataclass(frozen=True)
class Declared:
    """The requirements and constraints a revision declares (sorted, so two revisions compare as sets)."""

    requirements: tuple[str, ...]
    constraints: tuple[str, ...]

    def summary(self) -> str:
        return ", ".join(self.requirements + tuple(f"{c} (constraint)" for c in self.constraints)) or "nothing"

    def installable(self) -> tuple[str, ...]:
        """The requirements pip may install for the side: all but sdpa-bench's own (see `unmet`)."""
        return tuple(r for r in self.requirements if not _is_suite(_requirement(r).name))


def _is_suite(name: str) -> bool:
    return re.sub(r"[-_.]+", "-", name).lower() == SUITE


@dataclass(frozen=True)
class EnvSpec:
    """An environment for a side: `python`, an interpreter the user has, or `requirements` (pip's arguments) to
    install on top of this environment, with `constraints` (a file's text)."""

    text: str
    python: str = ""
    requirements: tuple[str, ...] = ()
    constraints: str = ""


@dataclass(frozen=True)
class Env:
    """A side's interpreter, and how it came to be: "this interpreter", "given", "built in 12 s", "cached"."""

    python: str
    how: str
    spec: str = ""


def requirement_lines(text: str) -> tuple[str, ...]:
    """A requirements file's requirements as pip reads them: continuation lines joined, comments dropped (a `#` in
    a URL's `#sha256=` fragment is no comment)."""
    joined = re.sub(r"\\\n", "", text)
    return tuple(s for s in (COMMENT.sub("", line).strip() for line in joined.splitlines()) if s)


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _requirement(text: str):
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        return Requirement(text)
    except InvalidRequirement as exc:
        raise GateInputError(f"{text!r}: not a requirement pip understands ({exc})") from None


def declared(tree: Path, cpu: bool) -> Declared:
    """What the revision in `tree` declares (module docstring); GateInputError on an unreadable pyproject.toml."""
    project = tomllib.loads(_text(tree / "pyproject.toml")).get("project", {}) if (tree / "pyproject.toml").is_file() \
        else {}
    requirements = list(_strings(project.get("dependencies", []), tree, "dependencies"))
    extras = project.get("optional-dependencies", {})
    if not isinstance(extras, dict):
        raise GateInputError(f"{tree / 'pyproject.toml'}: [project] optional-dependencies must be a table of lists")
    for extra, reqs in extras.items():
        requirements += [r for r in _strings(reqs, tree, f"optional-dependencies.{extra}")
                         if extra == "test" or _installed(_requirement(r).name) is not None]
    constraints = requirement_lines(_text(tree / CONSTRAINTS)) if cpu and (tree / CONSTRAINTS).is_file() else ()
    return Declared(tuple(sorted(set(requirements))), tuple(sorted(set(constraints))))


def _strings(value: object, tree: Path, key: str) -> list[str]:
    """A [project] list of requirement strings; GateInputError naming the key otherwise (a bare string would be
    read letter by letter, each letter a package for pip)."""
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise GateInputError(f"{tree / 'pyproject.toml'}: [project] {key} must be a list of requirement strings, "
                             f"not {type(value).__name__} {value!r:.60}")
    return value


def _text(path: Path) -> str:
    """A file of the revision, as UTF-8 text; GateInputError naming it when it cannot be read so."""
    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".toml":
            tomllib.loads(text)
        return text
    except UnicodeDecodeError as exc:
        raise GateInputError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise GateInputError(f"{path}: cannot be read ({exc})") from None


def unmet(dec: Declared) -> list[str]:
    """The declared requirements and constraints this interpreter does not satisfy, each with what it has.
    sdpa-bench itself is never one: a plug-in's requirement of it that the running sdpa-bench does not satisfy is a
    GateInputError, since both sides run over this one and a bare name is one anyone may register on an index."""
    out = []
    for text in dec.requirements + dec.constraints:
        req = _requirement(text)
        if req.marker is not None and not req.marker.evaluate():
            continue
        have = _installed(req.name)
        if _is_suite(req.name):
            if have is not None and not req.specifier.contains(have, prereleases=True):
                raise GateInputError(f"declares {text}, but both sides run over the sdpa-bench running this command "
                                     f"({have}), which continuous never replaces with one an index serves: install "
                                     "a version that satisfies it from where you got this one, then run again")
            continue
        if have is None:
            if text in dec.requirements:
                out.append(f"{text} (not installed)")
        elif not req.specifier.contains(have, prereleases=True):
            out.append(f"{text} (this environment has {have})")
    return out


def _interpreter(path: Path) -> str | None:
    """The interpreter `path` names: an executable file, or a virtual environment's folder; None otherwise."""
    candidates = [path / "bin" / "python", path / "Scripts" / "python.exe"] if path.is_dir() else [path]
    return next((str(p.absolute()) for p in candidates if p.is_file() and os.access(p, os.X_OK)), None)


def is_path(word: str) -> bool:
    """Whether pip reads `word` as a local path: written as one (a separator, `.`, `~`), not a bare name, and no
    URL (`git+https://…`, `pkg @ https://…`)."""
    return (not word.startswith("-") and "://" not in word
            and (os.sep in word or "/" in word or word.startswith((".", "~"))))


def user_path(word: str) -> Path:
    """`word` as a path, `~` and `~user` expanded; UsageError where `~user` names no user of this machine (pathlib
    raises RuntimeError there)."""
    try:
        return Path(word).expanduser()
    except RuntimeError:
        raise UsageError(f"{word}: {word.split('/')[0]} names no user of this machine, so the path cannot be "
                         "expanded") from None


def parse_spec(text: str) -> EnvSpec:
    """--base-env / --head-env (module docstring): an interpreter, or requirements split like a shell line and
    given to pip as they are (`torch==2.14.1 xformers==0.0.35`, `./my-plugin`, `-r FILE`). UsageError for an empty
    or unreadable SPEC, and for an interpreter or path that does not exist."""
    try:
        text.encode("utf-8")  # a byte the file system's encoding could not read: the verdict could not be written
    except UnicodeEncodeError as exc:
        where = text[:exc.start].encode("utf-8", "replace").decode()
        raise UsageError(f"environment SPEC {where!r}...: holds a byte that is not UTF-8 (at character "
                         f"{exc.start + 1}); name that path another way (a link of an ASCII name)") from None
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"environment SPEC {text!r}: cannot be read as a shell line ({exc})") from None
    if not words:
        raise UsageError("an environment SPEC is empty: name an interpreter or requirements")
    words = _direct_references(words)
    if len(words) > 1 and is_path(text.strip()) and _interpreter(Path(os.path.expanduser(text.strip()))):
        raise UsageError(f"environment SPEC {text!r}: split like a shell line, its spaces make it {len(words)} pip "
                         f"arguments; for the interpreter at that path, quote it inside the value, as in "
                         f"--base-env=\"{shlex.quote(text.strip())}\" (or --head-env)")
    if len(words) == 1:
        word = words[0]
        path = user_path(word)
        python = _interpreter(path) if is_path(word) or path.is_absolute() else None
        if python is None and INTERPRETER_NAME.fullmatch(word):
            python = shutil.which(word)
            if python is None:
                raise UsageError(f"{word}: no such interpreter on PATH")
        if python is not None:
            return EnvSpec(text, python=python)
        if is_path(word) or path.is_absolute():
            _check_package_path(text, path)
        elif path.is_dir() and _interpreter(path):  # pip would take the bare word for a package's name
            raise UsageError(f"{text}: the virtual environment in this folder, or a package of that name? Write "
                             f"./{word} for the environment, {word}== (or a version) for the package")
    return EnvSpec(text, requirements=tuple(words))


NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,\s-]*\])?")  # a project name, with extras


def _direct_references(words: list[str]) -> list[str]:
    """PEP 508's `name @ URL` kept one requirement, as pip reads it: a shell line splits it at its spaces."""
    out: list[str] = []
    for word in words:
        if out and len(out[-1]) > 1 and out[-1].endswith("@") and NAME.fullmatch(out[-1][:-1].rstrip()):
            out[-1] += f" {word}"  # `name@ URL`, `name @` + URL
        elif out and word.startswith("@") and NAME.fullmatch(out[-1]):
            out[-1] += f" {word}" if len(word) > 1 else " @"  # `name @URL`, `name` + `@`
        else:
            out.append(word)
    return out


ARCHIVES = (".whl", ".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tar.xz", ".txz", ".tar.lz", ".tlz",
            ".tar.lzma")  # what pip installs from a local file
PACKAGE_FILES = ("pyproject.toml", "setup.py")  # what makes a folder a package pip can install


def _check_package_path(text: str, path: Path) -> None:
    """A one-word path that is no interpreter: it must be what pip installs (a package folder or archive), or the
    user meant an interpreter or environment and gets told what it lacks, not pip's error about a requirement."""
    if not path.exists():
        raise UsageError(f"{text}: no such interpreter, environment or package folder")
    if path.is_dir() and not any((path / name).is_file() for name in PACKAGE_FILES):
        broken = (path / "bin" / "python").is_symlink()  # a venv whose interpreter went (a Python upgraded, removed)
        raise UsageError(f"{text}: a folder that is neither a virtual environment (bin/python "
                         f"{'links to nothing that runs' if broken else 'missing'}) nor a package "
                         f"({' or '.join(PACKAGE_FILES)})")
    if path.is_file() and not path.name.lower().endswith(ARCHIVES):
        raise UsageError(f"{text}: a file that is not executable, so no interpreter, and not a package archive pip "
                         f"installs ({', '.join(ARCHIVES)})")  # an executable file is taken as an interpreter


def python_of(folder: Path) -> Path:
    return folder / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
