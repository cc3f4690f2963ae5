"""`sdpa-bench continuous BASE [HEAD]`: benchmark two revisions side by side in one run and judge HEAD by the gate.

    sdpa-bench continuous [BASE [HEAD]] [--base-env SPEC] [--head-env SPEC] [--env-cache DIR] [--preset NAME]
                          [--impl NAME ...] [--rounds N] [--max-time S] [--adaptive-budget S]
                          [--adaptive-rounds N] [--separate-processes] [--seed N]
                          [--config FILE] [--markdown FILE] [--json FILE] [--keep-runs DIR]

asv's name and argument order. What a side is depends on where it runs (continuous.project): in sdpa-bench's
repository, each revision of sdpa-bench, measured with its own suite; at the root of a plug-in's repository (its
pyproject.toml declares sdpa_impls entry points), each revision of the plug-in installed beside a copy of the
running sdpa-bench, whose suite measures the implementations that revision declares and the time reference; and with
--base-env / --head-env outside such a repository, the running sdpa-bench alone. BASE and HEAD are git revisions;
HEAD defaults to the working tree (uncommitted and untracked files included). Without BASE: $SDPA_CONTINUOUS_BASE,
else the fork point of HEAD from main, else HEAD~1 (continuous.revisions.ci_base). Each side is checked out into a
temporary worktree, pip-installed into its own folder (no dependencies, no network) for the interpreter of its
environment, and its suite runs in alternating processes (which side starts each round drawn from a recorded seed,
continuous.schedule) with identical settings: one thread and CPU time of the process on CPU, CUDA events on GPU.
Benchmarks still undecided after the planned rounds get more rounds of their own within --adaptive-budget
(continuous.adaptive; by default 75 s, or twice the planned rounds' time where the sides' environments differ:
continuous.comparison.choose_budget). Environments (continuous.envs): both sides run with this interpreter when the
revisions declare the same dependencies; when they differ, a side whose declaration this environment does not
satisfy gets an environment built for it (cached). --base-env / --head-env name a side's environment outright (an
interpreter, or requirements to install on top of this environment); with neither revision given, both sides are
then the working tree (or the running sdpa-bench). Where the sides' interpreters differ, the header names the
versions that differ; where torch differs (or a library its kernels call), times are compared as measured, the time
reference (torch's SDPA) judged like the rest. A row whose profiled kernels differ says so. The verdict
(continuous.verdict) is printed as a table; exit 0 pass, 1 regression, 2 unusable input (a folder that is neither
repository, a revision that does not exist, install, import or run: one message). This module only parses and
prints: the comparison itself is continuous.comparison.compare."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .. import settings
from ..bench.grid import PRESETS
from ..continuous.assemble import Request, compares_revisions
from ..continuous.comparison import Plan, compare
from ..continuous.envcache import cache_source, size_cap
from ..continuous.envlock import in_use
from ..continuous.project import find
from ..credentials import redact
from ..errors import UsageError
from .answers import answer
from .outputs import (add_measuring, config_file, folders, guarded, impl_names, seed, stopped_how,
                      terminate_as_interrupt, timed_progress, writable)


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
                             "${XDG_CACHE_HOME:-~/.cache}/sdpa-bench/envs)")
    parser.add_argument("--preset", choices=list(PRESETS), default=None,
                        help="grid preset to measure; default: ci on CPU, gpu-ci on CUDA")
    parser.add_argument("--impl", action="append", metavar="NAME",
                        help="measure only this implementation (repeat, or comma-separate); the time reference is "
                             "always added")
    add_measuring(parser)
    parser.add_argument("--seed", type=seed, default=None, metavar="N",
                        help="seed of the random order of sides, folder names and environment sizes (default: a "
                             "fresh one, printed and written to --json)")
    parser.add_argument("--config", metavar="FILE",
                        help="gate settings (TOML); default: HEAD's pyproject.toml [tool.sdpa_bench.gate]")
    parser.add_argument("--markdown", metavar="FILE", help="also write the verdict as Markdown (a PR comment)")
    parser.add_argument("--json", metavar="FILE", help="also write the verdict as JSON")
    parser.add_argument("--keep-runs", metavar="DIR",
                        help="keep every run's pytest-benchmark JSON and JUnit XML (its skips) in DIR (an earlier "
                             "comparison's run files there are removed first; refused while another comparison uses DIR)")


def run(args: argparse.Namespace) -> int:
    """Exit code: 0 pass, 1 regression, 2 for anything else (one message on stderr, no traceback): what a CI reads.
    No credential of a URL reaches any output (sdpa_impls.credentials)."""
    progress = timed_progress()

    def body() -> int:
        writable({"--markdown": args.markdown, "--json": args.json}, {"--config": args.config}, stale=True)
        config_file(args.config)  # here, not once a side has read it
        named, cache = cache_source(args.env_cache)  # the option, or $SDPA_BENCH_ENV_CACHE, or the default
        folders({"--keep-runs": args.keep_runs, named: cache}, written=("--keep-runs",))
        size_cap()  # a bad $SDPA_BENCH_ENV_CACHE_MAX_GB, before any work, not at the first build (or never)
        request = Request(args.base, args.head, args.base_env, args.head_env, args.env_cache, impl_names(args.impl),
                          args.config)
        plan = Plan(args.preset, args.rounds, args.max_time, args.adaptive_budget, args.adaptive_rounds,
                    args.round_timeout, args.seed, args.keep_runs,
                    paired=not args.separate_processes)
        plan.check()  # before the folder is looked at: a typo is named wherever the command runs
        with in_use():  # each cached environment it runs in stays locked, shared: no prune removes it meanwhile
            comparison = compare(request, plan, find(Path.cwd(), compares_revisions(request), "continuous",
                                                     (request.base, request.head or "HEAD")), progress)
        return said(comparison)

    def said(comparison, done: bool = True) -> int:  # noqa: ANN001 (a Comparison)
        answer(redact(comparison.text()), [(args.markdown, lambda: comparison.text(markdown=True)),
                                           (args.json, lambda: json.dumps(comparison.as_json(), indent=1) + "\n")])
        if done:
            progress(f"done: exit {comparison.exit_code}")
        return comparison.exit_code

    try:  # SIGTERM (a CI's time limit, a cancelled job) stops it as Ctrl-C does: its checkouts removed on the way out
        with terminate_as_interrupt():
            return guarded("continuous", body, settings.source_of(args))
    except KeyboardInterrupt as exc:
        how, code = stopped_how(exc)
        judged = getattr(exc, "comparison", None)  # the signal came as its checkouts were removed
        try:
            if judged is not None:
                said(judged, done=False)
        except (UsageError, OSError) as error:  # --json or --markdown not written: said; the signal's code stands
            print(redact(f"sdpa-bench continuous: error: {error}"), file=sys.stderr)
        print(f"sdpa-bench continuous: {how}: " + ("after judging, as its temporary checkouts were removed (now "
                                                    "gone): the verdict above stands" if judged else
                                                    "nothing was judged; its temporary checkouts are removed"),
              file=sys.stderr)
        return code
