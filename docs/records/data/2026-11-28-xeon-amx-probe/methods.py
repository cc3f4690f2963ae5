"""Between-process SD (log, per side centred) of each row's process median under ways of dividing out the speed."""
import sys, glob, numpy as np
from statistics import median
from dataclasses import replace
from sdpa_impls.gate.points import load_points
from sdpa_impls.continuous.speeds import probe_typical, probe_scaled
def load(d):
    fs = sorted(f for f in glob.glob(f"{d}/*-*.json") if not f.endswith("-1.json") and '-a' not in f)
    return fs, [{p.key: p for p in load_points(f)[1]} for f in fs]
def method(runs, typ, how, thr=None):
    out = []
    for run in runs:
        new = {}
        for k, p in run.items():
            if not p.samples: continue
            if how == "raw": s = p.samples
            elif how == "proc": m = median(p.probe_s); s = tuple(x * typ / m for x in p.samples)
            else:
                ps = tuple(x * typ / ((p.probe_s[i] + p.probe_s[i + 1]) / 2) for i, x in enumerate(p.samples))
                s = ps if (how == "sample" or median(p.samples) < thr) else tuple(x * typ / median(p.probe_s) for x in p.samples)
            new[k] = median(s)
        out.append(new)
    return out
for d in sys.argv[1:]:
    fs, runs = load(d); typ = probe_typical(runs)
    roles = [f.split('/')[-1].split('-')[0] for f in fs]
    keys = [k for k in runs[0] if runs[0][k].samples]
    res = {}
    for name, how, thr in [("raw", "raw", None), ("per sample", "sample", None), ("per process", "proc", None),
                           ("sample<0.3ms", "hyb", 3e-4), ("sample<1ms", "hyb", 1e-3), ("sample<3ms", "hyb", 3e-3)]:
        m = method(runs, typ, how, thr); sds = []
        for k in keys:
            v = []
            for r in set(roles):
                x = np.log([mm[k] for mm, rr in zip(m, roles) if rr == r]); v += list(x - x.mean())
            sds.append(np.std(v, ddof=2))
        res[name] = sds
    print(f"{d} ({len(fs)} later processes, {len(keys)} rows)")
    for n, s in res.items():
        print(f"   {n:14s} median {np.median(s):.4f}  80th {np.percentile(s, 80):.4f}  mean {np.mean(s):.4f}")
print("--- fitted power of the probe per row (pooled samples, per-side centred)")
for d in sys.argv[1:]:
    fs, runs = load(d); typ = probe_typical(runs)
    roles = [f.split('/')[-1].split('-')[0] for f in fs]
    keys = [k for k in runs[0] if runs[0][k].samples]
    sds, sds1, betas = [], [], []
    for k in keys:
        xs, ys = [], []
        for run, r in zip(runs, roles):
            p = run[k]
            pm = np.log([(p.probe_s[i] + p.probe_s[i + 1]) / 2 / typ for i in range(len(p.samples))])
            xs.append(pm); ys.append(np.log(p.samples))
        # centre per side
        def centred(vals):
            out = []
            for r in set(roles):
                cat = np.concatenate([v for v, rr in zip(vals, roles) if rr == r]); mu = cat.mean()
                out += [(v - mu, rr) for v, rr in zip(vals, roles) if rr == r]
            return np.concatenate([o for o, _ in out])
        X, Y = centred(xs), centred(ys)
        beta = float(np.clip((X @ Y) / (X @ X), 0, 1.5)); betas.append(beta)
        v = []
        for r in set(roles):
            m = np.array([np.median(y - beta * x) for y, x, rr in zip(ys, xs, roles) if rr == r]); v += list(m - m.mean())
        sds.append(np.std(v, ddof=2))
    print(f"{d}: fitted beta median {np.median(betas):.2f} (min {min(betas):.2f}); SD median {np.median(sds):.4f} 80th {np.percentile(sds, 80):.4f} mean {np.mean(sds):.4f}")
