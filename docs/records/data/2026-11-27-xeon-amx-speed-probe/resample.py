"""Resampled trials from `continuous HEAD HEAD --rounds 8 --adaptive-budget 0 --keep-runs DIR` runs: each trial takes
4 of a run's 8 rounds (each round keeps its two processes, measured one after the other) and, per round, draws which
of the two is base. The trial is judged with continuous.verdict.judge twice: with the speed probe, and with one
speed factor per run (the probe switched off). It is judged again with head's samples multiplied by a planted
factor on every row but the time reference.

    python resample.py TRIALS DIR [DIR ...]      # run from an sdpa-bench checkout, its test environment active
"""
import dataclasses as dc
import glob
import random
import sys
from pathlib import Path
from statistics import median

from sdpa_impls.continuous.verdict import judge
from sdpa_impls.gate.config import load_config
from sdpa_impls.gate.points import load_points

cfg = load_config(None, start=Path.cwd())  # this checkout's pyproject: torch_sdpa the time reference, the 3 % floor
_rounds: dict[str, list] = {}


def rounds_of(d: str) -> list:
    if d not in _rounds:
        n = len(glob.glob(f"{d}/base-[0-9]*.json"))
        _rounds[d] = [(load_points(f"{d}/base-{i}.json")[1], load_points(f"{d}/head-{i}.json")[1])
                      for i in range(1, n + 1)]
    return _rounds[d]


def planted(runs: list, factor: float) -> list:
    return [[dc.replace(p, samples=tuple(s * factor for s in p.samples), median_s=p.median_s * factor)
             if p.impl != cfg.time_reference else p for p in r] for r in runs]


def main() -> None:
    trials, dirs = int(sys.argv[1]), sys.argv[2:]
    rng = random.Random(1)
    for probe in (False, True):
        config = dc.replace(cfg, speed_probe=probe)
        for factor in (1.0, 1.05, 1.10):
            decided = total = slower = alarms = 0
            shares = []
            for t in range(trials):
                rounds = rounds_of(dirs[t % len(dirs)])
                pairs = [rounds[i] if rng.random() < 0.5 else rounds[i][::-1] for i in rng.sample(range(len(rounds)), 4)]
                report = judge([p[0] for p in pairs], planted([p[1] for p in pairs], factor), config)
                timed = [r for r in report.rows if r.decision is not None and r.impl != cfg.time_reference]
                n_decided = sum(r.decision != "undecided" for r in timed)
                n_slower = sum(r.decision == "slower" for r in timed)
                shares.append(n_decided / len(timed))
                decided, total, slower = decided + n_decided, total + len(timed), slower + n_slower
                if factor == 1.0 and n_slower:
                    alarms += 1
                    print("  A/A row called slower:", [(r.label, round(r.ratio, 3), tuple(round(x, 3) for x in r.interval))
                                                      for r in timed if r.decision == "slower"])
            print(f"{'probe' if probe else 'per run'} x{factor}: rows decided {decided / total:.2f} (median trial "
                  f"{median(shares):.2f}), rows called slower {slower / total:.2f}"
                  + (f", A/A trials with a row called slower {alarms}/{trials}" if factor == 1.0 else ""), flush=True)


if __name__ == "__main__":
    main()
