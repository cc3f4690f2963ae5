"""Does a process's own speed come from where its tensors sit?  One thread, CPU time, each call between two probes.
Per block: CALLS calls on the inputs made at the start (fixed), then CALLS calls on a fresh copy (fresh, made after a
random-size spacer, older copies kept alive).  Prints one JSON line: per row, per block, median(call/probe)."""
import json, random, statistics, sys, time
import torch
import sdpa_impls
from sdpa_impls.bench.check import CaseContext
from sdpa_impls.bench.grid import Case
from sdpa_impls.bench.probe import SpeedProbe
torch.set_num_threads(1)
clock = time.process_time
probe = SpeedProbe(clock)
rows = [("torch_sdpa", Case(lq=128, lk=128, e=64, dtype="fp32"), 40),
        ("naive", Case(lq=128, lk=128, e=64, dtype="bf16", causal=True), 30),
        ("fused", Case(lq=1024, lk=1024, e=64, dtype="fp32"), 8)]
BLOCKS = 10
keep, out = [], {}
def timed(f, n):
    r = []
    for _ in range(n):
        probe(); t = clock(); f(); s = clock() - t; probe()
        r.append(s / ((probe.durations[-2] + probe.durations[-1]) / 2))
    return statistics.median(r)
for name, case, calls in rows:
    impl = sdpa_impls.get(name)
    args = CaseContext(case, "cpu").inputs.args()
    fixed = impl.prepare(**args); fixed()
    res = {"fixed": [], "fresh": []}
    for b in range(BLOCKS):
        res["fixed"].append(timed(fixed, calls))
        keep.append(torch.empty(random.randint(1, 1 << 20), dtype=torch.uint8))
        copy = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in args.items()}
        keep.append(copy)
        f = impl.prepare(**copy); f()
        res["fresh"].append(timed(f, calls))
    out[name] = res
print(json.dumps(out))
