"""Judge two revisions measured side by side (interleaved runs of one machine) by the gate's rules.

    judge(base_runs, head_runs, config, head_failures=(), planned=None, paired_from=None) -> SideBySide
    decide(interval, q, factor, fdr, without_one=None) -> "slower" | "not slower" | "undecided"

`base_runs` / `head_runs` are the points of each run (one pytest-benchmark file per process). Per benchmark:

- time: on the CPU, every sample is divided by the machine's speed right beside it, the speed probe's times before
  and after it (bench.probe; `speeds.probe_scaled`), where every point carries them and the sides share one environment;
  otherwise every run's samples are divided by that run's speed as the time reference saw it (`speeds.run_speeds`). Then
  pooled per side, and compared by a one-sided Mann–Whitney test; the p-values of all
  benchmarks are adjusted together (Benjamini–Hochberg, false discovery rate = the config's alpha). A
  benchmark is slower when its adjusted p < alpha and the whole 95 % interval of its head/base ratio of medians
  lies above the factor of `continuous_time` — at least that much slower, with confidence — and not slower when
  the whole interval lies at or below the factor; otherwise it is undecided (more rounds can decide it, see
  continuous.adaptive; one still undecided at the end is reported and does not fail). The interval is a
  bootstrap over runs, then samples: samples of one run are not independent, and a process can be a few per cent
  faster or slower than the next for its whole life, so only runs show how far the sides really differ. For the
  same reason a slower decision must not rest on one process: it also needs the interval's lower end to stay
  above the factor with any one run of either side left out (`without_one`; none with one run a side), else undecided.
  With `paired_from` (continuous.pairs), run i of base and run i of head from that index on were one process timing
  both sides in turn: the times compared are those rounds' (the earlier ones checked), as measured (the two sides'
  samples alternate, so the machine's speed falls on both alike, and dividing by the probe would only add its own
  jitter: ×0.94-1.06 against ×0.99-1.01 as measured, in one A/A run), the interval resamples rounds with their two
  sides together, so the process's own speed cancels, and `without_one` leaves one round out. A benchmark in none of
  those rounds is judged on all its runs, unpaired;
- host overhead (CUDA points, whose time is the device time; bench.devicetime): one number per run (eager −
  device time per call), unscaled, judged only where the host is a real part of the call (base's host overhead at
  least `host.HOST_SHARE` of its eager time): a device-bound call's host overhead is the queue's noise (an A/A on an
  H200 saw one run of 121 µs among runs of 10-11 µs on a 150 µs call), and extra host work there hides behind
  the GPU's, as it does for a user. Head's is larger when every head run's lies above every base run's by more
  than `continuous_host`'s factor of base's largest and by more than `host.HOST_FLOOR_S` per call, and the one-sided
  rank test of the runs' host overheads, adjusted over the host-bound benchmarks by Benjamini–Hochberg, is
  significant at the gate's FDR: a change that only adds host work then fails as host time, with the device time
  unchanged. The host overhead of one process can differ from the next's by a factor of two and more (an A/A on an
  H200: 22-238 µs per call of one decode benchmark over the 12 runs of two trials), so the order of a few runs
  alone is no evidence: with 2 runs a side every head run lies above every base run by chance once in 6
  benchmarks, with 4 once in 70;
- memory: exact (peak memory is deterministic): head's smallest peak above base's largest fails;
- correctness: every head run's point must be ok and within tolerance (the runs after a side's first only time
  the points that run checked: nothing recorded); a failed head test fails, a wrong answer (WrongResult) named as
  such with its error and tolerance;
- in-run ratio rules: on the head runs, as the gate checks them (a time rule must fail in every run);
- kernels: what only one side's profiled calls ran (information: a torch upgrade that switched backends shows);
- a benchmark on one side only is listed: base-only fails unless allow_missing (with head's reason where its suite
  skipped it), head-only is new.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..fmt import fmt_factor
from ..gate.compare import compare_points
from ..gate.config import GateConfig
from ..gate.fdr import bh_adjusted
from ..gate.points import Point
from ..gate.rules import FAIL, INFO, NA, PASS, REFERENCE, Check, MemoryRule, correctness_check
from .host import host_check, host_judged
from .outcomes import SKIPPED, by_label, labelled
from .timestats import paired_rounds, time_stats, without_one
from .speeds import PROBE_UNIT, probe_scaled, probe_typical, run_speeds, scaled

EXACT_MEMORY = MemoryRule(0.0)
WRONG = "WrongResult"  # the exception a point further from fp64 than its tolerance raises (bench.check)


def _suite_check(line: str) -> Check:
    label, message = labelled(line)
    if WRONG in message:  # the point's answer, not the suite, is what failed: say so, with the error it had
        return Check("correctness", label, FAIL, "wrong, so not timed: " + message.split(f"{WRONG}: ", 1)[-1])
    return Check("suite", label, FAIL, "head's test failed" + (f": {message}" if message else ""))


SLOWER, NOT_SLOWER, UNDECIDED = "slower", "not slower", "undecided"
ONE_ROUND = "one run a side, and a slower verdict must hold with any one left out"


def decide(interval: tuple[float, float], q: float, factor: float, fdr: float,
           without_one: float | None = None) -> str:
    """The time decision for one benchmark from its head/base interval and adjusted p-value `q`:
    slower when q < fdr and the whole interval lies above `factor` — and, when given, `without_one` (the lowest
    lower end of the interval with one run left out) does too; not slower when the whole interval lies at or below
    `factor`; undecided otherwise (the interval straddles the factor, lies above it without significance, or only
    with every run in)."""
    low, high = interval
    if q < fdr and low > factor and (without_one is None or without_one > factor):
        return SLOWER
    if high <= factor:
        return NOT_SLOWER
    return UNDECIDED


@dataclass(frozen=True)
class Row:
    """One implementation × case: its points in every run of each side, the time statistics and the checks."""

    impl: str
    case_id: str
    base: tuple[Point, ...]
    head: tuple[Point, ...]
    unit: str = ""  # the time reference whose run speeds scaled the times, "" for times as measured
    ratio: float | None = None  # median(head) / median(base) of the pooled (relative) samples
    interval: tuple[float, float] | None = None
    p: float | None = None  # one-sided rank test, head slower than base
    q: float | None = None  # p adjusted over the preset (Benjamini–Hochberg)
    pairs_slower: int = 0  # pairs of (base run, head run) in which head's median is the larger
    paired: tuple[tuple[Point, Point], ...] = ()  # the rounds whose (base, head) times were compared, when paired
    without_one: float | None = None  # the lowest interval low end with one run left out (rows that need it)
    checks: tuple[Check, ...] = ()
    decision: str | None = None  # SLOWER, NOT_SLOWER or UNDECIDED for a timed benchmark, else None
    host_undecided: bool = False  # every head run's host overhead above every base run's, not yet significant
    head_failed: str = ""  # no head point because its test failed in head (a wrong answer, an error): the message

    @property
    def label(self) -> str:
        return f"{self.impl}[{self.case_id}]"

    @property
    def broken(self) -> str:  # why head is broken here: its test failed, or its timed answer failed the check
        return self.head_failed or next((c.message for c in self.checks if c.kind == "correctness" and c.failed), "")

    @property
    def verdict(self) -> str:  # a failed head test is counted once, as head's suite check, and shown on its row too
        if self.head_failed or any(c.failed for c in self.checks):
            return FAIL
        if not self.head:
            return "base only"
        if not self.base:
            return "head only"
        return UNDECIDED if self.decision == UNDECIDED or self.host_undecided else PASS


@dataclass(frozen=True)
class SideBySide:
    rows: tuple[Row, ...]
    ratios: tuple[Check, ...]  # the in-run rules on the head runs
    suite: tuple[Check, ...]  # tests of head's benchmark suite that failed
    notes: tuple[str, ...]
    factor: float
    fdr: float
    config_source: str = ""

    @property
    def failures(self) -> list[Check]:
        return [c for c in (*(c for r in self.rows for c in r.checks), *self.ratios, *self.suite) if c.failed]

    @property
    def undecided(self) -> list[Row]:
        """Benchmarks neither slower nor not slower in time, or whose host overhead is higher in every run but not
        yet significantly: reported (and measured again by adaptive rounds), but not failures on their own."""
        return [r for r in self.rows if r.verdict == UNDECIDED]

    @property
    def exit_code(self) -> int:
        return 1 if self.failures else 0


def _by_key(runs: Sequence[Sequence[Point]]) -> list[dict[tuple[str, str], Point]]:
    return [{p.key: p for p in run} for run in runs]


def _memory_check(base: Sequence[Point], head: Sequence[Point]) -> Check:
    b = [p for p in base if p.peak_memory_bytes is not None]
    h = [p for p in head if p.peak_memory_bytes is not None]
    if not b or not h:
        return Check("memory", head[0].label, NA, "no peak memory recorded")
    largest_base = max(b, key=lambda p: p.peak_memory_bytes)
    smallest_head = min(h, key=lambda p: p.peak_memory_bytes)
    check = EXACT_MEMORY.check(largest_base, smallest_head)
    return Check("memory", head[0].label, check.status, check.message.replace(" × 1.00", " (exact)"))


def _kernels_check(base: Sequence[Point], head: Sequence[Point]) -> Check | None:
    """What only one side's profiled calls ran (all its runs, longest first); None when the same or unrecorded."""
    ran = [list(dict.fromkeys(k for p in side for k in p.kernels)) for side in (base, head)]
    if not ran[0] or not ran[1] or set(ran[0]) == set(ran[1]):
        return None
    only = [[k for k in ran[i] if k not in ran[1 - i]][:5] for i in (0, 1)]
    return Check("kernels", head[0].label, INFO, f"base only: {', '.join(only[0]) or '-'}; head only: "
                                                 f"{', '.join(only[1]) or '-'}")


def _time_check(row: Row, factor: float, fdr: float, family: int) -> Check:
    unit = f"scaled by {row.unit}'s run speed" if row.unit else "as measured"
    lo, hi = row.interval
    pairs = f"{len(row.paired)} rounds" if row.paired else f"{len(row.base) * len(row.head)} pairs of runs"
    numbers = (f"head/base {row.ratio:.3f} (95% CI {lo:.3f}–{hi:.3f}, times {unit}), "
               f"p={row.p:.2g}, BH-adjusted {row.q:.2g} over {family}, head slower in {row.pairs_slower} of {pairs}")
    if row.without_one is not None:
        numbers += f"; lowest with one {'round' if row.paired else 'run'} left out {row.without_one:.3f}"
    if row.decision == SLOWER:
        return Check("time", row.label, FAIL, f"slower: {numbers}; interval above {fmt_factor(factor)}, "
                                              f"significant at FDR {fdr:g}")
    if row.decision == UNDECIDED:
        why = ("interval not clear of it" if decide(row.interval, row.q, factor, fdr) != SLOWER else
               "not clear of it with one run left out" if row.without_one is not None else ONE_ROUND)
        return Check("time", row.label, PASS, f"undecided: {numbers}; {why} ({fmt_factor(factor)})")
    return Check("time", row.label, PASS, numbers)


def judge(base_runs: Sequence[Sequence[Point]], head_runs: Sequence[Sequence[Point]], config: GateConfig,
          head_failures: Sequence[str] = (), planned: int | None = None, paired_from: int | None = None
          ) -> SideBySide:
    """Every check of `sdpa-bench continuous` on the measured runs (at least one run per side); a pure function of
    the points. Runs may hold a subset of the benchmarks (the adaptive rounds): each benchmark pools the runs that
    have it. The in-run rules use the first `planned` head runs (all by default), the runs of every benchmark.
    `paired_from`: the index of the first round measured in one process for both sides (module docstring)."""
    on_cuda = any(str(p.case.get("device", "")).startswith("cuda") for run in head_runs for p in run)
    factor, fdr, reference = config.continuous_rule("cuda" if on_cuda else "cpu").factor, config.alpha, \
        config.time_reference
    base, head = _by_key(base_runs), _by_key(head_runs)
    raw_base, raw_head = base, head  # a paired round's two sides saw the same machine: no probe's jitter on top
    typical = probe_typical(base + head) if config.speed_probe else None
    if typical is not None:  # the machine's speed beside every sample: no per-run factor on top
        speeds, unit = None, PROBE_UNIT
        base, head = probe_scaled(base, typical), probe_scaled(head, typical)
    else:
        speeds = run_speeds(base + head, reference)
        unit = reference if speeds is not None else ""
        base, head = scaled(base, speeds and speeds[:len(base)]), scaled(head, speeds and speeds[len(base):])
    keys = list(dict.fromkeys([k for run in head for k in run] + [k for run in base for k in run]))
    failed_in_head, skipped_in_head = by_label(head_failures)  # label: its error's message; label: the skip's reason
    rows, notes = [], config.idle_note(keys)  # a misspelt override's pattern, named
    for key in keys:
        b, h = [run[key] for run in base if key in run], [run[key] for run in head if key in run]
        checks: list[Check] = []
        th = config.thresholds(*key)
        if not h and b[0].label in failed_in_head:
            pass  # its test failed in head (a wrong answer, an error): head's suite check names it, once
        elif not h:
            status = INFO if th.allow_missing else FAIL
            why = skipped_in_head.get(b[0].label)
            checks.append(Check("missing", b[0].label, status, f"in base ({len(b)} run{'s' * (len(b) > 1)}) but not "
                                f"in head" + (f", whose suite skipped it: {why}" if why else "")
                                + (" (allowed by allow_missing)" if th.allow_missing else "")))
        elif not b:
            checks.append(Check("new", h[0].label, INFO, "in head only, not in base"))
        if h and th.correctness:  # the worst of head's runs: a failure, else a pass (runs after the first of a
            found = [correctness_check(p) for p in h]  # side only time: nothing recorded), else nothing recorded
            checks.append(next((c for status in (FAIL, PASS) for c in found if c.status == status), found[0]))
        pairs = paired_rounds(raw_base, raw_head, key, paired_from) if paired_from is not None else ()
        if pairs:
            stats = time_stats([pb for pb, _ in pairs], [ph for _, ph in pairs], paired=True)
        else:
            stats = time_stats(b, h) if b and h else None
        ratio, interval, p, slower = stats or (None, None, None, 0)
        row = Row(key[0], key[1], tuple(b), tuple(h), "" if pairs else unit, ratio, interval, p, pairs_slower=slower,
                  paired=pairs, head_failed="" if h else failed_in_head.get(b[0].label, ""))
        if b and h and th.memory is not None:
            checks.append(_memory_check(b, h))
        kernels = _kernels_check(b, h) if b and h else None
        checks += [c for c in (kernels,) if c is not None]
        rows.append(replace(row, checks=tuple(checks)))
    # host overhead: the rank p-values of the host-bound benchmarks, adjusted over them as the times are over theirs
    host_p = [host_judged(r.base, r.head) if r.base and r.head else None for r in rows]
    host_family = [i for i, p in enumerate(host_p) if p is not None]
    host_q = dict(zip(host_family, bh_adjusted([host_p[i] for i in host_family])))
    for i, r in enumerate(rows):
        host = host_check(r.base, r.head, config.host_rule().factor, fdr, host_q.get(i), len(host_family)) \
            if r.base and r.head else None
        if host is not None:
            rows[i] = replace(r, checks=r.checks + (host[0],), host_undecided=host[1])
    judged = [i for i, r in enumerate(rows) if r.p is not None and r.impl != reference
              and config.thresholds(r.impl, r.case_id).time is not None]
    adjusted = bh_adjusted([rows[i].p for i in judged])
    for i, q in zip(judged, adjusted):
        row = replace(rows[i], q=q)
        decision = decide(row.interval, q, factor, fdr)
        if decision == SLOWER:  # would be slower: does it rest on one run? (one run a side: nothing to leave out)
            row = replace(row, without_one=without_one(list(row.base), list(row.head), row.paired))
            decision = UNDECIDED if row.without_one is None else decide(row.interval, q, factor, fdr, row.without_one)
        row = replace(row, decision=decision)
        rows[i] = replace(row, checks=row.checks + (_time_check(row, factor, fdr, len(judged)),))
    for i, r in enumerate(rows):
        if r.impl == reference and r.p is not None:
            said = f"the time reference, not judged (head/base {r.ratio:.3f})"
            rows[i] = replace(r, checks=r.checks + (Check("time", r.label, NA, said, mark=REFERENCE),))
    if paired_from is not None:
        notes.append(f"{len(base_runs)} rounds: the first {paired_from} in separate processes (checks, memory, "
                     f"kernels), each later one a process timing base and head in turn; the times compared are the "
                     f"later rounds' as measured, samples pooled per side, the interval resampling rounds with both "
                     f"their sides (what a process's own speed adds cancels).")
    else:
        notes.append(f"{len(base_runs)} base and {len(head_runs)} head runs in interleaved processes; samples pooled.")
    notes.append(f"time: slower when the 95% interval of head/base lies above {fmt_factor(factor)}, also with any "
                 f"one run left out, and the one-sided Mann–Whitney p, adjusted over the {len(judged)} timed "
                 f"benchmarks by Benjamini–Hochberg, is < {fdr:g} (a false discovery rate of {fdr:g} over the preset, not a "
                 f"per-benchmark alpha); "
                 f"not slower when the interval lies at or below {fmt_factor(factor)}; undecided otherwise, which is "
                 "reported and counted as a pass, not a failure.")
    faster = [r.label for r in rows if r.decision == NOT_SLOWER and r.impl != reference and len(r.base) > 1
              and len(r.head) > 1 and r.interval and r.interval[1] < 1 / factor]
    if faster:  # "not slower" alone hid a speed-up (judged as slower is: one run a side decides nothing)
        notes.append(f"faster: {len(faster)} benchmark(s), the whole 95% interval of head/base below "
                     f"{1 / factor:.2f}: {', '.join(faster[:4])}{' …' if len(faster) > 4 else ''}.")
    alone = sum(1 for r in rows if r.decision == UNDECIDED and r.without_one is None
                and decide(r.interval, r.q, factor, fdr) == SLOWER)
    if alone:  # a regression no --rounds 1 run can fail, said where the verdict is read
        notes.append(f"{alone} benchmark(s) above the floor by their interval were timed in one round a side, which "
                     "can judge nothing slower: give --rounds 2 or more (or adaptive rounds) to decide them.")
    unpaired = [r for r in rows if r.p is not None and not r.paired]
    if typical is not None and (paired_from is None or unpaired):  # paired rounds' times are compared as measured
        notes.append(("" if paired_from is None else f"the {len(unpaired)} benchmark(s) judged unpaired: ")
                     + f"each sample divided by the machine's speed beside it: the mean of the speed probe's times "
                     f"right before and after it ({base_runs[0][0].probe_work if base_runs and base_runs[0] else ''}"
                     f"), over their median {typical * 1e6:.1f} µs.")
    elif speeds is not None:
        notes.append(f"each run's times divided by its speed as {reference} (time_reference) saw it, the median over "
                     "cases of its time there / its time over all runs: base " + ", ".join(
                         f"{v:.3f}" for v in speeds[:len(base)]) + "; head " + ", ".join(
                         f"{v:.3f}" for v in speeds[len(base):]) + ".")
    elif reference and typical is None:  # no probe, and no run speeds: the reference was not in every run
        notes.append(f"times compared as measured: {reference} (time_reference) is missing from some run.")
    notes.append("memory: exact (peak memory is deterministic); 95% CI: two-stage bootstrap over runs and samples.")
    full = list(head_runs[:planned] if planned is not None else head_runs)
    inrun = compare_points(None, full[0], config, repeats=full[1:]) if full and full[0] else None
    suite = tuple(_suite_check(line) for line in head_failures if not line.startswith(SKIPPED))
    return SideBySide(tuple(rows), inrun.ratios if inrun else (), suite, tuple(notes), factor, fdr,
                      config.source)
