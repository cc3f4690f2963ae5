"""fused: the fastest exact attention we write in plain PyTorch — query tiles, full-width rows, in-place softmax."""
from __future__ import annotations

from collections.abc import Callable

import torch

from ._tiled.online_softmax import fp16_in_fp32, take, tiled_attention
from ..protocol import Implementation, SDPAInputs, Support
from ..registry import register
from ._tiled.tiles import (NEG_INF, TileMasker, causal_key_end, empty_attention, fit_rows, flat, forward_views,
                           group_heads, head_groups, rows3, score_tile_bytes, store_rows_)


def tile_shape(device: torch.device, b: int, hkv: int, g: int, lq: int, lk: int, itemsize: int) -> tuple[int, int]:
    """(query rows, kv heads) per score tile.

    CPU: first 32 to 256 rows (multiple of 32), as many as fit `tiles.score_tile_bytes` for one head per
    thread (below 32 rows the GEMMs lose speed, above 256 they gain nothing), then as many heads as still fit. CUDA: all heads, 64 to 16384 rows within the memory bound.
    """
    if device.type != "cpu":
        rows = fit_rows(score_tile_bytes(device), b * hkv * g * lk * itemsize, 64, 16384, 64)
    else:
        per_row = torch.get_num_threads() * g * lk * itemsize
        rows = fit_rows(score_tile_bytes(device), per_row, 32, 256, 32)
    rows = min(rows, lq)
    return rows, group_heads(device, b * hkv, rows * g * lk * itemsize)


def fused_forward(q5: torch.Tensor, k4: torch.Tensor, v4: torch.Tensor, mask5: torch.Tensor | None,
                  is_causal: bool, scale: float, with_lse: bool,
                  ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Per query tile: S = scale·Q Kᵀ (one GEMM, input dtype), torch.softmax in place, O = P V (one GEMM).

    torch's CPU/CUDA softmax kernel computes in fp32 internally and rounds P once, exactly as naive's
    fp32 softmax followed by the cast. Causal tiles stop at their last row's key (no masked GEMM work).
    Training (`with_lse`): when one score tile holds every head and row, that tile is P itself, and it is
    returned for the backward instead of the log-sum-exp (no recomputation, and no more memory than the tile
    the backward would allocate again); otherwise the log-sum-exp is returned. An fp32 copy of the tile is
    made only when the log-sum-exp is needed or a float mask is added.
    """
    b, hkv, g, lq, e = q5.shape
    lk, ev, dtype, dev = k4.shape[-2], v4.shape[-1], q5.dtype, q5.device
    float_mask = mask5 is not None and mask5.dtype != torch.bool
    half = dtype != torch.float32
    rows, heads = tile_shape(dev, b, hkv, g, lq, lk, 4 if half and (with_lse or float_mask) else q5.element_size())
    keep_p = with_lse and rows >= lq and heads >= b * hkv  # a single tile: P (B·Hkv, G·Lq, keys)
    with_lse = with_lse and not keep_p
    need_f32 = half and (with_lse or float_mask)
    out = torch.empty((b, hkv, g, lq, ev), dtype=dtype, device=dev)
    lse = torch.empty((b, hkv, g, lq), dtype=torch.float32, device=dev) if with_lse else None
    masker = TileMasker(mask5, is_causal, rows, dev)
    sbuf = torch.empty(heads * g * rows * lk, dtype=dtype, device=dev)
    fbuf = torch.empty(heads * g * rows * lk, dtype=torch.float32, device=dev) if need_f32 else sbuf
    obuf = torch.empty(heads * g * rows * ev, dtype=dtype, device=dev)  # a contiguous GEMM output is faster
    # than writing into the strided rows of `out` (fp32, L=2048, E=64: 25 vs 30 ms for all P V GEMMs)
    for bs, hs in head_groups(b, hkv, heads):
        q4, out4, kt3, v3, mask_g = forward_views(q5, k4, v4, out, mask5, bs, hs)
        n = q4.shape[0]
        for i0 in range(0, lq, rows):
            i1 = min(lq, i0 + rows)
            m = g * (i1 - i0)
            k_end = causal_key_end(is_causal, i1, lk)  # causal: keys past the tile's last row are never read
            sd = take(sbuf, n, m, k_end)  # (heads, G·rows, keys)
            torch.baddbmm(sd, rows3(q4, i0, i1), kt3[..., :k_end], beta=0, alpha=scale, out=sd)
            s = take(fbuf, n, m, k_end).copy_(sd) if need_f32 else sd
            masker.apply_(s, mask_g, i0, i1, 0, k_end)
            row_max = s.amax(dim=-1, keepdim=True) if (with_lse or mask5 is not None) else None
            p = torch.softmax(s, dim=-1, out=s)
            if p.dtype != dtype:
                p = sd.copy_(p)
            dead = None if row_max is None else row_max == NEG_INF  # every key masked: softmax gave NaN
            if keep_p and mask5 is not None:
                p.masked_fill_(dead, 0.0)  # the backward reads P: those rows attend to nothing
            o = torch.bmm(p, v3[:, :k_end], out=take(obuf, n, m, ev))  # (heads, G·rows, Ev)
            if dead is not None:
                if mask5 is not None and not keep_p:
                    o.masked_fill_(dead, 0.0)  # the answer is zeros
                if lse is not None:  # max P = 1 / Σ exp(s - max), so lse = max - log(max P), in fp32
                    lse_t = torch.where(dead, NEG_INF, row_max.float() - torch.log(s.amax(dim=-1, keepdim=True)))
                    store_rows_(flat(lse, bs, hs).unsqueeze(-1), i0, i1, lse_t)
            store_rows_(out4, i0, i1, o)
    k_end = causal_key_end(is_causal, lq, lk)
    return out, lse, sbuf[:b * hkv * g * lq * k_end].view(b, hkv, g, lq, k_end) if keep_p else None


@register
class Fused(Implementation):
    name = "fused"
    description = "query-tiled GEMMs with scale folded in, in-place torch.softmax on cache-sized tiles, causal skip"
    support = Support()

    def forward(self, inp: SDPAInputs) -> torch.Tensor:
        return self.prepare_inputs(inp)()

    def prepare_inputs(self, inp: SDPAInputs) -> Callable[[], torch.Tensor]:
        if inp.is_empty:
            return lambda: empty_attention(inp)
        q, k = inp.query, inp.key
        b, hkv, lk = k.shape[0], k.shape[1], k.shape[2]
        rows, _ = tile_shape(q.device, b, hkv, q.shape[1] // hkv, q.shape[2], lk, 4)
        widen = fp16_in_fp32(inp, 1)  # P is normalized before P V: each output is bounded by max|v|
        return lambda: tiled_attention(inp, fused_forward, rows, lk, widen)  # backward: full-width key tiles
