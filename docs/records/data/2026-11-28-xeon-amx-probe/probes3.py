"""One process: the ci rows, 0.1 s (at least 8 samples) each, one thread, CPU time. After every sample (and before the
first) three probes in turn: cold (2 GEMMs timed right after the sample, the suite's probe until now), warm (the same
after 3 untimed GEMMs) and warm16 (16 timings of 2 GEMMs after the same warm-up, their mean). Prints one JSON line:
row -> [calls per sample, per-call median as measured, scaled by cold, by warm, by warm16]."""
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
    cold = timed2()
    torch.mm(a, b, out=o)  # with the 2 timed ones: 3 before the next clock
    warm = timed2()
    w16 = sum(timed2() for _ in range(16)) / 16
    return cold, warm, w16
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
            s.append((clock() - t) / n); p.append(probes())
        res = [n, statistics.median(s)]
        for j in range(3):
            res.append(statistics.median(x / ((p[i][j] + p[i + 1][j]) / 2) for i, x in enumerate(s)))
        out[f"{impl}[{case.id}]"] = res
print(json.dumps(out))
