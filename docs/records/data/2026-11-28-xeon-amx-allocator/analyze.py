"""Between-process SD per launch condition: python analyze.py KEEPDIR"""
import sys, math, collections
from statistics import median
import numpy as np
from sdpa_impls.gate.points import load_points
from sdpa_impls.continuous.speeds import probe_typical, probe_scaled
d = sys.argv[1]
conds = dict(line.split() for line in open(d + ".conds"))
files = {name: {p.key: p for p in load_points(f"{d}/{name}")[1]} for name in conds}
allruns = list(files.values())
t = probe_typical(allruns)
scaled = dict(zip(files, probe_scaled(allruns, t)))
bycond = collections.defaultdict(list)
for name, c in conds.items():
    bycond[c].append(name)
keys = [k for k in sorted(next(iter(files.values()))) if files[next(iter(files))][k].samples]
print("rows", len(keys))
for c, names in bycond.items():
    if c == "first": continue
    sds, raws, ses = [], [], []
    for k in keys:
        vals = {}
        for role in ("base", "head"):
            ns = [n for n in names if n.startswith(role)]
            m = np.log([scaled[n][k].median_s for n in ns]); vals[role] = m - m.mean()
            r = np.log([files[n][k].median_s for n in ns]); vals["raw" + role] = r - r.mean()
        sds.append(np.std(np.concatenate([vals["base"], vals["head"]]), ddof=2))
        raws.append(np.std(np.concatenate([vals["rawbase"], vals["rawhead"]]), ddof=2))
        ses.append(median(np.std(np.log(files[n][k].samples)) / math.sqrt(len(files[n][k].samples)) for n in names))
    print(f"{c:12s} n={len(names):2d} between(probe) median {median(sds):.4f} mean {np.mean(sds):.4f}  raw {median(raws):.4f}  within-se {median(ses):.4f}")
