"""Largest error of dq, dk, dv against naive in fp64, as a multiple of naive's own fp32 error, for rows whose keys
span several key tiles (chunked at L 1500 and 3000, fused with a mask of two key runs), q scaled up so that the
scores reach about 400 to 3e4 (torch's SDPA beside them):  python accuracy.py"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
import sdpa_impls


def ratios(name, b, h, length, e, factor, mask=None, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, length, e, generator=gen) for _ in range(3))
    w = torch.randn(b, h, length, e, generator=torch.Generator().manual_seed(1))

    def grads(impl, dtype):
        ins = [a.detach().to(dtype, copy=True).requires_grad_() for a in (q * factor, k, v)]
        (sdpa_impls.get(impl)(*ins, attn_mask=mask) * w.to(dtype)).sum().backward()
        return [i.grad.double() for i in ins]

    exact, naive, mine = grads("naive", torch.float64), grads("naive", torch.float32), grads(name, torch.float32)
    return " ".join(f"{(a - x).abs().max().item() / (n - x).abs().max().item():.2f}"
                    for a, n, x in zip(mine, naive, exact))


gap = torch.zeros(1500, 1500, dtype=torch.bool)
gap[:, :200] = gap[:, 1300:] = True  # two runs of keys
print("error / naive's error (dq dk dv)")
for factor in (30.0, 300.0, 1000.0):
    for seed in range(2):
        print(f"q x {factor:g}, seed {seed}: chunked L 1500 {ratios('chunked', 1, 2, 1500, 16, factor, seed=seed)}"
              f" | fused two-run mask L 1500 {ratios('fused', 1, 2, 1500, 16, factor, gap, seed)}"
              f" | chunked L 3000 {ratios('chunked', 1, 1, 3000, 16, factor, seed=seed)}"
              f" | torch_sdpa L 1500 {ratios('torch_sdpa', 1, 2, 1500, 16, factor, seed=seed)}")
