"""One step of `sdpa-bench bisect` read from one comparison: each row under test DIFFERENT (head slower than base by
more than the step's floor: verdict.decide's "slower"; or, for a row whose peak memory grew between GOOD and BAD,
head's peak above base's, exact), SAME (the interval at or below the floor: "not slower"; the same peak) or
UNKNOWN (undecided); the step DIFFERENT when any row is, SAME when every one is, else UNKNOWN. And what a search
measures: the rows a `continuous --json` verdict found slower, as a pytest -k expression.

    row_steps(comparison, labels) -> (RowStep, ...)   /   verdict_of(rows) -> DIFFERENT | SAME | UNKNOWN
    broken_at_head(comparison, labels) -> ["label: why"]   # rows head could not time (an error, a wrong answer)
    endpoint_failures(comparison, good, bad, reference) -> (why nothing compares, notes)
    memory_notes(bigger) -> [str]                     # the rows searched by peak memory, and their time
    rows_from_verdict(path) -> ((impl, case), ...)    /   selection_of(rows, select, reference) -> -k expression
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from ..bench.grid import PRESETS
from ..errors import UsageError
from ..fmt import fmt_bytes
from ..gate.rules import FAIL
from .adaptive import keyword
from .comparison import Comparison
from .verdict import NOT_SLOWER, SLOWER, Row

DIFFERENT, SAME, UNKNOWN, SKIPPED = "DIFFERENT", "SAME", "UNKNOWN", "SKIPPED"


@dataclasses.dataclass(frozen=True)
class RowStep:
    """One row under test in one step: head/base ratio of medians, 95 % interval, and its three-way verdict."""

    label: str
    ratio: float | None
    interval: tuple[float, float] | None
    verdict: str
    memory: str = ""  # a memory row: its peaks, base → head (the row's time is not what is searched)
    why: str = ""  # what kept a measured row UNKNOWN: its interval, its significance, or a run left out

    def text(self) -> str:
        if self.memory:
            return f"{self.label}: peak memory {self.memory} {self.verdict}"
        if self.ratio is None or self.interval is None:
            return f"{self.label}: not measured ({self.verdict})"
        return (f"{self.label}: ×{self.ratio:.3f} ({self.interval[0]:.3f}–{self.interval[1]:.3f}) {self.verdict}"
                + (f" ({self.why})" if self.why else ""))


def _undecided_why(row: Row, factor: float, fdr: float) -> str:
    """Why a measured row is neither slower nor not (verdict.decide), in the step's words."""
    if row.interval is None or row.q is None:
        return ""
    if row.interval[0] <= factor:
        return f"interval not clear of ×{factor:.3f}"
    if row.q >= fdr:
        return f"above ×{factor:.3f}, not significant: q {row.q:.2g} ≥ {fdr:g}"
    if row.without_one is None:
        return "one run a side: no run to leave out"
    return f"low end {row.without_one:.4f} with one run left out, not above ×{factor:.4f}"


@dataclasses.dataclass(frozen=True)
class Step:
    """One comparison of the search (or a skipped commit): what it was for, base and head (hash and subject), its
    verdict, the floor it was judged at, the rows, what it took, and notes (a skip's reason, the adaptive rounds,
    kernels and environments that differ)."""

    kind: str
    base: str
    head: str
    verdict: str
    floor: float
    rows: tuple[RowStep, ...] = ()
    seconds: float = 0.0
    notes: tuple[str, ...] = ()


def _decision(decision: str | None) -> str:
    return {SLOWER: DIFFERENT, NOT_SLOWER: SAME}.get(decision or "", UNKNOWN)


def memory_failed(row: Row) -> bool:
    """Whether the row's exact peak-memory check failed: head's smallest peak above base's largest."""
    return any(c.kind == "memory" and c.failed for c in row.checks)


def memory_notes(bigger: list[Row]) -> list[str]:
    """What a search says of its rows searched by peak memory (`bigger`): how they are judged, and each one that
    was also slower between GOOD and BAD, whose time this search does not follow (a row is searched one way)."""
    if not bigger:
        return []
    notes = [f"{len(bigger)} row(s) searched by peak memory, which is exact: a step is DIFFERENT where head's peak "
             "lies above base's."]
    notes += [f"{r.label} was also slower between GOOD and BAD (×{r.ratio:.3f}), but is searched by its peak memory "
              "alone: the commit that made it slower may be another. Its peak is the same on either side of the "
              f"commit that grew it, so its time can be searched there (-k '[{r.impl}-{r.case_id}]'): from GOOD to "
              "that commit's parent, and from that commit to BAD where it is not BAD itself" for r in bigger
              if r.decision == SLOWER and r.ratio is not None]
    return notes


def _memory_step(row: Row) -> RowStep:
    """A memory row read three ways: peak memory is exact, so DIFFERENT when head's smallest peak lies above base's
    largest (the verdict's memory check fails), SAME when it does not, UNKNOWN when a side recorded none."""
    base = [p.peak_memory_bytes for p in row.base if p.peak_memory_bytes is not None]
    head = [p.peak_memory_bytes for p in row.head if p.peak_memory_bytes is not None]
    if not base or not head:
        return RowStep(row.label, None, None, UNKNOWN, "not recorded")
    verdict = DIFFERENT if memory_failed(row) else SAME
    return RowStep(row.label, min(head) / max(base), None, verdict,
                   f"{fmt_bytes(max(base))} → {fmt_bytes(min(head))} ({min(head) - max(base):+d} B)")


def row_steps(comparison: Comparison, labels: tuple[str, ...], memory: frozenset[str] = frozenset()
              ) -> tuple[RowStep, ...]:
    """Each row under test in `comparison`, read three ways; `memory` names the rows whose peak memory, not time, is
    searched."""
    found = {r.label: r for r in comparison.report.rows}
    out = []
    for label in labels:
        row = found.get(label)
        if row is None:
            out.append(RowStep(label, None, None, UNKNOWN))
        elif label in memory:
            out.append(_memory_step(row))
        else:
            verdict = _decision(row.decision)
            why = _undecided_why(row, comparison.report.factor, comparison.report.fdr) if verdict == UNKNOWN else ""
            out.append(RowStep(label, row.ratio, row.interval, verdict, why=why))
    return tuple(out)


def broken_at_head(comparison: Comparison, labels: tuple[str, ...] | None = None, raised: bool = False) -> list[str]:
    """`label: why` for each row (of `labels`, else every one) whose test failed in head (an error, a wrong answer:
    no time), or, unless `raised`, whose timed answer failed the correctness check."""
    out = []
    for row in comparison.report.rows:
        why = row.head_failed if raised else row.broken
        if why and (labels is None or row.label in labels):
            out.append(f"{row.label}: {why.strip().splitlines()[0][:200]}")
    return out


def endpoint_failures(comparison: Comparison, good: str, bad: str, reference: str) -> tuple[str, list[str]]:
    """What keeps GOOD against BAD from answering "no regression": (the error, "" where nothing does; notes on the rows
    not compared). A row that failed at BAD (broken_at_head), or no row but the reference's measured on both sides
    (one side failed or skipped them): "no regression" would hide a kernel that raises or answers wrong. A row one
    side alone measured, beside others that compared (a case new there), is a note."""
    broken = broken_at_head(comparison)
    judged = [r for r in comparison.report.rows if r.impl != reference]
    only = {"BAD": [r.label for r in judged if r.head and not r.base],
            "GOOD": [r.label for r in judged if r.base and not r.head and not r.head_failed]}
    notes = [f"BAD {bad} failed {len(broken)} benchmark(s) (an error or a wrong answer): {'; '.join(broken[:3])}"
             + ("; ..." if len(broken) > 3 else "")] if broken else []
    for side, other in (("BAD", f"GOOD {good}"), ("GOOD", f"BAD {bad}")):
        if only[side]:
            notes.append(f"measured at {side} only ({len(only[side])}: failed or skipped at {other}, or new), not "
                         f"compared: {', '.join(only[side][:3])}" + (", ..." if len(only[side]) > 3 else ""))
    if reference and comparison.report.rows and not judged:
        return (f"only {reference} was measured, the time reference that every other implementation is timed "
                "against and that is not judged itself: no row could be slower, so nothing was searched; choose "
                "another implementation's rows (-k, --impl)"), notes
    unusable = "GOOD and BAD cannot be compared, so nothing can be searched: "
    if broken:
        more = f" (and {len(broken) - 1} more)" if len(broken) > 1 else ""
        return f"{unusable}BAD {bad}: {broken[0]}{more}", notes
    if judged and not any(r.base and r.head for r in judged):  # each judged row on one side only
        side, name, other = ("GOOD", good, "BAD") if only["BAD"] else ("BAD", bad, "GOOD")
        missing = only[other]
        return (f"{unusable}{side} {name}: measured none of the {len(missing)} benchmark(s) {other} measured "
                f"(first, {missing[0]}): it failed or skipped them there"), notes
    return "", notes


def verdict_of(rows: tuple[RowStep, ...]) -> str:
    if any(r.verdict == DIFFERENT for r in rows):
        return DIFFERENT
    if rows and all(r.verdict == SAME for r in rows):
        return SAME
    return UNKNOWN


def step_notes(comparison: Comparison, labels: tuple[str, ...]) -> tuple[str, ...]:
    """What a person reads beside a step's verdict: its adaptive rounds, the kernels that differ on the rows under
    test, and the environments' differences."""
    kernels = [f"kernels {c.subject}: {c.message}" for r in comparison.report.rows if r.label in labels
               for c in r.checks if c.kind == "kernels"]
    adaptive = [n for n in comparison.run_notes if n.startswith("adaptive rounds")]
    return (*adaptive, *kernels, *comparison.header)


def _other_json(data: object) -> str:
    """What a JSON file that is not a `continuous` verdict is, where sdpa-bench wrote it ("" where unknown)."""
    if not isinstance(data, dict):
        return ""
    if "resume" in data or {"answer", "steps"} <= data.keys():
        return "the answer of `sdpa-bench bisect --json`"
    rows = data.get("rows")
    if isinstance(rows, list) and rows and all(isinstance(r, dict) and "baseline" in r for r in rows):
        return "a verdict of `sdpa-bench gate --json`"
    if "benchmarks" in data:
        return "pytest-benchmark's results"
    return ""


def rows_from_verdict(path: str) -> tuple[tuple[str, str], ...]:
    """The (impl, case) rows a `continuous --json` verdict found slower or bigger (a failed peak-memory check);
    UsageError when there are none, or when the file is another JSON (a bisect's answer has rows too, with no
    decision: it would read as "nothing slower")."""
    def failed(row: dict, kind: str) -> bool:
        return any(c["kind"] == kind and c["status"] == FAIL for c in row.get("checks") or ())
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        rows = tuple((r["impl"], r["case"]) for r in data["rows"] if r["decision"] == SLOWER or failed(r, "memory"))
        wrong = sum(failed(r, "correctness") for r in data["rows"])
    except OSError as exc:
        raise UsageError(f"--from {path}: cannot be read ({exc.strerror or exc})") from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # not JSON, or rows that are not objects
        other = _other_json(data) if not isinstance(exc, ValueError) else ""
        if other:
            raise UsageError(f"--from {path}: is {other}; --from takes a verdict of `sdpa-bench continuous --json` "
                             "(its rows that were slower or bigger)") from None
        why = f"no {exc}" if isinstance(exc, KeyError) else str(exc)  # a KeyError's text is the bare key
        raise UsageError(f"--from {path}: not a verdict of `sdpa-bench continuous --json` ({why})") from None
    if not rows:
        raise UsageError(f"--from {path}: no benchmark in it was slower or bigger (decision \"slower\", or a failed "
                         "memory check): nothing to search for" + (
                             f"; {wrong} gave a wrong result, which bisect does not search: `git bisect run` with "
                             "the suite's test finds that commit" if wrong else ""))
    return rows


def rows_outside(rows: tuple[tuple[str, str], ...], preset_name: str, path: str) -> list[str]:
    """The --from `rows` whose case the search's preset lacks (the verdict, which does not name its preset, was of
    another); UsageError where it lacks every one and another preset holds them all (named). These are this
    sdpa-bench's presets: a revision of sdpa-bench itself may define its own, so where none holds them it is said,
    not refused."""
    ids = {c.id for c in PRESETS.get(preset_name, ())}
    outside = [f"{impl}[{case}]" for impl, case in rows if case not in ids]
    holders = [n for n, cases in PRESETS.items() if {c for _, c in rows} <= {c.id for c in cases}]
    if rows and len(outside) == len(rows) and holders:
        raise UsageError(f"--from {path}: none of its rows' cases is in the preset {preset_name} this search runs "
                         f"(e.g. {rows[0][1]}): give the preset that verdict was measured with (--preset "
                         f"{' or '.join(holders)} holds them all)")
    return outside


def selection_of(rows: tuple[tuple[str, str], ...], select: str | None, reference: str) -> str | None:
    """The -k expression of the endpoints: the (impl, case) `rows` of a verdict (with the time reference on their
    cases), else `select` as given."""
    if rows:
        cases = dict.fromkeys(case for _, case in rows)
        terms = [f"[{impl}-{case}]" for impl, case in rows] + ([f"[{reference}-{c}]" for c in cases]
                                                               if reference else [])
        try:
            return keyword(list(dict.fromkeys(terms)))
        except ValueError as exc:
            raise UsageError(f"--from: {exc}") from None
    return select


def unexplained(confirmed: tuple[RowStep, ...], endpoints: dict[str, RowStep], at_culprit: dict[str, RowStep]
                ) -> list[str]:
    """Notes on the rows a confirmed culprit does not explain. `confirmed`: the culprit against its parent;
    `endpoints`: BAD against GOOD; `at_culprit`: the culprit against GOOD as the search measured it (empty where the
    culprit is BAD). A row SAME at the culprit changed elsewhere. Peak memory is exact: any shortfall is another
    change. A time row is short only where the culprit against GOOD is also clearly below BAD against GOOD (the
    search found the parent SAME, so what is missing came later): two steps' intervals alone can be apart by the
    machine's drift between them."""
    notes = []
    for row in confirmed:
        whole, searched = endpoints[row.label], at_culprit.get(row.label)
        if row.verdict == SAME:
            notes.append(f"{row.label} is not {'bigger' if row.memory else 'slower'} at the culprit: it changed "
                         "elsewhere between GOOD and BAD (bisect again with that row).")
        elif row.memory and whole.ratio and row.ratio and row.ratio < whole.ratio:
            notes.append(f"{row.label}: the culprit explains only part of GOOD → BAD's peak memory ({row.memory} "
                         f"against {whole.memory}): another change in the range adds to it.")
        elif not row.memory and row.interval and whole.interval and row.interval[1] < whole.interval[0] \
                and searched is not None and searched.interval and searched.interval[1] < whole.interval[0]:
            notes.append(f"{row.label}: the culprit explains only part of GOOD → BAD (×{row.ratio:.3f} against its "
                         f"parent, ×{searched.ratio:.3f} against GOOD, ×{whole.ratio:.3f} at BAD, intervals apart): "
                         "a later change in the range adds to it.")
    return notes
