"""flash-attn's (2 and 4), flashinfer's and the cuDNN frontend's layouts and argument mapping, checked on CPU: plain
torch in, and the attention their documented semantics give on those arguments (emulated in float64) equal to the fp64
reference. No kernel runs."""
from __future__ import annotations

import os

import pytest
import torch

import sdpa_impls
from sdpa_impls.impls.flash_attn import (call_kwargs, causal_window, from_blhe, mapping_reasons, structure_kwargs,
                                         to_blhe)
from sdpa_impls.impls.flashinfer import (from_nhd, jit_toolchain, prefill_kwargs, ragged_batch, to_hnd, to_nhd,
                                         uses_decode, uses_ragged)
from sdpa_impls.impls.flashinfer import mapping_reasons as flashinfer_reasons
from sdpa_impls.impls.cudnn_frontend import ALIGNMENTS, bias_of, diagonal_band, rows_without_keys
from sdpa_impls.impls.flash_attn4 import fa4_kwargs
from sdpa_impls.masks import MaskSpec, Structure, parse, resolve
from sdpa_impls.protocol import SDPAInputs

SHAPES = {  # (B, Hq, Hkv, Lq, Lk, E)
    "square": (2, 4, 4, 9, 9, 8), "gqa": (1, 8, 2, 9, 9, 8), "lq>lk": (1, 4, 2, 13, 9, 8),
    "lq<lk": (1, 4, 4, 5, 11, 8), "decode": (1, 4, 1, 1, 21, 16), "lq>=2lk": (1, 2, 2, 20, 7, 8),
}


def inputs(name: str, causal: bool, mask: bool = False, scale: float | None = None, e: int | None = None) -> SDPAInputs:
    b, hq, hkv, lq, lk, e_shape = SHAPES[name]
    e = e or e_shape
    gen = torch.Generator().manual_seed(len(name))
    q, k, v = (torch.randn(s, generator=gen) for s in ((b, hq, lq, e), (b, hkv, lk, e), (b, hkv, lk, e)))
    m = None
    if mask:
        m = torch.rand((lq, lk), generator=gen) < 0.7
        m[:, 0] = True
    return SDPAInputs(q, k, v, m, is_causal=causal, scale=scale, enable_gqa=hq != hkv)


def reference(inp: SDPAInputs) -> torch.Tensor:
    return sdpa_impls.reference(inp.query, inp.key, inp.value, inp.attn_mask, is_causal=inp.is_causal,
                                scale=inp.scale, enable_gqa=inp.enable_gqa)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor, scale: float,
           bias: torch.Tensor | None = None) -> torch.Tensor:
    """softmax over the kept keys in float64, `bias` added to the scaled scores; q (.., Hq, Lq, E), k/v
    (.., Hkv, Lk, E), query head h reads h // G."""
    g = q.shape[-3] // k.shape[-3]
    k, v = k.double().repeat_interleave(g, -3), v.double().repeat_interleave(g, -3)
    s = q.double() @ k.transpose(-1, -2) * scale
    s = (s if bias is None else s + bias).masked_fill(~keep, float("-inf"))
    return torch.softmax(s, -1) @ v


def flash_attn_emulated(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float, causal: bool,
                        window_size: tuple[int, int], alibi_slopes: tuple[float, ...] | None = None) -> torch.Tensor:
    """flash_attn_func as its README defines it, on (B, L, H, E): query i sees keys
    i + Lk - Lq - left ... i + Lk - Lq + right (-1 or >= Lk: no limit); causal means right = 0; alibi_slopes (one
    per query head) add -slope·|i + Lk - Lq - j| to the scaled score of query i and key j."""
    lq, lk = q.shape[1], k.shape[1]
    left, right = (-1 if w >= lk else w for w in window_size)
    right = 0 if causal else right
    i, j = torch.arange(lq)[:, None] + lk - lq, torch.arange(lk)[None, :]
    keep = torch.ones(lq, lk, dtype=torch.bool)
    if right >= 0:
        keep &= j <= i + right
    if left >= 0:
        keep &= j >= i - left
    bias = None
    if alibi_slopes is not None:
        bias = -torch.tensor(alibi_slopes, dtype=torch.float64)[:, None, None] * (i - j).abs()  # (Hq, Lq, Lk)
    out = attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), keep, softmax_scale, bias)
    return out.transpose(1, 2)  # (B, Lq, H, Ev)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", list(SHAPES))
def test_flash_attn_arguments_mean_our_attention_or_say_why_not(name: str, causal: bool) -> None:
    inp = inputs(name, causal, scale=0.3)
    q, k, v = (to_blhe(t) for t in (inp.query, inp.key, inp.value))
    assert q.shape == (inp.query.shape[0], inp.query.shape[2], inp.query.shape[1], inp.query.shape[3])
    assert q.stride(-1) == 1  # flash-attn's one layout requirement on the last dim
    reasons = mapping_reasons(inp)
    if causal and name in ("lq<lk", "decode", "lq>=2lk"):
        assert causal_window(True, q.shape[1], k.shape[1]) is None
        assert reasons and "aligned bottom-right" in reasons[0]
        return
    assert reasons == []
    out = from_blhe(flash_attn_emulated(q, k, v, **call_kwargs(inp)))
    torch.testing.assert_close(out, reference(inp), rtol=1e-6, atol=1e-6)


def test_flash_attn_refuses_what_it_cannot_take_on_any_machine() -> None:
    q = torch.randn(1, 2, 4, 8)
    reasons = sdpa_impls.get("flash_attn").unsupported_reasons(q, q, torch.randn(1, 2, 4, 6),
                                                              attn_mask=torch.ones(4, 4, dtype=torch.bool))
    assert reasons[0] == "flash_attn is not installed (pip install flash-attn)" or reasons[0].startswith("device=")
    assert "device=cpu (supported: cuda)" in reasons and "dtype=fp32 (supported: bf16, fp16)" in reasons
    assert mapping_reasons(SDPAInputs(q, q, q, torch.ones(4, 4, dtype=torch.bool))) == [
        "attn_mask: flash_attn_func takes no mask tensor; it states a `window-W` structure (window_size) and `alibi` "
        "(alibi_slopes) natively, with Lq = Lk"]
    assert mapping_reasons(SDPAInputs(q, q, torch.randn(1, 2, 4, 6))) == [
        "Ev=6 != E=8 (flash_attn_func takes one head dim for q, k and v)"]
    fa3 = sdpa_impls.get("flash_attn3").unsupported_reasons(q, q, q)
    assert any("flash_attn_interface" in r for r in fa3) or any("sm90" in r for r in fa3)
    # FlashAttention-3 checks head_size % 8 == 0 and does not pad (hopper/flash_api.cpp); FlashAttention-2 pads
    odd = torch.randn(1, 2, 4, 12)
    assert "head dim E=12, Ev=12 (supported: multiples of 8)" in sdpa_impls.get("flash_attn3").unsupported_reasons(
        odd, odd, odd)
    assert not any("multiples" in r for r in sdpa_impls.get("flash_attn").unsupported_reasons(odd, odd, odd))


def flashinfer_prefill_emulated(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_layout: str, sm_scale: float,
                                causal: bool = False, custom_mask: torch.Tensor | None = None) -> torch.Tensor:
    """single_prefill_with_kv_cache: the query NHD (Lq, H, E), K/V HND (H, Lk, E); custom_mask True = attend;
    causal (square here)."""
    assert kv_layout == "HND" and k.is_contiguous() and v.is_contiguous()
    lq, lk = q.shape[0], k.shape[1]
    keep = custom_mask if custom_mask is not None else torch.ones(lq, lk, dtype=torch.bool)
    if causal:
        assert lq == lk, "causal is passed only where top-left and bottom-right agree"
        keep = keep & torch.ones(lq, lk, dtype=torch.bool).tril()
    return attend(q.transpose(0, 1), k, v, keep, sm_scale).transpose(0, 1)


@pytest.mark.parametrize("mask", [False, True], ids=["nomask", "mask"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", ["gqa", "lq>lk", "lq<lk", "decode"])
def test_flashinfer_arguments_mean_our_attention(name: str, causal: bool, mask: bool) -> None:
    inp = inputs(name, causal, mask, e=64)  # flashinfer's kernels take multiples of 64
    assert flashinfer_reasons(inp) == []
    q, k, v = to_nhd(inp.query), to_hnd(inp.key), to_hnd(inp.value)
    assert q.shape == (inp.query.shape[2], inp.query.shape[1], inp.query.shape[3])
    assert k.shape == inp.key.shape[1:] and k.is_contiguous() and v.is_contiguous()  # the decode kernel's rule
    assert k.data_ptr() == inp.key.data_ptr()  # contiguous inputs: the same memory, no copy
    if uses_decode(inp):  # single_decode_with_kv_cache: one query token, every key
        assert name == "decode" and not mask
        out = from_nhd(attend(q[0][:, None], k, v, torch.ones(1, k.shape[1], dtype=torch.bool),
                              inp.softmax_scale)[:, 0].unsqueeze(0))
    else:
        out = from_nhd(flashinfer_prefill_emulated(q, k, v, **prefill_kwargs(inp)))
    torch.testing.assert_close(out, reference(inp), rtol=1e-6, atol=1e-6)


def test_flashinfer_says_what_a_single_request_kernel_cannot_take() -> None:
    inp = inputs("square", causal=False, e=64)  # B = 2
    assert flashinfer_reasons(inp)[0].startswith("batch B=2: flashinfer's single_prefill/single_decode take one "
                                                 "request (B=1); a batch runs as a `padding` decode batch")
    q = torch.randn(1, 2, 4, 64)
    per_head = SDPAInputs(q, q, q, torch.ones(2, 4, 4, dtype=torch.bool))
    assert "varies over batch or heads" in flashinfer_reasons(per_head)[0]
    reasons = sdpa_impls.get("flashinfer").unsupported_reasons(q.requires_grad_(), q, q)
    assert "device=cpu (supported: cuda)" in reasons
    assert "backward (inputs require grad; this implementation is forward-only)" in reasons


def test_flashinfer_refuses_head_dims_its_kernels_are_not_built_for_and_decodes_any_group_through_prefill() -> None:
    """Its FA2 prefill takes head dims that are multiples of 64 only, and checks none (flashinfer's own issue
    tracker: 80 or 96 fault, 72 returns wrong values); q/k and v share one head dim as called here; the decode
    kernel is built for query-head groups 1, 2, 3, 4, 6 and 8, so a decode of any other group runs as a prefill."""
    q, k = torch.randn(1, 4, 1, 96), torch.randn(1, 4, 21, 96)
    assert "head dim E=96, Ev=96 (supported: multiples of 64)" in sdpa_impls.get("flashinfer").unsupported_reasons(
        q, k, k)
    assert flashinfer_reasons(SDPAInputs(q[..., :64], k[..., :64], k)) == [
        "Ev=96 != E=64 (flashinfer's kernels, as called here, take one head dim for q, k and v)"]
    for hq, hkv, decodes in ((8, 2, True), (6, 1, True), (16, 1, False), (32, 1, False), (10, 2, False)):
        gen = torch.Generator().manual_seed(hq)
        q, k, v = (torch.randn(s, generator=gen) for s in ((1, hq, 1, 64), (1, hkv, 21, 64), (1, hkv, 21, 64)))
        inp = SDPAInputs(q, k, v, enable_gqa=True)
        assert uses_decode(inp) == decodes and flashinfer_reasons(inp) == [], (hq, hkv)
        if not decodes:  # the prefill kernel's arguments still mean our attention
            out = from_nhd(flashinfer_prefill_emulated(to_nhd(q), to_hnd(k), to_hnd(v), **prefill_kwargs(inp)))
            torch.testing.assert_close(out, reference(inp), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("word,causal", [("window-1", False), ("window-4", False), ("window-4", True),
                                         ("window-50", False), ("alibi", False), ("alibi", True)])
@pytest.mark.parametrize("name", ["square", "gqa"])
def test_flash_attn_states_window_and_alibi_structures_with_its_own_arguments(name: str, word: str,
                                                                             causal: bool) -> None:
    """A `window-W` as window_size=(W - 1, 0) (both generations) and ALiBi as alibi_slopes (FlashAttention-2 only),
    emulated by flash-attn's documented rules, equal the fp64 reference with the dense mask every other
    implementation gets; FA3 says why it cannot take ALiBi, and neither takes a structure with Lq != Lk."""
    b, hq, hkv, lq, lk, e = SHAPES[name]
    structure = resolve(parse(word), lq, lk, b, hq)
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(sh, generator=gen) for sh in ((b, hq, lq, e), (b, hkv, lk, e), (b, hkv, lk, e)))
    inp = SDPAInputs(q, k, v, structure.dense(b, hq, torch.float32, "cpu"), is_causal=causal, scale=0.3,
                     enable_gqa=hq != hkv, structure=structure)
    assert mapping_reasons(inp) == []
    kwargs = call_kwargs(inp)
    assert ("alibi_slopes" in kwargs) == (word == "alibi")
    out = from_blhe(flash_attn_emulated(*(to_blhe(t) for t in (q, k, v)), **kwargs))
    torch.testing.assert_close(out, reference(inp), rtol=1e-5, atol=1e-5)
    fa3 = mapping_reasons(inp, alibi=False)
    assert fa3 == ([] if word != "alibi" else [
        "attn_mask: flash_attn_func takes no mask tensor; it states a `window-W` structure (window_size) natively, "
        "with Lq = Lk"])
    shifted = SDPAInputs(q[:, :, :-1], k, v, inp.attn_mask[..., :-1, :], is_causal=causal, scale=0.3,
                         enable_gqa=hq != hkv, structure=Structure(structure.spec, lq - 1, lk, (), structure.slopes))
    assert structure_kwargs(shifted, alibi=True) is None and mapping_reasons(shifted)


def flashinfer_ragged_emulated(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, qo_indptr: torch.Tensor,
                               kv_indptr: torch.Tensor, scale: float) -> torch.Tensor:
    """BatchPrefillWithRaggedKVCacheWrapper.run after plan(causal=True), as flashinfer documents it: request r's
    queries over its own keys, the causal mask aligned bottom-right (query i sees keys j <= i + kv_len - qo_len)."""
    outs = []
    for r in range(len(qo_indptr) - 1):
        keys = slice(int(kv_indptr[r]), int(kv_indptr[r + 1]))
        qs, ks, vs = q[qo_indptr[r]:qo_indptr[r + 1]], k[keys], v[keys]
        keep = torch.ones(qs.shape[0], ks.shape[0], dtype=torch.bool).tril(ks.shape[0] - qs.shape[0])
        outs.append(attend(qs.transpose(0, 1), ks.transpose(0, 1), vs.transpose(0, 1), keep, scale).transpose(0, 1))
    return torch.cat(outs)  # (B·Lq, Hq, Ev)


@pytest.mark.parametrize("lq", [1, 4])
def test_flashinfer_runs_a_padded_decode_batch_as_ragged_keys(lq: int) -> None:
    """The serve preset's batches: the ragged layout and indptrs, emulated by flashinfer's documented rule, equal the
    fp64 reference with the dense padding mask; a batch it cannot state says why."""
    b, hq, hkv, lk, e = 3, 8, 2, 40, 64
    structure = Structure(MaskSpec("padding"), lq, lk, lengths=(40, 7, 4))
    gen = torch.Generator().manual_seed(lq)
    q, k, v = (torch.randn(sh, generator=gen) for sh in ((b, hq, lq, e), (b, hkv, lk, e), (b, hkv, lk, e)))
    inp = SDPAInputs(q, k, v, structure.dense(b, hq, torch.float32, "cpu"), enable_gqa=True, structure=structure)
    assert uses_ragged(inp) and flashinfer_reasons(inp) == []
    qr, kr, vr, qo_indptr, kv_indptr = ragged_batch(inp)
    assert qr.shape == (b * lq, hq, e) and kr.shape == vr.shape == (40 + 7 + 4, hkv, e) and kr.is_contiguous()
    assert qo_indptr.dtype == kv_indptr.dtype == torch.int32 and kv_indptr.tolist() == [0, 40, 47, 51]
    out = flashinfer_ragged_emulated(qr, kr, vr, qo_indptr, kv_indptr, inp.softmax_scale)
    torch.testing.assert_close(out.unflatten(0, (b, lq)).transpose(1, 2), reference(inp), rtol=1e-6, atol=1e-6)
    causal = SDPAInputs(q, k, v, inp.attn_mask, is_causal=True, enable_gqa=True, structure=structure)
    short = Structure(MaskSpec("padding"), lq, lk, lengths=(40, 7, lq - 1))
    for refused in (causal, SDPAInputs(q, k, v, short.dense(b, hq, torch.float32, "cpu"), enable_gqa=True,
                                       structure=short)):
        assert not uses_ragged(refused) and "a batch runs as a `padding` decode batch" in flashinfer_reasons(refused)[0]


# --- FlashAttention-4 and the cuDNN frontend: their arguments and the attention they mean, on CPU tensors -----------
def fa4_emulated(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float, causal: bool,
                 window_size: tuple[int | None, int | None]) -> torch.Tensor:
    """FlashAttention-4's flash_attn_func on (B, L, H, E): as FlashAttention-2's, with None for a side without limit
    (flash_attn/cute/mask.py: key j <= i + Lk - Lq + right, j >= i + Lk - Lq - left)."""
    assert all(w is None or w >= 0 for w in window_size), window_size  # -1 is not "no limit" there
    left, right = (-1 if w is None else w for w in window_size)
    return flash_attn_emulated(q, k, v, softmax_scale, causal, (left, right))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", ["square", "gqa", "lq>lk"])
def test_flash_attn4_arguments_mean_our_attention(name: str, causal: bool) -> None:
    inp = inputs(name, causal, scale=0.3)
    kwargs = fa4_kwargs(call_kwargs(inp, alibi=False))
    assert all(w is None or w >= 0 for w in kwargs["window_size"])
    q, k, v = (to_blhe(t) for t in (inp.query, inp.key, inp.value))
    torch.testing.assert_close(from_blhe(fa4_emulated(q, k, v, **kwargs)), reference(inp), rtol=1e-6, atol=1e-6)


def test_flash_attn4_says_why_not_and_takes_its_own_head_dims() -> None:
    q, v6 = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 16)
    fa4 = sdpa_impls.get("flash_attn4")
    reasons = fa4.unsupported_reasons(q, q, q)
    assert reasons[0] in ("flash_attn.cute is not installed (pip install --pre flash-attn-4)",
                          "device=cpu (supported: cuda)")
    assert "device=cpu (supported: cuda)" in reasons and "dtype=fp32 (supported: bf16, fp16)" in reasons
    odd = torch.randn(1, 2, 4, 12)
    assert "head dim E=12, Ev=12 (supported: multiples of 8)" in fa4.unsupported_reasons(odd, odd, odd)
    assert mapping_reasons(SDPAInputs(q, q, v6), alibi=False, one_head_dim=False) == []  # E != Ev: its own check
    assert fa4.alibi is False and fa4.support.dropout is False


@pytest.mark.parametrize("lq, lk", [(9, 9), (13, 9), (5, 11), (1, 21), (20, 7)])
def test_cudnn_diagonal_bands_are_our_top_left_causal(lq: int, lk: int) -> None:
    """cuDNN keeps key j for query i where j <= i + right (TOP_LEFT) or j <= i + Lk - Lq + right (BOTTOM_RIGHT)."""
    i, j = torch.arange(lq)[:, None], torch.arange(lk)[None, :]
    ours = torch.ones(lq, lk, dtype=torch.bool).tril()
    for alignment in ALIGNMENTS:
        band = diagonal_band(True, lq, lk, alignment)
        if band is None:
            assert alignment == "BOTTOM_RIGHT" and lq < lk
            continue
        offset = 0 if band[0] == "TOP_LEFT" else lk - lq
        assert band[0] == alignment and torch.equal(j <= i + offset + band[1], ours), band
    assert diagonal_band(False, lq, lk, "TOP_LEFT") == ("", 0)


@pytest.mark.parametrize("mask_shape", [(9, 9), (1, 9), (2, 1, 9, 9), (1, 4, 1, 9)])
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_cudnn_bias_is_the_mask_added_to_the_scores(kind: str, mask_shape: tuple[int, ...]) -> None:
    inp0 = inputs("square", causal=True)
    gen = torch.Generator().manual_seed(3)
    keep = torch.rand(mask_shape, generator=gen) < 0.6
    keep[..., 0] = True  # every row keeps a key
    mask = keep if kind == "bool" else torch.randn(mask_shape, generator=gen).masked_fill(~keep, float("-inf"))
    inp = SDPAInputs(inp0.query, inp0.key, inp0.value, mask, is_causal=True)
    bias = bias_of(inp)
    m4 = (1,) * (4 - len(mask_shape)) + mask_shape
    assert bias.shape == (m4[0], m4[1], 9, 9) and bias.is_contiguous() and bias.dtype == inp.query.dtype
    keep_all = torch.ones(9, 9, dtype=torch.bool).tril()  # the band, as cuDNN applies it beside the bias
    out = attend(inp.query, inp.key, inp.value, keep_all, inp.softmax_scale, bias.double())
    torch.testing.assert_close(out, reference(inp), rtol=1e-6, atol=1e-6)
    assert not rows_without_keys(inp)
    assert bias_of(inputs("square", causal=False)) is None


def test_cudnn_says_where_a_row_has_no_key_and_why_it_cannot_run_here() -> None:
    inp = inputs("lq>lk", causal=False)
    keep = torch.ones(13, 9, dtype=torch.bool)
    keep[4] = False
    assert rows_without_keys(SDPAInputs(inp.query, inp.key, inp.value, keep, enable_gqa=True))
    float_mask = torch.zeros(13, 9).masked_fill(~keep, float("-inf"))
    assert rows_without_keys(SDPAInputs(inp.query, inp.key, inp.value, float_mask, enable_gqa=True))
    keep[4, 5] = True  # row 4 keeps key 5 only, which top-left causal then masks: still no key
    assert rows_without_keys(SDPAInputs(inp.query, inp.key, inp.value, keep, is_causal=True, enable_gqa=True))
    assert not rows_without_keys(SDPAInputs(inp.query, inp.key, inp.value, None, is_causal=True, enable_gqa=True))
    q = torch.randn(1, 2, 4, 8, dtype=torch.bfloat16)
    reasons = sdpa_impls.get("cudnn_frontend").unsupported_reasons(q, q, q)
    assert reasons[0] in ("cudnn frontend is not installed (pip install nvidia-cudnn-frontend)",
                          "device=cpu (supported: cuda)")
    assert "device=cpu (supported: cuda)" in reasons
    odd = torch.randn(1, 2, 4, 12)
    assert {"dtype=fp32 (supported: bf16, fp16)", "head dim E=12, Ev=12 (supported: multiples of 8)"} <= set(
        sdpa_impls.get("cudnn_frontend").unsupported_reasons(odd, odd, odd))


def test_flashinfer_finds_its_jit_toolchain_or_names_what_is_missing(tmp_path) -> None:
    """nvcc under CUDA_HOME and ninja on PATH, as real executables in folders made here; each missing one is named."""
    def executable(folder, name):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("#!/bin/sh\nexit 0\n")
        (folder / name).chmod(0o755)

    cuda, tools = tmp_path / "cuda", tmp_path / "tools"
    executable(cuda / "bin", "nvcc")
    executable(tools, "ninja")
    assert jit_toolchain({"CUDA_HOME": str(cuda), "PATH": str(tools)}) == ({}, [])
    settings, reasons = jit_toolchain({"CUDA_HOME": str(tmp_path / "empty"), "PATH": str(tmp_path / "none")})
    missing_nvcc = f"CUDA_HOME={tmp_path / 'empty'} has no bin/nvcc"
    assert reasons[0] == f"flashinfer builds its kernels on first use with nvcc: {missing_nvcc}"
    try:
        import ninja  # noqa: F401
    except ImportError:
        assert reasons[1:] == ["flashinfer builds its kernels on first use with ninja: not on PATH (pip install ninja)"]
    else:  # the ninja package's own binary goes first on PATH
        assert len(reasons) == 1 and settings["PATH"].split(os.pathsep)[0].endswith("bin")
