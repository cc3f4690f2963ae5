"""The dtype a half-precision call of the tiled implementations (chunked, fused) computes in, decided in
`prepare_inputs` (outside any timed call):

    in_fp32(inp, keys_summed) -> (widen?, what it computes in, for the point's `op`)
    fp16_in_fp32(inp, keys_summed) -> bool      # fp16: always on the CPU, on CUDA where it could overflow
    fp16_may_overflow(inp, keys_summed) -> bool
    unshifted_exp(inp, fp32_compute) -> bool     # fused: P = exp(S) with no row max, where the scores are bounded
    warm_exp(device)                             # the process's first parallel exp, outside any timed call

bf16 follows this CPU's GEMMs (`budget.bf16_compute`). A widened call runs in fp32 and is rounded once at the end
(`online_softmax.tiled_attention`).
"""
from __future__ import annotations

import functools
import math

import torch

from ...protocol import SDPAInputs
from .budget import bf16_compute, choice

FP16_MAX = 65504.0
# |score| at most this for an unshifted exp: exp(S) then lies in [4e-18, 3e17], so a row's largest term is a normal
# fp32 (or bf16) number, and so is every term within e^-47 of it (normals reach e^-87): nothing the row's sum can
# resolve underflows, and no term overflows
SCORE_BOUND = 40.0
# log of the largest row sum of P V (Lk · e^bound · max|v|) an unshifted exp allows: e^80 = 5.5e34, e^8 under fp32's
# largest number
LOG_SUM_BOUND = 80.0
UNSHIFTED_MIN_KEYS = 512  # a drop-in call pays the bound: with 128, 256, 512 keys 1.24, 1.06, 0.93 × the softmax path


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
    computes in, for the benchmark's record (the closure's `op`; "" for fp32 calls): fp16 as `fp16_in_fp32`
    says, bf16 as this device's GEMMs say (`budget.bf16_compute`). Decide it in `prepare_inputs`."""
    if inp.is_empty or inp.query.dtype == torch.float32:
        return False, ""
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


def warm_exp(device: torch.device) -> None:
    """Run this process's first parallel fp32 `exp_` on the CPU here (once per thread count), not in a call whose
    answer counts. On the AMX Xeon with torch 2.13.0+cpu, the first `exp_` of a process over a tensor split between
    threads came out up to 1.5e-4 from exp (relative) in 1 of 20 fresh processes and 4 of 20 after a torch SDPA
    call, every later call within 6e-8; with one such call made first, the next was within 6e-8 in 60 of 60. The
    tiled implementations' tiles take exp_ (docs/explanation/tiling.md)."""
    if device.type == "cpu":
        _warm_exp(torch.get_num_threads())


@functools.lru_cache(maxsize=None)
def _warm_exp(threads: int) -> None:
    torch.zeros(threads * 65536).exp_()  # 65536 elements a thread: twice torch's grain of a parallel loop


def _largest_norm(x: torch.Tensor) -> torch.Tensor:
    """max over rows of ‖x‖ (last dim), in fp32 (no GEMM: a call's GEMMs are its attention's)."""
    return torch.linalg.vector_norm(x if x.dtype == torch.float32 else x.float(), dim=-1).amax()
