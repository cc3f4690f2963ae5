"""`envs`: the environments `continuous` built and cached (--base-env / --head-env, or what a revision declares),
with their size and last use; `--prune` removes those unused for a while, the least recently used beyond a size cap,
and the remains of dead builds, with the lock files of what it removed."""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from .. import settings
from ..continuous.envcache import (LARGEST_GB, MAX_AGE_DAYS, MAX_SIZE_ENV, RECENT_S, cache_source, entries,
                                   open_cache, prune, size_cap)
from ..errors import UsageError
from ..fmt import fmt_bytes, fmt_duration, table


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env-cache", metavar="DIR", type=Path,
                   help="the cache (default: $SDPA_BENCH_ENV_CACHE, else "
                        "${XDG_CACHE_HOME:-~/.cache}/sdpa-bench/envs)")
    p.add_argument("--prune", action="store_true",
                   help="remove the environments unused for --older-than days, then the least recently used while "
                        "the cache holds more than --max-gb, and the remains of dead builds (lock files too)")
    p.add_argument("--older-than", type=float, default=None, metavar="DAYS",
                   help=f"with --prune: unused for more than this many days (default {MAX_AGE_DAYS:g}, which "
                        "`continuous` and `bisect` also remove by themselves after each build; 0: every one not in "
                        "use now)")
    p.add_argument("--max-gb", type=float, default=None, metavar="GB",
                   help=f"with --prune: the most the cache may hold (default: ${MAX_SIZE_ENV}, which `continuous` "
                        f"and `bisect` also keep to after each build; unset: no cap). An environment used in the last "
                        f"{RECENT_S / 60:g} minutes is kept")


def run(args: argparse.Namespace) -> int:
    if args.older_than is not None and not 0 <= args.older_than:  # inf: no age limit, the size cap alone
        raise UsageError("--older-than should be a number of days, at least 0")
    if args.max_gb is not None and not 0 <= args.max_gb <= LARGEST_GB:  # inf is no cap: leave --max-gb out
        raise UsageError(f"--max-gb should be a number of GB from 0 to {LARGEST_GB:g} (leave it out for no cap); "
                         f"got {args.max_gb:g}")
    for dest in ("older_than", "max_gb"):  # typed without --prune: it would remove nothing; a table's is its default
        if getattr(args, dest) is not None and not args.prune and not settings.from_table(args, dest):
            raise UsageError(f"--{dest.replace('_', '-')} applies to --prune: give --prune too")
    if not args.prune:
        return _listing(args)
    cap = size_cap() if args.max_gb is None else int(args.max_gb * 1e9)
    named, cache = _cache(args)
    if not cache.exists():  # a typed path is not made: a folder chain of a typo's name
        print(f"removed 0 environment(s): {named} {cache} does not exist")
        return 0
    cache = open_cache(args.env_cache)
    older = MAX_AGE_DAYS if args.older_than is None else args.older_than
    busy: list = []
    gone = prune(cache, older * 86400.0, now=time.time(), max_bytes=cap, busy=busy)
    print(f"removed {len(gone)} environment(s), {fmt_bytes(sum(e.size for e in gone))}, from {cache}")
    for entry in gone:
        print(f"  {entry.folder.name}  {entry.spec or '(a build that did not finish)'}")
    if busy:
        print(f"kept {len(busy)} in use by a run now (a comparison, or a build): " +
              ", ".join(e.folder.name for e in busy))
    return 0


def _cache(args: argparse.Namespace) -> tuple[str, Path]:
    """What chose the cache, and its folder; UsageError where a file is in the way of it."""
    named, cache = cache_source(args.env_cache)
    if cache.exists() and not cache.is_dir():
        raise UsageError(f"{named} {cache}: is a file, not a folder")
    in_the_way = next((p for p in cache.parents if p.exists() and not p.is_dir()), None)
    if in_the_way is not None:  # no folder can be there: a build refuses it too
        raise UsageError(f"{named} {cache}: cannot be a folder, {in_the_way} is a file")
    return named, cache


def _listing(args: argparse.Namespace) -> int:
    """The cache as it is: a folder that is not there is not made. The size cap is shown; a bad one is the error
    `continuous` and `bisect` give, since the next build would stop on it."""
    (named, cache), now = _cache(args), time.time()
    cap = size_cap()
    found = entries(cache)
    rows = [[e.folder.name, e.spec or "(a build in progress, or one that did not finish)", fmt_bytes(e.size),
             f"{fmt_duration(now - e.last_use)} ago"] for e in found]
    capped = f" (at most {cap / 1e9:g} GB, ${MAX_SIZE_ENV})" if cap is not None else ""
    print(f"{cache}: {len(found)} environment(s), {fmt_bytes(sum(e.size for e in found))}{capped}")
    if rows:
        print(table(["folder", "built for", "size", "last used"], rows))
    return 0
