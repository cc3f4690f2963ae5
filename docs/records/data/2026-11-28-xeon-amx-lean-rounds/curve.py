"""Decided share of A/A rows vs rounds a side, resampled from kept runs (each round keeps its pair of processes)."""
import dataclasses as dc, glob, random, sys, json
from pathlib import Path
from statistics import median
from sdpa_impls.continuous.verdict import judge
from sdpa_impls.gate.config import load_config
from sdpa_impls.gate.points import load_points
cfg = load_config(None, start=Path.cwd())  # run from an sdpa-bench checkout
def rounds_of(d):
    n = len(glob.glob(f"{d}/base-[0-9]*.json"))
    return [(load_points(f"{d}/base-{i}.json")[1], load_points(f"{d}/head-{i}.json")[1]) for i in range(1, n + 1)]
trials = int(sys.argv[1])
for d in sys.argv[2:]:
    rounds = rounds_of(d); rng = random.Random(1)
    for k in sorted({4, 6, 8, len(rounds)}):
        if k > len(rounds): continue
        shares, alarms, widths = [], 0, []
        for t in range(trials if k < len(rounds) else 1):
            pick = rng.sample(range(len(rounds)), k) if k < len(rounds) else range(k)
            pairs = [rounds[i] if (k == len(rounds) or rng.random() < 0.5) else rounds[i][::-1] for i in pick]
            rep = judge([p[0] for p in pairs], [p[1] for p in pairs], cfg)
            timed = [r for r in rep.rows if r.decision is not None and r.impl != cfg.time_reference]
            shares.append(sum(r.decision != "undecided" for r in timed) / len(timed))
            alarms += any(r.decision == "slower" for r in timed)
            widths.append(median(r.interval[1] / r.interval[0] for r in timed))
        print(f"{d} {k} rounds: decided {sum(shares)/len(shares):.2f}, trials with a row called slower {alarms}/{len(shares)}, median width {median(widths):.3f}", flush=True)
