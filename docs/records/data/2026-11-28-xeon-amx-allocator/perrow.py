"""Per row: between-process SD (probe-scaled) under each launch condition.  python perrow.py KEEPDIR"""
import sys, collections
import numpy as np
from sdpa_impls.gate.points import load_points
from sdpa_impls.continuous.speeds import probe_typical, probe_scaled
d = sys.argv[1]
conds = dict(line.split() for line in open(d + ".conds"))
files = {n: {p.key: p for p in load_points(f"{d}/{n}")[1]} for n in conds}
t = probe_typical(list(files.values()))
scaled = dict(zip(files, probe_scaled(list(files.values()), t)))
by = collections.defaultdict(list)
for n, c in conds.items():
    if c != "first": by[c].append(n)
first = next(iter(files))
keys = [k for k in sorted(files[first]) if files[first][k].samples]
print(f"{'row':48s}" + "".join(f"{c:>12s}" for c in by))
for k in keys:
    cells = []
    for c, names in by.items():
        dev = []
        for role in ("base", "head"):
            m = np.log([scaled[n][k].median_s for n in names if n.startswith(role)]); dev += list(m - m.mean())
        cells.append(np.sqrt(np.sum(np.square(dev)) / (len(dev) - 2)))
    print(f"{k[0] + '[' + k[1] + ']':48s}" + "".join(f"{x:12.4f}" for x in cells))
