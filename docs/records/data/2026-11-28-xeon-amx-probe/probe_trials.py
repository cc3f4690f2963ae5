"""For kept A/A comparisons: the whole run's verdict (rows decided), the between-process spread of each row after the
probe (later processes; median and 80th percentile over rows), and resampled trials of K of its rounds judged by the
project's verdict, as they are (A/A) and with every head sample ×(1 + PLANT).  python probe_trials.py K TRIALS PLANT DIR..."""
import sys, glob, json, random, collections
from dataclasses import replace
from pathlib import Path
from statistics import median
import numpy as np
from sdpa_impls.continuous.verdict import judge
from sdpa_impls.continuous.speeds import probe_typical, probe_scaled
from sdpa_impls.gate.config import load_config
from sdpa_impls.gate.points import load_points
cfg = load_config(None, start=Path.cwd())
k, n_trials, plant = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
def slowed(run, f):
    return [replace(p, samples=tuple(s * f for s in p.samples), median_s=(p.median_s or 0) * f) if p.samples else p
            for p in run]
def share(rep):
    rows = [r for r in rep.rows if r.decision and r.impl != cfg.time_reference]
    return rows, sum(r.decision != "undecided" for r in rows) / len(rows)
for d in sys.argv[4:]:
    n = len(glob.glob(f"{d}/base-[0-9]*.json"))
    rounds = [(load_points(f"{d}/base-{i}.json")[1], load_points(f"{d}/head-{i}.json")[1]) for i in range(1, n + 1)]
    runs = [{p.key: p for p in r} for pair in rounds[1:] for r in pair]
    typ = probe_typical(runs)
    sc = probe_scaled(runs, typ) if typ else runs
    sds = []
    for key in [x for x in runs[0] if runs[0][x].samples]:
        v = []
        for side in (0, 1):
            m = np.log([sc[i][key].median_s for i in range(side, len(sc), 2)]); v += list(m - m.mean())
        sds.append(np.std(v, ddof=2))
    whole = judge([r[0] for r in rounds], [r[1] for r in rounds], cfg)
    _, whole_share = share(whole)
    rng = random.Random(11); c = collections.Counter()
    for t in range(n_trials):
        pick = rng.sample(range(n), k)
        pairs = [rounds[i] if rng.random() < 0.5 else rounds[i][::-1] for i in pick]
        for label, f in (("aa", 1.0), ("plant", 1 + plant)):
            rows, s = share(judge([p[0] for p in pairs], [slowed(p[1], f) for p in pairs], cfg))
            c[label + " decided"] += s
            c[label + " slower"] += sum(r.decision == "slower" for r in rows) / len(rows)
            c[label + " trials with a slower row"] += any(r.decision == "slower" for r in rows)
    probe = runs[0][next(iter(runs[0]))].probe_work
    print(f"{d}: probe '{probe}'; {n} rounds; the whole run decided {whole_share:.2f} of rows; spread after the probe "
          f"median {np.median(sds):.4f}, 80th {np.percentile(sds, 80):.4f}; {n_trials} trials of {k} rounds: "
          f"A/A decided {c['aa decided'] / n_trials:.3f}, trials with a row called slower {c['aa trials with a slower row']}; "
          f"+{plant:.0%} caught {c['plant slower'] / n_trials:.3f} of rows")
    sys.stdout.flush()
