"""The drop-in fused window call (fp32, L 8192, 8 heads, E 64, a 512-key window) in one process, in alternating
rounds: its tiles remembered and checked by the full stamp (version counter + word sums) or by the version counter
alone; its tiles derived in the call (a new mask tensor each call) by maskread.block_states or by the
block_states of dd8af8b (bool any/all over the query rows first, copied below)."""
import math, statistics, sys, time
import torch
import sdpa_impls
from sdpa_impls.impls._tiled import tilemap
from sdpa_impls.impls._tiled.maskread import EMPTY, FULL, PARTIAL

def _old_blocks(x: torch.Tensor, size: int, reduce: str) -> torch.Tensor:
    """any/all over consecutive blocks of `size` along the last dim (the last block may be shorter)."""
    n = x.shape[-1]
    full = n // size * size
    parts = []
    if full:
        parts.append(getattr(x[..., :full].reshape(*x.shape[:-1], full // size, size), reduce)(dim=-1))
    if full < n:
        parts.append(getattr(x[..., full:], reduce)(dim=-1, keepdim=True))
    return torch.cat(parts, dim=-1)


def old_block_states(mask: torch.Tensor | None, is_causal: bool, hkv: int, lq: int, lk: int,
                 q_block: int, k_block: int) -> torch.Tensor:
    """EMPTY / PARTIAL / FULL for every (mask batch, kv head, query block, key block): (Bm, Hm, nQ, nK) uint8 on
    the CPU, where Bm and Hm are 1 where the mask broadcasts. A bool mask is read once, a query block at a time
    (O(q_block · Lk) temporaries); a float mask has no empty tiles and is applied everywhere (PARTIAL); top-left
    causal empties the tiles above the diagonal and makes the ones it crosses PARTIAL."""
    nq, nk = math.ceil(lq / q_block), math.ceil(lk / k_block)
    if mask is None or mask.dtype != torch.bool:
        states = torch.full((1, 1, nq, nk), FULL if mask is None else PARTIAL, dtype=torch.uint8)
    else:
        m4 = mask[(None,) * (4 - mask.dim())]  # (Bm, Hq or 1, Lq or 1, Lk or 1)
        bm, hm = m4.shape[0], m4.shape[1]
        hg = hkv if hm > 1 else 1
        m5 = m4.unflatten(1, (hg, hm // hg))  # (Bm, Hg, G, Lq|1, Lk|1): the G query heads of a kv head together
        any_k = torch.empty((bm, hg, nq, nk), dtype=torch.bool)
        all_k = torch.empty((bm, hg, nq, nk), dtype=torch.bool)
        for t in range(nq):
            rows = m5[..., t * q_block: min(lq, (t + 1) * q_block), :] if m5.shape[-2] > 1 else m5
            for reduce, out in (("any", any_k), ("all", all_k)):
                cols = getattr(getattr(rows, reduce)(dim=-2), reduce)(dim=2)  # (Bm, Hg, Lk|1)
                out[:, :, t] = _old_blocks(cols.expand(bm, hg, lk), k_block, reduce).cpu()
        states = torch.where(all_k, FULL, torch.where(any_k, PARTIAL, EMPTY)).to(torch.uint8)
    if is_causal:
        i0 = torch.arange(nq)[:, None] * q_block
        i1 = torch.clamp(i0 + q_block, max=lq)
        j0 = torch.arange(nk)[None, :] * k_block
        j1 = torch.clamp(j0 + k_block, max=lk)
        above = j0 >= i1  # every key after every row of the tile
        crosses = (j1 - 1 > i0) & ~above
        states = torch.where(above, EMPTY, torch.where(crosses & (states == FULL), PARTIAL, states)).to(torch.uint8)
    return states


L, ROUNDS = 8192, int(sys.argv[1]) if len(sys.argv) > 1 else 9
torch.manual_seed(0)
q, k, v = (torch.randn(1, 8, L, 64) for _ in range(3))
i = torch.arange(L)
win = (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < 512)
fused = sdpa_impls.get("fused")
ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=win)
assert (fused(q, k, v, attn_mask=win) - ref).abs().max() < 1e-4
full_stamp, new_states = tilemap._stamp, tilemap.block_states
version_only = lambda m: () if m is None else (m._version,)
times = {n: [] for n in ("remembered, full stamp", "remembered, version only", "derived, new block_states",
                         "derived, old block_states")}
for r in range(ROUNDS):
    for name in times:
        tilemap._stamp = version_only if "version only" in name else full_stamp
        tilemap.block_states = old_block_states if "old" in name else new_states
        mask = win if name.startswith("remembered") else win.clone()
        fused(q, k, v, attn_mask=win)  # the remembered tiles exist
        t0 = time.perf_counter()
        out = fused(q, k, v, attn_mask=mask)
        times[name].append(time.perf_counter() - t0)
        if r == 0:
            assert (out - ref).abs().max() < 1e-4, name
tilemap._stamp, tilemap.block_states = full_stamp, new_states
t0 = time.perf_counter()
for _ in range(20):
    full_stamp(win)
print(f"stamp alone: {(time.perf_counter() - t0) / 20 * 1e3:.2f} ms")
base = statistics.median(times["remembered, version only"])
for name, xs in times.items():
    print(f"{name:28s} median {statistics.median(xs) * 1e3:7.1f} ms  (/ version only {statistics.median(xs) / base:.3f})"
          f"  all: {' '.join(f'{x * 1e3:.1f}' for x in xs)}")
