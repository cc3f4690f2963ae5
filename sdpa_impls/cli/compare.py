"""`compare DIR_A DIR_B`: two saved sweeps side by side per (case, implementation), through the gate's own rules."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..bench.machine import sweep_machine
from ..errors import GateInputError, UsageError
from ..gate.compare import compare_points
from ..gate.config import load_config
from ..gate.points import Point, points_from_results
from ..gate.render import render_verdict
from ..report import results as store
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
    """(machine, gate points) of a saved sweep; skipped points are not measurements and are left out. A sweep
    merged from shards of several machines has a machine unlike any one (`sweep_machine`)."""
    return sweep_machine(sweep.meta)[0], points_from_results((r for r in sweep.results if r.status != "skipped"),
                                                             sweep.meta.get("ceilings"))


def run(args: argparse.Namespace) -> int:
    """Prints the gate's table (A → B and B/A per point, verdicts by the gate's thresholds); exit 0.

    `compare` informs; `sdpa-bench gate` is the command that fails a change.
    """
    writable({"--markdown": args.markdown},  # before the table is printed, not after
             {"DIR_A's results": args.dir_a / store.RESULTS_FILE, "DIR_B's results": args.dir_b / store.RESULTS_FILE,
              "--config": args.config})
    if os.path.realpath(args.dir_a) == os.path.realpath(args.dir_b):  # a sweep against itself: every row the same, a pass
        raise UsageError(f"{args.dir_a} and {args.dir_b} are one sweep: compare it with another")
    sweeps = {directory: store.load(directory) for directory in (args.dir_a, args.dir_b)}
    machine_a, a = measured_points(sweeps[args.dir_a])
    machine_b, b = measured_points(sweeps[args.dir_b])
    for directory, sweep in sweeps.items():
        if not sweep.complete:  # its points not yet measured read as missing below, not as a change
            print(f"sdpa-bench compare: note: {directory} is unfinished ({len(sweep.done())} of {sweep.planned} "
                  "points): the points it lacks are not measured yet; resume it (`sdpa-bench run --out DIR "
                  "--resume`, or its shards) and compare again", file=sys.stderr)
    if not b:
        raise UsageError(f"{args.dir_b} holds no measured point to compare")
    try:
        config = load_config(args.config)
        check_time_reference(config, {p.impl for p in a + b})
    except GateInputError as exc:
        raise UsageError(str(exc)) from None
    try:
        report = compare_points(a, b, config, machine_a, machine_b, args.allow_different_machines)
    except GateInputError as exc:
        raise UsageError(f"{args.dir_a} vs {args.dir_b}: {exc}") from None
    print(f"A (baseline): {args.dir_a}\nB (candidate): {args.dir_b}\n")
    print(render_verdict(report, command="compare"), end="")
    if args.markdown:
        try:
            args.markdown.write_text(render_verdict(report, markdown=True, command="compare"), encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write {args.markdown}: {exc.strerror or exc}") from None
    return 0
