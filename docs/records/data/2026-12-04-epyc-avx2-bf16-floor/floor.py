"""How low bf16 fused / torch_sdpa can go on a CPU whose bf16 GEMM is slow (L 4096, E 128, 8 heads, forward), where
fused computes bf16 in fp32 with the unshifted exp, in one process:
    python floor.py ROUNDS
Times in shared rounds (order shuffled each round): torch's SDPA on the bf16 inputs and on fp32 copies, fused as
prepared, fused's unshifted key-block loop rebuilt from torch ops on the fp32 copies (its tile: `unshifted_tile`)
with only its two GEMMs, with the GEMMs and exp2, and with the GEMMs, exp2 and the row sum (fused's ops), and one
2048^3 fp32 GEMM (this CPU's fp32 rate)."""
import random, statistics, sys, time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
from sdpa_impls.impls._tiled.budget import gemm_rates
from sdpa_impls.impls._tiled.compute import LOG2_E, exp_rates, unshifted_tile
from sdpa_impls.protocol import SDPAInputs
from sdpa_impls.registry import get

H, L, E = 8, 4096, 128
torch.manual_seed(0)
q, k, v = (torch.randn(1, H, L, E, dtype=torch.bfloat16) for _ in range(3))
q3, k3, v3 = (x.reshape(H, L, E).float() for x in (q, k, v))
kt = k3.transpose(1, 2)
rows, heads, keys = unshifted_tile(q.device, 1, H, 1, L, L, 4)  # the tile fused takes here
s = torch.empty(heads, rows, keys)
o = torch.empty(heads, rows, E)
out = torch.empty(H, L, E)


def loop(exp2, total):
    def run():
        for h0 in range(0, H, heads):
            for i0 in range(0, L, rows):
                qt = q3[h0:h0 + heads, i0:i0 + rows]
                for j0 in range(0, L, keys):
                    torch.baddbmm(s, qt, kt[h0:h0 + heads, :, j0:j0 + keys], beta=0, alpha=E ** -0.5 * LOG2_E, out=s)
                    if exp2:
                        s.exp2_()
                    if total:
                        s.sum(-1, keepdim=True)
                    pv = (s, v3[h0:h0 + heads, j0:j0 + keys])
                    torch.bmm(*pv, out=o) if j0 == 0 else o.baddbmm_(*pv)
                out[h0:h0 + heads, i0:i0 + rows] = o
        return out
    return run


a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
wide = SDPAInputs(*(x.float() for x in (q, k, v)))
fns = {"torch_sdpa": get("torch_sdpa").prepare_inputs(SDPAInputs(q, k, v)),
       "torch_sdpa fp32": get("torch_sdpa").prepare_inputs(wide),
       "fused": get("fused").prepare_inputs(SDPAInputs(q, k, v)),
       "loop: GEMMs only": loop(False, False), "loop: GEMMs + exp2": loop(True, False),
       "loop: GEMMs + exp2 + sum": loop(True, True), "2048^3 fp32 GEMM": lambda: a @ b}
ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double()).reshape(H, L, E)
print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, fused's tile {heads} heads x {rows} rows x "
      f"{keys} keys; probes: GEMM {gemm_rates()}, exp {exp_rates()}")
for name in ("torch_sdpa", "fused"):
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
ceiling = 2 * 2048 ** 3 / min(times["2048^3 fp32 GEMM"]) / 1e9
attn_flops = 2 * 2 * H * L * L * E
tmin, tmed = min(times["torch_sdpa"]), statistics.median(times["torch_sdpa"])
print(f"fp32 GEMM ceiling (2048^3, best): {ceiling:.0f} GF/s; the case's two GEMMs at that rate: "
      f"{attn_flops / ceiling / 1e9 * 1e3:.1f} ms = {attn_flops / ceiling / 1e9 / tmin:.3f} of torch_sdpa's best")
for n, x in times.items():
    if n.startswith("2048"):
        continue
    print(f"  {n:26s} best {min(x) * 1e3:6.1f} ms  median {statistics.median(x) * 1e3:6.1f} ms  "
          f"/ torch_sdpa {min(x) / tmin:.3f} / {statistics.median(x) / tmed:.3f}  "
          f"({attn_flops / min(x) / 1e9:.0f} GF/s)")
