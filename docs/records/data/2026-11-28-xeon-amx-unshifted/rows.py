import sys, time, torch, statistics as st
from pathlib import Path; sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
import sdpa_impls
from sdpa_impls.bench.check import CaseContext
from sdpa_impls.bench.grid import Case
from sdpa_impls.bench.measure import prepare_point
from sdpa_impls.impls._tiled.budget import CpuTiling, forced_tiling, l2_cache_bytes
L,E,dt=int(sys.argv[1]),int(sys.argv[2]),sys.argv[3]; causal=sys.argv[5]=='causal'
ctx=CaseContext(Case(lq=L,lk=L,e=E,dtype=dt,causal=causal),'cpu')
th=torch.get_num_threads(); l2=l2_cache_bytes()
class R512(CpuTiling): FUSED_ROWS=(32,512,32)
class R1024(CpuTiling): FUSED_ROWS=(32,1024,32)
class Off(CpuTiling): UNSHIFTED_EXP=False
fs={'torch':prepare_point('torch_sdpa',ctx).fn}
for name,pol in [('r256',CpuTiling),('r512',R512),('off256',Off)][:int(sys.argv[6]) if len(sys.argv)>6 else 3]:
    with forced_tiling(pol(th,l2)): fs[name]=prepare_point('fused',ctx).fn
names=list(fs)
for n in names[1:]: fs[n+"'"]=(lambda f: (lambda: f()))(fs[n])
for f in fs.values(): f(); f()
res={k:[] for k in fs}
for r in range(int(sys.argv[4])):
    for k,f in fs.items():
        t=time.perf_counter(); f(); res[k].append(time.perf_counter()-t)
med={k:st.median(v)*1e3 for k,v in res.items()}
print(sys.argv[1:], {k:round(m,2) for k,m in med.items()}); print({k:round(m/med['torch'],3) for k,m in med.items()})
