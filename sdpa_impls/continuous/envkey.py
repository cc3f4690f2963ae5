"""What decides the environment pip builds from a SPEC, as the key it is cached under.

    cache_key(spec) -> str      # the hash of everything below
    pinned(spec)    -> bool     # whether pip would build the same environment again
    underlay_dirs() -> [str]    # this environment's site-packages folders, which a built environment layers on

The key covers the requirements (a local file or folder by its contents, also as the value of -r, -c or -e, or as a
file: URL; a -r or -c file also by what it names in turn, with pip's ${VAR}s expanded; a URL or VCS requirement
by its address), the constraints, this interpreter and its base executable, the platform, this environment's
packages, and pip's configuration: its PIP_* variables and the contents of its configuration files (global, XDG,
user, the environment's, PIP_CONFIG_FILE), with the files their constraint and requirement settings name (by
contents) and their find-links folders (by file names and sizes), also as -f on the SPEC or in a -r file; a URL's
password or token is masked first (a CI job's token is new each job). A requirement fetched afresh each time
(a URL or VCS reference without a full commit or a hash) makes the SPEC unpinned: no key can stand for it.
"""
from __future__ import annotations

import configparser
import hashlib
import json
import os
import re
import sys
import sysconfig
import urllib.parse
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from ..credentials import redact
from ..errors import UsageError
from .envs import EnvSpec, is_path, requirement_lines, user_path

SKIP_TOP = {"build", "dist", ".tox", ".venv", ".eggs"}  # a local package's build outputs, at its top only
SKIP_ANY = {".git", ".hg", "__pycache__"}
PIP_CONFIG_FILES = ("/etc/pip.conf", "~/.pip/pip.conf", "~/.config/pip/pip.conf")
VCS = ("git+", "hg+", "svn+", "bzr+")
URL = re.compile(r"[A-Za-z][\w+.-]*://\S+")
HASHES = ("#sha256=", "#sha384=", "#sha512=")
FILE_OPTIONS = {"-r", "--requirement", "-c", "--constraint", "-e", "--editable"}  # their value is a local file or
NESTED_OPTIONS = {"-r", "--requirement", "-c", "--constraint"}  # a requirements file, read with what it names
LINK_OPTIONS = {"-f", "--find-links"}  # a folder of wheels pip chooses among
INPUT_SETTINGS = {"constraint", "requirement", "find-links"}  # pip settings (PIP_*, pip.conf) naming local inputs
ENV_VAR = re.compile(r"\$\{([A-Z0-9_]+)\}")  # what pip expands in a requirements file
SOURCE_OPTIONS = {"-i", "--index-url", "--extra-index-url", "-f", "--find-links", "--trusted-host"}  # ... a source
CHUNK = 1 << 20


def _hash_file(path: Path, digest: hashlib._Hash) -> None:
    with path.open("rb") as fh:
        while block := fh.read(CHUNK):
            digest.update(block)


def _files(top: Path) -> list[Path]:
    """The files under `top`, through linked folders as a build reads them (each real folder once: no loop)."""
    seen, out = set(), []
    for folder, dirs, files in os.walk(top, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        out += [Path(folder, f) for f in files if os.path.isfile(os.path.join(folder, f))]
    return out


def _fingerprint_path(path: Path) -> str:
    """A local file or folder by its contents (read in blocks), a folder without its build outputs and caches."""
    digest = hashlib.sha256()
    if path.is_file():
        _hash_file(path, digest)
    else:
        for f in sorted(_files(path)):
            rel = f.relative_to(path).parts
            if rel[0] in SKIP_TOP or rel[0].endswith(".egg-info") or SKIP_ANY & set(rel):
                continue
            digest.update("/".join(rel).encode() + b"\0")
            _hash_file(f, digest)
    return f"{path.resolve()}:{digest.hexdigest()}"


def _url(word: str) -> str | None:
    """The URL of a URL or VCS requirement (`pkg @ URL`, `git+URL`, `https://...`), else None."""
    found = URL.search(word)
    return found.group(0) if found else None


def _pinned_url(url: str) -> bool:
    """A URL that names one content: a VCS reference to a full commit, or an archive with a hash fragment."""
    if url.startswith(VCS):
        ref = url.rsplit("@", 1)[1].split("#")[0] if "@" in url.split("://", 1)[1] else ""
        return len(ref) == 40 and all(c in "0123456789abcdef" for c in ref.lower())
    return any(h in url for h in HASHES) or url.startswith("file:")


def _parsed(words: Sequence[str]) -> list[tuple[str, str]]:
    """pip's arguments as (option, value) pairs: ("", requirement), ("-r", file), ("--index-url", url),
    ("--no-deps", "")."""
    out, i = [], 0
    while i < len(words):
        word = words[i]
        if not word.startswith("-"):
            out.append(("", word))
        elif word[:2] in FILE_OPTIONS | SOURCE_OPTIONS and len(word) > 2:  # -rFILE, -cFILE, -fDIR: pip's too
            out.append((word[:2], word[2:].removeprefix("=")))
        else:
            name, eq, value = word.partition("=")
            if not eq and name in FILE_OPTIONS | SOURCE_OPTIONS and i + 1 < len(words):
                i += 1
                value = words[i]
            out.append((name, value))
        i += 1
    return out


def pinned(spec: EnvSpec) -> bool:
    """Whether pip would build the same environment again from `spec`: no requirement (on the command line, as
    -e, or in a -r file, nested ones too) is a URL or VCS reference without a full commit or a hash (module
    docstring). A -r file's option lines (--index-url URL, -f DIR) are options, not requirements."""
    return all(_pinned_url(url) for url in map(_url, _requirements(spec.requirements, None, set()))
               if url is not None)


def _requirements(words: Sequence[str], base: Path | None, seen: set[Path]) -> list[str]:
    """The requirements among pip's arguments `words`, and those of each -r file they name (read as pip reads it,
    a relative path against the folder of the file that names it)."""
    out = []
    for option, value in _parsed(words):
        if option in ("", "-e", "--editable"):
            out.append(value)
        elif option in ("-r", "--requirement") and (path := _local(value, base)) is not None and path.is_file():
            if path.resolve() in seen:
                continue
            seen.add(path.resolve())
            try:
                lines = requirement_lines(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError):
                continue  # pip will say what is wrong with it
            for line in lines:
                out += _requirements(line.split(), path.parent, seen)
    return out


def _local(word: str, base: Path | None = None) -> Path | None:
    """`word` as the local file or folder pip reads: a path (relative ones against `base`, else the working
    folder), or a file: URL (`file:///x`, `file://localhost/x`); None for anything else or a path that is not there."""
    try:
        if word.startswith("file:"):
            parsed = urllib.parse.urlsplit(word)
            path = Path(urllib.parse.unquote(parsed.path)) if parsed.netloc in ("", "localhost") else None
        else:
            path = user_path(word)
            path = base / path if base is not None and not path.is_absolute() else path
        return path if path is not None and path.exists() else None
    except (UsageError, OSError):  # ~nosuchuser, a folder this user may not read: pip says what is wrong with it
        return None


def _requirements_file(path: Path, seen: set[Path]) -> list[str]:
    """A -r or -c file as pip reads it: its contents, its lines with pip's ${VAR}s expanded, and what they name
    in turn (a nested -r or -c file, against this file's folder; a local package or file: URL)."""
    out = [f"{path.resolve()}:{_fingerprint_path(path)}"]
    if path.resolve() in seen or not path.is_file():
        return out
    seen.add(path.resolve())
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return out  # pip will say what is wrong with it
    text = ENV_VAR.sub(lambda m: os.environ.get(m.group(1), m.group(0)), text)
    lines = requirement_lines(text)  # a token pip expands (${CI_JOB_TOKEN}) is masked: a new one each job
    out.append(hashlib.sha256(redact("\n".join(lines)).encode()).hexdigest())
    for line in lines:
        out += _fingerprint(line.split(), path.parent, seen)
    return out


def _fingerprint(words: Sequence[str], base: Path | None = None, seen: set[Path] | None = None) -> list[str]:
    """pip's arguments as they enter the key: local paths (a requirement written as a path, the file of -r or -c
    and what it names, the folder of -e, a file: URL) by their contents, the rest as written; `base`, the folder
    of the requirements file they come from (its -r and -c are read against it)."""
    out, seen = [], set() if seen is None else seen
    for option, value in _parsed(words):
        url = _url(value) if option in ("", "-e", "--editable") else None
        target = url if url and url.startswith("file:") else value  # `pkg @ file:///...`: the file, as `file:///...`
        local = option in FILE_OPTIONS or (option == "" and is_path(value)) or target.startswith("file:")
        if option in LINK_OPTIONS:  # a folder of wheels (on the SPEC or in a -r file): by its files
            path = (base is not None and _local(value, base)) or _local(value)
            out.append(f"{option} {redact(value)}" + (f"={_listing(path)}" if path else ""))
            continue
        path = _local(target, base if option in NESTED_OPTIONS else None) if local else None
        if path is not None and option in NESTED_OPTIONS:
            out += [f"{option} {value}", *_requirements_file(path, seen)]
        else:
            out.append(f"{option} {value}={_fingerprint_path(path)}" if path is not None else
                       f"{option} {redact(value)}")  # a token in a URL is masked: a new one each CI job
    return out


def _listing(path: Path) -> str:
    """A --find-links folder by its files' names and sizes (a wheelhouse can hold gigabytes, and a checkout gives
    its files new times); a single file by its contents."""
    try:
        if not path.is_dir():
            return _fingerprint_path(path)
        return json.dumps(sorted((f.name, f.stat().st_size) for f in path.iterdir() if f.is_file()))
    except OSError as exc:
        return f"{path}: unreadable ({exc.strerror or exc})"


def _setting_inputs(setting: str, value: str) -> list[str]:
    """What a pip setting's value names on this machine (constraint, requirement, find-links: as PIP_CONSTRAINT or
    a configuration file's `constraint =`), by its contents; nothing for the other settings."""
    setting = setting.lower().removeprefix("pip_").replace("_", "-")
    out: list[str] = []
    for word in value.split() if setting in INPUT_SETTINGS else ():
        path = _local(word)
        try:
            if path is not None:
                out += _requirements_file(path, set()) if setting != "find-links" else [f"{path}:{_listing(path)}"]
        except OSError as exc:  # pip will say what is wrong with it
            out.append(f"{path}: unreadable ({exc.strerror or exc})")
    return out


def _pip_configuration() -> dict[str, str]:
    """What configures pip besides its arguments: its PIP_* variables and its configuration files' contents, and
    the files and folders their constraint, requirement and find-links settings name, by their contents."""
    conf = {k: v for k, v in os.environ.items() if k.startswith("PIP_")}
    for name, value in list(conf.items()):  # a token in an index URL is masked: a new one each CI job
        conf[name] = json.dumps([redact(value), *_setting_inputs(name, value)])
    dirs = os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(os.pathsep)
    user = os.environ.get("XDG_CONFIG_HOME") or "~/.config"
    files = [*(f"{d}/pip/pip.conf" for d in dirs), *PIP_CONFIG_FILES, f"{user}/pip/pip.conf",
             f"{sys.prefix}/pip.conf", os.environ.get("PIP_CONFIG_FILE", "")]
    for name in filter(None, files):
        path = Path(name).expanduser()
        if path.is_file():
            parser = configparser.RawConfigParser(strict=False, interpolation=None)
            try:
                parser.read(path, encoding="utf-8")
            except (configparser.Error, UnicodeDecodeError):
                pass  # pip will say what is wrong with it
            named = [i for section in parser.sections() for key, value in parser.items(section)
                     for i in _setting_inputs(key, value)]
            conf[str(path)] = json.dumps([_fingerprint_path(path), *named])
    return conf


def underlay_dirs() -> list[str]:
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
    doc = {"python": sys.version, "prefix": os.path.realpath(sys.prefix), "underlay": underlay_dirs(),
           "base": os.path.realpath(getattr(sys, "_base_executable", sys.executable)),
           "platform": [sysconfig.get_platform(), sys.implementation.cache_tag],
           "packages": here, "requirements": _fingerprint(spec.requirements), "constraints": spec.constraints,
           "pip": _pip_configuration()}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]
