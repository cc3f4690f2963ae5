import json, sys, numpy as np, collections
rows = [json.loads(l) for l in open(sys.argv[1])]
by = collections.defaultdict(list)
for r in rows: by[r["k"]].append(r["v"])
names = list(rows[0]["v"])
print(f"{'row':48s}" + "".join(f"  K={k:<5d}" for k in sorted(by)))
sd = {k: [] for k in by}
for n in names:
    line = f"{n:48s}"
    for k in sorted(by):
        v = np.log([x[n] for x in by[k]]); s = v.std(ddof=1); sd[k].append(s); line += f"  {s:.4f} "
    print(line)
for k in sorted(by):
    a = np.array(sd[k]); print(f"K={k} n={len(by[k])} median SD {np.median(a):.4f} mean {a.mean():.4f} 80th pct {np.percentile(a,80):.4f}")
