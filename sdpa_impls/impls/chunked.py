"""chunked: FlashAttention's online softmax over query × key tiles; forward and backward memory O(L)."""
from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from ._tiled.compute import in_fp32, scores_may_be_inf, warm_exp
from ._tiled.backward import tiled_attention
from ._tiled.online_softmax import chunked_forward, plan_tiles
from ..protocol import WITH_FP64, Implementation, SDPAInputs, Support, with_op
from ..registry import register
from ._tiled.budget import tiling_for
from ._tiled.tilemap import EMPTY, MaskTiles, Tiling
from ._tiled.tiles import TileMasker


def tile_size(device: torch.device, heads: int) -> tuple[int, int]:
    """(query rows, keys) per tile for `heads` (B·Hq) heads, from the device's tiling policy (`budget.CpuTiling.
    chunked_tile`: 128 rows, keys to fill the cache budget; `budget.CudaTiling.chunked_tile`: 1024 × 1024)."""
    return tiling_for(device).chunked_tile(heads)


TILE_COST_KEYS = 128  # one more key tile costs about as much as this many more keys of score work


def narrowest_useful(tiles: MaskTiles, k_tile: int, q_tile: int) -> int:
    """The key tile for a bool mask: `k_tile`, or a half or a quarter of it (at least 128 keys) where the mask's
    empty tiles then cover enough more keys to pay for the extra tiles (a 512-key window inside 1024-key tiles
    computes about 1.5k keys per query tile; inside 256-key tiles, about 768)."""
    def cost(k: int) -> float:
        live = int((tiles.get(q_tile, k, False).states != EMPTY).sum())
        return live * (min(k, tiles.lk) + TILE_COST_KEYS)  # a tile is at most Lk keys wide

    candidates = [k for k in (k_tile, k_tile // 2, k_tile // 4) if k >= 128]
    return min(candidates, key=lambda k: (cost(k), -k))


@register
class Chunked(Implementation):
    name = "chunked"
    description = "online softmax over query×key tiles; custom backward recomputes tiles from the log-sum-exp"
    support = Support(dtypes=WITH_FP64, mask_grad=True, func_transforms=False)  # tiles written out=
    eager = True  # torch.compile of a caller: a graph break here (its tile loop with out= ops is not traceable)

    def forward(self, inp: SDPAInputs) -> torch.Tensor:
        return self.prepare_inputs(inp)()

    def prepare_inputs(self, inp: SDPAInputs) -> Callable[[], torch.Tensor]:
        q = inp.query
        warm_exp(q.device)
        tiles = MaskTiles.of(inp)  # which tiles the mask leaves empty, full or partial: derived here, once
        q_tile, k_tile = tile_size(q.device, q.shape[0] * q.shape[1])
        if inp.mask_kind == "bool" and not inp.is_empty:
            k_tile = narrowest_useful(tiles, k_tile, q_tile)
        tiling = Tiling(q_tile, k_tile, k_tile, False)
        if not inp.is_empty:  # the forward and the backward tile alike: one plan for both, built before any call
            plan_tiles(tiles, tiling, q.shape[0], q.shape[1] // max(1, inp.key.shape[1]), q.device)
            TileMasker.warm(tiles.memo, inp.is_causal, min(q_tile, q.shape[2]), q.device, (q.dtype, torch.float32))
        fwd = functools.partial(chunked_forward, q_tile=q_tile, k_tile=k_tile, tiles=tiles)
        widen, computes = in_fp32(inp, k_tile)  # a key tile sums up to k_tile unnormalized P V terms
        nan_check = scores_may_be_inf(inp)  # for the backward's softmax of a row of -inf scores from the data
        return with_op(lambda: tiled_attention(inp, fwd, tiling, tiles, widen, nan_check), computes)
