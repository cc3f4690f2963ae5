"""`sdpa-bench bisect GOOD [BAD]`: find the commit that made attention slower, or say that nothing did.

    sdpa-bench bisect GOOD [BAD] [--impl NAME ...] [-k EXPR] [--from VERDICT.json] [--preset NAME]
                      [--package NAME [--versions V1,V2,...] [--pre]]
                      [--rounds N] [--max-time S] [--adaptive-budget S] [--adaptive-rounds N] [--round-timeout S]
                      [--separate-processes] [--seed N] [--env-cache DIR] [--config FILE] [--markdown FILE] [--json FILE]
                      [--resume FILE]

Runs in sdpa-bench's repository or at the root of a plug-in's, as `continuous` does; BAD defaults to HEAD. With
--package, GOOD and BAD are versions of that package and the search is over its releases between them, from any
folder (continuous.lines). Every
step is one `continuous` comparison of two commits, restricted to the rows under test (continuous.bisect says how
steps are judged and searched). Exit 0 no regression between GOOD and BAD, 1 culprit found and confirmed, 3 GOOD and
BAD differ but the culprit was not pinned down (the commits it is among are named), 4 undecided (no row slower, some
the endpoints could not tell apart), 2 unusable input. With --json, the file holds every finished step as soon as it
is measured (answer "in progress", then "interrupted" after Ctrl-C, SIGTERM or SIGHUP, exit 130, 143 or 129), and
--resume takes an earlier search's steps from such a file instead of measuring them again. This module only parses
and prints.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from .. import settings
from ..bench.grid import PRESETS, default_device
from ..continuous.bisect import search
from ..continuous.bisect_answer import Query, Search
from ..continuous.bisect_replay import INTERRUPTED, IN_PROGRESS, load_replay
from ..continuous.bisect_render import as_dict, render
from ..continuous.comparison import Plan
from ..continuous.envcache import cache_source, size_cap
from ..continuous.project import find
from ..continuous.steps import rows_from_verdict, rows_outside
from ..credentials import redact
from ..errors import UsageError
from ..fmt import option_text
from .answers import answer, write
from .outputs import (add_measuring, config_file, folders, guarded, impl_names, seed, stopped_how,
                      terminate_as_interrupt, timed_progress, writable)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("good", metavar="GOOD", help="a revision known to be fast (e.g. the last release's tag); "
                                                     "with --package, a version")
    parser.add_argument("bad", nargs="?", default=None, metavar="BAD",
                        help="a later revision known to be slower (default: HEAD); GOOD must be its ancestor; with "
                             "--package, a later version (required)")
    line = parser.add_argument_group("releases of a package instead of commits")
    line.add_argument("--package", metavar="NAME",
                      help="search the releases of this package (e.g. torch) from GOOD to BAD: the same code on both "
                           "sides, each side this environment with that release installed on top (built once, "
                           "cached in --env-cache)")
    line.add_argument("--versions", metavar="V1,V2,...",
                      help="the releases to search, instead of those the package index offers (pip index versions)")
    line.add_argument("--pre", action="store_true", help="include pre-releases and nightlies the index offers")
    what = parser.add_argument_group("what to measure (default: the preset's benchmarks of every implementation, or "
                                     "a plug-in's own)")
    what.add_argument("--impl", action="append", metavar="NAME",
                      help="measure only this implementation (repeat, or comma-separate); the time reference is "
                           "always added")
    what.add_argument("-k", dest="select", metavar="EXPR",
                      help="pytest -k expression over the suite's test names, e.g. 'L1024 and fwd' or "
                           "'naive-L512-E64-fp32-fwd'")
    what.add_argument("--from", dest="from_verdict", metavar="FILE",
                      help="search for the rows a `continuous --json` verdict found slower or bigger (peak memory)")
    what.add_argument("--preset", choices=list(PRESETS), default=None,
                      help="grid preset to measure; default: ci on CPU, gpu-ci on CUDA")
    each = parser.add_argument_group("each comparison (as `continuous`)")
    add_measuring(each)
    each.add_argument("--seed", type=seed, default=None, metavar="N",
                      help="seeds the comparisons' order of sides: step i, as the progress lines number them from 1, "
                           "uses N+i (default: fresh ones)")
    parser.add_argument("--env-cache", metavar="DIR",
                        help="where built environments are kept: the releases of --package, and revisions that "
                             "declare other dependencies (default: $SDPA_BENCH_ENV_CACHE, else "
                             "${XDG_CACHE_HOME:-~/.cache}/sdpa-bench/envs)")
    parser.add_argument("--config", metavar="FILE",
                        help="gate settings (TOML); default: each step's head's pyproject.toml [tool.sdpa_bench.gate]")
    parser.add_argument("--markdown", metavar="FILE", help="also write the answer as Markdown")
    parser.add_argument("--json", metavar="FILE",
                        help="also write the answer as JSON; every finished step is saved there as soon as it is "
                             "measured, for --resume")
    parser.add_argument("--resume", metavar="FILE",
                        help="take the steps of an earlier search of the same GOOD and BAD, with the same settings, "
                             "from its --json (interrupted or finished) instead of measuring them again")


def run(args: argparse.Namespace) -> int:
    """Exit code: 0 no regression, 1 culprit, 3 not pinned down, 4 undecided, 2 for anything else (one message, no
    traceback)."""
    progress = timed_progress()

    def body() -> int:
        if args.from_verdict and args.select:
            raise UsageError("--from and -k both choose the rows: give one")
        # before a search of many minutes, not after; an earlier answer is removed, so that a run that gives none
        # leaves none for a CI step to read as this one's, except the --resume file, which --json may go on writing
        resumed = args.json and args.resume and os.path.realpath(args.json) == os.path.realpath(args.resume)
        if args.json and os.path.exists(args.json) and not os.path.isfile(args.json):
            raise UsageError(f"--json {args.json}: not a file (the search so far replaces it after every step): "
                             "give a file's path")
        writable({"--markdown": args.markdown, "--json": None if resumed else args.json},
                 {"--from": args.from_verdict, "--config": args.config, "--resume": args.resume}, stale=True)
        config_file(args.config)  # here, not once a side has read it
        named, cache = cache_source(args.env_cache)  # the option, or $SDPA_BENCH_ENV_CACHE, or the default
        folders({named: cache})
        size_cap()  # a bad $SDPA_BENCH_ENV_CACHE_MAX_GB, before any work, not at the first build (or never)
        rows = rows_from_verdict(args.from_verdict) if args.from_verdict else ()
        if args.package and args.bad is None:
            raise UsageError("--package needs BAD: the later version, known to be slower")
        if (args.versions or args.pre) and not args.package:
            raise UsageError("--versions and --pre choose releases: give --package too")
        if args.versions and args.pre:
            raise UsageError("--pre chooses among the releases the index offers, --versions names them: give one")
        versions = None if args.versions is None else tuple(v.strip() for v in args.versions.split(","))
        if versions is not None and not all(versions):  # ' , ' is no list of releases, '1.0,,1.1' a typo
            raise UsageError(f"--versions {args.versions!r}: " + ("an empty name between commas" if any(versions)
                                                                  else "names no release"))
        bad = "HEAD" if args.bad is None else args.bad  # an empty BAD is refused, never read as HEAD
        query = Query(args.good, bad, impl_names(args.impl), args.select, rows, args.env_cache, args.config,
                      args.package, versions, args.pre, tuple(_options(args.argv)))
        plan = Plan(args.preset, args.rounds, args.max_time, args.adaptive_budget, args.adaptive_rounds,
                    args.round_timeout, args.seed, paired=not args.separate_processes)
        plan.check()  # a typo named before a resumed search is read or any revision looked at
        outside = rows_outside(rows, plan.preset_name(default_device() == "cpu"), args.from_verdict) if rows else []
        if outside:  # measured nowhere in this search: said before it starts, not left out without a word
            progress(f"warning: --from {args.from_verdict}: {len(outside)} of its {len(rows)} rows are not in this "
                     f"search's preset, so not searched: {', '.join(outside[:3])}{', ...' if len(outside) > 3 else ''}")
        replay = load_replay(args.resume, query, plan) if args.resume else None
        so_far: list[Search] = []

        def saved(partial: Search) -> None:  # every finished step on disk as soon as it is measured
            so_far[:] = [partial]
            if args.json:
                _save(args.json, partial, IN_PROGRESS)
        try:
            with terminate_as_interrupt():
                project = find(Path.cwd(), not args.package, "bisect", (args.good, bad))
                result = search(query, plan, project, progress, replay, saved)
        except KeyboardInterrupt as exc:
            return _interrupted(args, so_far[0] if so_far else None, exc)
        if args.json:  # the search's record (--resume reads it), kept whatever happens after
            _save(args.json, result)
        answer(redact(render(result)), [(args.markdown, lambda: render(result, markdown=True))])
        progress(f"done: {result.answer}, exit {result.exit_code}")
        return result.exit_code

    return guarded("bisect", body, settings.source_of(args))


def _save(path: str, search: Search, unfinished: str | None = None) -> None:
    """The answer, or the search so far (`unfinished`), replacing `path` whole (a reader never sees half a file)."""
    temporary = f"{path}.partial"
    write(temporary, json.dumps(as_dict(search, unfinished), indent=1) + "\n")
    os.replace(temporary, path)


OUTPUTS = ("--resume", "--json", "--markdown")  # this search's own files: not those of a search it suggests


def _options(argv: Sequence[str]) -> list[str]:
    """The options of the command line as given, without GOOD and BAD and without OUTPUTS: what a search the answer
    suggests (among a merge's commits) repeats, so that it measures as this one did."""
    return _less(argv, OUTPUTS, positionals=False)


def _without_resume(argv: Sequence[str]) -> list[str]:
    """The command line as given, less a --resume of its own (`--resume FILE` or `--resume=FILE`)."""
    return _less(argv, ("--resume",), positionals=True)


def _less(argv: Sequence[str], dropped: Sequence[str], positionals: bool) -> list[str]:
    """`argv` without the options named in `dropped` (each with its value: `--opt VALUE`, `--opt=VALUE`, `-kVALUE`),
    and without GOOD and BAD unless `positionals`."""
    out, i = [], 0
    while i < len(argv):
        arg = argv[i]
        name = arg.split("=", 1)[0]
        glued = arg.startswith("-") and not arg.startswith("--") and len(arg) > 2  # -kVALUE
        takes = arg.startswith("-") and "=" not in arg and not glued and arg not in _flags()  # its value is next
        step = 2 if takes else 1
        if name not in dropped and (positionals or arg.startswith("-")):
            out += argv[i:i + step]
        i += step
    return out


@functools.lru_cache(maxsize=None)
def _flags() -> frozenset[str]:
    """bisect's options that take no value (--pre, --separate-processes, ...)."""
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    settings.add_opposites(parser)
    return frozenset(o for a in parser._actions if a.nargs == 0 for o in a.option_strings)


def _pinned(argv: list[str], args: argparse.Namespace, partial: Search) -> list[str]:
    """`argv` with GOOD and BAD as the search resolved them (full hashes, BAD added where it was left to default):
    HEAD~6 or a branch names other commits once the branch moves on, and --resume then refuses the steps. As given
    where either cannot be told apart from another argument of the same text."""
    good, bad = partial.ids.get(partial.good), partial.ids.get(partial.bad)
    out = list(argv)
    if not good or not bad or out.count(args.good) != 1 or (args.bad is not None and out.count(args.bad) != 1):
        return out
    at = out.index(args.good)
    if args.bad is None:
        out.insert(at + 1, bad)
    else:
        out[out.index(args.bad)] = bad
    out[at] = good
    return out


def _interrupted(args: argparse.Namespace, partial: Search | None, stop: BaseException) -> int:
    """Ctrl-C, SIGTERM or SIGHUP: the finished steps saved (--json) or printed, and how to go on as the last line."""
    how, code = stopped_how(stop)
    steps = len(partial.steps) if partial else 0
    if partial is not None and args.json:
        _save(args.json, partial, INTERRUPTED)
        again = ["sdpa-bench", *_pinned(_without_resume(args.argv), args, partial),
                 *shlex.split(option_text("--resume", args.json))]
        said = f"{steps} finished step(s) are saved in {args.json}; continue with: {shlex.join(again)}"
    elif partial is not None and steps:
        sys.stdout.write(redact(render(partial, unfinished=INTERRUPTED)))  # not lost; without --json, not resumable
        said = f"{steps} finished step(s) are printed above; with --json FILE they are saved for --resume"
    else:
        said = "no step had finished"
    print(redact(f"sdpa-bench bisect: {how}; {said}"), file=sys.stderr)
    return code
