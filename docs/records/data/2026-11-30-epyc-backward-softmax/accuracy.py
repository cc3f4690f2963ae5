import sys; ROOT = __import__("pathlib").Path(__file__).resolve().parents[4]; sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]
import torch, test_large_scores as t
for case, (b, h, length, e, factor) in t.CASES.items():
  for seed in range(4):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, length, e, generator=gen, ) for _ in range(3))
    args = (q * factor, k, v); weights = torch.randn(b, h, length, e, generator=torch.Generator().manual_seed(1))
    exact = t.grads("naive", args, weights, torch.float64)
    out = []
    for name in ("naive", "chunked", "fused"):
        g = t.grads(name, args, weights, torch.float32)
        out.append(name + " " + " ".join(f"{(a-w).abs().max().item():.2g}" for a, w in zip(g, exact)))
    print(case, seed, " | ".join(out))
