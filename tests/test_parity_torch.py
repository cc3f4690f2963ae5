"""PyTorch's SDPA test inputs (test/test_transformers.py) under the fp64 rule; drop-in parity with torch's math backend.

Ported: the SDPA, CPU-only, failure-mode and attention-bias tests whose inputs our protocol covers (4-D tensors;
no nested tensors, dropout statistics or CausalBias objects), batch and head counts trimmed, shapes otherwise kept.
Where torch raises, we raise one ValueError; where it answers, so do we: empty shapes, masks of rank 0 to 4, fp16
scores past 65504, gradients that are exactly zero on rows that attend to a single key, and where ±inf or NaN inputs
make the answer and gradients non-finite.
"""
from __future__ import annotations

import itertools
import zlib
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import sdpa_impls
from sdpa_impls.impls.torch_sdpa import EMPTY_GQA
from test_correctness import IMPLS, check_against_fp64, one_intra_op_thread  # noqa: F401 (fixture)

F32, F16, BF16, F64 = torch.float32, torch.float16, torch.bfloat16, torch.float64
ALL = (F32, BF16, F16)
OURS = [sdpa_impls.get(n) for n in ("naive", "chunked", "fused")]
pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


@dataclass(frozen=True)
class Torch:
    """One input case; `source` names the upstream test. Shapes (B, H, L, E) as torch's SdpaShape."""

    source: str
    b: int
    h: int
    lq: int
    lk: int
    e: int
    causal: bool = False
    mask: tuple = ()  # (kind, shape): bool | float | band | lower_right | upper_left | ones | all
    scale: float | None = None
    inputs: str = "randn"  # randn | rand | packed | strided_q | same | zeros_qk | const:<value>
    dtypes: tuple[torch.dtype, ...] = ALL
    grad: bool = True

    @property
    def name(self) -> str:
        parts = [self.source.removeprefix("test_"), f"{self.b}x{self.h}x{self.lq}x{self.lk}x{self.e}"]
        parts += ["causal"] * self.causal + ([f"{self.mask[0]}{list(self.mask[1])}"] if self.mask else [])
        parts += [f"scale{self.scale}"] * (self.scale is not None) + [self.inputs] * (self.inputs != "randn")
        return "-".join(parts).replace(" ", "")

    def make(self, dtype: torch.dtype, device: str) -> dict:
        gen = torch.Generator(device=device).manual_seed(zlib.crc32(self.name.encode()))
        b, h, lq, lk, e = self.b, self.h, self.lq, self.lk, self.e
        draw = torch.rand if self.inputs == "rand" else torch.randn

        def make(*shape: int) -> torch.Tensor:
            return draw(shape, generator=gen, device=device).to(dtype)

        if self.inputs == "packed":  # one (B, L, 3·H·E) tensor split into q, k, v, viewed as (B, H, L, E)
            q, k, v = (t.view(b, lq, h, e).transpose(1, 2) for t in make(b, lq, 3 * h * e).split(h * e, dim=-1))
        elif self.inputs.startswith("const:"):
            q = k = v = torch.full((b, h, lq, e), float(self.inputs[6:]), dtype=dtype, device=device)
        elif self.inputs == "same":
            q = k = v = make(b, h, lq, e)
        else:
            q, k, v = make(b, h, lq, e), make(b, h, lk, e), make(b, h, lk, e)
        if self.inputs == "strided_q":  # test_invalid_last_dim_stride: as_strided with strides (2, 2, 2, 2)
            q = q.as_strided(q.shape, (2, 2, 2, 2))
        elif self.inputs == "zeros_qk":  # uniform attention over ones
            q, k, v = torch.zeros_like(q), torch.zeros_like(k), torch.ones_like(v)
        return {"query": q, "key": k, "value": v, "attn_mask": self._mask(gen, dtype, device),
                "is_causal": self.causal, "scale": self.scale}

    def _mask(self, gen: torch.Generator, dtype: torch.dtype, device: str) -> torch.Tensor | None:
        if not self.mask:
            return None
        kind, shape = self.mask
        rows, cols = torch.arange(self.lq, device=device)[:, None], torch.arange(self.lk, device=device)[None, :]
        if kind == "bool":  # torch.randint(0, 2): a broadcast row or column may mask every key of a query
            return torch.randint(0, 2, shape, generator=gen, device=device, dtype=torch.bool)
        if kind == "float":
            return torch.randn(shape, generator=gen, device=device).to(dtype)
        if kind == "band":  # triu(-inf, 1) + tril(-inf, -10): each query sees itself and the 9 keys before it
            full = torch.full((self.lq, self.lk), float("-inf"), device=device)
            return torch.triu(full, diagonal=1) + torch.tril(full, diagonal=-10)
        if kind == "ones":
            return torch.ones(shape, dtype=dtype, device=device)
        if kind == "all":
            return torch.ones((self.lq, self.lk), dtype=torch.bool, device=device)
        return cols <= rows + (self.lk - self.lq if kind == "lower_right" else 0)  # causal_{lower_right,upper_left}


# every 2-D and 4-D broadcast shape of test_scaled_dot_product_fused_attention_mask_vs_math_cpu (Lq 27, Lk 54)
MASK_GRID = [*itertools.product([27, 1], [54, 1]), *itertools.product([2, 1], [3, 1], [27, 1], [54, 1])]
CASES = [
    *(Torch("test_scaled_dot_product_attention", 5, 2, 4, 3, 6, causal=c, mask=m, dtypes=(F32, F64))
      for c, m in [(False, ()), (True, ()), (False, ("bool", (4, 3))), (False, ("bool", (5, 2, 4, 3)))]),
    *(Torch("test_sdp_math_gradcheck", 4, 2, 4, 4, 16, inputs=i, dtypes=(F32, F64)) for i in ("packed", "randn")),
    # TestSDPACpuOnly: test_scaled_dot_product_fused_attention_vs_math_cpu (batch 2/12, L 267/1030, heads 1/3)
    *(Torch("test_scaled_dot_product_fused_attention_vs_math_cpu", b, h, n, n, e, causal=c, inputs="packed")
      for b, h, n, e, c in [(2, 3, 267, 8, False), (2, 3, 267, 8, True), (12, 1, 267, 16, True),
                            (2, 1, 1030, 16, True)]),
    # test_scaled_dot_product_fused_attention_mask_vs_math_cpu: every broadcast shape of 2-D and 4-D masks
    *(Torch("test_scaled_dot_product_fused_attention_mask_vs_math_cpu", 2, 3, 27, 54, 8, mask=(kind, shape))
      for shape, kind in itertools.product(MASK_GRID, ("bool", "float"))),
    Torch("test_scaled_dot_product_fused_attention_with_inf", 1, 2, 600, 600, 8, mask=("band", (600, 600)),
          dtypes=(F32,)),
    Torch("test_scaled_dot_product_attention_math_with_negative_scale", 1, 3, 64, 64, 64, scale=-1.0 / 0.0001,
          inputs="same", dtypes=(F32,)),
    Torch("test_scaled_dot_product_attention_fp16_overflow", 1, 32, 23, 23, 80, inputs="const:256", dtypes=(F16,),
          grad=False),
    # TestSDPAFailureModes: inputs that make torch's fused kernels refuse, answered by the math backend
    Torch("test_invalid_sequence_lengths", 2, 2, 0, 0, 8, dtypes=(F16,)),
    Torch("test_invalid_last_dim_stride", 2, 2, 8, 8, 8, inputs="strided_q", dtypes=(F16,)),
    *(Torch("test_invalid_fused_inputs_head_dim", 2, 2, 3, 3, e, inputs="rand", dtypes=(F16,)) for e in (9, 257)),
    Torch("test_invalid_fused_inputs_invalid_dtype", 2, 2, 3, 3, 16, inputs="rand", dtypes=(F64,)),
    Torch("test_invalid_fused_inputs_attn_mask_present", 2, 2, 3, 3, 16, mask=("ones", (2, 2, 3, 3)),
          inputs="rand", dtypes=(F16,)),
    Torch("test_unaligned_tensors", 2, 2, 8, 8, 5, inputs="rand", dtypes=(F16,)),
    Torch("test_flash_fail_fp32", 2, 2, 32, 32, 32, inputs="rand", dtypes=(F32,)),
    Torch("test_flash_atteention_large_bf16_nan_values", 1, 1, 1, 1, 64, inputs="const:133120", dtypes=(BF16,)),
    Torch("test_flash_attention_fail_with_non_square_causal_attention", 1, 1, 8, 12, 16, causal=True,
          inputs="rand", dtypes=(BF16,)),
    Torch("test_mem_eff_attention_fail_with_batch_size_geq_65536", 2**16, 2, 2, 2, 8, inputs="rand", dtypes=(F16,)),
    Torch("test_mem_eff_attention_large_seq_len_uniform_attention", 1, 2, 512, 512, 16, inputs="zeros_qk",
          mask=("all", ()), dtypes=(BF16,)),
    # TestAttnBias: test_causal_variants (upper left = is_causal, lower right as a mask, also for Lq > Lk, where
    # rows before the first key get zeros) and test_is_causal_equals_upper_left (the same as an explicit mask)
    *(Torch("test_causal_variants", b, h, lq, lk, e, causal=(v == "is_causal"), inputs="rand", dtypes=(F16,),
            mask=() if v == "is_causal" else (v, ()))
      for (b, h, lq, lk, e), v in itertools.product([(1, 2, 128, 128, 16), (1, 2, 128, 256, 32), (1, 2, 256, 128, 32),
                                                     (1, 1, 23, 56, 15)], ("is_causal", "upper_left", "lower_right"))),
]
POINTS = [pytest.param(c, d, id=f"{c.name}-{str(d).removeprefix('torch.')}") for c in CASES for d in c.dtypes]
# torch's own CPU flash kernel (behind torch_sdpa and torch_sdpa_flash) misses the rule here, measured on torch 2.13
# CPU; ours and torch's math backend do not. Not ours to change: recorded as non-strict xfails, not hidden.
TORCH_CPU_FLASH_MISSES = {
    "test_scaled_dot_product_attention_math_with_negative_scale": "scale -10000 makes every row one-hot, where the "
    "true dq and dk are ~1e-30: dq error 0.142, dk 0.198, dv 0.395 (naive: 8e-33, 8e-33, 5e-7)",
}


@pytest.mark.parametrize("impl", IMPLS, ids=lambda i: i.name)  # the top one varies fastest: one fp64 reference
@pytest.mark.parametrize("case,dtype", POINTS)  # per case, shared by every implementation
def test_torch_case_matches_fp64(impl, case: Torch, dtype: torch.dtype, request: pytest.FixtureRequest) -> None:
    miss = TORCH_CPU_FLASH_MISSES.get(case.source)
    if miss and impl.name in ("torch_sdpa", "torch_sdpa_flash"):  # the cases run on CPU tensors
        request.applymarker(pytest.mark.xfail(reason=f"torch's CPU flash kernel: {miss}", strict=False))
    check_against_fp64(impl, case, dtype)


def torch_math(args: dict, grad_out: torch.Tensor | None = None):
    """torch's math backend on the same call: (out, grads or None); grads against `grad_out` when given."""
    leaves = [args[k].detach().clone().requires_grad_(grad_out is not None) for k in ("query", "key", "value")]
    with sdpa_kernel(SDPBackend.MATH):
        out = F.scaled_dot_product_attention(*leaves, **{k: v for k, v in args.items() if k not in
                                                         ("query", "key", "value")})
    return out.detach(), (None if grad_out is None else torch.autograd.grad(out, leaves, grad_out))


def ours(impl, args: dict, grad_out: torch.Tensor | None = None):
    leaves = [args[k].detach().clone().requires_grad_(grad_out is not None) for k in ("query", "key", "value")]
    out = impl(*leaves, **{k: v for k, v in args.items() if k not in ("query", "key", "value")})
    return out.detach(), (None if grad_out is None else torch.autograd.grad(out, leaves, grad_out))


def assert_like_torch(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    torch.testing.assert_close(got, want, atol=1e-5 if dtype == F32 else 2e-2, rtol=1e-4 if dtype == F32 else 2e-2)


def run_where_supported(impl, args: dict) -> None:
    reasons = impl.unsupported_reasons(**args)  # must answer for any valid call, whatever the mask rank or shape
    if reasons:
        pytest.skip("; ".join(reasons))


EMPTY = {  # (query, key, value) shapes; torch 2.13 answers every one of these (zeros, zero gradients)
    "B=0": ((0, 2, 4, 8), (0, 2, 5, 8), (0, 2, 5, 8)), "H=0": ((1, 0, 4, 8), (1, 0, 5, 8), (1, 0, 5, 8)),
    "Hkv=0": ((1, 2, 4, 8), (1, 0, 5, 8), (1, 0, 5, 6)), "Hq=0-gqa": ((1, 0, 4, 8), (1, 2, 5, 8), (1, 2, 5, 8)),
    "Lq=0": ((1, 2, 0, 8), (1, 2, 5, 8), (1, 2, 5, 8)), "Lk=0": ((1, 2, 4, 8), (1, 2, 0, 8), (1, 2, 0, 8)),
    "Lq=Lk=0": ((1, 2, 0, 8), (1, 2, 0, 8), (1, 2, 0, 8)), "E=0": ((1, 2, 4, 0), (1, 2, 5, 0), (1, 2, 5, 8)),
    "Ev=0": ((1, 2, 4, 8), (1, 2, 5, 8), (1, 2, 5, 0)),
}
# this test's reference, torch's math backend, kills the process on Hkv = 0 before EMPTY_GQA (torch_sdpa says why)
REFERENCE_NEEDS = {"Hkv=0": pytest.mark.needs_torch(EMPTY_GQA, "torch's math backend with enable_gqa and no key/value "
                                                               "heads (this test's reference)")}


@pytest.mark.parametrize("impl", IMPLS, ids=lambda i: i.name)
@pytest.mark.parametrize("variant", ["plain", "causal", "bool-mask", "float-mask"])
@pytest.mark.parametrize("dtype", ALL, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("shape", [pytest.param(s, marks=REFERENCE_NEEDS.get(s, ())) for s in EMPTY])
def test_empty_call_answers_like_torch_math(impl, shape: str, dtype: torch.dtype, variant: str) -> None:
    """Empty in, empty (or, with no keys, zeros) out, in torch's shape and dtype; gradients too. E = 0 is not
    empty: every score is 0, so each query averages the values it may see."""
    gen = torch.Generator().manual_seed(zlib.crc32(shape.encode()))
    q, k, v = (torch.randn(s, generator=gen).to(dtype) for s in EMPTY[shape])
    lq, lk = q.shape[2], k.shape[2]
    mask = {"bool-mask": torch.rand((lq, lk), generator=gen) < 0.6, "float-mask": torch.randn((lq, lk), generator=gen)
            }.get(variant)
    args = {"query": q, "key": k, "value": v, "attn_mask": mask, "is_causal": variant == "causal",
            "enable_gqa": q.shape[1] != k.shape[1]}
    run_where_supported(impl, args)
    grad_out = torch.randn((q.shape[0], q.shape[1], lq, v.shape[-1]), generator=gen).to(dtype)
    (got, grads), (want, want_grads) = ours(impl, args, grad_out), torch_math(args, grad_out)
    assert_like_torch(got, want, dtype)
    for g, w in zip(grads, want_grads):
        assert_like_torch(g, w, dtype)


@pytest.mark.parametrize("impl", IMPLS + [sdpa_impls.reference], ids=lambda i: getattr(i, "name", "reference"))
def test_where_torch_raises_we_raise_one_value_error(impl) -> None:
    """Hq = 0 against Hkv = 2 without enable_gqa: torch's math backend raises; so do we, with the usual message."""
    q, k = torch.randn(1, 0, 4, 8), torch.randn(1, 2, 5, 8)
    with pytest.raises(RuntimeError):
        torch_math({"query": q, "key": k, "value": k})
    with pytest.raises(ValueError, match="enable_gqa=False"):
        impl(q, k, k)


@pytest.mark.parametrize("impl", IMPLS, ids=lambda i: i.name)
@pytest.mark.parametrize("heads", [(8, 2, 4), (12, 3, 4), (8, 4, 2)], ids=lambda h: "q{}k{}v{}".format(*h))
def test_gqa_with_key_and_value_of_two_head_counts_answers_like_torch_math(impl, heads: tuple) -> None:
    """With enable_gqa, torch's math kernel takes key and value heads of two counts that each divide Hq (query head
    i reads key head i // (Hq / Hk) and value head i // (Hq / Hv)); so do we, gradients too, with a bool mask."""
    hq, hk, hv = heads
    gen = torch.Generator().manual_seed(zlib.crc32(repr(heads).encode()))
    q, k, v = (torch.randn(s, generator=gen) for s in ((2, hq, 6, 8), (2, hk, 9, 8), (2, hv, 9, 4)))
    args = {"query": q, "key": k, "value": v, "attn_mask": torch.rand((6, 9), generator=gen) < 0.7, "enable_gqa": True}
    run_where_supported(impl, args)
    grad_out = torch.randn((2, hq, 6, 4), generator=gen)
    (got, grads), (want, want_grads) = ours(impl, args, grad_out), torch_math(args, grad_out)
    for g, w in zip((got, *grads), (want, *want_grads)):
        assert_like_torch(g, w, F32)


@pytest.mark.parametrize("impl", IMPLS + [sdpa_impls.reference], ids=lambda i: getattr(i, "name", "reference"))
def test_gqa_heads_that_do_not_divide_the_query_heads_are_refused_by_name(impl) -> None:
    """Key heads 2 and value heads 3 against 8 query heads: torch raises; we raise one ValueError naming the three."""
    q, k, v = torch.randn(1, 8, 4, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 3, 5, 8)
    with pytest.raises(RuntimeError):
        torch_math({"query": q, "key": k, "value": v, "enable_gqa": True})
    with pytest.raises(ValueError, match=r"key heads \(2\) and value heads \(3\) must each divide the query heads "
                                         r"\(8\) with enable_gqa: query \(1, 8, 4, 8\)"):
        impl(q, k, v, enable_gqa=True)


MASK_SHAPES = [(), (7,), (1, 7), (5, 1), (5, 7), (3, 1, 7), (3, 5, 1), (2, 1, 1, 7), (1, 3, 5, 7), (2, 3, 5, 7)]


@pytest.mark.parametrize("impl", IMPLS, ids=lambda i: i.name)
@pytest.mark.parametrize("kind", ["bool", "float"])
@pytest.mark.parametrize("shape", MASK_SHAPES, ids=lambda s: "x".join(map(str, s)) or "scalar")
def test_mask_of_rank_0_to_4_answers_like_torch_math(impl, shape: tuple, kind: str) -> None:
    """Any mask that broadcasts to (B, Hq, Lq, Lk) = (2, 3, 5, 7), of any rank; the reasons answer for it too."""
    gen = torch.Generator().manual_seed(zlib.crc32(repr((shape, kind)).encode()))
    q, k, v = torch.randn(2, 3, 5, 8, generator=gen), torch.randn(2, 3, 7, 8, generator=gen), torch.randn(2, 3, 7, 4)
    mask = torch.rand(shape, generator=gen) < 0.7 if kind == "bool" else torch.randn(shape, generator=gen)
    args = {"query": q, "key": k, "value": v, "attn_mask": mask}
    run_where_supported(impl, args)
    grad_out = torch.randn(2, 3, 5, 4, generator=gen)
    (got, grads), (want, want_grads) = ours(impl, args, grad_out), torch_math(args, grad_out)
    for g, w in zip((got, *grads), (want, *want_grads)):
        assert_like_torch(g, w, F32)


@pytest.mark.parametrize("impl", IMPLS, ids=lambda i: i.name)
@pytest.mark.parametrize("causal", [False, True])
def test_fp16_scores_past_65504_answer_like_torch_math(impl, causal: bool) -> None:
    """test_scaled_dot_product_attention_fp16_overflow's input: every element 256, E = 80, so the scaled scores
    (586 000) do not fit fp16; the answer (the mean of the values, 256) does, as torch's math backend gives it."""
    x = torch.full((1, 32, 23, 80), 256.0, dtype=F16)
    args = {"query": x, "key": x, "value": x, "is_causal": causal}
    run_where_supported(impl, args)
    assert_like_torch(ours(impl, args)[0], torch_math(args)[0], F16)


@pytest.mark.parametrize("impl", OURS, ids=lambda i: i.name)
@pytest.mark.parametrize("dtype", ALL, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("lq,lk", [(200, 50), (3, 799), (146, 1)])
def test_rows_with_one_key_get_exactly_zero_dq_like_torch_math(impl, lq: int, lk: int, dtype: torch.dtype) -> None:
    """Top-left causal with Lq != Lk: row 0 (every row when Lk = 1) attends to a single key, its softmax is exactly
    1 and its gradient exactly 0. torch's math backend gives exact zeros for dq there, and for the key's share."""
    gen = torch.Generator().manual_seed(lq * 1000 + lk)
    q, k, v = (torch.randn(2, 3, n, 64, generator=gen).to(dtype) for n in (lq, lk, lk))
    args, grad_out = {"query": q, "key": k, "value": v, "is_causal": True}, torch.randn(2, 3, lq, 64).to(dtype)
    _, (dq, _, _) = ours(impl, args, grad_out)
    _, (want_dq, _, _) = torch_math(args, grad_out)
    single = slice(None) if lk == 1 else slice(0, 1)
    assert (want_dq[..., single, :] == 0).all()
    assert (dq[..., single, :] == 0).all(), float(dq[..., single, :].abs().max())


@pytest.mark.parametrize("impl", OURS, ids=lambda i: i.name)
@pytest.mark.parametrize("where", ["query", "key", "value", "attn_mask"])
@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")], ids=str)
def test_a_non_finite_input_spreads_like_torch_math(impl, where: str, value: float) -> None:
    """One ±inf or NaN in q, k, v or a float mask: the answer and the gradients are non-finite where torch's math
    backend's are (a +inf score makes its whole row NaN, as torch's softmax does) and agree elsewhere. (With causal
    masking torch's own backends differ from each other here: math's NaN reaches rows the causal mask hides.)"""
    gen = torch.Generator().manual_seed(zlib.crc32(repr((where, value)).encode()))
    q, k, v = torch.randn(1, 2, 5, 8, generator=gen), torch.randn(1, 2, 6, 8, generator=gen), torch.randn(1, 2, 6, 8)
    args = {"query": q, "key": k, "value": v, "attn_mask": torch.randn(5, 6, generator=gen)}
    args[where][..., 1, 2] = value
    grad_out = torch.randn(1, 2, 5, 8, generator=gen)
    (got, grads), (want, want_grads) = ours(impl, args, grad_out), torch_math(args, grad_out)
    assert want.isfinite().all() == (where == "attn_mask" and value == float("-inf"))  # a -inf mask entry masks
    for name, g, w in zip(("out", "dq", "dk", "dv"), (got, *grads), (want, *want_grads)):
        assert torch.equal(g.isnan(), w.isnan()) and torch.equal(g.isinf(), w.isinf()), (name, g, w)
        torch.testing.assert_close(g[w.isfinite()], w[w.isfinite()], atol=1e-5, rtol=1e-4)



@pytest.mark.parametrize("impl", OURS[1:], ids=lambda i: i.name)
@pytest.mark.parametrize("dtype", (F32, BF16), ids=str)
def test_a_scale_past_fp32s_range_answers_like_torch_math(impl, dtype: torch.dtype) -> None:
    """scale = 1e39 is a finite Python float that no fp32 GEMM factor holds: torch's math backend answers (NaN where
    a score overflows), and so do chunked and fused, instead of failing inside torch.baddbmm."""
    gen = torch.Generator().manual_seed(8)
    args = {"query": torch.randn(1, 2, 8, 4, generator=gen).to(dtype), "scale": 1e39}
    args["key"], args["value"] = (torch.randn(1, 2, 8, 4, generator=gen).to(dtype) for _ in "kv")
    got, want = ours(impl, args)[0], torch_math(args)[0]
    assert torch.equal(got.isnan(), want.isnan()) and want.isnan().any()
    torch.testing.assert_close(got[~got.isnan()], want[~want.isnan()])


@pytest.mark.parametrize("impl", OURS[1:], ids=lambda i: i.name)
@pytest.mark.parametrize("scale", (0.0, -0.0, 1e-46), ids=str)  # 1e-46 is 0 in fp32, as a GEMM's alpha
def test_a_scale_of_zero_answers_like_torch_math_in_bf16(impl, scale: float, monkeypatch) -> None:
    """Every score 0: each row the mean of v, and dq = dk = 0. torch's bf16 baddbmm with alpha 0 leaves its output
    as it was, which in the tiled implementations' bf16 path is uninitialised memory (NaN, or any number)."""
    monkeypatch.setenv("SDPA_BENCH_CPU_BF16", "bf16")  # the path a CPU with a fast bf16 GEMM takes
    gen = torch.Generator().manual_seed(9)
    args = {k: torch.randn(1, 2, 64, 8, generator=gen).to(BF16) for k in ("query", "key", "value")}
    args["scale"] = scale
    grad_out = torch.randn(1, 2, 64, 8, generator=gen).to(BF16)
    (got, grads), (want, want_grads) = ours(impl, args, grad_out), torch_math(args, grad_out)
    for g, w in zip((got, *grads), (want, *want_grads)):
        torch.testing.assert_close(g.float(), w.float(), atol=2e-2, rtol=2e-2)

