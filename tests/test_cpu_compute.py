"""The dtype the tiled implementations (chunked, fused) compute bf16 calls in on a CPU: bf16 where this CPU's bf16
GEMM keeps up with its fp32 GEMM, fp32 where it does not (`budget.bf16_compute`). Either path gives answers within
the correctness rule (fp32: torch's error), the choice is recorded with a benchmark's point and printed by `list`, and
the classes of CPU this machine is not are reached by capping oneDNN's instruction set in a process of the test
environment."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sdpa_impls.bench.grid import Case
from sdpa_impls.bench.check import CaseContext
from sdpa_impls.bench.measure import prepare_point
from sdpa_impls.impls._tiled import budget
from sdpa_impls.impls._tiled.budget import BF16_ENV, bf16_compute, cuda_tiling

TILED = ("chunked", "fused")
CPU = torch.device("cpu")

CHOICE = """
import json, torch
from sdpa_impls.impls._tiled.budget import bf16_compute, gemm_rates
found = bf16_compute(torch.device("cpu"))
print(json.dumps({"dtype": str(found.dtype), "reason": found.reason, "rates": gemm_rates()}))
"""


def choice_in_process(**env: str) -> dict:
    """bf16_compute's answer in a fresh process of this test environment with `env` added."""
    clean = {k: v for k, v in os.environ.items() if k != BF16_ENV} | env
    done = subprocess.run([sys.executable, "-c", CHOICE], capture_output=True, text=True, env=clean, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("forced", ["bf16", "fp32"])
@pytest.mark.parametrize("name", TILED)
@pytest.mark.parametrize("mode", ["fwd", "fwd+bwd"])
def test_either_choice_is_within_the_correctness_rule_and_recorded(name: str, forced: str, mode: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BF16_ENV, forced)
    case = Case(lq=160, lk=160, e=32, dtype="bf16", causal=True, mode=mode)
    point = prepare_point(name, CaseContext(case, "cpu"))  # raises WrongResult past the correctness rule
    assert point.max_error <= point.error_tolerance
    assert point.op == f"{forced} compute"


def test_an_unknown_setting_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BF16_ENV, "fp8")
    with pytest.raises(ValueError, match=f"{BF16_ENV} should be bf16 or fp32"):
        bf16_compute(CPU)


def test_fp32_is_chosen_exactly_where_the_bf16_gemm_is_slow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BF16_ENV, raising=False)
    found = bf16_compute(CPU)
    rates = budget.gemm_rates()
    assert found.widen == (rates["bf16"] < budget.BF16_SLOW * rates["fp32"])
    with cuda_tiling():  # a CUDA plan checked on the CPU keeps CUDA's bf16
        assert not bf16_compute(CPU).widen


def test_a_cpu_without_bf16_instructions_computes_in_fp32() -> None:
    """oneDNN capped at AVX2 has no bf16 instructions and emulates the bf16 GEMM: fp32 is chosen, on any x86 CPU."""
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        pytest.skip(f"an x86 CPU with AVX2 is needed to cap oneDNN at AVX2 (torch says "
                    f"{torch.backends.cpu.get_cpu_capability()})")
    found = choice_in_process(ONEDNN_MAX_CPU_ISA="AVX2")
    assert found["dtype"] == "torch.float32", found


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return {f for line in text.splitlines() if line.startswith("flags") for f in line.split(":", 1)[1].split()}


def test_an_amx_cpu_keeps_bf16() -> None:
    """AMX multiplies bf16 tiles in its own unit: the bf16 GEMM is faster than fp32 (about 1.7× on the AMX Xeon)."""
    if not {"amx_tile", "amx_bf16"} <= cpu_flags() or not getattr(torch._C._cpu, "_init_amx", lambda: False)():
        pytest.skip("this CPU has no AMX bf16 tiles (or the kernel does not grant them to torch)")
    found = choice_in_process()
    assert found["dtype"] == "torch.bfloat16", found


@pytest.mark.parametrize("name", TILED)
def test_fp32_compute_has_torchs_bf16_error_and_list_says_which_one_runs(name: str, monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: pytest.CaptureFixture) -> None:
    """Scores near 50, where rounding them to bf16 costs most: computed in fp32 the answer is as close to fp64 as
    torch's math backend's (which keeps fp32 scores); `sdpa-bench list` says when the scores are rounded instead."""
    import sdpa_impls
    from sdpa_impls.cli import main as cli_main

    gen = torch.Generator().manual_seed(0)
    q = (torch.randn(1, 2, 256, 64, generator=gen) * 10).bfloat16()
    k, v = (torch.randn(1, 2, 256, 64, generator=gen).bfloat16() for _ in "kv")
    ref = sdpa_impls.reference(q, k, v)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        theirs = float((torch.nn.functional.scaled_dot_product_attention(q, k, v).double() - ref).abs().max())
    for forced in ("fp32", "bf16"):
        monkeypatch.setenv(BF16_ENV, forced)
        mine = float((sdpa_impls.get(name)(q, k, v).double() - ref).abs().max())
        if forced == "fp32":
            assert mine <= 1.25 * theirs, (mine, theirs)
        cli_main(["list", "--device", "cpu"])
        assert ("scores rounded to bf16" in capsys.readouterr().out) == (forced == "bf16")
