"""One comparison of two sides, from what is asked to the verdict: what `sdpa-bench continuous` runs once, and what a
search over commits or releases would ask again at each step. The command line only parses and prints.

    compare(request, plan, project, progress) -> Comparison
    pytest_args(plan, cpu) -> [str]      # how every process of a side runs the suite

In order: the leftovers of killed runs swept (continuous.revisions), a work folder of its own; both sides assembled
(continuous.assemble: checked out, given their environments, installed, imported); where the sides can share a
process (continuous.pairs: the CPU, one interpreter), a first round of a process a side that checks, then
`plan.rounds` rounds of one process timing both in turn; else `plan.rounds` interleaved processes a side
(continuous.sides; which side first drawn from the seed: continuous.schedule); extra rounds for the benchmarks still
undecided, within the adaptive budget, measured the same way (continuous.adaptive), judged by the gate's rules
(continuous.verdict); the work folder and its worktrees removed, whatever happened.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import signal
import time
from collections.abc import Callable
from pathlib import Path

from ..bench.grid import default_device
from ..bench.machine import every_cpu_busy
from ..errors import GateInputError, UsageError
from ..fmt import fmt_duration
from ..report.writer_lock import only_writer
from .adaptive import Outcome, extend, keyword
from .assemble import Prepared, Request, assemble
from .project import Project
from .render import as_dict, render
from .outcomes import clear_runs
from .revisions import new_workdir, remove_workdir, sweep_stale
from .pairs import Pairing, unpairable
from .schedule import Schedule
from .sides import Side, interleaved, run_pair
from .verdict import SideBySide

ROUNDS, MAX_TIME, MIN_ROUNDS = 4, 0.1, 8  # per side: 4 processes of the ci preset fit CI's 5 minutes on 2 cores
# seconds of extra rounds for undecided benchmarks, after the planned rounds: 75 keeps the ci preset's comparison within
# about 5 minutes on a 2-core CPU, one or two extra rounds (docs/records/2026-11-24-epyc-continuous-trials.md)
ADAPTIVE_BUDGET = 75.0
LONGEST_S, MOST_ROUNDS = 7 * 24 * 3600, 1000  # past these a value is a typo, and would overflow the timers it sets
# where the sides run in different environments, the extra rounds may take this many times the planned rounds' time
# (at least ADAPTIVE_BUDGET): no process can time both sides there, so each benchmark's interval narrows only with
# more processes; with torch 2.13.0 against 2.14.1 on a 2-core Xeon, 4 rounds decided 13 of 24 rows and 14 rounds 22
# (docs/records/2026-11-29-xeon-bf16-paired-trials.md, docs/records/2026-11-29-xeon-bf16-env-budget.md)
ENV_BUDGET_FACTOR = 2.0
ROUND_TIMEOUT = 1800.0  # one process of one side: the ci preset takes ~25 s, the quick preset with six implementations
                        # more than 600 s on a 2-core CPU


@dataclasses.dataclass(frozen=True)
class Plan:
    """How both sides are measured: the preset (None: `ci` on a CPU, `gpu-ci` on CUDA), processes a side, pytest-
    benchmark's time per benchmark, the extra rounds' budget and count, the longest a process may run, the seed of
    the order of sides (None: a fresh one), and a folder to keep every run's JSON in; `select`, a pytest -k
    expression that narrows the preset's benchmarks, and `time_floor`, the factor a time must clear to be decided
    (None: the config's continuous_time), which a search over commits sets from the effect it looks for;
    `paired`: where the sides can share a process (continuous.pairs), the first round checks in separate processes
    and each of `rounds` more times both sides in one process, in turn. `adaptive_budget` None: chosen by
    `choose_budget` once the planned rounds are measured."""

    preset: str | None = None
    rounds: int = ROUNDS
    max_time: float = MAX_TIME
    adaptive_budget: float | None = None
    adaptive_rounds: int | None = None
    round_timeout: float = ROUND_TIMEOUT
    seed: int | None = None
    keep_runs: str | None = None
    select: str | None = None
    time_floor: float | None = None
    paired: bool = True

    def preset_name(self, cpu: bool) -> str:
        return self.preset or ("ci" if cpu else "gpu-ci")  # gpu-ci: calls long enough to time kernels, not launches

    def check(self) -> None:
        """UsageError naming the first value no comparison can use."""
        if self.time_floor is not None and not self.time_floor > 1.0:
            raise UsageError(f"the time floor should be a factor above 1, got {self.time_floor!r}")
        if not 1 <= self.rounds <= MOST_ROUNDS:
            raise UsageError(f"--rounds should be from 1 to {MOST_ROUNDS}, got {self.rounds}")
        if self.adaptive_budget is not None and not 0 <= self.adaptive_budget <= LONGEST_S:
            raise UsageError(f"--adaptive-budget should be from 0 to {LONGEST_S} seconds (a week), got "
                             f"{self.adaptive_budget!r}")
        if not 0 < self.round_timeout <= LONGEST_S:
            raise UsageError(f"--round-timeout should be more than 0 seconds and at most {LONGEST_S} (a week), got "
                             f"{self.round_timeout!r}")
        if not 0 < self.max_time <= LONGEST_S:
            raise UsageError(f"--max-time should be more than 0 seconds and at most {LONGEST_S} (a week), got "
                             f"{self.max_time!r}")
        if self.adaptive_rounds is not None and not 1 <= self.adaptive_rounds <= MOST_ROUNDS:
            raise UsageError(f"--adaptive-rounds should be from 1 to {MOST_ROUNDS}, got {self.adaptive_rounds}")
        check_keyword(self.select)


def check_keyword(expression: str | None) -> None:
    """UsageError where `expression` is no pytest -k expression, before any side is installed (else each side's
    suite refuses it, and the error reads as that revision's). Checked with pytest's own parser where this
    environment has pytest; its internals move between releases, so anything else it raises is left to the run."""
    if not expression:
        return
    try:
        from _pytest.mark.expression import Expression
    except ImportError:
        return
    try:
        Expression.compile(expression)
    except SyntaxError as exc:
        raise UsageError(f"-k {expression!r} is no pytest -k expression: {exc.msg}") from None
    except Exception:  # another pytest's parser: the suite's own run will say
        return


@dataclasses.dataclass(frozen=True)
class Comparison:
    """The verdict of one comparison, with what it needs to be told: the sides' names, what was compared (`about`),
    the environments' notes (`header`), how the runs were made (`run_notes`, and `run` for JSON)."""

    report: SideBySide
    base: str
    head: str
    about: str
    header: tuple[str, ...]
    run_notes: tuple[str, ...]
    run: dict

    @property
    def exit_code(self) -> int:
        return self.report.exit_code

    def text(self, markdown: bool = False) -> str:
        return render(self.report, self.base, self.head, markdown=markdown, run_notes=self.run_notes,
                      header=self.header, about=self.about)

    def as_json(self) -> dict:
        return as_dict(self.report, self.base, self.head, self.run | {"environment_notes": list(self.header)})


def pytest_args(plan: Plan, cpu: bool) -> list[str]:
    out = ["--sdpa-preset", plan.preset_name(cpu), f"--benchmark-max-time={plan.max_time:g}", f"--benchmark-min-rounds={MIN_ROUNDS}"]
    if cpu:  # CPU time of the one-thread process: time spent waiting for the other core's work does not count
        out.append("--benchmark-timer=time.process_time")
    if plan.select:
        out += ["-k", plan.select]
    return out


def choose_budget(given: float | None, base: Side, head: Side, planned_s: float) -> tuple[float, str]:
    """The seconds the extra rounds may take, and why: `given` where the command line or the settings name it; else
    ADAPTIVE_BUDGET where both sides run in one environment (what CI's comparison of two revisions gets), and
    ENV_BUDGET_FACTOR times the planned rounds' `planned_s` (at least ADAPTIVE_BUDGET) where their environments
    differ: there each round is a process of each side, and only more of them narrow an interval."""
    if given is not None:
        return given, "as given"
    if base.python == head.python:
        return ADAPTIVE_BUDGET, "the default where both sides share an environment"
    if ENV_BUDGET_FACTOR * planned_s < ADAPTIVE_BUDGET:
        return ADAPTIVE_BUDGET, (f"the least where the sides' environments differ ({ENV_BUDGET_FACTOR:g}× the planned "
                                 f"rounds' {fmt_duration(planned_s)} is less)")
    return ENV_BUDGET_FACTOR * planned_s, (f"{ENV_BUDGET_FACTOR:g}× the planned rounds' {fmt_duration(planned_s)}, "
                                           "the default where the sides' environments differ")


def _measure(plan: Plan, sides: Prepared, schedule: Schedule, work: Path, progress: Callable[[str], None]
             ) -> tuple[Outcome, float, int]:
    """The planned rounds, then the adaptive ones: the verdict over all of them, the planned rounds' seconds and
    their number."""
    cpu = default_device() == "cpu"
    base, head, config = sides.base, sides.head, sides.config
    args = pytest_args(plan, cpu)
    if sides.as_measured:  # the reference's code changed with torch: it is measured and judged like the rest, and
        config = dataclasses.replace(config, time_reference="", speed_probe=False)  # so may the speed probe's
    if not any(rule.metric == "ceiling" for rule in config.ratios):  # nothing reads them: 2 s a process saved
        base, head = (dataclasses.replace(side, ceilings=False) for side in (base, head))
    if plan.time_floor is not None:
        rule = floor_rule(plan.time_floor)
        config = dataclasses.replace(config, continuous_time=rule, continuous_time_cuda=rule)
    runs = Path(plan.keep_runs).resolve() if plan.keep_runs else work / "runs"  # the sides run in other folders
    runs.mkdir(parents=True, exist_ok=True)
    earlier = clear_runs(runs) if plan.keep_runs else 0  # beside this comparison's, they would read as its own
    if earlier:
        progress(f"--keep-runs {plan.keep_runs}: removed the {earlier} run files of an earlier comparison")
    start = time.monotonic()
    why_not = unpairable(base, head, cpu) if plan.paired else "--separate-processes"
    pairing = Pairing(base, head, schedule, runs, plan, progress, why_not, MIN_ROUNDS)
    base_runs, head_runs, failed = interleaved(base, head, 1 if pairing.on else plan.rounds, args, cpu, runs,
                                               schedule, progress, plan.round_timeout,
                                               last=1 + plan.rounds if pairing.on else None)
    timed_from = time.monotonic()
    if pairing.on:
        for i in range(plan.rounds):
            b, h, f = pairing.round([], str(i + 2), args)
            if not pairing.on:  # the first paired process failed: separate processes, as many rounds as planned
                base_runs.append(b)
                head_runs.append(h)
                more = interleaved(base, head, plan.rounds - 2, args, cpu, runs, schedule, progress,
                                   plan.round_timeout, first_tag=3) if plan.rounds > 2 else ([], [], [])
                base_runs += more[0]
                head_runs += more[1]
                failed += [x for x in [*f, *more[2]] if x not in failed]
                break
            base_runs.append(b)
            head_runs.append(h)
            failed += [x for x in f if x not in failed]
    planned_s = time.monotonic() - start
    per_round = (time.monotonic() - timed_from) / plan.rounds if pairing.used else planned_s / plan.rounds

    def extra(terms: list[str], index: int) -> tuple[list, list, list[str]]:
        try:
            selected = ["-k", keyword(terms)]  # the undecided benchmarks, a subset of plan.select's
        except ValueError as exc:
            raise GateInputError(f"adaptive round {index}: {exc}") from None
        args = pytest_args(dataclasses.replace(plan, select=None), cpu) + selected
        if pairing.used:
            return pairing.round(terms, f"a{index}", args)
        return run_pair(base, head, schedule, args, cpu, runs, f"a{index}", plan.round_timeout, progress)

    # the first extra round is expected to take as long as a planned one (it measures fewer benchmarks, but each
    # process still starts, imports torch and samples the ceilings): the budget is not overrun by guessing low
    budget, why = choose_budget(plan.adaptive_budget, base, head, planned_s)
    outcome = extend(base_runs, head_runs, failed, config, extra, budget, first_estimate_s=per_round,
                     progress=progress, max_rounds=plan.adaptive_rounds, paired_from=1 if pairing.used else None,
                     budget_from=why)
    return dataclasses.replace(outcome, pairing=pairing.note()), planned_s, len(base_runs)


def _timing(setup_s: float, planned_s: float, rounds: int, adaptive_s: float, total_s: float) -> tuple[dict, str]:
    """Where the run's time went, for --json and as a note: a CI budget or a shortened trial is sized from it."""
    timing = {"total_s": round(total_s, 1), "setup_s": round(setup_s, 1), "planned_s": round(planned_s, 1),
              "per_round_s": round(planned_s / rounds, 1), "adaptive_s": round(adaptive_s, 1)}
    return timing, (f"time: {fmt_duration(total_s)} in all: {fmt_duration(setup_s)} to check out, install and import "
                    f"both sides, {fmt_duration(planned_s)} for {rounds} planned round(s) "
                    f"({fmt_duration(planned_s / rounds)} a round), {fmt_duration(adaptive_s)} of adaptive rounds.")


def _compare(request: Request, plan: Plan, project: Project, work: Path, progress: Callable[[str], None]
             ) -> Comparison:
    import sdpa_impls

    try:
        schedule = Schedule(plan.seed) if plan.seed is not None else Schedule.fresh()
    except ValueError as exc:
        raise UsageError(f"--seed: {exc}") from None
    progress(f"seed {schedule.seed}: order of sides, folder names and environment sizes drawn from it "
             f"(--seed {schedule.seed} repeats them)")
    folders = schedule.folders()
    busy = every_cpu_busy() if default_device() == "cpu" else ""  # before its own work loads the machine
    if busy:
        progress(f"warning: {busy}")
    start = time.monotonic()
    sides = assemble(request, project, work, folders, progress)
    setup_s = time.monotonic() - start
    outcome, planned_s, planned = _measure(plan, sides, schedule, work, progress)
    timing, timing_note = _timing(setup_s, planned_s, planned, outcome.adaptive.spent_s, time.monotonic() - start)
    run_notes = (f"seed {schedule.seed}: first side of each round {', '.join(schedule.orders)}; side folders "
                 f"{folders[0]} (base) and {folders[1]} (head); each process's environment padded to a random size.",
                 outcome.pairing, outcome.adaptive.note(), timing_note) + ((busy,) if busy else ())
    unused = sides.config.gate_only()  # said, not silently dropped: the config reads as if it applied
    run_notes += (f"not applied here, the gate's alone: {'; '.join(unused)}. continuous reports a slowdown past "
                  f"continuous_time ({sides.config.continuous_time}) and any growth of peak memory; \"off\" turns "
                  "either off for the rows it names.",) if unused else ()
    base, head = sides.base, sides.head
    run = {"seed": schedule.seed, "first_side": list(schedule.orders), "folders": list(folders),
           "planned_rounds": planned, "select": plan.select,
           "environments": {s.role: s.python for s in (base, head)},
           "project": {"kind": project.kind, "root": str(project.root or ""), "package": project.package,
                       "sdpa_bench": sdpa_impls.__version__, "impls": {s.role: list(s.impls) for s in (base, head)}},
           "adaptive": dataclasses.asdict(outcome.adaptive), "timing": timing, "pairing": outcome.pairing}
    return Comparison(outcome.report, base.name, head.name, sides.about, tuple(sides.notes), run_notes, run)


def compare(request: Request, plan: Plan, project: Project, progress: Callable[[str], None]) -> Comparison:
    """Both sides of `request` measured as `plan` says and judged by the gate (module docstring); UsageError (or
    GateInputError) for anything that stops it. Nothing it made is left behind."""
    for role in ("base", "head"):  # `sdpa-bench continuous "$UNSET"` must not compare what nobody asked for
        if getattr(request, role) is not None and not getattr(request, role).strip():
            raise UsageError(f"{role.upper()} is an empty revision name: name a revision, or leave it out")
    plan.check()
    for left in sweep_stale(project.root):
        progress(f"removed {left}, left by a run that was stopped")
    keep = Path(plan.keep_runs).resolve() if plan.keep_runs else None
    made = keep is not None and not keep.exists()
    try:
        if keep is not None:  # one comparison at a time: another would clear this one's run files, and read its own
            keep.mkdir(parents=True, exist_ok=True)
        with only_writer(keep, "`sdpa-bench continuous`", "--keep-runs") if keep else contextlib.nullcontext():
            return _compare_in_workdir(request, plan, project, progress)
    finally:
        if made:  # a comparison that stopped before its rounds leaves no empty folder
            with contextlib.suppress(OSError):
                keep.rmdir()


def _compare_in_workdir(request: Request, plan: Plan, project: Project, progress: Callable[[str], None]
                        ) -> Comparison:
    work = new_workdir()
    comparison = None
    try:
        comparison = _compare(request, plan, project, work, progress)
    finally:
        stopped = remove_workdir(project.root, work)  # whole, a signal held meanwhile
        if stopped is not None:  # it came as the checkouts were removed: handled now, as the command handles it
            try:  # (Terminated, KeyboardInterrupt), also over an error of the comparison's (a skipped commit)
                signal.raise_signal(stopped)
            except KeyboardInterrupt as exc:
                exc.comparison = comparison  # type: ignore[attr-defined]  # judged (or None): the caller may keep it
                raise
    return comparison


def floor_rule(floor: float) -> str:
    """The time rule a bisect step's floor (×1.0541) is judged by: `median:5.41%`, six digits of its percent."""
    return f"median:{(floor - 1) * 100:.6g}%"
