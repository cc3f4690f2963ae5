"""The drop-in call where a caller's own tensors could be touched or misread: a learned bias (a float mask that
requires grad) gets torch's gradient or a clear refusal, never none; torch's pinned backends probe support on
views of the caller's tensors (its strides, no gradient into its tensors, none of its random numbers); flags of the
wrong type are one error for every implementation, as torch refuses them, and the numbers torch takes (NumPy
scalars, 0-d tensors) are taken; create_graph, an answer written in place and a torch.compile'd caller behave as with
torch's kernels."""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import sdpa_impls
from sdpa_impls.impls import torch_sdpa
from sdpa_impls.impls.torch_sdpa import mask4
from sdpa_impls.callshape import in_func_transform
from sdpa_impls.protocol import Support, Unsupported
from sdpa_impls.reference import reference
from test_parity_torch import OURS, torch_math

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


@pytest.mark.parametrize("shape", [(9, 16), (3, 9, 16), (1, 2, 3, 9, 16)], ids=["rank 2", "rank 3", "rank 5"])
def test_torch_sdpa_of_another_rank_is_torchs_own_call(shape: tuple[int, ...]) -> None:
    """torch_sdpa is F.sdpa: for inputs that are not 4-D torch computes with math, not its CPU flash kernel, so the
    answer is bit for bit F.sdpa's. Causal with a negative scale is where the kernels disagree most: NaN from the
    flash kernel a 4-D view reaches, numbers from math."""
    q, k, v = qkv(*shape, seed=8)
    for kw in ({}, {"is_causal": True}, {"is_causal": True, "scale": -1.0}):
        mine = sdpa_impls.get("torch_sdpa")(q, k, v, **kw)
        torch.testing.assert_close(mine, F.scaled_dot_product_attention(q, k, v, **kw), atol=0, rtol=0)


def _shaped(q: tuple[int, ...], kv: tuple[int, ...], seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*q, generator=g), torch.randn(*kv, generator=g), torch.randn(*kv, generator=g)


BROADCASTS = {  # (query shape, key/value shape, mask shape or None, enable_gqa): torch answers each
    "rank 5": ((2, 3, 2, 9, 16), (2, 3, 2, 9, 16), (2, 1, 1, 9, 9), False),
    "rank 6, mask of rank 3": ((2, 1, 3, 2, 9, 16), (2, 1, 3, 2, 9, 16), (2, 9, 9), False),
    "key/value batch 1": ((3, 2, 9, 16), (1, 2, 9, 16), (3, 1, 9, 9), False),
    "query batch 1": ((1, 2, 9, 16), (3, 2, 9, 16), None, False),
    "rank 3 query, rank 4 key/value": ((2, 9, 16), (3, 2, 9, 16), None, False),
    "one key/value head, no enable_gqa": ((2, 4, 9, 16), (2, 1, 9, 16), None, False),
    "rank 5 grouped, batch broadcast": ((2, 3, 4, 9, 16), (1, 3, 2, 9, 16), (3, 1, 9, 9), True),
}


@pytest.mark.parametrize("name", EAGER_CPU)
@pytest.mark.parametrize("case", list(BROADCASTS))
def test_shapes_torch_broadcasts_get_torchs_answer_and_gradients(name: str, case: str) -> None:
    """torch multiplies q, k, v as batched matrices: any rank from 2, batch dims (and heads without enable_gqa)
    that broadcast. Every drop-in gives torch's answer at torch's shape, and the gradients of q, k and v."""
    q_shape, kv_shape, mask_shape, gqa = BROADCASTS[case]
    q, k, v = _shaped(q_shape, kv_shape, seed=8)
    masks = [None] if mask_shape is None else [None, torch.rand(*mask_shape, generator=torch.Generator().manual_seed(9))
                                               > 0.3]
    impl = sdpa_impls.get(name)
    for mask in masks:
        for causal in (False, True) if mask is None else (False,):
            kw = dict(attn_mask=mask, is_causal=causal, enable_gqa=gqa)
            assert impl.unsupported_reasons(q, k, v, **kw) == [], (case, kw)
            mine_in = [t.clone().requires_grad_() for t in (q, k, v)]
            theirs_in = [t.clone().requires_grad_() for t in (q, k, v)]
            mine, theirs = impl(*mine_in, **kw), F.scaled_dot_product_attention(*theirs_in, **kw)
            assert mine.shape == theirs.shape, (case, kw)
            torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=1e-5)
            (mine * theirs.detach()).sum().backward()
            (theirs * theirs.detach()).sum().backward()
            for a, b in zip(mine_in, theirs_in):
                torch.testing.assert_close(a.grad, b.grad, atol=1e-4, rtol=1e-4)


def test_shapes_torch_refuses_are_one_error_for_every_implementation() -> None:
    """Below rank 2, batch dims that do not broadcast, and a mask of more dims than the scores (torch adds it into
    them in place, even where its extra dims are 1): one ValueError naming the shapes, as torch refuses."""
    q3, k3 = torch.randn(2, 8, 16), torch.randn(2, 9, 16)
    for args, mask, fragment in (
            ((torch.ones(8), torch.ones(8), torch.ones(8)), None, "query must have at least 2 dims"),
            (_shaped((2, 2, 9, 16), (3, 2, 9, 16), seed=1), None,
             "batch sizes differ and do not broadcast: query (2, 2, 9, 16), key (3, 2, 9, 16)"),
            ((q3, k3, k3), torch.zeros(1, 2, 8, 9), "attn_mask (1, 2, 8, 9) has 4 dims, more than the 3 of the "
                                                    "attention's scores (the rank of query, key and value); query "
                                                    "(2, 8, 16), key (2, 9, 16), value (2, 9, 16)"),
            ((q3[0], k3[0], k3[0]), torch.zeros(1, 8, 9), "attn_mask (1, 8, 9) has 3 dims, more than the 2"),
            # the scores are q·kᵀ's: value's batch dims do not widen them (where the output's shape has them)
            ((q3[0, :1], k3[0], torch.randn(1, 2, 9, 16)), torch.zeros(1, 2, 1, 9) > 0,
             "attn_mask (1, 2, 1, 9) would enlarge the scores of query and key (1, 9)"),
            ((torch.randn(1, 1, 8, 16), torch.randn(1, 1, 9, 16), torch.randn(1, 2, 9, 16)), torch.zeros(1, 2, 8, 9),
             "attn_mask (1, 2, 8, 9) would enlarge the scores of query and key (1, 1, 8, 9)")):
        with pytest.raises(RuntimeError):
            F.scaled_dot_product_attention(*args, attn_mask=mask)
        for name in EAGER_CPU:
            with pytest.raises(ValueError, match=re.escape(fragment)):
                sdpa_impls.get(name)(*args, attn_mask=mask)
    args = (q3[0, :1], k3[0], torch.randn(1, 2, 9, 16))  # a mask within the scores: the output takes value's dims
    assert F.scaled_dot_product_attention(*args, attn_mask=torch.zeros(1, 9)).shape == (1, 2, 1, 16)
    for name in EAGER_CPU:
        torch.testing.assert_close(sdpa_impls.get(name)(*args, attn_mask=torch.zeros(1, 9)),
                                   F.scaled_dot_product_attention(*args, attn_mask=torch.zeros(1, 9)))
    with pytest.raises(IndexError):  # torch's call reads dim -3, which a rank-2 tensor lacks
        F.scaled_dot_product_attention(q3, k3[0], k3[0], enable_gqa=True)
    for name in EAGER_CPU:
        with pytest.raises(ValueError, match=re.escape("enable_gqa=True needs a heads dim (..., H, L, E) on query, "
                                                       "key and value; query (2, 8, 16), key (9, 16)")):
            sdpa_impls.get(name)(q3, k3[0], k3[0], enable_gqa=True)


@pytest.mark.parametrize("shapes, fragment", [
    (((8, 16, 32), (8, 16, 16), (8, 16, 32)), "same head dim E: query (8, 16, 32), key (8, 16, 16), value (8, 16, 32)"),
    (((2, 3, 4, 16, 32), (2, 3, 4, 16, 32), (2, 3, 4, 12, 32)),
     "same sequence length: query (2, 3, 4, 16, 32), key (2, 3, 4, 16, 32), value (2, 3, 4, 12, 32)"),
    (((8, 16, 32), (7, 16, 32), (7, 16, 32)), "heads differ (8 vs 7) and enable_gqa=False: query (8, 16, 32)"),
])
def test_an_error_about_a_call_of_another_rank_names_the_shapes_the_caller_gave(shapes, fragment) -> None:
    """q, k and v of rank 3 or 5 are computed as (B, H, L, E); a mistake in them is named with the caller's shapes,
    for every implementation, in its unsupported_reasons and in the fp64 reference."""
    args = [torch.randn(*s) for s in shapes]
    with pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(*args)
    for call in [sdpa_impls.get(n) for n in EAGER_CPU] + [sdpa_impls.get("naive").unsupported_reasons, reference]:
        with pytest.raises(ValueError, match=re.escape(fragment)):
            call(*args)


@pytest.mark.parametrize("mask, shapes, fragment", [
    ((7, 9), ((6, 8), (9, 8), (9, 8)), "attn_mask (7, 9) does not broadcast to the scores (6, 9); query (6, 8)"),
    ((2, 6, 9), ((3, 6, 8), (3, 9, 8), (3, 9, 8)), "attn_mask (2, 6, 9) does not broadcast to the scores (3, 6, 9)"),
    ((2, 3, 4, 7, 9), ((2, 3, 4, 6, 8), (2, 3, 4, 9, 8), (2, 3, 4, 9, 8)),
     "attn_mask (2, 3, 4, 7, 9) does not broadcast to the scores (2, 3, 4, 6, 9); query (2, 3, 4, 6, 8)"),
])
def test_a_mask_of_a_call_of_another_rank_is_named_at_the_callers_shapes(mask, shapes, fragment) -> None:
    """The mask follows q's batch dims into (B, H, L, E); its error named those (attn_mask (1, 1, 7, 9) against
    (B, Hq, Lq, Lk) = (1, 1, 6, 9) for a 2-D call), not the shapes the caller passed."""
    args = [torch.randn(*s) for s in shapes]
    with pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(*args, attn_mask=torch.ones(mask, dtype=torch.bool))
    for call in [sdpa_impls.get(n) for n in EAGER_CPU] + [reference]:
        with pytest.raises(ValueError, match=re.escape(fragment)):
            call(*args, attn_mask=torch.ones(mask, dtype=torch.bool))


def test_what_is_no_dense_tensor_is_one_error_for_every_implementation() -> None:
    """A query that is no tensor was an AttributeError raised while naming its shape; a nested or sparse tensor
    failed inside each kernel in its own words (NestedIntNode, aten::aminmax, a compiler's error). One ValueError
    each, for every implementation and the fp64 reference."""
    q = torch.randn(1, 2, 6, 8)
    nested = torch.nested.nested_tensor([torch.randn(3, 2, 8), torch.randn(5, 2, 8)], layout=torch.jagged)
    for args, fragment in (
            (([1.0], q[0, 0], q[0, 0]), "query must be a torch.Tensor, got list"),
            ((None, q, q), "query must be a torch.Tensor, got NoneType"),
            ((q, q, q.to_sparse()), "value is a sparse_coo tensor; the implementations take dense (strided) tensors"),
            ((nested.transpose(1, 2),) * 3, "query is a nested tensor"),
            ((q, q, q, torch.ones(6, 6).to_sparse()), "attn_mask is a sparse_coo tensor")):
        for call in [sdpa_impls.get(n) for n in EAGER_CPU] + [sdpa_impls.get("compiled"), reference]:
            with pytest.raises(ValueError, match=re.escape(fragment)):
                call(*args)


@pytest.mark.parametrize("name", EAGER_CPU + ("compiled",))
def test_under_autocast_a_call_gets_the_dtype_torch_gives_it(name: str) -> None:
    """torch.autocast casts SDPA's floating inputs (a float mask too, never fp64) to its dtype and computes as for
    those; chunked and fused answered fp32 inputs in fp32 under a bf16 autocast. Now every implementation answers
    as it answers the cast inputs, bit for bit, with fp32 gradients for the fp32 inputs."""
    q, k, v = (t.requires_grad_() for t in qkv(1, 2, 40, 16, seed=4))
    mask = torch.randn(40, 40, generator=torch.Generator().manual_seed(5))
    impl = sdpa_impls.get(name)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = impl(q, k, v, mask)
        assert F.scaled_dot_product_attention(q, k, v, mask).dtype == torch.bfloat16 == out.dtype
        assert impl(*(t.detach().double() for t in (q, k, v))).dtype == torch.float64  # fp64 is left as it is
    assert torch.equal(out, impl(*(t.detach().bfloat16() for t in (q, k, v)), mask.bfloat16()))
    out.float().sum().backward()
    assert all(t.grad is not None and t.grad.dtype == torch.float32 for t in (q, k, v))
    with torch.autocast("cpu", dtype=torch.bfloat16):  # prepare and the reasons take the call as it computes
        assert torch.equal(impl.prepare(q, k, v, mask)(), out)
        assert impl.unsupported_reasons(q, k, v, mask) == impl.unsupported_reasons(
            *(t.detach().bfloat16() for t in (q, k, v)), mask.bfloat16())


def test_under_autocast_the_reasons_see_autocasts_dtype() -> None:
    """An implementation of bf16 and fp16 only, asked about fp32 inputs under a bf16 autocast, computes them: its
    reasons said dtype=fp32, and a caller that asks first skipped a call that runs."""
    class HalfOnly(type(sdpa_impls.get("naive"))):  # type: ignore[misc]
        support = Support(dtypes=frozenset({torch.bfloat16, torch.float16}))
    q, k, v = qkv(1, 2, 16, 8, seed=7)
    assert HalfOnly().unsupported_reasons(q, k, v) == ["dtype=fp32 (supported: bf16, fp16)"]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert HalfOnly().unsupported_reasons(q, k, v) == [] and HalfOnly()(q, k, v).dtype == torch.bfloat16


def test_flex_takes_a_mask_of_one_element_and_inputs_that_require_grad_under_no_grad() -> None:
    """torch's CPU flex lowering failed on a mask buffer that is all stride 0 (an InductorError naming none of the
    call); a 0-D or one-element mask is a mask like any other, as the other implementations and torch answer it."""
    q, k, v = qkv(2, 2, 16, 8, seed=6)
    if reasons := sdpa_impls.get("flex").unsupported_reasons(q, k, v):
        pytest.skip("; ".join(reasons))
    for mask in (torch.zeros(1, 1, 1, 1, dtype=torch.bool), torch.tensor(0.5), torch.tensor(True).expand(16, 16)):
        want = F.scaled_dot_product_attention(q, k, v, mask4(mask))
        torch.testing.assert_close(sdpa_impls.get("flex")(q, k, v, mask), want)
    q.requires_grad_()  # no backward on the CPU; under no_grad none can follow, and flex answers (it refused)
    assert sdpa_impls.get("flex").unsupported_reasons(q, k, v)
    with torch.no_grad():
        assert not sdpa_impls.get("flex").unsupported_reasons(q, k, v)
        torch.testing.assert_close(sdpa_impls.get("flex")(q, k, v), F.scaled_dot_product_attention(q, k, v))


FP64_CASES = {  # (B, Hq, Hkv, Lq, Lk, E), call: every path of the tiled loops (one and several key tiles, GQA)
    "causal": ((2, 2, 2, 9, 9, 16), dict(is_causal=True)),
    "bool mask, gqa": ((1, 4, 2, 40, 56, 8), dict(enable_gqa=True, attn_mask="bool")),
    "float mask": ((1, 2, 2, 33, 47, 8), dict(attn_mask="float")),
    "long, causal": ((1, 1, 1, 1500, 1500, 8), dict(is_causal=True)),
    "long, plain": ((1, 1, 1, 700, 2600, 8), {}),
}


@pytest.mark.parametrize("name", ["naive", "chunked", "fused", "torch_sdpa", "torch_sdpa_math"])
@pytest.mark.parametrize("case", list(FP64_CASES))
def test_fp64_is_computed_in_fp64(name: str, case: str) -> None:
    """fp64 (no grid point: a drop-in call) gets torch's fp64 answer and gradients to fp64 precision: no fp32 step
    (an fp32 softmax, log-sum-exp or accumulator would leave errors near 1e-7)."""
    (b, hq, hkv, lq, lk, e), kw = FP64_CASES[case]
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(b, h, n, e, generator=g, dtype=torch.float64)
               for h, n in ((hq, lq), (hkv, lk), (hkv, lk)))
    kw = dict(kw)
    if kw.get("attn_mask") == "bool":
        kw["attn_mask"] = torch.rand(lq, lk, generator=g) > 0.3
    elif kw.get("attn_mask") == "float":
        kw["attn_mask"] = torch.randn(lq, lk, generator=g, dtype=torch.float64)
    mine_in = [t.clone().requires_grad_() for t in (q, k, v)]
    theirs_in = [t.clone().requires_grad_() for t in (q, k, v)]
    mine, theirs = sdpa_impls.get(name)(*mine_in, **kw), F.scaled_dot_product_attention(*theirs_in, **kw)
    assert mine.dtype == torch.float64
    torch.testing.assert_close(mine, theirs, atol=1e-12, rtol=1e-12)
    with torch.no_grad():  # the inference forward, whose paths differ from the training one's in fused
        torch.testing.assert_close(sdpa_impls.get(name)(q, k, v, **kw), theirs, atol=1e-12, rtol=1e-12)
    weights = torch.randn(theirs.shape, generator=g, dtype=torch.float64)
    (mine * weights).sum().backward()
    (theirs * weights).sum().backward()
    for a, t in zip(mine_in, theirs_in):
        torch.testing.assert_close(a.grad, t.grad, atol=1e-11, rtol=1e-11)


@pytest.mark.parametrize("name", ["naive", "torch_sdpa", "torch_sdpa_math"])
def test_dropout_of_one_gives_zeros(name: str) -> None:
    """dropout_p=1 (every weight dropped): zeros, as torch answers."""
    q, k, v = (t.double() for t in qkv(2, 2, 9, 16, seed=3))
    assert torch.equal(sdpa_impls.get(name)(q, k, v, dropout_p=1.0), torch.zeros_like(q))


def test_fp64_where_the_library_refuses_it_is_a_reason() -> None:
    """flex: compiled FlexAttention on the CPU takes fp32, fp16 and bf16 only; a reason, not a guess."""
    q, k, v = (t.double() for t in qkv(2, 2, 9, 16, seed=3))
    assert "dtype=fp64" in " ".join(sdpa_impls.get("flex").unsupported_reasons(q, k, v))


def test_compiled_computes_fp64_in_fp64() -> None:
    """compiled: naive's math compiled for fp64 inputs (a graph of its own, compiled on this call)."""
    q, k, v = (t.double().requires_grad_() for t in qkv(2, 2, 9, 16, seed=3))
    mine = sdpa_impls.get("compiled")(q, k, v, is_causal=True)
    theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert mine.dtype == torch.float64
    torch.testing.assert_close(mine, theirs, atol=1e-12, rtol=1e-12)
    mine_grads = torch.autograd.grad(mine.sum(), (q, k, v))
    for a, t in zip(mine_grads, torch.autograd.grad(theirs.sum(), (q, k, v))):
        torch.testing.assert_close(a, t, atol=1e-11, rtol=1e-11)


@pytest.mark.parametrize("impl", OURS + [sdpa_impls.reference], ids=lambda i: getattr(i, "name", "reference"))
def test_scalars_torch_takes_as_numbers(impl) -> None:
    """torch reads a NumPy scalar or a 0-d tensor as `scale` or `dropout_p`; so do we. A NumPy bool is no bool to
    torch, and the error names its type."""
    np = pytest.importorskip("numpy")
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 2, 6, 8, generator=gen) for _ in range(3))
    for kwargs in ({"scale": np.float32(0.3)}, {"scale": torch.tensor(0.3)}, {"scale": np.int64(2)},
                   {"scale": 2**70}, {"dropout_p": np.float32(0.0)}, {"dropout_p": torch.tensor(0.0)}):
        want = torch_math({"query": q, "key": k, "value": v, **kwargs})[0]
        torch.testing.assert_close(impl(q, k, v, **kwargs).float(), want, msg=repr(kwargs))
    with pytest.raises(ValueError, match="is_causal must be a bool, got numpy.bool"):
        impl(q, k, v, is_causal=np.True_)
    with pytest.raises(ValueError, match="dropout_p must be a number, got NoneType"):  # None is scale's default only
        impl(q, k, v, dropout_p=None)


@pytest.mark.parametrize("name", EAGER_CPU + ("compiled",))
def test_grad_modes_are_the_callers_for_each_call(name: str) -> None:
    """Inputs that require grad, called under torch.no_grad or inference mode, get torch's answer (a forward: no
    backward can follow), and a later call in grad mode still gets its gradients (torch's wrappers decided support
    once, by the first call's grad mode); a mask made under inference mode (a cached causal mask) serves a training
    call, as it does torch's."""
    torch_sdpa._probe_cache.clear()
    q, k, v = (t.requires_grad_() for t in qkv(1, 2, 5, 8, seed=8))
    fn = sdpa_impls.get(name)
    for mode in (torch.no_grad, torch.inference_mode):
        with mode():
            got = fn(q, k, v)
        assert not got.requires_grad
        torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v).detach())
    with torch.inference_mode():
        causal = torch.ones(5, 5, dtype=torch.bool).tril()
    for mask in (None, causal):
        got, want = fn(q, k, v, mask), F.scaled_dot_product_attention(q, k, v, mask)
        torch.testing.assert_close(got, want)
        for g, w in zip(torch.autograd.grad(got.sum(), (q, k, v)), torch.autograd.grad(want.sum(), (q, k, v))):
            torch.testing.assert_close(g, w)


@pytest.mark.parametrize("impl", OURS, ids=lambda i: i.name)
def test_autograd_uses_answer_like_torch(impl) -> None:
    """create_graph=True gives the usual gradients, and a second derivative one error (torch's flash kernels have
    none either); the answer may be written in place, and then the backward refuses, as torch's does."""
    gen = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(1, 2, 40, 8, generator=gen).requires_grad_() for _ in range(3))
    grads = torch.autograd.grad(impl(q, k, v).sum(), (q, k, v), create_graph=True)
    for g, w in zip(grads, torch_math({"query": q, "key": k, "value": v}, torch.ones(1, 2, 40, 8))[1]):
        torch.testing.assert_close(g, w)
    if impl.name != "naive":  # naive's ops are torch's: it has the math backend's second derivative
        with pytest.raises(RuntimeError, match="no second derivative"):
            torch.autograd.grad(grads[0].sum(), q)
    out = impl(q, k, v)
    out.mul_(2)
    if impl.name != "naive":
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.sum().backward()


@pytest.mark.parametrize("impl", OURS[1:], ids=lambda i: i.name)
def test_a_caller_compiled_with_torch_compile_gets_the_answer(impl) -> None:
    """torch.compile of a function that calls chunked or fused: they run eagerly there (a graph break; their tile
    loops with out= ops are not traceable, and dynamo failed on them). naive's ops are traced (`compiled`)."""
    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(1, 2, 24, 8, generator=gen) for _ in range(3))
    torch._dynamo.reset()
    got = torch.compile(lambda a, b, c: impl(a, b, c, is_causal=True) * 2)(q, k, v)
    torch.testing.assert_close(got, 2 * torch_math({"query": q, "key": k, "value": v, "is_causal": True})[0])


def test_naive_traces_whole_under_torch_compile_with_sizes_that_change() -> None:
    """Checking a call built its error text first: str() of a symbolic size, which torch.compile's fullgraph
    cannot trace, where torch's own call traces (the text is made now only when an error is raised)."""
    naive = sdpa_impls.get("naive")
    k, v = torch.randn(1, 2, 10, 16), torch.randn(1, 2, 10, 16)
    call = torch.compile(lambda q: naive(q, k, v), fullgraph=True, dynamic=True, backend="eager")
    for lq in (8, 9):
        q = torch.randn(1, 2, lq, 16)
        torch.testing.assert_close(call(q), F.scaled_dot_product_attention(q, k, v))


def test_a_bool_scale_is_the_number_torch_reads_it_as() -> None:
    """torch reads scale=True as 1.0; flex passed the bool into the code inductor generates, which did not compile."""
    for flag in (True, False):
        inputs = sdpa_impls.SDPAInputs(*(torch.randn(1, 2, 8, 16),) * 3, scale=flag, dropout_p=flag)
        assert [type(x) for x in (inputs.scale, inputs.dropout_p, inputs.softmax_scale)] == [float] * 3
        assert inputs.scale == float(flag) and inputs.softmax_scale == float(flag)


def _transformed(how: str, fn) -> tuple[torch.Tensor, ...]:
    q, k, v = (t.double() for t in qkv(3, 2, 4, 6, 8))
    call = lambda q, k, v: fn(q, k, v, is_causal=True)  # noqa: E731
    if how == "vmap":  # over a leading dim, as per-sample gradients vmap a model
        return (torch.func.vmap(call)(q, k, v),)
    if how == "grad":
        return torch.func.grad(lambda q, k, v: call(q, k, v).square().sum(), argnums=(0, 1, 2))(q, k, v)
    return torch.func.jvp(lambda q: call(q, k, v), (q,), (torch.ones_like(q),))


@pytest.mark.parametrize("how", ["vmap", "grad", "jvp"])
def test_torch_func_transforms_get_torchs_answer_or_one_clear_refusal(how: str) -> None:
    """Under torch.func's vmap, grad and jvp, torch's pinned backends died in their support probe (a wrapped tensor has
    no data pointer, and the probe's own backward is not allowed there), chunked and fused deep inside their tiles."""
    want = _transformed(how, F.scaled_dot_product_attention)
    for name in EAGER_CPU:
        if name in ("chunked", "fused"):  # their tile loops write out= buffers: refused, saying where
            with pytest.raises(Unsupported, match=r"cannot run this case: inside torch\.func's vmap, grad or jvp"):
                _transformed(how, sdpa_impls.get(name))
            continue
        if how == "jvp" and name == "torch_sdpa_flash":  # torch's flash kernel has no forward AD: its own error
            with pytest.raises(NotImplementedError, match="forward AD"):
                _transformed(how, sdpa_impls.get(name))
            continue
        got = _transformed(how, sdpa_impls.get(name))
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9, msg=lambda m: f"{name}: {m}")
    assert sdpa_impls.get("fused")(*qkv(1, 2, 4, 8)).shape == (1, 2, 4, 8)  # outside a transform it runs
    # torch.compile's tracing of a plain call is no transform (dynamo reads torch.func's stack as not empty there)
    traced = torch.compile(lambda x: x + 1 if in_func_transform() else x - 1, backend="eager", fullgraph=True)
    assert traced(torch.zeros(2)).tolist() == [-1.0, -1.0]
