"""The gate's verdict as text, Markdown (e.g. a PR comment) or JSON."""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict

from ..fmt import WHOLE, cell, code, fit_comment, fmt_bytes, fmt_seconds, table
from .compare import Comparison, Verdict
from .points import Point
from .rules import GEMM, IDLE, NA, PASS, REFERENCE, REFUSED, Check


def _times(ratio: float) -> str:
    return f"×{ratio:.2f}" if ratio >= 0.095 else f"×{ratio:.2g}"  # a 300× speed-up is ×0.0033, not ×0.00


def _time_cell(row: Comparison) -> str:
    """B's median against A's as measured, and where the time was judged in units of the time reference, the ratio
    in those units too: the one the verdict stands on (a row whose own time did not move fails where the
    reference's ran faster in B's run)."""
    b, c = row.baseline, row.candidate
    if c is None:
        return fmt_seconds(b.median_s) + " → -"
    if b is None or b.median_s is None or c.median_s is None:
        return fmt_seconds(c.median_s)
    ratio = c.median_s / b.median_s if b.median_s else float("inf")
    cell = f"{fmt_seconds(b.median_s)} → {fmt_seconds(c.median_s)} {_times(ratio)}"
    referenced = next((ch.referenced for ch in row.checks if ch.kind == "time" and ch.referenced), None)
    return cell if referenced is None else f"{cell}, {_times(referenced[0])} in {referenced[1]}'s units"


def _memory_cell(row: Comparison) -> str:
    b, c = row.baseline, row.candidate
    if c is None or b is None:
        return fmt_bytes((c or b).peak_memory_bytes)
    return f"{fmt_bytes(b.peak_memory_bytes)} → {fmt_bytes(c.peak_memory_bytes)}"


def _error_cell(row: Comparison) -> str:
    c = row.candidate
    if c is None or c.max_error is None or c.error_tolerance is None:
        return "-"
    return f"{c.max_error:.2g} / {c.error_tolerance:.2g}"


def _verdict_cell(row: Comparison) -> str:
    """The row's verdict, saying where its time was not judged (different machines; the time reference itself):
    a bare "pass" there would vouch for a time nobody compared."""
    time = next((c for c in row.checks if c.kind == "time"), None)
    if row.verdict != PASS or time is None or time.status not in (REFUSED, NA):
        return row.verdict
    if time.mark != REFERENCE:
        return "pass, time not compared"  # other machines, or no median time recorded on a side
    return "pass, time is the reference"


def rules_and_failures(ratios: Sequence[Check], failures: Sequence[Check], markdown: bool,
                       title: str = "in-run rule", with_json: bool = True) -> list[str]:
    """The in-run rules' table and the list of failed checks, as both verdicts print them. Rules that applied to no
    case that ran (a plug-in's run has none of sdpa-bench's own implementations) are one line, not a row each, which
    points to --json where the command has one (`with_json`)."""
    out: list[str] = []
    idle = [c for c in ratios if c.mark == IDLE]
    shown = [c for c in ratios if c not in idle]
    if shown:
        out += [""] + table([title, "verdict", "numbers"],
                            [[cell(c.subject) if markdown else c.subject, c.status,
                              cell(c.message) if markdown else c.message] for c in shown],
                            markdown).splitlines()
    if idle:
        names = sorted({n for c in idle for pair in re.findall(r"(\w+) / (\w+)", c.subject) for n in pair} - {GEMM})
        out += ["", f"{len(idle)} in-run rule(s) n/a, applying to no case that ran (on "
                    f"{', '.join(code(n) if markdown else n for n in names)})"
                    + ("; each is in --json." if with_json else ".")]
    bullet = "- " if markdown else "  "
    if failures:  # in Markdown a subject (an implementation's name: a plug-in's) and a message (which may quote an
        # exception a plug-in raised, or a reason it gave) are code spans
        span = code if markdown else str
        out += ["", "Failures:"] + [f"{bullet}{c.kind} {span(c.subject)}: {span(c.message)}" for c in failures]
    return out


def folded(rows: Sequence, fold: bool, whole: str = WHOLE) -> tuple[list, list[str]]:
    """The rows a verdict lists (in its table and under "Not checked"), and the line under the table: where `fold`
    (a Markdown verdict too long for one PR comment), the rows that did not pass, and a count of those that did."""
    if not fold:
        return list(rows), []
    shown = [r for r in rows if r.verdict != PASS]
    return shown, ["", f"{len(rows) - len(shown)} more benchmark(s) passed, not listed (nor what was not checked on "
                       f"them) to fit one PR comment: every row is {whole}."]


def render_verdict(report: Verdict, markdown: bool = False, command: str = "gate") -> str:
    """The verdict as text: one row per benchmark, one per ratio rule and case, then failures and notes. `command`
    "compare" heads it as what the gate would say (compare informs, its exit status is 0). In Markdown, a PR
    comment, it fits in one (fmt.fit_comment)."""
    if markdown:
        whole = "in the command's own output" if command == "compare" else WHOLE  # compare has no --json
        return fit_comment(lambda fold: _verdict_text(report, True, command, fold, whole), whole)
    return _verdict_text(report, False, command, False, "")


def _verdict_text(report: Verdict, markdown: bool, command: str, fold: bool, whole: str) -> str:
    verdict = "FAIL" if report.exit_code else "PASS"
    said = f"the gate's rules would {verdict}" if command == "compare" else verdict
    out = [f"{'## ' if markdown else ''}sdpa-bench {command}: {said} "
           f"({len(report.failures)} failed check(s); config: {report.config_source or 'built-in defaults'})", ""]
    shown = code if markdown else str
    rows, under = folded(report.rows, fold, whole)
    out += table(["benchmark", "median time, as measured", "peak memory", "error / tol", "verdict"],
                 [[(cell if markdown else str)(r.candidate.label if r.candidate else r.baseline.label), _time_cell(r),
                   _memory_cell(r), _error_cell(r), _verdict_cell(r)] for r in rows], markdown).splitlines() + under
    out += rules_and_failures(report.ratios, report.failures, markdown, with_json=command != "compare")
    bullet = "- " if markdown else "  "
    skipped = [c for r in rows for c in r.checks if c.status == NA]  # refusals are one note
    if skipped:
        out += ["", "Not checked:"] + [f"{bullet}{c.kind} {shown(c.subject)}: {shown(c.message)}" for c in skipped]
    if report.notes:
        out += ["", "Notes:"] + [f"{bullet}{n}" for n in report.notes]
    return "\n".join(out) + "\n"


def verdict_dict(report: Verdict) -> dict:
    """JSON-ready: verdict, exit code, every row with its checks, ratio checks and notes (no raw samples)."""
    def point(p: Point | None) -> dict | None:
        return None if p is None else {k: v for k, v in asdict(p).items() if k != "samples"} | {
            "n_samples": len(p.samples)}
    return {
        "verdict": "FAIL" if report.exit_code else PASS, "exit_code": report.exit_code,
        "config": report.config_source,
        "rows": [{"impl": r.impl, "case": r.case_id, "verdict": r.verdict, "baseline": point(r.baseline),
                  "candidate": point(r.candidate), "checks": [asdict(c) for c in r.checks]} for r in report.rows],
        "ratios": [asdict(c) for c in report.ratios],
        "failures": [asdict(c) for c in report.failures],
        "notes": list(report.notes),
    }
