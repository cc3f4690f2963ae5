"""Register this machine with asv under a name and a `gpu` field that carry the GPU model (asv has no GPU field).

    python -m sdpa_impls.suite.asv_machine            # writes the entry to ~/.asv-machine.json, prints its name
    python -m sdpa_impls.suite.asv_machine --dry-run  # prints the entry instead

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sdpa_impls.suite.asv_machine", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--dry-run", action="store_true", help="print the entry instead of saving it")
    args = parser.parse_args(argv)
    from asv.machine import Machine, MachineCollection  # deferred: keeps benchmark discovery light

    from sdpa_impls.bench.machine import machine_info

    entry = machine_entry(machine_info(args.device), Machine.get_defaults())
    if args.dry_run:
        print(json.dumps(entry, indent=1))
        return 0
    MachineCollection.save(entry["machine"], entry)
    print(entry["machine"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
