"""xformers: xformers.ops.memory_efficient_attention (BMHK layout); an optional dependency, CUDA only."""
from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType

import torch

from ..protocol import Implementation, SDPAInputs, Support
from ..registry import register


@functools.lru_cache(maxsize=None)
def _fmha() -> tuple[ModuleType | None, str]:
    """Import xformers' fmha lazily (it is slow and noisy); the error text when it is missing."""
    try:
        from xformers.ops import fmha
    except Exception as exc:  # ImportError, or a build that does not match this torch
        if isinstance(exc, ModuleNotFoundError) and exc.name and exc.name.startswith("xformers"):
            return None, "xformers is not installed (pip install xformers)"
        return None, f"xformers failed to import: {type(exc).__name__}: {exc}"
    return fmha, ""


def _bias(inp: SDPAInputs, fmha: ModuleType) -> object | None:
    """xformers' attention bias: LowerTriangularMask for plain causal, else a dense additive tensor."""
    q, k = inp.query, inp.key
    if inp.attn_mask is None:
        return fmha.attn_bias.LowerTriangularMask() if inp.is_causal else None
    b, hq, lq, lk = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    padded = (lk + 7) // 8 * 8  # xformers wants the bias rows 8-aligned in memory
    bias = torch.zeros((b, hq, lq, padded), dtype=q.dtype, device=q.device)[..., :lk]
    m = inp.attn_mask.expand(b, hq, lq, lk)
    if m.dtype == torch.bool:
        bias.masked_fill_(~m, float("-inf"))
    else:
        bias.add_(m.to(q.dtype))
    if inp.is_causal:
        bias.masked_fill_(torch.ones(lq, lk, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return bias


def _layout(inp: SDPAInputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(B, H, L, E) views -> BMHK, or BMGHK when K/V have fewer heads (GQA)."""
    q, k, v = inp.query.transpose(1, 2), inp.key.transpose(1, 2), inp.value.transpose(1, 2)  # (B, L, H, E)
    hq, hkv = q.shape[2], k.shape[2]
    if hq == hkv:
        return q, k, v
    g = hq // hkv
    q = q.unflatten(2, (hkv, g))  # (B, Lq, Hkv, G, E)
    k = k.unsqueeze(3).expand(-1, -1, -1, g, -1)
    v = v.unsqueeze(3).expand(-1, -1, -1, g, -1)
    return q, k, v


@register
class XFormers(Implementation):
    name = "xformers"
    description = "xformers.ops.memory_efficient_attention (optional dependency; no CPU kernels)"
    support = Support(devices=frozenset({"cuda"}), dropout=True)

    def not_supported_reasons(self, inp: SDPAInputs) -> list[str]:
        reasons = super().not_supported_reasons(inp)
        fmha, missing = _fmha()
        if inp.is_empty:  # never asked: xformers' kernels are not known to take them (Hkv = 0 would divide by 0)
            reasons.append("a dimension of size 0 (B, Hq, Hkv, Lq, Lk or Ev): xformers is not called on empty inputs")
        return reasons if fmha is not None else [missing, *reasons]  # "not installed" first, wherever it runs

    def library_reasons(self, inp: SDPAInputs) -> list[str]:
        fmha, _ = _fmha()
        if fmha is None or inp.is_empty:
            return []  # both said by not_supported_reasons
        q, k, v = _layout(inp)
        try:
            x_inp = fmha.Inputs(query=q, key=k, value=v, attn_bias=_bias(inp, fmha), p=inp.dropout_p,
                                scale=inp.scale)
            fmha._dispatch_fw(x_inp, inp.needs_grad)
            if inp.needs_grad:
                fmha._dispatch_bw(x_inp)
        except NotImplementedError as exc:
            return [line.strip() for line in str(exc).splitlines() if line.strip()]
        except (AttributeError, TypeError):  # a newer xformers moved its private dispatch: let the call decide
            return []
        return []

    def prepare_inputs(self, inp: SDPAInputs) -> Callable[[], torch.Tensor]:
        fmha, _ = _fmha()
        q, k, v = _layout(inp)
        bias = _bias(inp, fmha)
        b, hq, lq, ev = inp.query.shape[0], inp.query.shape[1], inp.query.shape[2], inp.value.shape[-1]
        p, scale = inp.dropout_p, inp.scale

        def call() -> torch.Tensor:
            out = fmha.memory_efficient_attention(q, k, v, attn_bias=bias, p=p, scale=scale)
            return out.reshape(b, lq, hq, ev).transpose(1, 2)  # back to (B, H, L, Ev)

        return call

    def forward(self, inp: SDPAInputs) -> torch.Tensor:
        return self.prepare_inputs(inp)()
