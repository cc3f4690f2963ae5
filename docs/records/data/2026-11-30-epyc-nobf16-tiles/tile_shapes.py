import time, statistics, torch, sys
import torch.nn.functional as F
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[4]))
from sdpa_impls.protocol import SDPAInputs
from sdpa_impls.impls import fused as fmod
from sdpa_impls.impls._tiled import compute
L, E, H = int(sys.argv[1]), int(sys.argv[2]), 8
torch.manual_seed(0)
dt = getattr(torch, sys.argv[3])
qb,kb,vb=(torch.randn(1,H,L,E, dtype=dt) for _ in range(3))
tor=lambda: F.scaled_dot_product_attention(qb,kb,vb)
orig = compute.unshifted_tile
fns={"torch":tor}
for spec in sys.argv[4].split(","):
    if spec == "cur":
        fmod.unshifted_tile = orig
    else:
        r,k = map(int, spec.split("x"))
        fmod.unshifted_tile = lambda dev,b,hkv,g,lq,lk,its,r=r,k=k: (min(r,lq), 2, min(k,lk))
    fns[spec] = fmod.Fused().prepare_inputs(SDPAInputs(qb,kb,vb))
    print(spec, fmod.fused_plan.__name__, flush=True)
ref=tor().float()
for k,f in fns.items(): assert (f().float()-ref).abs().max() < 3e-2, k
res={k:[] for k in fns}
for r in range(int(sys.argv[5])):
    for k,f in fns.items():
        t0=time.perf_counter(); f(); res[k].append(time.perf_counter()-t0)
print(" ".join(f"{k}: min {min(x)/min(res['torch']):.3f} med {statistics.median(x)/statistics.median(res['torch']):.3f} |" for k,x in res.items()))
