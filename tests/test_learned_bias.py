"""A learned bias (a float attn_mask that requires grad) through chunked and fused: the mask's gradient is torch's,
in the mask's own shape, summed over the dims where it broadcasts, on every path of the tiled backward (one key
tile and several, the forward's P kept or recomputed, GQA, causal, the bias alone requiring grad)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import sdpa_impls

CASES = {  # (B, Hq, Hkv, Lq, Lk, E), the mask's shape (-1: that dim of the scores), flags
    "2-D bias": ((2, 2, 2, 20, 30, 8), (-1, -1), {}),
    "per head, batch broadcast": ((2, 4, 4, 20, 20, 8), (1, -1, -1, -1), dict(is_causal=True)),
    "per batch, head broadcast": ((2, 2, 2, 20, 20, 8), (-1, 1, -1, -1), {}),
    "key padding row": ((2, 2, 2, 20, 20, 8), (-1, 1, 1, -1), {}),
    "3-D, gqa": ((1, 4, 2, 20, 20, 8), (-1, -1, -1), dict(enable_gqa=True)),
    "long rows": ((1, 2, 2, 600, 2500, 8), (-1, -1), {}),  # chunked: keys span key tiles; fused recomputes P
    "long, per head, causal": ((1, 2, 2, 1100, 1100, 8), (1, -1, -1, -1), dict(is_causal=True)),
}


@pytest.mark.parametrize("name", ["chunked", "fused"])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("qkv_grad", [True, False])
def test_a_learned_bias_gets_torchs_gradient(name: str, case: str, qkv_grad: bool) -> None:
    (b, hq, hkv, lq, lk, e), mask_dims, flags = CASES[case]
    g = torch.Generator().manual_seed(7)
    full = (b, hq, lq, lk)[-len(mask_dims):]
    mask_shape = tuple(f if d == -1 else d for d, f in zip(mask_dims, full))
    base = [torch.randn(b, h, n, e, generator=g, dtype=torch.float64) for h, n in ((hq, lq), (hkv, lk), (hkv, lk))]
    bias0 = torch.randn(mask_shape, generator=g, dtype=torch.float64)
    weights = torch.randn(b, hq, lq, e, generator=g, dtype=torch.float64)
    grads = []  # torch's, or naive's where torch refuses a mask beside is_causal when gradients are asked for
    reference = sdpa_impls.get("naive") if flags.get("is_causal") else F.scaled_dot_product_attention
    for fn in (reference, sdpa_impls.get(name)):
        ins = [t.clone().requires_grad_(qkv_grad) for t in base]
        bias = bias0.clone().requires_grad_()
        (fn(*ins, attn_mask=bias, **flags) * weights).sum().backward()
        grads.append([bias.grad] + [t.grad for t in ins])
    (bias_want, *want), (bias_got, *got) = grads
    assert bias_got is not None and bias_got.shape == bias0.shape, f"{name} gave the bias no gradient of its shape"
    torch.testing.assert_close(bias_got, bias_want, atol=1e-11, rtol=1e-11)
    for a, t in zip(got, want):
        assert (a is None) == (t is None)
        if a is not None:
            torch.testing.assert_close(a, t, atol=1e-11, rtol=1e-11)


@pytest.mark.parametrize("name", ["chunked", "fused"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_learned_bias_in_fp32_and_bf16_is_within_naives_error(name: str, dtype: torch.dtype) -> None:
    """The half and fp32 paths (an fp32 dS tile, and bf16's widened or bf16 compute) against fp64, 2x naive's."""
    g = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(1, 2, 300, 16, generator=g, dtype=torch.float64) for _ in range(3))
    bias0 = torch.randn(2, 300, 300, generator=g, dtype=torch.float64)
    weights = torch.randn(1, 2, 300, 16, generator=g, dtype=torch.float64)

    def bias_grad(impl: str, dt: torch.dtype) -> torch.Tensor:
        ins = [t.to(dt, copy=True).requires_grad_() for t in (q, k, v)]
        bias = bias0.to(dt, copy=True).requires_grad_()
        (sdpa_impls.get(impl)(*ins, attn_mask=bias, is_causal=False) * weights.to(dt)).sum().backward()
        assert bias.grad is not None and bias.grad.dtype == dt
        return bias.grad.double()

    exact = bias_grad("naive", torch.float64)
    naive_error = (bias_grad("naive", dtype) - exact).abs().max().item()
    error = (bias_grad(name, dtype) - exact).abs().max().item()
    assert error <= 2 * naive_error + 1e-6, f"{error:.3g} against naive's {naive_error:.3g}"
