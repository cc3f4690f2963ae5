"""naive: the textbook — materialize all scores, softmax in fp32, multiply by V; the error baseline."""
from __future__ import annotations

import torch

from ..protocol import WITH_FP64, Implementation, SDPAInputs, Support, empty_attention
from ..registry import register
from ._tiled.tiles import gmm, grouped, mask_scores_


@register
class Naive(Implementation):
    name = "naive"
    description = "materializes the (Lq, Lk) scores; softmax in fp32, GEMMs in the input dtype (fp16 scores: fp32)"
    support = Support(dtypes=WITH_FP64, dropout=True, mask_grad=True)

    def forward(self, inp: SDPAInputs) -> torch.Tensor:
        if inp.is_empty:
            return empty_attention(inp)
        q5, k4, v4, mask5 = grouped(inp)
        lq, lk = q5.shape[-2], k4.shape[-2]
        if q5.dtype == torch.float16:  # fp16 ends at 65504, where large inputs' scores do not: form them in fp32
            q5, k4 = q5.float(), k4.float()
        scores = gmm(q5, k4.transpose(-2, -1))  # (B, Hkv, G, Lq, Lk), softmax in fp32 (fp64 stays fp64)
        scores = scores.to(torch.promote_types(scores.dtype, torch.float32)) * inp.softmax_scale
        scores = mask_scores_(scores, mask5, inp.is_causal, 0, lq, 0, lk)
        row_max = scores.amax(dim=-1, keepdim=True).detach()
        # a fully masked row (max -inf) stays all zeros below; a +inf score makes its row NaN, as torch's softmax does
        row_max = torch.where(row_max == float("-inf"), torch.zeros_like(row_max), row_max)
        p = torch.exp(scores - row_max)
        denom = p.sum(dim=-1, keepdim=True)
        p = p / torch.where(denom == 0, torch.ones_like(denom), denom)  # a fully masked row stays all zeros
        if inp.dropout_p > 0:
            p = torch.nn.functional.dropout(p, inp.dropout_p)
        out = gmm(p.to(v4.dtype), v4)  # (B, Hkv, G, Lq, Ev)
        return out.flatten(1, 2)  # (B, Hq, Lq, Ev)
