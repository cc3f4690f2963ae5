"""One side in its own process: on each request line "row k", one untimed call, then k timed calls of the row."""
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
if os.environ.get("TWIN_PIN"):
    os.sched_setaffinity(0, {int(os.environ["TWIN_PIN"])})
import torch
import sdpa_impls
assert sdpa_impls.__file__.startswith(sys.argv[1])
from sdpa_impls.bench.check import CaseContext
from sdpa_impls.bench.grid import Case
torch.set_num_threads(1)
rows = json.loads(sys.argv[2])
fs = []
for name, kw, calls in rows:
    f = sdpa_impls.get(name).prepare(**CaseContext(Case(**kw), "cpu").inputs.args()); f(); f()
    fs.append(f)
clock = time.process_time
print("ready", flush=True)
for line in sys.stdin:
    r, k = map(int, line.split())
    f = fs[r]
    f()
    ts = []
    for _ in range(k):
        c = clock(); f(); ts.append(clock() - c)
    print(json.dumps(ts), flush=True)
