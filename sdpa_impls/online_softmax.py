"""Tiled attention with online softmax (FlashAttention's algorithm) in plain PyTorch, forward and backward.

Everything works on the grouped 5-D views of `tiles.grouped`: q (B, Hkv, G, Lq, E),
k (B, Hkv, Lk, E), v (B, Hkv, Lk, Ev). Score tiles are fp32; GEMMs run in the input dtype.
The backward recomputes score tiles from the saved per-row log-sum-exp, so it holds O(L) state.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from .protocol import SDPAInputs
from .tiles import NEG_INF, causal_key_end, gmm, gmm_t, grouped, mask_scores_

# (q5, k4, v4, mask5, is_causal, scale) -> (out5 in the input dtype, lse (B, Hkv, G, Lq) fp32)
ForwardFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]


def _finite_or_zero(x: torch.Tensor) -> torch.Tensor:
    return torch.where(torch.isinf(x), torch.zeros_like(x), x)


def chunked_forward(q5: torch.Tensor, k4: torch.Tensor, v4: torch.Tensor, mask5: torch.Tensor | None,
                    is_causal: bool, scale: float, q_tile: int, k_tile: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Query tiles × key tiles with a running max and sum; never more than one score tile alive."""
    b, hkv, g, lq, _ = q5.shape
    lk, ev = k4.shape[-2], v4.shape[-1]
    out = torch.empty((b, hkv, g, lq, ev), dtype=q5.dtype, device=q5.device)
    lse = torch.empty((b, hkv, g, lq), dtype=torch.float32, device=q5.device)
    for i0 in range(0, lq, q_tile):
        i1 = min(lq, i0 + q_tile)
        qt = q5[..., i0:i1, :]
        run_max = torch.full((b, hkv, g, i1 - i0, 1), NEG_INF, dtype=torch.float32, device=q5.device)
        run_sum = torch.zeros_like(run_max)
        acc = torch.zeros((b, hkv, g, i1 - i0, ev), dtype=torch.float32, device=q5.device)
        k_end = causal_key_end(is_causal, i1, lk)
        for j0 in range(0, k_end, k_tile):
            j1 = min(k_end, j0 + k_tile)
            s = gmm(qt, k4[..., j0:j1, :].transpose(-2, -1)).float().mul_(scale)  # (B, Hkv, G, bq, bk)
            mask_scores_(s, mask5, is_causal, i0, i1, j0, j1)
            new_max = torch.maximum(run_max, s.amax(dim=-1, keepdim=True))
            safe_max = _finite_or_zero(new_max)
            p = s.sub_(safe_max).exp_()
            alpha = torch.exp(run_max - safe_max)  # rescales what was summed under the old max
            run_sum.mul_(alpha).add_(p.sum(dim=-1, keepdim=True))
            acc.mul_(alpha).add_(gmm(p.to(v4.dtype), v4[..., j0:j1, :]))
            run_max = new_max
        denom = torch.where(run_sum == 0, torch.ones_like(run_sum), run_sum)
        out[..., i0:i1, :] = acc.div_(denom)
        lse[..., i0:i1] = (run_max + torch.log(run_sum)).squeeze(-1)  # -inf for fully masked rows
    return out, lse


def tiled_backward(q5: torch.Tensor, k4: torch.Tensor, v4: torch.Tensor, mask5: torch.Tensor | None,
                   is_causal: bool, scale: float, out5: torch.Tensor, lse: torch.Tensor, dout5: torch.Tensor,
                   q_tile: int, k_tile: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv by recomputing P = exp(S - lse) tile by tile; fp32 accumulators of size O(L)."""
    lq, lk = q5.shape[-2], k4.shape[-2]
    dtype = q5.dtype
    delta = (dout5.float() * out5.float()).sum(dim=-1, keepdim=True)  # (B, Hkv, G, Lq, 1)
    lse5 = _finite_or_zero(lse).unsqueeze(-1)  # fully masked rows: all scores are -inf, P = 0
    dq = torch.zeros(q5.shape, dtype=torch.float32, device=q5.device)
    dk = torch.zeros(k4.shape, dtype=torch.float32, device=q5.device)
    dv = torch.zeros(v4.shape, dtype=torch.float32, device=q5.device)
    for i0 in range(0, lq, q_tile):
        i1 = min(lq, i0 + q_tile)
        qt, dot = q5[..., i0:i1, :], dout5[..., i0:i1, :]
        k_end = causal_key_end(is_causal, i1, lk)
        for j0 in range(0, k_end, k_tile):
            j1 = min(k_end, j0 + k_tile)
            kt, vt = k4[..., j0:j1, :], v4[..., j0:j1, :]
            s = gmm(qt, kt.transpose(-2, -1)).float().mul_(scale)
            mask_scores_(s, mask5, is_causal, i0, i1, j0, j1)
            p = s.sub_(lse5[..., i0:i1, :]).exp_()  # (B, Hkv, G, bq, bk)
            dv[..., j0:j1, :] += gmm_t(p.to(dtype), dot)
            dp = gmm(dot, vt.transpose(-2, -1)).float()
            ds = p.mul_(dp.sub_(delta[..., i0:i1, :])).mul_(scale).to(dtype)
            dq[..., i0:i1, :] += gmm(ds, kt)
            dk[..., j0:j1, :] += gmm_t(ds, qt)
    return dq, dk, dv


class TiledAttention(torch.autograd.Function):
    """Any forward that returns (out, lse), with the recomputing tiled backward."""

    @staticmethod
    def forward(ctx, query, key, value, attn_mask, is_causal, scale, forward_fn, q_tile, k_tile):  # type: ignore[override]
        inp = SDPAInputs(query, key, value, attn_mask, 0.0, is_causal, scale, True)
        q5, k4, v4, mask5 = grouped(inp)
        out5, lse = forward_fn(q5, k4, v4, mask5, is_causal, scale)
        ctx.save_for_backward(query, key, value, attn_mask, out5, lse)
        ctx.meta = (is_causal, scale, q_tile, k_tile)
        return out5.flatten(1, 2)  # (B, Hq, Lq, Ev)

    @staticmethod
    def backward(ctx, dout):  # type: ignore[override]
        query, key, value, attn_mask, out5, lse = ctx.saved_tensors
        is_causal, scale, q_tile, k_tile = ctx.meta
        q5, k4, v4, mask5 = grouped(SDPAInputs(query, key, value, attn_mask, 0.0, is_causal, scale, True))
        dout5 = dout.unflatten(1, out5.shape[1:3])
        dq, dk, dv = tiled_backward(q5, k4, v4, mask5, is_causal, scale, out5, lse, dout5, q_tile, k_tile)
        return (dq.flatten(1, 2).to(query.dtype), dk.to(key.dtype), dv.to(value.dtype),
                None, None, None, None, None, None)


def tiled_attention(inp: SDPAInputs, forward_fn: ForwardFn, q_tile: int, k_tile: int) -> torch.Tensor:
    """Run `forward_fn`; when gradients are needed, wrap it so the backward recomputes tiles."""
    scale = inp.softmax_scale
    if not inp.needs_grad:
        q5, k4, v4, mask5 = grouped(inp)
        return forward_fn(q5, k4, v4, mask5, inp.is_causal, scale)[0].flatten(1, 2)
    return TiledAttention.apply(inp.query, inp.key, inp.value, inp.attn_mask, inp.is_causal, scale,
                                forward_fn, q_tile, k_tile)
