"""The verdict of `sdpa-bench continuous` as text, Markdown (a PR comment) or JSON."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

from ..fmt import cell, code, fit_comment, fmt_bytes, fmt_factor, table
from ..gate.render import folded, rules_and_failures
from ..gate.rules import NA
from .verdict import Row, SideBySide


def _time_cells(row: Row) -> list[str]:
    if row.ratio is None:
        return ["-", "-", "-"]
    lo, hi = row.interval
    q = "-" if row.q is None else f"{row.q:.2g}"
    return [f"×{row.ratio:.3f}", f"{lo:.3f}–{hi:.3f}", q]


def _runs(row: Row) -> tuple[int, int]:
    """(base, head) runs whose times were compared: where one process timed both sides, its rounds (the first
    process of each side only checked); else every run."""
    return (len(row.paired),) * 2 if row.paired else (len(row.base), len(row.head))


def _memory_cell(row: Row) -> str:
    b = {p.peak_memory_bytes for p in row.base if p.peak_memory_bytes is not None}
    h = {p.peak_memory_bytes for p in row.head if p.peak_memory_bytes is not None}
    if not b or not h:
        return fmt_bytes(max(b | h)) if b | h else "-"
    if b == h:
        return f"{fmt_bytes(max(b))} ="
    return f"{fmt_bytes(max(b))} → {fmt_bytes(min(h))} ({min(h) - max(b):+d} B)"


def render(report: SideBySide, base: str, head: str, markdown: bool = False, run_notes: Sequence[str] = (),
           header: Sequence[str] = (), about: str = "") -> str:
    """One row per benchmark (head/base ratio, interval, adjusted p, memory, verdict), the in-run rules, failures,
    the undecided benchmarks, the rows whose kernels differ, notes (`run_notes`, how the runs were made, come
    last); `about`, what was compared (the repository, or the sdpa-bench on both sides), then `header`, what the
    sides' environments were and how they differ, come under the title. In Markdown, a PR comment, it fits in one
    (fmt.fit_comment)."""
    if markdown:
        return fit_comment(lambda fold: _text(report, base, head, True, run_notes, header, about, fold))
    return _text(report, base, head, False, run_notes, header, about, False)


def _text(report: SideBySide, base: str, head: str, markdown: bool, run_notes: Sequence[str], header: Sequence[str],
          about: str, fold: bool) -> str:
    verdict = "FAIL" if report.exit_code else "PASS"
    undecided = report.undecided
    bullet = "- " if markdown else "  "
    # in Markdown (a PR comment) whatever a person wrote (names, subjects, requirements, paths) is a code span
    shown = code if markdown else str
    out = [f"{'## ' if markdown else ''}sdpa-bench continuous: {verdict} "
           f"({len(report.failures)} failed check(s), {len(undecided)} undecided) — head {shown(head)} vs base "
           f"{shown(base)}", ""]
    if about:
        out += [f"Compared: {shown(about)}", ""]
    if header:
        out += ["Environments:"] + [f"{bullet}{shown(line)}" for line in header] + [""]
    # in the CI log too: which thresholds judged (a --config, or a pull request that changed them)
    out += [f"Config: {shown(report.config_source or 'built-in defaults')}. Time: head/base ratio of medians, "
            f"a regression above ×{fmt_factor(report.factor)} at false discovery rate {report.fdr:g} "
            "(Benjamini–Hochberg over the preset).", ""]
    rows, under = folded(report.rows, fold)
    out += table(["benchmark", "head/base", "95% CI", "q (BH)", "runs", "peak memory", "verdict"],
                 [[cell(r.label) if markdown else r.label, *_time_cells(r), "+".join(map(str, _runs(r))),
                   _memory_cell(r), r.verdict]
                  for r in rows],
                 markdown).splitlines() + under
    out += rules_and_failures(report.ratios, report.failures, markdown, "in-run rule (head)")
    one_side = [r for r in report.rows if not r.base or not r.head]
    if one_side:
        out += ["", "On one side only:"] + [f"{bullet}{shown(r.label)}: {r.verdict}"
                                            + (" (its test failed in head, above)" if r.head_failed else "")
                                            for r in one_side]
    if undecided:
        out += ["", f"Undecided ({len(undecided)}: neither slower nor clear of ×{fmt_factor(report.factor)} when the "
                    "rounds ended" + (", or more host time in every run but not significantly"
                               if any(r.host_undecided for r in undecided) else "")
                + "; counted as a pass, not a failure):"]
        out += [f"{bullet}{shown(r.label)}: "
                + (f"×{r.ratio:.3f}, 95% CI {r.interval[0]:.3f}–{r.interval[1]:.3f}" if r.interval else "")
                + (f" (low end {r.without_one:.3f} with one run left out)" if r.without_one is not None else "")
                + (f": above ×{fmt_factor(report.factor)}, not yet significant or not with any one run left out"
                   if r.interval and r.interval[0] > report.factor else "")
                + ("; " if r.interval and r.host_undecided else "")
                + ("host overhead higher in every run, not yet significant" if r.host_undecided else "")
                + ", {} base and {} head runs".format(*_runs(r)) for r in undecided]
    kernels = [c for r in report.rows for c in r.checks if c.kind == "kernels"]
    if kernels:
        out += ["", f"Kernels that differ between the sides ({len(kernels)}, from one profiled call per run):"]
        out += [f"{bullet}{shown(c.subject)}: {shown(c.message)}" for c in kernels]
    skipped = [c for r in rows for c in r.checks if c.status == NA]
    if skipped:
        out += ["", "Not checked:"] + [f"{bullet}{c.kind} {shown(c.subject)}: {shown(c.message)}" for c in skipped]
    notes = [*report.notes, *run_notes]
    if notes:
        out += ["", "Notes:"] + [f"{bullet}{n}" for n in notes]
    return "\n".join(out) + "\n"


def as_dict(report: SideBySide, base: str, head: str, run: dict | None = None) -> dict:
    """JSON-ready: verdict, exit code, every row with its statistics, decision and checks (no raw samples), the
    undecided benchmarks, and `run` (how the runs were made: seed, order of sides, adaptive rounds) as given."""
    return {
        "verdict": "FAIL" if report.exit_code else "pass", "exit_code": report.exit_code, "base": base,
        "head": head, "config": report.config_source, "factor": report.factor, "fdr": report.fdr,
        "undecided": [r.label for r in report.undecided], "run": run or {},
        "rows": [{"impl": r.impl, "case": r.case_id, "verdict": r.verdict, "decision": r.decision, "unit": r.unit,
                  "ratio": r.ratio,
                  "interval": list(r.interval) if r.interval else None, "without_one": r.without_one,
                  "p": r.p, "q": r.q,
                  "base_runs": len(r.base), "head_runs": len(r.head),
                  "base_peak_memory": [p.peak_memory_bytes for p in r.base],
                  "head_peak_memory": [p.peak_memory_bytes for p in r.head],
                  "head_failed": r.head_failed or None,
                  "checks": [asdict(c) for c in r.checks]} for r in report.rows],
        "ratios": [asdict(c) for c in report.ratios],
        "failures": [asdict(c) for c in report.failures],
        "notes": list(report.notes),
    }
