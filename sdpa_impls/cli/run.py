"""`run`: sweep a preset here, saving every finished point at once, then print the table and write the report."""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import faulthandler
import os
import sys
from pathlib import Path

import torch

from ..bench import grid
from ..bench.ceilings import RunCeilings, needed_ceilings
from ..bench.check import no_device
from ..bench.machine import busy_cpus, machine_info, plugin_sources, source_revision
from ..bench.measure import Options, run_case
from ..errors import USAGE_EXIT, UsageError
from ..fmt import fmt_duration, now_stamp, option_text
from ..impls._tiled.compute import check_settings, settings
from ..registry import PluginLoadError, loaded, names
from ..report import aside as replaced, results as store, running
from ..report.contents import option_problem, options as saved_options
from ..report.write import write_report
from ..report.writer_lock import only_writer
from . import watch
from .outputs import impl_names, seed, stopped_how, terminate_as_interrupt
from .progress import Progress
from .resume import OPTION_FLAGS, saved
from .shards import auto_shard, parse_shard

MAX_FORCED = 10_000  # --min-reps and --warmup: calls made whatever --budget says
MAX_SAMPLE_S = 10.0  # --min-sample: each of --min-reps samples lasts this long whatever --budget says


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", help=f"grid to sweep: {', '.join(grid.PRESETS)} (default: {grid.PRESET_ENV} "
                                    "if set, else 'gpu' on a CUDA machine and 'cpu' elsewhere)")
    p.add_argument("--impl", action="append", metavar="NAME",
                   help="implementation to run (repeat, or comma-separate; default: all, see `list`)")
    p.add_argument("--out", type=Path, metavar="DIR", help="output folder (default: results/<preset>, with --shard "
                                                          "I/N results/<preset>-shardIofN)")
    p.add_argument("--shard", metavar="I/N", help="run only shard I of N (cases whose index is I-1 mod N); join the "
                                                  "shards with `merge`. `auto`: I and N from torchrun (RANK, "
                                                  "WORLD_SIZE; GPU LOCAL_RANK) or a SLURM array, each shard in "
                                                  "DIR/shard-IofN (DIR: --out, default results/<preset>-shards)")
    p.add_argument("--resume", action="store_true",
                   help="continue the sweep saved in DIR, skipping every point already finished (where DIR holds "
                        "none, start it: a batch job run again goes on where it stopped)")
    p.add_argument("--overwrite", action="store_true",
                   help="start a new sweep in DIR even if it holds one (kept in DIR/replaced-sweep until the new "
                        "one finishes with a point measured)")
    p.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda when available, else cpu")
    p.add_argument("--seed", type=seed, help="input seed (default 0)")
    t = p.add_argument_group("timing (defaults: sdpa_impls.bench.measure.Options)")
    t.add_argument("--budget", dest="budget_s", type=float, metavar="SECONDS",
                   help=f"measured time per point (default {Options.budget_s})")
    t.add_argument("--min-reps", type=int, help=f"at least this many samples (default {Options.min_reps}; at most "
                                                f"{MAX_FORCED}, since --budget does not stop them)")
    t.add_argument("--max-reps", type=int, help=f"at most this many samples (default {Options.max_reps}); a sample "
                                                "of a short call is many calls (--min-sample)")
    t.add_argument("--warmup", type=int, help=f"untimed calls first (default {Options.warmup}; at most {MAX_FORCED})")
    t.add_argument("--min-sample", dest="min_sample_s", type=float, metavar="SECONDS",
                   help="a sample is the fewest back-to-back calls lasting this long "
                        f"(default {Options.min_sample_s}; 0: one call per sample; at most {MAX_SAMPLE_S:g})")
    t.add_argument("--flush-l2", action="store_const", const=True, help="clear the GPU L2 before each call")
    t.add_argument("--cuda-graph", action="store_const", const=True, help="time CUDA-graph replays")
    t.add_argument("--no-memory", dest="memory", action="store_const", const=False,
                   help="skip the peak-memory measurement")
    p.add_argument("--no-plots", action="store_const", const=True,  # None: not given, the sweep's own on a resume
                   help="write tables, CSV and report without PNGs (kept for --resume; --plots on one draws them)")
    watch.add_argument(p)


def _impls(requested: list[str] | None) -> list[str] | None:
    chosen = list(impl_names(requested))
    if not chosen:
        return None
    unknown = [n for n in chosen if n not in names()]
    if unknown:
        raise UsageError(f"unknown implementation {', '.join(map(repr, unknown))}; known: {', '.join(names())}")
    for name in chosen:  # a plug-in named on purpose that does not load would only skip every point
        try:
            loaded(name)
        except PluginLoadError as exc:
            raise UsageError(f"--impl {name}: {exc}") from None
    return chosen


def _options(args: argparse.Namespace) -> tuple[dict, Options]:
    """(the options given on the command line, the full Options); UsageError on nonsense values."""
    given = {k: getattr(args, k) for k in OPTION_FLAGS if getattr(args, k) is not None}
    for k in ("min_reps", "warmup"):  # calls that --budget does not stop: a typo's extra zeros never end a point
        if given.get(k, 0) > MAX_FORCED:
            raise UsageError(f"{OPTION_FLAGS[k]} must be at most {MAX_FORCED}; got {given[k]} (more time: --budget)")
    if given.get("min_sample_s", 0) > MAX_SAMPLE_S:
        raise UsageError(f"--min-sample must be at most {MAX_SAMPLE_S:g} seconds; got {given['min_sample_s']:g} "
                         "(more time: --budget)")
    opts = Options(**given)
    problem = option_problem(opts, OPTION_FLAGS.__getitem__)
    if problem:
        raise UsageError(problem)
    return given, opts


def _new(args: argparse.Namespace, device: str, preset: str, impls: list[str] | None, opts: Options) -> store.Sweep:
    shard = parse_shard(args.shard) if args.shard else None
    cases = grid.shard_of(grid.preset(preset), *shard) if shard else list(grid.preset(preset))
    if shard and not getattr(args, "shard_auto", False):
        _check_shard(preset, shard)
    meta = {"preset": preset, "device": device, "shard": "/".join(map(str, shard)) if shard else None,
            "impls": impls or names(), "case_ids": [c.id for c in cases], "options": dataclasses.asdict(opts),
            "seed": args.seed or 0, "machine": machine_info(device), "ceilings": {}, "started": now_stamp()}
    return store.Sweep(meta)


def _check_shard(preset: str, shard: tuple[int, int]) -> None:
    """UsageError where shard I of N holds no case of `preset` (it would measure nothing, and pass)."""
    count = len(grid.preset(preset))
    if not grid.shard_of(grid.preset(preset), *shard):
        raise UsageError(f"--shard {shard[0]}/{shard[1]}: preset {preset} has {count} cases, so shard {shard[0]} holds "
                         f"none: use at most {count} shards")


def run_pending(sweep: store.Sweep, watched: watch.PointWatch, progress: Progress, ceilings: RunCeilings) -> None:
    """Run every unfinished point, saving results.json after each one; the ceilings are sampled again between
    cases (at most every 30 s), and every result is judged against the run's ceilings at the end (`judge`).
    `watched` notes each point in the sweep's folder while it runs, and stops one past --point-timeout."""
    meta = sweep.meta
    by_id = {c.id: c for c in grid.preset(meta["preset"])}
    opts = saved_options(meta)
    done = sweep.done()
    pending = [(i, by_id[cid]) for cid in meta["case_ids"] for i in meta["impls"] if (cid, i) not in done]
    while pending:
        case = pending[0][1]
        impls = [i for i, c in pending if c == case]
        progress.start(pending)
        watched.point(case, pending[0][0])
        for result in run_case(case, impls, meta["device"], opts, meta.get("seed", 0)):
            with watched.lock:  # a point timing out meanwhile is recorded by the watcher, which then holds it
                sweep.results.append(result.on_roofline(ceilings.values()))
                watched.clock()
                store.save(watched.out, sweep)
                pending.pop(0)
                progress.finish(result, pending)
                if pending and pending[0][1] == case:
                    progress.start(pending)
                    watched.point(case, pending[0][0])
        watched.point(None)
        if ceilings.sample_if_due():
            meta.update(ceilings.meta())


def judge(sweep: store.Sweep, ceilings: RunCeilings) -> None:
    """Take the last ceiling sample and judge every result against the run's ceilings (their medians)."""
    ceilings.sample()
    sweep.meta.update(ceilings.meta())
    sweep.results[:] = [r.on_roofline(ceilings.values()) for r in sweep.results]


def run(args: argparse.Namespace) -> int:
    device = args.device or grid.default_device()
    why = no_device(device)
    if why:
        raise UsageError(f"--device {device}: {why}")
    auto = args.shard == "auto"
    if auto:
        index, count, local_rank = auto_shard(dict(os.environ))
        args.shard = f"{index}/{count}"
        if device == "cuda" and local_rank is not None:
            torch.cuda.set_device(local_rank)  # one GPU per torchrun process on this node
    impls = _impls(args.impl)
    given, opts = _options(args)
    try:  # read by the tiled implementations' calls: checked once, here (as set, nothing is measured)
        check_settings()
        watch.kept(args.point_timeout, {}, 0.0 if args.resume else opts.budget_s)  # a resume: against its saved one
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if device != "cuda" and (opts.flush_l2 or opts.cuda_graph):
        raise UsageError(f"{'--flush-l2' if opts.flush_l2 else '--cuda-graph'} needs --device cuda")
    if args.shard:
        parse_shard(args.shard)
    try:
        preset = args.preset or grid.default_preset_name(device)
        grid.preset(preset)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    args.shard_auto = auto  # a launcher's ranks past the preset's cases measure nothing, and pass
    if args.shard and not auto and not args.resume:  # before the folder is made (a resume: its saved preset's)
        _check_shard(preset, parse_shard(args.shard))
    if auto:  # every process of the launch gets its own folder under one parent
        out = (args.out or Path("results") / f"{preset}-shards") / f"shard-{args.shard.replace('/', 'of')}"
    else:
        out = args.out or Path("results") / (preset + (f"-shard{args.shard.replace('/', 'of')}" if args.shard else ""))
    if args.resume and args.overwrite:  # before the folder is made: a refused command leaves nothing behind
        raise UsageError("--resume continues the sweep in --out and --overwrite replaces it: choose one")
    store.prepare_dir(out)
    if watch.continuing(out):  # this process replaced one whose point timed out: it goes on with that sweep
        args.resume, args.overwrite = True, False
    if not faulthandler.is_enabled():  # a crash inside an implementation prints where it was, not nothing
        with contextlib.suppress(ValueError, OSError):  # a stderr with no file descriptor (redirected in-process)
            faulthandler.enable()
    with only_writer(out):
        return _sweep(args, device, preset, impls, given, opts, out)


def _sweep(args: argparse.Namespace, device: str, preset: str, impls: list[str] | None, given: dict, opts: Options,
           out: Path) -> int:
    """The sweep into `out`, which no other `run` writes meanwhile: new, resumed or overwritten; its exit code."""
    if replaced.put_back(out):  # never read as an empty folder, nor deleted when a new sweep there finishes
        print(f"{out}: put back the sweep that an --overwrite stopped before its first save set aside", file=sys.stderr)
    existing = (out / store.RESULTS_FILE).exists()
    foreign = store.not_a_sweep(out) if existing and not args.resume else None
    if foreign:  # another tool's file: --overwrite deletes only what a run wrote (--resume refuses it when loading)
        raise UsageError(f"{foreign}: move it away, or choose another --out")
    aside = replaced.set_aside(out) if existing and args.overwrite else None  # kept until this sweep measures
    if existing and not args.resume and not aside:
        raise UsageError(f"{out} already holds a sweep ({out / store.RESULTS_FILE}): continue it with --resume, "
                         "start it again with --overwrite, or choose another --out")
    existing &= not aside
    sweep = saved(out, args, impls, given) if existing else _new(args, device, preset, impls, opts)
    if not existing:  # an earlier sweep's point noted here is not this sweep's: a resume would count it as a crash
        running.mark(out, None)
    meta = sweep.meta
    if args.no_plots is not None:  # kept with the sweep for its resumes, as given last (--plots: False)
        meta["no_plots"] = args.no_plots
    plots = not meta.get("no_plots")
    total, done = sweep.planned, len(sweep.done())
    progress = Progress(total, saved_options(meta), sweep.results)
    if args.resume:
        progress.note(f"resuming {out}: {done} of {total} points already finished" if existing else
                      f"nothing to resume in {out}: starting a new sweep")
    if existing and (done == total and "finished" in meta or meta.get("merged_from")):  # kept as measured; a merge
        # `saved` took is whole, "finished" or not (its first shard's): nothing of it is measured again, ceilings too
        running.mark(out, None)
        replaced.drop_aside(out, sweep)  # an ending cut short after it finished left the sweep it replaced
        files = write_report(out, sweep, plots=plots)
        return _outcome(out, sweep, files, f"nothing left to measure: {total} points, measured in "
                                           f"{fmt_duration(meta.get('wall_s', 0.0))}; {store.RESULTS_FILE} unchanged")
    # which code measured which points, when a sweep is resumed over days (report.md lists them)
    fixed = settings()  # the CPU variables set for this session
    meta.setdefault("sessions", []).append({"started": now_stamp(), "source": source_revision()
                                            + plugin_sources(meta["impls"]), "first_point": done + 1}
                                           | ({"settings": fixed} if fixed else {}))
    said = running.ended_inside(out, sweep) if existing else None
    if said:
        progress.note(said)
    before = len(sweep.results)  # the points of earlier sessions: the closing line counts this session's
    progress.note(f"sweep: preset {meta['preset']}{' shard ' + str(meta['shard']) if meta.get('shard') else ''}, "
                  f"{len(meta['case_ids'])} cases × {len(meta['impls'])} implementations on "
                  f"{meta['machine']['device_name']}; saving to {out / store.RESULTS_FILE}"
                  + (f" (the sweep it replaces is kept in {aside} until this one measures a point and finishes)"
                     if aside else ""))
    busy = busy_cpus() if device == "cpu" else None
    if busy:  # said, and kept with the session's other facts (report.md lists them)
        meta["sessions"][-1]["load_average"] = round(busy[0], 2)
        progress.note(f"warning: {busy[1]}")
    dtypes = sorted({c.dtype for c in grid.preset(meta["preset"]) if c.id in set(meta["case_ids"])})
    run_ceilings = RunCeilings(device, needed_ceilings(dtypes, device), meta.get("ceiling_samples"))
    timeout = watch.kept(args.point_timeout, meta, saved_options(meta).budget_s)  # a resume: the saved budget's
    watched = watch.PointWatch(out, sweep, progress, timeout, getattr(args, "own_process", False))

    closed: list[float] = []

    def close() -> None:  # once: the session's time joins the sweep's
        if not closed:
            progress.close()
            closed.append(progress.wall_s)
            watched.clock(closed[0])
    with terminate_as_interrupt():  # from the first Ctrl-C or SIGTERM, the ending below runs whole
        try:
            store.save(out, sweep)  # before the ceilings: a process killed there leaves a sweep --resume knows
            progress.note("measuring this run's ceilings (a large GEMM per dtype, a copy); again between cases …")
            run_ceilings.sample()
            meta.update(run_ceilings.meta())
            store.save(out, sweep)
            run_pending(sweep, watched, progress, run_ceilings)
            judge(sweep, run_ceilings)  # the last ceilings' sample: an interrupt there still saves and reports
            close()
            meta["finished"] = now_stamp()
            store.save(out, sweep)
            files = write_report(out, sweep, plots=plots)  # interrupted in the plots: the report still
            replaced.drop_aside(out, sweep)
        except KeyboardInterrupt as exc:
            watched.point(None)  # an interrupt is no crash: --resume measures that point again
            close()
            store.save(out, sweep)
            write_report(out, sweep, plots=False)
            how, code = stopped_how(exc)
            print(f"sdpa-bench: {how}; {len(sweep.done())} of {total} points are saved in "  # last: what to do next
                  f"{out / store.RESULTS_FILE}; continue with: sdpa-bench run {option_text('--out', str(out))} --resume",
                  file=sys.stderr)
            return code
        except BaseException:  # our error or the machine's (a full disk, a closed pipe), not a crash in the point:
            with contextlib.suppress(OSError):  # --resume measures it again, and never counts it as one
                watched.point(None)
            raise
    now = len(sweep.results) - before
    return _outcome(out, sweep, [out / store.RESULTS_FILE, *files], f"{now} point{'s' * (now != 1)} in "
                    f"{fmt_duration(closed[0])}" + (f" ({len(sweep.results)} in all, measured in "
                                                    f"{fmt_duration(meta['wall_s'])})" if before else ""))


def _outcome(out: Path, sweep: store.Sweep, files: list[Path], said: str) -> int:
    """What a finished sweep says last (`said`, then the files it wrote), and its exit code: 1 for a wrong result or
    an implementation that failed on every point, 2 where every point was skipped."""
    print(f"{said}; wrote {', '.join(str(f) for f in files)}", file=sys.stderr)
    wrong = [r for r in sweep.results if r.status == "wrong"]
    if wrong:  # a failure (e.g. out of memory) is a fact about the machine; a wrong answer is a bug
        print(f"sdpa-bench: {len(wrong)} point(s) gave a WRONG result (see the notes above)", file=sys.stderr)
    if sweep.results and all(r.status == "skipped" for r in sweep.results):  # a green CI job that measured nothing
        print(f"sdpa-bench: nothing was measured: every point was skipped here (the reasons are in "
              f"{out / 'report.md'})", file=sys.stderr)
        return USAGE_EXIT
    never = store.never_ran(sweep.results)
    for name, first in never.items():  # a kernel that raises on every point is a bug too, not a fact of the machine
        print(f"sdpa-bench: {name} failed on every point it ran and measured nothing (first, {first.case.id}: "
              f"{first.reason.splitlines()[0][:200]})", file=sys.stderr)
    return 1 if wrong or never else 0
