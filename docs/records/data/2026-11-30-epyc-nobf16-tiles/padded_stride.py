import time, statistics, torch, sys
import torch.nn.functional as F
L, E, H = 4096, 128, 8
torch.manual_seed(0)
qf, kf, vf = (torch.randn(H, L, E)*0.3 for _ in range(3))
kt = kf.transpose(1, 2)
def mk(rows, keys, heads, pad):
    sb = torch.empty(heads, rows, keys + pad); s = sb[..., :keys]; o = torch.empty(heads, rows, E); out = torch.empty(H, L, E)
    def run():
      for h0 in range(0, H, heads):
        for i0 in range(0, L, rows):
            tot = None
            for j0 in range(0, L, keys):
                torch.baddbmm(s, qf[h0:h0+heads, i0:i0+rows], kt[h0:h0+heads, :, j0:j0+keys], beta=0, alpha=0.1, out=s)
                s.exp2_()
                if tot is None:
                    tot = s.sum(-1, keepdim=True); torch.bmm(s, vf[h0:h0+heads, j0:j0+keys], out=o)
                else:
                    tot.add_(s.sum(-1, keepdim=True)); o.baddbmm_(s, vf[h0:h0+heads, j0:j0+keys])
            torch.div(o, tot, out=out[h0:h0+heads, i0:i0+rows])
      return out
    return run
qb,kb,vb=(x.bfloat16().unsqueeze(0) for x in (qf,kf,vf))
fns={"torch":lambda: F.scaled_dot_product_attention(qb,kb,vb)}
for spec in sys.argv[1].split(","):
    r,k,p=map(int,spec.split("x")); fns[spec]=mk(r,k,2,p)
ref = fns["torch"]().float().squeeze(0)
for k,f in fns.items():
    if k!="torch": assert (f()-ref).abs().max() < 2e-2, k
res={k:[] for k in fns}
for r in range(int(sys.argv[2])):
    for k,f in fns.items():
        t0=time.perf_counter(); f(); res[k].append(time.perf_counter()-t0)
for k,x in res.items(): print(k, f"min {min(x)*1e3:.1f} med {statistics.median(x)*1e3:.1f}  min/torchmin {min(x)/min(res['torch']):.3f}  med/torchmed {statistics.median(x)/statistics.median(res['torch']):.3f}")
