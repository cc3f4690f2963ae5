"""The dtype a half-precision call of the tiled implementations (chunked, fused) computes in, decided in
`prepare_inputs` (outside any timed call):

    in_fp32(inp, keys_summed) -> (widen?, what it computes in, for the point's `op`)
    fp16_in_fp32(inp, keys_summed) -> bool      # fp16: always on the CPU, on CUDA where it could overflow
    fp16_may_overflow(inp, keys_summed) -> bool

bf16 follows this CPU's GEMMs (`budget.bf16_compute`). A widened call runs in fp32 and is rounded once at the end
(`online_softmax.tiled_attention`).
"""
from __future__ import annotations

import torch

from ...protocol import SDPAInputs
from .budget import bf16_compute

FP16_MAX = 65504.0


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
