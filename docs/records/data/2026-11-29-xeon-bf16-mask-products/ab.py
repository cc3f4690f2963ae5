"""fused's drop-in call with a 512-key window bool mask (fp32, L 8192, E 64, 8 heads, inference), its partial mask
blocks applied the old way (a kept negated bool block, masked_fill) and the new (a kept block in the scores' dtype,
multiplied or added), alternating in 7 rounds in one process, beside fused's causal call of the same length.

    python ab.py REPO   # REPO: a checkout with the new TileMasker._bool_block_
"""
import time, statistics, torch, sys
sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else ".")
import sdpa_impls
from sdpa_impls.impls._tiled import tiles
from sdpa_impls.impls._tiled.tiles import TileMasker, unexpanded, NEG_INF
torch.manual_seed(0)
L, E, H = 8192, 64, 8
q, k, v = (torch.randn(1, H, L, E) for _ in range(3))
i = torch.arange(L)
window = (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < 512)
f = sdpa_impls.get("fused")
new = TileMasker._bool_block_
def old(self, s5, m, zero):
    key = ("negated mask", m.storage_offset(), tuple(m.shape), m.stride())
    found = self._cache.get(key)
    if found is None:
        found = unexpanded(m).logical_not()
        held = self._cache.get("negated mask bytes", 0) + found.numel()
        if held <= tiles.MASK_BLOCKS_BYTES:
            self._cache[key], self._cache["negated mask bytes"] = found, held
    s5.masked_fill_(found, 0.0 if zero else NEG_INF)
res = {"old": [], "new": [], "causal": []}
with torch.no_grad():
    for way in ("old", "new"):
        TileMasker._bool_block_ = old if way == "old" else new
        f(q, k, v, attn_mask=window)
    for r in range(7):
        for way in ("old", "new"):
            TileMasker._bool_block_ = old if way == "old" else new
            t0 = time.perf_counter(); f(q, k, v, attn_mask=window); res[way].append(time.perf_counter() - t0)
        t0 = time.perf_counter(); f(q, k, v, is_causal=True); res["causal"].append(time.perf_counter() - t0)
med = {k: statistics.median(v) for k, v in res.items()}
print({k: round(v * 1e3, 1) for k, v in med.items()})
print("new/old", round(med["new"] / med["old"], 3), "old/causal", round(med["old"] / med["causal"], 3),
      "new/causal", round(med["new"] / med["causal"], 3))
print("per-round new/old", [round(a / b, 3) for a, b in zip(res["new"], res["old"])])
