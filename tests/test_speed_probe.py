"""The speed probe: a short GEMM timed before the first sample of each CPU benchmark and after every sample
(bench.probe), which `continuous` divides each sample by (continuous.verdict). On synthetic runs whose machine
switches between two speeds 1.7× apart for stretches of samples, as a shared VM's does, the probe's scaling decides
an A/A and a 10 % slowdown that the per-run factor leaves undecided; it is used only where every point carries
probes of the same work. The real suite records them (real pytest-benchmark, real torch)."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from sdpa_impls.bench.probe import WORK
from sdpa_impls.continuous.render import as_dict, render
from sdpa_impls.continuous.verdict import NOT_SLOWER, PROBE_UNIT, SLOWER, UNDECIDED, judge
from sdpa_impls.gate.config import config_from_dict
from sdpa_impls.gate.points import Point, load_points

CONFIG = config_from_dict({"time_reference": "torch_sdpa", "continuous_time": "median:3%", "alpha": 0.01}, "test")
CASES = ("L128-E64-fp32-fwd", "L1024-E64-fp32-fwd")
IMPLS = ("torch_sdpa", "naive", "fused")
SLOW_STATE = 1.7
PROBE_S = 1e-4


def run(rng: np.random.Generator, head_factor: float = 1.0, head: bool = False) -> list[Point]:
    """One process: each benchmark's 40 samples pass through the machine's two states in stretches of 5-30
    samples (the state seen by a sample is seen by the probes on both sides of it), with 1 % noise on each."""
    points = []
    for case in CASES:
        for impl in IMPLS:
            n = 40
            state, states = 1.0, []
            while len(states) < n + 1:
                states += [state] * int(rng.integers(5, 30))
                state = SLOW_STATE if state == 1.0 else 1.0
            states = np.array(states[:n + 1])
            level = 1e-3 * (head_factor if head and impl == "naive" else 1.0)
            samples = level * states[:n] * (1 + 0.01 * rng.standard_normal(n))
            probes = PROBE_S * states * (1 + 0.01 * rng.standard_normal(n + 1))
            probes[1:] = PROBE_S * states[:n] * (1 + 0.01 * rng.standard_normal(n))  # after sample i: its state
            points.append(Point(impl, case, float(np.median(samples)), tuple(samples.tolist()), 1000, 0.0, 1e-3,
                                probe_s=tuple(probes.tolist()), probe_work=WORK))
    return points


def sides(head_factor: float, seed: int = 0, runs: int = 4) -> tuple[list[list[Point]], list[list[Point]]]:
    rng = np.random.default_rng(seed)
    return ([run(rng) for _ in range(runs)], [run(rng, head_factor, head=True) for _ in range(runs)])


def decisions(report) -> dict[str, str]:
    return {r.label: r.decision for r in report.rows if r.decision is not None}


@pytest.mark.parametrize("head_factor, want", [(1.0, NOT_SLOWER), (1.10, SLOWER)])
def test_the_probe_decides_what_a_two_speed_machine_leaves_undecided(head_factor: float, want: str) -> None:
    base, head = sides(head_factor)
    probed = judge(base, head, CONFIG)
    assert all(r.unit == PROBE_UNIT for r in probed.rows)
    naive = {label: d for label, d in decisions(probed).items() if label.startswith("naive")}
    assert set(naive.values()) == {want}, naive
    assert set(d for label, d in decisions(probed).items() if label.startswith("fused")) == {NOT_SLOWER}
    per_run = judge(base, head, replace(CONFIG, speed_probe=False))  # one factor per process, as before
    assert UNDECIDED in decisions(per_run).values()
    assert sum(d != UNDECIDED for d in decisions(probed).values()) > sum(
        d != UNDECIDED for d in decisions(per_run).values())


def strip(runs: list[list[Point]], impl: str) -> list[list[Point]]:
    return [[replace(p, probe_s=()) if p.impl == impl else p for p in r] for r in runs]


def test_the_notes_say_the_probe_scaled_only_what_it_scaled() -> None:
    """Rounds that timed both sides in one process are compared as measured: the verdict says so, and does not also
    say that every sample was divided by the probe's reading."""
    base, head = sides(1.0)
    notes = " ".join(judge(base, head, CONFIG).notes)
    assert "each sample divided by the machine's speed" in notes and "as measured" not in notes
    notes = " ".join(judge(base, head, CONFIG, paired_from=1).notes)
    assert "later rounds' as measured" in notes and "divided by the machine's speed" not in notes, notes
    assert "is missing from some run" not in notes, "the time reference is in every run"
    gone = [[p for p in run if p.impl != "torch_sdpa"] for run in base]  # missing: said where it would have scaled
    notes = " ".join(judge(gone, head, replace(CONFIG, speed_probe=False)).notes)
    assert "torch_sdpa (time_reference) is missing from some run" in notes, notes


def test_one_round_a_side_says_it_can_judge_nothing_slower() -> None:
    """A 30 % slower head timed once a side is undecided (nothing rests on one process): the verdict says why,
    and what decides it, instead of a bare pass."""
    base, head = sides(1.3, runs=1)
    report = judge(base, head, CONFIG)
    naive = [r for r in report.rows if r.impl == "naive"]
    assert naive and all(r.decision == UNDECIDED for r in naive) and not report.failures
    assert any("timed in one round a side, which can judge nothing slower: give --rounds 2" in n
               for n in report.notes), report.notes
    assert not any("one round a side" in n for n in judge(*sides(1.3, runs=2), CONFIG).notes)


def test_a_failed_point_is_one_failure_not_also_a_missing_one() -> None:
    """A point whose answer is wrong (or whose kernel raised) fails its test in head, so head's runs lack it: that is
    one failure, named with its error, not a second one for a benchmark gone missing."""
    base, head = sides(1.0)
    head = [[p for p in r if p.label != "naive[L128-E64-fp32-fwd]"] for r in head]
    line = ("FAILED test_sdpa.py::test_sdpa[naive-L128-E64-fp32-fwd] - sdpa_impls.bench.check.WrongResult: "
            "max |error| 0.0163 > tolerance 2.13e-05")
    report = judge(base, head, CONFIG, head_failures=[line])
    failures = report.failures
    assert [(c.kind, c.subject) for c in failures] == [("correctness", "naive[L128-E64-fp32-fwd]")], failures
    row = next(r for r in report.rows if r.label == "naive[L128-E64-fp32-fwd]")  # its row says so too, not "base only"
    assert row.verdict == "FAIL" and "WrongResult" in row.head_failed, row
    text, data = render(report, "b", "h"), as_dict(report, "b", "h")
    assert "naive[L128-E64-fp32-fwd]: FAIL (its test failed in head, above)" in text, text
    assert [r["verdict"] for r in data["rows"] if r["case"] == "L128-E64-fp32-fwd" and r["impl"] == "naive"] == ["FAIL"]
    gone = judge(base, head, CONFIG).failures  # no failed test: the benchmark is missing from head
    assert [(c.kind, c.subject) for c in gone] == [("missing", "naive[L128-E64-fp32-fwd]")], gone
    raised = line.split(" - ")[0] + " - RuntimeError: kernel exploded"  # an error, not a wrong answer: also once
    failures = judge(base, head, CONFIG, head_failures=[raised]).failures
    assert [(c.kind, c.subject) for c in failures] == [("suite", "naive[L128-E64-fp32-fwd]")], failures
    assert "kernel exploded" in failures[0].message


@pytest.mark.parametrize("how", ["a point without probes", "another probe's work", "switched off"])
def test_the_probe_is_used_only_where_every_point_has_the_same_one(how: str) -> None:
    base, head = sides(1.0)
    config = CONFIG
    if how == "a point without probes":  # e.g. a base revision from before the probe
        base = strip(base, "fused")
    elif how == "another probe's work":
        head = [[replace(p, probe_work="another GEMM") for p in r] for r in head]
    else:  # the sides' torch differs (continuous sets it off): the probe's own speed may differ
        config = replace(CONFIG, speed_probe=False)
    report = judge(base, head, config)
    assert {r.unit for r in report.rows} == {"torch_sdpa"}  # back to each run's speed as the reference saw it
    assert not any("speed probe" in n for n in report.notes)


def test_the_suite_records_a_probe_before_and_after_every_sample(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs", "sdpa_impls.suite.test_sdpa",
         "--benchmark-only", "--sdpa-preset", "ci", "--sdpa-impl", "fused", "-k", "L128-E64-fp32-fwd",
         "--benchmark-timer=time.process_time", "--benchmark-max-time=0.02", "--benchmark-min-rounds=8",
         f"--benchmark-json={out}", "--benchmark-save-data"], cwd=tmp_path, capture_output=True, text=True,
        timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    bench = json.loads(out.read_text())["benchmarks"][0]
    assert len(bench["extra_info"]["probe_s"]) == len(bench["stats"]["data"]) + 1
    (point,) = load_points(out)[1]
    assert len(point.probe_s) == len(point.samples) + 1 and min(point.probe_s) > 0 and point.probe_work == WORK


def test_the_probe_times_the_machine_not_the_caches_a_sample_left_cold() -> None:
    """A long sample evicts the probe's operands. Timed cold, as two GEMMs right after the sample, the probe after it
    read 2-3.5 times its time after a short one on the AMX Xeon, and scaled long benchmarks by their cache misses.
    The probe warms its operands with untimed GEMMs first and then times a stretch of them, so it reads about the
    same after a cache-flushing call as after nothing."""
    import time

    import torch

    from sdpa_impls.bench.probe import SpeedProbe

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread, as `continuous` measures; the session's setting comes back after
    try:
        probe = SpeedProbe(time.perf_counter)
        big = torch.empty(64 << 20, dtype=torch.uint8)

        def cold_pair() -> float:  # the probe as it was: two GEMMs timed right after the sample
            start = time.perf_counter()
            for _ in range(2):
                torch.mm(probe.a, probe.b, out=probe.out)
            return time.perf_counter() - start

        after = {"nothing": [], "flush": [], "cold pair": [], "cold pair after nothing": []}
        for _ in range(30):
            probe(); after["nothing"].append(probe.durations[-1])
            big.fill_(1); probe(); after["flush"].append(probe.durations[-1])
            after["cold pair after nothing"].append(cold_pair())
            big.fill_(2); after["cold pair"].append(cold_pair())
        ratio = {k: float(np.median(v)) for k, v in after.items()}
        if ratio["cold pair"] < 1.3 * ratio["cold pair after nothing"]:
            pytest.skip("a 64 MiB write leaves the probe's operands in this CPU's caches: nothing to tell apart")
        assert ratio["flush"] < 1.1 * ratio["nothing"], ratio
    finally:
        torch.set_num_threads(threads)
