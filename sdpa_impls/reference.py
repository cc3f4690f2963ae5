"""The float64 reference (written independently of torch's SDPA) and the tolerance rule every result is held to."""
from __future__ import annotations

import math

import torch

from .protocol import SDPAInputs, validate

# Absolute error floor per dtype, scaled by max(1, |reference|): what rounding alone can cost
# when the naive baseline happens to be lucky on a small case.
ERROR_FLOOR = {torch.float64: 1e-10, torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
REFERENCE_CHUNK_BYTES = 256 << 20  # bound the fp64 score block of one query chunk


def reference(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0, is_causal: bool = False,
              scale: float | None = None, enable_gqa: bool = False) -> torch.Tensor:
    """softmax(Q Kᵀ·scale + mask) V in float64, query rows in chunks; returns float64 (B, Hq, Lq, Ev).

    Differentiable (autograd through fp64 ops), so it also gives reference gradients.
    A row whose keys are all masked gives zeros.
    """
    inp = SDPAInputs(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    validate(inp)
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
        scores = torch.einsum("bkgie,bkje->bkgij", q5[..., i0:i1, :], k) * s
        if bias is not None:
            scores = scores + bias[..., i0:i1, :].double()
        scores = scores.masked_fill(~keep[..., i0:i1, :], -math.inf)
        top = scores.amax(dim=-1, keepdim=True).detach() if lk else scores.new_zeros(scores.shape[:-1] + (1,))
        top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
        w = torch.exp(scores - top)
        total = w.sum(dim=-1, keepdim=True)
        w = w / torch.where(total > 0, total, torch.ones_like(total))  # no keys, or every key masked: zeros
        outs.append(torch.einsum("bkgij,bkjd->bkgid", w, v))
    return torch.cat(outs, dim=3).flatten(1, 2)  # (B, Hq, Lq, Ev)


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
