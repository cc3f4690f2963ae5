import torch, time, statistics, sys
import sdpa_impls
from sdpa_impls.bench.grid import Case
from sdpa_impls.bench.check import CaseContext
from sdpa_impls.impls._tiled.budget import CpuTiling, forced_tiling, l2_cache_bytes
L, E, dt = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
a = CaseContext(Case(lq=L, lk=L, e=E, dtype=dt), "cpu").inputs.args()
th = torch.get_num_threads()
fns = {"torch": sdpa_impls.get("torch_sdpa").prepare(**a)}
for l2 in (256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20):
    with forced_tiling(CpuTiling(th, l2)):
        fns[f"fused l2={l2>>10}K"] = sdpa_impls.get("fused").prepare(**a)
for f in fns.values(): f(); f()
res = {k: [] for k in fns}
for r in range(int(sys.argv[4]) if len(sys.argv) > 4 else 7):
    for k, f in fns.items():
        s = time.perf_counter(); f(); res[k].append(time.perf_counter() - s)
t = statistics.median(res["torch"])
print("L2 of this CPU", l2_cache_bytes() >> 10, "K")
for k, v in res.items(): print(f"{k:18s} {statistics.median(v)*1e3:7.1f} ms  /torch {statistics.median(v)/t:.3f}")
