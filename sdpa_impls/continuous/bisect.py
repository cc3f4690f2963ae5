"""Which commit made attention slower: a search over the commits between GOOD and BAD whose every step is one
comparison of two revisions (continuous.comparison.compare: interleaved sides, rank test, bootstrap interval,
adaptive rounds), read as a three-way verdict. No statistics of its own: a step's verdict is verdict.decide's.

    search(query, plan, project, progress, replay=None, on_step=None) -> Search
    (the answer and the query: continuous.bisect_answer; an earlier search's steps: continuous.bisect_replay)

1. Endpoints: GOOD against BAD at the gate's floor (continuous_time, ×1.03 on a CPU). The rows under test are the
   benchmarks BAD is slower on; with none, the answer is "no regression between GOOD and BAD" and nothing is
   searched, unless a row is still undecided there: then the answer is UNDECIDED (the endpoints could not tell
   GOOD and BAD apart on it, so "no regression" would be a guess), and nothing is searched either.
2. A step asks whether a commit already has the change. Each row under test moved by at least r, the low end of its
   endpoint interval, so the step's floor is the geometric midpoint between unchanged and changed, t = √r (the
   smallest r among the rows; a row whose peak memory grew is searched by its exact peak instead, continuous.steps):
   a row is DIFFERENT when head is slower than base by more than t (decide's "slower": significant after the false
   discovery rate, the 95 % interval above t, also with any one run left out), SAME when the interval lies at or
   below t, UNKNOWN otherwise, after the comparison's adaptive rounds. A step is DIFFERENT when any row under test
   is (the search finds the first change), SAME when every one is, else UNKNOWN.
3. Search: GOOD is the last commit known to be SAME, BAD the first known DIFFERENT; the untested commit nearest the
   middle between them is compared with GOOD. A step still UNKNOWN is asked the other way, BAD against that commit:
   BAD no slower means the commit has the change, BAD slower means it has not. Still UNKNOWN, the search stops and
   names the commits the culprit is among: an UNKNOWN is never read as SAME. A commit that does not install, import
   or run is skipped with its reason (as `git bisect skip`) and never blamed; the nearest untested commit is tried.
4. Confirmation: the culprit is compared with its parent once more, and must be DIFFERENT (a parent that does not
   install, import or run, off the line as a merge's can be, leaves it unconfirmed). A row under test it does not
   make slower, or clearly less than GOOD → BAD did (interval below the endpoints'), is reported changed elsewhere.

At most `comparison_budget(N)` = 2·⌈log₂ N⌉ + 3 comparisons for N commits, besides skipped commits' (they decide
nothing); a search that would need more stops UNKNOWN. It is a function of its steps' verdicts: given the steps of
an earlier search of the same line and settings (`Replay`, from its JSON, finished or interrupted), it takes each
step that asks the same question as measured then, and measures only from the first step it does not have.

Exit status: 0 no regression, 1 culprit found and confirmed, 3 a regression between GOOD and BAD whose culprit was
not pinned down (the commits left are named), 4 undecided (no row slower at the endpoints, but some row neither
slower nor clear of the floor); 2, from the command, for anything that is not an answer (unusable input, a GOOD or
BAD that cannot be measured).
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable
from pathlib import Path

from ..errors import GateInputError, SideError, UsageError
from ..fmt import fmt_duration
from ..gate.config import load_config
from .adaptive import keyword, selection
from .assemble import Request
from .comparison import Comparison, Plan, check_keyword, compare
from .envlock import in_use
from .lines import commits, releases
from .project import NONE, Project
from .bisect_answer import (AGAINST_BAD, CONFIRM, CULPRIT, ENDPOINTS, INCONCLUSIVE, NO_REGRESSION, SEARCH, UNDECIDED,
                            Query, Search, comparison_budget)
from .bisect_replay import Replay, Resumable, dirty_tree, settings_of
from .steps import (DIFFERENT, SAME, SKIPPED, UNKNOWN, Step, broken_at_head, endpoint_failures, memory_failed,
                    memory_notes, row_steps, selection_of, step_notes, unexplained, verdict_of)
from .verdict import SLOWER


class _Searcher(Resumable):
    """The state of one search; `run()` fills `self.result`."""

    def __init__(self, query: Query, plan: Plan, project: Project, progress: Callable[[str], None],
                 replay: Replay | None = None, on_step: Callable[[Search], None] | None = None) -> None:
        for name, value in (("GOOD", query.good), ("BAD", query.bad)):
            if not value or not value.strip():
                raise UsageError(f"{name} is an empty {'version' if query.package else 'revision name'}: name one")
        plan.check()
        check_keyword(query.select)
        self.query, self.plan, self.progress = query, plan, progress
        template = Request(None, None, None, None, query.env_cache, query.impl, query.config)
        warning = ""
        if query.package:
            self.line = releases(project, query.package, query.good, query.bad, template, query.versions, query.pre)
        else:
            if project.kind == NONE:
                raise UsageError("bisect searches the commits of a git repository: run it in sdpa-bench's "
                                 "repository or at the root of a plug-in's (or give --package to search a package's "
                                 "releases)")
            self.line = commits(project, query.good, query.bad, template, query.options)
            warning = dirty_tree(self.line.project.root)
            if warning:
                progress(f"warning: {warning}")
        self.project = self.line.project
        self.good, self.bad = self.line.points[0], self.line.points[-1]
        self.commits = list(self.line.points[1:])
        self.budget = comparison_budget(len(self.commits))
        self.result = Search(self.line.name(self.good), self.line.name(self.bad),
                             [self.line.name(c) for c in self.commits], unit=self.line.unit,
                             ids={self.line.name(p): p for p in self.line.points}, settings=settings_of(query, plan))
        self.on_step = on_step or (lambda search: None)
        self.replay, self.reused, self.source = replay, 0, replay.source if replay else ""
        if replay is not None:
            replay.check_line(self.good, self.bad, list(self.commits), self.line.unit)
        if warning:
            self.result.notes.append(warning)
        self.labels: tuple[str, ...] = ()
        self.memory: frozenset[str] = frozenset()
        self.floor, self.select = 0.0, None  # the steps' time floor; the -k of the rows under test

    def _compare(self, kind: str, base: str, head: str) -> tuple[Comparison | None, Step]:
        """One comparison of base against head, its step appended; (None, step) where an earlier search's step
        answers it (`_reused`)."""
        index = len(self.result.steps) + 1
        names = self.line.name(base), self.line.name(head)
        reused = self._reused(kind, *names)
        if reused is not None:
            return None, reused
        short = [n[:7] if self.line.unit == "commit" else n for n in names]
        tag = f"step {index} ({kind}): {short[1]} against {short[0]}"
        judged = [f"{len(self.labels) - len(self.memory)} by time at ×{self.floor:.4f}"] if self.floor else []
        judged += [f"{len(self.memory)} by peak memory"] if self.memory else []
        self.progress(f"{tag}: measuring" + (f" {len(self.labels)} row(s), " + " and ".join(judged)
                                             if self.labels else ""))
        seed = None if self.plan.seed is None else self.plan.seed + index
        plan = dataclasses.replace(self.plan, seed=seed, select=self.select, time_floor=self.floor or None)
        request = self.line.request(base, head)
        start = time.monotonic()
        try:
            with in_use():  # its environments held while it runs, then free for the size cap to evict
                comparison = compare(request, plan, self.project, lambda text: self.progress(f"  {tag}: {text}"))
        except KeyboardInterrupt as exc:  # one that came as the checkouts were removed: the step, judged, is kept
            if getattr(exc, "comparison", None) is not None:
                with contextlib.suppress(SideError):  # a head that does not run: a skip, measured again on resume
                    self._step(kind, names, exc.comparison, tag, start)  # type: ignore[attr-defined]
            raise
        return comparison, self._step(kind, names, comparison, tag, start)

    def _step(self, kind: str, names: tuple[str, str], comparison: Comparison, tag: str, start: float) -> Step:
        labels = self.labels or tuple(r.label for r in comparison.report.rows if r.decision is not None)
        rows = row_steps(comparison, labels, self.memory)
        broken = broken_at_head(comparison, labels, raised=True) if kind == SEARCH else []
        if broken:  # its kernel raised or answered wrong on a row under test: it does not run, so it is skipped
            raise SideError("head", f"head {names[1]}: {broken[0]}")
        floor = self.floor if self.labels else comparison.report.factor  # 0: memory rows only, no time floor
        step = Step(kind, names[0], names[1], verdict_of(rows), floor, rows,
                    time.monotonic() - start, step_notes(comparison, labels))
        self.result.steps.append(step)
        self.progress(f"{tag}: {step.verdict} ({fmt_duration(step.seconds)})")
        self.on_step(self.result)
        return step

    def _endpoints(self) -> bool:
        """GOOD against BAD at the gate's floor; the rows under test and the steps' floor and selection. False when
        there is no regression to search for."""
        reference = load_config(self.query.config, start=self.project.root or Path.cwd()).time_reference
        self.select = selection_of(self.query.rows, self.query.select, reference)
        try:
            comparison, step = self._compare(ENDPOINTS, self.good, self.bad)
            if comparison is None:  # an earlier search's endpoints: what they decided comes with them
                return self._restore(step)
        except SideError as exc:  # named as the user named them: GOOD is the endpoints' base, BAD their head
            which = {"base": "GOOD", "head": "BAD"}.get(exc.role, exc.role)
            raise GateInputError(f"GOOD and BAD cannot be compared, so nothing can be searched: {which} "
                                 f"{str(exc).removeprefix(exc.role + ' ')}") from None
        report = comparison.report
        measured = {(r.impl, r.case_id) for r in report.rows}
        if self.query.rows and not measured & set(self.query.rows):  # only the reference ran: nothing to judge
            wanted = sorted({impl for impl, _ in self.query.rows})
            raise GateInputError(f"--from: none of its slower rows was measured here: {', '.join(wanted)} "
                                 f"{'is' if len(wanted) == 1 else 'are'} not among this search's implementations "
                                 f"(only {', '.join(sorted({r.impl for r in report.rows}))} ran); a verdict of another "
                                 "project? Else name them with --impl")
        bigger = [r for r in report.rows if memory_failed(r)]  # exact: searched by peak memory, not time
        slower = [r for r in report.rows if r.decision == SLOWER and r not in bigger]
        undecided = [r.label for r in report.undecided]
        self.result.undecided = undecided
        if undecided:
            self.result.notes.append(f"undecided between GOOD and BAD ({len(undecided)}): {', '.join(undecided)}; "
                                     "not searched (the comparison could not judge them, slower or not"
                                     + (" after the extra rounds" if self.plan.adaptive_budget != 0 else "") + "): "
                                     "run again with more --rounds, or fewer rows (-k, --from), before trusting "
                                     "that nothing changed there.")
        failed, notes = endpoint_failures(comparison, self.result.good, self.result.bad, reference or "")
        if failed and not slower and not bigger:
            raise GateInputError(failed)
        self.result.notes += notes
        if not slower and not bigger:
            self._keep_state()
            return False
        self.memory = frozenset(r.label for r in bigger)
        self.labels = tuple(r.label for r in slower + bigger)
        self.result.rows = row_steps(comparison, self.labels, self.memory)
        self.result.steps[-1] = dataclasses.replace(step, rows=self.result.rows, verdict=DIFFERENT)  # what is searched
        self.progress("rows under test: " + "; ".join(r.text() for r in self.result.rows))
        try:
            self.select = keyword(selection(report, reference or "", slower + bigger))
        except ValueError as exc:
            raise GateInputError(f"the rows under test cannot be selected again: {exc}") from None
        if slower:  # the least change the endpoints vouch for: a row chosen for being slower reads high by chance
            least = min(r.interval[0] for r in slower if r.interval)
            self.floor = math.sqrt(least)
            self.result.notes.append(f"time steps judged at ×{self.floor:.4f}, the geometric midpoint of 1 and the "
                                     f"smallest low end of the endpoints' 95% intervals (×{least:.3f}).")
        self.result.notes += memory_notes(bigger)
        self._keep_state()
        return True

    def _ask(self, index: int) -> str:
        """The verdict on commit `index`: DIFFERENT (has the change), SAME, UNKNOWN, or SKIPPED (it does not
        install, import or run; GOOD and BAD did, at the endpoints)."""
        commit, role, start = self.commits[index], "head", time.monotonic()
        described = self.line.name(commit)
        if self._reused("skip", "", described, tentative=True) is not None:  # the earlier search could not run it
            self.result.skipped[described] = self.result.steps[-1].notes[0] if self.result.steps[-1].notes else ""
            return SKIPPED
        try:
            _, step = self._compare(SEARCH, self.good, commit)
            if step.verdict != UNKNOWN or self.result.comparisons >= self.budget:
                return step.verdict
            role, start = "base", time.monotonic()  # a skip's time is the comparison that failed
            _, other = self._compare(AGAINST_BAD, commit, self.bad)
            return {SAME: DIFFERENT, DIFFERENT: SAME}.get(other.verdict, UNKNOWN)
        except SideError as exc:
            if exc.role != role:  # GOOD or BAD, which ran at the endpoints
                raise
            reason = str(exc).removeprefix(f"{exc.role} {described}: ")
            self.result.skipped[described] = reason
            self.result.steps.append(Step("skip", "", described, SKIPPED, self.floor,
                                          seconds=time.monotonic() - start, notes=(reason,)))
            self.progress(f"{described}: skipped, {reason}")
            self.on_step(self.result)
            return SKIPPED

    def run(self) -> Search:
        start = time.monotonic()
        self.progress(f"bisect: {len(self.commits)} {self.line.unit}(s) after GOOD {self.result.good} up to BAD "
                      f"{self.result.bad}; at most {self.budget} comparisons")
        try:
            if not self._endpoints():
                self.result.answer = UNDECIDED if self.result.undecided else NO_REGRESSION
                return self.result
            self._search()
            self.result.notes += self.line.ended_at(self.result)  # at a merge: how to search inside it
        finally:
            then = sum(s.seconds for s in self.result.steps[:self.reused])  # counted: a resumed answer read 0 s
            self.result.seconds = time.monotonic() - start + then
            if self.reused:
                self.result.notes.append(f"step{f's 1–{self.reused} were' if self.reused > 1 else ' 1 was'} from "
                                         f"{self.source}: {fmt_duration(then)} of the time above.")
        return self.result

    def _search(self) -> None:
        lo, hi = -1, len(self.commits) - 1  # -1: GOOD, known SAME; hi: known DIFFERENT
        tried: set[int] = set()
        while hi - lo > 1:
            open_ = [i for i in range(lo + 1, hi) if i not in tried]
            if not open_:
                return self._inconclusive(lo, hi, f"every {self.line.unit} between the last SAME and the first "
                                                  "DIFFERENT one was skipped")
            if self.result.comparisons >= self.budget:
                return self._inconclusive(lo, hi, f"the search used its {self.budget} comparisons")
            mid = min(open_, key=lambda i: (abs(i - (lo + hi) / 2), i))
            tried.add(mid)
            verdict = self._ask(mid)
            if verdict == DIFFERENT:
                hi = mid
            elif verdict == SAME:
                lo = mid
            elif verdict == UNKNOWN:
                return self._inconclusive(lo, hi, f"{self.result.commits[mid]} is neither like GOOD nor like BAD "
                                                  "(more than one change in the range, or too noisy to tell)")
        if self.result.comparisons >= self.budget:
            return self._inconclusive(lo, hi, f"the search used its {self.budget} comparisons before the "
                                              "confirmation")
        self._confirm(hi)

    def _inconclusive(self, lo: int, hi: int, why: str) -> None:
        self.result.answer, self.result.among = INCONCLUSIVE, self.result.commits[lo + 1:hi + 1]
        left = (f"the first slower {self.line.unit} is one of the {len(self.result.among)} named"
                if len(self.result.among) > 1 else f"{self.result.among[0]} is the only {self.line.unit} left, "
                                                   "not confirmed against its parent")
        self.result.notes.append(f"stopped: {why}; {left}.")

    def _confirm(self, hi: int) -> None:
        culprit = self.commits[hi]
        before = self.line.before(culprit)
        try:
            _, step = self._compare(CONFIRM, before, culprit)
        except SideError as exc:  # the parent is off the line (a merge's, where GOOD came in from a side branch)
            if exc.role != "base":
                raise
            self.result.answer, self.result.among = INCONCLUSIVE, [self.result.commits[hi]]
            parent = self.line.name(before)
            self.result.skipped[parent] = reason = str(exc).removeprefix(f"base {parent}: ")
            self.result.notes.append(f"the search ended at {self.result.commits[hi]}, but its parent {parent} "
                                     f"could not be measured ({reason}): not confirmed.")
            return
        self.result.files = self.line.differences(before, culprit)
        if step.verdict != DIFFERENT:
            self.result.answer, self.result.among = INCONCLUSIVE, [self.result.commits[hi]]
            # where the search measured this very pair (the parent is GOOD, or the culprit is BAD and its parent was
            # asked against BAD), the re-test is the independent second reading that keeps one wrong step from
            # naming a commit: both readings are said
            pair = step.base, step.head
            also = "".join(f"; step {i} ({s.kind}), the same pair, read {s.verdict}"
                           for i, s in enumerate(self.result.steps[:-1], 1) if (s.base, s.head) == pair)
            self.result.notes.append(f"the search ended at {self.result.commits[hi]}, but against its parent it was "
                                     f"{step.verdict}, not DIFFERENT{also}: not confirmed.")
            return
        self.result.answer, self.result.culprit = CULPRIT, self.result.commits[hi]
        endpoint = {r.label: r for r in self.result.rows}
        # the culprit against GOOD, as its search step measured it (none where the culprit is BAD): below BAD against
        # GOOD, a later change adds to it; the search found its parent SAME, so no earlier one does
        culprit_name = self.line.name(culprit)
        at_culprit = {r.label: r for s in self.result.steps if s.kind == SEARCH and s.head == culprit_name
                      and s.verdict == DIFFERENT for r in s.rows}
        self.result.notes += unexplained(step.rows, endpoint, at_culprit)


def search(query: Query, plan: Plan, project: Project, progress: Callable[[str], None],
           replay: Replay | None = None, on_step: Callable[[Search], None] | None = None) -> Search:
    """The search of the module docstring; UsageError (GateInputError) when GOOD and BAD cannot be compared.
    `replay`: an earlier search's steps, taken where they ask the same questions (`load_replay`); `on_step(search)`
    after every step, e.g. to save the steps so far."""
    return _Searcher(query, plan, project, progress, replay, on_step).run()
