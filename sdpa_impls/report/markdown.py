"""report.md: the machine, the sweep, the plots and every table, in one Markdown file beside the results."""
from __future__ import annotations

import os
from pathlib import Path

from ..bench.machine import describe_cpu
from ..bench.result import Result
from ..fmt import fmt_bytes, fmt_duration, option_text
from .files import write_whole
from .results import Sweep, shard_dirs
from .tables import METRICS, SweepTable, not_run, summary, tables
from .writer_lock import writer

REPORT_FILE = "report.md"


def machine_lines(meta: dict) -> list[str]:
    """The machine's rows and the ceilings measured with it; a merged sweep's per shard where its shards differ."""
    shards = meta.get("merged_from") or []
    if len(shards) < 2:
        rows = _machine_rows(meta.get("machine") or {})
        ceilings = _ceilings_text(meta.get("ceilings") or {}, meta.get("ceiling_spread") or {})
        where = "measured in this run" if "ceiling_samples" in meta else "(where measured: unsaid in an older file)"
        rows += [(f"ceilings {where}", ceilings)] if ceilings else []
        return [f"| {k} | {v} |" for k, v in rows]
    rows, machines = [], [s.get("machine") or {} for s in shards]
    if all(m == machines[0] for m in machines):
        rows += _machine_rows(machines[0])
    else:  # shards of one sweep run on several machines: each result was measured on its own shard's
        for s, m in zip(shards, machines):
            rows += [(f"{k}, shard {s.get('shard') or '?'}", v) for k, v in _machine_rows(m)]
    for s in shards:  # each shard's results are judged against the ceilings it measured
        ceilings = _ceilings_text(s.get("ceilings") or {}, s.get("ceiling_spread") or {})
        rows += [(f"ceilings measured by shard {s.get('shard') or '?'}", ceilings)] if ceilings else []
    return [f"| {k} | {v} |" for k, v in rows]


def _samples_text(options: dict) -> str:
    """What one timed sample is, as the options recorded it (an older sdpa-bench's file may not say)."""
    if options.get("min_sample_s") is None:
        return "Times are medians over samples (how many calls each sample timed: unsaid in an older sdpa-bench's file)"
    return ("Times are medians over samples, each the mean of back-to-back calls lasting at least "
            f"{options['min_sample_s'] * 1e3:g} ms")


def _machine_rows(m: dict) -> list[tuple[str, str]]:
    gpu = m.get("gpu") or {}
    rows = [("device", f"{m.get('device', '?')}" + (f": {gpu.get('name')}" if gpu else ""))]
    if gpu:
        rows.append(("GPU", f"{gpu.get('name')}, {fmt_bytes(gpu.get('memory_bytes'))}, compute capability "
                            f"{gpu.get('capability')}, driver {gpu.get('driver') or '?'}"))
    return rows + [
        ("CPU", f"{describe_cpu(m)} ({m.get('machine', '?')}), {m.get('threads', '?')} torch threads"),
        ("versions", f"torch {m.get('torch')}, CUDA {m.get('cuda') or 'none'}, cuDNN {m.get('cudnn') or 'none'}, "
                     f"xformers {m.get('xformers') or 'not installed'}, python {m.get('python')}")]


def _ceilings_text(ceil: dict, spread: dict) -> str:
    def shown(key: str, value: float, scale: float, unit: str) -> str:
        s = spread.get(key)
        if not s:
            return f"{value / scale:.3g} {unit}"
        return (f"{value / scale:.3g} {unit} (median of {s['n']}, {s['min'] / scale:.3g}–{s['max'] / scale:.3g}"
                + (f", {s['shape']}" if s.get("shape") else "") + ")")
    parts = [f"GEMM {k.rsplit('_', 1)[1]} " + shown(k, v, 1e12, "TFLOP/s") for k, v in sorted(ceil.items())
             if k.startswith("gemm_flops_")]
    if "copy_bytes_per_s" in ceil:
        parts.append("copy " + shown("copy_bytes_per_s", ceil["copy_bytes_per_s"], 1e9, "GB/s"))
    return ", ".join(parts)


def sweep_summary(sweep: Sweep) -> str:
    meta = sweep.meta
    counts: dict[str, int] = {}
    for r in sweep.results:
        counts[r.status] = counts.get(r.status, 0) + 1
    shard = f", shard {meta['shard']}" if meta.get("shard") else ""
    merged = f", merged from {len(meta['merged_from'])} shards" if meta.get("merged_from") else ""
    opts = meta.get("options") or {}
    wall = f", {fmt_duration(meta['wall_s'])} of measuring" if meta.get("wall_s") else ""
    done = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    return (f"preset `{meta.get('preset')}`{shard}{merged}: {len(meta.get('case_ids', []))} cases × "
            f"{len(meta.get('impls', []))} implementations = {sweep.planned} points ({done or 'none finished'})"
            f"{wall}; budget {opts.get('budget_s')} s per point, {opts.get('min_reps')}–{opts.get('max_reps')} "
            f"samples after {opts.get('warmup')} warm-up calls, seed {meta.get('seed', 0)}")


def sessions_text(meta: dict, finished: int) -> str:
    """Which code measured which points (in the order they finished): one entry per start or resume of `run`."""
    sessions = meta.get("sessions") or []
    if not sessions and meta.get("merged_from"):  # a merged sweep: each shard's own starts and resumes
        shards = [f"shard {m.get('shard') or '?'}: " + ", then ".join(
                      f"{s['source']}, started {s['started']}" + _busy(s) for s in m.get("sessions") or ())
                  for m in meta["merged_from"] if m.get("sessions")]
        return "Code that measured it: " + "; ".join(shards) + ".\n" if shards else ""
    if not sessions:
        return ""
    first = sessions[0]["first_point"]
    parts = [f"points 1–{first - 1}: not recorded"] if first > 1 else []
    ends = [s["first_point"] - 1 for s in sessions[1:]] + [finished]
    parts += [f"points {s['first_point']}–{last}: {s['source']}, started {s['started']}" + _busy(s)
              for s, last in zip(sessions, ends) if last >= s["first_point"]]
    return "Code that measured it: " + "; ".join(parts) + ".\n" if parts else ""


def _busy(session: dict) -> str:
    """What else held for a session's points: the CPU variables set, CPUs busy with other work."""
    fixed = session.get("settings")
    said = "".join(f", {k}={v}" for k, v in fixed.items()) if isinstance(fixed, dict) else ""
    if "load_average" not in session:
        return said
    return said + f" on busy CPUs (load average {session['load_average']:g}: times slowed and scattered)"


def device_time(results: list[Result]) -> str:
    """On CUDA: the points whose device time is the eager time (and why), and the SM clocks the samples saw."""
    timed = [r for r in results if r.status == "ok" and r.device_time_s is not None]
    if not timed:
        return ""
    out = ["## Device time\n",
           "Each CUDA point is timed twice: eager calls (the time tables above) and its call captured in a CUDA "
           "graph and replayed back to back (the device time; TFLOP/s, GB/s and % of roofline come from it). "
           "Host overhead = eager − device time.\n"]
    eager: dict[str, list[str]] = {}
    for r in timed:
        if r.device_time_method == "eager":
            eager.setdefault(f"`{r.impl}`: {r.device_time_reason}", []).append(r.case.id)
    if eager:
        out.append("Taken eagerly (the call cannot be captured; its device time is its eager time):\n")
        out += [f"- {why} ({len(ids)} point{'s' * (len(ids) > 1)}: {', '.join(ids[:4])}{', …' * (len(ids) > 4)})"
                for why, ids in eager.items()]
        out.append("")
    clocks = [r.clocks for r in timed if r.clocks and r.clocks.get("sm_clock_mhz")]
    if clocks:
        low, high = min(c["sm_clock_mhz"][0] for c in clocks), max(c["sm_clock_mhz"][2] for c in clocks)
        top = max(c.get("sm_clock_max_mhz") or 0 for c in clocks)
        again = sum(c.get("clock_discarded", 0) for c in clocks)
        kept = sum(c.get("clock_kept_throttled", 0) for c in clocks)
        out.append(f"SM clock during the samples: {low:.0f}–{high:.0f} MHz (maximum {top:.0f} MHz); {again} "
                   f"sample{'s' * (again != 1)} taken again below 75 % of the maximum, {kept} kept throttled after "
                   "the retries.\n")
    return "\n".join(out)


def write_markdown(path: Path, sweep: Sweep, layout: SweepTable, images: list[tuple[str, str]],
                   plots_skipped: str = "") -> Path:
    """report.md: machine, sweep, the plots (relative links, or why there are none) and every table."""
    meta = sweep.meta
    m = meta.get("machine") or {}
    parts = [f"# sdpa-bench: `{meta.get('preset')}` on {m.get('device_name', '?')}\n",
             "| machine | |\n|---|---|\n" + "\n".join(machine_lines(meta)) + "\n",
             sweep_summary(sweep) + ".\n",
             sessions_text(meta, len(sweep.results)),
             _samples_text(meta.get("options") or {}) + "; compare implementations within this report "
             "(ratios), not against another machine's absolute times. A result is only timed after its output "
             "matched the fp64 reference.\n"]
    busy = [r for r in layout.results if r.status == "ok" and layout.busy(r)]
    if busy:
        timed = sum(r.status == "ok" for r in layout.results)
        parts.append(f"**Busy CPUs**: {len(busy)} of {timed} timed points were measured while other processes kept "
                     f"busy CPUs that torch's threads needed (up to {max(r.other_cpus for r in busy):g} CPUs; "
                     "marked `busy` in the tables). Their times are slowed and scattered, and so are the ratios "
                     "that involve them.\n")
    if not sweep.complete:
        who = writer(path.parent)  # another process's run still measuring it (its own lock is `run`'s report's)
        how = (f"resume the unfinished shards, {shard_dirs(sweep.meta, unfinished=True)}, then merge them again "
               "into a new folder"
               if sweep.meta.get("merged_from") else
               f"`sdpa-bench run` ({who}) is still measuring it, and rewrites this report when it finishes"
               if who and who != f"process {os.getpid()}" else
               f"measure the targets again with `sdpa-bench targets {option_text('--out', str(path.parent))} "
               "--overwrite`" if sweep.by_targets else
               f"continue with `sdpa-bench run {option_text('--out', str(path.parent))} --resume`")
        parts.append(f"**Incomplete**: {len(sweep.done())} of {sweep.planned} points finished ({how}).\n")
    if layout.cases:
        parts.append(summary(layout, markdown=True))
    if layout.not_run:
        parts.append(not_run(layout, markdown=True))
    if images:
        parts.append("## Plots\n")
        parts += [f"### {title}\n\n![{title}]({name})\n" for title, name in images]
    elif plots_skipped:
        parts.append(f"## Plots\n\nNot drawn: {plots_skipped}. `sdpa-bench report DIR` draws them once they can be.\n")
    parts += ["## Tables\n", tables(layout, markdown=True, metrics=len(METRICS), with_summary=False)]
    parts.append(structures(sweep.results))
    parts.append(device_time(sweep.results))
    parts.append(what_ran(sweep.results))
    write_whole(path, "\n".join(parts))  # a report cut short by a full disk would read as whole
    return path


def what_ran(results: list[Result], top: int = 3) -> str:
    """## What ran: per implementation, each distinct set of its `top` longest kernels (CUDA) or aten ops (CPU)
    in one profiled call, with how many points ran it and one of them; a dispatch change shows as a new line."""
    groups: dict[str, dict[tuple[str, ...], list[str]]] = {}
    for r in results:
        if r.kernels:
            groups.setdefault(r.impl, {}).setdefault(tuple(r.kernels[:top]), []).append(r.case.id)
    if not groups:
        return ""
    lines = ["## What ran\n", f"The {top} longest kernels (CUDA) or aten ops (CPU) of one profiled call per point, "
             "outside the timed region; every name is in `results.json` (`kernels`).\n",
             "| implementation | longest first | points | e.g. |", "|---|---|---|---|"]
    for impl, sets in groups.items():
        for names, cases in sorted(sets.items(), key=lambda kv: -len(kv[1])):
            lines.append(f"| {impl} | {'<br>'.join(f'`{n[:80]}`' for n in names)} | {len(cases)} | {cases[0]} |")
    return "\n".join(lines) + "\n"


def structures(results: list[Result]) -> str:
    """## Mask structures: each structured case of the sweep, what its mask keeps and the share of pairs computed."""
    cases = {r.case.id: r.case for r in results if r.case.mask_spec is not None}
    if not cases:
        return ""
    lines = ["## Mask structures\n", "Every implementation gets the structure's dense `attn_mask`; those with a native "
             "form of it (README, Mask structures) read the structure itself. Pairs: the (query, key) pairs the mask "
             "keeps, of all B·Lq·Lk, as FLOPs count them.\n",
             "| case | structure | top-left causal | pairs kept |", "|---|---|---|---|"]
    for cid, case in cases.items():
        kept = case.pairs() / (case.batch * case.lq * case.lk)
        lines.append(f"| {cid} | {case.structure().describe()} | {'yes' if case.causal else 'no'} | {kept:.1%} |")
    return "\n".join(lines) + "\n"
