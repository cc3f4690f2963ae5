"""Adaptive rounds: after the planned rounds, more runs of base and head for the still undecided benchmarks only,
until every benchmark is decided, the time budget is spent or the number of rounds allowed is reached.

    extend(base_runs, head_runs, failed, config, measure, budget_s, ...) -> Outcome

After each round everything is judged again (verdict.judge, a pure function of all runs so far). A benchmark whose
head/base interval is not clear of the time floor (verdict.decide: "undecided") is measured again, together with
the time reference on its cases (each run's speed is read from the reference); decided benchmarks are not. The
next round starts only when the time spent on extra rounds plus the last round's duration (for the first, the
caller's estimate) fits the budget, so the budget is not overrun by more than that estimate's error.

`measure(terms, index)` runs one round (a run of each side, in the schedule's order) on the benchmarks whose
pytest names are `terms` and returns (base points, head points, head's failed tests); the command line runs the
sides' suites with `-k`, which works on any revision's suite, older ones included.
"""
from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..gate.config import GateConfig
from ..gate.points import Point
from .verdict import Row, SideBySide, judge

Measure = Callable[[list[str], int], tuple[list[Point], list[Point], list[str]]]
KEYWORD = re.compile(r"[\w:+\-.\[\]\\/]+")  # what a pytest -k identifier may hold


@dataclass(frozen=True)
class Adaptive:
    """What the extra rounds did: the budget, the time they took, how many benchmarks each measured, why they stopped
    ("decided": nothing left undecided; "budget": the next round would not fit; "rounds": as many rounds as allowed;
    "failed": the verdict fails whatever they find; "none": no budget), and where the budget came from
    (`budget_from`, a phrase; "" unsaid)."""

    budget_s: float
    spent_s: float
    selected: tuple[int, ...]
    stopped: str
    budget_from: str = ""

    @property
    def rounds(self) -> int:
        return len(self.selected)

    def note(self) -> str:
        text = self._note()
        return f"{text[:-1]}; budget {self.budget_s:.0f} s, {self.budget_from}." if self.budget_from and self.budget_s \
            else text

    def _note(self) -> str:
        if not self.selected:
            return {"decided": "adaptive rounds: none needed, every timed benchmark was decided.",
                    "failed": "adaptive rounds: none, the verdict fails already (a failed test or a wrong answer).",
                    "none": "adaptive rounds: off (no budget)."}.get(
                        self.stopped, f"adaptive rounds: none, the first would not fit the {self.budget_s:.0f} s "
                                      "budget.")
        why = {"decided": "every benchmark was decided",
               "failed": "the verdict fails already (a failed test or a wrong answer)",
               "rounds": f"{self.rounds} round(s) were allowed"}.get(
                   self.stopped, f"the next would not fit the {self.budget_s:.0f} s budget")
        return (f"adaptive rounds: {self.rounds} more of base and head for the undecided benchmarks only ("
                + ", ".join(map(str, self.selected)) + f" benchmarks), {self.spent_s:.0f} s; stopped because {why}.")


@dataclass(frozen=True)
class Outcome:
    """The verdict over every run, the runs themselves (planned first, then extra), the extra rounds' log, and
    how the rounds were measured (`pairing`, a note; continuous.comparison)."""

    report: SideBySide
    base_runs: list[list[Point]]
    head_runs: list[list[Point]]
    adaptive: Adaptive
    pairing: str = ""


def _test_name(point: Point) -> str:
    return point.name.rsplit("::", 1)[-1]


def selection(report: SideBySide, reference: str, rows: Sequence[Row] | None = None) -> list[str]:
    """The pytest names of `rows` (default: the undecided benchmarks) and of the time reference on their cases
    (both sides' names, so an older suite that names a benchmark differently is still selected)."""
    chosen = list(report.undecided if rows is None else rows)
    cases = {r.case_id for r in chosen}
    chosen += [r for r in report.rows if r.impl == reference and r.case_id in cases and r not in chosen]
    return list(dict.fromkeys(_test_name(p) for r in chosen for p in (*r.base[:1], *r.head[:1]) if p.name))


def keyword(terms: Sequence[str]) -> str:
    """A pytest `-k` expression selecting exactly `terms` (test names such as test_sdpa[naive-L128-E64-fp32-fwd]);
    ValueError for a name -k cannot spell."""
    bad = [t for t in terms if not KEYWORD.fullmatch(t)]
    if bad or not terms:
        raise ValueError(f"pytest -k cannot select {bad or 'nothing'}")
    return " or ".join(terms)


def _settled(report: SideBySide) -> bool:
    """Whether the verdict fails whatever more rounds find: a head test failed (an error, a wrong answer) or an
    answer failed its check. A time or memory failure is not settled: more rounds of other rows move every q."""
    return any(r.broken for r in report.rows) or any(c.failed and c.kind in ("correctness", "suite")
                                                     for c in report.suite)


def extend(base_runs: Sequence[Sequence[Point]], head_runs: Sequence[Sequence[Point]], failed: Sequence[str],
           config: GateConfig, measure: Measure, budget_s: float, first_estimate_s: float = 0.0,
           clock: Callable[[], float] = time.monotonic, progress: Callable[[str], None] | None = None,
           max_rounds: int | None = None, paired_from: int | None = None, budget_from: str = "") -> Outcome:
    """Judge the planned runs, then run extra rounds on the undecided benchmarks while the budget allows.

    `budget_s` is the time the extra rounds may take in all (0: none); `first_estimate_s` what the first extra
    round is expected to take; `clock` reads seconds (time.monotonic); `max_rounds` the most extra rounds within the
    budget (None: as many as fit); `paired_from`, as verdict.judge; `budget_from`, where the budget came from (for
    the note). Failed head tests of every round count.
    """
    if budget_s < 0:
        raise ValueError(f"the adaptive budget should be at least 0 seconds, got {budget_s!r}")
    if max_rounds is not None and max_rounds < 1:
        raise ValueError(f"the most adaptive rounds should be at least 1, got {max_rounds!r}")
    base, head, fails = [list(r) for r in base_runs], [list(r) for r in head_runs], list(failed)
    planned = len(head)
    report = judge(base, head, config, fails, planned, paired_from)
    spent, estimate, selected = 0.0, first_estimate_s, []
    stopped = "none" if budget_s == 0 else "decided"
    while report.undecided and budget_s > 0:
        if _settled(report):
            stopped = "failed"
            break
        if len(selected) == max_rounds:
            stopped = "rounds"
            break
        if spent + estimate > budget_s:
            stopped = "budget"
            break
        terms = selection(report, config.time_reference)
        if progress:
            progress(f"adaptive round {len(selected) + 1}: {len(report.undecided)} undecided, measuring "
                     f"{len(terms)} benchmarks ({spent:.0f} of {budget_s:.0f} s spent)")
        start = clock()
        b, h, f = measure(terms, len(selected) + 1)
        estimate = clock() - start
        spent += estimate
        selected.append(len(terms))
        base.append(b)
        head.append(h)
        fails += [x for x in f if x not in fails]
        report = judge(base, head, config, fails, planned, paired_from)
    return Outcome(report, base, head, Adaptive(budget_s, spent, tuple(selected), stopped, budget_from))
