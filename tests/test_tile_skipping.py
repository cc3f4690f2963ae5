"""chunked and fused compute only the tiles a mask leaves non-empty: the GEMM work they really run (counted by
torch's FlopCounterMode, not timed) equals a brute-force count of the non-empty tiles of the dense mask."""
from __future__ import annotations

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import sdpa_impls
from sdpa_impls.bench.grid import Case
from sdpa_impls.impls._tiled.backward import tiled_backward
from sdpa_impls.impls._tiled.online_softmax import chunked_forward
from sdpa_impls.impls._tiled.budget import CpuTiling, CudaTiling, forced_tiling
from sdpa_impls.impls._tiled.tilemap import EMPTY, FULL, PARTIAL, MaskTiles, TileMap, Tiling, block_states
from sdpa_impls.impls._tiled.tiles import grouped
from sdpa_impls.impls.chunked import narrowest_useful, tile_size
from sdpa_impls.impls.fused import KEY_BLOCK, fused_forward, fused_plan, tile_shape
from sdpa_impls.protocol import SDPAInputs

L, E, EV = 300, 16, 8  # 300 rows: tiles of 32, 64, 128 and 256 all end inside a document or window somewhere


def keep_of(mask: torch.Tensor | None, causal: bool, lq: int, lk: int) -> torch.Tensor:
    """(Lq, Lk) True where some head of the (single kv head) call attends: the brute-force truth."""
    keep = torch.ones(lq, lk, dtype=torch.bool)
    if causal:
        keep = keep.tril()
    if mask is not None:
        keep = keep & mask[(None,) * (4 - mask.dim())].expand(-1, -1, lq, lk).any(dim=1)[0]
    return keep


def live_columns(keep: torch.Tensor, rows: int, block: int, merge: bool) -> list[int]:
    """Key columns computed per query tile of `rows`: every non-empty block of `block` keys (merged runs hold
    the same keys), clipped at the tile's last causal key only through `keep` itself."""
    lq, lk = keep.shape
    out = []
    for i0 in range(0, lq, rows):
        blocks = [keep[i0:i0 + rows, j0:j0 + block] for j0 in range(0, lk, block)]
        out.append(sum(b.shape[1] if b.any() else 0 for b in blocks))
    return out


def structured(word: str) -> torch.Tensor | None:
    if word == "none":
        return None
    if word == "holes":  # a general mask: whole key blocks empty in the middle of a row
        m = torch.rand(L, L, generator=torch.Generator().manual_seed(0)) < 0.5
        m[:, 64:192] = False
        return m
    structure = Case(lq=L, lk=L, e=E, mask=word).structure()
    return structure.dense(1, 2, torch.float32, "cpu")


class GemmCounter(TorchDispatchMode):
    """Counts 2·m·n·k per batch of every bmm / baddbmm / mm / addmm the dispatcher runs: out= and in-place
    overloads too (torch's FlopCounterMode misses in-place baddbmm_)."""

    OPS = {"bmm": 0, "mm": 0, "baddbmm": 1, "addmm": 1}  # index of the first matrix operand

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._overloadpacket.__name__.rstrip("_")
        if name in self.OPS:
            a, b = args[self.OPS[name]], args[self.OPS[name] + 1]
            self.flops += 2 * a.numel() * b.shape[-1]  # (batch, m, k) @ (batch, k, n)
        return func(*args, **(kwargs or {}))


def gemm_flops(fn) -> int:
    with GemmCounter() as counter:
        fn()
    return counter.flops


def call_inputs(mask: torch.Tensor | None, causal: bool, grad: bool = False) -> SDPAInputs:
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(1, 2, L, E, generator=gen)  # two query heads over one kv head: one head group
    k, v = torch.randn(1, 1, L, E, generator=gen), torch.randn(1, 1, L, EV, generator=gen)
    return SDPAInputs(*(t.requires_grad_(grad) for t in (q, k, v)), attn_mask=mask, is_causal=causal,
                      enable_gqa=True)


WORDS = ["window-20", "window-1", "documents-40", "prefix-100", "holes", "none"]


@pytest.mark.parametrize("causal", [False, True], ids=["", "causal"])
@pytest.mark.parametrize("word", WORDS)
def test_chunked_computes_exactly_the_non_empty_tiles(word: str, causal: bool) -> None:
    mask = structured(word)
    inp = call_inputs(mask, causal)
    q5, k4, v4, mask5 = grouped(inp)
    tiles = MaskTiles.of(inp)
    scale = inp.softmax_scale
    fwd = gemm_flops(lambda: chunked_forward(q5, k4, v4, mask5, causal, scale, True, q_tile=32, k_tile=32,
                                             tiles=tiles))
    cols = live_columns(keep_of(mask, causal, L, L), 32, 32, False)
    g = 2  # query heads folded into one GEMM's rows
    per_row = [min(32, L - i0) * g for i0 in range(0, L, 32)]
    assert fwd == sum(2 * r * c * (E + EV) for r, c in zip(per_row, cols))  # S = Q Kᵀ and O = P V per live tile

    out5, lse, _ = chunked_forward(q5, k4, v4, mask5, causal, scale, True, q_tile=32, k_tile=32, tiles=tiles)
    dout5 = torch.randn_like(out5)
    bwd = gemm_flops(lambda: tiled_backward(q5, k4, v4, mask5, causal, scale, out5, lse, None, dout5,
                                            Tiling(32, 32, 32, False), tiles))
    # recomputed S, dV += Pᵀ dO, dP = dO Vᵀ, dQ += dS K, dK += dSᵀ Q per live tile
    assert bwd == sum(2 * r * c * (3 * E + 2 * EV) for r, c in zip(per_row, cols))


@pytest.mark.parametrize("causal", [False, True], ids=["", "causal"])
@pytest.mark.parametrize("word", WORDS)
def test_fused_computes_exactly_the_non_empty_key_blocks(word: str, causal: bool) -> None:
    mask = structured(word)
    inp = call_inputs(mask, causal)
    q5, k4, v4, mask5 = grouped(inp)
    tiles = MaskTiles.of(inp)
    rows, heads = tile_shape(torch.device("cpu"), 1, 1, 2, L, L, 4)
    fwd = gemm_flops(lambda: fused_forward(q5, k4, v4, mask5, causal, inp.softmax_scale, False, tiles))
    cols = live_columns(keep_of(mask, causal, L, L), rows, KEY_BLOCK, True)
    per_row = [min(rows, L - i0) * 2 for i0 in range(0, L, rows)]
    assert fwd == sum(2 * r * c * (E + EV) for r, c in zip(per_row, cols))


def test_a_padded_decode_batch_computes_nothing_past_each_rows_length() -> None:
    """Padding differs per batch row: head groups then stay within one row, and each row's keys stop at the end of
    the key tile holding its length (through the drop-in call, which derives the tile map at its start)."""
    lk = 2048
    case = Case(lq=4, lk=lk, e=E, batch=3, heads_q=4, heads_kv=2, mask="padding")
    lengths = case.structure().lengths
    mask = case.structure().dense(3, 4, torch.float32, "cpu")
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(3, 4, 4, E, generator=gen)
    k, v = torch.randn(3, 2, lk, E, generator=gen), torch.randn(3, 2, lk, EV, generator=gen)
    q_tile, widest = tile_size(torch.device("cpu"), 12)
    chunked_tile = narrowest_useful(MaskTiles(mask, False, 2, 4, lk), widest, q_tile)  # chunked's choice for this mask
    assert chunked_tile in (widest, widest // 2, widest // 4)
    for name, block in (("fused", KEY_BLOCK), ("chunked", min(lk, chunked_tile))):
        flops = gemm_flops(lambda: sdpa_impls.get(name)(q, k, v, attn_mask=mask, enable_gqa=True))
        live = [min(lk, math.ceil(n / block) * block) for n in lengths]  # keys of each row's live tiles
        assert flops == sum(2 * 2 * (2 * 4) * keys * (E + EV) for keys in live), (name, lengths, block)
        assert flops < 2 * 3 * 2 * (2 * 4) * lk * (E + EV) * 0.9  # well short of every padded key


def test_chunked_narrows_its_key_tiles_where_a_mask_empties_more_keys() -> None:
    """A 512-key window at L = 4096 inside 1024-key tiles computes ~1.5k keys per query tile; narrower tiles skip
    more. With no empty tile (a dense random mask) the widest tile stays: narrower ones only add tiles."""
    window = Case(lq=4096, lk=4096, e=E, mask="window-512").structure().dense(1, 8, torch.float32, "cpu")
    assert narrowest_useful(MaskTiles(window, False, 8, 4096, 4096), 1024, 128) < 1024
    dense = torch.rand(4096, 4096, generator=torch.Generator().manual_seed(4)) < 0.9
    assert narrowest_useful(MaskTiles(dense, False, 8, 4096, 4096), 1024, 128) == 1024


@pytest.mark.parametrize("shape", [(L, L), (2, 1, L, L), (4, L, L), (1, 1, 1, L), (L, 1)])
def test_block_states_match_brute_force(shape: tuple[int, ...]) -> None:
    """EMPTY / PARTIAL / FULL per (batch, kv head, tile), for masks that broadcast in every way, with causal."""
    m = torch.rand(shape, generator=torch.Generator().manual_seed(2)) < 0.97
    if len(shape) >= 3:
        m[..., 100:200, :] = False  # some empty tiles
    for causal in (False, True):
        states = block_states(m, causal, hkv=2, lq=L, lk=L, q_block=64, k_block=48)
        full = m[(None,) * (4 - m.dim())].expand(-1, -1, L, L)
        if causal:
            full = full & torch.ones(L, L, dtype=torch.bool).tril()
        hm = full.shape[1]
        groups = full.unflatten(1, (2, hm // 2)) if hm > 1 else full.unsqueeze(2)
        for b in range(states.shape[0]):
            for h in range(states.shape[1]):
                for t in range(states.shape[2]):
                    for j in range(states.shape[3]):
                        tile = groups[b, h, :, t * 64:(t + 1) * 64, j * 48:(j + 1) * 48]
                        want = FULL if tile.all() else PARTIAL if tile.any() else EMPTY
                        got = int(states[b, h, t, j])
                        # causal is applied per tile from its corners: a tile the mask empties is EMPTY, one it
                        # fills is FULL only if no causal diagonal crosses it; otherwise PARTIAL is the safe answer
                        assert got == want or (got == PARTIAL and want == EMPTY), (b, h, t, j, got, want)


@pytest.mark.parametrize("word", ["window-20", "documents-40", "holes", "padding", "none"])
def test_a_coarser_tile_map_derived_from_a_finer_one_is_the_masks_own(word: str) -> None:
    """Query blocks of 2, 3 and 8 of a finer map's (the last one short of L = 300), causal or not, a padded batch
    (tiles per batch row) too: the same states as reading the mask at that size."""
    if word == "padding":
        case = Case(lq=L, lk=L, e=E, batch=3, heads_q=2, heads_kv=2, mask="padding")
        mask = case.structure().dense(3, 2, torch.float32, "cpu")
    else:
        mask = structured(word)
    for causal in (False, True):
        fine = TileMap.build(mask, causal, 2, L, L, 32, KEY_BLOCK, True)
        for c in (2, 3, 8):
            want = TileMap.build(mask, causal, 2, L, L, 32 * c, KEY_BLOCK, True).states
            assert torch.equal(fine.coarsened(32 * c, True).states, want), (causal, c)


def test_a_masked_inference_forward_sizes_its_tiles_by_the_keys_they_compute(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 512-key window at L 4096, under a fixed CPU policy (2 threads, 512 KiB L2): a tile sized for every key of
    its rows has 32 rows; the inference forward doubles them while the keys its tiles compute still fit, computes
    exactly the non-empty key blocks of those tiles, with buffers as wide as the widest, and matches torch's SDPA.
    The mask is read once (the coarser maps come from the first); training keeps the tile sized for every key."""
    lq = 4096
    mask = Case(lq=lq, lk=lq, e=E, mask="window-512").structure().dense(1, 2, torch.float32, "cpu")
    gen = torch.Generator().manual_seed(5)
    q, k, v = torch.randn(1, 2, lq, E, generator=gen), torch.randn(1, 1, lq, E, generator=gen), torch.randn(
        1, 1, lq, EV, generator=gen)
    inp = SDPAInputs(q, k, v, attn_mask=mask, enable_gqa=True)
    q5, k4, v4, mask5 = grouped(inp)
    reads, build = [], TileMap.build
    monkeypatch.setattr(TileMap, "build", lambda *a: reads.append(a[5]) or build(*a))
    with forced_tiling(CpuTiling(2, 512 << 10)):
        tiles = MaskTiles(mask, False, 1, lq, lq)
        every_key, _ = tile_shape(torch.device("cpu"), 1, 1, 2, lq, lq, 4)
        rows, _, keys = fused_plan(tiles, torch.device("cpu"), 1, 2, 4, inference=True)
        assert every_key == 32 and rows >= 4 * every_key and keys <= lq // 4, (every_key, rows, keys)
        assert len(reads) == 1
        assert fused_plan(tiles, torch.device("cpu"), 1, 2, 4)[0] == every_key  # training
        fwd = gemm_flops(lambda: fused_forward(q5, k4, v4, mask5, False, inp.softmax_scale, False, tiles))
        out = fused_forward(q5, k4, v4, mask5, False, inp.softmax_scale, False, tiles)[0]
    cols = live_columns(keep_of(mask, False, lq, lq), rows, KEY_BLOCK, True)
    assert max(cols) == keys
    assert fwd == sum(2 * min(rows, lq - i0) * 2 * c * (E + EV) for i0, c in zip(range(0, lq, rows), cols))
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    assert (out.reshape(want.shape) - want).abs().max() < 1e-5


def test_a_gpu_masked_forward_keeps_its_rows_and_no_tile_past_the_cap_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA policy (forced, a card with 32 MiB free: 128-row tiles of a 256-key window at L 2048) keeps its
    rows, as a row of every key sizes them, with score buffers as wide as the widest tile, and matches torch's SDPA.
    The CPU policy at L 300: its 256 rows are the most for any width, so no 300-row map is read."""
    lq = 2048
    mask = Case(lq=lq, lk=lq, e=E, mask="window-256").structure().dense(1, 1, torch.bool, "cpu")
    gen = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(1, 2, lq, d, generator=gen) for d in (E, E, EV))
    inp = SDPAInputs(q, k, v, attn_mask=mask)
    q5, k4, v4, mask5 = grouped(inp)
    with forced_tiling(CudaTiling(32 << 20)):
        tiles = MaskTiles(mask, False, 2, lq, lq)
        every_key, _ = tile_shape(torch.device("cpu"), 1, 2, 1, lq, lq, 4)
        rows, _, keys = fused_plan(tiles, torch.device("cpu"), 1, 1, 4, inference=True)
        assert rows == every_key == 128 and keys == max(live_columns(keep_of(mask, False, lq, lq), rows, KEY_BLOCK,
                                                                     True)) < lq // 4, (every_key, rows, keys)
        out = fused_forward(q5, k4, v4, mask5, False, inp.softmax_scale, False, tiles)[0]
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert (out.reshape(want.shape) - want).abs().max() < 1e-5
    reads, build = [], TileMap.build
    monkeypatch.setattr(TileMap, "build", lambda *a: reads.append(a[5]) or build(*a))
    with forced_tiling(CpuTiling(2, 512 << 10)):
        tiles = MaskTiles(structured("window-20"), False, 1, L, L)
        assert fused_plan(tiles, torch.device("cpu"), 1, 2, 4, inference=True)[0] == 256 and reads == [256], reads
