"""`run --resume`: whether this command line, machine and installation can continue the sweep saved in a folder
(the same preset, implementations, shard, device, seed and timing options; the same CPU or GPU; every implementation
still there and loading), and which timing options the command line may repeat."""
from __future__ import annotations

import argparse
from pathlib import Path

from .. import settings
from ..bench import grid
from ..bench.machine import machine_differences, machine_info
from ..errors import UsageError
from ..registry import LOAD_FAILED, PluginLoadError, loaded, names
from ..report import results as store
from .shards import parse_shard

OPTION_FLAGS = {"budget_s": "--budget", "min_reps": "--min-reps", "max_reps": "--max-reps", "warmup": "--warmup",
                "flush_l2": "--flush-l2", "cuda_graph": "--cuda-graph", "memory": "--no-memory",
                "min_sample_s": "--min-sample"}


def _shown(what: str, value: object) -> str:
    """An option's value as the command line says it (--no-memory keeps False in `memory`)."""
    if what == "--no-memory":
        return what if value is False else "memory measured"
    if isinstance(value, bool) or value is None:
        return what if value else f"no {what}"
    return f"{what} {value}"


def _conflict(what: str, given: object, kept: object, out: Path) -> None:
    if given is not None and given != kept:
        raise UsageError(f"{out} holds a sweep with {_shown(what, kept)}, not {_shown(what, given)}: --resume "
                         f"continues it as it was started (drop the option), or choose another --out")


def saved(out: Path, args: argparse.Namespace, impls: list[str] | None, given: dict) -> store.Sweep:
    """The saved sweep, after checking that this command line, machine and installation can continue it."""
    sweep = store.load(out)
    meta = sweep.meta

    def typed(dest: str, value: object) -> object:  # a default of the project's table gives way to the sweep's own
        return None if settings.from_table(args, dest) else value

    _conflict("--preset", typed("preset", args.preset), meta.get("preset"), out)  # a merged sweep's too
    if typed("impl", impls) is not None and set(impls or ()) != set(meta.get("impls", ())):
        _conflict("--impl", ",".join(impls or ()), ",".join(meta.get("impls", ())), out)
    _conflict("--shard", typed("shard", args.shard and "/".join(map(str, parse_shard(args.shard)))),
              meta.get("shard"), out)
    _conflict("--device", args.device, meta.get("device"), out)  # the table's too: this process measures on it
    _conflict("--seed", typed("seed", args.seed), meta.get("seed"), out)
    for k, v in given.items():
        _conflict(OPTION_FLAGS[k], typed(k, v), (meta.get("options") or {}).get(k), out)
    if meta.get("merged_from"):  # its missing points are its shards', each measured on its own machine
        left = store.shard_dirs(meta, unfinished=True)
        missing = _missing_shards(meta)
        if left or not sweep.complete or missing:
            raise UsageError(f"{out} was merged from shards ({store.shard_dirs(meta)}): " + (
                f"resume the unfinished shards ({left}), then merge them again into a new --out" if left else
                f"each was finished, but a case is in none of them{f' (shard {missing})' if missing else ''}: merge "
                "them with the missing shard into a new --out"))
        return sweep  # whole: nothing to measure, its report written again, as a finished sweep's is
    if sweep.by_targets:  # its cases have implementations of their own: a `run` would add points it never planned
        raise UsageError(f"{out} holds a `sdpa-bench targets` run, which `run --resume` does not continue: measure "
                         f"the targets again with `sdpa-bench targets --out {out} --overwrite`")
    if sweep.version != store.VERSION:  # one sweep never mixes points of two versions, which record different things
        raise UsageError(f"{out} was started by an older sdpa-bench (results format {sweep.version}; this one "
                         f"resumes only format {store.VERSION}, what it writes): finish it with the version that "
                         "started it, or start again here with --overwrite (report and compare read it as it is)")
    diffs = machine_differences(meta.get("machine") or {}, machine_info(meta.get("device")))
    if diffs:
        raise UsageError(f"{out} was measured on another machine ({'; '.join(diffs)}, saved vs here). Resume it "
                         f"there (or split a sweep over machines with --shard and `merge`)")
    try:
        known = {c.id for c in grid.preset(meta["preset"])}
    except ValueError as exc:
        raise UsageError(f"{out}: cannot resume: {exc}") from None
    lost = [c for c in meta["case_ids"] if c not in known]
    if lost:
        raise UsageError(f"{out}: cannot resume: preset {meta['preset']} no longer has case(s) {', '.join(lost)}")
    unknown = [i for i in meta["impls"] if i not in names()]
    if unknown:
        raise UsageError(f"{out}: cannot resume: implementation(s) {', '.join(unknown)} are not installed here")
    _loads(out, sweep)
    return sweep


def _missing_shards(meta: dict) -> str:
    """The shards ("I/N", comma-separated) of a merged sweep's preset that hold a case none of its shards has: a
    merge that left a shard out, which its points never show (its case ids are the merged shards' only). Shards
    of one count only; a shard past the preset's cases (a launcher's spare rank) is none of them."""
    try:
        shards = {parse_shard(s["shard"]) for s in meta["merged_from"]}
        counts = {n for _, n in shards}
        cases = grid.preset(meta["preset"])
    except (UsageError, ValueError, TypeError, KeyError):  # a shard not given as I/N, a preset this version lacks
        return ""
    if len(counts) != 1:
        return ""
    count, have, ids = counts.pop(), {i for i, _ in shards}, set(meta.get("case_ids") or ())
    return ", ".join(f"{i}/{count}" for i in range(1, count + 1)
                     if i not in have and any(c.id not in ids for c in grid.shard_of(cases, i, count)))


def _loads(out: Path, sweep: store.Sweep) -> None:
    """UsageError where a plug-in of the sweep does not load here but did when the sweep measured it: its points
    left would be saved as skipped ("failed to load") and never measured again. A plug-in that was already broken
    when the sweep started (its points say so) goes on being skipped, as it would in a new sweep."""
    for name in sweep.meta["impls"]:
        try:
            loaded(name)
        except PluginLoadError as exc:
            mine = [r for r in sweep.results if r.impl == name]
            if not mine or any(LOAD_FAILED not in (r.reason or "") for r in mine):
                raise UsageError(f"{out}: cannot resume: {exc} (its points left would be skipped for good; mend "
                                 "it and resume again)") from None
