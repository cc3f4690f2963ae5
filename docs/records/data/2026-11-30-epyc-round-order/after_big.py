import sys, time, statistics, torch
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[4]))
from sdpa_impls.bench.check import CaseContext
from sdpa_impls.bench.grid import Case
from sdpa_impls.bench.measure import prepare_point
fp32 = Case(lq=2048, lk=2048, e=64, dtype="fp32")
big = prepare_point("torch_sdpa", CaseContext(Case(lq=4096, lk=4096, e=128, dtype="fp32"), "cpu")).fn
fu = prepare_point("fused", CaseContext(fp32, "cpu")).fn
to = prepare_point("torch_sdpa", CaseContext(fp32, "cpu")).fn
def t(f):
    t0 = time.perf_counter(); f(); return time.perf_counter() - t0
res = {k: [] for k in ("fu after big", "to after fu", "to after big", "fu after to")}
for f in (big, fu, to): f()
for r in range(int(sys.argv[1])):
    big(); res["fu after big"].append(t(fu)); res["to after fu"].append(t(to))
    big(); res["to after big"].append(t(to)); res["fu after to"].append(t(fu))
m = {k: statistics.median(v) * 1e3 for k, v in res.items()}
print(" ".join(f"{k} {v:.1f}" for k, v in m.items()), f"| fused right after big: {m['fu after big']/m['to after fu']:.3f}; torch right after big: {m['fu after to']/m['to after big']:.3f}")
