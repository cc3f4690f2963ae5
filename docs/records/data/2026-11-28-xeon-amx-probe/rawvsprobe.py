import sys, glob, numpy as np
from statistics import median
from sdpa_impls.gate.points import load_points
from sdpa_impls.continuous.speeds import probe_typical, probe_scaled
d = sys.argv[1]
fs = [f for f in glob.glob(f"{d}/*-*.json") if not f.endswith("-1.json")]
runs = {f: {p.key: p for p in load_points(f)[1]} for f in fs}
allr = list(runs.values()); sc = dict(zip(runs, probe_scaled(allr, probe_typical(allr))))
for k in list(runs[fs[0]]):
    if not runs[fs[0]][k].samples: continue
    raw = np.log([median(runs[f][k].samples) for f in fs]); pr = np.log([median(sc[f][k].samples) for f in fs])
    print(f"{k[0]+'['+k[1]+']':48s} raw SD {raw.std():.3f}  probe SD {pr.std():.3f}  median sample {median(runs[fs[0]][k].samples)*1e3:8.3f} ms n={len(runs[fs[0]][k].samples)}")
