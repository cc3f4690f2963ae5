import time, sys
sys.argv = ["x", "0"]
exec(open("ab.py").read().split("L, ROUNDS")[0])
from sdpa_impls.impls._tiled.maskread import block_states
import torch
L = 8192
i = torch.arange(L)
win = (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < 512)
for qb, kb in ((128, 64), (256, 128), (64, 256)):
    for name, fn in (("old", old_block_states), ("new", block_states)):
        fn(win, False, 8, L, L, qb, kb)
        t0 = time.perf_counter(); fn(win, False, 8, L, L, qb, kb); print(qb, kb, name, f"{(time.perf_counter() - t0) * 1e3:.1f} ms")
