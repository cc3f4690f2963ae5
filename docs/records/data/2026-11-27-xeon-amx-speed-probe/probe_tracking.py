"""Does the suite's speed probe (bench.probe), timed right before and after each call, track the machine's speed?

    OMP_NUM_THREADS=1 python probe_tracking.py L SECONDS

One process, one thread, process CPU time: torch_sdpa, naive and fused (fp32, L x L, E 64, H 8) called in turn for
SECONDS, each call between two probes. Prints, per implementation, the 5-95 % spread of the medians of blocks of
10 and 50 consecutive calls over their median: raw, and each call divided by the mean of its two probes."""
import statistics, sys, time
import torch
import sdpa_impls
from sdpa_impls.bench.check import CaseContext
from sdpa_impls.bench.grid import Case
from sdpa_impls.bench.probe import WORK, SpeedProbe

torch.set_num_threads(1)
clock = time.process_time
n = int(sys.argv[1])
case = Case(lq=n, lk=n, e=64, dtype="fp32")
fns = {name: sdpa_impls.get(name).prepare(**CaseContext(case, "cpu").inputs.args())
       for name in ("torch_sdpa", "naive", "fused")}
probe = SpeedProbe(clock)
for f in fns.values():
    f()
rec = {name: ([], []) for name in fns}
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    for name, f in fns.items():
        probe()
        t = clock(); f(); s = clock() - t
        probe()
        rec[name][0].append(s)
        rec[name][1].append((probe.durations[-2] + probe.durations[-1]) / 2)


def spread(x):
    q = statistics.quantiles(x, n=20)
    return (q[-1] - q[0]) / statistics.median(x)


print(f"L {n}, probe {WORK}, median probe {statistics.median(probe.durations) * 1e6:.1f} us")
for name, (s, c) in rec.items():
    scaled = [a / b for a, b in zip(s, c)]
    line = [f"{name:10s} {len(s)} calls, median {statistics.median(s) * 1e3:.3f} ms"]
    for size in (10, 50):
        raw = [statistics.median(s[i:i + size]) for i in range(0, len(s) - size + 1, size)]
        fixed = [statistics.median(scaled[i:i + size]) for i in range(0, len(s) - size + 1, size)]
        line.append(f"blocks of {size}: raw {spread(raw):.3f}, probe-scaled {spread(fixed):.3f}")
    print("; ".join(line))
