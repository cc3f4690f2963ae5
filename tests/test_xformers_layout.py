"""xformers' layouts and bias, checked on CPU: plain torch in, shapes by xformers' own rules, and the attention
they describe (emulated in float64 in xformers' layout) equal to the fp64 reference."""
from __future__ import annotations

import pytest
import torch

import sdpa_impls
from sdpa_impls.impls.xformers import _bias_tensor, _layout
from sdpa_impls.protocol import SDPAInputs

CASES = {  # (B, Hq, Hkv, Lq, Lk, E); Lk not a multiple of 8 so the row padding matters
    "mha": (2, 4, 4, 5, 13, 8),
    "gqa": (2, 8, 2, 5, 13, 8),
    "mqa-decode": (1, 4, 1, 1, 21, 16),
}


def inputs(shape: tuple[int, ...], mask: str, causal: bool, grad: bool, dtype=torch.float32) -> SDPAInputs:
    b, hq, hkv, lq, lk, e = shape
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(s, generator=gen).to(dtype).requires_grad_(grad)
               for s in ((b, hq, lq, e), (b, hkv, lk, e), (b, hkv, lk, e)))
    m = None
    if mask == "bool":  # per batch and query head, so a wrong head mapping shows
        m = torch.rand((b, hq, lq, lk), generator=gen) < 0.8
        m[..., 0] = True
    elif mask == "float":
        m = torch.randn((b, hq, lq, lk), generator=gen).to(dtype)
    return SDPAInputs(q, k, v, m, is_causal=causal, enable_gqa=hq != hkv)


def emulate(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, scale: float) -> torch.Tensor:
    """memory_efficient_attention's documented meaning, in whichever layout it gets (BMHK or BMGHK)."""
    q, k, v = (t.double().movedim(1, -2) for t in (q, k, v))  # (B, [G,] H, M, K)
    w = torch.softmax(q @ k.transpose(-1, -2) * scale + bias.double(), dim=-1)
    return (w @ v).movedim(-2, 1)


@pytest.mark.parametrize("grad", [False, True], ids=["fwd", "bwd"])
@pytest.mark.parametrize("name", list(CASES))
def test_layout_is_bmhk_or_bmghk_and_bias_has_xformers_shape(name: str, grad: bool) -> None:
    inp = inputs(CASES[name], "bool", causal=True, grad=grad)
    q, k, v = _layout(inp)
    bias = _bias_tensor(inp)
    grouped = name != "mha" and not grad  # no xformers backward op takes BMGHK
    assert q.dim() == k.dim() == v.dim() == (5 if grouped else 4)
    if grouped:  # BMGHK: cutlass picks head group g of the bias with select(dim=1)
        assert (k.shape[0], *k.shape[2:4]) == (q.shape[0], *q.shape[2:4])
        assert bias.shape == (q.shape[0], q.shape[2], q.shape[3], q.shape[1], k.shape[1])
    else:  # fmha.Inputs.validate_inputs' rule for BMHK
        assert k.shape[:3] == (q.shape[0], k.shape[1], q.shape[2])
        assert bias.shape == (q.shape[0], q.shape[2], q.shape[1], k.shape[1])
    for dtype in (torch.float32, torch.float16, torch.bfloat16):  # xformers' _check_bias_alignment
        b = _bias_tensor(inputs(CASES[name], "float", causal=False, grad=grad, dtype=dtype))
        alignment = 128 // torch.finfo(dtype).bits
        assert all(b.stride(d) % alignment == 0 for d in range(b.dim() - 1)), b.stride()
        assert b.stride(-1) == 1


@pytest.mark.parametrize("grad", [False, True], ids=["fwd", "bwd"])
@pytest.mark.parametrize("mask,causal", [("bool", False), ("float", True), ("bool", True)])
@pytest.mark.parametrize("name", list(CASES))
def test_layout_and_bias_describe_the_same_attention(name: str, mask: str, causal: bool, grad: bool) -> None:
    inp = inputs(CASES[name], mask, causal, grad)
    q, k, v = _layout(inp)
    b, hq, lq, ev = inp.query.shape[0], inp.query.shape[1], inp.query.shape[2], inp.value.shape[-1]
    out = emulate(q, k, v, _bias_tensor(inp), inp.softmax_scale).reshape(b, lq, hq, ev).transpose(1, 2)
    ref = sdpa_impls.reference(inp.query, inp.key, inp.value, inp.attn_mask, is_causal=causal,
                               enable_gqa=inp.enable_gqa)
    torch.testing.assert_close(out, ref.detach(), rtol=1e-5, atol=1e-5)
    if grad:  # the GQA repeat sends each key/value head the sum of its query heads' gradients
        g = torch.randn_like(ref)
        got = torch.autograd.grad(out, (inp.query, inp.key, inp.value), g)
        want = torch.autograd.grad(ref, (inp.query, inp.key, inp.value), g)
        for a, w in zip(got, want):
            torch.testing.assert_close(a, w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("grad", [False, True], ids=["fwd", "bwd"])
@pytest.mark.parametrize("name", list(CASES))
def test_packed_layout_concatenates_the_batch_and_keeps_gqa_grouped(name: str, grad: bool) -> None:
    """xformers' variable-length layout (1, B·L, ...) holds the per-batch layout's rows one after another; GQA
    forward keeps K/V at their own size, broadcast over G (stride 0), so that xformers dispatches grouped heads
    and reads each K/V head once, not once per query head."""
    inp = inputs(CASES[name], "bool", causal=True, grad=grad)
    for plain, packed in zip(_layout(inp), _layout(inp, packed=True)):
        assert packed.shape == (1, plain.shape[0] * plain.shape[1], *plain.shape[2:])
        torch.testing.assert_close(packed[0], plain.reshape(-1, *plain.shape[2:]), rtol=0, atol=0)
    if name != "mha" and not grad:
        k = _layout(inp, packed=True)[1]
        assert k.stride(3) == 0
        assert k.untyped_storage().nbytes() == inp.key.numel() * inp.key.element_size()
