"""`targets`: measure the CPU performance targets in one interleaved run and print the verdict table.

    flock /tmp/sdpa-measure.lock sdpa-bench targets --out docs/targets

Every case times all its implementations on the same inputs in interleaved rounds, one call of each per
round (bench.measure.run_case_interleaved), so a slower period of a shared machine lands on all of them alike
and each ratio compares medians over the same rounds. Peak memory is measured in a separate pass. With --out,
the results are also saved as a sweep (results.json, tables, plots, report.md) and the verdict as targets.md;
an interrupted run judges and saves the cases it finished.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from ..bench.ceilings import RunCeilings, gemm_key, needed_ceilings
from ..bench.grid import Case
from ..bench.machine import describe_cpu, machine_info
from ..bench.measure import run_case, run_case_interleaved
from ..bench.result import Result
from ..errors import UsageError
from ..fmt import now_stamp
from ..report import results as store
from ..report.targets import DEVICE, MEMORY, TIMING, Table, ceiling_table, evaluate, markdown, plan
from ..report.write import write_report
from ..report.writer_lock import only_writer
from .outputs import raise_if_stopped, stopped_how, terminate_as_interrupt


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="also save the results as a sweep (results.json, tables, plots, report.md) and targets.md "
                        "when it ends; on Ctrl-C or SIGTERM the cases finished so far, judged (a sweep DIR holds is "
                        "kept: a part of a run does not replace it)")
    p.add_argument("--overwrite", action="store_true", help="replace the sweep --out already holds")


def measure(ceilings: RunCeilings, results: list[Result], own: dict[Case, dict[str, float]],
            stream=sys.stdout) -> None:
    """Every point of the plan, printed as it finishes; one call of the case's GEMM ceiling follows every round.
    Fills `results` a whole case at a time (an interrupt leaves the finished cases) and, per timed case, `own`: the
    ceiling over the samples taken in that case's rounds."""
    start = time.perf_counter()
    for case, impls, timed in plan():
        raise_if_stopped()  # a signal whose exception a point swallowed stops the run here
        gemm = (gemm_key(case.dtype, DEVICE),)
        mark = ceilings.mark()
        rows = (run_case_interleaved(case, impls, DEVICE, TIMING, after_round=lambda: ceilings.sample(gemm, calls=1))
                if timed else run_case(case, impls, DEVICE, MEMORY))
        if timed and ceilings.since(mark):
            own[case] = ceilings.since(mark)
        results.extend(rows)
        for r in rows:
            shown = f"{r.median_s * 1e3:9.1f} ms" if r.status == "ok" else f"{r.status}: {r.reason[:70]}"
            mem = f"  peak {r.peak_memory_bytes / 2**20:8.1f} MiB" if r.peak_memory_bytes else ""
            print(f"[{time.perf_counter() - start:6.0f}s] {case.id:28s} {r.impl:20s} {shown}{mem}",
                  file=stream, flush=True)


def ceiling_lines(ceilings: RunCeilings) -> str:
    """The run's ceilings with their spread; each case's fractions are of the GEMM samples of its own rounds."""
    lines = ["Ceilings measured in this run (median of the samples, min–max, samples, shape):", ""]
    for key, s in ceilings.spread().items():
        unit, scale = ("GB/s", 1e9) if key == "copy_bytes_per_s" else ("GFLOP/s", 1e9)
        lines.append(f"- {key}: {s['median'] / scale:.0f} {unit} ({s['min'] / scale:.0f}–{s['max'] / scale:.0f}, "
                     f"{s['n']} samples, {s['shape']})")
    lines += ["", "A fraction of the GEMM ceiling is taken against the median of the GEMM samples of that case's own "
                  "rounds (one call after each round), so a slow period lands on both numbers; the run's median "
                  "above is the fallback for a case without them."]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.out is None:
        if args.overwrite:  # a 20-minute run that keeps nothing, where a folder was meant
            raise UsageError("--overwrite replaces the sweep in --out: give --out too")
        return _targets(args)
    store.prepare_dir(args.out)  # before a 20-minute run, not after it
    with only_writer(args.out):  # no `run` or other `targets` writes it meanwhile
        foreign = store.not_a_sweep(args.out) if (args.out / store.RESULTS_FILE).exists() else None
        if foreign:  # --overwrite replaces a sweep, not another tool's file, nor a folder the save would fail on
            raise UsageError(f"{foreign}: move it away, or choose another --out")
        if (args.out / store.RESULTS_FILE).exists() and not args.overwrite:
            raise UsageError(f"{args.out} already holds a sweep ({args.out / store.RESULTS_FILE}): replace it with "
                             "--overwrite, or choose another --out")
        try:
            with terminate_as_interrupt():
                return _targets(args)
        except KeyboardInterrupt as exc:
            how, code = stopped_how(exc)
            ending = getattr(exc, "ending", f"{args.out} is as it was: no case had finished")
            print(f"sdpa-bench targets: {how}; {ending}", file=sys.stderr)
            return code


def _targets(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    info = machine_info(DEVICE)
    machine = f"machine: {describe_cpu(info)}, {info['threads']} threads, torch {info['torch']}, python {info['python']}"
    print(machine)
    ceilings = RunCeilings(DEVICE, needed_ceilings(sorted({c.dtype for c, _, _ in plan()}), DEVICE))
    ceilings.sample()
    results: list[Result] = []
    own: dict[Case, dict[str, float]] = {}
    try:
        measure(ceilings, results, own)
        ceilings.sample()
    except KeyboardInterrupt as exc:  # the finished cases are judged, and saved where no sweep would be replaced
        cases = len(dict.fromkeys(r.case for r in results))
        if not cases:
            raise
        part = f"interrupted after {cases} of {len(plan())} cases: each target is judged on those measured"
        held = args.out is not None and (args.out / store.RESULTS_FILE).exists()  # --overwrite: kept whole
        _verdict(argparse.Namespace(out=None) if held else args, start, info, machine, ceilings, results, own, part)
        if args.out is not None:
            done = f"{cases} finished case{'s' * (cases != 1)}"
            ending = (f"{args.out} is as it was: a part of a run does not replace the sweep it holds (the verdict "
                      f"of the {done} is above)" if held else
                      f"the {done} {'are' if cases != 1 else 'is'} saved in {args.out} ({store.RESULTS_FILE}, "
                      "report.md, targets.md); the rest were not measured")
            exc.ending = ending  # type: ignore[attr-defined]
        raise
    return _verdict(args, start, info, machine, ceilings, results, own)


def _verdict(args: argparse.Namespace, start: float, info: dict, machine: str, ceilings: RunCeilings,
             results: list[Result], own: dict[Case, dict[str, float]], part: str | None = None) -> int:
    """Print the verdict over `results` and, with --out, save them as a sweep with targets.md; `part` says how the
    run ended early (targets on cases not measured are named as such)."""
    values = ceilings.values()
    table = Table([r.on_roofline(values | own.get(r.case, {})) for r in results], values, own)
    rows = evaluate(table)
    print(f"\n{part}" if part else "", f"\nmeasured in one run of {time.perf_counter() - start:.0f} s\n", sep="")
    print(ceiling_lines(ceilings) + "\n")
    print(markdown(rows) + "\n")
    print(ceiling_table(table))
    bad = [r for r in table.results if r.status in ("wrong", "failed")]
    for r in bad:
        print(f"{r.status}: {r.impl} on {r.case.id}: {r.reason}")
    if args.out is not None:
        timed = list(table.by.values()) + [r for r in table.results if r.status != "ok"]
        meta = {"preset": "cpu", "device": DEVICE, "shard": None, "impls": list(dict.fromkeys(r.impl for r in timed)),
                "case_ids": list(dict.fromkeys(r.case.id for r in timed)), "options": dataclasses.asdict(TIMING),
                "seed": 0, "machine": info, **ceilings.meta(), "wall_s": time.perf_counter() - start,
                "case_ceilings": {case.id: c for case, c in own.items()}, "made_by": "targets",
                "planned_points": len({(case.id, impl) for case, impls, timed in plan() if timed for impl in impls}),
                **({"interrupted": now_stamp()} if part else {"finished": now_stamp()})}
        sweep = store.Sweep(meta, timed)
        store.save(args.out, sweep)
        files = write_report(args.out, sweep, stdout=sys.stderr)
        (args.out / "targets.md").write_text("\n\n".join([machine, *([part] if part else []), ceiling_lines(ceilings),
                                                           markdown(rows), ceiling_table(table)]) + "\n",
                                             encoding="utf-8")
        print(f"wrote {', '.join(map(str, [args.out / store.RESULTS_FILE, *files, args.out / 'targets.md']))}",
              file=sys.stderr)
    return 1 if bad else 0
