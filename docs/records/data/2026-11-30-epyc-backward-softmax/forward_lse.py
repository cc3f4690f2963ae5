# fused fwd+bwd with the forward keeping no lse (new) against the same code whose forward computes it (old:
# Plan.multi_tile patched to True while the closure is prepared); usage: python forward_lse.py ROUNDS "fwd+bwd"
import sys, time, statistics, torch
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[4]))
from sdpa_impls.bench.check import CaseContext
from sdpa_impls.bench.grid import Case
from sdpa_impls.bench.measure import prepare_point
from sdpa_impls.impls._tiled import tilemap
cases = {
 "fp32 L2048 E64": Case(lq=2048, lk=2048, e=64, dtype="fp32", mode=sys.argv[2]),
 "bf16 L2048 E64": Case(lq=2048, lk=2048, e=64, dtype="bf16", mode=sys.argv[2]),
 "bf16 L2048 E64 causal": Case(lq=2048, lk=2048, e=64, dtype="bf16", causal=True, mode=sys.argv[2]),
 "fp32 L1024 E64 causal": Case(lq=1024, lk=1024, e=64, dtype="fp32", causal=True, mode=sys.argv[2]),
}
orig = tilemap.Plan.multi_tile
fns = {}
for k, c in cases.items():
    fns[(k, "new")] = prepare_point("fused", CaseContext(c, "cpu")).fn
    tilemap.Plan.multi_tile = lambda self: True
    fns[(k, "old")] = prepare_point("fused", CaseContext(c, "cpu")).fn
    tilemap.Plan.multi_tile = orig
res = {key: [] for key in fns}
for r in range(int(sys.argv[1])):
    for k in cases:
        for m in (("new", "old") if r % 2 else ("old", "new")):
            f = fns[(k, m)]
            t0 = time.perf_counter(); f(); res[(k, m)].append(time.perf_counter() - t0)
for k in cases:
    new, old = res[(k, "new")][1:], res[(k, "old")][1:]
    print(f"{sys.argv[2]} {k:24s} new/old: min {min(new)/min(old):.3f} median {statistics.median(new)/statistics.median(old):.3f} ({statistics.median(old)*1e3:.0f} ms)")
