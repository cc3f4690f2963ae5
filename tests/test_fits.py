"""Memory estimates before a point runs, and gradient checks on a slice of every large case."""
from __future__ import annotations

import pytest
import torch

import sdpa_impls
from sdpa_impls import Unsupported
from sdpa_impls.bench import check
from sdpa_impls.bench.check import CaseContext, WrongResult, grad_slice
from sdpa_impls.bench.fits import ensure_fits, point_bytes, reference_bytes
from sdpa_impls.bench.grid import Case, preset
from sdpa_impls.bench.inputs import make_inputs
from sdpa_impls.bench.measure import mode_closure, run_point
from sdpa_impls.bench.memory import peak_memory
from sdpa_impls.protocol import Implementation, SDPAInputs

GIB = 2**30
H100 = 80 * GIB


def test_naive_at_the_gpu_presets_largest_case_does_not_fit_an_80_gb_card_but_the_reference_does() -> None:
    big = [c for c in preset("gpu") if c.lq == 16384 and c.e == 64 and c.dtype == "fp32" and not c.causal]
    by_mode = {c.mode: c for c in big}
    assert 80 * GIB < point_bytes("naive", by_mode["fwd"]) < 130 * GIB  # about 100 GB
    assert point_bytes("naive", by_mode["fwd+bwd"]) > 160 * GIB  # about 210 GB
    with pytest.raises(Unsupported, match=r"naive needs about \d+\.\d GiB of cuda memory; 80.0 GiB free"):
        ensure_fits("naive", point_bytes("naive", by_mode["fwd"]), "cuda", free=H100)
    for case in preset("gpu"):  # the fp64 check itself never is what runs out of memory on an 80 GB card
        ensure_fits("the fp64 reference", reference_bytes(case, check.grad_slice(case) if case.mode != "fwd"
                                                          else None), "cuda", free=H100)
        ensure_fits("fused", point_bytes("fused", case), "cuda", free=H100)


def test_the_xformers_estimate_holds_the_dense_bias_it_builds_where_no_class_states_the_mask() -> None:
    """xformers builds its dense bias in prepare (not counted in the peak, as inputs are not): the estimate counts
    exactly the bytes of the tensor it builds, also where a class states the structure (xformers' dispatch may
    refuse the class, and the dense bias is built then)."""
    from sdpa_impls.bench.fits import _prepared_bytes
    from sdpa_impls.impls.xformers import _bias_tensor

    for mask, causal in (("prefix-8", False), ("alibi", True), ("bool", False), ("window-4", False)):
        case = Case(lq=21, lk=21, e=8, heads_q=4, heads_kv=2, dtype="bf16", mask=mask, causal=causal, batch=2)
        inputs = make_inputs(case, "cpu")
        inp = SDPAInputs(**inputs.args(), structure=inputs.structure)
        built = _bias_tensor(inp).untyped_storage().nbytes()
        assert _prepared_bytes("xformers", case) == built, mask
        # the timed closure's bias and the check's own, in place of the fp32 mask copy allowed to the others
        assert point_bytes("xformers", case) - point_bytes("fused", case) == 2 * built - 4 * case.mask_elements()
    big = [c for c in preset("gpu") if c.mask in ("prefix-1024", "alibi") and c.lq == 16384 and c.e == 64]
    assert big and all(_prepared_bytes("xformers", c) == 32 * 16384 * 16384 * 2 for c in big)  # 16 GiB each
    for c in big:  # and the point still fits an 80 GB card (the ALiBi mask is 16 GiB too: about 50 GiB in all)
        ensure_fits("xformers", point_bytes("xformers", c), "cuda", free=H100)


@pytest.mark.parametrize("mode", ["fwd", "fwd+bwd"])
def test_the_naive_estimate_bounds_what_naive_allocates(mode: str) -> None:
    case = Case(lq=512, lk=512, e=64, mode=mode, heads_q=4, heads_kv=4)
    inputs = make_inputs(case, "cpu")
    measured = peak_memory(mode_closure(sdpa_impls.get("naive"), inputs, mode), "cpu")
    inputs_bytes = sum(t.numel() * t.element_size() for t in (inputs.query, inputs.key, inputs.value))
    estimate = point_bytes("naive", case)
    assert measured + inputs_bytes <= estimate <= 3 * (measured + inputs_bytes), (measured, estimate)


def test_a_point_too_large_for_this_machine_is_skipped_with_its_numbers() -> None:
    case = Case(lq=4096, lk=65536, e=16, heads_q=32, heads_kv=32)  # naive: ~100 GB of scores; inputs ~0.3 GB
    result = run_point("naive", CaseContext(case, "cpu"))
    assert result.status == "skipped" and "naive needs about" in result.reason and "GiB free" in result.reason


def test_every_backward_case_of_the_gpu_preset_checks_gradients_on_at_most_two_heads() -> None:
    for case in (c for c in preset("gpu") if c.mode != "fwd"):
        part = grad_slice(case)
        assert (part.lq, part.lk, part.e, part.dtype, part.causal) == (case.lq, case.lk, case.e, case.dtype,
                                                                      case.causal)
        if part != case:
            assert part.batch == 1 and part.heads_q <= 2 and (part.heads_q == part.heads_kv) == (not case.gqa)


class _ScaledGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> torch.Tensor:
        return 1.5 * g


class WrongBackward(Implementation):
    """naive's forward, but every gradient 1.5× too large: a broken backward kernel."""

    name = "wrong_backward"

    def forward(self, inp: SDPAInputs) -> torch.Tensor:
        return sdpa_impls.get("naive")(_ScaledGrad.apply(inp.query), inp.key, inp.value, inp.attn_mask,
                                       is_causal=inp.is_causal, enable_gqa=inp.enable_gqa)


@pytest.mark.parametrize("heads", [(4, 4), (8, 2)], ids=["mha", "gqa"])
def test_a_broken_backward_is_caught_on_the_slice_of_a_large_case(monkeypatch, heads) -> None:
    monkeypatch.setattr(check, "GRAD_CHECK_MAX_SCORES", 1000)  # make a CPU-sized case "large"
    case = Case(lq=64, lk=64, e=16, mode="fwd+bwd", batch=2, heads_q=heads[0], heads_kv=heads[1], causal=True)
    ctx = CaseContext(case, "cpu")
    assert ctx.grad_case.batch == 1 and ctx.grad_case.heads_q == 2
    with pytest.raises(WrongResult, match=r"of dq \(on L64-E16-fp32-causal-B1-H2.*\) vs fp64"):
        ctx.check(WrongBackward())
    err, tol = ctx.check(sdpa_impls.get("fused"))
    assert err <= tol


def test_fp32_is_held_to_the_ieee_gemm_on_cpu() -> None:
    from sdpa_impls.bench.ceilings import gemm_key, needed_ceilings

    assert gemm_key("fp32", "cpu") == "gemm_flops_fp32" and gemm_key("bf16", "cpu") == "gemm_flops_bf16"
    assert needed_ceilings(("fp32", "bf16"), "cpu") == ("gemm_flops_fp32", "gemm_flops_bf16", "copy_bytes_per_s")


def test_small_cases_are_estimated_small() -> None:
    """The smoke preset fits in a few MiB: a small runner never skips it for want of memory."""
    for case in preset("smoke"):
        part = grad_slice(case) if case.mode != "fwd" else None
        assert reference_bytes(case, part) < 64 << 20 and max(point_bytes(i, case) for i in ("naive", "fused")) \
            < 64 << 20
