"""`quickstart`: write a working plug-in into a folder, as `asv quickstart` writes a benchmark suite: a package
whose entry point declares an implementation, its test against float64, a CI workflow that gates its pull
requests with `sdpa-bench continuous`, and an asv configuration for its history (sdpa_impls.scaffold)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import scaffold


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", help="the implementation's name, also its package's (default: the folder's name)")
    p.add_argument("--dest", type=Path, default=Path("."), metavar="DIR",
                   help="the folder to write into, made if missing (default: the current one)")


def run(args: argparse.Namespace) -> int:
    dest = args.dest.resolve()
    names = scaffold.names_for(args.name or dest.name)
    install, note = scaffold.requirement()
    import torch

    written = scaffold.write(dest, scaffold.files(names, install, torch.__version__, scaffold.branch(dest)))
    print(f"wrote the plug-in {names.package} into {dest}:")
    for path in written:
        print(f"  {path.relative_to(dest)}")
    if note:
        print(f"note: {note}", file=sys.stderr)
    print(f"""
next, in {dest}:
  python -m pip install --no-deps -e .   # beside this sdpa-bench and your torch
  sdpa-bench list                        # {names.package} is listed, with what it runs here
  python -m pytest                       # {names.package} against float64 on the smoke cases
  git init -q && git add -A && git commit -qm "{names.package}"   # then: sdpa-bench continuous HEAD, after a change
  asv run   # its history over commits: sdpa-bench's guide "History with asv" (asv.conf.json, benchmarks/)""")
    return 0
