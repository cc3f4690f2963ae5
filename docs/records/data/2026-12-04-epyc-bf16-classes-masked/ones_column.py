import time, statistics, random, torch, sys
E = int(sys.argv[1]); keys = int(sys.argv[2])
h, rows = 2, 512
s0 = torch.randn(h, rows, keys)
s = s0.clone()
v = torch.randn(h, keys, E); v1 = torch.cat([v, torch.ones(h, keys, 1)], -1)
o = torch.zeros(h, rows, E); o1 = torch.zeros(h, rows, E + 1)
tot = torch.zeros(h, rows, 1)
def a():
    s.exp2_(); tot.add_(s.sum(-1, keepdim=True)); o.baddbmm_(s, v)
def b():
    s.exp2_(); o1.baddbmm_(s, v1)
def g128(): o.baddbmm_(s, v)
def g129(): o1.baddbmm_(s, v1)
def ex(): s.exp2_()
def sm(): s.sum(-1, keepdim=True)
fns = dict(a_sep=a, b_ones=b, gemm_E=g128, gemm_E1=g129, exp2=ex, sum=sm)
t = {n: [] for n in fns}
for r in range(200):
    order = list(fns); random.shuffle(order)
    for n in order:
        s.copy_(s0.clamp(-5, 5))
        st = time.perf_counter(); fns[n](); t[n].append(time.perf_counter() - st)
for n in fns: print(f"{n:8s} median {statistics.median(t[n])*1e6:8.1f} us  best {min(t[n])*1e6:8.1f}")
