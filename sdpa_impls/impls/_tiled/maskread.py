"""Reading a dense mask for the tile map: the state of every tile (EMPTY, PARTIAL, FULL) and the query rows that
see no key. Each is one pass over the mask along its contiguous key dim, whatever the mask's strides and
broadcasts; a model hands every layer the same mask, which `tilemap.recent_derived` reads once while unchanged.
"""
from __future__ import annotations

import math

import torch

from .tiles import causal_keep

EMPTY, PARTIAL, FULL = 0, 1, 2
DEAD_ROWS_BLOCK_ELEMENTS = 1 << 24  # mask elements read at once when finding rows that see no key


def _blocks(x: torch.Tensor, size: int, dim: int, reduce: str) -> torch.Tensor:
    """`reduce` (amax, amin, sum) over consecutive blocks of `size` along `dim` (the last block may be shorter), as
    views: no copy of `x` whatever its strides. A mask reduced along its rows first (its last, contiguous dim) is
    read in milliseconds, where bool any/all over the query rows first took 0.9 s for 64 MB on a 2-vCPU Xeon."""
    n, op = x.shape[dim], getattr(torch, reduce)
    full = n // size * size
    parts = [op(x.narrow(dim, 0, full).unfold(dim, size, size), dim=-1)] if full else []
    if full < n:
        parts.append(op(x.narrow(dim, full, n - full), dim=dim, keepdim=True))
    return torch.cat(parts, dim=dim)


TRUE_WORD = int.from_bytes(b"\x01" * 8, "little")  # eight True bytes read as one int64


def _key_blocks(m: torch.Tensor, k_block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(some key kept, every key kept) per key block of a uint8 mask, as uint8. Where the blocks are whole int64
    words, one sum of each block's words answers both: each of a word's 8 bytes adds up its own keys (at most 255
    words a block: no byte carries), so a sum is 0 where no key is kept and TRUE_WORD × words where all are (2.9 ms
    for a 64 MB mask on a 2-vCPU Xeon, where amax and amin of the bytes took 25 ms each at 64-key blocks, and amin
    of the words 168 ms)."""
    if m.shape[-1] <= 1:  # broadcast over the keys: nothing to reduce
        return m, m
    try:
        words = m.view(torch.int64) if k_block % 8 == 0 and k_block // 8 <= 255 else None
    except RuntimeError:  # rows of no whole number of words, or not contiguous along them
        words = None
    if words is None:
        return _blocks(m, k_block, -1, "amax"), _blocks(m, k_block, -1, "amin")
    sums = _blocks(words, k_block // 8, -1, "sum")
    per_block = torch.full((sums.shape[-1],), k_block // 8, dtype=torch.int64, device=m.device)
    per_block[-1] = (m.shape[-1] - (sums.shape[-1] - 1) * k_block) // 8  # the last block may be shorter
    every = sums == per_block * TRUE_WORD  # int64 products wrap as the sums do
    return (sums != 0).view(torch.uint8), every.view(torch.uint8)


def block_states(mask: torch.Tensor | None, is_causal: bool, hkv: int, lq: int, lk: int,
                 q_block: int, k_block: int) -> torch.Tensor:
    """EMPTY / PARTIAL / FULL for every (mask batch, kv head, query block, key block): (Bm, Hm, nQ, nK) uint8 on
    the CPU, where Bm and Hm are 1 where the mask broadcasts. A bool mask is read once, as uint8 (amax: some key
    kept, amin: every key kept), key blocks first (temporaries of 1/k_block of the mask); a float mask has no empty
    tiles and is applied everywhere (PARTIAL); top-left causal empties the tiles above the diagonal and makes the
    ones it crosses PARTIAL."""
    nq, nk = math.ceil(lq / q_block), math.ceil(lk / k_block)
    if mask is None or mask.dtype != torch.bool:
        states = torch.full((1, 1, nq, nk), FULL if mask is None else PARTIAL, dtype=torch.uint8)
    else:
        m4 = mask[(None,) * (4 - mask.dim())].view(torch.uint8)  # (Bm, Hq or 1, Lq or 1, Lk or 1)
        bm, hm = m4.shape[0], m4.shape[1]
        hg = hkv if hm > 1 else 1
        m5 = m4.unflatten(1, (hg, hm // hg))  # (Bm, Hg, G, Lq|1, Lk|1): the G query heads of a kv head together
        found = []
        for x, reduce in zip(_key_blocks(m5, k_block), ("amax", "amin")):
            x = _blocks(x, q_block, -2, reduce) if x.shape[-2] > 1 else x
            found.append(getattr(torch, reduce)(x, dim=2).expand(bm, hg, nq, nk).cpu())
        some, every = found
        states = torch.where(every.bool(), FULL, torch.where(some.bool(), PARTIAL, EMPTY)).to(torch.uint8)
    if is_causal:
        i0 = torch.arange(nq)[:, None] * q_block
        i1 = torch.clamp(i0 + q_block, max=lq)
        j0 = torch.arange(nk)[None, :] * k_block
        j1 = torch.clamp(j0 + k_block, max=lk)
        above = j0 >= i1  # every key after every row of the tile
        crosses = (j1 - 1 > i0) & ~above
        states = torch.where(above, EMPTY, torch.where(crosses & (states == FULL), PARTIAL, states)).to(torch.uint8)
    return states


def dead_rows(mask: torch.Tensor | None, is_causal: bool, lq: int, lk: int) -> torch.Tensor:
    """(Lq,) bool on the CPU: True for query i where, in some batch row and head, every key is masked (a bool mask's
    False, a float mask's -inf, past the top-left causal diagonal). Such a row's softmax is 0/0; its answer is zeros.
    Read a block of query rows at a time; no mask, or causal alone, leaves every row a key (row i sees key 0)."""
    if mask is None or lk == 0:
        return torch.zeros(lq, dtype=torch.bool)
    m4 = mask[(None,) * (4 - mask.dim())]  # (Bm, Hm, Lq|1, Lk|1)
    bm, hm = m4.shape[0], m4.shape[1]
    step = max(1, DEAD_ROWS_BLOCK_ELEMENTS // max(1, bm * hm * lk))
    out = torch.empty(lq, dtype=torch.bool)
    for i0 in range(0, lq, step):
        i1 = min(lq, i0 + step)
        rows = m4[..., i0:i1, :] if m4.shape[-2] > 1 else m4
        seen = rows if rows.dtype == torch.bool else rows != float("-inf")  # (Bm, Hm, rows|1, Lk|1)
        seen = seen.expand(bm, hm, i1 - i0, lk)
        if is_causal:
            seen = seen & causal_keep(i0, i1, 0, lk, seen.device)
        out[i0:i1] = (~seen.any(dim=-1)).any(dim=1).any(dim=0).cpu()
    return out
