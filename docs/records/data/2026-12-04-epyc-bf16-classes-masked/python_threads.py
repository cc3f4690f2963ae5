import random, statistics, sys, time, threading
import torch, torch.nn.functional as F
from concurrent.futures import ThreadPoolExecutor
L, E, H = int(sys.argv[1]), int(sys.argv[2]), 8
rounds = int(sys.argv[3])
LOG2E = 1.4426950408889634
torch.manual_seed(0)
q, k, v = (torch.randn(1, H, L, E) for _ in range(3))
q3, k3, v3 = (x.reshape(H, L, E) for x in (q, k, v)); kt = k3.transpose(1, 2)
alpha = E ** -0.5 * LOG2E
rows, keys = 512, 1024
out = torch.empty(H, L, E)

def heads_loop(h0, h1, heads, s, o, tot):
    for hh in range(h0, h1, heads):
        for i0 in range(0, L, rows):
            qt = q3[hh:hh + heads, i0:i0 + rows]
            for j0 in range(0, L, keys):
                torch.baddbmm(s, qt, kt[hh:hh + heads, :, j0:j0 + keys], beta=0, alpha=alpha, out=s)
                s.exp2_()
                if j0 == 0:
                    torch.sum(s, -1, keepdim=True, out=tot)
                    torch.bmm(s, v3[hh:hh + heads, j0:j0 + keys], out=o)
                else:
                    tot.add_(s.sum(-1, keepdim=True)); o.baddbmm_(s, v3[hh:hh + heads, j0:j0 + keys])
            torch.div(o, tot, out=out[hh:hh + heads, i0:i0 + rows])

bufs2 = (torch.empty(2, rows, keys), torch.empty(2, rows, E), torch.empty(2, rows, 1))
def omp():
    heads_loop(0, H, 2, *bufs2); return out

T = torch.get_num_threads()
pool = ThreadPoolExecutor(T)
bufs1 = [(torch.empty(1, rows, keys), torch.empty(1, rows, E), torch.empty(1, rows, 1)) for _ in range(T)]
def worker(t):
    torch.set_num_threads(1)
    per = H // T
    heads_loop(t * per, (t + 1) * per, 1, *bufs1[t])
def pyth():
    list(pool.map(worker, range(T))); return out

fns = {"torch": lambda: F.scaled_dot_product_attention(q, k, v), "omp loop": omp, "python threads loop": pyth}
ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double()).reshape(H, L, E)
for n, f in fns.items():
    print(n, "err", float((f().double().reshape(H, L, E) - ref).abs().max()), "threads after", torch.get_num_threads())
t = {n: [] for n in fns}
for r in range(rounds):
    order = list(fns); random.shuffle(order)
    for n in order:
        st = time.perf_counter(); fns[n](); t[n].append(time.perf_counter() - st)
tm, tb = statistics.median(t["torch"]), min(t["torch"])
for n in fns:
    x = sorted(t[n])
    print(f"{n:20s} median/torch {statistics.median(x)/tm:.3f} best/best {x[0]/tb:.3f}  ms: " + " ".join(f"{v*1e3:.1f}" for v in x))
