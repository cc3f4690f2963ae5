# Needs a scratch flag in the working tree: online_softmax._SOFTMAX_P, read where the backward picks P for a one-tile
# row (True: softmax(S), False: exp(S - lse)); without it both columns time the same code.
import sys, time, statistics, torch
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[4]))
from sdpa_impls.bench.check import CaseContext
from sdpa_impls.bench.grid import Case
from sdpa_impls.bench.measure import prepare_point
from sdpa_impls.impls._tiled import online_softmax as osm
cases = {
 "fused fp32 L2048 E64": ("fused", Case(lq=2048, lk=2048, e=64, dtype="fp32", mode="bwd")),
 "fused bf16 L2048 E64": ("fused", Case(lq=2048, lk=2048, e=64, dtype="bf16", mode="bwd")),
 "fused fp32 L1024 causal": ("fused", Case(lq=1024, lk=1024, e=64, dtype="fp32", causal=True, mode="bwd")),
 "chunked fp32 L1024 E64": ("chunked", Case(lq=1024, lk=1024, e=64, dtype="fp32", mode="bwd")),
 "chunked bf16 L1024 E64": ("chunked", Case(lq=1024, lk=1024, e=64, dtype="bf16", mode="bwd")),
}
fns = {k: prepare_point(i, CaseContext(c, "cpu")).fn for k, (i, c) in cases.items()}
res = {(k, m): [] for k in fns for m in (True, False)}
for r in range(int(sys.argv[1])):
    for k, f in fns.items():
        for m in ((True, False) if r % 2 else (False, True)):
            osm._SOFTMAX_P = m
            t0 = time.perf_counter(); f(); res[(k, m)].append(time.perf_counter() - t0)
for k in fns:
    new, old = res[(k, True)][1:], res[(k, False)][1:]
    print(f"{k:26s} softmax/exp: min {min(new)/min(old):.3f} median {statistics.median(new)/statistics.median(old):.3f}  ({statistics.median(old)*1e3:.0f} ms)")
