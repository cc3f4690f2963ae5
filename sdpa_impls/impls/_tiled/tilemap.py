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
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field

import torch

from ...protocol import SDPAInputs
from .budget import policy_key
from .maskread import EMPTY, FULL, PARTIAL, block_states, dead_rows
from .tiles import head_groups



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

    def coarsened(self, q_block: int, merge_runs: bool) -> TileMap:
        """This map at `q_block` query rows (a multiple of this one's), without reading the mask again: a block of
        the coarser map is EMPTY where each of its blocks here is, FULL where each is, else PARTIAL. That is what
        reading the mask gives, or tighter: with the causal flag, a block whose kept keys all lie past the finer
        blocks' diagonals is EMPTY here where a direct read says PARTIAL (both sound)."""
        c = q_block // self.q_block
        bm, hm, nq, nk = self.states.shape
        pad = -nq % c  # the last coarse block's missing rows: EMPTY for the "any key kept" test, FULL for "every"
        hi = torch.nn.functional.pad(self.states, (0, 0, 0, pad), value=EMPTY).view(bm, hm, -1, c, nk).amax(3)
        lo = torch.nn.functional.pad(self.states, (0, 0, 0, pad), value=FULL).view(bm, hm, -1, c, nk).amin(3)
        states = torch.where(hi == EMPTY, EMPTY, torch.where(lo == FULL, FULL, PARTIAL)).to(torch.uint8)
        return TileMap(states, self.is_causal, self.lq, self.lk, q_block, self.k_block, merge_runs)

    def widest(self) -> int:
        """The most keys one query tile of this map computes, in any batch row and head: its non-empty key blocks
        (an upper bound of every head group's)."""
        live = (self.states != EMPTY).any(dim=1).any(dim=0)  # (nQ, nK)
        return min(self.lk, int(live.sum(dim=-1).max()) * self.k_block) if live.numel() else 0

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
# every layer, and a 512-key window at L 8192 is a 64 MB bool tensor. The derived tiles of the last few masks are
# remembered by the mask tensor itself (a weak reference) and its `_stamp`, so a mask written since is read again.
RECENT_MASKS = 8
_recent: OrderedDict[tuple, tuple[weakref.ref | None, tuple, Derived]] = OrderedDict()


def _layout(mask: torch.Tensor) -> tuple:
    return (tuple(mask.shape), mask.stride(), mask.storage_offset(), mask.dtype, mask.device)


def _stamp(mask: torch.Tensor | None) -> tuple | None:
    """What must be the same for a remembered mask's tiles to be used again, or None: read this mask every call.
    - Memory that others can write unseen: a storage torch did not allocate (`torch.from_numpy`, DLPack,
      `frombuffer`) or has handed to NumPy (`.numpy()`; both make it not resizable), and an inference-mode tensor,
      which has no version counter: None.
    - The version counter sees every in-place change through torch. On a CPU, the row and column sums of the mask's
      bytes read as 8-byte words see a write that bypasses it (through `.data`), short of one that keeps every such
      sum: 2.3 ms for a 64 MB bool mask on a 2-vCPU Xeon, 3 % of a 512-key window call at L 8192. A mask whose last
      dim is no whole number of words: None. On CUDA the counter alone: reading sums back would wait for the device
      in every call."""
    if mask is None:
        return ()
    if mask.is_inference() or not mask.untyped_storage().resizable():
        return None
    if mask.device.type != "cpu":
        return (mask._version,)
    one = mask
    for d in range(mask.dim()):  # a broadcast dim once
        if one.stride(d) == 0 and one.shape[d] > 1:
            one = one.narrow(d, 0, 1)
    try:
        words = one.view(torch.int64)
    except RuntimeError:
        return None
    sums = [words.sum(-1).flatten()]
    if words.dim() > 1:  # over bands of 64 rows first: 1.2 ms where one sum over the rows took 2.9
        rows = words.shape[-2]
        bands = words.unflatten(-2, (rows // 64, 64)).sum(-2) if rows % 64 == 0 and rows else words
        sums.append(bands.sum(-2).flatten())
    return (mask._version, torch.cat(sums))


def _same(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y
                                    for x, y in zip(a, b))


def recent_derived(mask: torch.Tensor | None, is_causal: bool, call: tuple, policy: tuple) -> Derived:
    """The Derived of this mask (the same tensor, unchanged since: same `_stamp` and layout) and `call` (the shapes,
    dtype and device of q, k and v: a kernel's look-ups in `memo` depend on the batch and the heads too) under the
    device's tiling `policy` (budget.policy_key), remembered from an earlier call, or a new one remembered from
    now on (the least recently used of RECENT_MASKS is forgotten)."""
    stamp = _stamp(mask)
    if stamp is None:
        return Derived()
    key = (None if mask is None else id(mask), None if mask is None else _layout(mask), is_causal, call, policy)
    found = _recent.get(key)
    if found is not None:
        ref, seen, derived = found
        if (ref is None or ref() is mask) and _same(seen, stamp):
            _recent.move_to_end(key)
            return derived
        _recent.pop(key, None)  # written in place (its weak reference's callback may have run meanwhile)
    derived = Derived()
    ref = None if mask is None else weakref.ref(mask, lambda _, key=key: _recent.pop(key, None))
    _recent[key] = (ref, stamp, derived)
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
        """The map at `q_block` × `k_block`: from a finer one already built where there is one (`coarsened`), else
        from the mask."""
        key = (q_block, k_block, merge_runs)
        if key not in self._maps:
            finer = [m for (qb, kb, _), m in self._maps.items() if kb == k_block and qb < q_block and q_block % qb == 0]
            self._maps[key] = (finer[0].coarsened(q_block, merge_runs) if finer else
                               TileMap.build(self.mask, self.is_causal, self.hkv, self.lq, self.lk, q_block, k_block,
                                             merge_runs))
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
