"""A/A rows called slower in resampled K-round trials of one kept run.  python alarms.py DIR K"""
import random, sys, glob
from pathlib import Path
from collections import Counter
from sdpa_impls.continuous.verdict import judge
from sdpa_impls.gate.config import load_config
from sdpa_impls.gate.points import load_points
cfg = load_config(None, start=Path.cwd())  # run from an sdpa-bench checkout
d = sys.argv[1]; k = int(sys.argv[2])
n = len(glob.glob(f"{d}/base-[0-9]*.json"))
rounds = [(load_points(f"{d}/base-{i}.json")[1], load_points(f"{d}/head-{i}.json")[1]) for i in range(1, n + 1)]
rng = random.Random(1); c = Counter(); used = Counter()
for t in range(40):
    pick = rng.sample(range(n), k)
    pairs = [rounds[i] if rng.random() < 0.5 else rounds[i][::-1] for i in pick]
    rep = judge([p[0] for p in pairs], [p[1] for p in pairs], cfg)
    bad = [r for r in rep.rows if r.decision == "slower"]
    for r in bad:
        c[r.label] += 1; print(t, sorted(pick), r.label, round(r.ratio, 3), [round(x, 3) for x in r.interval])
print(c)
