"""Environments built from requirements and kept in a cache, with the promises pip, tox and uv make: reused only
when pip would build the same one, built where a crash leaves nothing trusted, bounded, and never shared.

    prepare(spec, cache, progress, scratch) -> Env   # the interpreter of a SPEC's environment, built once
    default_cache() -> Path  /  cache_source(cache) -> (who named it, Path)
    entries(cache) -> [Entry]  /  prune(cache, older_than_s, max_bytes=None) -> [Entry]  /  open_cache(cache) -> Path
    size_cap() -> bytes | None                       # $SDPA_BENCH_ENV_CACHE_MAX_GB

An environment is a virtual environment layered on the running one (continuous.envbuild): it holds exactly this
environment plus what pip installs on top.

Its key is a hash of what decides pip's result (continuous.envkey). A requirement pip would fetch afresh (a URL or
VCS reference without a commit or hash: `pkg @ git+URL@main`) keeps no key: its environment is built for the run in
`scratch` and removed with it.

A build happens in a unique folder beside the cache's entries, pip in its own process group (killed with the build,
or with the process that started it), and becomes an entry only by a rename once its marker is written: a build that
failed or was killed is never trusted, and its folder is removed by the next prune. Each entry records its last use;
entries unused for `MAX_AGE_DAYS` are removed when a comparison builds (and by `sdpa-bench envs --prune`), and so
are the least recently used ones while the cache holds more than `$SDPA_BENCH_ENV_CACHE_MAX_GB` (a torch environment
is about 5 GB; one used in the last `RECENT_S` counts as in use and stays). The cache must belong to the user and be
writable by no one else: it holds interpreters that run, so it is not shared with other jobs.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import subprocess
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..credentials import redact
from ..errors import GateInputError, UsageError
from .envbuild import PIP_TIMEOUT_S, build
from .envkey import cache_key, pinned
from .envlock import hold, keep, try_hold
from .envs import Env, EnvSpec, python_of

CACHE_ENV = "SDPA_BENCH_ENV_CACHE"
READY = "sdpa-bench-env.json"  # the marker: written before the folder is renamed into place
LAST_USE = "sdpa-bench-last-use"  # its modification time is the entry's last use
BUILDING = ".building-"  # a build in progress, or the remains of one that died
LOCK_WAIT_S = PIP_TIMEOUT_S + 300.0  # another run's build of the same environment
MAX_AGE_DAYS = 30.0
MAX_SIZE_ENV = "SDPA_BENCH_ENV_CACHE_MAX_GB"
LARGEST_GB = 1e9  # an exabyte: a cap past it is a typo (and overflowed the byte count)
RECENT_S = 600.0  # an entry used this recently may be a side of the comparison running now: never evicted for size


@dataclass(frozen=True)
class Entry:
    """A cached environment: its folder, the SPEC it was built for (credentials masked), its size, when it was
    last used; or a dead build's remains (`spec` empty)."""

    folder: Path
    spec: str
    size: int
    last_use: float


def size_cap() -> int | None:
    """The most bytes the cache may hold, from $SDPA_BENCH_ENV_CACHE_MAX_GB (unset or empty: no cap but age);
    UsageError naming the variable for a value that is not a positive number."""
    text = os.environ.get(MAX_SIZE_ENV, "").strip()
    if not text:
        return None
    try:
        gb = float(text)
    except ValueError:
        gb = float("nan")
    if not 0 < gb <= LARGEST_GB:
        raise UsageError(f"${MAX_SIZE_ENV} should be a positive number of GB, at most {LARGEST_GB:g}, got {text!r}")
    return int(gb * 1e9)


def default_cache() -> Path:
    """$SDPA_BENCH_ENV_CACHE, else sdpa-bench/envs in $XDG_CACHE_HOME where it is an absolute path (the XDG spec
    ignores a relative one, which would put a cache in every folder a command runs from), else in ~/.cache."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache") / "sdpa-bench" / "envs"


def cache_source(cache: str | Path | None) -> tuple[str, Path]:
    """The cache folder `cache` (None: the default) and what named it, for an error to say: "--env-cache",
    "$SDPA_BENCH_ENV_CACHE", or "the environment cache" (the default folder)."""
    if cache:
        return "--env-cache", Path(cache).expanduser()
    return (f"${CACHE_ENV}" if os.environ.get(CACHE_ENV) else "the environment cache"), default_cache().expanduser()


def open_cache(cache: Path | None) -> Path:
    """The cache folder, made (mode 700) if missing; UsageError, naming the option or variable that chose it, when
    it cannot be used, belongs to another user or others may write to it (it holds interpreters that run)."""
    source, cache = cache_source(cache)
    named = f"{source} {cache}" if source != "the environment cache" else str(cache)
    try:
        cache.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = cache.stat()
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            raise UsageError(f"{named}: the environment cache belongs to another user (uid {st.st_uid}); use one "
                             "of your own (--env-cache DIR)")
        if st.st_mode & 0o022:
            raise UsageError(f"{named}: others may write to the environment cache (mode {st.st_mode & 0o777:o}); "
                             f"chmod go-w it, or use another (--env-cache DIR)")
        probe = cache / f".probe-{uuid.uuid4().hex}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"{named}: cannot be used as the environment cache ({exc.strerror or exc})") from None
    return cache


def _cached(folder: Path, fd: int, shown: str) -> Env:
    """The built environment in `folder`, its use noted and its lock `fd` held while the comparison runs in it
    (envlock.in_use): no prune removes it meanwhile."""
    (folder / LAST_USE).touch()
    keep(fd)
    return Env(str(python_of(folder)), f"cached in {folder}", shown)


def prepare(spec: EnvSpec, cache: Path | None = None, progress: Callable[[str], None] | None = None,
            scratch: Path | None = None, spare: Sequence[EnvSpec] = ()) -> Env:
    """The interpreter of `spec`'s environment: a given one as it is (checked to run), else the cached build for
    its key, built now when there is none (under the key's lock); an unpinned SPEC is built into `scratch` (the
    run's own folder) every time. GateInputError with pip's own lines when the build fails. The prune after a build
    spares the entries of `spare` (the run's other side, not yet held: evicting it meant building it again next)."""
    shown = redact(spec.text)
    if spec.python:
        try:
            done = subprocess.run([spec.python, "-c", "import sys; print(sys.version.split()[0])"],
                                  capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise UsageError(f"{spec.python}: cannot be run as a Python interpreter ({exc})") from None
        if done.returncode != 0 or not re.fullmatch(r"\d+\.\d+\S*", done.stdout.strip()):  # /usr/bin/true exits 0
            raise UsageError(f"{spec.python}: does not run as a Python interpreter")
        return Env(spec.python, f"given (Python {done.stdout.strip()})", shown)
    if not pinned(spec):
        folder = (scratch or Path(os.environ.get("TMPDIR", "/tmp"))) / f"env-{uuid.uuid4().hex[:8]}"
        if progress:
            progress(f"environment {shown!r}: a URL or VCS requirement without a commit or hash: built for this "
                     f"run only, in {folder}")
        seconds = build(folder, spec.requirements, spec.constraints, shown)
        return Env(str(python_of(folder)), f"built in {seconds:.0f} s for this run (not cached)", shown)
    cache = open_cache(cache)
    cap = size_cap()  # a bad value is refused before a build, not after it
    key = cache_key(spec)
    folder = cache / key
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:  # shared beside the runs using it; exclusive, to build it, once none holds it
        fd = hold(cache / f"{key}.lock", progress, max(deadline - time.monotonic(), 0.0), shared=True)
        if _usable(folder):
            return _cached(folder, fd, shown)
        os.close(fd)
        fd = try_hold(cache / f"{key}.lock")  # not a blocking wait: a run that built it meanwhile now uses it, shared
        if fd is not None:
            break
        if time.monotonic() > deadline:
            raise GateInputError(f"{cache / f'{key}.lock'}: another run has held this environment's lock for more "
                                 f"than {LOCK_WAIT_S:.0f} s")
        time.sleep(0.2)
    try:
        if _usable(folder):  # another run built it meanwhile
            return _cached(folder, fd, shown)
        if folder.exists() and progress:
            progress(f"environment {shown!r}: {folder} has no interpreter any more (removed, or the Python it was "
                     "made from is gone): built again")
        shutil.rmtree(folder, ignore_errors=True)  # one without its marker (made before builds were renamed) too
        staging = cache / f"{BUILDING}{key}-{uuid.uuid4().hex[:8]}"
        if progress:
            progress(f"environment {shown!r}: building {folder} (pip install on top of this environment)")
        try:
            seconds = build(staging, spec.requirements, spec.constraints, shown)
            (staging / READY).write_text(json.dumps({"spec": shown, "build_s": round(seconds, 1)}) + "\n",
                                         encoding="utf-8")
            (staging / LAST_USE).touch()
            os.rename(staging, folder)  # the entry exists only whole
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    except BaseException:
        os.close(fd)
        raise
    keep(fd)
    kept = {folder, *(cache / cache_key(other) for other in spare if not other.python and pinned(other))}
    gone = prune(cache, MAX_AGE_DAYS * 86400.0, keep=kept, max_bytes=cap)
    if progress and gone and cap is not None:
        progress(f"environment cache: removed {len(gone)} environment(s) unused the longest, to hold it within "
                 f"${MAX_SIZE_ENV} = {cap / 1e9:g} GB: " + ", ".join(e.spec or e.folder.name for e in gone))
    return Env(str(python_of(folder)), f"built in {seconds:.0f} s into {folder}", shown)


def _size(folder: Path) -> int:
    """The bytes of the files under `folder`, links not followed; a file another run removes meanwhile (a prune, a
    dead build's remains) counts nothing, rather than stopping the listing or the build that prunes after it."""
    total = 0
    for top, _, files in os.walk(folder):  # a folder that goes as it is read is skipped
        for name in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(top, name))
                total += st.st_size if stat.S_ISREG(st.st_mode) else 0
    return total


def _ours(name: str) -> bool:
    """Whether a name in the cache is one this cache makes: a key, a key's lock, or a build's folder. Nothing else
    there is listed or removed, whatever folder --env-cache names."""
    return bool(re.fullmatch(rf"[0-9a-f]{{16}}(\.lock)?|{re.escape(BUILDING)}[0-9a-f]{{16}}-[0-9a-f]{{8}}", name))


def _built_here(folder: Path) -> bool:
    """A folder (not a link) a build made: one in progress or dead, or a key's with the marker every build writes
    before it takes the key's name. A folder of a key's name without it is someone else's, and is left alone."""
    return folder.is_dir() and not folder.is_symlink() and _ours(folder.name) and \
        (folder.name.startswith(BUILDING) or (folder / READY).is_file())


def entries(cache: Path) -> list[Entry]:
    """The cache's environments and the remains of dead builds, least recently used first."""
    out = []
    for folder in (p for p in cache.iterdir() if _built_here(p)) if cache.is_dir() else ():
        marker, used = folder / READY, folder / LAST_USE
        try:
            doc = json.loads(marker.read_text(encoding="utf-8")) if marker.is_file() else {"spec": ""}
        except (OSError, ValueError):
            doc = {"spec": ""}
        spec = doc.get("spec", "?") if isinstance(doc, dict) else ""  # `null`: as unreadable, a dead build's remains
        try:
            last = (used if used.exists() else folder).stat().st_mtime
        except OSError:  # removed by another run since the folder was listed
            continue
        out.append(Entry(folder, redact(str(spec)), _size(folder), last))
    return sorted(out, key=lambda e: e.last_use)


def _usable(folder: Path) -> bool:
    """A finished entry whose interpreter still runs from where it was made (a link to a Python since removed is
    not: every comparison in it would fail to start)."""
    return (folder / READY).is_file() and python_of(folder).exists()


def prune(cache: Path, older_than_s: float, keep: Path | Collection[Path] | None = None, now: float | None = None,
          max_bytes: int | None = None, busy: list[Entry] | None = None) -> list[Entry]:
    """Remove the entries last used more than `older_than_s` ago and the remains of dead builds older than an hour
    (or any age, with `older_than_s` 0); then, while the cache holds more than `max_bytes`, the least recently used
    of the others, except `keep` and those used in the last `RECENT_S`. Each under its lock and skipped while another
    run holds it (added to `busy`, where given; one with a file this user may not remove stays as a dead build's
    remains); the removed, least recently used first."""
    now = time.time() if now is None else now
    kept = {keep} if isinstance(keep, Path) else set(keep or ())
    removed = []
    remaining = []
    for entry in entries(cache):
        dead_build = entry.folder.name.startswith(BUILDING)
        limit = min(older_than_s, 3600.0) if dead_build else older_than_s
        if entry.folder in kept or now - entry.last_use < limit:
            remaining.append(entry)
        elif (done := _remove(cache, entry)):
            removed.append(entry)
        else:
            remaining.append(entry)
            if busy is not None and done is False:
                busy.append(entry)
    folders = {_key_of(e.folder.name) for e in remaining}
    for lock in cache.glob("*.lock") if cache.is_dir() else ():  # left by removed entries and failed builds
        if _ours(lock.name) and _key_of(lock.name) not in folders:
            _remove(cache, None, _key_of(lock.name))
    if max_bytes is not None:
        held = sum(e.size for e in remaining)
        for entry in remaining:  # least recently used first
            if held <= max_bytes:
                break
            if entry.folder in kept or now - entry.last_use < RECENT_S:
                continue
            done = _remove(cache, entry)
            if done:
                removed.append(entry)
                held -= entry.size
            elif busy is not None and done is False and entry not in busy:
                busy.append(entry)
    return removed


def _key_of(name: str) -> str:
    return name.removeprefix(BUILDING).split("-")[0].removesuffix(".lock")


def _remove(cache: Path, entry: Entry | None, key: str | None = None) -> bool | None:
    """Remove one entry (or, with `entry` None, nothing but `key`'s lock file) under its key's lock, and the lock
    file too once no folder of that key is left; False while another run holds the lock (a build, or a run that
    found it) or the lock cannot be opened; None where something in it could not be removed. An environment leaves
    its key's name first: what is left of it is a dead build's remains (listed, pruned again), never an entry."""
    key = key or _key_of(entry.folder.name)
    fd = try_hold(cache / f"{key}.lock")
    if fd is None:
        return False
    try:
        doomed = None if entry is None else entry.folder
        if doomed is not None and not doomed.name.startswith(BUILDING):
            doomed = cache / f"{BUILDING}{key}-{uuid.uuid4().hex[:8]}"
            try:
                os.rename(entry.folder, doomed)
            except OSError:
                return None
        if doomed is not None:
            shutil.rmtree(doomed, ignore_errors=True)
        if not any(p.is_dir() and _key_of(p.name) == key for p in cache.iterdir()):
            (cache / f"{key}.lock").unlink(missing_ok=True)  # while held: see envlock
        return None if doomed is not None and doomed.exists() else True  # a file this user may not remove: None
    finally:
        os.close(fd)
