"""`sdpa-bench continuous BASE [HEAD]`: benchmark two revisions side by side in one run and judge HEAD by the gate.

    sdpa-bench continuous [BASE [HEAD]] [--base-env SPEC] [--head-env SPEC] [--env-cache DIR] [--preset NAME]
                          [--impl NAME ...] [--rounds N] [--max-time S] [--adaptive-budget S]
                          [--adaptive-rounds N] [--seed N]
                          [--config FILE] [--markdown FILE] [--json FILE] [--keep-runs DIR]

asv's name and argument order. What a side is depends on where it runs (continuous.project): in sdpa-bench's
repository, each revision of sdpa-bench, measured with its own suite; at the root of a plug-in's repository (its
pyproject.toml declares sdpa_impls entry points), each revision of the plug-in installed beside a copy of the
running sdpa-bench, whose suite measures the implementations that revision declares and the time reference; and
with --base-env / --head-env outside such a repository, the running sdpa-bench alone. BASE and HEAD are git
revisions; HEAD defaults to the working tree (uncommitted and untracked files included). Without BASE:
$SDPA_CONTINUOUS_BASE, else the fork point of HEAD from main, else HEAD~1 (continuous.revisions.ci_base). Each side
is checked out into a temporary worktree, pip-installed into its own folder (no dependencies, no network) for the
interpreter of its environment, and its suite runs in alternating processes (which side starts each round drawn
from a recorded seed, continuous.schedule) with identical settings: one thread and CPU time of the process on CPU,
CUDA events on GPU. Benchmarks still undecided after the planned rounds get more rounds of their own within
--adaptive-budget (continuous.adaptive). Environments (continuous.envs): both sides run with this interpreter when
the revisions declare the same dependencies; when they differ, a side whose declaration this environment does not
satisfy gets an environment built for it (cached). --base-env / --head-env name a side's environment outright (an
interpreter, or requirements to install on top of this environment); with neither revision given, both sides are
then the working tree (or the running sdpa-bench). Where the sides' interpreters differ, the header names the
versions that differ; where torch differs (or a library its kernels call), times are compared as measured, the time
reference (torch's SDPA) judged like the rest. A row whose profiled kernels differ says so. The verdict
(continuous.verdict) is printed as a table; exit 0 pass, 1 regression, 2 unusable input (a folder that is neither
repository, a revision that does not exist, install, import or run: one message).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import time
from pathlib import Path

import sdpa_impls

from ..bench.grid import PRESETS, default_device
from ..continuous.adaptive import Outcome, extend, keyword
from ..continuous.assemble import Prepared, Request, assemble, compares_revisions
from ..continuous.project import Project, find
from ..continuous.render import as_dict, render
from ..continuous.revisions import new_workdir, remove_checkout, sweep_stale
from ..continuous.schedule import Schedule
from ..continuous.sides import interleaved, run_pair
from ..credentials import redact
from ..errors import GateInputError, UsageError
from ..fmt import fmt_duration

EXIT_UNUSABLE = 2
ROUNDS, MAX_TIME, MIN_ROUNDS = 4, 0.1, 8  # per side: 4 processes of the ci preset fit CI's 5 minutes on 2 cores
# seconds of extra rounds for undecided benchmarks, after the planned rounds: 75 keeps the ci preset's comparison within
# about 5 minutes on a 2-core CPU, one or two extra rounds (docs/records/2026-11-24-epyc-continuous-trials.md)
ADAPTIVE_BUDGET = 75.0
ROUND_TIMEOUT = 1800.0  # one process of one side: the ci preset takes ~25 s, the quick preset with six implementations
                        # more than 600 s on a 2-core CPU


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("base", nargs="?", metavar="BASE",
                        help="the revision to compare with (e.g. main); default: $SDPA_CONTINUOUS_BASE, else the "
                             "fork point of HEAD from main, else HEAD~1")
    parser.add_argument("head", nargs="?", metavar="HEAD", help="the revision under test; default: the working tree")
    parser.add_argument("--base-env", metavar="SPEC",
                        help="base's environment: an interpreter (or a virtual environment's folder), or requirements "
                             "installed on top of this environment, e.g. 'torch==2.14.1' or './my-plugin' (built "
                             "once, cached); with no BASE, both sides run the working tree")
    parser.add_argument("--head-env", metavar="SPEC", help="head's environment, as --base-env")
    parser.add_argument("--env-cache", metavar="DIR",
                        help="where built environments are kept (default: $SDPA_BENCH_ENV_CACHE, else "
                             "~/.cache/sdpa-bench/envs)")
    parser.add_argument("--preset", choices=list(PRESETS), default=None,
                        help="grid preset to measure; default: ci on CPU, gpu-ci on CUDA")
    parser.add_argument("--impl", action="append", metavar="NAME",
                        help="measure only this implementation (repeatable); the time reference is always added")
    parser.add_argument("--rounds", type=int, default=ROUNDS,
                        help=f"processes per side, alternating (default {ROUNDS}): more, shorter runs spread a slow "
                             "period of the machine thinner")
    parser.add_argument("--max-time", type=float, default=MAX_TIME, metavar="S",
                        help=f"pytest-benchmark's --benchmark-max-time per benchmark and process (default {MAX_TIME})")
    parser.add_argument("--adaptive-budget", type=float, default=ADAPTIVE_BUDGET, metavar="S",
                        help=f"seconds of extra rounds (base and head again, undecided benchmarks only) after the "
                             f"planned ones, until each benchmark is decided (default {ADAPTIVE_BUDGET:g}; 0: none)")
    parser.add_argument("--adaptive-rounds", type=int, default=None, metavar="N",
                        help="at most N extra rounds within the budget (default: as many as fit; a number of rounds "
                             "is the same on any machine, a budget in seconds is not)")
    parser.add_argument("--round-timeout", type=float, default=ROUND_TIMEOUT, metavar="S",
                        help=f"the longest one side's benchmark process may run before the comparison stops with exit "
                             f"2 (default {ROUND_TIMEOUT:g}; a large preset on a slow CPU needs more)")
    parser.add_argument("--seed", type=int, default=None, metavar="N",
                        help="seed of the random order of sides, folder names and environment sizes (default: a "
                             "fresh one, printed and written to --json)")
    parser.add_argument("--config", metavar="FILE",
                        help="gate settings (TOML); default: HEAD's pyproject.toml [tool.sdpa_bench.gate]")
    parser.add_argument("--markdown", metavar="FILE", help="also write the verdict as Markdown (a PR comment)")
    parser.add_argument("--json", metavar="FILE", help="also write the verdict as JSON")
    parser.add_argument("--keep-runs", metavar="DIR", help="keep the pytest-benchmark JSON of every run in DIR")


def _pytest_args(args: argparse.Namespace, cpu: bool) -> list[str]:
    preset = args.preset or ("ci" if cpu else "gpu-ci")  # gpu-ci: calls long enough to time kernels, not launches
    out = ["--sdpa-preset", preset, f"--benchmark-max-time={args.max_time:g}", f"--benchmark-min-rounds={MIN_ROUNDS}"]
    if cpu:  # CPU time of the one-thread process: time spent waiting for the other core's work does not count
        out.append("--benchmark-timer=time.process_time")
    return out


def _write(path: str, text: str) -> None:
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(redact(text), encoding="utf-8")
    except OSError as exc:
        raise GateInputError(f"{path}: cannot write ({exc.strerror or exc})") from None


def _measure(args: argparse.Namespace, sides: Prepared, schedule: Schedule, work: Path, progress
             ) -> tuple[Outcome, float]:
    """The planned rounds, then the adaptive ones: the verdict over all of them, and the planned rounds' seconds."""
    cpu = default_device() == "cpu"
    base, head, config = sides.base, sides.head, sides.config
    pytest_args = _pytest_args(args, cpu)
    if sides.as_measured:  # the reference's code changed with torch: it is measured and judged like the rest
        config = dataclasses.replace(config, time_reference="")
    runs = Path(args.keep_runs) if args.keep_runs else work / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    base_runs, head_runs, failed = interleaved(base, head, args.rounds, pytest_args, cpu, runs, schedule, progress,
                                               args.round_timeout)
    planned_s = time.monotonic() - start
    per_round = planned_s / args.rounds

    def extra(terms: list[str], index: int) -> tuple[list, list, list[str]]:
        try:
            selected = ["-k", keyword(terms)]
        except ValueError as exc:
            raise GateInputError(f"adaptive round {index}: {exc}") from None
        return run_pair(base, head, schedule, pytest_args + selected, cpu, runs, f"a{index}", args.round_timeout,
                        progress)

    # the first extra round is expected to take as long as a planned one (it measures fewer benchmarks, but each
    # process still starts, imports torch and samples the ceilings): the budget is not overrun by guessing low
    return extend(base_runs, head_runs, failed, config, extra, args.adaptive_budget, first_estimate_s=per_round,
                  progress=progress, max_rounds=args.adaptive_rounds), planned_s


def _timing(setup_s: float, planned_s: float, rounds: int, adaptive_s: float, total_s: float) -> tuple[dict, str]:
    """Where the run's time went, for --json and as a note: a CI budget or a shortened trial is sized from it."""
    timing = {"total_s": round(total_s, 1), "setup_s": round(setup_s, 1), "planned_s": round(planned_s, 1),
              "per_round_s": round(planned_s / rounds, 1), "adaptive_s": round(adaptive_s, 1)}
    return timing, (f"time: {fmt_duration(total_s)} in all: {fmt_duration(setup_s)} to check out, install and import "
                    f"both sides, {fmt_duration(planned_s)} for {rounds} planned round(s) "
                    f"({fmt_duration(planned_s / rounds)} a round), {fmt_duration(adaptive_s)} of adaptive rounds.")


def _compare(args: argparse.Namespace, project: Project, work: Path, progress) -> int:
    for role in ("base", "head"):  # `sdpa-bench continuous "$UNSET"` must not compare what nobody asked for
        if getattr(args, role) is not None and not getattr(args, role).strip():
            raise UsageError(f"{role.upper()} is an empty revision name: name a revision, or leave it out")
    if args.rounds < 1:
        raise UsageError("--rounds should be at least 1")
    if args.adaptive_budget < 0:
        raise UsageError("--adaptive-budget should be at least 0 seconds")
    if args.round_timeout <= 0:
        raise UsageError("--round-timeout should be more than 0 seconds")
    if args.adaptive_rounds is not None and args.adaptive_rounds < 1:
        raise UsageError("--adaptive-rounds should be at least 1")
    try:
        schedule = Schedule(args.seed) if args.seed is not None else Schedule.fresh()
    except ValueError as exc:
        raise UsageError(f"--seed: {exc}") from None
    progress(f"seed {schedule.seed}: order of sides, folder names and environment sizes drawn from it "
             f"(--seed {schedule.seed} repeats them)")
    folders = schedule.folders()
    start = time.monotonic()
    request = Request(args.base, args.head, args.base_env, args.head_env, args.env_cache, tuple(args.impl or ()),
                      args.config)
    sides = assemble(request, project, work, folders, progress)
    base, head, env_notes = sides.base, sides.head, sides.notes
    setup_s = time.monotonic() - start
    outcome, planned_s = _measure(args, sides, schedule, work, progress)
    timing, timing_note = _timing(setup_s, planned_s, args.rounds, outcome.adaptive.spent_s, time.monotonic() - start)
    report = outcome.report
    first = ", ".join(schedule.orders)
    run_notes = [f"seed {schedule.seed}: first side of each round {first}; side folders {folders[0]} (base) and "
                 f"{folders[1]} (head); each process's environment padded to a random size.",
                 outcome.adaptive.note(), timing_note]
    run_info = {"seed": schedule.seed, "first_side": list(schedule.orders), "folders": list(folders),
                "planned_rounds": args.rounds,
                "environments": {s.role: s.python for s in (base, head)},
                "project": {"kind": project.kind, "root": str(project.root or ""), "package": project.package,
                            "sdpa_bench": sdpa_impls.__version__,
                            "impls": {s.role: list(s.impls) for s in (base, head)}},
                "adaptive": dataclasses.asdict(outcome.adaptive), "timing": timing}
    sys.stdout.write(redact(render(report, base.name, head.name, run_notes=run_notes, header=env_notes,
                                   about=sides.about)))
    if args.markdown:
        _write(args.markdown, render(report, base.name, head.name, markdown=True, run_notes=run_notes,
                                     header=env_notes, about=sides.about))
    if args.json:
        run_info["environment_notes"] = env_notes
        _write(args.json, json.dumps(as_dict(report, base.name, head.name, run_info), indent=1) + "\n")
    return report.exit_code


def run(args: argparse.Namespace) -> int:
    """Exit code: 0 pass, 1 regression, 2 for anything else (one message on stderr, no traceback): what a CI reads.
    No credential of a URL reaches any output (sdpa_impls.credentials)."""
    start = time.perf_counter()

    def progress(text: str) -> None:
        print(redact(f"[{fmt_duration(time.perf_counter() - start):>5}] {text}"), file=sys.stderr, flush=True)

    work, project = None, None
    try:
        project = find(Path.cwd(), compares_revisions(args))
        for left in sweep_stale(project.root):
            progress(f"removed {left}, left by a run that was stopped")
        work = new_workdir()
        code = _compare(args, project, work, progress)
        progress(f"done: exit {code}")
        return code
    except UsageError as exc:  # GateInputError included: a side that does not install, import or run
        print(redact(f"sdpa-bench continuous: error: {exc}"), file=sys.stderr)
        return EXIT_UNUSABLE
    except Exception as exc:  # not the answer: never exit 1 (a regression) nor a traceback
        if os.environ.get("SDPA_BENCH_TRACEBACK"):
            raise
        first = (str(exc).strip().splitlines() or [""])[0]
        print(redact(f"sdpa-bench continuous: error: {type(exc).__name__}: {first}"), file=sys.stderr)
        return EXIT_UNUSABLE
    finally:
        if work is not None:
            for tree in work.glob("*/tree"):
                if project is not None and project.root is not None and (tree / ".git").is_file():  # a worktree
                    remove_checkout(project.root, tree)
            shutil.rmtree(work, ignore_errors=True)
