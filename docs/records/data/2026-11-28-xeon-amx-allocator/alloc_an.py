import json, sys, collections, numpy as np
by = collections.defaultdict(list)
for line in open(sys.argv[1]):
    cond, js = line.split(" ", 1); by[cond].append(json.loads(js))
rows = list(next(iter(by.values()))[0])
print(f"{'row':22s}" + "".join(f"{c:>28s}" for c in by))
for r in rows:
    cells = []
    for c, runs in by.items():
        m = np.log([x[r][0] for x in runs]); flt = np.median([x[r][1] for x in runs])
        cells.append(f"SD {np.std(m, ddof=1):.3f} med {np.exp(np.median(m)):7.2f} flt {flt:6.0f}")
    print(f"{r:22s}" + "".join(f"{x:>28s}" for x in cells))
