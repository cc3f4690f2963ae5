"""Register this machine with asv under a name and a `gpu` field that carry the GPU model (asv has no GPU field).

    python -m sdpa_impls.suite.asv_machine            # writes the entry to ~/.asv-machine.json, prints its name
    python -m sdpa_impls.suite.asv_machine --dry-run  # prints the entry instead
    asv run --machine "$(python -m sdpa_impls.suite.asv_machine)" ...   # results under that name, whatever is there

asv copies every key of the entry into each result's machine.json and the published site shows them in
the machine tooltip. `asv machine --machine NAME --cpu ...` cannot do this: it has no free field and, on
a machine without an entry for its hostname, it stores only the options that differ from its defaults.
It ships in the package, beside the suite, so a project with its own asv history runs it from anywhere (running
it imports sdpa_impls, and so torch; asv only once it has parsed its options).
"""
from __future__ import annotations

import argparse
import json
import platform
import re
import sys


def machine_name(info: dict, host: str | None = None) -> str:
    """`<host>-<GPU model>` (or `<host>-cpu`), letters, digits, dot, dash and underscore only."""
    gpu = info.get("gpu")
    raw = f"{host or platform.node() or 'host'}-{gpu['name'] if gpu else 'cpu'}"
    return re.sub(r"[^A-Za-z0-9._-]+", "-", raw).strip("-")


def describe_gpu(info: dict) -> str:
    """The GPU model, memory, compute capability and driver; 'none' for a CPU run."""
    gpu = info.get("gpu")
    if not gpu:
        return "none"
    return (f"{gpu['name']}, {gpu['memory_bytes'] / 2**30:.0f} GiB, sm_{gpu['capability'].replace('.', '')}, "
            f"driver {gpu['driver'] or 'unknown'}")


def machine_entry(info: dict, defaults: dict[str, str], host: str | None = None) -> dict[str, str]:
    """asv's detected fields (os, arch, cpu, num_cpu, ram) plus our name and the `gpu` field."""
    return {**defaults, "machine": machine_name(info, host), "gpu": describe_gpu(info)}


def device_problem(device: str) -> str | None:
    """Why `device` cannot be described here (not cpu or cuda[:N], or no such CUDA device), naming what can; None
    when it can."""
    import torch

    count = torch.cuda.device_count()
    available = ", ".join(["cpu"] + (["cuda"] + [f"cuda:{i}" for i in range(count)] if count else []))
    kind, _, index = device.partition(":")
    if kind not in ("cpu", "cuda") or (index and not index.isdigit()) or (kind == "cpu" and index not in ("", "0")):
        return f"--device {device}: not a device this tool describes; available here: {available}"
    if kind == "cuda" and int(index or 0) >= count:
        return (f"--device {device}: no such CUDA device for this torch ({torch.__version__}, CUDA "
                f"{torch.version.cuda or 'none'}, {count} device(s)); available here: {available}")
    return None


def others_note(path: str, name: str) -> str:
    """What to pass asv where its machine file has entries beside `name` ('' where it has none): without --machine,
    asv takes the entry named after the host (which `asv machine --yes` writes), else the file's only one, else asks
    for a new one, and files results under it."""
    from asv import util
    from asv.machine import MachineCollection

    others = sorted(k for k in util.load_json(path, MachineCollection.api_version) if k != name)
    if not others:
        return ""
    host = platform.node()
    which = (f"an entry named after this host, {host!r}, which asv uses" if host in others else
             f"other entries ({', '.join(others)}) and none named after this host, for which asv asks")
    return (f"note: {path} also has {which} unless given the machine: pass `--machine {name}` to asv run, "
            "continuous and compare")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sdpa_impls.suite.asv_machine", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda when available)")
    parser.add_argument("--dry-run", action="store_true", help="print the entry instead of saving it")
    args = parser.parse_args(argv)
    problem = device_problem(args.device) if args.device is not None else None
    if problem:  # one line and exit 2, as argparse's own usage errors, never torch's traceback
        print(f"{parser.prog}: error: {problem}", file=sys.stderr)
        return 2
    try:
        from asv import util
        from asv.machine import Machine, MachineCollection  # deferred: keeps benchmark discovery light
    except ImportError:
        print(f"{parser.prog}: error: asv is not installed in {sys.executable} (python -m pip install asv)",
              file=sys.stderr)
        return 2
    from sdpa_impls.bench.machine import machine_info

    entry = machine_entry(machine_info(args.device), Machine.get_defaults())
    if args.dry_run:
        print(json.dumps(entry, indent=1))
        return 0
    path = MachineCollection.get_machine_file_path()
    try:  # asv reads the whole file to add the entry: one it cannot read is one line naming it, not its traceback
        MachineCollection.save(entry["machine"], entry)
        note = others_note(path, entry["machine"])
    except (OSError, ValueError, TypeError, AttributeError, util.UserError) as exc:  # not JSON, or not an object
        print(f"{parser.prog}: error: cannot add this machine to {path}: {exc} (mend or move the file)",
              file=sys.stderr)
        return 2
    print(entry["machine"])  # stdout holds the name alone: `asv run --machine "$(python -m ...)"`
    if note:
        print(note, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
