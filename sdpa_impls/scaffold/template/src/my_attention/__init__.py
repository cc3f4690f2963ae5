"""my_attention: scaled dot-product attention as an sdpa-bench plug-in. Replace `forward` with your kernel.

`sdpa-bench list` shows it once the package is installed (`pip install -e .`): it is declared as an entry point
of the group `sdpa_impls` in pyproject.toml, which is how sdpa-bench finds it; no registration is needed here.
"""
from __future__ import annotations

import torch

from sdpa_impls import Implementation, SDPAInputs, Support, empty_attention


class MyAttention(Implementation):
    name = "my_attention"  # the entry point's name in pyproject.toml
    description = "softmax(Q Kᵀ · scale + mask) V in plain PyTorch, fp32 scores"
    # what it runs, as data: calls outside it are skipped with the reason, never run
    # (fields: devices, dtypes, max_head_dim, head_dim_multiple, masks, dropout, backward)
    support = Support(devices=frozenset({"cpu", "cuda"}),
                      dtypes=frozenset({torch.float32, torch.float16, torch.bfloat16}))

    def forward(self, inp: SDPAInputs) -> torch.Tensor:
        """Called only on validated, supported inputs, with the arguments of torch's scaled_dot_product_attention."""
        if inp.is_empty:  # no keys or no output: zeros, as torch answers
            return empty_attention(inp)
        q, k, v = inp.query, inp.key, inp.value  # (B, Hq, Lq, E), (B, Hkv, Lk, E), (B, Hkv, Lk, Ev)
        if k.shape[1] != q.shape[1]:  # GQA: each key/value head serves Hq / Hkv query heads
            k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
            v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
        scores = (q.float() @ k.float().transpose(-2, -1)) * inp.softmax_scale  # (B, Hq, Lq, Lk) in fp32
        lq, lk = scores.shape[-2:]
        if inp.is_causal:  # top-left aligned, as torch
            keep = torch.ones(lq, lk, dtype=torch.bool, device=q.device).tril()
            scores = scores.masked_fill(~keep, float("-inf"))
        if inp.attn_mask is not None:  # bool: True attends; float: added to the scores
            mask = inp.attn_mask
            scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask.float()
        rows = torch.isfinite(scores).any(dim=-1, keepdim=True)  # False where every key is masked
        p = torch.softmax(scores.masked_fill(~rows, 0.0), dim=-1) * rows  # such rows give zeros, never NaN
        return (p @ v.float()).to(q.dtype)  # (B, Hq, Lq, Ev)
