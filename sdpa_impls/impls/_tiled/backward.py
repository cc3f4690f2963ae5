"""The tiled backward of chunked and fused, and the autograd Function around any tiled forward.

The backward recomputes score tiles (P from the softmax where a row's keys fit one key tile, else from each row's
max and log-sum, saved by the forward), so it holds O(L) state, unless the forward hands it P (fused, when a single
tile held all of it). A learned bias's gradient is the scores' gradient, added up in the bias's own shape.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import torch

from ...masks import kept_for_backward
from ...protocol import SDPAInputs, empty_attention
from .budget import choice
from .online_softmax import accumulate, minus_into, plan_tiles, take
from .tilemap import KeyTile, MaskTiles, Tiling
from .tiles import HALF, NEG_INF, TileMasker, columns_t, compact_transposed, flat, grouped, rows3, store_rows_, \
    working_dtype

# (q5, k4, v4, mask5, is_causal, scale, with_lse) -> (out5 (B, Hkv, G, Lq, Ev), lse (B, Hkv, G, Lq, 2): each row's
# max and the log of its sum of exp(S - max), fp32 (fp64 inputs: fp64), or None, P (B, Hkv, G, Lq, keys) in the input
# dtype or None); with_lse asks for one of lse and P, for the backward
ForwardFn = Callable[..., tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]]


def times_into(ds: torch.Tensor, p: torch.Tensor, dp: torch.Tensor, widen: bool) -> torch.Tensor:
    """ds = p ⊙ dp into the fp32 tile `ds`, from the fp32 P and a dP of the input dtype (or fp32), as `minus_into`."""
    if widen and dp.dtype != ds.dtype:
        return ds.copy_(dp).mul_(p)
    return torch.mul(p, dp, out=ds)


def tiled_backward(q5: torch.Tensor, k4: torch.Tensor, v4: torch.Tensor, mask5: torch.Tensor | None,
                   is_causal: bool, scale: float, out5: torch.Tensor, lse: torch.Tensor | None,
                   p5: torch.Tensor | None, dout5: torch.Tensor, tiling: Tiling, tiles: MaskTiles,
                   dmask4: torch.Tensor | None = None, every_max: bool = False
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq (B, Hkv, G, Lq, E), dk, dv (B, Hkv, Lk, ·) fp32 by recomputing P tile by tile, or reading it from the
    forward's P (`p5`, input dtype, keys 0:p5.shape[-1], one query tile of every row). A row whose keys fit one key
    tile gets P = softmax(S) again, as the forward computed it; one whose keys span several, P = exp((S - max) -
    log-sum), subtracted one at a time. Both stay as exact as naive's softmax however large the scores: their
    sum, the log-sum-exp, is rounded at |lse| · 2⁻²⁴ (0.004 at scores of 10⁵), and exp(S - lse) carries that into
    every P of the row (as torch's CPU flash kernel does: dV up to 2.3× naive's error against fp64 at L 1500),
    while S - max is exact near the max and the log-sum is at most log Lk. With D = rowsum(P ⊙ dP) from such a P,
    a near one-hot row's dS grew from ~0 to 0.4 % of its dP (dK 26× naive's error at L 24).

    Only the key tiles of `tiles`' plan are computed. dk and dv accumulate in fp32 (O(L)); dq is written once
    per query tile when one key tile holds all of its keys (fused), else accumulated in an fp32 tile.
    dS = P ⊙ (dP − D) in fp32, where dP − D must be formed consistently, or a row that attends to a single
    key (P = 1, true dS = 0) gets a rounding error:
    - the row's keys fit one key tile (always in fused): D = rowsum(P ⊙ dP) from the very dP, rounded to the
      input dtype, that dS uses (naive's softmax backward does the same); such a row gets dS = 0 exactly, and
      so does a row whose dP is constant, since a forward's P of a half type is divided by its row sum first;
    - they span several: D = rowsum(dO ⊙ O) in fp32 (FlashAttention's), against dP computed in fp32.
    `dmask4` (a float mask's gradient, the mask's own shape as 4-D, fp32 or fp64, zeros): each tile's dS is added
    in, summed over the dims where the mask broadcasts (the scores' gradient is the mask's). `every_max`: a row
    whose keys fit one tile and whose scores are all -inf (masked or not: `TiledAttention._gradients`) gets P = 0.
    """
    b, hkv, g, lq, e = q5.shape
    lk, ev, dtype, dev = k4.shape[-2], v4.shape[-1], q5.dtype, q5.device
    half, work = dtype in HALF, working_dtype(dtype)
    q_tile, k_tile = min(tiling.q_tile, lq), min(tiling.k_tile, lk)
    plan = plan_tiles(tiles, tiling, b, g, dev)
    heads = plan.max_heads
    p_keys = None if p5 is None else (KeyTile(0, p5.shape[-1]),)  # the saved P is final: no mask to apply
    assert p5 is None or q_tile >= lq, "a saved P is read a whole row at a time"
    lse5 = None if lse is None else finite_or_zero(lse)  # fully masked rows: all scores -inf, P = 0
    dead5 = None if lse is None or (mask5 is None and not every_max) else lse[..., :1] == NEG_INF  # no finite score
    assert lse is not None or p5 is not None or not plan.multi_tile(), "rows across key tiles need the lse"
    dmask5 = None if dmask4 is None else (dmask4.unflatten(1, (hkv, g)) if dmask4.shape[1] == hkv * g
                                          else dmask4.unsqueeze(2))  # (B, Hkv, G, Lq, Lk), each dim full or 1
    delta = v32 = None
    if p5 is None and plan.multi_tile():  # some rows span several key tiles
        delta = (dout5.to(work) * out5.to(work)).sum(dim=-1, keepdim=True)  # (B, Hkv, G, Lq, 1)
        v32 = v4.to(work)  # (B, Hkv, Lk, Ev), a copy only for half types
    dq = torch.empty(q5.shape, dtype=dtype, device=dev)
    dk = torch.zeros((b, hkv, lk, e), dtype=work, device=dev)
    dv = torch.zeros((b, hkv, lk, ev), dtype=work, device=dev)
    tile = heads * g * q_tile * k_tile
    sbuf = torch.empty(tile, dtype=dtype, device=dev) if p5 is None else None  # S, then P, in the input dtype
    dpbuf = torch.empty(tile, dtype=dtype, device=dev)  # dP, then dS, in the input dtype
    pbuf = torch.empty(tile, dtype=torch.float32, device=dev) if half else sbuf  # fp32 P
    dsbuf = torch.empty(tile, dtype=torch.float32, device=dev) if half else dpbuf  # fp32 dS
    masker = TileMasker(mask5, is_causal, q_tile, dev, tiles.memo)
    widen, one_pass_ds, compact = choice(dev, "CAST_FIRST"), choice(dev, "SOFTMAX_BACKWARD"), compact_transposed(q5)
    for (bs, hs), key_rows in zip(plan.groups, plan.tiles):
        q4, do4, dq4 = flat(q5, bs, hs), flat(dout5, bs, hs), flat(dq, bs, hs)  # (heads, G, L, ·)
        k3, v3 = flat(k4, bs, hs), flat(v4, bs, hs)  # (heads, Lk, E), (heads, Lk, Ev)
        kt3, vt3 = k3.transpose(1, 2) if p5 is None else None, v3.transpose(1, 2)  # sliced per tile (Kᵀ: P not saved)
        dk3, dv3 = flat(dk, bs, hs), flat(dv, bs, hs)
        lse4 = None if lse5 is None else flat(lse5, bs, hs)  # (heads, G, Lq, 2)
        dead4 = None if dead5 is None else flat(dead5, bs, hs)
        p4 = None if p5 is None else flat(p5, bs, hs)  # (heads, G, Lq, keys)
        mask_g = None if mask5 is None else mask5[bs, hs]
        n = q4.shape[0]
        for i0, key_tiles in zip(range(0, lq, q_tile), key_rows):
            i1 = min(lq, i0 + q_tile)
            m = g * (i1 - i0)
            key_tiles = p_keys or key_tiles
            if not key_tiles:  # every key masked: no gradient reaches these queries
                dq4[:, :, i0:i1] = 0
                continue
            qt, dot = rows3(q4, i0, i1), rows3(do4, i0, i1)  # (heads, G·rows, E), (heads, G·rows, Ev)
            lse_t = None if lse4 is None else rows3(lse4, i0, i1)  # (heads, G·rows, 2): row max, log of the sum
            one_tile = len(key_tiles) == 1
            dq_acc = delta_t = dot32 = v32_3 = None
            if not one_tile:
                dq_acc = torch.zeros((n, m, e), dtype=work, device=dev)
                delta_t = rows3(flat(delta, bs, hs), i0, i1)  # (heads, G·rows, 1)
                dot32, v32_3 = dot.to(work), flat(v32, bs, hs)  # fp32 operands of dP
            for kt in key_tiles:
                j0, j1 = kt.j0, kt.j1
                dp, ds = take(dpbuf, n, m, j1 - j0), take(dsbuf, n, m, j1 - j0)
                if p4 is not None:  # the forward's P: rows i0:i1, keys j0:j1
                    pd = rows3(p4, i0, i1)[..., j0:j1]
                    p = _normalized_into(take(pbuf, n, m, j1 - j0), pd) if half else pd
                else:
                    sd, p = take(sbuf, n, m, j1 - j0), take(pbuf, n, m, j1 - j0)
                    torch.baddbmm(sd, qt, columns_t(kt3, j0, j1, compact), beta=0, alpha=scale, out=sd)
                    s = p.copy_(sd) if masker.float_mask and half else sd
                    if kt.masked:
                        masker.apply_ranges_(s, mask_g, i0, i1, j0, kt.masked)
                    if one_tile:  # every key of these rows: P is their softmax, as the forward computed it
                        dead = every_max or mask5 is not None and tiles.has_dead_rows(i0, i1)  # sees no key
                        if dead:  # from the forward's lse, or (none kept) from the masked scores
                            dead = rows3(dead4, i0, i1) if dead4 is not None else s.amax(-1, keepdim=True) == NEG_INF
                        _softmax_into(p, s, dead)
                    else:
                        minus_into(p, s, lse_t[..., :1], widen).sub_(lse_t[..., 1:]).exp_()  # P in fp32
                    pd = sd.copy_(p) if half else p  # P in the input dtype for the GEMMs
                accumulate(dv3[:, j0:j1], pd.transpose(1, 2), dot, 1.0, half)  # dV += Pᵀ dO
                if one_tile:  # dS = P ⊙ dP − P ⊙ rowsum(P ⊙ dP), dP = dO Vᵀ in the input dtype
                    torch.bmm(dot, columns_t(vt3, j0, j1, compact), out=dp)
                    if one_pass_ds:  # torch's softmax backward of fp32 dP and P; dS over dP (read before written)
                        dp32 = ds.copy_(dp) if half else ds  # fp32: ds is dp's tile
                        torch.ops.aten._softmax_backward_data.out(dp32, p, -1, p.dtype, grad_input=dp32)
                    else:
                        times_into(ds, p, dp, widen)
                        ds.addcmul_(p, ds.sum(dim=-1, keepdim=True), value=-1.0)
                else:  # dS = P ⊙ (dP − D), dP = dO Vᵀ in fp32
                    torch.bmm(dot32, v32_3[:, j0:j1].transpose(1, 2), out=ds).sub_(delta_t).mul_(p)
                if dmask5 is not None:
                    _add_mask_grad(dmask5, ds, bs, hs, g, (i0, i1), (j0, j1))
                dsd = dp.copy_(ds) if half else ds  # dS in the input dtype
                if dq_acc is None:  # one key tile: dQ = scale · dS K is final, written once in the input dtype
                    store_rows_(dq4, i0, i1, torch.baddbmm(qt, dsd, k3[:, j0:j1], beta=0, alpha=scale))
                else:
                    accumulate(dq_acc, dsd, k3[:, j0:j1], scale, half)
                accumulate(dk3[:, j0:j1], dsd.transpose(1, 2), qt, scale, half)  # dK += scale · dSᵀ Q
            if dq_acc is not None:
                store_rows_(dq4, i0, i1, dq_acc)
    return dq, dk, dv


def finite_or_zero(x: torch.Tensor) -> torch.Tensor:
    """x with ±inf as 0: the saved log-sum-exp of a fully masked row (-inf) subtracts nothing, so its P stays 0."""
    return torch.where(torch.isinf(x), torch.zeros_like(x), x)


def _add_mask_grad(dmask5: torch.Tensor, ds: torch.Tensor, bs: slice, hs: slice, g: int, rows: tuple[int, int],
                   keys: tuple[int, int]) -> None:
    """dmask5 (the mask's shape as (B, Hkv, G, Lq, Lk), each dim full or 1) += one tile's score gradient `ds`
    (the heads of `bs` × `hs`, G·rows, keys), summed over the dims where the mask broadcasts."""
    t = ds.view(bs.stop - bs.start, hs.stop - hs.start, g, rows[1] - rows[0], keys[1] - keys[0])
    dims = [d for d in range(5) if dmask5.shape[d] == 1 and t.shape[d] != 1]
    if dims:
        t = t.sum(dims, keepdim=True)
    where = (bs, hs, slice(None), slice(*rows), slice(*keys))
    dmask5[tuple(slice(None) if dmask5.shape[d] == 1 else w for d, w in enumerate(where))] += t


def _normalized_into(p: torch.Tensor, pd: torch.Tensor) -> torch.Tensor:
    """The saved P of the input dtype (fp16 or bf16), each row divided by its own sum, into the fp32 tile `p`.

    Rounding P to bf16 leaves a row's sum off 1 by up to 2⁻⁸ (fp16: 2⁻¹¹), the unit roundoff. dS = P ⊙ (dP −
    rowsum(P ⊙ dP)) is 0 wherever dP is constant along the row (every key's value the same) only when the row sums
    to 1: against the rounded P each score got dP·(1 − ΣP), and dQ and dK reached 0.2-0.3 where the exact gradient
    is 0 (naive's, whose softmax backward reads fp32 P: ~4e-5). Divided by its sum, the row is a distribution again
    and no farther from the exact P than the rounded one. A row with no key (all 0) stays 0. The sum and the
    product cost about 2 % of fused's bf16 backward at L 256 (torch's profiler, on the EPYC).
    """
    p.copy_(pd)
    return p.mul_(p.sum(dim=-1, keepdim=True).clamp_min_(torch.finfo(torch.float32).tiny).reciprocal_())


def _softmax_into(p: torch.Tensor, s: torch.Tensor, dead: torch.Tensor | bool) -> None:
    """P = softmax(s) into the fp32 tile `p` (through a copy for a score tile of the input dtype), rows `dead`
    (every key masked: a softmax of 0/0) set to 0."""
    torch.softmax(s if s.dtype == p.dtype else p.copy_(s), dim=-1, out=p)
    if dead is not False:
        p.masked_fill_(dead, 0.0)


class TiledAttention(torch.autograd.Function):
    """Any forward that returns (out, lse, P), with the tiled backward (recomputing P from lse, or reading P)."""

    @staticmethod
    def forward(ctx, query, key, value, attn_mask, is_causal, scale, forward_fn, tiling, tiles,  # type: ignore[override]
                nan_check):
        inp = SDPAInputs(query, key, value, attn_mask, 0.0, is_causal, scale, True)
        q5, k4, v4, mask5 = grouped(inp)
        out5, lse, p5 = forward_fn(q5, k4, v4, mask5, is_causal, scale, True)
        ctx.save_for_backward(query, key, value, attn_mask, out5, lse, p5)
        ctx.meta = (is_causal, scale, tiling, tiles, nan_check)
        return out5  # (B, Hkv, G, Lq, Ev), flattened outside: a view made here could not be written in place

    @staticmethod
    def backward(ctx, dout5):  # type: ignore[override]
        """The tiled backward, once differentiable: its out= ops build no graph, so with create_graph=True the
        gradients come from a node on q, k, v whose own backward is one clear error (`NoSecondDerivative`), as
        torch's flash kernels answer a second derivative."""
        create_graph = torch.is_grad_enabled()
        with torch.no_grad():
            grads = TiledAttention._gradients(ctx, dout5)
        if not create_graph:
            return grads
        query, key, value, attn_mask = ctx.saved_tensors[:4]
        return (*NoSecondDerivative.apply(query, key, value, attn_mask, *grads[:4]), *grads[4:])

    @staticmethod
    def _gradients(ctx, dout5):  # type: ignore[no-untyped-def]
        query, key, value, attn_mask, out5, lse, p5 = ctx.saved_tensors
        is_causal, scale, tiling, tiles, nan_check = ctx.meta
        q5, k4, v4, mask5 = grouped(SDPAInputs(query, key, value, attn_mask, 0.0, is_causal, scale, True))
        dmask4 = None
        if ctx.needs_input_grad[3]:  # a learned bias: its gradient in its own shape (a 2-D mask as (1, 1, Lq, Lk))
            dmask4 = torch.zeros((1,) * (4 - attn_mask.dim()) + tuple(attn_mask.shape),
                                 dtype=working_dtype(query.dtype), device=query.device)
        args = (q5, k4, v4, mask5, is_causal, scale, out5, lse, p5, dout5, tiling, tiles)
        dq, dk, dv = tiled_backward(*args, dmask4)
        if nan_check and math.isnan(dq.sum().item() + dv.sum().item()):  # a row of -inf scores from the data (as
            dq, dk, dv = tiled_backward(*args, None if dmask4 is None else dmask4.zero_(), every_max=True)  # fused's
            # forward): torch's dq and dv (dk is NaN there: 0 · -inf, in torch's too)
        dmask = None if dmask4 is None else dmask4.reshape(attn_mask.shape).to(attn_mask.dtype)
        return (dq.flatten(1, 2), dk.to(key.dtype), dv.to(value.dtype),
                dmask, None, None, None, None, None, None)


class NoSecondDerivative(torch.autograd.Function):
    """The gradients (dq, dk, dv, dmask or None) as outputs of a node on q, k, v and the mask that raises when it is
    differentiated: with create_graph=True a second derivative gets one clear error, as from torch's kernels."""

    @staticmethod
    def forward(ctx, query, key, value, attn_mask, *grads):  # type: ignore[override]
        return tuple(None if g is None else g.view_as(g) for g in grads)

    @staticmethod
    def backward(ctx, *_):  # type: ignore[override]
        raise RuntimeError("chunked and fused have no second derivative (their tiled backward builds no graph)")


def tiled_attention(inp: SDPAInputs, forward_fn: ForwardFn, tiling: Tiling, tiles: MaskTiles,
                    widen: bool = False, nan_check: bool = False) -> torch.Tensor:
    """Run `forward_fn`; when gradients are needed, wrap it in the tiled backward, tiled as `tiling` says and
    skipping what `tiles` (built from this call's mask) says is empty.

    `widen` (see `in_fp32`): an fp16 or bf16 call runs in fp32 and is rounded once at the end. `nan_check`
    (`compute.scores_may_be_inf`): where dQ or dV sums to NaN, the backward runs again with P = 0 in rows whose
    scores are all -inf.
    """
    if inp.is_empty:
        return empty_attention(inp)
    if widen and inp.query.dtype in HALF:
        mask = inp.attn_mask
        mask = mask.float() if mask is not None and mask.is_floating_point() else mask
        up = replace(inp, query=inp.query.float(), key=inp.key.float(), value=inp.value.float(), attn_mask=mask)
        return tiled_attention(up, forward_fn, tiling, tiles, nan_check=nan_check).to(inp.query.dtype)
    scale = inp.softmax_scale  # past fp32's range (where a GEMM's alpha cannot hold it): inf, as torch computes it
    if inp.query.dtype != torch.float64 and abs(scale) > torch.finfo(torch.float32).max:
        scale = math.copysign(math.inf, scale)
    if not ((inp.needs_grad or inp.mask_needs_grad) and torch.is_grad_enabled()):
        q5, k4, v4, mask5 = grouped(inp)
        return forward_fn(q5, k4, v4, mask5, inp.is_causal, scale, False)[0].flatten(1, 2)
    return TiledAttention.apply(inp.query, inp.key, inp.value, kept_for_backward(inp.attn_mask), inp.is_causal,
                                scale, forward_fn, tiling, tiles, nan_check).flatten(1, 2)  # (B, Hq, Lq, Ev)
