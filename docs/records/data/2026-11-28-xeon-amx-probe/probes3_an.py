import json, sys, numpy as np
rows = [json.loads(l) for l in open(sys.argv[1])]
names = list(rows[0]); M = ("raw", "cold", "warm", "warm16")
print(f"{len(rows)} processes; between-process SD of log per-process medians (per call)")
print(f"{'row':46s} " + " ".join(f"{m:>7s}" for m in M))
sd = {m: [] for m in M}
for n in names:
    v = np.log([r[n][1:] for r in rows]); s = v.std(axis=0, ddof=1)
    for m, x in zip(M, s): sd[m].append(x)
    print(f"{n:46s} " + " ".join(f"{x:7.3f}" for x in s))
long = np.array(["L1024" in n for n in names])
for m, s in sd.items():
    s = np.array(s)
    print(f"{m:6s} median {np.median(s):.4f} 80th {np.percentile(s, 80):.4f} mean {s.mean():.4f} | L1024 rows median {np.median(s[long]):.4f} | others median {np.median(s[~long]):.4f}")
