"""Per-row spread of an A/A run's processes: between processes (SD of log per-process medians, raw and divided by the
speed probe), paired by round, and within a process (SE of the log median).  python decomp.py DIR [DIR ...]"""
import glob, sys, math
from statistics import median, pstdev
import numpy as np
from sdpa_impls.gate.points import load_points
from sdpa_impls.continuous.speeds import probe_typical, probe_scaled
for d in sys.argv[1:]:
    n = len(glob.glob(f"{d}/base-[0-9]*.json"))
    base = [{p.key: p for p in load_points(f"{d}/base-{i}.json")[1]} for i in range(1, n+1)]
    head = [{p.key: p for p in load_points(f"{d}/head-{i}.json")[1]} for i in range(1, n+1)]
    t = probe_typical(base+head)
    sb, sh = probe_scaled(base, t), probe_scaled(head, t)
    print(d)
    rows=[]
    for key in sorted(base[0]):
        if not base[0][key].samples: continue
        bm = np.log([r[key].median_s for r in sb]); hm = np.log([r[key].median_s for r in sh])
        between = np.std(np.concatenate([bm-bm.mean(), hm-hm.mean()]), ddof=2)
        within = median([np.std(np.log(r[key].samples))/math.sqrt(len(r[key].samples)) for r in sb+sh])
        paired = np.std(hm-bm, ddof=1)/math.sqrt(2)
        nsamp = median(len(r[key].samples) for r in sb)
        # raw (unscaled) between
        rbm = np.log([r[key].median_s for r in base]); rhm=np.log([r[key].median_s for r in head])
        rawb = np.std(np.concatenate([rbm-rbm.mean(), rhm-rhm.mean()]), ddof=2)
        rows.append((key, nsamp, rawb, between, paired, within))
        print(f"  {key[0]:14s} {key[1]:32s} n={nsamp:4.0f} raw-between {rawb:.3f} probe-between {between:.3f} paired/sqrt2 {paired:.3f} within-se {within:.4f}")
    print("  median: between %.3f paired %.3f within %.4f" % (median(r[3] for r in rows), median(r[4] for r in rows), median(r[5] for r in rows)))
