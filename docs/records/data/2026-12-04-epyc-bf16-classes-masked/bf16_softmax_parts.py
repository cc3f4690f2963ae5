import time, statistics, random, torch
rows, keys, h = 256, 4096, 2
x32 = (torch.rand(h, rows, keys) * 8 - 4)
xb = x32.bfloat16(); sb = xb.clone()
def softmax(): sb.copy_(xb); torch.softmax(sb, -1, out=sb)
def exp2norm(): sb.copy_(xb); sb.exp2_(); sb.mul_(sb.sum(-1, keepdim=True).reciprocal_())
def exp2norm32(): sb.copy_(xb); sb.exp2_(); sb.mul_(sb.sum(-1, keepdim=True, dtype=torch.float32).reciprocal_())
def copy(): sb.copy_(xb)
fns = dict(softmax=softmax, exp2norm=exp2norm, exp2norm32=exp2norm32, copy=copy)
for f in fns.values(): f(); f()
t = {n: [] for n in fns}
for r in range(80):
    order = list(fns); random.shuffle(order)
    for n in order:
        st = time.perf_counter(); fns[n](); t[n].append(time.perf_counter() - st)
for n in fns: print(f"{n:12s} median {statistics.median(t[n])*1e6:8.1f} us best {min(t[n])*1e6:8.1f}")
