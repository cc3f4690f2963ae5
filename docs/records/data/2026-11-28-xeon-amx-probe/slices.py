"""One process: time the ci rows with 0.1 s of samples each, either in one contiguous window per row (contig) or in
K passes over all rows of 0.1/K s each (sliced K). Prints one JSON line: row -> process median of sample/probe."""
import json, statistics, sys, time
import torch
torch.set_num_threads(1)
from sdpa_impls.bench.check import CaseContext
from sdpa_impls.bench.grid import preset
from sdpa_impls.bench.measure import prepare_point
from sdpa_impls.bench.probe import SpeedProbe
from sdpa_impls.bench.timing import calls_per_sample
clock = time.process_time
K = int(sys.argv[1]); BUDGET = 0.1; MIN = 8
probe = SpeedProbe(clock)
rows = []
for case in preset("ci"):
    ctx = CaseContext(case, "cpu")
    for impl in ("torch_sdpa", "naive", "chunked", "fused"):
        p = prepare_point(impl, ctx, check=False)
        rows.append((f"{impl}[{case.id}]", p.fn, ctx))
vals = {name: [] for name, _, _ in rows}
calls = {}
def window(name, fn, budget, mins):
    fn()  # warm-up
    if name not in calls:
        calls[name] = calls_per_sample(fn, "cpu")
    n = calls[name]
    probe(); spent = 0.0; k = 0
    while k < mins or spent < budget:
        t = clock()
        for _ in range(n): fn()
        s = clock() - t; spent += s; k += 1
        probe()
        vals[name].append(s / n / ((probe.durations[-2] + probe.durations[-1]) / 2))
for p in range(K):
    for name, fn, _ in rows:
        window(name, fn, BUDGET / K, max(1, MIN // K))
print(json.dumps({n: statistics.median(v) for n, v in vals.items()}))
