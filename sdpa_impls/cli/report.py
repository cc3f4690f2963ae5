"""`report DIR`: re-render the table, results.csv, the plots and report.md from a saved results.json."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..report import results as store
from ..report.write import write_report


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", type=Path, metavar="DIR", help="the --out folder of a `run` (or of a `merge`)")
    p.add_argument("--no-plots", action="store_true", help="write tables, CSV and report without PNGs")


def run(args: argparse.Namespace) -> int:
    sweep = store.load(args.dir)
    store.prepare_dir(args.dir)
    files = write_report(args.dir, sweep, plots=not args.no_plots)
    print(f"wrote {', '.join(map(str, files))}", file=sys.stderr)
    return 0
