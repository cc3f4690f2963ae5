"""How low bf16 fused / torch_sdpa can go on this CPU (L 4096, E 128, 8 heads, forward), in one process:
    python floor.py ROUNDS
Times in shared rounds (order shuffled each round): torch's SDPA, fused as prepared (and with its score-tile budget
halved and doubled), fused's tile loop rebuilt from torch ops with only its two GEMMs, with the GEMMs and the softmax,
with the GEMMs and a bf16 row sum (the cheapest pass over a tile), and one 4096^3 bf16 GEMM (this CPU's bf16 rate)."""
import math, random, statistics, sys, time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
from sdpa_impls.impls._tiled.budget import CpuTiling, forced_tiling, l2_cache_bytes, tiling_for
from sdpa_impls.protocol import SDPAInputs
from sdpa_impls.registry import get

H, L, E = 8, 4096, 128
torch.manual_seed(0)
q, k, v = (torch.randn(1, H, L, E, dtype=torch.bfloat16) for _ in range(3))
q3, k3, v3 = (x.reshape(H, L, E) for x in (q, k, v))
kt = k3.transpose(1, 2)
inp = SDPAInputs(q, k, v)
rows, heads = tiling_for(q.device).fused_tile(1, H, 1, L, L, 2, whole=True)  # the tile fused takes here
s = torch.empty(heads, rows, L, dtype=torch.bfloat16)
o = torch.empty(heads, rows, E, dtype=torch.bfloat16)
out = torch.empty(H, L, E, dtype=torch.bfloat16)


def loop(between):
    def run():
        for h0 in range(0, H, heads):
            for i0 in range(0, L, rows):
                torch.baddbmm(s, q3[h0:h0 + heads, i0:i0 + rows], kt[h0:h0 + heads], beta=0, alpha=E ** -0.5, out=s)
                between(s)
                torch.bmm(s, v3[h0:h0 + heads], out=o)
                out[h0:h0 + heads, i0:i0 + rows] = o
        return out
    return run


a, b = torch.randn(4096, 4096, dtype=torch.bfloat16), torch.randn(4096, 4096, dtype=torch.bfloat16)
fns = {"torch_sdpa": get("torch_sdpa").prepare_inputs(inp), "fused": get("fused").prepare_inputs(inp)}
for frac in (0.5, 2.0):
    with forced_tiling(CpuTiling(torch.get_num_threads(), int(l2_cache_bytes() * frac))):
        fns[f"fused, budget x{frac}"] = get("fused").prepare_inputs(inp)
fns["loop: GEMMs only"] = loop(lambda t: None)
fns["loop: GEMMs + softmax"] = loop(lambda t: torch.softmax(t, -1, out=t))
fns["loop: GEMMs + bf16 row sum"] = loop(lambda t: t.sum(-1, keepdim=True))
fns["4096^3 bf16 GEMM"] = lambda: a @ b
ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double()).reshape(H, L, E)
print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, fused's tile {heads} heads x {rows} rows x {L} keys")
for name in ("torch_sdpa", "fused", "loop: GEMMs + softmax"):
    print(f"  {name} max error against fp64: {float((fns[name]().double().reshape(H, L, E) - ref).abs().max()):.2e}")
times = {n: [] for n in fns}
rng = random.Random(0)
for f in fns.values():
    f()
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 7):
    order = list(fns)
    rng.shuffle(order)
    for n in order:
        t0 = time.perf_counter()
        fns[n]()
        times[n].append(time.perf_counter() - t0)
ceiling = 2 * 4096 ** 3 / min(times["4096^3 bf16 GEMM"]) / 1e9
attn_flops = 2 * 2 * H * L * L * E
tmin, tmed = min(times["torch_sdpa"]), statistics.median(times["torch_sdpa"])
print(f"bf16 GEMM ceiling (4096^3, best): {ceiling:.0f} GF/s; the case's two GEMMs at that rate: "
      f"{attn_flops / ceiling / 1e9 * 1e3:.1f} ms = {attn_flops / ceiling / 1e9 / tmin:.3f} of torch_sdpa's best")
for n, x in times.items():
    if n.startswith("4096"):
        continue
    print(f"  {n:28s} best {min(x) * 1e3:6.1f} ms  median {statistics.median(x) * 1e3:6.1f} ms  "
          f"/ torch_sdpa {min(x) / tmin:.3f} / {statistics.median(x) / tmed:.3f}  ({attn_flops / min(x) / 1e9:.0f} GF/s)")
