"""Plug-ins whose modules also use `@register`, as a class copied from a built-in would:
- test_registered: the class its entry point names registers itself on import; it must load as itself;
- test_impostor: the module registers another class under the entry point's name; that must be a reason."""
from __future__ import annotations

import torch

import sdpa_impls
from sdpa_impls import Implementation, SDPAInputs, Support, register


@register
class Registered(Implementation):
    name = "test_registered"
    description = "naive's answer, registered with @register as well as by its entry point"
    support = Support()

    def forward(self, inp: SDPAInputs) -> torch.Tensor:
        return sdpa_impls.get("naive")(inp.query, inp.key, inp.value, inp.attn_mask, 0.0, inp.is_causal, inp.scale,
                                       inp.enable_gqa)


@register
class Squatter(Registered):
    name = "test_impostor"


class Impostor(Registered):
    name = "test_impostor"
