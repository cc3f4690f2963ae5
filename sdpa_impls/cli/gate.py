"""`sdpa-bench gate`: fail a change that makes attention slower, bigger or wrong, and never cry wolf.

    python -m sdpa_impls gate --candidate CAND.json [--baseline BASE.json] [--config FILE]
                              [--markdown FILE] [--json FILE] [--allow-different-machines]

Reads pytest-benchmark JSON files written by tests/test_benchmarks.py (save raw samples with
--benchmark-save-data). --candidate and --baseline repeat for further runs (separate processes, one
machine) of the same tree: a time regression must then show between every baseline and candidate run.
Prints a table and exits 0 (pass), 1 (a regression or a wrong result) or 2 (unusable input: a missing,
corrupt or truncated file, an interrupted session's file, one file as both sides, runs of two presets, an unknown
config key, nothing comparable).
Thresholds come from [tool.sdpa_bench.gate] (see gate.config); the rules live in gate.rules, the
comparison in gate.compare, the rendering in gate.render, the file reading in gate.points.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

from ..bench import contention
from ..bench.machine import machine_differences
from ..errors import GateInputError
from ..gate.compare import compare_points
from ..gate.config import load_config
from ..gate.points import load_points
from ..gate.render import render_verdict, verdict_dict
from .answers import answer
from .outputs import check_time_reference, writable

EXIT_PASS, EXIT_REGRESSION, EXIT_UNUSABLE = 0, 1, 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The gate's options on its sub-command parser."""
    parser.add_argument("--candidate", required=True, action="append", metavar="CAND.json",
                        help="pytest-benchmark JSON of the change under test (--benchmark-json ... --benchmark-save-data); "
                             "repeat it for further runs of the same tree: a time regression must then show in every "
                             "pair of baseline and candidate runs")
    parser.add_argument("--baseline", action="append", metavar="BASE.json",
                        help="pytest-benchmark JSON of the reference (e.g. main), repeatable like --candidate; "
                             "without it only correctness and in-run ratio rules apply")
    parser.add_argument("--config", metavar="FILE",
                        help="TOML with the gate settings (a pyproject.toml's [tool.sdpa_bench.gate], or the keys "
                             "at top level); default: the nearest pyproject.toml, else built-in defaults")
    parser.add_argument("--markdown", metavar="FILE", help="also write the verdict as Markdown (e.g. a PR comment)")
    parser.add_argument("--json", metavar="FILE", help="also write the verdict as JSON")
    parser.add_argument("--allow-different-machines", action="store_true", default=None,
                        help="compare absolute times even when the machines differ (CPU, GPU, driver, threads, "
                             "torch, CUDA, cuDNN, xformers or timer; config: allow_different_machines)")


def _same_preset(args: argparse.Namespace, runs: list, bases: list, allow_missing: bool) -> None:
    """GateInputError naming the first two files given (candidates first) that ran different presets of the suite
    (their cases differ, and each case of one alone would read as a missing benchmark, or go unjudged in a further
    run of the same tree), unless allow_missing judges the shared ones."""
    files = [(path, {p.preset for p in points if p.preset})
             for path, (_, points) in zip([*args.candidate, *(args.baseline or ())], [*runs, *bases])]
    files = [(path, presets) for path, presets in files if presets]
    other = next(((path, presets) for path, presets in files[1:] if presets != files[0][1]), None)
    if other is not None and not allow_missing:
        (first, theirs), (path, presets) = files[0], other
        raise GateInputError(f"{first} ran the preset {', '.join(sorted(theirs))} and {path} "
                             f"{', '.join(sorted(presets))}: their cases differ; compare runs of one preset (or set "
                             "allow_missing = true to judge the cases they share)")


def given_once(candidates: list[str], baselines: list[str]) -> None:
    """GateInputError naming the first file (by its real path) given twice, under one flag or under both."""
    seen: dict[str, str] = {}
    for flag, path in [*(("--candidate", c) for c in candidates), *(("--baseline", b) for b in baselines)]:
        real = os.path.realpath(path)
        if real not in seen:
            seen[real] = flag
        elif seen[real] == flag:  # one process read twice is no second run: the every-pair rule would count it once
            raise GateInputError(f"{flag} {path}: given twice; each {flag} is a run of its own process")
        else:  # a run against itself passes whatever it holds, and beside other runs it hides their regression
            raise GateInputError(f"{path}: given as both --baseline and --candidate; a run compared with itself "
                                 "says nothing about the change")


def _busy(machine: dict, points: list, compared: set | None) -> tuple[int, int]:
    """(busy, timed): the timed points (of `compared`, the keys both sides measured, where a baseline is given)
    measured while other processes kept busy CPUs torch's threads needed."""
    timed = [p for p in points
             if p.status == "ok" and p.median_s is not None and (compared is None or p.key in compared)]
    threads = machine.get("threads") if isinstance(machine.get("threads"), int) else 1
    cpus = machine.get("cpus") if isinstance(machine.get("cpus"), int) else None
    return sum(contention.contended(p.other_cpus, threads, cpus) for p in timed), len(timed)


def run(args: argparse.Namespace) -> int:
    """Exit code: 0 pass, 1 regression, 2 unusable input (one message on stderr, no traceback)."""
    try:
        writable({"--markdown": args.markdown, "--json": args.json},  # before the verdict: a path that cannot be
                 {"--config": args.config, **{f"--candidate {c}": c for c in args.candidate},  # written is no verdict
                  **{f"--baseline {b}": b for b in args.baseline or ()}}, stale=True)
        config = load_config(args.config)
        given_once(args.candidate, args.baseline or [])
        missing = [str(path) for path in [*(args.baseline or ()), *args.candidate] if not os.path.lexists(path)]
        if missing:  # every one named at once, not one a try
            raise GateInputError(f"{', '.join(missing)}: no such file{'s' if len(missing) > 1 else ''} (pytest-benchmark "
                                 "writes none where no benchmark was timed: every one failed or skipped, or "
                                 "--benchmark-disable)")
        others: dict[str, list[str]] = {str(path): [] for path in [*args.candidate, *(args.baseline or ())]}
        runs = [load_points(path, others[str(path)], session=True) for path in args.candidate]
        cand_machine, candidate = runs[0]
        bases = [load_points(path, others[str(path)], session=True) for path in args.baseline or ()]
        for path, (_, points) in zip(args.candidate + (args.baseline or []), runs + bases):
            if not points and others[str(path)]:
                raise GateInputError(f"{path}: nothing comparable, none of its {len(others[str(path)])} benchmarks "
                                     f"comes from sdpa-bench's suite (e.g. {others[str(path)][0]})")
            if not points:
                raise GateInputError(f"{path}: nothing comparable, the file holds no benchmarks "
                                     "(did every benchmark skip or fail?)")
        for path, names in others.items():  # a session that ran other benchmarks beside the suite's
            names = list(dict.fromkeys(names))  # a file given twice (as baseline and candidate) is named once
            if names:
                print(f"sdpa-bench gate: {path}: left out {len(names)} benchmark{'s' if len(names) > 1 else ''} "
                      f"not from sdpa-bench's suite ({', '.join(names[:3])}"
                      f"{', ...' if len(names) > 3 else ''})", file=sys.stderr)
        for paths, group in ((args.candidate, runs), (args.baseline or [], bases)):
            for path, (machine, _) in zip(paths[1:], group[1:]):
                diffs = machine_differences(group[0][0], machine)
                if diffs:
                    raise GateInputError(f"{path} comes from another machine than {paths[0]} ({'; '.join(diffs)}); "
                                         "repeated runs must come from one machine")
        check_time_reference(config, {p.impl for _, points in runs + bases for p in points})
        _same_preset(args, runs, bases, bool(config.settings.get("allow_missing")))
        base_machine, baseline = bases[0] if bases else ({}, None)
        try:
            report = compare_points(baseline, candidate, config, base_machine, cand_machine,
                                    args.allow_different_machines, [points for _, points in runs[1:]],
                                    [points for _, points in bases[1:]])
        except GateInputError as exc:
            where = f"{args.baseline[0]} vs {args.candidate[0]}" if args.baseline else args.candidate[0]
            raise GateInputError(f"{where}: {exc}") from None
        compared = {p.key for p in baseline} & {p.key for p in candidate} if baseline is not None else None
        counts = [(side + (f" ({len(group)} runs)" if len(group) > 1 else ""),
                   *(sum(n) for n in zip(*(_busy(*side_run, compared) for side_run in group))))
                  for side, group in (("baseline", bases), ("candidate", runs)) if group]
        busy = contention.busy_note(counts, "the JSON's extra_info.other_cpus")
        report = dataclasses.replace(report, notes=(*report.notes, *filter(None, [busy])))
        answer(render_verdict(report), [(args.markdown, lambda: render_verdict(report, markdown=True)),
                                        (args.json, lambda: json.dumps(verdict_dict(report), indent=1) + "\n")])
    except GateInputError as exc:
        print(f"sdpa-bench gate: error: {exc}", file=sys.stderr)
        return EXIT_UNUSABLE
    return report.exit_code
