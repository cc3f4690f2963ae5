"""The dtype a half-precision call of the tiled implementations (chunked, fused) computes in, decided in
`prepare_inputs` (outside any timed call):

    in_fp32(inp, keys_summed) -> (widen?, what it computes in, for the point's `op`)
    fp16_in_fp32(inp, keys_summed) -> bool      # fp16: always on the CPU, on CUDA where it could overflow
    fp16_may_overflow(inp, keys_summed) -> bool
    scores_may_be_inf(inp) -> bool               # whether a row's scores could all be -inf from the data (CPU)
    unshifted_exp(inp, fp32_compute) -> bool     # fused: P = exp(S) with no row max, where the scores are bounded
    unshifted_base(device) -> ExpBase           # ... computed as exp(S) or as exp2(S · log2 e), this CPU's faster
    unshifted_tile(device, b, hkv, g, lq, lk, itemsize) -> (rows, kv heads, keys per block)  # ... with no key to skip
    warm_exp(device)                             # the process's first parallel exp, outside any timed call
    check_settings()                             # SDPA_BENCH_CPU_BF16 and SDPA_BENCH_CPU_EXP read, or ValueError

bf16 follows this CPU's GEMMs (`budget.bf16_compute`). A widened call runs in fp32 and is rounded once at the end
(`backward.tiled_attention`).
"""
from __future__ import annotations

import functools
import math
import os
import time
from dataclasses import dataclass

import torch

from ...protocol import SDPAInputs
from .budget import BF16_ENV, CpuTiling, bf16_compute, choice, fit_rows, tiling_for

FP16_MAX = 65504.0
# |score| at most this for an unshifted exp: exp(S) then lies in [4e-18, 3e17], so a row's largest term is a normal
# fp32 (or bf16) number, and so is every term within e^-47 of it (normals reach e^-87): nothing the row's sum can
# resolve underflows, and no term overflows
SCORE_BOUND = 40.0
# |score| below this: no score overflows, and a float mask's finite value (fp32's lowest, as some models mask) plus a
# score never rounds to -inf (the spacing of floats near 3.4e38 is 2e31, of bf16's 1.3e36)
SCORE_SAFE = 1e30
# log of the largest row sum of P V (Lk · e^bound · max|v|) an unshifted exp allows: e^80 = 5.5e34, e^8 under fp32's
# largest number
LOG_SUM_BOUND = 80.0
UNSHIFTED_MIN_KEYS = 512  # a drop-in call pays the bound: with 128, 256, 512 keys 1.24, 1.06, 0.93 × the softmax path
# The unshifted exp as exp2 of scores scaled by log2 e (folded into the score GEMM's alpha): the same P, and torch's
# fp32 exp2 runs at 2.6-3.5 G/s a thread on the 2-vCPU EPYC (AVX-512 BF16) where its exp runs at 1.0-1.2 and the
# softmax at 1.5 (so there the unshifted path with exp was slower than the softmax: fp32 fused at 1.29-1.46× torch's
# SDPA). On the AMX Xeon exp ran at 6 G/s a core. The two rates are measured once per process (`exp_rates`), and
# exp2 is taken only at EXP2_FASTER × exp's rate or more, so a CPU where they are close keeps exp in every process.
# SDPA_BENCH_CPU_EXP = "exp" or "exp2" sets the choice (another CPU's path, tested on this one).
EXP2_FASTER = 1.25
EXP_ENV = "SDPA_BENCH_CPU_EXP"
LOG2_E = 1.4426950408889634
EXP_PROBE = (64, 2048)  # rows × keys of one head's fp32 score tile: 512 KiB, in a core's L2
KEY_STEP = 64  # keys per step of an unshifted tile's key blocks (the tile map's key block)


def fp16_in_fp32(inp: SDPAInputs, keys_summed: int) -> bool:
    """Whether an fp16 call computes in fp32 (and is rounded once at the end).

    fp16 ends at 65504, which scores and tile sums of P V reach with inputs whose answer is finite (every
    element 256, E = 80). CPU: always, since its fp16 GEMMs have no fast kernels and fp32 is faster there.
    CUDA: only when a bound from the inputs' largest magnitudes says a score (scale · E · max|q| · max|k|, plus
    a float mask) or a sum of `keys_summed` unnormalized P V terms (max|v| each) could pass half of 65504, so
    tensor cores keep the usual case. The bound costs one reduction and one sync: decide it outside a timed
    closure (`prepare_inputs`). The backward's dP = dO Vᵀ depends on dO and is not bounded here.
    """
    if inp.query.dtype != torch.float16 or inp.is_empty:
        return False
    return inp.query.device.type == "cpu" or fp16_may_overflow(inp, keys_summed)


def in_fp32(inp: SDPAInputs, keys_summed: int) -> tuple[bool, str]:
    """Whether a half-precision call computes in fp32 (inputs widened once, the answer rounded once), and what it
    computes in, for the benchmark's record (the closure's `op`; "" for fp32 and fp64 calls): fp16 as `fp16_in_fp32`
    says, bf16 as this device's GEMMs say (`budget.bf16_compute`). Decide it in `prepare_inputs`."""
    if inp.is_empty or inp.query.dtype in (torch.float32, torch.float64):
        return False, ""
    if torch.tensor(inp.softmax_scale, dtype=torch.float32).item() == 0.0:  # a GEMM's alpha of 0: torch's bf16
        return True, "fp32 compute (scale 0)"  # baddbmm then leaves its output as it was (uninitialised here)
    if inp.query.dtype == torch.float16:
        widen = fp16_in_fp32(inp, keys_summed)
        return widen, "fp32 compute" if widen else "fp16 compute"
    found = bf16_compute(inp.query.device)
    return found.widen, "fp32 compute" if found.widen else "bf16 compute"


def fp16_may_overflow(inp: SDPAInputs, keys_summed: int) -> bool:
    """The bound of `fp16_in_fp32`: whether a score or a sum of `keys_summed` P V terms could pass 65504 / 2."""
    tops = [inp.query.abs().amax(), inp.key.abs().amax(), inp.value.abs().amax()]
    m = inp.attn_mask
    tops.append(m.abs().amax() if m is not None and m.is_floating_point() and m.numel() else tops[0] * 0)
    q, k, v, bias = torch.stack(tops).float().tolist()
    score = abs(inp.softmax_scale) * inp.query.shape[-1] * q * k + bias
    return not max(score, keys_summed * v) < FP16_MAX / 2


def scores_may_be_inf(inp: SDPAInputs) -> bool:
    """Whether a row of scores could be -inf at every key from the data, not from a mask (torch's SDPA answers such a
    row 0, a softmax gives 0/0): q or k not finite, or |scale| · E · max|q| · max|k| at SCORE_SAFE or more. Below it
    no score is ±inf, and none plus a float mask's finite value (down to the dtype's lowest) rounds to -inf. One
    aminmax of q and of k, read in `prepare_inputs`, outside a timed call; on CUDA that read would wait for the
    device, so there it is False (such rows stay NaN: docs/explanation/tiling.md)."""
    if inp.query.device.type != "cpu" or inp.is_empty or not inp.query.numel() or not inp.key.numel():
        return False  # E = 0: every score is 0
    q_low, q_high = torch.aminmax(inp.query)
    k_low, k_high = torch.aminmax(inp.key)
    q1, q2, k1, k2 = torch.stack([q_low, q_high, k_low, k_high]).double().abs().tolist()
    return not abs(inp.softmax_scale) * inp.query.shape[-1] * max(q1, q2) * max(k1, k2) < SCORE_SAFE  # NaN: True


def unshifted_exp(inp: SDPAInputs, fp32_compute: bool) -> bool:
    """Whether fused's inference forward may take P = exp(S) with no row max subtracted (the policy's
    `UNSHIFTED_EXP`; row sums from the P V GEMM, O divided by them once): for fp32 compute with no float mask and
    at least UNSHIFTED_MIN_KEYS keys, where Cauchy–Schwarz bounds every score, |scale · q·k| <= |scale| ·
    max‖q‖ · max‖k‖, by SCORE_BOUND, and a row's sums by LOG_SUM_BOUND. A softmax is the same for any shift; the
    max only keeps exp in range, which the bound already does. The bound reads Q, K and V once: decide it in
    `prepare_inputs`, outside a timed call."""
    if (not fp32_compute or inp.is_empty or inp.mask_kind == "float" or inp.key.shape[-2] < UNSHIFTED_MIN_KEYS
            or not choice(inp.query.device, "UNSHIFTED_EXP")):
        return False
    low, high = torch.aminmax(inp.value)
    q, k, v_low, v_high = torch.stack([_largest_norm(inp.query), _largest_norm(inp.key), low.float(),
                                       high.float()]).tolist()
    v = max(-v_low, v_high)
    bound = abs(inp.softmax_scale) * q * k
    if not bound <= SCORE_BOUND:  # also false for inf and NaN
        return False
    return math.log(inp.key.shape[-2]) + bound + math.log(max(v, 1e-30)) < LOG_SUM_BOUND


def unshifted_tile(device: torch.device, b: int, hkv: int, g: int, lq: int, lk: int, itemsize: int
                   ) -> tuple[int, int, int]:
    """(query rows, kv heads, keys per block) of fused's unshifted inference tiles with no key to skip (a CPU
    policy's): the rows first, as many as `FUSED_ROWS_WHOLE` allows, then keys in steps of 64 to fill the score-tile
    budget, then heads. Without a row max each key block's exp, row sums and P V stand alone, so a long row need not
    shrink the rows to fit its keys: on the 2-vCPU EPYC (1 MiB L2 a core) fp32 at L 4096, E 128 took 0.98-1.07 ×
    torch's SDPA with 512 rows × 512 keys against 1.15-1.38 with the 128 or 256 rows that fit whole rows of keys.
    Where 512 rows of every key fit the budget (the AMX Xeon at L 2048), this is the whole-row tile."""
    policy = tiling_for(device)
    assert isinstance(policy, CpuTiling), "only a CPU policy takes the unshifted exp (UNSHIFTED_EXP)"
    rows = min(lq, policy.FUSED_ROWS_WHOLE[1])
    keys = min(lk, fit_rows(policy.score_tile_bytes, policy.threads * g * rows * itemsize, KEY_STEP, lk, KEY_STEP))
    return rows, policy.group_heads(b * hkv, rows * g * keys * itemsize), keys


@dataclass(frozen=True)
class ExpBase:
    """How fused's unshifted exp computes P on this device (`log2`: exp2 of log2 e-scaled scores), and why (the
    point's `op`, `sdpa-bench list`)."""

    log2: bool
    reason: str


def unshifted_base(device: torch.device) -> ExpBase:
    """exp2 on a CPU whose fp32 exp2 runs at EXP2_FASTER × its exp's rate or more (or as SDPA_BENCH_CPU_EXP says),
    else exp; exp on CUDA, whose plan takes no unshifted exp. ValueError for another value of that variable."""
    if device.type != "cpu":
        return ExpBase(False, "exp")
    forced = os.environ.get(EXP_ENV, "").strip().lower()
    if forced:
        if forced not in ("exp", "exp2"):
            raise ValueError(f"{EXP_ENV} should be exp or exp2 (or unset), got {forced!r}")
        return ExpBase(forced == "exp2", f"{forced} ({EXP_ENV}={forced})")
    rates = exp_rates()
    log2 = rates["exp2"] >= EXP2_FASTER * rates["exp"]
    return ExpBase(log2, f"{'exp2' if log2 else 'exp'} (this CPU's fp32 exp {rates['exp']:.2f} G/s a thread, "
                         f"exp2 {rates['exp2']:.2f})")


def settings() -> dict[str, str]:
    """SDPA_BENCH_CPU_BF16 and SDPA_BENCH_CPU_EXP where set: the choices they fix instead of this CPU's measured
    ones (a run keeps them with each start and resume, so a sweep resumed under another says so)."""
    return {name: os.environ[name].strip().lower() for name in (BF16_ENV, EXP_ENV) if os.environ.get(name, "").strip()}


def check_settings() -> None:
    """Read SDPA_BENCH_CPU_BF16 and SDPA_BENCH_CPU_EXP as a call would, where they are set (measuring nothing):
    ValueError naming a value neither takes, so a run can say so before its first point."""
    cpu = torch.device("cpu")
    if os.environ.get(BF16_ENV, "").strip():
        bf16_compute(cpu)
    if os.environ.get(EXP_ENV, "").strip():
        unshifted_base(cpu)


@functools.lru_cache(maxsize=None)
def exp_rates() -> dict[str, float]:
    """G elements/s of one thread's fp32 exp and exp2 over one score tile (EXP_PROBE, scores in [-8, 8]): the best of
    five calls of each, alternating, after two warm-up calls each, timed by the thread's CPU time as
    `budget.gemm_rates` is, for the same reason. Once per process, a few milliseconds."""
    src = torch.linspace(-8.0, 8.0, EXP_PROBE[0] * EXP_PROBE[1]).view(EXP_PROBE)
    dst = torch.empty_like(src)
    ops = {"exp": torch.exp, "exp2": torch.exp2}
    best = dict.fromkeys(ops, float("inf"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for repeat in range(7):
            for name, op in ops.items():
                start = time.thread_time()
                op(src, out=dst)
                if repeat >= 2:
                    best[name] = min(best[name], time.thread_time() - start)
    finally:
        torch.set_num_threads(threads)
    return {name: src.numel() / max(t, 1e-9) / 1e9 for name, t in best.items()}


def warm_exp(device: torch.device) -> None:
    """Run this process's first parallel fp32 `exp_` and `exp2_` on the CPU here (once per thread count), not in a
    call whose answer counts. On the AMX Xeon with torch 2.13.0+cpu, the first `exp_` of a process over a tensor
    split between threads came out up to 1.5e-4 from exp (relative) in 1 of 20 fresh processes and 4 of 20 after a
    torch SDPA call, every later call within 6e-8; with one such call made first, the next was within 6e-8 in 60 of
    60. The tiled implementations' tiles take exp_, and fused's unshifted tiles exp2_ where this CPU's is faster
    (docs/explanation/tiling.md)."""
    if device.type == "cpu":
        _warm_exp(torch.get_num_threads())


@functools.lru_cache(maxsize=None)
def _warm_exp(threads: int) -> None:
    torch.zeros(threads * 65536).exp_()  # 65536 elements a thread: twice torch's grain of a parallel loop
    torch.zeros(threads * 65536).exp2_()  # the same for the unshifted exp's other base


def _largest_norm(x: torch.Tensor) -> torch.Tensor:
    """max over rows of ‖x‖ (last dim), in fp32 (no GEMM: a call's GEMMs are its attention's)."""
    return torch.linalg.vector_norm(x if x.dtype == torch.float32 else x.float(), dim=-1).amax()
