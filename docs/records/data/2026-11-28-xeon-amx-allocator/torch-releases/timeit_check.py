"""The release bisect's answer checked with Python's own timeit, not sdpa-bench's timing code: chunked (and torch's
SDPA, for comparison) at L 128, E 64, fp32, boolean mask, forward; one thread, process CPU time, 30 repeats of 200
calls; prints the torch version and the median per-call time of each, in microseconds.
    OMP_NUM_THREADS=1 PYTHONPATH=<sdpa-bench tree> ENV/bin/python timeit_check.py"""
import statistics, time, timeit
import torch
import sdpa_impls
from sdpa_impls.bench.check import CaseContext
from sdpa_impls.bench.grid import Case
torch.set_num_threads(1)
args = CaseContext(Case(lq=128, lk=128, e=64, dtype="fp32", mask="bool"), "cpu").inputs.args()
out = [torch.__version__]
for name in ("chunked", "torch_sdpa"):
    f = sdpa_impls.get(name).prepare(**args)
    f()
    times = timeit.Timer(f, timer=time.process_time).repeat(repeat=30, number=200)
    out.append(f"{name} {statistics.median(times) / 200 * 1e6:.2f}")
print(" ".join(out))
