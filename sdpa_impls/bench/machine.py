"""What machine a measurement came from (one dict for every front end), the one definition of "the same machine",
and which code measured it (`source_revision`)."""
from __future__ import annotations

import contextlib
import functools
import os
import platform
import subprocess
import sys
import types
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch

from .. import gitio
from .contention import advice, threads_text


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=None)
def _driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


ARM_FIELDS = ("CPU implementer", "CPU part", "CPU variant")  # what Linux on Arm says of a core: no model name


def cpu_model(cpuinfo: str | None = None) -> str:
    """The CPU's name, which tells machines apart: x86's model name; on Arm under Linux the core's implementer, part
    and variant (a Graviton2 and a Graviton3 are both "aarch64"); on macOS the chip ("Apple M2 Pro")."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, colon, value = line.partition(":")
        if colon:
            fields.setdefault(key.strip(), value.strip())
    if fields.get("model name"):
        return fields["model name"]
    if all(fields.get(k) for k in ARM_FIELDS):
        return "Arm (" + ", ".join(f"{k.removeprefix('CPU ')} {fields[k]}" for k in ARM_FIELDS) + ")"
    if platform.system() == "Darwin":
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            brand = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                                   timeout=10).stdout.strip()
            if brand:
                return brand
    return platform.processor() or platform.machine()


# The CPU flags that change what a bf16 GEMM and torch's CPU attention kernels run on: oneDNN uses AVX-512 BF16
# instructions where the CPU has them and AMX tiles (Sapphire Rapids and later) where it has those, several times
# faster, so a speed target set on one CPU says little about another. ONEDNN_MAX_CPU_ISA caps what oneDNN uses.
CPU_FEATURES = {"avx512_bf16": "AVX-512 BF16", "amx_bf16": "AMX"}
ONEDNN_ISA_ENV = "ONEDNN_MAX_CPU_ISA"


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where it cannot be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    return frozenset(f for line in text.splitlines() if line.startswith("flags") for f in line.split(":", 1)[1].split())


def cpu_features() -> dict:
    """Whether the CPU has each of `CPU_FEATURES` (None where /proc/cpuinfo says nothing), and oneDNN's cap."""
    flags = cpu_flags()
    return {**{f: (f in flags) if flags else None for f in CPU_FEATURES},
            "onednn_max_cpu_isa": os.environ.get(ONEDNN_ISA_ENV)}


BUSY_LOAD = 1.0  # one process's worth of work on the CPUs: enough to stall a multi-thread barrier


def _load() -> float | None:
    """The 1-minute load average; None where the system keeps none."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def busy_cpus() -> tuple[float, str] | None:
    """(the 1-minute load average, a line saying what it does to the times) where other processes keep this
    machine's CPUs busy, read before a sweep's first point (its own work is not in it yet); None on a quiet machine
    or where the system keeps no load average. torch's threads wait for each other at every barrier, so one other
    busy process can make each call many times slower, and no sample says so."""
    load = _load()
    if load is None or load < BUSY_LOAD:
        return None
    return load, (f"the CPUs are busy before the sweep starts: load average {load:.1f} over the last minute on "
                  f"{os.cpu_count()} CPUs, torch using {threads_text(torch.get_num_threads())}. Other processes slow "
                  "and scatter the times (threads stall waiting for each other): measure "
                  f"{advice(torch.get_num_threads())}")


def every_cpu_busy() -> str:
    """A note where other processes keep every CPU busy (the 1-minute load average, machine-wide, at least the
    machine's CPUs) as a comparison starts, whose one-thread sides then wait for a CPU unevenly; else ""."""
    load, cpus = _load(), os.cpu_count() or 1
    if load is None or load < cpus:
        return ""
    return (f"every CPU was busy as the comparison started (load average {load:.1f} over the last minute on {cpus} "
            "CPUs): other processes slow the sides unevenly, and the gate's false-alarm rate holds on a quiet "
            "machine; compare again where nothing else runs before trusting a slowdown.")


def describe_cpu(machine: dict) -> str:
    """The CPU of a `machine_info()` dict with its bf16 features, e.g. "Intel(R) Xeon(R), AVX-512 BF16 yes, AMX no"."""
    features = machine.get("cpu_features") or {}
    words = {True: "yes", False: "no", None: "unknown"}
    text = ", ".join([str(machine.get("cpu") or "unknown CPU")]
                     + [f"{name} {words[features.get(flag)]}" for flag, name in CPU_FEATURES.items()])
    cap = features.get("onednn_max_cpu_isa")
    return text + (f", oneDNN capped at {cap}" if cap else "")


def _git(directory: Path, *args: str) -> str | None:
    return gitio.answer(directory, *args, timeout=10)


def source_revision(package: Path | None = None, dist: str = "sdpa-bench", anchor: str = "__init__.py") -> str:
    """The code that measures: the git commit of the package's own files (with "+ uncommitted changes" when they
    differ from it), or the installed version of `dist` where the package's `anchor` is no file of a git checkout."""
    package = package or Path(__file__).resolve().parents[1]
    installed = f"{dist} {_version(dist) or 'unknown version'} (not a git checkout)"
    if _git(package, "ls-files", "--error-unmatch", anchor) is None:  # e.g. site-packages inside a repo
        return installed
    commit = _git(package, "rev-parse", "--short=12", "HEAD")
    if commit is None:
        return installed
    dirty = _git(package, "status", "--porcelain", "--untracked-files=no", "--", ".")
    return f"git {commit}" + (" + uncommitted changes" if dirty else "")


def plugin_sources(names: list[str]) -> str:
    """The code of the plug-ins among the implementations `names`, the code under test in a kernel author's sweep:
    "; plug-in DIST (git COMMIT + uncommitted changes) for NAME, ..." or "" where every one is built in."""
    import sys
    from importlib.metadata import packages_distributions

    from .. import registry
    found: dict[str, tuple[Path, str, list[str]]] = {}
    for name in names:
        module = sys.modules.get(type(registry.get(name)).__module__)
        where = getattr(module, "__file__", None)
        if module is None or module.__name__.split(".")[0] == "sdpa_impls" or not where:  # built in, or broken
            continue
        top = module.__name__.split(".")[0]
        dist = (packages_distributions().get(top) or [top])[0]
        found.setdefault(dist, (Path(where).parent, Path(where).name, []))[2].append(name)
    parts = []
    for dist, (folder, anchor, impls) in found.items():
        code = source_revision(folder, dist, anchor)  # "git ..." in a checkout, else the installed version
        named = " ".join(filter(None, (dist, _version(dist))))
        parts.append(f"plug-in {code if code.startswith(dist) else f'{named}, {code}'} for {', '.join(impls)}")
    return "".join(f"; {p}" for p in parts)


def default_timer(device: torch.device | str) -> str:
    """What `bench.timing.time_closure` reads on this device (the pytest suite records its own --benchmark-timer)."""
    return "sdpa_impls.bench.timing.cuda_event_clock" if torch.device(device).type == "cuda" else "time.perf_counter"


def _sdpa_dispatch() -> dict:
    """torch's SDPA dispatch settings: backend priority order (None where this torch does not expose it: before 2.6
    the order is fixed in its code), and the flash-attention version it was built with."""
    from torch.nn.attention import SDPBackend

    names = {int(b): b.name for b in SDPBackend.__members__.values()}
    try:
        from torch.nn.attention import _get_flash_version
        flash = _get_flash_version()
    except (ImportError, RuntimeError):
        flash = None
    order = getattr(torch._C, "_get_sdp_priority_order", None)
    return {"priority": [names.get(int(i), str(i)) for i in order()] if order else None, "flash": flash}


def _hook_name(hook: object) -> str:
    """A trace or profile hook by where it is defined: a function by its own name, an object by its class, a class
    defined in __main__ by its first base defined elsewhere (`python -m cProfile` on Python 3.11: _lsprof.Profiler;
    from 3.12 cProfile is a sys.monitoring tool)."""
    kind = hook if isinstance(hook, (types.FunctionType, types.MethodType)) else type(hook)
    named = next((k for k in getattr(kind, "__mro__", (kind,)) if k.__module__ != "__main__"), kind)
    return f"{named.__module__}.{named.__qualname__}"


def active_tracer(hooks: bool = True) -> str | None:
    """The tracing tools at work in this process (a coverage run, a debugger, a profiler), or None: every Python
    call of a point pays for them (docs/explanation/measurement.md), so a time taken under one compares only with
    another taken under the same. `hooks=False` leaves out sys.settrace's and sys.setprofile's, which
    pytest-benchmark pauses while it times; not the tools of sys.monitoring (Python 3.12+, coverage.py's there)."""
    found = [_hook_name(hook) for hook in (sys.gettrace(), sys.getprofile()) if hooks and hook is not None]
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is not None:
        found += [f"sys.monitoring: {name}" for tool in range(6) if (name := monitoring.get_tool(tool))]
    return ", ".join(dict.fromkeys(found)) or None


def machine_info(device: str | torch.device | None = None, timer: str | None = None) -> dict:
    """Device, CPU model and its bf16 features (`cpu_features`), thread count, GPU (model, memory, capability,
    driver), the torch/CUDA/cuDNN/xformers versions, torch's SDPA dispatch settings, the timer the measurements
    read (default: `default_timer`), and the tracing tools at work (`active_tracer`)."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    gpu = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        gpu = {"name": props.name, "memory_bytes": int(props.total_memory),
               "capability": f"{props.major}.{props.minor}", "driver": _driver()}
    return {
        "device": device.type,
        "device_name": gpu["name"] if gpu else cpu_model(),
        "cpu": cpu_model(),
        "cpu_features": cpu_features(),
        "machine": platform.machine(),
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "gpu": gpu,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "xformers": _version("xformers"),
        "sdpa": _sdpa_dispatch(),
        "timer": timer or default_timer(device),
        "tracer": active_tracer(),
        "python": platform.python_version(),
    }


# What must agree before absolute times (or a cached ceiling) of two runs mean anything. cuDNN matters beyond
# its kernels: depending on the torch and cuDNN versions torch's default SDPA dispatch puts cuDNN attention
# first on Hopper and Blackwell, so `torch_sdpa` on one card can run different kernels.
IDENTITY_FIELDS = ("cpu", "gpu", "threads", "torch", "cuda", "cudnn", "driver", "xformers", "timer", "tracer")


NOT_RECORDED = "not recorded"  # by an older sdpa-bench, or another tool: never the same as anything


def machine_identity(machine: dict) -> dict[str, str]:
    """The identity fields of a `machine_info()` dict (or of an older or partial one: missing reads "unknown", or
    "not recorded" for a field an older sdpa-bench, or another tool, did not write)."""
    gpu = machine.get("gpu")
    on_gpu = isinstance(gpu, dict)

    def field(key: str, absent: str = "none") -> str:
        return str(machine[key] or absent) if key in machine else NOT_RECORDED

    return {
        "cpu": str(machine.get("cpu") or "unknown"),
        "gpu": str(gpu.get("name") if on_gpu else gpu or "none"),
        "threads": str(machine.get("threads") or "unknown"),
        "torch": str(machine.get("torch") or "unknown"),
        "cuda": str(machine.get("cuda") or "none"),
        "cudnn": field("cudnn"),
        "driver": str(gpu.get("driver") or "unknown") if on_gpu else "none",
        "xformers": field("xformers"),
        "timer": field("timer"),
        "tracer": str(machine.get("tracer") or "none"),  # not recorded before it was: runs untraced, as most are
    }


def machine_differences(a: dict, b: dict) -> list[str]:
    """Human-readable differences between two machines' identities, e.g. "torch: 2.12.0 vs 2.13.0"."""
    ia, ib = machine_identity(a), machine_identity(b)
    return [f"{k}: {ia[k]} vs {ib[k]}" for k in ia if ia[k] != ib[k] or ia[k] in ("unknown", NOT_RECORDED)]


def machine_key(machine: dict) -> str:
    """The identity as one string, e.g. a cache key."""
    return "|".join(f"{k}={v}" for k, v in machine_identity(machine).items())


def sweep_machine(meta: dict) -> tuple[dict, list[str]]:
    """(the machine a saved sweep's results were measured on, the differences between its shards' machines). A
    sweep merged from shards of several machines has each field where they differ as all of theirs ("2 / 96"), so
    that it differs from every one machine: no absolute time or CPU peak of it is compared as one machine's."""
    machine = dict(meta.get("machine") or {})
    shards = [s.get("machine") for s in meta.get("merged_from") or () if isinstance(s, dict) and s.get("machine")]
    diffs = list(dict.fromkeys(d for m in shards for d in machine_differences(machine, m)))
    if diffs:
        for key in dict.fromkeys(k for m in shards for k in m):
            values = list(dict.fromkeys(str(m.get(key)) for m in [machine, *shards]))
            if len(values) > 1:
                machine[key] = " / ".join(values)
    return machine, diffs
