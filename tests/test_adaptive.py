"""The adaptive rounds of `sdpa-bench continuous` and its seeded schedule, on synthetic runs: every point is made
here from a seeded generator and the clock is a counter, so these tests measure nothing and hold no timing bound.

What runs is the real code: continuous.adaptive.extend judges with continuous.verdict.judge after every round
and decides which benchmarks get another round; only the measuring of a round is replaced by `Machine`.
"""
from __future__ import annotations

import os
import platform
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from sdpa_impls.continuous.adaptive import extend, keyword, selection
from sdpa_impls.continuous.comparison import ADAPTIVE_BUDGET, ENV_BUDGET_FACTOR, choose_budget
from sdpa_impls.continuous.render import as_dict, render
from sdpa_impls.continuous.schedule import MAX_PADDING, NO_CEILINGS_ENV, PAD_ENV, REPEAT_ENV, Schedule
from sdpa_impls.continuous.sides import ALLOCATOR_ENV, Side, side_env
from sdpa_impls.continuous.verdict import NOT_SLOWER, SLOWER, UNDECIDED, decide, judge
from sdpa_impls.gate.config import config_from_dict, load_config
from sdpa_impls.gate.points import Point
from sdpa_impls.gate.rules import Check
from test_measure import mapped_blocks

CASE = "L128-E64-fp32-fwd"
OTHER = "L96-E32-fp32-fwd+bwd"
CONFIG = config_from_dict({"time_reference": "torch_sdpa", "continuous_time": "median:5%", "alpha": 0.01}, "test")


def _point(impl: str, case: str, level: float, rng: np.random.Generator) -> Point:
    samples = tuple(float(s) for s in level * (1 + 0.005 * rng.standard_normal(30)))
    return Point(impl, case, float(np.median(samples)), samples, 1000, 0.0, 1e-3,
                 name=f"tests/test_benchmarks.py::test_sdpa[{impl}-{case}]")


class Machine:
    """Synthetic runs: torch_sdpa and chunked at 1.0 on both sides and both cases; naive on CASE at 1.0 on base and
    `ratio` on head, each run of it off by a factor drawn with spread `run_spread` (a process that is slow or fast
    for its whole life, which only more runs average out). Each measured round advances `now` by `round_s`."""

    def __init__(self, ratio: float, run_spread: float, round_s: float = 30.0, seed: int = 0) -> None:
        self.ratio, self.run_spread, self.round_s = ratio, run_spread, round_s
        self.rng = np.random.default_rng(seed)
        self.now = 0.0
        self.asked: list[list[str]] = []

    def clock(self) -> float:
        return self.now

    def run(self, head: bool, names: set[str] | None = None, life: float | None = None) -> list[Point]:
        out = []
        for case in (CASE, OTHER):
            for impl in ("torch_sdpa", "naive", "chunked"):
                level = 1.0
                if impl == "naive" and case == CASE:
                    level = (self.ratio if head else 1.0) * (life or 1 + self.run_spread * self.rng.standard_normal())
                p = _point(impl, case, level, self.rng)
                if names is None or p.name.rsplit("::", 1)[1] in names:
                    out.append(p)
        return out

    def planned(self, lives: tuple[float, float]) -> tuple[list[list[Point]], list[list[Point]]]:
        """Two planned runs per side whose naive lives disagree by `lives` (so the interval is wide)."""
        return ([self.run(False, life=lives[0]), self.run(False, life=lives[1])],
                [self.run(True, life=lives[1]), self.run(True, life=lives[0])])

    def measure(self, terms: list[str], index: int) -> tuple[list[Point], list[Point], list[str]]:
        self.asked.append(list(terms))
        self.now += self.round_s
        return self.run(False, set(terms)), self.run(True, set(terms)), []


def _rows(report) -> dict[str, object]:
    return {r.label: r for r in report.rows}


NAIVE, CHUNKED = f"naive[{CASE}]", f"chunked[{OTHER}]"
SELECTED = {f"test_sdpa[naive-{CASE}]", f"test_sdpa[torch_sdpa-{CASE}]"}


@pytest.mark.parametrize("ratio, decision, exit_code", [(1.20, SLOWER, 1), (1.00, NOT_SLOWER, 0)],
                         ids=["decided-slower", "decided-not-slower"])
def test_more_rounds_decide_an_undecided_benchmark(ratio: float, decision: str, exit_code: int) -> None:
    machine = Machine(ratio, run_spread=0.01)
    base, head = machine.planned((1.0, 1.3))
    before = _rows(judge(base, head, CONFIG))
    assert before[NAIVE].decision == UNDECIDED  # two disagreeing runs per side: the interval straddles 1.05
    assert before[f"naive[{OTHER}]"].decision == NOT_SLOWER and before[CHUNKED].decision == NOT_SLOWER

    out = extend(base, head, [], CONFIG, machine.measure, budget_s=10_000, first_estimate_s=30, clock=machine.clock)
    rows = _rows(out.report)
    assert rows[NAIVE].decision == decision and out.report.exit_code == exit_code
    assert out.adaptive.stopped == "decided" and not out.report.undecided
    assert 1 <= out.adaptive.rounds < 40 and out.adaptive.spent_s == 30 * out.adaptive.rounds
    # only the undecided benchmark and the time reference on its case were measured again
    assert all(set(terms) == SELECTED for terms in machine.asked)
    assert len(rows[NAIVE].head) == 2 + out.adaptive.rounds and len(rows[CHUNKED].head) == 2
    assert len(out.head_runs) == len(out.base_runs) == 2 + out.adaptive.rounds
    if decision == SLOWER:
        assert [c.kind for c in out.report.failures] == ["time"] and out.report.failures[0].subject == NAIVE


def test_out_of_budget_leaves_it_undecided_and_passing() -> None:
    machine = Machine(1.05, run_spread=0.03)  # right at the floor: no number of rounds clears it
    base, head = machine.planned((1.0, 1.3))
    out = extend(base, head, [], CONFIG, machine.measure, budget_s=100, first_estimate_s=30, clock=machine.clock)
    assert out.adaptive.stopped == "budget"
    assert out.adaptive.rounds == 3 and out.adaptive.spent_s == 90  # a fourth 30 s round would end at 120 s
    assert [r.label for r in out.report.undecided] == [NAIVE]
    assert out.report.exit_code == 0 and not out.report.failures
    assert _rows(out.report)[NAIVE].verdict == UNDECIDED
    text = render(out.report, "b", "h", run_notes=[out.adaptive.note()])
    assert "(0 failed check(s), 1 undecided)" in text and "counted as a pass, not a failure" in text
    assert f"  {NAIVE}: ×" in text and "5 base and 5 head runs" in text
    assert "would not fit the 100 s budget" in text
    assert as_dict(out.report, "b", "h")["undecided"] == [NAIVE]


def test_no_budget_no_extra_round_and_a_first_round_that_does_not_fit() -> None:
    machine = Machine(1.05, run_spread=0.03)
    base, head = machine.planned((1.0, 1.3))
    off = extend(base, head, [], CONFIG, machine.measure, budget_s=0, clock=machine.clock)
    assert off.adaptive.stopped == "none" and off.adaptive.rounds == 0 and [r.label for r in off.report.undecided] == [NAIVE]
    tight = extend(base, head, [], CONFIG, machine.measure, budget_s=20, first_estimate_s=30, clock=machine.clock)
    assert tight.adaptive.stopped == "budget" and tight.adaptive.rounds == 0 and machine.asked == []
    with pytest.raises(ValueError, match="at least 0 seconds"):
        extend(base, head, [], CONFIG, machine.measure, budget_s=-1)


def test_no_extra_round_once_a_wrong_answer_fails_the_verdict() -> None:
    """chunked answers wrong at head (its test failed, no point), naive is undecided: the verdict fails whatever
    more rounds find, so none runs (a wrong kernel took minutes of extra rounds before its exit 1)."""
    machine = Machine(1.05, run_spread=0.03)
    base, head = machine.planned((1.0, 1.3))
    head = [[p for p in run if f"{p.impl}[{p.case_id}]" != CHUNKED] for run in head]
    wrong = [f"FAILED tests/test_benchmarks.py::test_sdpa[chunked-{OTHER}] - WrongResult: out: max error 0.5"]
    out = extend(base, head, wrong, CONFIG, machine.measure, budget_s=10_000, first_estimate_s=30, clock=machine.clock)
    assert out.adaptive.stopped == "failed" and out.adaptive.rounds == 0 and machine.asked == []
    assert out.report.exit_code == 1 and [r.label for r in out.report.undecided] == [NAIVE]
    assert out.adaptive.note() == "adaptive rounds: none, the verdict fails already (a failed test or a wrong answer)."


def test_a_number_of_rounds_stops_them_within_a_budget_that_has_room_for_more() -> None:
    rounds = {}
    for cap in (None, 1):
        machine = Machine(1.05, run_spread=0.03)
        base, head = machine.planned((1.0, 1.3))
        rounds[cap] = extend(base, head, [], CONFIG, machine.measure, budget_s=1e6, first_estimate_s=30,
                             clock=machine.clock, max_rounds=cap).adaptive
    assert rounds[None].rounds >= 2  # one more round leaves it undecided, and the budget has room for more
    assert rounds[1].rounds == 1 and rounds[1].stopped == "rounds"
    assert "stopped because 1 round(s) were allowed" in rounds[1].note()
    with pytest.raises(ValueError, match="at least 1"):
        extend(base, head, [], CONFIG, machine.measure, budget_s=10, max_rounds=0)


def test_decide_reads_the_interval_against_the_floor() -> None:
    assert decide((1.06, 1.20), 0.001, 1.05, 0.01) == SLOWER
    assert decide((1.06, 1.20), 0.05, 1.05, 0.01) == UNDECIDED  # above the floor but not significant
    assert decide((1.01, 1.09), 1e-9, 1.05, 0.01) == UNDECIDED  # straddles the floor
    assert decide((0.97, 1.05), 0.5, 1.05, 0.01) == NOT_SLOWER
    assert decide((1.06, 1.20), 0.001, 1.05, 0.01, without_one=1.07) == SLOWER
    assert decide((1.06, 1.20), 0.001, 1.05, 0.01, without_one=1.04) == UNDECIDED  # it rests on one run


def _runs(lives: list[float], noise: float, rng: np.random.Generator) -> list[list[Point]]:
    """One run per life: the time reference at 1.0, naive at `life` with `noise` between its samples."""
    out = []
    for life in lives:
        samples = tuple(float(s) for s in life * (1 + noise * rng.standard_normal(30)))
        naive = Point("naive", CASE, float(np.median(samples)), samples, 1000, 0.0, 1e-3,
                      name=f"tests/test_benchmarks.py::test_sdpa[naive-{CASE}]")
        out.append([_point("torch_sdpa", CASE, 1.0, rng), naive])
    return out


def test_a_slower_decision_that_rests_on_one_run_is_not_taken() -> None:
    """Five runs a side; head's naive has one process 40 % slow and the others 2-11 %, base's two 3 % apart: the
    interval with every run in clears a floor that it no longer clears with one run left out."""
    rng = np.random.default_rng(0)
    base, head = _runs([0.97, 1.0, 1.0, 1.0, 1.03], 0.01, rng), _runs([1.02, 1.05, 1.08, 1.11, 1.40], 0.01, rng)
    at = lambda floor: config_from_dict({"time_reference": "torch_sdpa", "continuous_time": f"median:{floor}%",
                                         "alpha": 0.01}, "test")
    row = _rows(judge(base, head, at(0)))[NAIVE]
    low, without_one = row.interval[0], row.without_one
    assert row.decision == SLOWER and without_one is not None and without_one < low - 0.005, (low, without_one)
    floor = ((low + without_one) / 2 - 1) * 100  # between the two lower ends
    report = judge(base, head, at(floor))
    row = _rows(report)[NAIVE]
    assert decide(row.interval, row.q, report.factor, 0.01) == SLOWER  # with every run in, it would be
    assert row.decision == UNDECIDED and report.exit_code == 0 and [r.label for r in report.undecided] == [NAIVE]
    check = next(c for c in row.checks if c.kind == "time")
    assert "not clear of it with one run left out" in check.message and "lowest with one run left out" in check.message
    assert f"(low end {without_one:.3f} with one run left out)" in render(report, "b", "h")
    assert as_dict(report, "b", "h")["rows"][1]["without_one"] == pytest.approx(without_one)
    # a slowdown that every head process shows is still slower at that floor
    steady = _runs([1.08, 1.09, 1.10, 1.11, 1.12], 0.01, np.random.default_rng(1))
    row = _rows(judge(base, steady, at(floor)))[NAIVE]
    assert row.decision == SLOWER and row.without_one > 1 + floor / 100


def test_selection_spells_a_pytest_keyword() -> None:
    machine = Machine(1.05, run_spread=0.03)
    report = judge(*machine.planned((1.0, 1.3)), CONFIG)
    terms = selection(report, "torch_sdpa")
    assert set(terms) == SELECTED
    assert keyword(terms) == " or ".join(terms)
    with pytest.raises(ValueError, match="cannot select"):
        keyword(["test_sdpa[naive-L128 E64]"])


def test_the_schedule_is_seeded_and_balanced() -> None:
    a, b = Schedule(7), Schedule(7)
    assert [a.first() for _ in range(10)] == [b.first() for _ in range(10)] == a.orders == b.orders
    assert all(sorted(a.orders[i:i + 2]) == ["base", "head"] for i in range(0, 10, 2))  # one of each per block
    assert a.folders() == b.folders() and [len(a.padding()) for _ in range(5)] == [len(b.padding()) for _ in range(5)]
    starts = {Schedule(seed).first() for seed in range(20)}
    assert starts == {"base", "head"}  # which side starts is drawn, not fixed
    folders = Schedule(3).folders()
    assert len(folders[0]) == len(folders[1]) and folders[0] != folders[1]
    pads = {len(Schedule(seed).padding()) for seed in range(20)}
    assert len(pads) > 10 and max(pads) < MAX_PADDING
    with pytest.raises(ValueError, match="non-negative integer"):
        Schedule(-1)


def test_a_process_environment_carries_its_padding(tmp_path: Path) -> None:
    side = Side("head", "h", tmp_path / "tree", tmp_path / "site", "python")
    env = side_env(side, cpu=True, padding="x" * 123)
    assert env[PAD_ENV] == "x" * 123 and env["OMP_NUM_THREADS"] == "1"
    assert env["PYTHONPATH"].split(":")[0] == str(tmp_path / "site")
    assert REPEAT_ENV not in env and side_env(side, cpu=True, repeat=True)[REPEAT_ENV] == "1"
    assert NO_CEILINGS_ENV not in env and side_env(replace(side, ceilings=False), cpu=True)[NO_CEILINGS_ENV] == "1"


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's allocator settings: this libc is "
                    f"{platform.libc_ver()[0] or 'not glibc'}")
def test_every_process_of_a_side_starts_with_the_allocator_fixed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    """Left automatic, glibc maps a 1 MiB block on its own (and faults it in afresh on every use) until the first
    such block is freed; a side's processes start with the threshold fixed where a long-running process ends up."""
    side = Side("head", "h", tmp_path / "tree", tmp_path / "site", sys.executable)
    plain = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}

    assert mapped_blocks(plain) == 1  # the automatic threshold (128 KiB) maps the buffer: what a fresh process does
    env = side_env(side, cpu=True)
    assert all(env[k] == v for k, v in ALLOCATOR_ENV.items())
    assert mapped_blocks(env) == 0  # from the heap: glibc read the fixed threshold
    monkeypatch.setenv("MALLOC_ARENA_MAX", "2")  # a caller's own allocator settings are left as they are
    assert not set(ALLOCATOR_ENV) & set(side_env(side, cpu=True))


def _cuda_runs(host_us: float, runs: int, rng: np.random.Generator, device_us: float = 100.0,
               level: float = 1.0) -> list[list[Point]]:
    """CUDA runs: torch_sdpa at `device_us` µs of device time with 5 µs of host overhead; fused at `level` × that,
    with a host overhead of about `host_us` µs per call (±2 % from run to run)."""
    out = []
    for _ in range(runs):
        run = []
        for impl, host, lvl in (("torch_sdpa", 5.0, 1.0), ("fused", host_us, level)):
            p = _point(impl, CASE, device_us * lvl * 1e-6, rng)
            run.append(replace(p, host_overhead_s=host * (1 + 0.02 * rng.standard_normal()) * 1e-6,
                               case={"device": "cuda"}))
        out.append(run)
    return out


def _host(report) -> Check:
    return next(c for c in _rows(report)[f"fused[{CASE}]"].checks if c.kind == "host")


@pytest.mark.parametrize("host_us, runs, verdict", [(60.0, 4, "pass"), (72.0, 4, UNDECIDED), (72.0, 5, "FAIL")],
                         ids=["aa", "host+20%-4-runs", "host+20%-5-runs"])
def test_more_host_time_alone_fails_as_host_time_with_the_device_time_unchanged(host_us: float, runs: int,
                                                                                verdict: str) -> None:
    """A host-bound call (60 µs of host overhead on 100 µs of device time): +20 % host work alone fails as host
    time once the runs' order is significant at the gate's FDR (every head run above every base run: p = 1/70 with
    4 runs a side, undecided, so adaptive rounds measure it again; 1/252 with 5), and the time check, which reads the
    device time, does not move."""
    rng = np.random.default_rng(4)
    report = judge(_cuda_runs(60.0, runs, rng), _cuda_runs(host_us, runs, rng), CONFIG)
    host, row = _host(report), _rows(report)[f"fused[{CASE}]"]
    assert row.decision != SLOWER
    assert row.verdict == verdict, host.message
    assert (row in report.undecided) == (verdict == UNDECIDED)
    if verdict != "pass":
        assert f"head above base in {runs * runs} of {runs * runs} pairs of runs" in host.message
    if verdict == UNDECIDED:
        assert report.exit_code == 0 and host.message.startswith("not shown: host overhead 6")
        assert "fused" in " ".join(selection(report, "torch_sdpa"))  # the adaptive rounds measure it again
        assert "host overhead higher in every run, not yet significant" in render(report, "base", "head")
    if verdict == "FAIL":
        assert report.exit_code == 1 and host.message.startswith("more host time: host overhead 6")


def test_a_wide_host_overhead_from_process_to_process_is_no_failure_with_few_runs() -> None:
    """On a GPU machine one process's host overhead per call can be ten times the next's (an A/A on an H200: 22-238
    µs for one decode benchmark). Two or three runs a side whose order happens to separate them are not evidence,
    however far apart: with 2 runs a side that order comes by chance once in 6, with 3 once in 20."""
    rng = np.random.default_rng(8)
    for base_us, head_us in (((22.0, 82.0), (172.0, 238.0)), ((22.0, 46.0, 68.0), (107.0, 160.0, 238.0))):
        base = [_cuda_runs(h, 1, rng)[0] for h in base_us]
        head = [_cuda_runs(h, 1, rng)[0] for h in head_us]
        report = judge(base, head, CONFIG)
        assert report.exit_code == 0 and _host(report).message.startswith("not shown"), _host(report).message


def test_a_device_bound_calls_host_overhead_is_reported_not_judged() -> None:
    """10 µs of host overhead on a 1 ms call is the launch queue's noise: even doubled it is not judged."""
    rng = np.random.default_rng(6)
    host = _host(judge(_cuda_runs(10.0, 4, rng, device_us=1000.0), _cuda_runs(20.0, 4, rng, device_us=1000.0),
                       CONFIG))
    assert host.status == "info" and host.message.startswith("not judged, device-bound (1% of the eager time")


def test_a_host_check_needs_every_run_to_have_one_and_a_few_microseconds() -> None:
    rng = np.random.default_rng(5)
    base, head = _cuda_runs(1.0, 3, rng, device_us=2.0), _cuda_runs(1.5, 3, rng, device_us=2.0)  # +0.5 µs
    assert _host(judge(base, head, CONFIG)).status == "pass"
    head[0] = [replace(p, host_overhead_s=None) for p in head[0]]  # a run timed eagerly
    row = _rows(judge(base, head, CONFIG))[f"fused[{CASE}]"]
    assert not any(c.kind == "host" for c in row.checks)


def test_cuda_points_are_held_to_their_own_floor() -> None:
    """+2 % of device time: slower on CUDA points (continuous_time_cuda, 1 %), not on the CPU's (here 5 %)."""
    rng = np.random.default_rng(7)
    cuda = judge(_cuda_runs(5.0, 4, rng), _cuda_runs(5.0, 4, rng, level=1.02), CONFIG)
    assert _rows(cuda)[f"fused[{CASE}]"].decision == SLOWER
    cpu = [[replace(p, case={"device": "cpu"}, host_overhead_s=None) for p in run] for run in _cuda_runs(5.0, 4, rng)]
    slow = [[replace(p, case={"device": "cpu"}, host_overhead_s=None) for p in run]
            for run in _cuda_runs(5.0, 4, rng, level=1.02)]
    assert _rows(judge(cpu, slow, CONFIG))[f"fused[{CASE}]"].decision != SLOWER


def test_the_host_and_cuda_floors_are_config_keys_and_a_bad_one_is_refused() -> None:
    from sdpa_impls.gate.config import GateInputError

    config = config_from_dict({"continuous_host": "median:25%", "continuous_time_cuda": "median:2%"}, "test")
    assert config.host_rule().factor == pytest.approx(1.25)
    assert config.continuous_rule("cuda").factor == pytest.approx(1.02)
    # continuous_time unset: the package's default, the same as defaults.toml's (what a project that sets nothing gets)
    assert config.continuous_rule("cpu").factor == pytest.approx(1.03)
    assert load_config(None, start=Path("/")).continuous_rule("cpu").factor == pytest.approx(1.03)
    for key in ("continuous_host", "continuous_time_cuda"):
        with pytest.raises(GateInputError, match=key):
            config_from_dict({key: "fast"}, "test")


def test_the_budget_grows_with_the_planned_rounds_only_where_the_environments_differ(tmp_path: Path) -> None:
    """Where no process can time both sides (their environments differ), only more processes narrow an interval:
    the extra rounds get a multiple of the planned rounds' time. One environment keeps CI's fixed budget, and a
    budget given is used as given; the note says which."""
    base = Side("base", "b", None, tmp_path / "b", "/envs/one/bin/python")
    same = replace(base, role="head", site=tmp_path / "h")
    other = replace(same, python="/envs/two/bin/python")
    assert choose_budget(None, base, same, 600.0) == (ADAPTIVE_BUDGET, "the default where both sides share an "
                                                                      "environment")
    budget, why = choose_budget(None, base, other, 300.0)
    assert budget == ENV_BUDGET_FACTOR * 300.0 > ADAPTIVE_BUDGET and "environments differ" in why and "5m" in why
    floor, why_floor = choose_budget(None, base, other, 10.0)  # never less than one environment gets
    assert floor == ADAPTIVE_BUDGET and "environments differ" in why_floor and "10s is less" in why_floor
    assert choose_budget(30.0, base, other, 300.0) == (30.0, "as given")
    assert choose_budget(0.0, base, same, 300.0)[0] == 0.0
    machine = Machine(1.05, run_spread=0.03)
    planned = machine.planned((1.0, 1.3))
    out = extend(*planned, [], CONFIG, machine.measure, budget_s=100, first_estimate_s=30, clock=machine.clock,
                 budget_from=why)
    assert out.adaptive.note().endswith(f"budget 100 s, {why}.") and out.adaptive.budget_from == why
    off = extend(*planned, [], CONFIG, machine.measure, budget_s=0, clock=machine.clock, budget_from="as given")
    assert off.adaptive.note() == "adaptive rounds: off (no budget)."
