"""One side in its own process (as continuous runs a side): the package from PATH; naive rows; one JSON line."""
import json, statistics, sys, time
sys.path.insert(0, sys.argv[1])
import torch
import sdpa_impls
assert sdpa_impls.__file__.startswith(sys.argv[1])
from sdpa_impls.bench.check import CaseContext
from sdpa_impls.bench.grid import Case
torch.set_num_threads(1)
clock = time.process_time
rows = [("naive", dict(lq=1024, lk=1024, e=64, dtype="fp32"), 12),
        ("naive", dict(lq=128, lk=128, e=64, dtype="fp32"), 120)]
out = {}
for name, kw, calls in rows:
    f = sdpa_impls.get(name).prepare(**CaseContext(Case(**kw), "cpu").inputs.args()); f(); f()
    t = []
    for _ in range(calls):
        c = clock(); f(); t.append(clock() - c)
    out[f"{name}-L{kw['lq']}"] = statistics.median(t)
print(json.dumps(out))
