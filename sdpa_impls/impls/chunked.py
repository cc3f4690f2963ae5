"""chunked: FlashAttention's online softmax over query × key tiles; forward and backward memory O(L)."""
from __future__ import annotations

import functools

import torch

from ..online_softmax import chunked_forward, tiled_attention
from ..protocol import Implementation, SDPAInputs, Support
from ..registry import register
from ..tiles import key_tile

Q_TILE = 128  # query rows per tile; the key tile is derived from the cache (tiles.key_tile)


@register
class Chunked(Implementation):
    name = "chunked"
    description = "online softmax over query×key tiles; custom backward recomputes tiles from the log-sum-exp"
    support = Support()

    def forward(self, inp: SDPAInputs) -> torch.Tensor:
        q, v = inp.query, inp.value
        k_tile = key_tile(q.device, q.dtype, q.shape[-1], v.shape[-1], Q_TILE)
        fwd = functools.partial(chunked_forward, q_tile=Q_TILE, k_tile=k_tile)
        return tiled_attention(inp, fwd, Q_TILE, k_tile)
