"""The record of what ran (torch.profiler, one call outside the timed region) and the pinned-backend rule."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from sdpa_impls.bench.check import CaseContext
from sdpa_impls.bench.grid import Case, preset
from sdpa_impls.bench.kernels import DispatchMismatch, backends_in, check_pinned, profile_call
from sdpa_impls.bench.measure import Options, failed, run_point
from sdpa_impls.bench.result import Result
from sdpa_impls.impls.torch_sdpa import TorchFlash, TorchMath, sdpa_params
from sdpa_impls.protocol import SDPAInputs

FAST = Options(budget_s=0.0, min_reps=1, max_reps=1, warmup=0, memory=False)
MATH_OP = "aten::_scaled_dot_product_attention_math"
FLASH_CPU = "aten::_scaled_dot_product_flash_attention_for_cpu"


@pytest.mark.parametrize("mode", ["fwd", "bwd", "fwd+bwd"])
def test_each_result_records_what_ran_and_pinned_backends_differ_on_cpu(mode: str) -> None:
    ctx = CaseContext(Case(lq=64, lk=64, e=32, mode=mode, heads_q=8, heads_kv=2), "cpu")  # GQA
    rows = {name: run_point(name, ctx, FAST) for name in ("torch_sdpa_math", "torch_sdpa_flash", "naive")}
    assert all(r.status == "ok" and r.kernels for r in rows.values()), rows
    math_ran, flash_ran = backends_in(rows["torch_sdpa_math"].kernels), backends_in(rows["torch_sdpa_flash"].kernels)
    assert "FLASH_ATTENTION" not in math_ran and set(flash_ran) == {"FLASH_ATTENTION"}
    if mode != "bwd":  # math's backward is composite autograd: its forward op appears only when the forward runs
        assert MATH_OP in rows["torch_sdpa_math"].kernels and FLASH_CPU in rows["torch_sdpa_flash"].kernels
    if mode != "fwd":
        assert f"{FLASH_CPU}_backward" in rows["torch_sdpa_flash"].kernels
    assert not backends_in(rows["naive"].kernels) and "aten::bmm" in rows["naive"].kernels
    again = Result.from_dict(json.loads(json.dumps(rows["naive"].as_dict())))
    assert again.kernels == rows["naive"].kernels and "kernels" in rows["naive"].extra_info()


class SilentlyMath(TorchFlash):
    """Pinned to FLASH_ATTENTION in name, but its call runs the math backend: a silent dispatch change."""

    name = "silently_math"

    def prepare_inputs(self, inp: SDPAInputs):
        def call() -> torch.Tensor:
            with sdpa_kernel(SDPBackend.MATH):
                return F.scaled_dot_product_attention(inp.query, inp.key, inp.value, inp.attn_mask,
                                                      is_causal=inp.is_causal, enable_gqa=inp.enable_gqa)

        return call


def test_torchs_cuda_checks_are_asked_about_the_mask_the_call_passes() -> None:
    """The pinned CUDA backends ask torch's can_use_*_attention about the call that prepare_inputs makes: a
    per-head bias (Hq, Lq, Lk), as ALiBi is, goes in as the 4-D view the call passes (cuDNN's check refuses a 3-D
    mask, which the call never hands it)."""
    q = torch.randn(1, 3, 8, 16)
    params = sdpa_params(SDPAInputs(q, q, q, torch.randn(3, 8, 8), is_causal=True))
    assert params.attn_mask.shape == (1, 3, 8, 8) and params.is_causal
    assert sdpa_params(SDPAInputs(q, q, q)).attn_mask is None


def test_a_pinned_backend_whose_profile_shows_another_backend_is_a_failed_point() -> None:
    q = torch.randn(1, 4, 32, 16)
    impl = SilentlyMath()
    prof = profile_call(impl.prepare(q, q, q), "cpu")
    with pytest.raises(DispatchMismatch, match=r"pinned to FLASH_ATTENTION but ran another backend \(MATH: "
                                               r"aten::_scaled_dot_product_attention_math\)") as info:
        check_pinned(impl, prof)
    base = Result("silently_math", Case(lq=32, lk=32, e=16), "cpu", "ok")
    assert failed(base, info.value).status == "failed"
    check_pinned(TorchFlash(), profile_call(TorchFlash().prepare(q, q, q), "cpu"))  # the real one passes
    check_pinned(TorchMath(), profile_call(TorchMath().prepare(q, q, q), "cpu"))


def test_results_json_csv_and_pytest_benchmark_extra_info_carry_the_record(tmp_path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, "-m", "pytest", "tests/test_benchmarks.py", "-q", "-p", "no:cacheprovider",
                           "--benchmark-only", "--sdpa-preset", "smoke", "--sdpa-device", "cpu:0",
                           "--sdpa-impl", "torch_sdpa_flash", "--benchmark-max-time=0.01",
                           f"--benchmark-json={out}"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    benches = json.loads(out.read_text())["benchmarks"]
    assert benches and all(FLASH_CPU in b["extra_info"]["kernels"] for b in benches)
    assert {b["extra_info"]["device"] for b in benches} == {"cpu"}  # the kind (cpu:0, cuda:1), which the gate reads
    # other processes' work beside the samples, as `sdpa-bench run` records it (Linux: /proc/stat)
    assert all(isinstance(b["extra_info"]["other_cpus"], float) for b in benches) or not Path("/proc/stat").exists()
    # the point's parameter is JSON itself (implementation, case id), so --benchmark-group-by=param reads it
    assert [b["params"]["sdpa_point"] for b in benches] == [["torch_sdpa_flash", c.id] for c in preset("smoke")]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: records CUDA kernel names")
def test_cuda_points_record_kernels_and_pinned_backends_run_their_own() -> None:
    ctx = CaseContext(Case(lq=512, lk=512, e=64, dtype="bf16", mode="fwd+bwd"), "cuda")
    for name in ("torch_sdpa", "torch_sdpa_math", "torch_sdpa_flash", "torch_sdpa_efficient", "torch_sdpa_cudnn"):
        r = run_point(name, ctx, FAST)
        assert r.status in ("ok", "skipped"), (name, r.reason)
        if r.status == "ok":
            assert r.kernels and not any(k.startswith("aten::") for k in r.kernels), r.kernels
