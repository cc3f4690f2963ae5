import sys, glob, numpy as np
from sdpa_impls.gate.points import load_points
from sdpa_impls.continuous.speeds import probe_typical, probe_scaled
from statistics import median
d = sys.argv[1]
fs = [f for f in glob.glob(f"{d}/*-[0-9]*.json")]
runs = {f.split('/')[-1]: {p.key: p for p in load_points(f)[1]} for f in fs}
allr = list(runs.values()); sc = dict(zip(runs, probe_scaled(allr, probe_typical(allr))))
keys = [k for k in runs[next(iter(runs))] if runs[next(iter(runs))][k].samples]
for label, sel in (("first", lambda n: n.endswith("-1.json")), ("later", lambda n: not n.endswith("-1.json"))):
    names = [n for n in runs if sel(n)]
    sds, within, nsamp = [], [], []
    for k in keys:
        v = []
        for role in ("base", "head"):
            m = np.log([median(sc[n][k].samples) for n in names if n.startswith(role)]); v += list(m - m.mean())
        sds.append(np.std(v, ddof=2) if len(v) > 2 else np.nan)
        within.append(median(np.std(np.log(sc[n][k].samples)) * 1.25 / np.sqrt(len(sc[n][k].samples)) for n in names))
        nsamp.append(median(len(sc[n][k].samples) for n in names))
    print(f"{label}: n={len(names)} between-process SD median {np.nanmedian(sds):.4f} 80pct {np.nanpercentile(sds,80):.4f}; within SE median {np.median(within):.4f}; samples median {np.median(nsamp)}")
names = [n for n in runs if not n.endswith("-1.json")]
for k in keys:
    v = np.array([median(sc[n][k].samples) for n in sorted(names)])
    print(f"{k[0]+'['+k[1]+']':50s}", "SD %.3f" % np.std(np.log(v)), "n samples", sorted(len(sc[n][k].samples) for n in names)[:3], "rel:", np.round(v / np.median(v), 2)[:12])
