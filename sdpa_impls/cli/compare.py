"""`compare DIR_A DIR_B`: two saved sweeps side by side per (case, implementation), through the gate's own rules."""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

from ..bench import contention
from ..bench.machine import sweep_machine
from ..errors import GateInputError, UsageError
from ..gate.compare import compare_points
from ..gate.config import load_config
from ..gate.points import Point, points_from_results
from ..gate.render import render_verdict
from ..report import results as store
from ..report.tables import SweepTable
from ..report.writer_lock import writer
from .outputs import check_time_reference, writable


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir_a", type=Path, metavar="DIR_A", help="the baseline: the --out folder of a `run`")
    p.add_argument("dir_b", type=Path, metavar="DIR_B", help="the candidate: the --out folder of another `run`")
    p.add_argument("--config", metavar="FILE", help="gate thresholds (TOML); default: the nearest pyproject.toml's "
                                                     "[tool.sdpa_bench.gate], else built-in defaults")
    p.add_argument("--markdown", type=Path, metavar="FILE", help="also write the comparison as Markdown")
    p.add_argument("--allow-different-machines", action="store_true", default=None,
                   help="compare absolute times even when the machines differ (CPU, GPU, driver, threads, torch, "
                        "CUDA, cuDNN, xformers or timer)")


def measured_points(sweep: store.Sweep) -> tuple[dict, list[Point]]:
    """(machine, gate points) of a saved sweep; skipped points are not measurements and are left out. Each keeps its
    reason (what a failed point raised, how wrong a wrong one was), which the checks then say. A sweep merged from
    shards of several machines has a machine unlike any one (`sweep_machine`)."""
    measured = [r for r in sweep.results if r.status != "skipped"]
    return sweep_machine(sweep.meta)[0], points_from_results(measured, sweep.meta.get("ceilings"))


def shared_cases(dir_a: Path, dir_b: Path, sweep_a: store.Sweep, sweep_b: store.Sweep) -> tuple[set[str] | None, str]:
    """(the case ids both sweeps planned, a note naming what each ran) where they ran different presets or different
    shards of one (`run --shard I/N`), whose cases one alone has are no missing points; (None, "") for sweeps of the
    same cases. UsageError where they share no case."""
    presets = [s.meta.get("preset") for s in (sweep_a, sweep_b)]
    parts = [f"{s.meta.get('preset')}{' shard ' + str(s.meta['shard']) if s.meta.get('shard') else ''}"
             for s in (sweep_a, sweep_b)]
    if None in presets or parts[0] == parts[1]:
        return None, ""
    what = "presets" if presets[0] != presets[1] else "shards of a preset"
    ids_a, ids_b = ({*(s.meta.get("case_ids") or ()), *(r.case.id for r in s.results)} for s in (sweep_a, sweep_b))
    shared = ids_a & ids_b
    if not shared:
        raise UsageError(f"{dir_a} vs {dir_b}: nothing comparable: they ran different {what} ({parts[0]} and "
                         f"{parts[1]}) and share no case")
    alone = [f"{len(ids - shared)} of {part}'s" for ids, part in ((ids_a, parts[0]), (ids_b, parts[1]))
             if ids - shared]
    return shared, (f"A and B ran different {what} (A, {dir_a}: {parts[0]}; B, {dir_b}: {parts[1]}): only the "
                    f"{len(shared)} case(s) they share are compared" + (
                        f"; the case(s) one alone has ({' and '.join(alone)}) are left out, not missing" if alone
                        else "") + ".")


def busy_note(sides: dict[str, tuple[store.Sweep, list[Point]]]) -> str:
    """A note where points compared (those every side measured) were measured while other processes kept busy CPUs
    that torch's threads needed, by the report's own mark (`busy` in report.md's tables: `SweepTable.busy`); "" where
    none was."""
    counts = []
    compared = set.intersection(*({p.key for p in points} for _, points in sides.values()))
    for side, (sweep, _) in sides.items():
        layout = SweepTable(sweep)
        timed = [r for r in layout.results if r.status == "ok" and (r.impl, r.case.id) in compared]
        counts.append((side, sum(layout.busy(r) for r in timed), len(timed)))
    return contention.busy_note(counts, "marked `busy` in each sweep's report")


def run(args: argparse.Namespace) -> int:
    """Prints the gate's table (A → B and B/A per point, verdicts by the gate's thresholds); exit 0.

    `compare` informs; `sdpa-bench gate` is the command that fails a change.
    """
    writable({"--markdown": args.markdown},  # before the table is printed, not after; an earlier one goes now, so
             {"DIR_A's results": args.dir_a / store.RESULTS_FILE,  # that an exit 2 leaves none to read as this one's
              "DIR_B's results": args.dir_b / store.RESULTS_FILE, "--config": args.config}, stale=True)
    if os.path.realpath(args.dir_a) == os.path.realpath(args.dir_b):  # a sweep against itself: every row the same, a pass
        raise UsageError(f"{args.dir_a} and {args.dir_b} are one sweep: compare it with another")
    sweeps = {directory: store.load(directory) for directory in (args.dir_a, args.dir_b)}
    machine_a, a = measured_points(sweeps[args.dir_a])
    machine_b, b = measured_points(sweeps[args.dir_b])
    for directory, sweep in sweeps.items():
        if sweep.complete:
            continue
        if who := writer(directory):  # a `run` writing it now: the rest comes without a resume
            print(f"sdpa-bench compare: note: {directory} ({who}): still being written by `run` "
                  f"({len(sweep.done())} of {sweep.planned} points so far): the points it lacks are not measured yet; "
                  "compare again once it has finished", file=sys.stderr)
        else:  # its points not yet measured read as missing below, not as a change
            how = ("measure it again (`sdpa-bench targets --out DIR --overwrite`)" if sweep.by_targets else
                   "resume it (`sdpa-bench run --out DIR --resume`, or its shards)")
            print(f"sdpa-bench compare: note: {directory} is unfinished ({len(sweep.done())} of {sweep.planned} "
                  f"points): the points it lacks are not measured yet; {how} and compare again", file=sys.stderr)
    for directory, points in ((args.dir_a, a), (args.dir_b, b)):
        if not points:  # either side: "nothing comparable" would blame the other sweep's cases
            raise UsageError(f"{directory} holds no measured point to compare")
    shared, presets = shared_cases(args.dir_a, args.dir_b, sweeps[args.dir_a], sweeps[args.dir_b])
    if shared is not None:
        a, b = ([p for p in side if p.case_id in shared] for side in (a, b))
    try:
        config = load_config(args.config)
        check_time_reference(config, {p.impl for p in a + b})
    except GateInputError as exc:
        raise UsageError(str(exc)) from None
    try:
        report = compare_points(a, b, config, machine_a, machine_b, args.allow_different_machines)
    except GateInputError as exc:
        raise UsageError(f"{args.dir_a} vs {args.dir_b}: {exc}") from None
    busy = busy_note({"A": (sweeps[args.dir_a], a), "B": (sweeps[args.dir_b], b)})
    report = replace(report, notes=(*filter(None, [presets]), *report.notes, *filter(None, [busy])))
    print(f"A (baseline): {args.dir_a}\nB (candidate): {args.dir_b}\n")
    print(render_verdict(report, command="compare"), end="")
    if args.markdown:
        try:
            args.markdown.write_text(render_verdict(report, markdown=True, command="compare"), encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write {args.markdown}: {exc.strerror or exc}") from None
    return 0
