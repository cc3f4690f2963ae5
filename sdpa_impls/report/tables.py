"""The case × implementation tables of a sweep (text and Markdown): one cell per point, skips and failures as notes."""
from __future__ import annotations

import math
import re
from collections.abc import Callable

from ..bench.contention import advice, contended, threads_text
from ..bench.result import Result, with_speedups
from ..fmt import fmt_bytes, fmt_seconds, table
from .results import Sweep


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
UNTIMED = ("peak memory", "max |error|", "compile time")  # tables whose cells a busy CPU does not change


def _device_cell(r: Result) -> str:
    if r.device_time_s is None:
        return "-"
    return fmt_seconds(r.device_time_s) + (" (eager)" if r.device_time_method == "eager" else "")


# shown with every metric (report.md) when a point has a device time (CUDA): the GPU's own time per call from a
# CUDA-graph replay, and what the host adds to it in a loop of eager calls (the first table's times)
DEVICE_METRICS = [
    ("device time per call: CUDA-graph replay (\"eager\": the call cannot be captured, see \"Device time\")",
     _device_cell),
    ("host overhead per call: eager time − device time",
     lambda r: "-" if r.host_overhead_s is None else fmt_seconds(r.host_overhead_s)),
]
# shown with every metric (report.md) when a point compiled: apart from the per-call times, never inside them
COMPILE_METRIC = ("compile time, once per point before any sample (its first call: compilation + one call)",
                  lambda r: "-" if r.compile_s is None else fmt_seconds(r.compile_s))


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


BUSY_NOTE = ("busy: other processes kept CPUs busy that torch's {threads} needed ({cpus} CPUs) while this point "
             "was measured (`other_cpus` in results.json): its times are slowed and scattered. Measure again "
             "{advice}")


def short_reason(reason: str) -> str:
    """A few words for a table cell: 'needs cuda', 'no fp32', 'E>256', 'OOM', ... (else the first words)."""
    for pattern, words in SHORT_REASONS:
        m = pattern.search(reason)
        if m:
            return m.expand(words)
    return reason if len(reason) <= 16 else reason[:15].rstrip() + "…"


class SweepTable:
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
                # each skip's reason lists its causes joined by "; " (bench.measure): every cause once, in order
                causes = [c for r in self.results if r.impl == i for c in (r.reason or "").split("; ") if c]
                self.not_run[i] = list(dict.fromkeys(causes)) or ["no point measured yet"]
        self.notes: list[str] = []
        self._note_ids: dict[str, int] = {}
        m = sweep.meta.get("machine") or {}
        self.threads, self.cpus = m.get("threads") or 1, m.get("cpus")

    def busy(self, r: Result) -> bool:
        """Whether other processes competed with torch's threads while `r` was measured (`contention`)."""
        return contended(r.other_cpus, self.threads, self.cpus)

    def note(self, text: str) -> int:
        if text not in self._note_ids:
            self.notes.append(text)
            self._note_ids[text] = len(self.notes)
        return self._note_ids[text]

    def text_of(self, case_id: str, impl: str, metric: Callable[[Result], str], timed: bool = True) -> str:
        """One cell; `timed`: a quantity from the times, marked where other processes held the CPUs."""
        r = self.cell.get((case_id, impl))
        if r is None:
            return "…"  # not measured (yet)
        if r.status == "ok":
            text = metric(r)
            if not timed or text == "-" or not self.busy(r):
                return text
            busy = BUSY_NOTE.format(threads=threads_text(self.threads), cpus=self.cpus or "?",
                                    advice=advice(self.threads))
            return f"{text} busy ({self.note(busy)})"
        word = {"skipped": "skip", "failed": "FAILED", "wrong": "WRONG"}.get(r.status, r.status)
        said = r.reason if r.reason.startswith(f"{r.impl}: ") else f"{r.impl}: {r.reason}"
        return f"{word}: {short_reason(r.reason)} ({self.note(said)})"

    def rows(self, metric: Callable[[Result], str], timed: bool = True) -> list[list[str]]:
        return [[c] + [self.text_of(c, i, metric, timed) for i in self.columns] for c in self.cases]


def summary(layout: SweepTable, markdown: bool = False) -> str:
    """One row per implementation that ran: points by status, geometric-mean speed-up over the cases it has one
    for (how many: implementations differ), cases where it was fastest by more than the spread of the times (the
    interquartile ranges of it and the next do not overlap; a closer case is a tie and counts for none) of those it
    ran beside another (a case it ran alone is no race, and no win)."""
    fastest: dict[str, int] = {}
    raced: dict[str, int] = {}
    for c in layout.cases:
        ok = sorted((r for i in layout.columns if (r := layout.cell.get((c, i))) and r.status == "ok" and r.median_s),
                    key=lambda r: r.median_s)
        if len(ok) < 2:
            continue
        for r in ok:
            raced[r.impl] = raced.get(r.impl, 0) + 1
        if ok[0].median_s + (ok[0].iqr_s or 0) / 2 < ok[1].median_s - (ok[1].iqr_s or 0) / 2:
            fastest[ok[0].impl] = fastest.get(ok[0].impl, 0) + 1
    header = ["implementation", "ok", "skipped", "failed", "wrong", "speed-up vs torch_sdpa (geo-mean, cases)",
              "fastest in (IQRs apart)"]
    rows = []
    for impl in layout.columns:
        rs = [r for r in layout.results if r.impl == impl]
        n = {s: sum(r.status == s for r in rs) for s in ("ok", "skipped", "failed", "wrong")}
        ups = [math.log(r.speedup_vs_torch_sdpa) for r in rs if r.speedup_vs_torch_sdpa]
        geo = f"{math.exp(sum(ups) / len(ups)):.2f}× ({len(ups)})" if ups else "-"
        wins = f"{fastest.get(impl, 0)} of {raced[impl]} cases" if raced.get(impl) else "- (ran beside none)"
        rows.append([impl, *(str(n[s]) for s in n), geo, wins])
    title = "summary per implementation"
    if markdown:
        return f"### {title[0].upper()}{title[1:]}\n\n{table(header, rows, True, numeric=True)}\n"
    return f"{title}\n{table(header, rows, numeric=True)}\n"


def tables(layout: SweepTable, markdown: bool = False, metrics: int = 4, with_summary: bool = True) -> str:
    """The summary, the metric tables (rows = cases, columns = implementations), the notes, the not-run list."""
    if not layout.cases:
        return "(no results yet)\n"
    out = [summary(layout, markdown)] if with_summary else []
    chosen = METRICS[:metrics]
    if metrics >= len(METRICS) and any(r.device_time_s is not None for r in layout.results):
        chosen = [*chosen, *DEVICE_METRICS]
    if metrics >= len(METRICS) and any(r.compile_s is not None for r in layout.results):
        chosen = [*chosen, COMPILE_METRIC]
    if not any(r.speedup_vs_torch_sdpa for r in layout.results):  # no torch_sdpa beside them: a table of "-"
        chosen = [(t, m) for t, m in chosen if not t.startswith("speed-up")]
    for title, metric in chosen:
        header = ["case"] + layout.columns
        rows = layout.rows(metric, timed=not title.startswith(UNTIMED))
        if markdown:
            out.append(f"### {title[0].upper()}{title[1:]}\n\n{table(header, rows, True, numeric=True)}\n")
        else:
            out.append(f"{title}\n{table(header, rows, numeric=True)}\n")
    bullet = "- " if markdown else "  "
    if layout.notes:
        out.append(("**Notes**\n\n" if markdown else "notes:\n")
                   + "\n".join(f"{bullet}({k}) {t}" for k, t in enumerate(layout.notes, 1)) + "\n")
    if layout.not_run and with_summary:
        out.append(not_run(layout, markdown))
    return "\n".join(out)


def not_run(layout: SweepTable, markdown: bool = False) -> str:
    """The implementations that ran nowhere in this sweep, each with its reasons."""
    bullet = "- " if markdown else "  "
    return (("**Not run in this sweep**\n\n" if markdown else "not run in this sweep:\n")
            + "\n".join(f"{bullet}{i}: {'; '.join(rs)}" for i, rs in layout.not_run.items()) + "\n")
