"""`sdpa-bench gate`: fail a change that makes attention slower, bigger or wrong, and never cry wolf.

    python -m sdpa_impls gate --candidate CAND.json [--candidate AGAIN.json ...] [--baseline BASE.json] [--config FILE]
                              [--markdown FILE] [--json FILE] [--allow-different-machines]

Reads pytest-benchmark JSON files written by tests/test_benchmarks.py (save raw samples with
--benchmark-save-data), prints a table and exits 0 (pass), 1 (a regression or a wrong result) or
2 (unusable input: a missing, corrupt or truncated file, an unknown config key, nothing comparable).
Thresholds come from [tool.sdpa_bench.gate] (see gate_config); the rules live in gate_rules,
the comparison and rendering in gate_report, the file reading in gate_points.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .gate_config import load_config
from .gate_points import GateInputError, load_points
from .gate_report import compare_points, render, report_dict

EXIT_PASS, EXIT_REGRESSION, EXIT_UNUSABLE = 0, 1, 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The gate's options on its sub-command parser."""
    parser.add_argument("--candidate", required=True, action="append", metavar="CAND.json",
                        help="pytest-benchmark JSON of the change under test (--benchmark-json ... --benchmark-save-data); "
                             "repeat it with further runs of the same tree: a time regression must then show in every run")
    parser.add_argument("--baseline", metavar="BASE.json",
                        help="pytest-benchmark JSON of the reference (e.g. main); without it only correctness "
                             "and in-run ratio rules apply")
    parser.add_argument("--config", metavar="FILE",
                        help="TOML with the gate settings (a pyproject.toml's [tool.sdpa_bench.gate], or the keys "
                             "at top level); default: the nearest pyproject.toml, else built-in defaults")
    parser.add_argument("--markdown", metavar="FILE", help="also write the verdict as Markdown (e.g. a PR comment)")
    parser.add_argument("--json", metavar="FILE", help="also write the verdict as JSON")
    parser.add_argument("--allow-different-machines", action="store_true", default=None,
                        help="compare absolute times even when CPU, GPU, threads or torch differ")


def _write(path: str, text: str) -> None:
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise GateInputError(f"{path}: cannot write ({exc.strerror or exc})") from None


def run(args: argparse.Namespace) -> int:
    """Exit code: 0 pass, 1 regression, 2 unusable input (one message on stderr, no traceback)."""
    try:
        config = load_config(args.config)
        runs = [load_points(path) for path in args.candidate]
        for path, (_, points) in zip(args.candidate, runs):
            if not points:
                raise GateInputError(f"{path}: nothing comparable, the file holds no benchmarks "
                                     "(did every benchmark skip or fail?)")
        cand_machine, candidate = runs[0]
        base_machine, baseline = load_points(args.baseline) if args.baseline else ({}, None)
        if baseline is not None and not baseline:
            raise GateInputError(f"{args.baseline}: nothing comparable, the file holds no benchmarks")
        try:
            report = compare_points(baseline, candidate, config, base_machine, cand_machine,
                                    args.allow_different_machines, [points for _, points in runs[1:]])
        except GateInputError as exc:
            where = f"{args.baseline} vs {args.candidate[0]}" if args.baseline else args.candidate[0]
            raise GateInputError(f"{where}: {exc}") from None
        sys.stdout.write(render(report))
        if args.markdown:
            _write(args.markdown, render(report, markdown=True))
        if args.json:
            _write(args.json, json.dumps(report_dict(report), indent=1) + "\n")
    except GateInputError as exc:
        print(f"sdpa-bench gate: error: {exc}", file=sys.stderr)
        return EXIT_UNUSABLE
    return report.exit_code
