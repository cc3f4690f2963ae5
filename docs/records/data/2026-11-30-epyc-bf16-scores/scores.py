"""Where a bf16 answer's error comes from, and what computing bf16 in fp32 costs, in one process:
    python scores.py ROUNDS
Part 1, error against fp64 (1 x 4 heads x L 1024, E 64 and 128, q scaled by 1, 3 and 10 so the scores reach about
+-5, +-15 and +-50): torch's math backend and its default call; naive, chunked and fused as this CPU chooses (bf16
compute where its bf16 GEMM is fast) and with SDPA_BENCH_CPU_BF16=fp32; and the fp64 reference with only the scores
rounded to bf16, or only the softmax weights P.
Part 2, forward time over torch_sdpa's in shared rounds (order shuffled each round), bf16, 1 x 8 heads x L 4096, E 128:
fused and chunked with bf16 compute and with fp32 compute; fused's tile loop rebuilt from torch ops (as in
2026-11-30-epyc-bf16-floor/floor.py) with S rounded to bf16, and with S kept as two bf16 terms, S = hi + lo, where
lo = S - hi comes from a second score GEMM (beta = -1 on hi) and the softmax reads hi + lo in fp32."""
import os, random, statistics, sys, time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
import sdpa_impls  # noqa: E402
from sdpa_impls.impls._tiled.budget import tiling_for  # noqa: E402

BF16, F64 = torch.bfloat16, torch.float64


def prepared(name, dtype_choice, q, k, v):
    os.environ["SDPA_BENCH_CPU_BF16"] = dtype_choice  # read when the call is prepared
    try:
        return sdpa_impls.get(name).prepare(q, k, v)
    finally:
        del os.environ["SDPA_BENCH_CPU_BF16"]


print("part 1: max |error| against fp64 (output)")
for mult in (1, 3, 10):
    for e in (64, 128):
        g = torch.Generator().manual_seed(0)
        q = (torch.randn(1, 4, 1024, e, generator=g) * mult).to(BF16)
        k, v = (torch.randn(1, 4, 1024, e, generator=g).to(BF16) for _ in "kv")
        ref = sdpa_impls.reference(q, k, v)
        err = lambda o: float((o.double() - ref).abs().max())  # noqa: E731
        with sdpa_kernel(SDPBackend.MATH):
            row = {"torch math": err(F.scaled_dot_product_attention(q, k, v))}
        row["torch default"] = err(F.scaled_dot_product_attention(q, k, v))
        for name in ("naive", "chunked", "fused"):
            row[name] = err(sdpa_impls.get(name)(q, k, v))
        for name in ("chunked", "fused"):
            row[name + " fp32"] = err(prepared(name, "fp32", q, k, v)())
        row["ref, S rounded"] = err(sdpa_impls.reference(q, k, v, rounding=(BF16, F64)))
        row["ref, P rounded"] = err(sdpa_impls.reference(q, k, v, rounding=(F64, BF16)))
        scores = float((q.double() @ k.double().transpose(-2, -1)).abs().max()) / e ** 0.5
        print(f"q x {mult:2} E {e:3} (max |S| {scores:4.1f}): " + ", ".join(f"{n} {x:.4f}" for n, x in row.items()))

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
torch.manual_seed(0)
q, k, v = (torch.randn(1, 8, 4096, 128, dtype=BF16) for _ in range(3))
calls = {"torch_sdpa": sdpa_impls.get("torch_sdpa").prepare(q, k, v)}
for name in ("fused", "chunked"):
    calls[name + " bf16"] = prepared(name, "bf16", q, k, v)
    calls[name + " fp32"] = prepared(name, "fp32", q, k, v)
H, L, E = 8, 4096, 128
q3, k3, v3 = (x.reshape(H, L, E) for x in (q, k, v))
kt = k3.transpose(1, 2)
rows, heads = tiling_for(q.device).fused_tile(1, H, 1, L, L, 2, whole=True)  # the tile fused takes here
hi, lo = (torch.empty(heads, rows, L, dtype=BF16) for _ in range(2))
f32 = torch.empty(heads, rows, L)
o, out = torch.empty(heads, rows, E, dtype=BF16), torch.empty(H, L, E, dtype=BF16)


def loop(two_terms):
    def run():
        for h0 in range(0, H, heads):
            for i0 in range(0, L, rows):
                qt = q3[h0:h0 + heads, i0:i0 + rows]
                torch.baddbmm(hi, qt, kt[h0:h0 + heads], beta=0, alpha=E ** -0.5, out=hi)
                if two_terms:
                    torch.baddbmm(hi, qt, kt[h0:h0 + heads], beta=-1, alpha=E ** -0.5, out=lo)
                    torch.softmax(f32.copy_(hi).add_(lo), -1, out=f32)
                    hi.copy_(f32)
                else:
                    torch.softmax(hi, -1, out=hi)
                torch.bmm(hi, v3[h0:h0 + heads], out=o)
                out[h0:h0 + heads, i0:i0 + rows] = o
        return out.reshape(1, H, L, E)
    return run


calls["loop: S rounded"], calls["loop: S = hi + lo"] = loop(False), loop(True)
ref = sdpa_impls.reference(q, k, v)
for n in ("torch_sdpa", "fused bf16", "loop: S rounded", "loop: S = hi + lo"):
    print(f"  {n} max error against fp64: {float((calls[n]().double() - ref).abs().max()):.2e}")
times = {n: [] for n in calls}
for fn in calls.values():
    fn()
for _ in range(rounds):
    order = list(calls)
    random.shuffle(order)
    for n in order:
        t0 = time.perf_counter()
        calls[n]()
        times[n].append(time.perf_counter() - t0)
base = min(times["torch_sdpa"])
print(f"part 2: {rounds} rounds, torch_sdpa best {base * 1e3:.0f} ms; best / torch's best (median / torch's median)")
for n, t in times.items():
    print(f"  {n:18} {min(t) / base:.3f} ({statistics.median(t) / statistics.median(times['torch_sdpa']):.3f})")
