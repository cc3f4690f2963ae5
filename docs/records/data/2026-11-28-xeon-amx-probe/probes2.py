"""One process: the ci rows, 0.1 s (at least 8 samples) each, one thread, CPU time; around every sample both probes:
cold (2 GEMMs timed right after the sample, as the suite did) and warm (the same 2 GEMMs timed after 1 more untimed
one, so 3 before the clock starts, as the suite's probe now does). Prints one JSON line: row -> per-process median of
the sample as measured, scaled by the cold probes, scaled by the warm probes."""
import json, statistics, sys, time
import torch
torch.set_num_threads(1)
from sdpa_impls.bench.check import CaseContext
from sdpa_impls.bench.grid import preset
from sdpa_impls.bench.measure import prepare_point
from sdpa_impls.bench.timing import calls_per_sample
clock = time.process_time
a = torch.full((64, 64), 0.5); b = torch.full((64, 256), 0.25); o = torch.empty(64, 256); torch.mm(a, b, out=o)
def timed2():
    t = clock(); torch.mm(a, b, out=o); torch.mm(a, b, out=o); return clock() - t
def probes():
    cold = timed2(); torch.mm(a, b, out=o); warm = timed2(); return cold, warm
out = {}
for case in preset("ci"):
    ctx = CaseContext(case, "cpu")
    for impl in ("torch_sdpa", "naive", "chunked", "fused"):
        fn = prepare_point(impl, ctx, check=False).fn
        fn(); n = calls_per_sample(fn, "cpu"); fn()
        p = [probes()]; s = []
        while len(s) < 8 or sum(s) < 0.1:
            t = clock()
            for _ in range(n): fn()
            s.append(clock() - t); p.append(probes())
        raw = statistics.median(s)
        cold = statistics.median(x / ((p[i][0] + p[i + 1][0]) / 2) for i, x in enumerate(s))
        warm = statistics.median(x / ((p[i][1] + p[i + 1][1]) / 2) for i, x in enumerate(s))
        out[f"{impl}[{case.id}]"] = [raw, cold, warm, statistics.median(q[0] for q in p[1:]), statistics.median(q[1] for q in p[1:])]
print(json.dumps(out))
