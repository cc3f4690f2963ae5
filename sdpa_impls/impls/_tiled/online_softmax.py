"""Tiled attention with online softmax (FlashAttention's algorithm) in plain PyTorch: chunked's forward, and the
tile helpers the backward (`backward`) shares with it.

Everything works on the grouped 5-D views of `tiles.grouped`: q (B, Hkv, G, Lq, E),
k (B, Hkv, Lk, E), v (B, Hkv, Lk, Ev), folded into 3-D GEMM operands (B·Hkv, G·rows, ·).
GEMMs run in the input dtype (fp16 where it could overflow: in fp32) with the softmax scale folded into their alpha; the
softmax arithmetic is fp32. Score tiles live in buffers allocated once per call and reused, so a
call never holds more than one tile of scores, and the allocator never page-faults per tile.
"""
from __future__ import annotations

import torch

from .tilemap import MaskTiles, Plan, Tiling
from .budget import choice, group_heads
from .tiles import (HALF, NEG_INF, TileMasker, columns_t, compact_transposed, flat, forward_views, rows3,
                    store_rows_, working_dtype)


def minus_into(p: torch.Tensor, s: torch.Tensor, x: torch.Tensor, widen: bool) -> torch.Tensor:
    """p = s − x into the fp32 tile `p`, from a score tile `s` of the input dtype (or fp32) and an fp32 column `x`;
    `widen` (the policy's `CAST_FIRST`): through a copy of `s` into `p`, then in place, instead of one mixed-dtype
    op."""
    if widen and s.dtype != p.dtype:
        return p.copy_(s).sub_(x)
    return torch.sub(s, x, out=p)


def take(buf: torch.Tensor, *shape: int) -> torch.Tensor:
    """A contiguous view of the first prod(shape) elements of a flat scratch buffer."""
    n = 1
    for s in shape:
        n *= s
    return buf[:n].view(shape)


def plan_tiles(tiles: MaskTiles, tiling: Tiling, b: int, g: int, dev: torch.device) -> Plan:
    """The plan a tiled loop of `tiling` follows (query and key tiles clipped to the call's lengths), for head
    groups whose fp32 score tiles fit the device's budget (`budget.tiling_for`). `prepare_inputs` calls it first,
    so a timed call finds it built."""
    key = (tiling.q_tile, tiling.k_tile, tiling.k_block, tiling.merge_runs, torch.get_num_threads())
    found = tiles.memo.get(key)
    if found is None:
        found = tiles.memo[key] = _plan_tiles(tiles, tiling, b, g, dev)
    return found  # type: ignore[return-value]


def _plan_tiles(tiles: MaskTiles, tiling: Tiling, b: int, g: int, dev: torch.device) -> Plan:
    q_tile, k_tile = min(tiling.q_tile, tiles.lq), min(tiling.k_tile, tiles.lk)
    k_block = k_tile if not tiling.merge_runs else tiling.k_block
    clipped = Tiling(q_tile, k_tile, k_block, tiling.merge_runs)
    return tiles.plan(clipped, b, group_heads(dev, b * tiles.hkv, g * q_tile * k_tile * 4))


def chunked_forward(q5: torch.Tensor, k4: torch.Tensor, v4: torch.Tensor, mask5: torch.Tensor | None,
                    is_causal: bool, scale: float, with_lse: bool, q_tile: int, k_tile: int, tiles: MaskTiles,
                    ) -> tuple[torch.Tensor, torch.Tensor | None, None]:
    """Query tiles × key tiles with a running max and sum; never more than one (q_tile × k_tile) score tile.
    Only the key tiles of `tiles`' plan are computed; the mask is applied only where the plan says."""
    b, hkv, g, lq, e = q5.shape
    lk, ev, dtype, dev = k4.shape[-2], v4.shape[-1], q5.dtype, q5.device
    half, work = dtype in HALF, working_dtype(dtype)  # work: fp32 (fp64 for fp64 inputs)
    lowest = torch.finfo(work).min  # a row max of -inf as a shift: exp(-inf - lowest) = 0, where -inf - -inf is NaN
    plan = plan_tiles(tiles, Tiling(q_tile, k_tile, k_tile, False), b, g, dev)  # as prepare_inputs built it
    q_tile, k_tile = min(q_tile, lq), min(k_tile, lk)
    heads = plan.max_heads
    out = torch.empty((b, hkv, g, lq, ev), dtype=dtype, device=dev)
    lse = torch.empty((b, hkv, g, lq, 2), dtype=work, device=dev) if with_lse else None  # (row max, log of sum)
    sbuf = torch.empty(heads * g * q_tile * k_tile, dtype=dtype, device=dev)  # S, then P, in the input dtype
    pbuf = torch.empty_like(sbuf, dtype=torch.float32) if half else sbuf  # fp32 P
    abuf = torch.empty(heads * g * q_tile * ev, dtype=work, device=dev)  # output accumulator
    masker = TileMasker(mask5, is_causal, q_tile, dev, tiles.memo)
    widen, compact = choice(dev, "CAST_FIRST"), compact_transposed(q5)
    for (bs, hs), key_rows in zip(plan.groups, plan.tiles):
        q4, out4, kt3, v3, mask_g = forward_views(q5, k4, v4, out, mask5, bs, hs)
        n = q4.shape[0]
        for i0, key_tiles in zip(range(0, lq, q_tile), key_rows):
            i1 = min(lq, i0 + q_tile)
            m = g * (i1 - i0)
            if not key_tiles:  # every key of these rows is masked: zeros, log-sum-exp -inf
                out4[:, :, i0:i1] = 0
                if lse is not None:
                    flat(lse, bs, hs)[:, :, i0:i1] = NEG_INF
                continue
            qt = rows3(q4, i0, i1)  # (heads, G·rows, E)
            run_max = run_sum = None
            acc = take(abuf, n, m, ev)  # fp32 (heads, G·rows, Ev)
            for kt in key_tiles:
                j0, j1 = kt.j0, kt.j1
                sd, p = take(sbuf, n, m, j1 - j0), take(pbuf, n, m, j1 - j0)  # (heads, G·rows, keys)
                torch.baddbmm(sd, qt, columns_t(kt3, j0, j1, compact), beta=0, alpha=scale, out=sd)
                s = p.copy_(sd) if masker.float_mask and half else sd  # a float mask is added in fp32, as naive does
                if kt.masked:
                    masker.apply_ranges_(s, mask_g, i0, i1, j0, kt.masked)
                new_max = s.amax(dim=-1, keepdim=True).to(work)
                if run_max is not None:
                    new_max = torch.maximum(run_max, new_max)
                safe_max = new_max.clamp_min_(lowest)  # -inf: every score so far -inf (masked, or from the data)
                minus_into(p, s, safe_max, widen).exp_()  # unnormalized fp32 P
                pv = p if not half else sd.copy_(p)
                if run_max is None:  # first key tile: nothing to rescale
                    run_sum = p.sum(dim=-1, keepdim=True)
                    _matmul_into(acc, pv, v3[:, j0:j1], half)
                else:
                    alpha = torch.sub(run_max, safe_max).exp_()  # rescales what was summed under the old max
                    run_sum.mul_(alpha).add_(p.sum(dim=-1, keepdim=True))
                    accumulate(acc.mul_(alpha), pv, v3[:, j0:j1], 1.0, half)
                run_max = new_max
            assert run_max is not None and run_sum is not None
            denom = torch.where(run_sum == 0, torch.ones_like(run_sum), run_sum)
            store_rows_(out4, i0, i1, acc.div_(denom))
            if lse is not None:  # -inf for rows without a finite score (their max was clamped, their sum is 0)
                run_max.masked_fill_(run_sum == 0, NEG_INF)
                store_rows_(flat(lse, bs, hs), i0, i1, torch.cat([run_max, torch.log(run_sum)], dim=-1))
    return out, lse, None


def _matmul_into(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, half: bool) -> None:
    """out = a @ b into an fp32 tile (through a tile of the input dtype for half types)."""
    if half:
        out.copy_(torch.bmm(a, b))
    else:
        torch.bmm(a, b, out=out)


def accumulate(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor, alpha: float, half: bool) -> None:
    """acc += alpha · a @ b with an fp32 accumulator: inside the GEMM for fp32, one add for half types."""
    if half:
        acc.add_(torch.bmm(a, b), alpha=alpha)
    else:
        acc.baddbmm_(a, b, alpha=alpha)
