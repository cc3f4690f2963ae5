"""fp64 reference gradients (dq, dk, dv) computed in query blocks from the softmax's closed-form derivative, so
their memory is bounded by one block of scores (autograd through the reference would keep every block alive)."""
from __future__ import annotations

import math

import torch

from ..reference import REFERENCE_CHUNK_BYTES


def reference_grads(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, grad_out: torch.Tensor,
                    attn_mask: torch.Tensor | None = None, is_causal: bool = False, scale: float | None = None,
                    block_bytes: int = REFERENCE_CHUNK_BYTES) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) in float64 of softmax(Q Kᵀ·scale + mask) V against `grad_out`, with the reference's semantics
    (top-left causal, bool mask True = attend, float mask added, GQA by head groups, a fully masked row gives
    zeros). Per block of query rows: P = softmax(S); dV += Pᵀ dO; dS = P ∘ (dO Vᵀ − rowsum(dO ∘ O));
    dQ = dS K·scale; dK += dSᵀ Q·scale."""
    q, k, v, do = (t.detach().double() for t in (query, key, value, grad_out))
    b, hq, lq, e = q.shape
    hkv, lk = k.shape[1], k.shape[2]
    g = hq // hkv
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)  # (B, Hq, Lk, E): head h reads h // G
    s = scale if scale is not None else 1.0 / math.sqrt(e)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    rows = max(1, block_bytes // (8 * b * hq * lk))
    for i0 in range(0, lq, rows):
        i1 = min(lq, i0 + rows)
        scores = q[:, :, i0:i1] @ k.transpose(-1, -2) * s  # (B, Hq, rows, Lk)
        keep = torch.ones((i1 - i0, lk), dtype=torch.bool, device=q.device)
        if is_causal:
            keep = torch.tril(keep, diagonal=i0)
        if attn_mask is not None:
            m = attn_mask.expand(b, hq, lq, lk)[:, :, i0:i1]
            if m.dtype == torch.bool:
                keep = keep & m
            else:
                scores = scores + m.double()
        scores = scores.masked_fill(~keep, -math.inf)
        top = scores.amax(dim=-1, keepdim=True)
        top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
        p = torch.exp(scores - top)
        total = p.sum(dim=-1, keepdim=True)
        p = p / torch.where(total > 0, total, torch.ones_like(total))
        do_blk = do[:, :, i0:i1]
        out = p @ v
        dv += p.transpose(-1, -2) @ do_blk
        ds = p * (do_blk @ v.transpose(-1, -2) - (do_blk * out).sum(dim=-1, keepdim=True))
        dq[:, :, i0:i1] = ds @ k * s
        dk += ds.transpose(-1, -2) @ q[:, :, i0:i1] * s
    # the G query heads of one key/value head each contributed a gradient: sum them
    return dq, dk.unflatten(1, (hkv, g)).sum(2), dv.unflatten(1, (hkv, g)).sum(2)
