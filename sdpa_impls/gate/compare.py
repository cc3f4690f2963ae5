"""Compare a candidate run with a baseline (or with itself): every check of the gate, as a Verdict.

    compare_points(baseline, candidate, config, baseline_machine=None, candidate_machine=None,
                   allow_different_machines=None, repeats=(), baseline_repeats=()) -> Verdict

`baseline` may be None: then only correctness and the in-run ratio rules apply. Time rules are
refused (status "refused", not a failure) when the machines differ, unless allowed.
`repeats` / `baseline_repeats` (further runs of either tree) confirm time regressions: one must show in every
pair of baseline and candidate runs.
Verdict.exit_code is 1 when any check failed, else 0; GateInputError means nothing was comparable.
A point that failed (status 'failed': it raised, e.g. out of memory) on both sides is no change: its row is
"failed in both", judged by no rule (a wrong answer, 'wrong', is judged on every side; a failure in the candidate
alone fails).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..bench.machine import machine_differences
from ..errors import GateInputError
from .config import GateConfig
from .points import Point
from .rules import FAIL, FAILED_BOTH, INFO, NA, PASS, REFERENCE, REFUSED, Check, correctness_check


@dataclass(frozen=True)
class Comparison:
    """One implementation × case: its two points (either may be None) and the checks made on it."""

    impl: str
    case_id: str
    baseline: Point | None
    candidate: Point | None
    checks: tuple[Check, ...]

    @property
    def verdict(self) -> str:
        if any(c.failed for c in self.checks):
            return FAIL
        if any(c.mark == FAILED_BOTH for c in self.checks):
            return FAILED_BOTH
        if self.candidate is None or any(c.kind == "missing" for c in self.checks):  # from any candidate run
            return "missing"
        return "new" if any(c.kind == "new" for c in self.checks) else PASS


@dataclass(frozen=True)
class Verdict:
    rows: tuple[Comparison, ...]
    ratios: tuple[Check, ...]
    notes: tuple[str, ...]
    config_source: str = ""

    @property
    def failures(self) -> list[Check]:
        return [c for r in self.rows for c in r.checks if c.failed] + [c for c in self.ratios if c.failed]

    @property
    def exit_code(self) -> int:
        return 1 if self.failures else 0


def confirmed(check: Check, rechecks: Sequence[tuple[str, Check]]) -> Check:
    """A failed time check stands only when the same check also fails in every other (labelled) pair of runs."""
    if not check.failed or not rechecks:
        return check
    refuting = [(label, c) for label, c in rechecks if not c.failed]
    if not refuting:
        return replace(check, message=f"{check.message}; in all {len(rechecks) + 1} pairs of runs")
    label, c = refuting[0]
    return replace(check, status=PASS, message=f"{check.message} in the first runs, but not in {label}: {c.message}")


def _missing(base: Point, allowed: bool, where: str) -> Check:
    why = "allowed by allow_missing" if allowed else ("a point that failed or was skipped leaves none, and the "
                                                      "candidate's own output says why; allow_missing = true is for "
                                                      "one removed on purpose")
    return Check("missing", base.label, INFO if allowed else FAIL, f"in the baseline but missing from {where} ({why})")


def _row_checks(base: Point | None, cand: Point | None, config: GateConfig, times_ok: bool,
                with_baseline: bool, pairs: Sequence[tuple[str, dict, dict]], threads: str = "",
                absent_from: Sequence[int] = (), further: Sequence[Point] = ()) -> tuple[Check, ...]:
    """The checks of one benchmark; `absent_from`: the numbers of the further candidate runs that lack it;
    `further`: its points in the further candidate runs that have it (a failure in any of them counts)."""
    ref = cand or base
    th = config.thresholds(ref.impl, ref.case_id)
    if cand is None:
        return (_missing(base, th.allow_missing, "the candidate"),)
    every = [cand, *further]
    if base is not None and base.status == "failed" and all(p.status == "failed" for p in every):  # 'wrong' is judged
        return (Check("correctness", cand.label, NA, "status 'failed' in both the baseline and the candidate, no "
                      "change and nothing measured to compare" + (f": {cand.reason}" if cand.reason else ""),
                      mark=FAILED_BOTH),)
    judged = [correctness_check(p) for p in every]
    checks = [next((c for c in judged if c.failed), judged[0])] if th.correctness else []
    if base is None:
        if with_baseline:
            checks.append(Check("new", cand.label, INFO, "new benchmark, not in the baseline"))
        return tuple(checks)
    if absent_from:  # every candidate run counts, not only the first
        runs = f"candidate run{'s' if len(absent_from) > 1 else ''} {', '.join(map(str, absent_from))}"
        checks.append(_missing(base, th.allow_missing, runs))
    if th.time is not None and not times_ok:
        checks.append(Check("time", cand.label, REFUSED, "not compared: different machines"))
    elif th.time is not None and cand.impl == config.time_reference:
        checks.append(Check("time", cand.label, NA, "the time reference of the other rows, not judged itself",
                            mark=REFERENCE))
    elif th.time is not None:
        ref_key = (config.time_reference, cand.case_id)
        timed = [(label, th.time.check(b[base.key], c[base.key], b.get(ref_key), c.get(ref_key)))
                 for label, b, c in pairs if all(base.key in run and run[base.key].median_s is not None
                                                 for run in (b, c))]  # a failed point's run refutes nothing
        checks.append(confirmed(timed[0][1], timed[1:]) if timed else
                      Check("time", cand.label, NA, "no median time recorded"))
    if th.memory is not None and threads and not str(cand.case.get("device", "cpu")).startswith("cuda"):
        checks.append(Check("memory", cand.label, NA, f"not compared: torch's CPU kernels keep a buffer per thread, "
                                                      f"and the runs had {threads} threads"))
    elif th.memory is not None:
        checks.append(th.memory.check(base, cand))
    return tuple(checks)


def compare_points(baseline: Sequence[Point] | None, candidate: Sequence[Point], config: GateConfig,
                   baseline_machine: dict | None = None, candidate_machine: dict | None = None,
                   allow_different_machines: bool | None = None,
                   repeats: Sequence[Sequence[Point]] = (),
                   baseline_repeats: Sequence[Sequence[Point]] = ()) -> Verdict:
    """Every check of the gate; raises GateInputError when there is nothing to compare.

    `repeats` / `baseline_repeats` are further runs of the candidate / baseline tree (separate processes):
    a time regression must then show between every baseline run and every candidate run (and an in-run time
    rule must fail in every candidate run), so one disturbed or lucky run cannot fail the gate.
    """
    if not candidate:
        raise GateInputError("nothing comparable: the candidate has no benchmarks")
    cand = {p.key: p for p in candidate}
    base = {p.key: p for p in baseline or ()}
    notes: list[str] = []
    times_ok, threads = True, ""  # threads: "1 vs 2" where the runs' thread counts differ
    if baseline is not None:
        if not set(base) & set(cand):
            raise GateInputError("nothing comparable: no benchmark of the baseline is in the candidate "
                                 f"(baseline: {len(base)} benchmarks, candidate: {len(cand)})")
        allowed = config.allow_different_machines if allow_different_machines is None else allow_different_machines
        diffs = machine_differences(baseline_machine or {}, candidate_machine or {})
        counts = [(m or {}).get("threads") for m in (baseline_machine, candidate_machine)]
        threads = f"{counts[0]} vs {counts[1]}" if None not in counts and counts[0] != counts[1] else ""
        if diffs and not allowed:
            times_ok = False
            notes.append("absolute time rules refused: baseline and candidate come from different machines ("
                         + "; ".join(diffs) + "). Correctness, in-run ratio rules and memory (on the CPU only "
                         "where the thread counts match) still apply; pass "
                         "--allow-different-machines (or allow_different_machines = true) to compare times anyway.")
        elif diffs:
            notes.append("machines differ (" + "; ".join(diffs) + "); times compared anyway, as allowed.")
        if threads:  # torch_sdpa's peak on a CPU: 3368 bytes at 1 thread, 4656 at 2 (decode, L 256, E 64)
            notes.append(f"CPU peak memory not compared: the runs had {threads} threads, and torch's CPU kernels "
                         "keep a buffer per thread; the in-run memory ratios still apply.")
    else:
        notes.append("no baseline: correctness and in-run ratio rules only.")
    keys = list(cand) + [k for k in base if k not in cand]
    notes += config.idle_note(keys)
    b_runs = [base] + [{p.key: p for p in run} for run in baseline_repeats]
    c_runs = [cand] + [{p.key: p for p in run} for run in repeats]
    pairs = [(f"baseline run {i + 1} vs candidate run {j + 1}", b, c) for i, b in enumerate(b_runs)
             for j, c in enumerate(c_runs)]  # the first pair first
    rows = tuple(Comparison(k[0], k[1], base.get(k), cand.get(k),
                     _row_checks(base.get(k), cand.get(k), config, times_ok, baseline is not None, pairs, threads,
                                 [j for j, run in enumerate(c_runs[1:], 2) if k not in run],
                                 [run[k] for run in c_runs[1:] if k in run]))
                 for k in keys)
    referenced = False  # times in units of the reference's, run by run: a process's own speed divides out
    if config.time_reference and baseline is not None and times_ok:
        timed = {r.case_id for r in rows if r.impl != config.time_reference
                 and any(c.kind == "time" and c.status != NA for c in r.checks)}
        unreferenced = sorted(c for c in timed if not all((config.time_reference, c) in run
                                                          for run in (*b_runs, *c_runs)))
        ref = config.time_reference
        referenced = len(unreferenced) < len(timed)
        if referenced:
            notes.append(f"times compared in units of {ref}'s time on the same case and run (time_reference), so "
                         "a busier machine during one run cancels out" + (
                             f"; as measured on {len(unreferenced)} case(s) where {ref} did not run in every run"
                             if unreferenced else "") + ".")
        elif timed:
            notes.append(f"times compared as measured: {ref} (time_reference) did not run on these cases in every "
                         "run.")
        elif any(r.impl == ref for r in rows):  # a pass that judged no time says so
            notes.append(f"no time judged: every timed benchmark here is {ref}'s, the time_reference, whose own "
                         "rows are not judged.")
    unsampled = sum(1 for r in rows for c in r.checks if c.kind == "time" and "factor alone" in c.message)
    if unsampled:
        notes.append(f"{unsampled} time check(s) had too few raw samples for the rank test and used the factor alone.")
    ratios = tuple(_ratio_checks(config, candidate, repeats))
    slower = sum(1 for r in rows for c in r.checks if c.kind == "time" and c.status == FAIL)
    if slower and len(b_runs) == len(c_runs) == 1 and not referenced:  # one process's samples share its speed
        notes.append(f"one baseline and one candidate run: {slower} time check(s) failed on one process each, where a "
                     "process that ran slower throughout reads as a slower change; on a shared machine give each "
                     "side two or more runs (--baseline and --candidate repeat), or use `sdpa-bench continuous`.")
    if len(c_runs) > 1 or (baseline is not None and len(b_runs) > 1):
        unconfirmed = sum(1 for c in [*(c for r in rows for c in r.checks), *ratios] if ", but not in " in c.message)
        if baseline is not None:
            notes.append(f"{len(b_runs)} baseline and {len(c_runs)} candidate runs: a time regression must show in "
                         f"every pair of runs ({unconfirmed} that did not, taken as noise).")
        else:
            notes.append(f"{len(c_runs)} candidate runs: an in-run time rule must fail in every run ({unconfirmed} "
                         "that did not, taken as noise).")
    return Verdict(rows, ratios, tuple(notes), config.source)


def _ratio_checks(config: GateConfig, candidate: Sequence[Point], repeats: Sequence[Sequence[Point]]) -> list[Check]:
    out = []
    for rule in config.ratios:
        timed = rule.metric in ("time", "ceiling")
        again = [{c.subject: c for c in rule.check(run, config.alpha)} for run in repeats] if timed else []
        out += [confirmed(c, [(f"candidate run {j}", run[c.subject]) for j, run in enumerate(again, 2)
                              if c.subject in run])
                for c in rule.check(candidate, config.alpha)]
    return out
