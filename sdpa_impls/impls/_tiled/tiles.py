"""Grouped-head views and mask tiles shared by the plain-PyTorch implementations (tile sizes: `budget`)."""
from __future__ import annotations

import torch

from ...protocol import SDPAInputs
from .budget import choice

NEG_INF = float("-inf")
HALF = (torch.float16, torch.bfloat16)


def working_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of the softmax arithmetic, the accumulators and the log-sum-exp for inputs of `dtype`: fp64 for
    fp64 (computed in fp64 throughout, as torch's math backend does), else fp32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def grouped(inp: SDPAInputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Views that make GQA free: the G query heads that share a key/value head are grouped together.

    query -> (B, Hkv, G, Lq, E), key -> (B, Hkv, Lk, E), value -> (B, Hkv, Lk, Ev),
    mask -> (B, Hkv, G, Lq, Lk) (expanded view, no memory), where G = Hq // Hkv.
    Multiply grouped tiles with `gmm`, never by broadcasting K over G (torch would copy K).
    """
    q, k, v = inp.query, inp.key, inp.value
    b, hq, lq, _ = q.shape
    hkv, lk = k.shape[1], k.shape[2]
    q5 = q.unflatten(1, (hkv, hq // hkv))  # (B, Hkv, G, Lq, E)
    mask5 = None
    if inp.attn_mask is not None:
        mask5 = inp.attn_mask.expand(b, hq, lq, lk).unflatten(1, (hkv, hq // hkv))
    return q5, k, v, mask5


def gmm(a5: torch.Tensor, b4: torch.Tensor) -> torch.Tensor:
    """(B, Hkv, G, m, n) @ (B, Hkv, n, p) -> (B, Hkv, G, m, p), folding G into the rows of one GEMM."""
    b, hkv, g, m, n = a5.shape
    return (a5.reshape(b, hkv, g * m, n) @ b4).view(b, hkv, g, m, b4.shape[-1])


def causal_keep(i0: int, i1: int, j0: int, j1: int, device: torch.device) -> torch.Tensor:
    """Top-left causal pattern of the tile rows i0:i1, columns j0:j1 (True = attend)."""
    rows = torch.arange(i0, i1, device=device)[:, None]
    cols = torch.arange(j0, j1, device=device)[None, :]
    return rows >= cols


def mask_scores_(s: torch.Tensor, mask5: torch.Tensor | None, is_causal: bool,
                 i0: int, i1: int, j0: int, j1: int) -> torch.Tensor:
    """Apply the user mask and the causal pattern in place to the fp32 score tile s[..., i0:i1, j0:j1]."""
    if mask5 is not None:
        m = mask5[..., i0:i1, j0:j1]
        if m.dtype == torch.bool:
            s.masked_fill_(~m, NEG_INF)
        else:
            s.add_(m)
    if is_causal and j1 - 1 > i0:  # tiles entirely on or below the diagonal need no causal mask
        s.masked_fill_(~causal_keep(i0, i1, j0, j1, s.device), NEG_INF)
    return s


MASK_BLOCKS_BYTES = 32 << 20  # the bool-mask blocks one TileMasker cache keeps, as scores of the tile's dtype


def unexpanded(m: torch.Tensor) -> torch.Tensor:
    """`m` with each broadcast dimension (stride 0: a mask expanded over the heads) narrowed to size 1: the same mask
    to an op that broadcasts, and a new tensor made from it holds each element once, not once a head."""
    for dim, (size, stride) in enumerate(zip(m.shape, m.stride())):
        if stride == 0 and size > 1:
            m = m.narrow(dim, 0, 1)
    return m


class TileMasker:
    """Applies a user-mask tile and the causal diagonal in place to 3-D score tiles (heads, G·rows, keys).

    For causal, only the columns of a tile that cross the diagonal are touched, by adding slices of one
    precomputed upper triangle of -inf (0 elsewhere) in the tile's dtype: an add is 5-10x faster than a
    masked_fill with a broadcast bool mask on CPU. Scores are finite (fp16 that could overflow is computed
    in fp32, `compute.fp16_in_fp32`), so -inf + score = -inf. Tiles left of the diagonal cost nothing.
    The triangles are kept in `cache` (a call's `MaskTiles.memo`), where `warm` builds them before any call: a
    call then launches nothing to make them.
    `zero` (fused's unshifted exp, `compute.unshifted_exp`): the tile already holds exp(S), and a masked entry gets 0,
    by a product with a block or triangle of 0 and 1. exp of -inf is not a fast path of torch's CPU
    exp: a causal diagonal tile half -inf took as long as a tile twice its size (8 heads × 256 rows, AMX Xeon).
    A bool mask's block is read from the caller's mask once, into a block of the scores' dtype (0 and -inf, or 1
    and 0 for `zero`) with the dimensions the mask broadcasts over (the heads, usually) kept at size 1. It is kept in
    `cache` too, up to MASK_BLOCKS_BYTES for one cache (one mask, remembered with its tile map for the last
    RECENT_MASKS masks, `tilemap.recent_derived`), and later calls add or multiply that small contiguous block in
    (`_bool_block_`). Reading the block out of a large mask on every call, one short row of a long mask row at a
    time, took more time than the fill: the drop-in call with a 512-key window at L 8192 (fp32, AMX Xeon) took
    0.33-0.35 of the causal call's time, 0.28-0.29 with negated bool blocks kept and filled from; then 0.244 with
    blocks of the scores' dtype (docs/records/2026-11-29-xeon-bf16-mask-products.md, a Xeon without AMX).
    """

    def __init__(self, mask5: torch.Tensor | None, is_causal: bool, max_rows: int, device: torch.device,
                 cache: dict | None = None) -> None:
        self.float_mask = mask5 is not None and mask5.dtype != torch.bool
        self.is_causal, self.max_rows, self.device = is_causal, max_rows, device
        self._cache = {} if cache is None else cache

    @classmethod
    def warm(cls, cache: dict, is_causal: bool, max_rows: int, device: torch.device,
             dtypes: tuple[torch.dtype, ...], zero: bool = False) -> None:
        """Build the causal triangles of `max_rows` rows in `dtypes` into `cache` (in `prepare_inputs`)."""
        if is_causal:
            for dtype in dtypes:
                cls(None, True, max_rows, device, cache)._upper_bias(dtype, zero)

    def _upper_bias(self, dtype: torch.dtype, zero: bool = False) -> torch.Tensor:
        """(max_rows, max_rows) in `dtype`: -inf where key i0 + c lies after query i0 + r, else 0 (`zero`: 0 there,
        else 1)."""
        key = ("causal-keep" if zero else "causal-bias", self.max_rows, dtype, str(self.device))
        bias = self._cache.get(key)
        if bias is None:
            r = self.max_rows
            upper = torch.ones((r, r), dtype=torch.bool, device=self.device).triu_(1)
            fill, rest = (0.0, 1.0) if zero else (NEG_INF, 0.0)
            bias = self._cache[key] = torch.full((r, r), rest, dtype=dtype, device=self.device).masked_fill_(upper, fill)
        return bias

    def apply_(self, s3: torch.Tensor, mask5: torch.Tensor | None, i0: int, i1: int, j0: int, j1: int,
               zero: bool = False) -> None:
        """s3 holds query rows i0:i1 × keys j0:j1 of the heads of `mask5` (b, h, G, Lq, Lk); masked -> -inf (`zero`:
        s3 holds exp(S), and masked -> 0)."""
        crosses = self.is_causal and j1 - 1 > i0
        if mask5 is None and not crosses:
            return
        g = s3.shape[1] // (i1 - i0)
        s4 = s3.view(s3.shape[0], g, i1 - i0, j1 - j0)  # (heads, G, rows, keys)
        if mask5 is not None:
            m = mask5[..., i0:i1, j0:j1]
            s5 = s4.view(*m.shape)  # (b, h, G, rows, keys)
            if self.float_mask:
                s5.add_(m)
            else:
                self._bool_block_(s5, m, zero)
        if crosses:
            c0 = max(j0, i0 + 1)  # key i0 is kept by every row of the tile
            bias = self._upper_bias(s4.dtype, zero)[: i1 - i0, c0 - i0: j1 - i0]
            s4[..., c0 - j0:].mul_(bias) if zero else s4[..., c0 - j0:].add_(bias)

    def _bool_block_(self, s5: torch.Tensor, m: torch.Tensor, zero: bool) -> None:
        """Masked entries of the score block `s5` (b, h, G, rows, keys) to -inf (`zero`: to 0), where the bool mask
        block `m` is False: by adding a kept block of 0 and -inf (`zero`: multiplying by one of 1 and 0) in the
        scores' dtype, else, past MASK_BLOCKS_BYTES, by a masked_fill from the mask. Exact either way, as scores are
        finite: -inf + s = -inf, 0 · exp(s) = 0. The kept form is the faster by far: a masked_fill of a bool block
        took 2 ms for 8 heads × 256 rows × 320 keys in fp32, the product 23 µs (torch 2.13, 2-vCPU Xeon)."""
        key = ("mask block", zero, s5.dtype, m.storage_offset(), tuple(m.shape), m.stride())
        found = self._cache.get(key)
        if found is None:
            keep = unexpanded(m)  # without the broadcast dimensions: one block, whatever the heads
            held = self._cache.get("mask block bytes", 0) + keep.numel() * s5.element_size()
            if held > MASK_BLOCKS_BYTES:
                s5.masked_fill_(keep.logical_not(), 0.0 if zero else NEG_INF)
                return
            found = keep.to(s5.dtype) if zero else torch.zeros(keep.shape, dtype=s5.dtype, device=s5.device
                                                                ).masked_fill_(keep.logical_not(), NEG_INF)
            self._cache[key], self._cache["mask block bytes"] = found, held
        s5.mul_(found) if zero else s5.add_(found)

    def apply_ranges_(self, s3: torch.Tensor, mask5: torch.Tensor | None, i0: int, i1: int, j0: int,
                      ranges: tuple[tuple[int, int], ...], zero: bool = False) -> None:
        """`apply_` on the key ranges (a, b) of a score tile whose columns start at key j0: a tile map's partial
        blocks; its full blocks are left alone."""
        for a, b in ranges:
            self.apply_(s3[..., a - j0: b - j0], mask5, i0, i1, a, b, zero)


def head_groups(b: int, hkv: int, size: int) -> list[tuple[slice, slice]]:
    """(batch, kv-head) blocks of about `size` kv heads: whole batches, or a head range inside one batch,
    so that every block of a (B, Hkv, ...) tensor, even an expanded mask, stays a plain view."""
    if size >= hkv:
        per = size // hkv
        return [(slice(b0, min(b, b0 + per)), slice(0, hkv)) for b0 in range(0, b, per)]
    return [(slice(bi, bi + 1), slice(h0, min(hkv, h0 + size))) for bi in range(b) for h0 in range(0, hkv, size)]


def flat(x: torch.Tensor, bs: slice, hs: slice) -> torch.Tensor:
    """x[bs, hs] with batch and head merged: (b, h, ...) -> (b·h, ...); a view for tensors we allocated."""
    return x[bs, hs].flatten(0, 1)


def forward_views(q5: torch.Tensor, k4: torch.Tensor, v4: torch.Tensor, out: torch.Tensor,
                  mask5: torch.Tensor | None, bs: slice, hs: slice
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """One head group's views for a tiled forward: q (heads, G, Lq, E), out (heads, G, Lq, Ev),
    Kᵀ (heads, E, Lk), V (heads, Lk, Ev) and the mask (b, h, G, Lq, Lk) or None."""
    return (flat(q5, bs, hs), flat(out, bs, hs), flat(k4, bs, hs).transpose(1, 2), flat(v4, bs, hs),
            None if mask5 is None else mask5[bs, hs])


def compact_transposed(x: torch.Tensor) -> bool:
    """Whether `columns_t` copies a key range of `x`'s dtype on its device (the policy's `COMPACT_TRANSPOSED`, never
    for fp32): decided once per call, so that a tile pays nothing for it."""
    return x.dtype in HALF and choice(x.device, "COMPACT_TRANSPOSED")


def columns_t(xt3: torch.Tensor, j0: int, j1: int, compact: bool) -> torch.Tensor:
    """Columns j0:j1 of a transposed (heads, D, L) view of K or V (a GEMM's right operand, Kᵀ or Vᵀ): a view, or
    the transposed view of a compact copy.

    `compact` (`compact_transposed`), and a key range short of L: the keys' rows are copied first into a compact
    block (a plain copy), and the copy is passed transposed. oneDNN's bf16 GEMM on the CPU takes a batch of
    transposed matrices only when the batch is compact, and torch otherwise copies the transposed view itself,
    element by element: the same memory, more time (docs/explanation/tiling.md). fp32 GEMMs and cuBLAS take
    the strided view as it is."""
    cols = xt3[..., j0:j1]
    if compact and j1 - j0 < xt3.shape[-1]:
        cols = cols.transpose(1, 2).contiguous().transpose(1, 2)
    return cols


def rows3(x4: torch.Tensor, i0: int, i1: int) -> torch.Tensor:
    """Rows i0:i1 of a (heads, G, L, D) tensor as (heads, G·rows, D); a copy only when G > 1."""
    t = x4[:, :, i0:i1]
    return t.reshape(t.shape[0], t.shape[1] * t.shape[2], t.shape[3])  # explicit: D may be 0


def store_rows_(x4: torch.Tensor, i0: int, i1: int, t3: torch.Tensor) -> None:
    """Write a (heads, G·rows, D) tile back into rows i0:i1 of a (heads, G, L, D) tensor."""
    x4[:, :, i0:i1] = t3.view(x4.shape[0], x4.shape[1], i1 - i0, x4.shape[-1])
