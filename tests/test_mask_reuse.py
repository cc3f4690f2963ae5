"""The tiled implementations (chunked, fused) derive which tiles a dense mask leaves empty once per mask, not once per
drop-in call: a model hands every layer the same mask. What is remembered must never outlive the mask's content:
a mask written in place (directly or through a view, or bypassing the version counter through `.data` or a NumPy
view) is read again, a mask in memory torch did not allocate (NumPy's, DLPack's) or in inference mode (no version
counter) is read every time, and nothing keeps a caller's mask alive."""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import sdpa_impls
from sdpa_impls.impls._tiled import tilemap
from sdpa_impls.impls._tiled.tilemap import MaskTiles
from sdpa_impls.protocol import SDPAInputs

L, E = 256, 16
TILED = ("chunked", "fused")


def window(width: int) -> torch.Tensor:
    i = torch.arange(L)
    return (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < width)


def qkv() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(1, 2, L, E, generator=g) for _ in range(3))  # type: ignore[return-value]


def derived_of(mask: torch.Tensor | None, causal: bool = False) -> tilemap.Derived:
    q, k, v = qkv()
    return MaskTiles.of(SDPAInputs(q, k, v, mask, 0.0, causal))._derived


def check(name: str, mask: torch.Tensor) -> None:
    q, k, v = qkv()
    torch.testing.assert_close(sdpa_impls.get(name)(q, k, v, attn_mask=mask),
                               F.scaled_dot_product_attention(q, k, v, attn_mask=mask), atol=2e-5, rtol=2e-5)


def test_the_same_unchanged_mask_shares_its_tiles_and_another_mask_does_not() -> None:
    mask = window(32)
    first = derived_of(mask)
    assert derived_of(mask) is first
    assert derived_of(mask, causal=True) is not first  # the causal flag changes the tiles
    assert derived_of(window(32)) is not first  # equal content, another tensor: read on its own
    assert derived_of(mask[None]) is not first  # another view: another layout


@pytest.mark.parametrize("name", TILED)
@pytest.mark.parametrize("how", ["in place", "through a view"])
def test_a_mask_written_in_place_is_read_again(name: str, how: str) -> None:
    mask = window(32)  # a narrow window: most key tiles empty
    check(name, mask)
    before = derived_of(mask)
    if how == "in place":
        mask.copy_(window(L))  # every earlier key now seen: a stale map would skip most of them
    else:
        mask.view(-1)[:].copy_(window(L).view(-1))  # a view shares the mask's version counter
    assert derived_of(mask) is not before
    check(name, mask)


@pytest.mark.parametrize("name", TILED)
@pytest.mark.parametrize("how", ["everywhere", "one 8-key word to the right"])
def test_a_mask_written_past_its_version_counter_is_read_again(name: str, how: str) -> None:
    """Writes through `.data` bypass the version counter: the row and column sums of the mask's 8-byte words see
    them."""
    mask = window(32)
    check(name, mask)
    version, before = mask._version, derived_of(mask)
    if how == "everywhere":
        mask.data.copy_(window(L))
    else:  # the same words in each row, one word to the right: every row's sum kept, the column sums not
        rows = mask.view(torch.int64).sum(-1)
        mask.data[: L - 16, 8:] = window(32)[: L - 16, :-8]
        mask.data[: L - 16, :8] = False
        assert torch.equal(mask.view(torch.int64).sum(-1), rows)
    assert mask._version == version  # unseen by the counter
    assert derived_of(mask) is not before
    check(name, mask)


@pytest.mark.parametrize("name", TILED)
@pytest.mark.parametrize("owner", ["numpy", "dlpack", "exported to numpy"])
def test_a_mask_in_memory_others_write_is_read_every_call(name: str, owner: str) -> None:
    """Memory torch did not allocate, or handed to NumPy: its owner writes it without a version counter."""
    buf = np.ascontiguousarray(window(32).numpy())
    if owner == "exported to numpy":
        mask = window(32)
        buf = mask.numpy()
    else:
        mask = torch.from_numpy(buf) if owner == "numpy" else torch.from_dlpack(buf)
    check(name, mask)
    assert derived_of(mask) is not derived_of(mask)
    buf[:, L // 2:] = False  # the next batch's padding, written into the same buffer
    check(name, mask)


@pytest.mark.parametrize("name", TILED)
def test_a_mask_of_no_whole_words_per_row_is_read_every_call(name: str) -> None:
    mask = window(32)[:, : L - 3]  # rows of 253 bytes: no 8-byte words to sum
    q, k, v = qkv()
    k, v = k[:, :, : L - 3], v[:, :, : L - 3]
    inp = SDPAInputs(q, k, v, mask, 0.0, False)
    assert MaskTiles.of(inp)._derived is not MaskTiles.of(inp)._derived
    mask.data.fill_(True)
    torch.testing.assert_close(sdpa_impls.get(name)(q, k, v, attn_mask=mask),
                               F.scaled_dot_product_attention(q, k, v, attn_mask=mask), atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("name", TILED)
def test_an_inference_mode_mask_is_read_every_call(name: str) -> None:
    with torch.inference_mode():
        mask = window(32)
        assert derived_of(mask) is not derived_of(mask)
        check(name, mask)
        mask.copy_(window(L))
        check(name, mask)


@pytest.mark.parametrize("name", TILED)
def test_one_mask_serves_calls_of_other_batches_and_head_groups(name: str) -> None:
    """What a kernel looks up per call (its tile rows, head groups, plans) depends on the batch and the heads as
    well as on the mask: calls of other shapes with the same mask each get their own."""
    mask = window(32)
    g = torch.Generator().manual_seed(1)
    for b, hq, hkv in ((1, 2, 2), (3, 2, 2), (2, 4, 1), (1, 2, 2)):
        q = torch.randn(b, hq, L, E, generator=g)
        k, v = (torch.randn(b, hkv, L, E, generator=g) for _ in range(2))
        torch.testing.assert_close(
            sdpa_impls.get(name)(q, k, v, attn_mask=mask, enable_gqa=hq != hkv),
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=hq != hkv), atol=2e-5, rtol=2e-5)


def test_a_remembered_mask_is_not_kept_alive() -> None:
    mask = window(32)
    check("fused", mask)
    gone = weakref.ref(mask)
    del mask
    gc.collect()
    assert gone() is None
    assert all(ref is None or ref() is not None for ref, _, _ in tilemap._recent.values())


def test_only_the_most_recent_masks_are_remembered() -> None:
    masks = [window(8 * (i + 1)) for i in range(tilemap.RECENT_MASKS + 2)]
    for m in masks:
        derived_of(m)
    assert len(tilemap._recent) <= tilemap.RECENT_MASKS
    first = derived_of(masks[0])  # forgotten: derived again, then remembered
    assert derived_of(masks[0]) is first


@pytest.mark.parametrize("name", TILED)
def test_a_mask_changed_inside_its_partial_tiles_is_read_again(name: str) -> None:
    """The mask blocks a call keeps (TileMasker) belong to the mask as it was: a change that leaves the tile
    map as it is (the same tiles partial) but moves entries inside them is read again."""
    mask = window(32)
    check(name, mask)
    assert any(k[0] == "mask block" for k in derived_of(mask).memo if isinstance(k, tuple))
    mask[1::3, :].logical_and_(torch.eye(L, dtype=torch.bool)[1::3, :].logical_not())  # drop the diagonal of some
    mask[1::3, 0] = True  # rows, keep key 0 for them: no row left empty, the tiles' states unchanged
    check(name, mask)


def test_the_kept_blocks_hold_each_mask_element_once_and_stop_at_their_budget(monkeypatch) -> None:
    """A mask broadcast over heads is kept once, not once a head; past MASK_BLOCKS_BYTES blocks are read from the
    mask on every call, with the same answer."""
    from sdpa_impls.impls._tiled import tiles

    q = torch.randn(1, 4, L, E)
    k, v = torch.randn(1, 4, L, E), torch.randn(1, 4, L, E)
    mask = window(32)
    out = sdpa_impls.get("fused")(q, k, v, attn_mask=mask)
    memo = MaskTiles.of(SDPAInputs(q, k, v, mask, 0.0, False)).memo
    blocks = [b for key, b in memo.items() if isinstance(key, tuple) and key[0] == "mask block"]
    assert blocks and all(b.shape[1] == 1 and b.is_contiguous() and b.dtype == q.dtype for b in blocks)
    # each element once, not once per head (4): in the scores' dtype, 4 bytes an element
    assert memo["mask block bytes"] == sum(b.numel() * 4 for b in blocks) <= mask.numel() * 4
    assert all(set(b.unique().tolist()) == {0.0, float("-inf")} for b in blocks)  # added to the scores
    monkeypatch.setattr(tiles, "MASK_BLOCKS_BYTES", 0)
    fresh = window(32)
    torch.testing.assert_close(sdpa_impls.get("fused")(q, k, v, attn_mask=fresh), out, atol=0, rtol=0)
    kept = MaskTiles.of(SDPAInputs(q, k, v, fresh, 0.0, False)).memo
    assert not any(isinstance(key, tuple) and key[0] == "mask block" for key in kept)
