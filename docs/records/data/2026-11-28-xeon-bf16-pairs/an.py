import json, sys, math, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1])]
modes = sorted({r["mode"] for r in rows})
for k in rows[0]["r"]:
    line = [f"{k:18s}"]
    for m in modes:
        xs = [math.log(r["r"][k]) for r in rows if r["mode"] == m]
        line.append(f"{m}: n={len(xs)} sd={st.stdev(xs):.4f} med={math.exp(st.median(xs))*1e3:.3f}ms")
    print("  ".join(line))
