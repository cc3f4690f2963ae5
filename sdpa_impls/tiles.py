"""Grouped-head views, mask tiles and cache-derived tile sizes shared by the plain-PyTorch implementations."""
from __future__ import annotations

import functools
from pathlib import Path

import torch

from .protocol import SDPAInputs

NEG_INF = float("-inf")


def grouped(inp: SDPAInputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Views that make GQA free: the G query heads that share a key/value head are grouped together.

    query -> (B, Hkv, G, Lq, E), key -> (B, Hkv, Lk, E), value -> (B, Hkv, Lk, Ev),
    mask -> (B, Hkv, G, Lq, Lk) (expanded view, no memory), where G = Hq // Hkv.
    Multiply grouped tiles with `gmm`, never by broadcasting K over G (torch would copy K).
    """
    q, k, v = inp.query, inp.key, inp.value
    b, hq, lq, _ = q.shape
    hkv, lk = k.shape[1], k.shape[2]
    q5 = q.unflatten(1, (hkv, hq // hkv))  # (B, Hkv, G, Lq, E)
    mask5 = None
    if inp.attn_mask is not None:
        mask5 = inp.attn_mask.expand(b, hq, lq, lk).unflatten(1, (hkv, hq // hkv))
    return q5, k, v, mask5


def gmm(a5: torch.Tensor, b4: torch.Tensor) -> torch.Tensor:
    """(B, Hkv, G, m, n) @ (B, Hkv, n, p) -> (B, Hkv, G, m, p), folding G into the rows of one GEMM."""
    b, hkv, g, m, n = a5.shape
    return (a5.reshape(b, hkv, g * m, n) @ b4).view(b, hkv, g, m, b4.shape[-1])


def gmm_t(a5: torch.Tensor, c5: torch.Tensor) -> torch.Tensor:
    """Σ_g a5[g]ᵀ @ c5[g]: (B, Hkv, G, m, n), (B, Hkv, G, m, p) -> (B, Hkv, n, p); the GQA sum of dk and dv."""
    b, hkv, g, m, n = a5.shape
    return a5.reshape(b, hkv, g * m, n).transpose(-2, -1) @ c5.reshape(b, hkv, g * m, c5.shape[-1])


def causal_keep(i0: int, i1: int, j0: int, j1: int, device: torch.device) -> torch.Tensor:
    """Top-left causal pattern of the tile rows i0:i1, columns j0:j1 (True = attend)."""
    rows = torch.arange(i0, i1, device=device)[:, None]
    cols = torch.arange(j0, j1, device=device)[None, :]
    return rows >= cols


def mask_scores_(s: torch.Tensor, mask5: torch.Tensor | None, is_causal: bool,
                 i0: int, i1: int, j0: int, j1: int) -> torch.Tensor:
    """Apply the user mask and the causal pattern in place to the fp32 score tile s[..., i0:i1, j0:j1]."""
    if mask5 is not None:
        m = mask5[..., i0:i1, j0:j1]
        if m.dtype == torch.bool:
            s.masked_fill_(~m, NEG_INF)
        else:
            s.add_(m)
    if is_causal and j1 - 1 > i0:  # tiles entirely on or below the diagonal need no causal mask
        s.masked_fill_(~causal_keep(i0, i1, j0, j1, s.device), NEG_INF)
    return s


def causal_key_end(is_causal: bool, i1: int, lk: int) -> int:
    """Keys past this index are masked for every query row < i1 (top-left causal), so they can be skipped."""
    return min(lk, i1) if is_causal else lk


@functools.lru_cache(maxsize=None)
def l2_cache_bytes() -> int:
    """Per-core L2 size from sysfs; 1 MiB when it cannot be read."""
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            if (index / "level").read_text().strip() == "2":
                text = (index / "size").read_text().strip().upper()
                unit = {"K": 1024, "M": 1024 * 1024}.get(text[-1], 1)
                return int(text.rstrip("KM")) * unit
        except (OSError, ValueError):
            continue
    return 1 << 20


def key_tile(device: torch.device, dtype: torch.dtype, e: int, ev: int, q_tile: int) -> int:
    """Key-tile length: on CPU, the K and V tiles plus one fp32 score tile fill about half of L2.

    Half of L2 leaves room for the query tile and the output accumulator; the result is
    rounded down to a multiple of 64 (AVX-512 GEMM micro-kernels work on multiples of 16/32)
    and kept in [64, 2048]. On CUDA the tile only bounds memory and launch count: 1024.
    """
    if device.type != "cpu":
        return 1024
    itemsize = torch.empty((), dtype=dtype).element_size()
    per_key = (e + ev) * itemsize + q_tile * 4  # one key row of K and V, one fp32 score column
    tile = (l2_cache_bytes() // 2) // per_key
    return int(max(64, min(2048, tile // 64 * 64)))
