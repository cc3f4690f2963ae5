"""What a sweep leaves behind: the case × implementation tables (text and Markdown), results.csv and report.md."""
from __future__ import annotations

import csv
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from .bench.result import Result, with_speedups
from .progress import fmt_duration, fmt_seconds
from .store import Sweep

CSV_FILE = "results.csv"
REPORT_FILE = "report.md"
CSV_CASE_FIELDS = ("lq", "lk", "e", "ev", "dtype", "causal", "mode", "mask", "batch", "heads_q", "heads_kv")
CSV_RESULT_FIELDS = ("median_s", "iqr_s", "tflops", "gbps", "roofline_pct", "peak_memory_bytes", "max_error",
                     "error_tolerance", "speedup_vs_torch_sdpa")


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


def _throughput(r: Result) -> str:
    if r.tflops is None:
        return "-"
    pct = "" if r.roofline_pct is None else f" ({r.roofline_pct:.0f}%)"
    return f"{r.tflops:.3g}{pct}"


# title, cell of an "ok" result; the first four are printed, all go into report.md
METRICS: list[tuple[str, Callable[[Result], str]]] = [
    ("median time per call (lower is better)", lambda r: fmt_seconds(r.median_s)),
    ("TFLOP/s (% of this machine's measured roofline)", _throughput),
    ("peak memory allocated during one call", lambda r: fmt_bytes(r.peak_memory_bytes)),
    ("max |error| vs the fp64 reference", lambda r: "-" if r.max_error is None else f"{r.max_error:.2g}"),
    ("speed-up vs torch_sdpa (higher is faster)",
     lambda r: "-" if r.speedup_vs_torch_sdpa is None else f"{r.speedup_vs_torch_sdpa:.2f}×"),
]


SHORT_REASONS = [  # (pattern in a reason, a few words for a table cell); the full reason goes to the notes
    (re.compile(r"device=\w+ \(supported: ([\w, ]+)\)"), r"needs \1"),
    (re.compile(r"dtype=(\w+) \(supported"), r"no \1"),
    (re.compile(r"head dim (\d+) > (\d+)"), r"E>\2"),
    (re.compile(r"not installed"), "not installed"),
    (re.compile(r"attn_mask of kind (\w+)"), r"no \1 mask"),
    (re.compile(r"^backward"), "fwd only"),
    (re.compile(r"out of memory", re.I), "OOM"),
    (re.compile(r"max \|error\| of (\w+)"), r"\1 error"),
    (re.compile(r"plug-in failed to load"), "broken plug-in"),
]


def short_reason(reason: str) -> str:
    """A few words for a table cell: 'needs cuda', 'no fp32', 'E>256', 'OOM', ... (else the first words)."""
    for pattern, words in SHORT_REASONS:
        m = pattern.search(reason)
        if m:
            return m.expand(words)
    return reason if len(reason) <= 16 else reason[:15].rstrip() + "…"


class Layout:
    """Rows, columns and footnotes shared by every table of one sweep.

    Implementations that ran nowhere become a "not run" list instead of a column of skips; every
    other skip, failure or wrong result shows in its cell as a short word and a footnote number.
    """

    def __init__(self, sweep: Sweep) -> None:
        self.results = with_speedups(sweep.results)
        self.cell = {(r.case.id, r.impl): r for r in self.results}
        order = list(sweep.meta.get("case_ids", []))
        present = {r.case.id for r in self.results}
        self.cases = [c for c in order if c in present] + sorted(present - set(order))
        impls = list(sweep.meta.get("impls", [])) or sorted({r.impl for r in self.results})
        ran = {r.impl for r in self.results if r.status != "skipped"}
        self.columns = [i for i in impls if i in ran]
        self.not_run: dict[str, list[str]] = {}
        for i in impls:
            if i not in ran:
                reasons = [r.reason for r in self.results if r.impl == i]
                self.not_run[i] = sorted(set(reasons)) or ["no point measured yet"]
        self.notes: list[str] = []
        self._note_ids: dict[str, int] = {}

    def note(self, text: str) -> int:
        if text not in self._note_ids:
            self.notes.append(text)
            self._note_ids[text] = len(self.notes)
        return self._note_ids[text]

    def text_of(self, case_id: str, impl: str, metric: Callable[[Result], str]) -> str:
        r = self.cell.get((case_id, impl))
        if r is None:
            return "…"  # not measured (yet)
        if r.status == "ok":
            return metric(r)
        word = {"skipped": "skip", "failed": "FAILED", "wrong": "WRONG"}.get(r.status, r.status)
        return f"{word}: {short_reason(r.reason)} ({self.note(f'{r.impl}: {r.reason}')})"

    def rows(self, metric: Callable[[Result], str]) -> list[list[str]]:
        return [[c] + [self.text_of(c, i, metric) for i in self.columns] for c in self.cases]


def _text_grid(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(row[k]) for row in [header, *rows]) for k in range(len(header))]
    lines = []
    for row in [header, *rows]:
        cells = [row[0].ljust(widths[0])] + [v.rjust(w) for v, w in zip(row[1:], widths[1:])]
        lines.append("  ".join(cells).rstrip())
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _md_grid(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" + "---:|" * (len(header) - 1)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def summary(layout: Layout, markdown: bool = False) -> str:
    """One row per implementation that ran: points by status, geometric-mean speed-up, cases where fastest."""
    fastest: dict[str, int] = {}
    for c in layout.cases:
        ok = [r for i in layout.columns if (r := layout.cell.get((c, i))) and r.status == "ok" and r.median_s]
        if ok:
            best = min(ok, key=lambda r: r.median_s).impl
            fastest[best] = fastest.get(best, 0) + 1
    header = ["implementation", "ok", "skipped", "failed", "wrong", "speed-up vs torch_sdpa (geo-mean)",
              "fastest in"]
    rows = []
    for impl in layout.columns:
        rs = [r for r in layout.results if r.impl == impl]
        n = {s: sum(r.status == s for r in rs) for s in ("ok", "skipped", "failed", "wrong")}
        ups = [math.log(r.speedup_vs_torch_sdpa) for r in rs if r.speedup_vs_torch_sdpa]
        geo = f"{math.exp(sum(ups) / len(ups)):.2f}×" if ups else "-"
        rows.append([impl, *(str(n[s]) for s in n), geo, f"{fastest.get(impl, 0)} of {len(layout.cases)} cases"])
    title = "summary per implementation"
    if markdown:
        return f"### {title[0].upper()}{title[1:]}\n\n{_md_grid(header, rows)}\n"
    return f"{title}\n{_text_grid(header, rows)}\n"


def tables(layout: Layout, markdown: bool = False, metrics: int = 4, with_summary: bool = True) -> str:
    """The summary, the metric tables (rows = cases, columns = implementations), the notes, the not-run list."""
    if not layout.cases:
        return "(no results yet)\n"
    out = [summary(layout, markdown)] if with_summary else []
    for title, metric in METRICS[:metrics]:
        header = ["case"] + layout.columns
        rows = layout.rows(metric)
        if markdown:
            out.append(f"### {title[0].upper()}{title[1:]}\n\n{_md_grid(header, rows)}\n")
        else:
            out.append(f"{title}\n{_text_grid(header, rows)}\n")
    bullet = "- " if markdown else "  "
    if layout.notes:
        out.append(("**Notes**\n\n" if markdown else "notes:\n")
                   + "\n".join(f"{bullet}({k}) {t}" for k, t in enumerate(layout.notes, 1)) + "\n")
    if layout.not_run and with_summary:
        out.append(not_run(layout, markdown))
    return "\n".join(out)


def not_run(layout: Layout, markdown: bool = False) -> str:
    """The implementations that ran nowhere in this sweep, each with its reasons."""
    bullet = "- " if markdown else "  "
    return (("**Not run on this machine**\n\n" if markdown else "not run on this machine:\n")
            + "\n".join(f"{bullet}{i}: {'; '.join(rs)}" for i, rs in layout.not_run.items()) + "\n")


def write_csv(path: Path, results: list[Result]) -> Path:
    """One row per (case, implementation); samples stay in results.json."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["case_id", "impl", "device", "status", *CSV_CASE_FIELDS, *CSV_RESULT_FIELDS, "n_samples",
                    "reason"])
        for r in with_speedups(results):
            w.writerow([r.case.id, r.impl, r.device, r.status, *(getattr(r.case, k) for k in CSV_CASE_FIELDS),
                        *("" if getattr(r, k) is None else getattr(r, k) for k in CSV_RESULT_FIELDS),
                        len(r.samples), r.reason])
    return path


def machine_lines(meta: dict) -> list[str]:
    m = meta.get("machine") or {}
    gpu = m.get("gpu") or {}
    rows = [("device", f"{m.get('device', '?')}" + (f": {gpu.get('name')}" if gpu else ""))]
    if gpu:
        rows.append(("GPU", f"{gpu.get('name')}, {fmt_bytes(gpu.get('memory_bytes'))}, compute capability "
                            f"{gpu.get('capability')}, driver {gpu.get('driver') or '?'}"))
    rows += [("CPU", f"{m.get('cpu', '?')} ({m.get('machine', '?')}), {m.get('threads', '?')} torch threads"),
             ("versions", f"torch {m.get('torch')}, CUDA {m.get('cuda') or 'none'}, "
                          f"xformers {m.get('xformers') or 'not installed'}, python {m.get('python')}")]
    ceil = meta.get("ceilings") or {}
    if ceil:
        parts = [f"GEMM {k.rsplit('_', 1)[1]} {v / 1e12:.3g} TFLOP/s" for k, v in sorted(ceil.items())
                 if k.startswith("gemm_flops_")]
        if "copy_bytes_per_s" in ceil:
            parts.append(f"copy {ceil['copy_bytes_per_s'] / 1e9:.3g} GB/s")
        rows.append(("measured ceilings", ", ".join(parts)))
    return [f"| {k} | {v} |" for k, v in rows]


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
            f"repetitions after {opts.get('warmup')} warm-up calls, seed {meta.get('seed', 0)}")


def write_markdown(path: Path, sweep: Sweep, layout: Layout, images: list[tuple[str, str]]) -> Path:
    """report.md: machine, sweep, the plots (relative links) and every table."""
    meta = sweep.meta
    m = meta.get("machine") or {}
    parts = [f"# sdpa-bench: `{meta.get('preset')}` on {m.get('device_name', '?')}\n",
             "| machine | |\n|---|---|\n" + "\n".join(machine_lines(meta)) + "\n",
             sweep_summary(sweep) + ".\n",
             "Times are medians over repetitions of one call; compare implementations within this report "
             "(ratios), not against another machine's absolute times. A result is only timed after its output "
             "matched the fp64 reference.\n"]
    if not sweep.complete:
        parts.append(f"**Incomplete**: {len(sweep.done())} of {sweep.planned} points finished "
                     "(continue with `run --resume`).\n")
    if layout.cases:
        parts.append(summary(layout, markdown=True))
    if layout.not_run:
        parts.append(not_run(layout, markdown=True))
    if images:
        parts.append("## Plots\n")
        parts += [f"### {title}\n\n![{title}]({name})\n" for title, name in images]
    parts += ["## Tables\n", tables(layout, markdown=True, metrics=len(METRICS), with_summary=False)]
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


def render(directory: Path, sweep: Sweep, stdout: TextIO | None = None, plots: bool = True) -> list[Path]:
    """Print the tables and (re)write results.csv, the PNG plots and report.md; returns the files written.

    Plotting problems (e.g. matplotlib not installed) are reported and skipped: the other files still appear.
    """
    stdout = stdout or sys.stdout
    directory = Path(directory)
    layout = Layout(sweep)
    print(tables(layout), file=stdout)
    files = [write_csv(directory / CSV_FILE, sweep.results)]
    images: list[tuple[str, str]] = []
    if plots:
        try:
            from .plots import write_plots

            images = write_plots(directory, sweep)
        except ImportError as exc:
            print(f"sdpa-bench: plots skipped: {exc} (pip install 'sdpa-bench[plots]')", file=sys.stderr)
        except Exception as exc:  # a plotting bug must not cost the CSV and the report
            print(f"sdpa-bench: plots skipped: {type(exc).__name__}: {exc}", file=sys.stderr)
    files += [directory / name for _, name in images]
    files.append(write_markdown(directory / REPORT_FILE, sweep, layout, images))
    return files
