"""The environment each side of a comparison runs in: this interpreter, one the user names, or one built from a
requirement list on top of this environment and cached by what it holds.

    declared(tree, cpu)              -> Declared    # the dependencies a revision declares
    unmet(declared)                  -> [str]       # which of them this interpreter does not satisfy
    parse_spec(text)                 -> EnvSpec     # --base-env / --head-env: an interpreter or requirements
    prepare(spec, cache, progress)   -> Env         # the interpreter of that environment, built once and cached
    build(folder, requirements)      -> seconds     # a layered environment in `folder`, uncached

What a revision declares (`declared`): `[project].dependencies` and the `test` extra of its pyproject.toml (the
suite runs its benchmarks with pytest-benchmark), every other extra whose package this environment has installed,
and, on a machine without a GPU, the pins of its constraints-cpu.txt (the CPU environments of tox and CI install
with them). GPU users keep their own torch, so on CUDA the CPU pins are not a declaration.

A built environment is a virtual environment layered on this one: a `.pth` line adds this environment's
site-packages behind the new one's own, so it holds exactly this environment plus what pip installs on top (a
requirement this environment already satisfies is not installed again). Its folder is named by a hash of the
requirements, the constraints, the contents of local packages named by path, the interpreter and this
environment's packages; a marker written last makes it usable, so a build that failed or was killed is never
trusted: the next run removes it and builds again.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time
import tomllib
import venv
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from ..errors import GateInputError, UsageError

CONSTRAINTS = "constraints-cpu.txt"
CACHE_ENV = "SDPA_BENCH_ENV_CACHE"
READY = "sdpa-bench-env.json"  # written last: an environment folder without it is half-built
LINK_FILE = "_sdpa_bench_underlay.pth"
SKIP_DIRS = {".git", "build", "dist", "__pycache__", ".tox", ".venv", ".eggs"}
PIP_TIMEOUT_S = 3600.0  # a CUDA build of torch is several GB


@dataclass(frozen=True)
class Declared:
    """The requirements and constraints a revision declares (sorted, so two revisions compare as sets)."""

    requirements: tuple[str, ...]
    constraints: tuple[str, ...]

    def summary(self) -> str:
        return ", ".join(self.requirements + tuple(f"{c} (constraint)" for c in self.constraints)) or "nothing"


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


def _lines(text: str) -> tuple[str, ...]:
    return tuple(s for s in (line.split("#", 1)[0].strip() for line in text.splitlines()) if s)


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _requirement(text: str):
    from packaging.requirements import InvalidRequirement, Requirement  # pytest's dependency, as `continuous` is

    try:
        return Requirement(text)
    except InvalidRequirement as exc:
        raise GateInputError(f"{text!r}: not a requirement pip understands ({exc})") from None


def declared(tree: Path, cpu: bool) -> Declared:
    """What the revision in `tree` declares (module docstring); GateInputError on an unreadable pyproject.toml."""
    path = tree / "pyproject.toml"
    try:
        project = tomllib.loads(path.read_text(encoding="utf-8")).get("project", {})
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise GateInputError(f"{path}: cannot be read ({exc})") from None
    requirements = list(project.get("dependencies", []))
    for extra, reqs in project.get("optional-dependencies", {}).items():
        requirements += [r for r in reqs if extra == "test" or _installed(_requirement(r).name) is not None]
    constraints = _lines((tree / CONSTRAINTS).read_text(encoding="utf-8")) if cpu and (tree / CONSTRAINTS).is_file() \
        else ()
    return Declared(tuple(sorted(set(requirements))), tuple(sorted(set(constraints))))


def unmet(dec: Declared) -> list[str]:
    """The declared requirements and constraints this interpreter does not satisfy, each with what it has."""
    out = []
    for text in dec.requirements + dec.constraints:
        req = _requirement(text)
        if req.marker is not None and not req.marker.evaluate():
            continue
        have = _installed(req.name)
        if have is None:
            if text in dec.requirements:
                out.append(f"{text} (not installed)")
        elif not req.specifier.contains(have, prereleases=True):
            out.append(f"{text} (this environment has {have})")
    return out


def parse_spec(text: str) -> EnvSpec:
    """--base-env / --head-env: an interpreter (a file, or a virtual environment's folder) or requirements, split
    like a shell line and given to pip as they are (`torch==2.14.1 xformers==0.0.35`, `./my-plugin`, `-r FILE`)."""
    words = shlex.split(text)
    if not words:
        raise UsageError("an environment SPEC is empty: name an interpreter or requirements")
    if len(words) == 1:
        path = Path(words[0]).expanduser()
        candidates = [path / "bin" / "python", path / "Scripts" / "python.exe"] if path.is_dir() else [path]
        for python in candidates:
            if python.is_file() and os.access(python, os.X_OK):
                return EnvSpec(text, python=str(python.absolute()))
        if (os.sep in words[0] or words[0].startswith(".")) and not path.exists():
            raise UsageError(f"{text}: no such interpreter, environment or package folder")
    return EnvSpec(text, requirements=tuple(words))


def _fingerprint(word: str) -> str:
    """A requirement word as it enters the cache key: a local file or folder by its contents, else as written."""
    path = Path(word)
    if not word.startswith("-") and path.exists():
        digest = hashlib.sha256()
        files = [path] if path.is_file() else sorted(
            p for p in path.rglob("*") if p.is_file() and not SKIP_DIRS & set(p.relative_to(path).parts)
            and ".egg-info" not in str(p))
        for f in files:
            digest.update(str(f.relative_to(path) if path.is_dir() else f.name).encode() + b"\0" + f.read_bytes())
        return f"{path.resolve()}:{digest.hexdigest()}"
    return word


def _underlay_dirs() -> list[str]:
    """This environment's site-packages folders in search order: its own, those it layers on (a `.pth` underlay
    adds them to sys.path), and the user's."""
    import site

    dirs = [*site.getsitepackages(), *(p for p in sys.path if Path(p).name in ("site-packages", "dist-packages"))]
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]


def cache_key(spec: EnvSpec) -> str:
    """The hash an environment built for `spec` is stored under (module docstring)."""
    here = sorted(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions() if d.metadata["Name"])
    doc = {"python": sys.version, "prefix": os.path.realpath(sys.prefix), "underlay": _underlay_dirs(),
           "packages": here, "requirements": [_fingerprint(w) for w in spec.requirements],
           "constraints": spec.constraints}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def default_cache() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sdpa-bench" / "envs"


def python_of(folder: Path) -> Path:
    return folder / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _pip_failure(what: str, done: subprocess.CompletedProcess) -> GateInputError:
    lines = [line.rstrip() for line in (done.stderr or done.stdout or "").splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR")] or lines[-6:] or ["(pip printed nothing)"]
    return GateInputError(f"environment {what!r}: pip could not install it (exit {done.returncode}):\n  "
                          + "\n  ".join(errors[-6:]))


def build(folder: Path, requirements: Sequence[str], constraints: str = "", what: str = "") -> float:
    """Create a virtual environment in `folder` layered on this one (module docstring) and pip-install
    `requirements` (pip's arguments; local paths made absolute) into it with `constraints` (a file's text); the
    seconds taken. GateInputError with pip's error lines, naming `what`, when pip fails."""
    start = time.monotonic()
    venv.EnvBuilder(with_pip=False, symlinks=os.name != "nt").create(folder)
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(folder), "platbase": str(folder)}))
    purelib.mkdir(parents=True, exist_ok=True)
    # `import site; site.addsitedir(...)`, not a bare path: it also runs the .pth files there (editable installs).
    # Not --system-site-packages: a venv made from inside another (tox's) would see the base interpreter's packages.
    (purelib / LINK_FILE).write_text("".join(f"import site; site.addsitedir({d!r})\n" for d in _underlay_dirs()),
                                     encoding="utf-8")
    cmd = [str(python_of(folder)), "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
           "--no-build-isolation"]
    if constraints:
        (folder / "constraints.txt").write_text(constraints, encoding="utf-8")
        cmd += ["-c", str(folder / "constraints.txt")]
    cmd += [str(Path(w).resolve()) if not w.startswith("-") and Path(w).exists() else w for w in requirements]
    what = what or " ".join(requirements)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise GateInputError(f"environment {what!r}: pip took more than {PIP_TIMEOUT_S:.0f} s") from None
    if done.returncode != 0:
        raise _pip_failure(what, done)
    return time.monotonic() - start


def prepare(spec: EnvSpec, cache: Path | None = None, progress: Callable[[str], None] | None = None) -> Env:
    """The interpreter of `spec`'s environment: a given one as it is (checked to run), else the cached build for
    its key, built now when there is none (under a lock, so two runs never build one folder at once). A failed
    build is removed and raised as GateInputError with pip's own error lines."""
    if spec.python:
        done = subprocess.run([spec.python, "-c", "import sys; print(sys.version.split()[0])"], capture_output=True,
                              text=True, timeout=120)
        if done.returncode != 0:
            raise UsageError(f"{spec.python}: does not run as a Python interpreter")
        return Env(spec.python, f"given (Python {done.stdout.strip()})", spec.text)
    cache = cache or default_cache()
    cache.mkdir(parents=True, exist_ok=True)
    key = cache_key(spec)
    folder = cache / key
    with open(cache / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / READY).is_file():
            return Env(str(python_of(folder)), f"cached in {folder}", spec.text)
        shutil.rmtree(folder, ignore_errors=True)  # a build that failed or was killed
        if progress:
            progress(f"environment {spec.text!r}: building {folder} (pip install on top of this environment)")
        try:
            seconds = build(folder, spec.requirements, spec.constraints, spec.text)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        (folder / READY).write_text(json.dumps({"spec": spec.text, "requirements": list(spec.requirements),
                                                "build_s": round(seconds, 1)}) + "\n", encoding="utf-8")
    return Env(str(python_of(folder)), f"built in {seconds:.0f} s into {folder}", spec.text)
