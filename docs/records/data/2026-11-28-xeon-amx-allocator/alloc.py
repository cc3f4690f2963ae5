"""One process: per row, the median of call/probe over CALLS calls (one thread, CPU time), and the process's
minor page faults per call.  Prints one JSON line."""
import json, resource, statistics, sys, time
import torch
import sdpa_impls
from sdpa_impls.bench.check import CaseContext
from sdpa_impls.bench.grid import Case
from sdpa_impls.bench.probe import SpeedProbe
torch.set_num_threads(1)
clock = time.process_time
probe = SpeedProbe(clock)
rows = [("naive", Case(lq=128, lk=128, e=64, dtype="bf16", causal=True), 300),
        ("naive", Case(lq=128, lk=128, e=64, dtype="fp32"), 300),
        ("chunked", Case(lq=128, lk=128, e=64, dtype="fp32"), 300),
        ("fused", Case(lq=128, lk=128, e=64, dtype="fp32"), 300),
        ("naive", Case(lq=1024, lk=1024, e=64, dtype="fp32"), 15),
        ("fused", Case(lq=1024, lk=1024, e=64, dtype="fp32"), 15)]
out = {}
for name, case, calls in rows:
    f = sdpa_impls.get(name).prepare(**CaseContext(case, "cpu").inputs.args()); f()
    r = []
    flt = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(calls):
        probe(); t = clock(); f(); s = clock() - t; probe()
        r.append(s / ((probe.durations[-2] + probe.durations[-1]) / 2))
    out[f"{name}[{case.lq}-{case.dtype}{'-causal' if case.causal else ''}]"] = [
        statistics.median(r), (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - flt) / calls]
print(json.dumps(out))
