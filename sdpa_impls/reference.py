"""The float64 reference (written independently of torch's SDPA) and the tolerance rule every result is held to."""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import torch

from .callshape import to_bhle
from .protocol import SDPAInputs, validate

# Absolute error floor per dtype, scaled by max(1, |reference|): what rounding alone can cost
# when the naive baseline happens to be lucky on a small case.
ERROR_FLOOR = {torch.float64: 1e-10, torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
# The most of the naive baseline's own error a tolerance counts without a witness, in floors (vetted_baseline).
BASELINE_LIMIT = 1.0
REFERENCE_CHUNK_BYTES = 256 << 20  # bound the fp64 score block of one query chunk


def reference(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0, is_causal: bool = False,
              scale: float | None = None, enable_gqa: bool = False,
              rounding: tuple[torch.dtype, torch.dtype] | None = None) -> torch.Tensor:
    """softmax(Q Kᵀ·scale + mask) V in float64, query rows in chunks; returns float64 (B, Hq, Lq, Ev), or the
    shape torch gives where q, k and v have another rank or broadcast (`callshape.to_bhle`).

    Differentiable (autograd through fp64 ops), so it also gives reference gradients.
    A row whose keys are all masked gives zeros. `rounding` (scores' dtype, weights' dtype): Q Kᵀ rounded to the
    first before the scale, the softmax weights to the second before they multiply V, all else in fp64: what a
    computation whose GEMMs return those dtypes costs at the least (vetted_baseline's witness).
    """
    call = to_bhle(query, key, value, attn_mask, enable_gqa)  # torch's shapes, as every implementation takes them
    inp = SDPAInputs(call.query, call.key, call.value, call.attn_mask, dropout_p, is_causal, scale, enable_gqa)
    call.checked(lambda: validate(inp))
    query, key, value, attn_mask = inp.query, inp.key, inp.value, inp.attn_mask
    if dropout_p:
        raise ValueError("sdpa: the reference is deterministic; dropout_p must be 0")
    q, k, v = query.double(), key.double(), value.double()
    b, hq, lq, _ = q.shape
    hkv, lk = k.shape[1], k.shape[2]
    if hkv == 0:  # no key/value heads: every query head sees no keys (the reshapes keep k and v in the graph)
        k, v = k.reshape(b, hq, 0, k.shape[-1]), v.reshape(b, hq, 0, v.shape[-1])
        hkv, lk = hq, 0
    g = hq // hkv  # GQA: query head h reads key/value head h // G; grouped views, K and V never repeated
    q5 = q.unflatten(1, (hkv, g))  # (B, Hkv, G, Lq, E)
    keep = torch.ones((lq, lk), dtype=torch.bool, device=q.device)
    if is_causal:
        keep = torch.tril(keep)
    bias = None
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            keep = keep & attn_mask
        else:  # kept in its own dtype; one query chunk at a time becomes fp64 (a per-head bias can be large)
            bias = attn_mask.expand(b, hq, lq, lk).unflatten(1, (hkv, g))
    keep = keep.expand(b, hq, lq, lk).unflatten(1, (hkv, g))  # (B, Hkv, G, Lq, Lk) views
    s = inp.softmax_scale
    rows = max(1, REFERENCE_CHUNK_BYTES // max(1, 8 * b * hq * lk))
    outs = []
    for i0 in range(0, lq, rows) or [0]:  # Lq = 0: one empty chunk, so the result still has its shape
        i1 = min(lq, i0 + rows)
        scores = torch.einsum("bkgie,bkje->bkgij", q5[..., i0:i1, :], k)
        if rounding is not None:
            scores = scores.to(rounding[0]).double()
        scores = scores * s
        if bias is not None:
            scores = scores + bias[..., i0:i1, :].double()
        scores = scores.masked_fill(~keep[..., i0:i1, :], -math.inf)
        top = scores.amax(dim=-1, keepdim=True).detach() if lk else scores.new_zeros(scores.shape[:-1] + (1,))
        top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
        w = torch.exp(scores - top)
        total = w.sum(dim=-1, keepdim=True)
        w = w / torch.where(total > 0, total, torch.ones_like(total))  # no keys, or every key masked: zeros
        if rounding is not None:
            w = w.to(rounding[1]).double()
        outs.append(torch.einsum("bkgij,bkjd->bkgid", w, v))
    return call.restore(torch.cat(outs, dim=3).flatten(1, 2))  # (B, Hq, Lq, Ev), at the caller's shape


def max_abs_error(result: torch.Tensor, expected: torch.Tensor) -> float:
    """Largest |result - expected| in float64 over the entries where expected is finite; inf when the result
    holds NaN or inf at any of them."""
    expected = expected.detach().double()
    diff = (result.detach().double() - expected).abs()
    worst = float(diff.max()) if diff.numel() else 0.0  # NaN propagates through max
    if math.isfinite(worst):
        return worst
    finite = torch.isfinite(expected)
    if bool((finite & ~torch.isfinite(diff)).any()):
        return math.inf
    return float(torch.where(finite, diff, 0.0).max())


def tolerance(baseline_error: float, dtype: torch.dtype, expected: torch.Tensor) -> float:
    """flash-attention's rule: at most 2× the naive implementation's error in the same dtype,
    plus a floor for rounding, scaled by the magnitude of the expected values. A non-finite baseline
    (naive gave NaN or inf) excuses nothing: the floor alone applies."""
    magnitude = max(1.0, float(expected.abs().max())) if expected.numel() else 1.0
    baseline = baseline_error if math.isfinite(baseline_error) else 0.0
    return 2.0 * baseline + ERROR_FLOOR[dtype] * magnitude


def naive_rounding(dtype: torch.dtype) -> tuple[torch.dtype, torch.dtype]:
    """Where naive's GEMMs round (impls.naive): scores in the input dtype (fp16's in fp32, past 65504 they would
    overflow), weights in the input dtype."""
    return (torch.float32 if dtype == torch.float16 else dtype), dtype


def vetted_baseline(errors: Mapping[str, float], expected: Mapping[str, torch.Tensor], dtype: torch.dtype,
                    rounded_error: Callable[[], float]) -> dict[str, float]:
    """naive's errors (by tensor name) as a tolerance may count them. naive is the baseline of everyone's limit,
    so its own error is vetted: counted whole up to BASELINE_LIMIT floors, and beyond that only for the output,
    where the fp64 computation rounded where naive's GEMMs round (`rounded_error()`, naive_rounding; called only
    then, once) is as far off, within 2× plus the floor: inputs whose scores are too large for the dtype. Any other
    error is cut to BASELINE_LIMIT floors, so a wrong naive fails its own check and loosens no one's limit.
    Measured (2-core Xeon, torch 2.13): on the smoke, ci, quick, cpu, llm and decode presets' cases and the masks
    preset's L 2048 ones, naive's error is at most 0.07 floors in fp32 and 0.63 in bf16 (0.31 in fp16, on two of
    the gpu preset's L 512 cases); on the correctness suite's inputs at most 0.75, but for scores of about 10⁴ in
    bf16: 35 floors, and the witness exactly as far off."""
    vetted, witness = {}, None
    for name, error in errors.items():
        floor = tolerance(0.0, dtype, expected[name])
        if not math.isfinite(error) or error <= BASELINE_LIMIT * floor:  # non-finite: tolerance excuses nothing
            vetted[name] = error
            continue
        if name == "out":
            witness = rounded_error() if witness is None else witness
            if error <= 2.0 * witness + floor:
                vetted[name] = error
                continue
        vetted[name] = BASELINE_LIMIT * floor
    return vetted
