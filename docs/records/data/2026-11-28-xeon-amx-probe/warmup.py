"""Two timed fp32 GEMMs of 64x64x256 after 0-3 untimed ones, after nothing and after a 64 MiB write (60 of each, one
thread, wall clock): median after the write / median after nothing.  python warmup.py"""
import time, torch, numpy as np
torch.set_num_threads(1)
a = torch.full((64, 64), 0.5); b = torch.full((64, 256), 0.25); o = torch.empty(64, 256)
big = torch.empty(64 << 20, dtype=torch.uint8)
def t(w):
    for _ in range(w): torch.mm(a, b, out=o)
    s = time.perf_counter(); torch.mm(a, b, out=o); torch.mm(a, b, out=o); return time.perf_counter() - s
for w in (0, 1, 2, 3):
    n, f = [], []
    for i in range(60):
        n.append(t(w)); big.fill_(i % 7); f.append(t(w))
    print(f"{w} untimed first: after the write / after nothing {np.median(f) / np.median(n):.3f}, "
          f"after nothing {np.median(n) * 1e6:.1f} us")
