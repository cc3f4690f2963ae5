"""One process: per row, the median CPU time of a call, one thread; prints one JSON line."""
import json, statistics, sys, time
import torch
import sdpa_impls
from sdpa_impls.bench.check import CaseContext
from sdpa_impls.bench.grid import Case
from sdpa_impls.bench import allocator
torch.set_num_threads(1)
clock = time.process_time
rows = [("naive", Case(lq=128, lk=128, e=64, dtype="fp32"), 80),
        ("chunked", Case(lq=128, lk=128, e=64, dtype="fp32"), 80),
        ("torch_sdpa", Case(lq=1024, lk=1024, e=64, dtype="fp32"), 20),
        ("naive", Case(lq=1024, lk=1024, e=64, dtype="fp32"), 10),
        ("fused", Case(lq=1024, lk=1024, e=64, dtype="fp32"), 10)]
out = {}
for name, case, calls in rows:
    args = CaseContext(case, "cpu").inputs.args()
    f = sdpa_impls.get(name).prepare(**args); f(); f()
    t = []
    for _ in range(calls):
        c = clock(); f(); t.append(clock() - c)
    out[f"{name}-L{case.lq}"] = statistics.median(t)
print(json.dumps(out))
