import sys, time, torch, statistics as st
from pathlib import Path; sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
import sdpa_impls
from sdpa_impls.bench import allocator; allocator.fix()
from sdpa_impls.bench.check import CaseContext
from sdpa_impls.bench.grid import Case
from sdpa_impls.impls._tiled.budget import CpuTiling, forced_tiling, l2_cache_bytes
class Old(CpuTiling):
    UNSHIFTED_EXP=False; FUSED_ROWS_WHOLE=CpuTiling.FUSED_ROWS
th=torch.get_num_threads(); l2=l2_cache_bytes()
L=int(sys.argv[1]); causal=sys.argv[2]=='causal'
a=CaseContext(Case(lq=L,lk=L,e=64,dtype='fp32',causal=causal),'cpu').inputs.args()
f=sdpa_impls.get('fused')
def mk(pol):
    def g():
        with forced_tiling(pol(th,l2)): return f(**a)
    return g
fs={'old':mk(Old),'new':mk(CpuTiling)}
for g in fs.values(): g()
res={k:[] for k in fs}
for r in range(int(sys.argv[3])):
    for k in (list(fs) if r%2==0 else list(fs)[::-1]):
        t=time.perf_counter(); fs[k](); res[k].append(time.perf_counter()-t)
m={k:st.median(v)*1e3 for k,v in res.items()}
print('drop-in L%d %s: old %.3f new %.3f ms new/old %.3f'%(L,sys.argv[2],m['old'],m['new'],m['new']/m['old']))
