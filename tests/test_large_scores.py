"""Gradients of rows whose scores are large (one key takes nearly all of the weight): where a row's keys fit one
key tile (every row of fused; chunked's up to its key tile), the tiled backward recomputes P as the forward's softmax
did, so the gradients are within 2x naive's own error against fp64 (flash-attention's factor, with no floor: at these
magnitudes the floor alone would excuse any error). Rows whose keys span several tiles recompute P = exp(S - lse), as
FlashAttention and torch's CPU flash kernel do, which carries lse's rounding."""
from __future__ import annotations

import pytest
import torch

import sdpa_impls
from sdpa_impls.impls.chunked import tile_size

CASES = {  # (B, H, L, E, factor on q): the scores reach about factor · sqrt(E) · 3
    "L 24, scores ~1e5": (2, 4, 24, 16, 1e4),  # one key tile in chunked; fused keeps the forward's P
    "L 1000, scores ~400": (1, 2, 1000, 16, 30.0),  # chunked: as many keys as its key tile holds on this CPU
    "L 1500, scores ~400": (1, 2, 1500, 16, 30.0),  # fused recomputes P
}
POINTS = [("chunked", "L 24, scores ~1e5"), ("chunked", "L 1000, scores ~400"), ("fused", "L 24, scores ~1e5"),
          ("fused", "L 1500, scores ~400")]


def grads(name: str, args: tuple[torch.Tensor, ...], weights: torch.Tensor, dtype: torch.dtype) -> list[torch.Tensor]:
    ins = [a.detach().to(dtype, copy=True).requires_grad_() for a in args]
    (sdpa_impls.get(name)(*ins) * weights.to(dtype)).sum().backward()
    return [i.grad.double() for i in ins]  # type: ignore[union-attr]


@pytest.mark.parametrize("name, case", POINTS)
def test_near_one_hot_rows_get_gradients_as_exact_as_naive(name: str, case: str) -> None:
    b, h, length, e, factor = CASES[case]
    if name == "chunked":  # every key in one key tile (1024 on a CPU with 1 MiB of L2 a core, fewer with less)
        length = min(length, tile_size(torch.device("cpu"), b * h)[1])
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, h, length, e, generator=gen) for _ in range(3))
    args = (q * factor, k, v)  # fp32 values: the fp64 call computes exactly what the fp32 ones are given
    weights = torch.randn(b, h, length, e, generator=torch.Generator().manual_seed(1))
    exact = grads("naive", args, weights, torch.float64)
    naive, mine = grads("naive", args, weights, torch.float32), grads(name, args, weights, torch.float32)
    for label, want, base, got in zip("qkv", exact, naive, mine):
        base_error, error = (base - want).abs().max().item(), (got - want).abs().max().item()
        assert error <= 2 * base_error, f"d{label}: {error:.3g} against naive's {base_error:.3g}"
