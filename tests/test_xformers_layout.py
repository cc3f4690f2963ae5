"""xformers' layouts and bias, checked on CPU: plain torch in, shapes by xformers' own rules, and the attention
they describe (emulated in float64 in xformers' layout) equal to the fp64 reference. Then its reasons (xformers'
dispatch's words, one note where its `_C` did not load) and the record of the op that ran."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import sdpa_impls
from sdpa_impls import registry
from sdpa_impls.bench.check import CaseContext
from sdpa_impls.bench.grid import Case
from sdpa_impls.bench.measure import Options, run_point
from sdpa_impls.bench.result import Result
from sdpa_impls.impls.xformers import _bias_tensor, _cuda_build_unread, _layout, _op_names, _with_note
from sdpa_impls.protocol import Implementation, SDPAInputs

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


NOTE = "(xformers' compiled kernels did not load: built for torch 2.10.0+cu128 with CUDA 12.8, this is torch 2.11.0)"


def test_xformers_refusals_are_its_own_words_with_one_note_and_acceptance_is_never_refused() -> None:
    refused = ["`cutlassF-pt` is not supported because:", "dtype=torch.float64 (supported: {...})",
               "`fa2F@2.5.7-pt` is not supported because:", "dtype=torch.float64 (supported: {...})"]
    assert _with_note(refused, NOTE) == [*refused, NOTE]
    assert _with_note(refused, "") == refused  # `_C` loaded: nothing to add
    assert _with_note([], NOTE) == []  # an op accepts the case: it runs, `_C` or not


def test_xformers_takes_its_cuda_build_as_such_only_where_it_would_misread_it() -> None:
    assert _cuda_build_unread(loaded=False, built_cuda=1208, torch_cuda="13.0")  # torch 2.11+cu130: _C fails
    assert not _cuda_build_unread(loaded=True, built_cuda=1208, torch_cuda="12.8")  # loaded: xformers knows
    assert not _cuda_build_unread(loaded=False, built_cuda=None, torch_cuda="13.0")  # a build without CUDA
    assert not _cuda_build_unread(loaded=False, built_cuda=1208, torch_cuda=None)  # a CPU torch


def test_the_ops_that_ran_are_named_as_xformers_names_them() -> None:
    class CutlassF:
        NAME = "cutlassF-pt"

    class CutlassB:
        NAME = "cutlassB-pt"

    assert _op_names((CutlassF, None)) == "cutlassF-pt"
    assert _op_names((CutlassF, CutlassB)) == "cutlassF-pt + cutlassB-pt"


class NamesItsOp(Implementation):
    """torch's math SDPA whose closure says what it runs, as xformers' closure does."""

    name = "test_names_its_op"

    def prepare_inputs(self, inp: SDPAInputs):
        def call() -> torch.Tensor:
            return F.scaled_dot_product_attention(inp.query, inp.key, inp.value, inp.attn_mask,
                                                  is_causal=inp.is_causal, enable_gqa=inp.enable_gqa)

        call.op = "sdpa-math"
        return call


@pytest.mark.parametrize("mode", ["fwd", "fwd+bwd", "bwd"])
def test_the_op_a_closure_names_is_recorded_in_results_and_extra_info(mode: str, monkeypatch) -> None:
    monkeypatch.setitem(registry._REGISTRY, NamesItsOp.name, NamesItsOp())
    ctx = CaseContext(Case(lq=16, lk=16, e=8, mode=mode), "cpu")
    fast = Options(budget_s=0.0, min_reps=1, max_reps=1, warmup=0, memory=False)
    r = run_point(NamesItsOp.name, ctx, fast)
    assert r.status == "ok" and r.op == "sdpa-math", r.reason
    assert r.extra_info()["op"] == "sdpa-math" and r.as_dict()["op"] == "sdpa-math"
    assert Result.from_dict(r.as_dict()).op == "sdpa-math"
    assert run_point("naive", ctx, fast).op == ""  # an implementation that says nothing records nothing


def test_xformers_on_cpu_gives_reasons_not_a_kernel_load_failure() -> None:
    """With xformers installed whose `_C` does not load (a CPU torch): the device, never "cannot load"."""
    pytest.importorskip("xformers", reason="xformers is not installed")
    from sdpa_impls.impls.xformers import _chosen, _fmha, _kernels_note

    fmha, missing = _fmha()
    assert fmha is not None, missing
    q = torch.randn(1, 2, 16, 64, dtype=torch.float16)
    reasons = sdpa_impls.get("xformers").unsupported_reasons(q, q, q)
    assert reasons == ["device=cpu (supported: cuda)"]
    own = _chosen(SDPAInputs(q, q, q), fmha)[3]  # xformers' own dispatch, asked about CPU tensors
    assert own and any("device=cpu" in r for r in own), own
    note = _kernels_note()
    assert _with_note(own, note).count(note) == (1 if note else 0)
