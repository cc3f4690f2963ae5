"""The blockwise fp64 reference gradients equal autograd through the fp64 reference."""
from __future__ import annotations

import pytest
import torch

import sdpa_impls
from sdpa_impls.bench.refgrads import reference_grads

CASES = {  # (B, Hq, Hkv, Lq, Lk, E, Ev)
    "mha": (2, 2, 2, 7, 11, 8, 8),
    "gqa": (1, 4, 2, 9, 9, 8, 4),
    "cross": (1, 2, 2, 13, 5, 4, 4),
}


@pytest.mark.parametrize("block_bytes", [1, 1 << 20], ids=["one-row-blocks", "one-block"])
@pytest.mark.parametrize("mask", ["none", "bool", "float", "empty-rows"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("name", list(CASES))
def test_blockwise_gradients_equal_autograd_through_the_reference(name, causal, mask, block_bytes) -> None:
    b, hq, hkv, lq, lk, e, ev = CASES[name]
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(s, generator=gen, dtype=torch.float64, requires_grad=True)
               for s in ((b, hq, lq, e), (b, hkv, lk, e), (b, hkv, lk, ev)))
    m = None
    if mask in ("bool", "empty-rows"):
        m = torch.rand((b, 1, lq, lk), generator=gen) < 0.7
        if mask == "empty-rows":
            m[:, :, 1] = False  # a row with every key masked: zeros out, zero gradient
    elif mask == "float":
        m = torch.randn((lq, lk), generator=gen, dtype=torch.float64)
    do = torch.randn((b, hq, lq, ev), generator=gen, dtype=torch.float64)
    out = sdpa_impls.reference(q, k, v, m, is_causal=causal, enable_gqa=hq != hkv)
    want = torch.autograd.grad(out, (q, k, v), do)
    got = reference_grads(q, k, v, do, m, is_causal=causal, block_bytes=block_bytes)
    for a, w in zip(got, want):
        assert a.shape == w.shape and a.dtype == torch.float64
        torch.testing.assert_close(a, w, rtol=1e-10, atol=1e-12)
