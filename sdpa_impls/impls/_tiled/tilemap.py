"""Which score tiles a mask leaves empty, full or partial, derived once per call from the dense mask and causal
flag (never from a structure's name), and the per-tile plan the tiled kernels follow: skip empty tiles, mask only
partial ones.

A plan lists, for each head group and query tile, the key tiles to compute as `KeyTile(j0, j1, masked)`: keys
j0:j1, and the sub-ranges of them where the mask (and the causal diagonal) must still be applied. Keys of empty
tiles never appear, so a sliding window costs O(L·W), packed documents O(Σ nᵢ²), a padded batch nothing past
each row's length.
"""
from __future__ import annotations

import functools
import math
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field

import torch

from ...protocol import SDPAInputs
from .budget import policy_key
from .tiles import causal_keep, head_groups

EMPTY, PARTIAL, FULL = 0, 1, 2
DEAD_ROWS_BLOCK_ELEMENTS = 1 << 24  # mask elements read at once when finding rows that see no key


@dataclass(frozen=True)
class KeyTile:
    """Keys j0:j1 of one query tile, and the (a, b) key ranges inside them that still need the mask applied."""

    j0: int
    j1: int
    masked: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class Plan:
    """The key tiles of every (head group, query tile): `tiles[g][t]`, for `groups[g]` and query rows
    t·q_tile : (t+1)·q_tile."""

    q_tile: int
    groups: tuple[tuple[slice, slice], ...]
    tiles: tuple[tuple[tuple[KeyTile, ...], ...], ...]

    @functools.cached_property
    def max_heads(self) -> int:
        """The most (batch, kv head) pairs in one group: what a group's buffers must hold."""
        return max((bs.stop - bs.start) * (hs.stop - hs.start) for bs, hs in self.groups)

    def multi_tile(self) -> bool:
        """Whether some query tile spans several key tiles (the backward then needs its D = rowsum(dO ⊙ O))."""
        return any(len(row) > 1 for group in self.tiles for row in group)


def _blocks(x: torch.Tensor, size: int, reduce: str) -> torch.Tensor:
    """any/all over consecutive blocks of `size` along the last dim (the last block may be shorter)."""
    n = x.shape[-1]
    full = n // size * size
    parts = []
    if full:
        parts.append(getattr(x[..., :full].reshape(*x.shape[:-1], full // size, size), reduce)(dim=-1))
    if full < n:
        parts.append(getattr(x[..., full:], reduce)(dim=-1, keepdim=True))
    return torch.cat(parts, dim=-1)


def block_states(mask: torch.Tensor | None, is_causal: bool, hkv: int, lq: int, lk: int,
                 q_block: int, k_block: int) -> torch.Tensor:
    """EMPTY / PARTIAL / FULL for every (mask batch, kv head, query block, key block): (Bm, Hm, nQ, nK) uint8 on
    the CPU, where Bm and Hm are 1 where the mask broadcasts. A bool mask is read once, a query block at a time
    (O(q_block · Lk) temporaries); a float mask has no empty tiles and is applied everywhere (PARTIAL); top-left
    causal empties the tiles above the diagonal and makes the ones it crosses PARTIAL."""
    nq, nk = math.ceil(lq / q_block), math.ceil(lk / k_block)
    if mask is None or mask.dtype != torch.bool:
        states = torch.full((1, 1, nq, nk), FULL if mask is None else PARTIAL, dtype=torch.uint8)
    else:
        m4 = mask[(None,) * (4 - mask.dim())]  # (Bm, Hq or 1, Lq or 1, Lk or 1)
        bm, hm = m4.shape[0], m4.shape[1]
        hg = hkv if hm > 1 else 1
        m5 = m4.unflatten(1, (hg, hm // hg))  # (Bm, Hg, G, Lq|1, Lk|1): the G query heads of a kv head together
        any_k = torch.empty((bm, hg, nq, nk), dtype=torch.bool)
        all_k = torch.empty((bm, hg, nq, nk), dtype=torch.bool)
        for t in range(nq):
            rows = m5[..., t * q_block: min(lq, (t + 1) * q_block), :] if m5.shape[-2] > 1 else m5
            for reduce, out in (("any", any_k), ("all", all_k)):
                cols = getattr(getattr(rows, reduce)(dim=-2), reduce)(dim=2)  # (Bm, Hg, Lk|1)
                out[:, :, t] = _blocks(cols.expand(bm, hg, lk), k_block, reduce).cpu()
        states = torch.where(all_k, FULL, torch.where(any_k, PARTIAL, EMPTY)).to(torch.uint8)
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


def _runs(flags: list[bool], k_block: int, lk: int, k_end: int) -> list[tuple[int, int]]:
    """Key ranges of the maximal runs of True blocks, clipped to keys < k_end."""
    out: list[tuple[int, int]] = []
    for j, on in enumerate(flags):
        a, b = j * k_block, min(lk, (j + 1) * k_block, k_end)
        if not on or a >= b:
            continue
        if out and out[-1][1] == a:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


@dataclass(frozen=True)
class Tiling:
    """How a kernel tiles a call: query rows per tile, the widest key tile its buffers hold, the key block the map
    is kept at, and whether adjacent non-empty blocks merge into one key tile."""

    q_tile: int
    k_tile: int
    k_block: int
    merge_runs: bool


@dataclass
class TileMap:
    """The block states of one call's mask for one (q_block, k_block) tiling, and its plans per head grouping.

    `merge_runs`: one KeyTile per maximal run of non-empty key blocks (fused: a whole row of keys per GEMM),
    else one KeyTile per key block (chunked: online softmax over key tiles).
    """

    states: torch.Tensor
    is_causal: bool
    lq: int
    lk: int
    q_block: int
    k_block: int
    merge_runs: bool
    _plans: dict[tuple, Plan] = field(default_factory=dict)

    @classmethod
    def build(cls, mask: torch.Tensor | None, is_causal: bool, hkv: int, lq: int, lk: int, q_block: int,
              k_block: int, merge_runs: bool) -> TileMap:
        return cls(block_states(mask, is_causal, hkv, lq, lk, q_block, k_block), is_causal, lq, lk, q_block,
                   k_block, merge_runs)

    @property
    def per_batch(self) -> bool:
        """Whether the tiles differ between batch rows (a padded batch): head groups then stay in one row."""
        return self.states.shape[0] > 1

    def group_size(self, heads: int, hkv: int) -> int:
        """`heads` kv heads per group, at most one batch row's when the tiles differ per row."""
        return min(heads, hkv) if self.per_batch else heads

    def plan(self, groups: list[tuple[slice, slice]]) -> Plan:
        """The key tiles of each group's query tiles (cached per grouping: build it before timing)."""
        key = tuple((g[0].start, g[0].stop, g[1].start, g[1].stop) for g in groups)
        if key not in self._plans:
            self._plans[key] = Plan(self.q_block, tuple(groups), tuple(self._group(bs, hs) for bs, hs in groups))
        return self._plans[key]

    def _group(self, bs: slice, hs: slice) -> tuple[tuple[KeyTile, ...], ...]:
        s = self.states
        part = s[bs if s.shape[0] > 1 else slice(0, 1), hs if s.shape[1] > 1 else slice(0, 1)]
        hi = part.amax(dim=(0, 1))  # EMPTY only where every head of the group is empty
        lo = part.amin(dim=(0, 1))  # FULL only where every head is full
        merged = torch.where(hi == EMPTY, EMPTY, torch.where(lo == FULL, FULL, PARTIAL)).tolist()
        rows = []
        for t, row in enumerate(merged):
            k_end = min(self.lk, self.lq, (t + 1) * self.q_block) if self.is_causal else self.lk
            live = [x != EMPTY for x in row]
            partial = [x == PARTIAL for x in row]
            spans = _runs(live, self.k_block, self.lk, k_end) if self.merge_runs else [
                (j * self.k_block, min(self.lk, (j + 1) * self.k_block, k_end)) for j, on in enumerate(live)
                if on and j * self.k_block < k_end]
            masked = _runs(partial, self.k_block, self.lk, k_end)
            rows.append(tuple(KeyTile(a, b, tuple((max(a, c), min(b, d)) for c, d in masked if c < b and d > a))
                              for a, b in spans))
        return tuple(rows)


@dataclass
class Derived:
    """What MaskTiles derives from a mask and causal flag: the tile maps per tiling, the plans per call shape, the
    kernels' own look-ups (`memo`) and the dead-row prefix counts. It holds no reference to the mask, so a
    remembered one (`recent_derived`) never keeps a caller's mask alive."""

    maps: dict[tuple[int, int, bool], TileMap] = field(default_factory=dict)
    by_call: dict[tuple[Tiling, int, int], Plan] = field(default_factory=dict)
    memo: dict[tuple, object] = field(default_factory=dict)
    dead_before: tuple[int, ...] | None = None


# The drop-in call builds its tiles from the mask it is given, on every call: a model passes the same mask to
# every layer, and a 512-key window at L 8192 is a 64 MB bool tensor whose scan alone took most of a windowed
# call's time. The derived tiles of the last few masks are remembered by the mask tensor itself (a weak
# reference) and its version counter, which every in-place change bumps, so a mask written in place is read
# again; masks without a version counter (inference-mode tensors) are read every time.
RECENT_MASKS = 8
_recent: OrderedDict[tuple, tuple[weakref.ref | None, int, Derived]] = OrderedDict()


def _layout(mask: torch.Tensor) -> tuple:
    return (tuple(mask.shape), mask.stride(), mask.storage_offset(), mask.dtype, mask.device)


def recent_derived(mask: torch.Tensor | None, is_causal: bool, call: tuple, policy: tuple) -> Derived:
    """The Derived of this mask (the same tensor, unchanged since: same version and layout) and `call` (the shapes,
    dtype and device of q, k and v: a kernel's look-ups in `memo` depend on the batch and the heads too) under the
    device's tiling `policy` (budget.policy_key), remembered from an earlier call, or a new one remembered from
    now on (the least recently used of RECENT_MASKS is forgotten)."""
    if mask is not None and mask.is_inference():  # no version counter: an in-place change could not be seen
        return Derived()
    key = (None if mask is None else id(mask), None if mask is None else _layout(mask), is_causal, call, policy)
    version = 0 if mask is None else mask._version
    found = _recent.get(key)
    if found is not None:
        ref, seen_version, derived = found
        if (ref is None or ref() is mask) and seen_version == version:
            _recent.move_to_end(key)
            return derived
        _recent.pop(key, None)  # written in place (its weak reference's callback may have run meanwhile)
    derived = Derived()
    ref = None if mask is None else weakref.ref(mask, lambda _, key=key: _recent.pop(key, None))
    _recent[key] = (ref, version, derived)
    while len(_recent) > RECENT_MASKS:
        _recent.popitem(last=False)
    return derived


class MaskTiles:
    """One call's mask and causal flag, with its TileMaps built on first use per tiling (build them in
    `prepare_inputs`, so a timed call only looks them up). `MaskTiles.of` shares what it derives with the calls
    before it that had the same unchanged mask (`recent_derived`)."""

    def __init__(self, mask: torch.Tensor | None, is_causal: bool, hkv: int, lq: int, lk: int,
                 derived: Derived | None = None) -> None:
        self.mask, self.is_causal, self.hkv, self.lq, self.lk = mask, is_causal, hkv, lq, lk
        self._derived = derived if derived is not None else Derived()
        self._maps, self._by_call = self._derived.maps, self._derived.by_call
        self.memo = self._derived.memo  # a kernel's own look-ups per call shape (fused's rows and plan)

    @property
    def dead_before(self) -> tuple[int, ...]:
        """How many query rows before row i see no key in some batch row and head (`dead_rows`): a prefix count,
        so that `has_dead_rows` is one subtraction in a timed call. Build it in `prepare_inputs`."""
        found = self._derived.dead_before
        if found is None:
            if self.mask is None:  # every row sees key 0 at least
                found = (0,) * (self.lq + 1)
            else:
                dead = dead_rows(self.mask, self.is_causal, self.lq, self.lk)
                found = (0, *torch.cumsum(dead, dim=0).tolist())
            self._derived.dead_before = found
        return found

    def has_dead_rows(self, i0: int, i1: int) -> bool:
        """Whether some query row in i0:i1 sees no key (its softmax needs zeroing before it meets a GEMM)."""
        return self.dead_before[i1] > self.dead_before[i0]

    @classmethod
    def of(cls, inp: SDPAInputs) -> MaskTiles:
        """The tiles of one call's mask (as the drop-in call gives it) and causal flag, sharing what earlier calls
        with the same unchanged mask, call shape and tiling policy derived."""
        q, k, v = inp.query, inp.key, inp.value
        call = (tuple(q.shape), tuple(k.shape), tuple(v.shape), q.dtype, q.device)
        derived = recent_derived(inp.attn_mask, inp.is_causal, call, policy_key(q.device))
        return cls(inp.attn_mask, inp.is_causal, k.shape[1], q.shape[2], k.shape[2], derived)

    def get(self, q_block: int, k_block: int, merge_runs: bool) -> TileMap:
        key = (q_block, k_block, merge_runs)
        if key not in self._maps:
            self._maps[key] = TileMap.build(self.mask, self.is_causal, self.hkv, self.lq, self.lk, q_block, k_block,
                                            merge_runs)
        return self._maps[key]

    def plan(self, tiling: Tiling, b: int, heads: int) -> Plan:
        """The plan of `tiling` for groups of about `heads` kv heads (one batch row's at most, where tiles differ);
        built once, then one dictionary look-up per call."""
        key = (tiling, b, heads)
        plan = self._by_call.get(key)
        if plan is None:
            tm = self.get(tiling.q_tile, tiling.k_block, tiling.merge_runs)
            plan = self._by_call[key] = tm.plan(head_groups(b, self.hkv, tm.group_size(heads, self.hkv)))
        return plan
