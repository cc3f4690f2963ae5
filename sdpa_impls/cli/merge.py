"""`merge OUT DIR...`: join the results of `run --shard I/N` sweeps into one folder and render its report."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..bench import grid
from ..bench.machine import sweep_machine
from ..errors import UsageError
from ..fmt import path_text
from ..report import results as store
from ..report.write import write_report
from ..report.writer_lock import writer


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("out", type=Path, metavar="OUT", help="folder for the merged results.json and report")
    p.add_argument("dirs", type=Path, nargs="+", metavar="DIR", help="the --out folders of the shards")
    p.add_argument("--no-plots", action="store_true", help="write tables, CSV and report without PNGs")


def run(args: argparse.Namespace) -> int:
    if os.path.realpath(args.out) in {os.path.realpath(d) for d in args.dirs}:  # realpath: a link loop raises nothing
        raise UsageError(f"OUT {args.out} is also one of the shard folders; choose a new folder for the merge")
    finish = f"sdpa-bench report {path_text(str(args.out))}"  # what a merge stopped in its report still needs
    if (args.out / store.RESULTS_FILE).exists():
        stopped = "" if (args.out / "report.md").exists() else \
            f" (a merge stopped before its report? `{finish}` writes the rest)"
        raise UsageError(f"{args.out} already holds a results.json; choose a new folder for the merge{stopped}")
    sweeps = [(d, store.load(d)) for d in args.dirs]
    name = sweeps[0][1].meta.get("preset")
    try:
        all_ids = [c.id for c in grid.preset(name)]
    except ValueError:
        all_ids = None  # a preset this version does not know: keep the shards' order
    merged = store.merge(sweeps, all_ids)
    merged.meta.pop("no_plots", None)  # a shard's (`run --no-plots`); the merged folder's plots are this command's
    if args.no_plots:
        merged.meta["no_plots"] = True
    store.prepare_dir(args.out)
    store.save(args.out, merged)
    try:
        files = write_report(args.out, merged, plots=not args.no_plots)
    except KeyboardInterrupt:  # the merged results are whole: the rest is a `report` away, not a new merge
        print(f"sdpa-bench merge: {args.out / store.RESULTS_FILE} is saved; `{finish}` writes its tables, CSV, plots "
              "and report", file=sys.stderr)
        raise
    missing = all_ids and len(set(all_ids) - set(merged.meta["case_ids"]))  # a kept case of an older preset aside
    if missing:
        print(f"sdpa-bench merge: note: {missing} of the {len(all_ids)} cases of preset {name} are in none of these "
              f"shards (is a shard missing?)", file=sys.stderr)
    machines = sweep_machine(merged.meta)[1]
    if machines:
        print(f"sdpa-bench merge: note: the shards ran on different machines ({'; '.join(machines)}): report.md "
              "shows each shard's, and `compare` judges no absolute time or CPU peak of this sweep", file=sys.stderr)
    if not merged.complete:
        writing = {d: who for d, _ in sweeps if (who := writer(d))}
        stopped = [str(d) for d, sweep in sweeps if not sweep.complete and d not in writing]
        how = [", ".join(f"{d} ({who})" for d, who in writing.items()) + ": still being written by `run`"] if writing \
            else []
        if stopped or not writing:
            how.append("resume " + (", ".join(stopped) if writing else "the unfinished shards"
                                    + (f" ({', '.join(stopped)})" if stopped else "")))
        print(f"sdpa-bench merge: note: {len(merged.done())} of {merged.planned} planned points are finished "
              f"({'; '.join(how)}; then merge them again into a new OUT)", file=sys.stderr)
    print(f"wrote {', '.join(map(str, [args.out / store.RESULTS_FILE, *files]))}", file=sys.stderr)
    return 0
