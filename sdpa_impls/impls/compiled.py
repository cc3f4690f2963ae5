"""compiled: torch.compile of naive's textbook math, what a user gets who writes attention by hand and compiles it."""
from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from ..compilation import compiler_reasons, declare_compiles
from ..masks import kept_for_backward
from ..protocol import WITH_FP64, Implementation, SDPAInputs, Support, empty_attention
from ..registry import register
from ..torchver import COMPILATION, needs_torch
from .naive import Naive

_NAIVE = Naive()  # the same code naive runs eagerly (not a second registration)


def textbook(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None,
             is_causal: bool, scale: float | None, enable_gqa: bool) -> torch.Tensor:
    """naive's forward on one call: the (Lq, Lk) scores, masked, softmax in fp32, times V."""
    return _NAIVE.forward(SDPAInputs(query, key, value, attn_mask, 0.0, is_causal, scale, enable_gqa))


@functools.lru_cache(maxsize=None)
def compiled_textbook() -> Callable[..., torch.Tensor]:
    """`textbook` compiled once per process, whole-graph (`fullgraph`: a graph break would be an error, not a
    silent half-eager run), for static shapes like `flex`."""
    return torch.compile(textbook, dynamic=False, fullgraph=True)


@register
class Compiled(Implementation):
    name = "compiled"
    description = "torch.compile(naive's math), inductor's default mode; compiled before the first sample"
    support = Support(dtypes=WITH_FP64, mask_grad=True)  # no dropout: random numbers under compilation are not naive's
    compiles = True  # its prepared closures compile on their first call (sdpa_impls.compilation)

    def library_reasons(self, inp: SDPAInputs) -> list[str]:
        if inp.is_empty:
            return []  # an empty call compiles nothing
        return needs_torch(*COMPILATION) or compiler_reasons(inp.query.device)

    def prepare_inputs(self, inp: SDPAInputs) -> Callable[[], torch.Tensor]:
        if inp.is_empty:
            return lambda: empty_attention(inp)
        fn = compiled_textbook()
        mask = kept_for_backward(inp.attn_mask) if inp.needs_grad else inp.attn_mask
        args = (inp.query, inp.key, inp.value, mask, inp.is_causal, inp.scale, inp.enable_gqa)
        return declare_compiles(lambda: fn(*args))

    def forward(self, inp: SDPAInputs) -> torch.Tensor:
        return self.prepare_inputs(inp)()
