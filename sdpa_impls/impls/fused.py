"""fused: the fastest exact attention we write in plain PyTorch — query tiles, full-width rows, in-place softmax."""
from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch

from ._tiled.compute import (LOG2_E, in_fp32, scores_may_be_inf, unshifted_base, unshifted_exp, unshifted_tile,
                             warm_exp)
from ._tiled.backward import tiled_attention
from ._tiled.online_softmax import plan_tiles, take
from ..protocol import WITH_FP64, Implementation, SDPAInputs, Support, empty_attention, with_op
from ..registry import register
from ._tiled.tilemap import MaskTiles, Plan, Tiling
from ._tiled.budget import choice, group_heads, tiling_for
from ._tiled.tiles import (HALF, NEG_INF, TileMasker, columns_t, compact_transposed, flat, forward_views,
                           rows3, store_rows_, working_dtype)

KEY_BLOCK = 64  # keys per block of the tile map: how finely a mask's empty and full keys are told apart


def tile_shape(device: torch.device, b: int, hkv: int, g: int, lq: int, lk: int, itemsize: int,
               whole: bool = False) -> tuple[int, int]:
    """(query rows, kv heads) per score tile of `itemsize`-byte scores, from the device's tiling policy
    (`budget.CpuTiling.fused_tile`: cache-sized; `budget.CudaTiling.fused_tile`: up to 1024 rows of every head);
    `whole`: an inference forward whose tiles compute every key."""
    return tiling_for(device).fused_tile(b, hkv, g, lq, lk, itemsize, whole)


def fused_plan(tiles: MaskTiles, dev: torch.device, b: int, g: int, itemsize: int,
               inference: bool = False, unshifted: bool = False) -> tuple[int, Plan, int]:
    """(query rows per tile, plan, keys per score tile) of a fused forward whose score tiles hold `itemsize`-byte
    scores (`inference`: no log-sum-exp or P kept for a backward; `unshifted`: P = exp(S) with no row max, so a row
    with no key to skip is computed in key blocks, `compute.unshifted_tile`); worked out once per call shape and
    thread count (a timed call only looks it up). Keys per tile: every key of the row but in that case, and in an
    inference forward with a mask, the most keys a tile of its plan computes (`widened`)."""
    whole = inference and tiles.mask is None and not tiles.is_causal
    blocked = whole and unshifted
    narrow = inference and tiles.mask is not None
    key = (itemsize, torch.get_num_threads(), whole, blocked, narrow)
    found = tiles.memo.get(key)
    if found is None:
        if blocked:
            rows, heads, keys = unshifted_tile(dev, b, tiles.hkv, g, tiles.lq, tiles.lk, itemsize)
        else:
            (rows, heads), keys = tile_shape(dev, b, tiles.hkv, g, tiles.lq, tiles.lk, itemsize, whole), tiles.lk
        if narrow:
            rows, heads = widened(tiles, dev, b, g, itemsize, rows, heads)
        plan = tiles.plan(Tiling(rows, tiles.lk, KEY_BLOCK, True), b, heads)
        if narrow:  # the score buffers as wide as the widest tile, not the whole row of keys
            keys = max((sum(kt.j1 - kt.j0 for kt in row) for group in plan.tiles for row in group), default=1)
        found = tiles.memo[key] = (rows, plan, max(keys, 1))
    return found  # type: ignore[return-value]


def widened(tiles: MaskTiles, dev: torch.device, b: int, g: int, itemsize: int, rows: int,
            heads: int) -> tuple[int, int]:
    """(query rows, kv heads) of a masked inference forward's tiles (the policy's WIDEN_MASKED): the rows doubled
    while a tile of them, as wide as the most keys such a tile computes (`TileMap.widest`), still fits the policy's
    tile for that many keys. `tile_shape` sizes a tile for every key of its rows; a 512-key window at L 8192
    computes 1/16 of them, and tiles of 8× the rows cut the calls and ops per key by as much (fp32, 1 thread of an
    AVX2 EPYC: 0.33 → 0.17 of the causal call's time). The map at `rows` is read from the mask, and each coarser one
    whose rows are a multiple of it is derived from it (`TileMap.coarsened`); a last step to L itself, where L is no
    such multiple, reads the mask again. A step past the policy's most rows for any width is not tried, so its map
    is never built. Where the policy does not widen (CUDA), the rows stay and only the score buffers narrow."""
    if not choice(dev, "WIDEN_MASKED"):
        return rows, heads
    ceiling = tile_shape(dev, b, tiles.hkv, g, tiles.lq, 1, itemsize)[0]  # the most rows of the narrowest tile
    tiles.get(rows, KEY_BLOCK, True)
    while rows < tiles.lq:
        more = min(tiles.lq, 2 * rows)
        if more > ceiling:
            break
        width = tiles.get(more, KEY_BLOCK, True).widest() or 1
        if more > tile_shape(dev, b, tiles.hkv, g, tiles.lq, width, itemsize)[0]:
            break
        rows, heads = more, group_heads(dev, b * tiles.hkv, more * g * width * itemsize)
    return rows, heads


def fused_forward(q5: torch.Tensor, k4: torch.Tensor, v4: torch.Tensor, mask5: torch.Tensor | None,
                  is_causal: bool, scale: float, with_lse: bool, tiles: MaskTiles, unshifted: bool = False,
                  log2: bool = False, lse_wanted: bool = True, nan_check: bool = False
                  ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """`tiles_forward`; with `nan_check` (`compute.scores_may_be_inf`: a row's scores could all be -inf from the
    data, not from a mask), again with every row's max taken where the answer's sum is NaN, so such a row gets 0 as
    from torch's SDPA, where torch.softmax gave 0/0. Input NaNs stay NaN, as in torch."""
    args = (q5, k4, v4, mask5, is_causal, scale, with_lse, tiles, unshifted, log2, lse_wanted)
    found = tiles_forward(*args)
    if nan_check and math.isnan(found[0].sum().item()):  # inf - inf is NaN too: then a needless rerun
        found = tiles_forward(*args, every_max=True)
    return found


def tiles_forward(q5: torch.Tensor, k4: torch.Tensor, v4: torch.Tensor, mask5: torch.Tensor | None,
                  is_causal: bool, scale: float, with_lse: bool, tiles: MaskTiles, unshifted: bool = False,
                  log2: bool = False, lse_wanted: bool = True, every_max: bool = False
                  ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Per query tile: S = scale·Q Kᵀ (one GEMM per run of non-empty key blocks, input dtype), torch.softmax in
    place, O = P V (one GEMM per run).

    torch's CPU/CUDA softmax kernel computes in fp32 internally and rounds P once, exactly as naive's
    fp32 softmax followed by the cast. Only the key blocks that `tiles`' plan keeps are computed (causal: none
    past the tile's last row), and the mask is applied only to its partial blocks.
    Training (`with_lse`): when one score tile holds every head and row, that tile is P itself, and it is
    returned for the backward instead of each row's max and log-sum (`lse`; no recomputation, and no more memory
    than the tile the backward would allocate again); otherwise `lse` is returned where the backward's plan needs it
    (`lse_wanted`: some row's keys span several key runs), else nothing: a row whose keys fit one tile gets its P
    from the softmax again (`backward.tiled_backward`). An fp32 copy of the tile is
    made only when `lse` is needed or a float mask is added; where the device's policy says
    `SOFTMAX_FROM_HALF` (fp16 without a float mask), the softmax itself reads the fp16 tile and writes fp32 P, and
    the mask and the row max work on the fp16 tile (exact: adding 0 or -inf, and a max, round nothing).
    `unshifted` (`compute.unshifted_exp`, fp32 inference only): P = exp(S) in place with no row max, then P V and
    the row sums of P, by which the tile's output is divided; with `log2` (`compute.unshifted_base`) the score GEMM
    writes S · log2 e and P = exp2 of that. `every_max`: every row's max is taken, and a row whose max is -inf
    (no finite score, masked or not) gets 0.
    """
    b, hkv, g, lq, e = q5.shape
    lk, ev, dtype, dev = k4.shape[-2], v4.shape[-1], q5.dtype, q5.device
    float_mask = mask5 is not None and mask5.dtype != torch.bool
    half = dtype in HALF
    unshifted = unshifted and dtype == torch.float32 and not with_lse and not float_mask
    log2 = log2 and unshifted
    alpha = scale * LOG2_E if log2 else scale
    rows, plan, keys = fused_plan(tiles, dev, b, g, 4 if half and (with_lse or float_mask) else q5.element_size(),
                                  not with_lse, unshifted)
    blocked = unshifted and mask5 is None and not is_causal  # fused_plan's key blocks of a row with no key to skip
    heads = plan.max_heads
    first = plan.tiles[0][0]
    keep_p = with_lse and rows >= lq and len(plan.groups) == 1 and len(first) == 1 and first[0].j0 == 0
    with_lse = with_lse and not keep_p and lse_wanted
    need_f32 = half and (with_lse or float_mask)
    from_half = need_f32 and not float_mask and dtype == torch.float16 and choice(dev, "SOFTMAX_FROM_HALF")
    compact = compact_transposed(q5)
    out = torch.empty((b, hkv, g, lq, ev), dtype=dtype, device=dev)
    lse = torch.empty((b, hkv, g, lq, 2), dtype=working_dtype(dtype), device=dev) if with_lse else None
    masker = TileMasker(mask5, is_causal, rows, dev, tiles.memo)
    sbuf = torch.empty(heads * g * rows * keys, dtype=dtype, device=dev)
    fbuf = torch.empty(heads * g * rows * keys, dtype=torch.float32, device=dev) if need_f32 else sbuf
    obuf = torch.empty(heads * g * rows * ev, dtype=dtype, device=dev)  # a contiguous GEMM output is faster
    # than writing into the strided rows of `out` (fp32, L=2048, E=64: 25 vs 30 ms for all P V GEMMs)
    for (bs, hs), key_rows in zip(plan.groups, plan.tiles):
        q4, out4, kt3, v3, mask_g = forward_views(q5, k4, v4, out, mask5, bs, hs)
        n = q4.shape[0]
        for i0, key_tiles in zip(range(0, lq, rows), key_rows):
            i1 = min(lq, i0 + rows)
            m = g * (i1 - i0)
            if not key_tiles:  # every key of these rows is masked: zeros, log-sum-exp -inf
                out4[:, :, i0:i1] = 0
                if lse is not None:
                    flat(lse, bs, hs)[:, :, i0:i1] = NEG_INF
                continue
            qt = rows3(q4, i0, i1)
            if blocked and keys < lk:  # unshifted, no key to skip: key blocks, each on its own (no row max to carry)
                _unshifted_blocks(qt, kt3, v3, alpha, log2, keys, sbuf, take(obuf, n, m, ev), out4[:, :, i0:i1],
                                  compact)
                continue
            one = len(key_tiles) == 1  # one run of keys (every structure): a contiguous tile, no column slices
            cols = [0]  # where each key tile's columns start in the score tile
            for kt in key_tiles:
                cols.append(cols[-1] + kt.j1 - kt.j0)
            sd = take(sbuf, n, m, cols[-1])  # (heads, G·rows, keys of the plan)
            for kt, c in zip(key_tiles, cols):
                _scores_into(sd, c, qt, columns_t(kt3, kt.j0, kt.j1, compact), alpha, one)
            pf = take(fbuf, n, m, cols[-1]) if need_f32 else sd  # where P is written: fp32 when needed
            s = sd if from_half or not need_f32 else pf.copy_(sd)
            if unshifted:  # exp(S) of bounded scores, then masked keys to 0 (no -inf meets exp)
                s.exp2_() if log2 else s.exp_()
            for kt, c in zip(key_tiles, cols):
                if kt.masked:
                    masker.apply_ranges_(s if one else s[..., c:c + kt.j1 - kt.j0], mask_g, i0, i1, kt.j0, kt.masked,
                                         unshifted)
            dead_here = every_max or mask5 is not None and tiles.has_dead_rows(i0, i1)  # from the mask, before a call
            if unshifted:
                _unshifted_tile(s, v3, key_tiles, cols, take(obuf, n, m, ev), out4[:, :, i0:i1], dead_here)
                continue
            row_max = s.amax(dim=-1, keepdim=True) if (with_lse or dead_here) else None
            if from_half:  # fp16 scores into fp32 P: one kernel on CUDA
                p = torch.softmax(s, dim=-1, dtype=pf.dtype, out=pf)
            else:
                p = torch.softmax(s, dim=-1, out=s)
            if p.dtype != dtype:
                p = sd.copy_(p)
            dead = row_max == NEG_INF if dead_here else None  # every key masked: softmax gave 0/0 = NaN there
            if dead is not None:  # P of those rows is 0 before any GEMM reads it: a GEMM may spread a NaN row
                p.masked_fill_(dead, 0.0)  # into others (oneDNN's AMX bf16 kernels do), and O, dQ, dK, dV get 0
            o = _pv_into(take(obuf, n, m, ev), p, v3, key_tiles, cols)  # (heads, G·rows, Ev)
            if lse is not None:  # max P = 1 / Σ exp(s - max): (max, -log(max P)), fp32 (fp64 inputs: fp64)
                assert row_max is not None
                lse_t = torch.cat([row_max.to(lse.dtype), torch.log(pf.amax(dim=-1, keepdim=True)).neg_()], dim=-1)
                if dead is not None:  # no key: -inf (the backward's P = exp(S - max - log sum) is then 0)
                    lse_t = torch.where(dead, NEG_INF, lse_t)
                store_rows_(flat(lse, bs, hs), i0, i1, lse_t)
            store_rows_(out4, i0, i1, o)
    p_keys = first[0].j1 if keep_p else 0
    return out, lse, sbuf[:b * hkv * g * lq * p_keys].view(b, hkv, g, lq, p_keys) if keep_p else None


def _unshifted_tile(p: torch.Tensor, v3: torch.Tensor, key_tiles: list, cols: list[int], o: torch.Tensor,
                    out: torch.Tensor, dead: bool) -> None:
    """O of one tile `p` of unnormalized P = exp(S) (masked keys 0) into `out` (heads, G, rows, Ev): P V in `o`,
    divided by the row sums of P. A row with every key masked (`dead`) has sum 0 and P V 0, and gets 0. (A column
    of ones beside V, for the sums from the GEMM, was no faster at L 2048 and slower with a window mask at L 8192,
    where V was copied on every call and the GEMMs are narrow: docs/records/2026-11-28-xeon-amx-unshifted.md.)"""
    total = p.sum(dim=-1, keepdim=True)
    _pv_into(o, p, v3, key_tiles, cols)
    if dead:
        total = torch.where(total == 0, 1.0, total)
    _divide_into(out, o, total)


def _unshifted_blocks(qt: torch.Tensor, kt3: torch.Tensor, v3: torch.Tensor, alpha: float, log2: bool, keys: int,
                      sbuf: torch.Tensor, o: torch.Tensor, out: torch.Tensor, compact: bool) -> None:
    """O of one row tile `qt` (heads, G·rows, E) over every key, `keys` at a time: P = exp(S) of each block (exp2 of
    S · log2 e with `log2`, `alpha` the score GEMM's factor), its row sums and its P V added up in fp32, then O
    divided by the sums once into `out` (heads, G, rows, Ev). With no row max subtracted, no block rescales another."""
    n, m, lk = qt.shape[0], qt.shape[1], kt3.shape[-1]
    total = None
    for j0 in range(0, lk, keys):
        j1 = min(lk, j0 + keys)
        s = take(sbuf, n, m, j1 - j0)
        torch.baddbmm(s, qt, columns_t(kt3, j0, j1, compact), beta=0, alpha=alpha, out=s)
        s.exp2_() if log2 else s.exp_()
        if total is None:
            total = s.sum(dim=-1, keepdim=True)
            torch.bmm(s, v3[:, j0:j1], out=o)
        else:
            total.add_(s.sum(dim=-1, keepdim=True))
            o.baddbmm_(s, v3[:, j0:j1])
    assert total is not None
    _divide_into(out, o, total)


def _divide_into(out: torch.Tensor, o: torch.Tensor, total: torch.Tensor) -> None:
    """out (heads, G, rows, Ev) = o (heads, G·rows, Ev) / total (heads, G·rows, 1): the unnormalized P V divided
    by the row sums of P."""
    torch.div(o.unflatten(1, out.shape[1:3]), total.unflatten(1, out.shape[1:3]), out=out)


def _pv_into(o: torch.Tensor, p: torch.Tensor, v3: torch.Tensor, key_tiles: list, cols: list[int]) -> torch.Tensor:
    """o = P V for a score tile whose key runs `key_tiles` lie side by side at columns `cols`: one GEMM for one
    run (a contiguous tile, no column slices), else one per run, accumulated."""
    if len(key_tiles) == 1:
        return torch.bmm(p, v3[:, key_tiles[0].j0:key_tiles[0].j1], out=o)
    for t, (kt, c) in enumerate(zip(key_tiles, cols)):
        pv = (p[..., c:c + kt.j1 - kt.j0], v3[:, kt.j0:kt.j1])
        torch.bmm(*pv, out=o) if t == 0 else o.baddbmm_(*pv)
    return o


def _scores_into(sd: torch.Tensor, c: int, qt: torch.Tensor, kt: torch.Tensor, scale: float, whole: bool) -> None:
    """scale · Q Kᵀ into columns c: of the score tile `sd` (`whole`: all of it; with several runs of keys side by
    side, a strided destination, which torch fills through a copy)."""
    dst = sd if whole else sd[..., c:c + kt.shape[-1]]
    torch.baddbmm(dst, qt, kt, beta=0, alpha=scale, out=dst)


@register
class Fused(Implementation):
    name = "fused"
    description = "query-tiled GEMMs with scale folded in, in-place torch.softmax on cache-sized tiles, causal skip"
    support = Support(dtypes=WITH_FP64, mask_grad=True, func_transforms=False)  # tiles written out=
    eager = True  # torch.compile of a caller: a graph break here (its tile loop with out= ops is not traceable)

    def forward(self, inp: SDPAInputs) -> torch.Tensor:
        return self.prepare_inputs(inp)()

    def prepare_inputs(self, inp: SDPAInputs) -> Callable[[], torch.Tensor]:
        if inp.is_empty:
            return lambda: empty_attention(inp)
        q, k = inp.query, inp.key
        b, g, dev = k.shape[0], q.shape[1] // k.shape[1], q.device
        warm_exp(dev)
        tiles = MaskTiles.of(inp)  # which tiles the mask leaves empty, full or partial: derived here, once
        tiles.has_dead_rows(0, tiles.lq)  # and which query rows see no key (built once, here)
        widen, computes = in_fp32(inp, 1)  # P is normalized before P V: each output is bounded by max|v|
        unshifted = not inp.needs_grad and unshifted_exp(inp, q.dtype == torch.float32 or widen)
        log2 = unshifted and unshifted_base(dev).log2
        computes = ", ".join(filter(None, [computes, f"unshifted exp{'2' if log2 else ''}" if unshifted else ""]))
        half = q.dtype in HALF and not widen
        wide = 4 if widen else q.element_size()  # the bytes of a score the forward computes in fp32 or fp64
        float_mask = inp.mask_kind == "float"
        rows, _ = tile_shape(dev, b, k.shape[1], g, q.shape[2], k.shape[2], 4)
        tiling = Tiling(rows, k.shape[2], KEY_BLOCK, True)  # backward: full-width rows of key blocks
        dtypes = (q.dtype, torch.float32)  # the score tiles' dtypes: the input's, fp32 where the softmax needs it
        # the plans a timed call looks up: the inference forward's (a call under no_grad too), and for training the
        # forward's (fp32 score tiles) and the backward's
        fwd_rows, _, _ = fused_plan(tiles, dev, b, g, (4 if float_mask else 2) if half else wide, True, unshifted)
        TileMasker.warm(tiles.memo, inp.is_causal, fwd_rows, dev, dtypes, unshifted)
        lse_wanted = True
        if inp.needs_grad or inp.mask_needs_grad:
            train_rows, _, _ = fused_plan(tiles, dev, b, g, max(4, wide))
            TileMasker.warm(tiles.memo, inp.is_causal, train_rows, dev, dtypes)
            lse_wanted = plan_tiles(tiles, tiling, b, g, dev).multi_tile()  # else the backward needs no lse
            TileMasker.warm(tiles.memo, inp.is_causal, min(rows, q.shape[2]), dev, dtypes)
        nan_check = scores_may_be_inf(inp)  # a row of -inf scores from the data: checked for (one sum) only then
        forward = functools.partial(fused_forward, tiles=tiles, unshifted=unshifted, log2=log2,
                                    lse_wanted=lse_wanted, nan_check=nan_check)
        return with_op(lambda: tiled_attention(inp, forward, tiling, tiles, widen, nan_check), computes)
