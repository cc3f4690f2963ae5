"""The drop-in call where a caller's own tensors could be touched or misread: a learned bias (a float mask that
requires grad) gets torch's gradient or a clear refusal, never none; torch's pinned backends probe support on
views of the caller's tensors (its strides, no gradient into its tensors, none of its random numbers); flags of the
wrong type are one error for every implementation, as torch refuses them."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import sdpa_impls
from sdpa_impls.impls import torch_sdpa
from sdpa_impls.protocol import Unsupported

EAGER_CPU = ("naive", "chunked", "fused", "torch_sdpa", "torch_sdpa_math", "torch_sdpa_flash")


def qkv(*shape: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*shape, generator=g) for _ in range(3))  # type: ignore[return-value]


@pytest.mark.parametrize("name", EAGER_CPU)
@pytest.mark.parametrize("also_q", [True, False])
def test_a_learned_bias_gets_torchs_gradient_or_a_clear_refusal(name: str, also_q: bool) -> None:
    q, k, v = qkv(1, 2, 6, 8)
    bias0 = torch.randn(1, 2, 6, 6, generator=torch.Generator().manual_seed(1))
    grads = []
    for fn in (F.scaled_dot_product_attention, sdpa_impls.get(name)):
        qq, bias = q.clone().requires_grad_(also_q), bias0.clone().requires_grad_()
        try:
            fn(qq, k, v, attn_mask=bias).sum().backward()
        except Unsupported as exc:
            assert "attn_mask requires grad" in str(exc) or name == "torch_sdpa_flash", exc
            return
        grads.append(bias.grad)
    assert grads[1] is not None, f"{name} dropped the bias's gradient"
    torch.testing.assert_close(grads[1], grads[0], atol=1e-5, rtol=1e-5)  # the first call: the probe adds nothing


def test_the_flash_probe_sees_the_callers_strides() -> None:
    """A strided or E-major key is refused by torch's flash kernel: the pinned backend says so, before and after a
    call of the same shapes that it can run, instead of failing inside torch."""
    flash = sdpa_impls.get("torch_sdpa_flash")
    q, k, v = qkv(2, 3, 10, 8, seed=3)
    assert flash.unsupported_reasons(q, k, v) == []
    flash(q, k, v)
    e_major = k.transpose(-1, -2).contiguous().transpose(-1, -2)  # the same shape, stride(-1) != 1
    strided = tuple(t.repeat_interleave(2, -1)[..., ::2] for t in (q, k, v))
    for args in ((q, e_major, v), strided):
        torch.testing.assert_close(F.scaled_dot_product_attention(*args), F.scaled_dot_product_attention(q, k, v))
        reasons = flash.unsupported_reasons(*args)
        assert reasons and "stride" in reasons[0], reasons
        with pytest.raises(Unsupported, match="stride"):
            flash(*args)


def test_the_probe_draws_none_of_the_callers_random_numbers() -> None:
    torch_sdpa._probe_cache.clear()  # the first call of this case probes
    q, k, v = qkv(1, 2, 16, 8, seed=4)
    torch.manual_seed(5)
    mine = sdpa_impls.get("torch_sdpa_math")(q, k, v, dropout_p=0.5)
    torch.manual_seed(5)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        theirs = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    torch.testing.assert_close(mine, theirs)


@pytest.mark.parametrize("flag, value", [("is_causal", "no"), ("is_causal", 1), ("is_causal", torch.tensor(True)),
                                         ("enable_gqa", 1), ("dropout_p", "0.1"), ("scale", "1")])
def test_a_flag_of_the_wrong_type_is_one_error_for_every_implementation(flag: str, value: object) -> None:
    q, k, v = qkv(1, 2, 4, 8)
    with pytest.raises(TypeError):  # torch refuses it
        F.scaled_dot_product_attention(q, k, v, **{flag: value})
    for name in sdpa_impls.names():
        with pytest.raises(ValueError, match=f"sdpa: {flag} must be a"):
            sdpa_impls.get(name)(q, k, v, **{flag: value})


@pytest.mark.parametrize("name", EAGER_CPU)
@pytest.mark.parametrize("shape", [(9, 16), (3, 9, 16)])
def test_inputs_without_a_batch_get_torchs_answer_at_their_rank(name: str, shape: tuple[int, ...]) -> None:
    """torch takes q, k, v of rank 2 (L, E) and 3 (H, L, E): so does every drop-in, gradients included."""
    q, k, v = qkv(*shape, seed=6)
    mask = torch.rand(shape[-2], shape[-2], generator=torch.Generator().manual_seed(7)) > 0.3
    impl = sdpa_impls.get(name)
    for kw in ({}, {"is_causal": True}, {"attn_mask": mask}):
        assert impl.unsupported_reasons(q, k, v, **kw) == []
        qq, theirs_q = q.clone().requires_grad_(), q.clone().requires_grad_()
        mine, theirs = impl(qq, k, v, **kw), F.scaled_dot_product_attention(theirs_q, k, v, **kw)
        assert mine.shape == theirs.shape == (*shape[:-1], v.shape[-1])
        torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=1e-5)
        mine.sum().backward()
        theirs.sum().backward()
        torch.testing.assert_close(qq.grad, theirs_q.grad, atol=1e-4, rtol=1e-4)
    five = tuple(t[(None,) * (5 - t.dim())] for t in (q, k, v))  # rank 5 (and mixed ranks) stay refused, by name
    with pytest.raises(ValueError, match="must be 4-D"):
        impl(*five)
