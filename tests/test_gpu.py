"""CUDA paths that only a GPU can check: each test skips with its reason on a machine without one."""
from __future__ import annotations

import importlib.util
import re

import pytest
import torch

import sdpa_impls
from sdpa_impls.bench.check import CaseContext
from sdpa_impls.bench.grid import Case
from sdpa_impls.bench.measure import Options, run_case_interleaved, run_point

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
FAST = Options(budget_s=0.01, min_reps=2, max_reps=5, warmup=1)


@pytest.mark.parametrize("mask", ["none", "bool"])
@pytest.mark.parametrize("mode", ["fwd", "fwd+bwd"])
def test_xformers_gqa_runs_or_skips_with_a_reason_never_fails(mode: str, mask: str) -> None:
    pytest.importorskip("xformers", reason="xformers is not installed")
    case = Case(lq=256, lk=256, e=64, dtype="bf16", mode=mode, mask=mask, heads_q=8, heads_kv=2)
    r = run_point("xformers", CaseContext(case, "cuda"), FAST)
    assert r.status in ("ok", "skipped"), r.reason
    if r.status == "ok":
        assert r.max_error <= r.error_tolerance


XFORMERS_FW = r"(fa3F@\S+|fa2F@\S+|cutlassF-pt)"  # the forward ops of xformers' CUDA dispatch, by their NAME
XFORMERS_BW = r"(fa3B@\S+|fa2B@\S+|cutlassB-pt)"


@pytest.mark.parametrize("mode", ["fwd", "fwd+bwd"])
def test_xformers_records_the_ops_that_ran_by_their_names(mode: str) -> None:
    """Where its own `_C` loads or not (a wheel built for another torch): xformers' dispatch picks an op that calls
    torch's kernels (or FlashAttention's), the point runs, and its record names the op as xformers does; the
    profiled kernels agree with it."""
    pytest.importorskip("xformers", reason="xformers is not installed")
    r = run_point("xformers", CaseContext(Case(lq=256, lk=256, e=64, dtype="fp16", mode=mode), "cuda"), FAST)
    assert r.status == "ok", f"{r.status}: {r.reason}"
    assert re.fullmatch(XFORMERS_FW + (f" \\+ {XFORMERS_BW}" if mode != "fwd" else ""), r.op), r.op
    family = "cutlass" if r.op.startswith("cutlass") else "flash"
    assert any(family in k.lower() for k in r.kernels), (r.op, r.kernels[:5])


@pytest.mark.parametrize("case", [
    Case(lq=256, lk=256, e=64, dtype="bf16", mode="fwd+bwd", causal=True, heads_q=8, heads_kv=2),
    Case(lq=300, lk=256, e=128, dtype="fp16", mode="fwd+bwd", causal=True),  # top-left causal with Lq > Lk
    Case(lq=128, lk=384, e=64, dtype="bf16", mode="fwd", causal=True),  # Lq < Lk: top-left only
    Case(lq=256, lk=256, e=64, dtype="bf16", mode="fwd+bwd", mask="bool", heads_q=8, heads_kv=2),
    Case(lq=256, lk=256, e=64, dtype="bf16", mode="fwd", mask="float"),
    Case(lq=1, lk=1024, e=128, dtype="bf16", heads_q=32, heads_kv=8),  # decode
], ids=lambda c: c.id)
def test_cudnn_frontend_forward_and_backward_against_fp64(case: Case) -> None:
    pytest.importorskip("cudnn", reason="cudnn frontend is not installed (pip install nvidia-cudnn-frontend)")
    r = run_point("cudnn_frontend", CaseContext(case, "cuda"), FAST)
    assert r.status == "ok", f"{r.status}: {r.reason}"
    assert r.max_error <= r.error_tolerance and r.median_s > 0


def test_cudnn_frontend_builds_its_graphs_once_per_case() -> None:
    """The graphs are built when the first closure of a case is prepared, and the next closure of it reuses them."""
    pytest.importorskip("cudnn", reason="cudnn frontend is not installed (pip install nvidia-cudnn-frontend)")
    from sdpa_impls.bench.inputs import make_inputs
    from sdpa_impls.impls import cudnn_frontend

    inputs = make_inputs(Case(lq=264, lk=264, e=64, dtype="bf16", causal=True, mode="fwd+bwd"), "cuda")
    impl, before = sdpa_impls.get("cudnn_frontend"), set(cudnn_frontend._PLANS)
    first = inputs.prepare(impl)
    built = set(cudnn_frontend._PLANS) - before
    assert len(built) == 1 and not isinstance(cudnn_frontend._PLANS[next(iter(built))], str)
    second = inputs.prepare(impl)
    assert set(cudnn_frontend._PLANS) - before == built
    torch.testing.assert_close(first(), second(), rtol=0, atol=0)  # the same graphs on the same inputs


@pytest.mark.parametrize("mode", ["fwd", "fwd+bwd"])
def test_flash_attn4_compiles_on_its_first_call_and_then_only_runs(mode: str) -> None:
    if not _imports("flash_attn.cute"):
        pytest.skip("flash_attn.cute is not installed (pip install --pre flash-attn-4)")
    case = Case(lq=512, lk=512, e=128, dtype="bf16", causal=True, mode=mode, heads_q=8, heads_kv=2)
    r = run_point("flash_attn4", CaseContext(case, "cuda"), FAST)
    if r.status == "skipped" and "compute capability" in r.reason:
        pytest.skip(r.reason)
    assert r.status == "ok", f"{r.status}: {r.reason}"
    assert r.max_error <= r.error_tolerance and r.compile_s is not None and r.compile_s > 0


@pytest.mark.parametrize("impl", ["fused", "torch_sdpa", "torch_sdpa_flash"])
@pytest.mark.parametrize("mode", ["fwd", "bwd", "fwd+bwd"])
def test_cuda_graph_replay_times_every_mode(impl: str, mode: str) -> None:
    case = Case(lq=256, lk=256, e=64, dtype="bf16", mode=mode)
    r = run_point(impl, CaseContext(case, "cuda"), Options(budget_s=0.01, min_reps=2, max_reps=5, cuda_graph=True))
    assert r.status in ("ok", "skipped"), r.reason
    if r.status == "ok":
        assert r.median_s > 0


def test_interleaved_rounds_flush_l2_and_replay_graphs_on_cuda() -> None:
    case = Case(lq=256, lk=256, e=64, dtype="bf16")
    for opts in (Options(budget_s=0.0, min_reps=3, max_reps=3, flush_l2=True),
                 Options(budget_s=0.0, min_reps=3, max_reps=3, cuda_graph=True)):
        rows = run_case_interleaved(case, ["fused", "torch_sdpa"], "cuda", opts)
        assert all(r.status == "ok" and len(r.samples) == 3 for r in rows), [r.reason for r in rows]
        if opts.flush_l2:
            assert all(r.calls_per_sample == 1 for r in rows)  # every call starts with a cold L2


def test_fp32_on_sm80_is_held_to_the_tf32_gemm_and_both_ceilings_are_measured() -> None:
    from sdpa_impls.bench.ceilings import RunCeilings, gemm_key, needed_ceilings, uses_tf32

    if not uses_tf32("cuda"):
        pytest.skip("this GPU is older than sm80: no TF32 tensor cores")
    meter = RunCeilings("cuda", needed_ceilings(("fp32",), "cuda"))
    meter.sample()
    ceil = meter.values()
    assert ceil["gemm_flops_tf32"] > ceil["gemm_flops_fp32"] and gemm_key("fp32", "cuda") == "gemm_flops_tf32"
    r = run_point("torch_sdpa", CaseContext(Case(lq=2048, lk=2048, e=64), "cuda"), FAST).on_roofline(ceil)
    assert r.status == "ok" and r.roofline_gemm == "gemm_flops_tf32" and r.roofline_pct <= 100


def test_a_point_larger_than_this_gpu_is_a_skip_not_an_out_of_memory() -> None:
    total = torch.cuda.get_device_properties(0).total_memory
    lq = 1
    while 12 * 32 * lq * lq <= 2 * total:  # naive's scores alone: twice this card's memory
        lq *= 2
    case = Case(lq=lq, lk=lq, e=64, dtype="bf16", heads_q=32, heads_kv=32)
    r = run_point("naive", CaseContext(case, "cuda"), FAST)
    assert r.status == "skipped" and "naive needs about" in r.reason, r.reason


def test_gradients_of_a_large_case_are_checked_on_a_slice_on_cuda() -> None:
    case = Case(lq=4096, lk=4096, e=64, dtype="bf16", mode="fwd+bwd", batch=4, heads_q=32, heads_kv=32)
    ctx = CaseContext(case, "cuda")
    assert ctx.grad_case.batch == 1 and ctx.grad_case.heads_q == 2
    for name in ("fused", "torch_sdpa"):
        r = run_point(name, ctx, FAST)
        assert r.status == "ok" and r.max_error <= r.error_tolerance, r.reason


# Every mask structure, GQA, bf16, forward and forward+backward, at a size where windows and documents cross tile
# boundaries; the decode batches of the serve preset (Lq = 1 and 4, padded keys); one request (B = 1) decode, the
# only batch flashinfer's single-request kernels take; and the backward-only mode, whose closure builds (and for
# flex and compiled, compiles) its forward first.
_GQA = {"e": 64, "dtype": "bf16", "heads_q": 8, "heads_kv": 2}
STRUCTURED = (
    [Case(lq=512, lk=512, mask=m, causal=c, mode=mode, **_GQA)
     for m, c in (("window-64", False), ("documents-128", False), ("prefix-100", False), ("alibi", True),
                  ("alibi", False)) for mode in ("fwd", "fwd+bwd")]
    + [Case(lq=lq, lk=1000, mask="padding", batch=4, **_GQA) for lq in (1, 4)]
    + [Case(lq=1, lk=1000, **_GQA), Case(lq=512, lk=512, causal=True, mode="bwd", **_GQA)]
)


def _imports(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a parent package that fails to import (a flash_attn built for another torch)
        return False


def _xformers_imports() -> bool:
    """xformers imports. Its own compiled kernels need not load (a wheel built for another torch): its attention ops
    call torch's kernels, FlashAttention's or Triton's."""
    from sdpa_impls.impls.xformers import _fmha

    return _fmha()[0] is not None


def meant_to_run(impl: str, case: Case) -> bool:
    """Where an implementation is written to run these cases (its library installed here): a skip there is as much
    a regression as a failure. Elsewhere a skip with its reason is an answer."""
    mask, fwd = case.mask, case.mode == "fwd"
    if impl in ("naive", "chunked", "fused", "torch_sdpa", "flex", "compiled"):
        return True
    if impl == "flash_attn":  # window_size and alibi_slopes
        return _imports("flash_attn") and mask.startswith(("window", "alibi"))
    if impl == "flash_attn3":
        return _imports("flash_attn_interface") and torch.cuda.get_device_capability() == (9, 0) and \
            mask.startswith("window")
    if impl == "flashinfer":  # the ragged decode batch, and a one-request decode
        return _imports("flashinfer") and fwd and (mask == "padding" or (mask == "none" and case.batch == 1))
    if impl == "xformers":  # its bias classes (the padded-keys one forward)
        return _xformers_imports() and (mask.startswith(("window", "documents")) or (mask == "padding" and fwd))
    if impl == "flash_attn4":  # window_size, and no mask at all
        return _imports("flash_attn.cute") and mask.startswith(("window", "none"))
    if impl == "cudnn_frontend":  # every structure as a dense bias but the padded decode batches, causal as its band
        return _imports("cudnn") and mask != "padding"
    return False


@pytest.mark.parametrize("case", STRUCTURED, ids=lambda c: c.id)
@pytest.mark.parametrize("impl", sdpa_impls.names())
def test_every_implementation_on_every_structure_is_right_or_says_why_not_on_cuda(impl: str, case: Case) -> None:
    """The native forms (xformers' bias classes, flash-attn's window_size and alibi_slopes, flashinfer's ragged
    batch, jagged documents, flex's block masks), the tile maps of chunked and fused, and every peer's layout, on
    the device they were written for: each point is checked against fp64 and timed, or skipped with its reason
    where it is not meant to run; never failed or wrong."""
    r = run_point(impl, CaseContext(case, "cuda"), FAST)
    assert r.status == "ok" if meant_to_run(impl, case) else r.status in ("ok", "skipped"), f"{r.status}: {r.reason}"
    if r.status == "ok":
        assert r.max_error <= r.error_tolerance and r.median_s > 0


@pytest.mark.parametrize("mode", ["fwd", "fwd+bwd", "bwd"])
@pytest.mark.parametrize("impl", sdpa_impls.names())
def test_every_closure_is_captured_for_its_device_time_or_says_why_not(impl: str, mode: str) -> None:
    """Device time: each implementation's forward, forward+backward and backward closure is captured in a CUDA
    graph (a positive device time) or is timed eagerly with the reason; never a failed point for it."""
    case = Case(lq=512, lk=512, e=64, dtype="bf16", causal=True, mode=mode)
    r = run_point(impl, CaseContext(case, "cuda"), FAST)
    assert r.status in ("ok", "skipped"), f"{r.status}: {r.reason}"
    if r.status == "ok":
        assert r.device_time_method in ("cuda-graph", "eager") and r.device_time_s > 0
        if r.device_time_method == "cuda-graph":
            assert len(r.device_samples) >= FAST.min_reps and r.host_overhead_s == r.median_s - r.device_time_s
        else:
            assert r.device_time_reason and r.device_time_s == r.median_s and r.host_overhead_s is None
        assert r.clocks is not None and r.clocks["clock_kept_throttled"] >= 0


def test_the_pinned_cudnn_kernel_has_the_device_time_of_torchs_own_dispatch_to_it() -> None:
    """The same cuDNN kernel reached two ways: their eager times differ by the pinning's host work, their device
    times by no more than 10 %."""
    case = Case(lq=2048, lk=2048, e=64, dtype="bf16", causal=True, heads_q=8, heads_kv=8)
    rows = run_case_interleaved(case, ["torch_sdpa", "torch_sdpa_cudnn"], "cuda",
                                Options(budget_s=0.2, min_reps=10, max_reps=50, warmup=2))
    auto, cudnn = rows
    if cudnn.status == "skipped":
        pytest.skip(f"torch_sdpa_cudnn: {cudnn.reason}")
    assert auto.status == cudnn.status == "ok", (auto.reason, cudnn.reason)
    if not any("cudnn" in k.lower() for k in auto.kernels):
        pytest.skip(f"torch's dispatch did not pick cuDNN here: {auto.kernels[:2]}")
    assert auto.device_time_method == cudnn.device_time_method == "cuda-graph"
    assert abs(cudnn.device_time_s / auto.device_time_s - 1) <= 0.10, (cudnn.device_time_s, auto.device_time_s)


def test_nvml_reads_the_sm_clock_of_this_gpu() -> None:
    from sdpa_impls.bench.clocks import sm_clock

    pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")
    clock, reason = sm_clock("cuda")
    assert clock is not None, reason
    assert 0 < clock.read() <= clock.max_mhz * 1.01


FORK_PROBE = """
import os, torch
import benchmarks.bench_sdpa as suite
assert suite.DEVICE == "cuda", suite.DEVICE
assert not torch.cuda.is_initialized(), "importing the asv suite initialized CUDA"
pid = os.fork()
if pid == 0:  # as asv's forkserver runs a benchmark cell
    try:
        x = torch.randn(256, 256, device="cuda")
        ok = torch.isfinite((x @ x).sum()).item()
    except BaseException as exc:
        print(f"child: {type(exc).__name__}: {exc}", flush=True)
        ok = False
    os._exit(0 if ok else 1)
_, status = os.waitpid(pid, 0)
print("child exit", os.waitstatus_to_exitcode(status))
"""


def test_a_child_forked_after_importing_the_asv_suite_can_use_cuda() -> None:
    """asv's forkserver (asv.conf.json) imports the suite once and forks every cell from it."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "PYTORCH_NVML_BASED_CUDA_CHECK"} | {"SDPA_BENCH_PRESET": "smoke"}
    done = subprocess.run([sys.executable, "-c", FORK_PROBE], cwd=root, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "child exit 0", done.stdout


@pytest.mark.parametrize("impl", sdpa_impls.names())
def test_every_implementation_takes_torchs_broadcast_shapes_on_cuda(impl: str) -> None:
    """Rank 5 with K and V of batch 1 (expanded batch views, `callshape.to_bhle`): torch's answer at torch's shape,
    or an Unsupported naming why; never a library's crash on the stride-0 batch."""
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(2, 3, 4, 128, 64, device="cuda", dtype=torch.bfloat16, generator=g)
    k, v = (torch.randn(1, 3, 2, 128, 64, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    fn = sdpa_impls.get(impl)
    reasons = fn.unsupported_reasons(q, k, v, is_causal=True, enable_gqa=True)
    if reasons:
        pytest.skip("; ".join(reasons))
    mine = fn(q, k, v, is_causal=True, enable_gqa=True)
    theirs = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True,
                                                              enable_gqa=True)
    assert mine.shape == theirs.shape
    torch.testing.assert_close(mine.float(), theirs, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("impl", ["chunked", "fused"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_tiled_fp64_and_a_learned_bias_get_torchs_gradients_on_cuda(impl: str, dtype: torch.dtype,
                                                                    device: str = "cuda") -> None:
    """The tiled backward on CUDA: fp64 computed in fp64, and a (H, Lq, Lk) bias's gradient summed over the batch,
    against torch's fp64 answer (fp32 and bf16 within the correctness rule's floors)."""
    g = torch.Generator(device=device).manual_seed(1)
    shapes = ((2, 4, 300, 64), (2, 4, 700, 64), (2, 4, 700, 64), (4, 300, 700))
    base = [torch.randn(s, device=device, dtype=torch.float64, generator=g) for s in shapes]
    weights = torch.randn(2, 4, 300, 64, device=device, dtype=torch.float64, generator=g)
    grads = []
    for fn, dt in ((torch.nn.functional.scaled_dot_product_attention, torch.float64), (sdpa_impls.get(impl), dtype)):
        q, k, v, bias = (t.to(dt, copy=True).requires_grad_() for t in base)
        (fn(q, k, v, attn_mask=bias) * weights.to(dt)).sum().backward()
        grads.append([t.grad.double() for t in (q, k, v, bias)])  # type: ignore[union-attr]
    floor = {torch.float64: 1e-10, torch.float32: 2e-4, torch.bfloat16: 5e-2}[dtype]
    for got, want in zip(grads[1], grads[0]):
        assert (got - want).abs().max().item() <= floor * max(1.0, want.abs().max().item())
