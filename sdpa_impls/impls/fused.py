"""fused: the fastest exact attention we write in plain PyTorch — query tiles, full-width rows, in-place softmax."""
from __future__ import annotations

import torch

from ..online_softmax import tiled_attention
from ..protocol import Implementation, SDPAInputs, Support
from ..registry import register
from ..tiles import causal_key_end, gmm, key_tile, l2_cache_bytes, mask_scores_


def query_tile(device: torch.device, lk: int) -> int:
    """Query rows per tile: on CPU one fp32 score tile of (rows × Lk) stays within about half of L2,
    so the in-place mask/exp/sum passes run from cache; rows are a multiple of 16 in [16, 256].
    On CUDA the tile only bounds the score memory (about 256 MiB per batch×head at fp32)."""
    if device.type != "cpu":
        return int(max(256, min(8192, (64 << 20) // max(lk, 1) // 256 * 256)))
    rows = (l2_cache_bytes() // 2) // (4 * max(lk, 1))
    return int(max(16, min(256, rows // 16 * 16)))


def fused_forward(q5: torch.Tensor, k4: torch.Tensor, v4: torch.Tensor, mask5: torch.Tensor | None,
                  is_causal: bool, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    b, hkv, g, lq, _ = q5.shape
    lk, ev = k4.shape[-2], v4.shape[-1]
    dtype = q5.dtype
    out = torch.empty((b, hkv, g, lq, ev), dtype=dtype, device=q5.device)
    lse = torch.empty((b, hkv, g, lq), dtype=torch.float32, device=q5.device)
    rows = query_tile(q5.device, lk)
    for i0 in range(0, lq, rows):
        i1 = min(lq, i0 + rows)
        k_end = causal_key_end(is_causal, i1, lk)  # causal: keys past the tile's last row are never read
        s = gmm(q5[..., i0:i1, :] * scale, k4[..., :k_end, :].transpose(-2, -1))  # scale folded into Q
        s = s.float()  # (B, Hkv, G, rows, k_end); a no-op for fp32
        mask_scores_(s, mask5, is_causal, i0, i1, 0, k_end)
        row_max = s.amax(dim=-1, keepdim=True)
        row_max = torch.where(torch.isinf(row_max), torch.zeros_like(row_max), row_max)
        p = s.sub_(row_max).exp_()
        row_sum = p.sum(dim=-1, keepdim=True)
        o = gmm(p.to(dtype), v4[..., :k_end, :])
        out[..., i0:i1, :] = o.float().div_(torch.where(row_sum == 0, torch.ones_like(row_sum), row_sum))
        lse[..., i0:i1] = (row_max + torch.log(row_sum)).squeeze(-1)
    return out, lse


@register
class Fused(Implementation):
    name = "fused"
    description = "query-tiled, cache-sized score rows, in-place fp32 softmax, causal tiles skip masked keys"
    support = Support()

    def forward(self, inp: SDPAInputs) -> torch.Tensor:
        q, v = inp.query, inp.value
        rows = query_tile(q.device, inp.key.shape[-2])
        return tiled_attention(inp, fused_forward, rows, key_tile(q.device, q.dtype, q.shape[-1], v.shape[-1], rows))
