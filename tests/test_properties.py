"""Property-based: random shapes and flags, every CPU implementation stays within the tolerance of fp64."""
from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sdpa_impls
from sdpa_impls import max_abs_error, reference, tolerance

IMPLS = ["chunked", "fused", "torch_sdpa", "torch_sdpa_math"]


@st.composite
def calls(draw: st.DrawFn) -> dict:
    b, hkv, group = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 3))
    lq, lk = draw(st.integers(1, 300)), draw(st.integers(1, 300))
    e, ev = draw(st.sampled_from([8, 16, 32])), draw(st.sampled_from([8, 16, 32]))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    hq = hkv * group
    args = {"query": torch.randn(b, hq, lq, e, generator=gen), "key": torch.randn(b, hkv, lk, e, generator=gen),
            "value": torch.randn(b, hkv, lk, ev, generator=gen), "is_causal": draw(st.booleans()),
            "enable_gqa": hq != hkv, "scale": draw(st.sampled_from([None, 0.05, 1.0]))}
    mask = draw(st.sampled_from(["none", "bool", "float"]))
    if mask == "bool":
        args["attn_mask"] = torch.rand(lq, lk, generator=gen) < draw(st.sampled_from([0.0, 0.5, 0.95]))
    elif mask == "float":
        args["attn_mask"] = torch.randn(1, hq, 1, lk, generator=gen)
    return args


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(args=calls())
@pytest.mark.parametrize("name", IMPLS)
def test_any_shape_and_flags_match_fp64(name: str, args: dict) -> None:
    impl = sdpa_impls.get(name)
    if impl.unsupported_reasons(**args):
        return
    ref = reference(**args)
    naive_err = max_abs_error(sdpa_impls.get("naive")(**args), ref)
    out = impl(**args)
    assert torch.isfinite(out).all()
    assert max_abs_error(out, ref) <= tolerance(naive_err, torch.float32, ref)
