"""Rounds that time both sides in one process (continuous.pairs, continuous.pair_process): the interval that keeps a
round's two sides together, the verdict that compares only those rounds, and a real process that imports two trees
of the package and times them in turn.

The process test measures for real (two copies of `naive`, one of them planted twice as slow by spinning on its own
CPU time), so it asserts only what a planted change that large shows on any CPU, a busy one too: the slower copy reads
slower. A 30 % plant read 1.11 once on a shared CI machine, whose CPU time per call drifted ±25 % within a round.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import sdpa_impls
from sdpa_impls.continuous.pairs import PairUnavailable, paired_round, unpairable
from sdpa_impls.continuous.sides import Side
from sdpa_impls.continuous.verdict import NOT_SLOWER, SLOWER, UNDECIDED, judge
from sdpa_impls.gate.config import config_from_dict
from sdpa_impls.gate.interval import ratio_interval
from sdpa_impls.gate.points import Point

CASE = "L128-E64-fp32-fwd"
CONFIG = config_from_dict({"time_reference": "torch_sdpa", "continuous_time": "median:3%", "alpha": 0.01}, "test")
PLANT = """

import time as _planted_time

_planted_forward = Naive.forward


def _planted(self, inp):
    start = _planted_time.process_time()
    out = _planted_forward(self, inp)
    spent = _planted_time.process_time() - start
    while _planted_time.process_time() - start < spent * 2.0:
        pass
    return out


Naive.forward = _planted
"""


def _rounds(lives: np.ndarray, ratio: float, rng: np.random.Generator) -> tuple[list[list[float]], list[list[float]]]:
    """Each round's samples of both sides: the round's process speed `lives[i]` on both, head `ratio` slower."""
    base = [list(life * (1 + 0.003 * rng.standard_normal(40))) for life in lives]
    head = [list(ratio * life * (1 + 0.003 * rng.standard_normal(40))) for life in lives]
    return base, head


def test_the_paired_interval_cancels_what_a_round_shares() -> None:
    """Rounds whose process speeds spread 5 %: apart, an A/A interval reaches past a 3 % floor; kept together, it
    lies within 1 % of 1, and a 5 % change clears the floor."""
    rng = np.random.default_rng(3)
    lives = 1 + 0.05 * rng.standard_normal(5)
    base, head = _rounds(lives, 1.0, rng)
    apart = ratio_interval(base, head[::-1])  # as unpaired: which process met which is unknown
    together = ratio_interval(base, head, paired=True)
    assert apart[1] > 1.03 and apart[1] - apart[0] > 0.05, apart
    assert 0.99 < together[0] <= together[1] < 1.01, together
    base, head = _rounds(lives, 1.05, rng)
    low, high = ratio_interval(base, head, paired=True)
    assert 1.03 < low < 1.05 < high < 1.07, (low, high)
    with pytest.raises(ValueError, match="as many on each side"):
        ratio_interval(base, head[:-1], paired=True)


def _run(impl_levels: dict[str, float], rng: np.random.Generator) -> list[Point]:
    out = []
    for impl, level in impl_levels.items():
        samples = tuple(float(s) for s in level * (1 + 0.003 * rng.standard_normal(30)))
        out.append(Point(impl, CASE, float(np.median(samples)), samples, 1000, 0.0, 1e-3,
                         name=f"test_sdpa[{impl}-{CASE}]"))
    return out


def test_the_verdict_compares_the_paired_rounds_only() -> None:
    """A first round of separate processes with head's naive 25 % slow (a slow process), then four paired rounds of
    equal sides whose speeds spread 6 %: judged as paired, not slower on those four rounds; judged as runs apart,
    the first round's process and the spread leave it undecided."""
    rng = np.random.default_rng(5)
    lives = 1 + 0.06 * rng.standard_normal(4)
    base = [_run({"torch_sdpa": 1.0, "naive": 1.0}, rng)] + [_run({"torch_sdpa": 1.0, "naive": life}, rng)
                                                              for life in lives]
    head = [_run({"torch_sdpa": 1.0, "naive": 1.25}, rng)] + [_run({"torch_sdpa": 1.0, "naive": life}, rng)
                                                               for life in lives]
    report = judge(base, head, CONFIG, paired_from=1)
    row = next(r for r in report.rows if r.impl == "naive")
    assert row.decision == NOT_SLOWER and len(row.paired) == 4 and row.unit == ""
    assert len(row.base) == len(row.head) == 5  # memory and correctness still see every run
    check = next(c for c in row.checks if c.kind == "time")
    assert "of 4 rounds" in check.message and "as measured" in check.message
    assert any("each later one a process timing base and head in turn" in n for n in report.notes)
    from sdpa_impls.continuous.render import render  # its runs column counts the rounds compared, not the check's
    line = next(t for t in render(report, "base", "head").splitlines() if t.startswith(f"naive[{CASE}]"))
    assert " 4+4 " in line and " 5+5 " not in line, line
    apart = next(r for r in judge(base, head, CONFIG).rows if r.impl == "naive")
    assert apart.decision == UNDECIDED and not apart.paired


def test_a_change_in_every_paired_round_is_slower_and_one_round_alone_is_not() -> None:
    """Head 8 % slower in each of five paired rounds: slower. Head equal but one round 40 % slow: the interval with
    that round left out does not clear the floor, so it is not taken."""
    rng = np.random.default_rng(7)
    lives = 1 + 0.05 * rng.standard_normal(5)
    base = [_run({"naive": life}, rng) for life in lives]
    head = [_run({"naive": 1.08 * life}, rng) for life in lives]
    row = judge([base[0], *base], [head[0], *head], CONFIG, paired_from=1).rows[0]
    assert row.decision == SLOWER and row.without_one is not None and row.without_one > 1.03
    one = [_run({"naive": life * (1.4 if i == 2 else 1.0)}, rng) for i, life in enumerate(lives)]
    row = judge([base[0], *base], [one[0], *one], CONFIG, paired_from=1).rows[0]
    assert row.decision != SLOWER


def _site(tmp: Path, name: str, plant: bool) -> Path:
    site = tmp / name
    shutil.copytree(Path(sdpa_impls.__file__).parent, site / "sdpa_impls",
                    ignore=shutil.ignore_patterns("__pycache__"))
    if plant:
        with open(site / "sdpa_impls" / "impls" / "naive.py", "a", encoding="utf-8") as f:
            f.write(PLANT)
    return site


def _template(path: Path) -> Path:
    bench = {"name": f"test_sdpa[naive-{CASE}]", "fullname": f"test_sdpa[naive-{CASE}]", "group": CASE,
             "stats": {"data": [1e-3], "median": 1e-3},
             "extra_info": {"impl": "naive", "case": CASE, "preset": "ci", "peak_memory_bytes": 123, "max_error": 0.0,
                            "tflops": 1.5,
                            "error_tolerance": 1e-3, "kernels": ["aten::bmm"]}}
    path.write_text(json.dumps({"machine_info": {"sdpa_bench": {"cpu": "test"}}, "benchmarks": [bench]}))
    return path


def test_one_process_times_both_trees_in_turn(tmp_path: Path) -> None:
    """Two trees of the package, head's naive planted twice as slow, imported into one process: each side's file
    holds its own code's samples (head reads slower, round by round and in the median), probes beside them, and no
    checks, memory or kernels."""
    base = Side("base", "b", None, _site(tmp_path, "b", False), sys.executable)
    head = Side("head", "h", None, _site(tmp_path, "h", True), sys.executable)
    template = _template(tmp_path / "t.json")
    b, h = paired_round(base, head, (template, template), [], "head", tmp_path, "2", max_time=0.2, min_rounds=8,
                        timeout=300)
    assert [p.label for p in b] == [p.label for p in h] == [f"naive[{CASE}]"]
    bp, hp = b[0], h[0]
    assert len(bp.samples) == len(hp.samples) >= 8 and len(bp.probe_s) == len(bp.samples) + 1
    assert bp.peak_memory_bytes is None and bp.max_error is None and bp.kernels == ()
    per_round = sorted(x / y for x, y in zip(hp.samples, bp.samples))  # a round's two sides sampled back to back
    assert per_round[len(per_round) // 2] > 1.3 and hp.median_s / bp.median_s > 1.3, (per_round, hp.median_s,
                                                                                          bp.median_s)
    doc = json.loads((tmp_path / "head-2.json").read_text())
    extra = doc["benchmarks"][0]["extra_info"]
    assert extra["paired"] is True and doc["machine_info"]["sdpa_bench"]["cpu"] == "test"
    assert extra["tflops"] is None and extra["calls_per_sample"] >= 1  # nothing derived from the template's time


def test_a_tree_that_cannot_be_paired_is_refused_with_its_reason(tmp_path: Path) -> None:
    base = Side("base", "b", None, _site(tmp_path, "b", False), sys.executable)
    old = tmp_path / "old" / "sdpa_impls"
    old.mkdir(parents=True)
    (old / "__init__.py").write_text("")  # a package with none of what the pairing calls
    head = Side("head", "h", None, old.parent, sys.executable)
    template = _template(tmp_path / "t.json")
    with pytest.raises(PairUnavailable, match="cannot be paired"):
        paired_round(base, head, (template, template), [], "base", tmp_path, "2", 0.05, 8, 300)


def test_sides_that_cannot_share_a_process_say_why(tmp_path: Path) -> None:
    one = Side("base", "b", None, tmp_path, sys.executable)
    assert unpairable(one, Side("head", "h", None, tmp_path, sys.executable), cpu=True) is None
    assert "CUDA" in unpairable(one, one, cpu=False)
    assert "different environments" in unpairable(one, Side("head", "h", None, tmp_path, "/other/python"), True)
    assert "not in its package" in unpairable(one, Side("head", "h", None, tmp_path, sys.executable,
                                                         packaged=False), True)
