"""flash_attn4: FlashAttention-4, `flash_attn.cute.flash_attn_func` of the flash-attn-4 package; optional, CUDA only.

The same layout and mask mapping as FlashAttention-2 (flash_attn.py), with FlashAttention-4's own conventions
(`fa4_kwargs`). Its kernels are compiled by CuTe DSL on the first call for each shape, dtype and mask: that call is
the closure's compile step (`sdpa_impls.compilation`, reported as compile_s), never a sample. FlashAttention-4 keeps
what it compiled in memory; FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1, with FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=FOLDER
(both read when it is imported), keeps it on disk for the next process.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from ..compilation import declare_compiles
from ..protocol import SDPAInputs, Support
from ..registry import register
from .flash_attn import HALF, FlashAttn, call_kwargs


def fa4_kwargs(kwargs: dict) -> dict:
    """`call_kwargs` as FlashAttention-4's flash_attn_func takes them: a side of window_size with no limit is None
    there (-1 in FlashAttention-2); it has no alibi_slopes or dropout_p."""
    return kwargs | {"window_size": tuple(None if w < 0 else w for w in kwargs["window_size"])}


@register
class FlashAttn4(FlashAttn):
    name = "flash_attn4"
    description = ("FlashAttention-4 flash_attn.cute.flash_attn_func, compiled on its first call per shape "
                   "(optional: pip install --pre flash-attn-4; CUDA sm80+)")
    module = "flash_attn.cute"
    install = "pip install --pre flash-attn-4"
    alibi = False
    one_head_dim = False  # q/k and v may differ in head dim (flash_attn/cute/interface.py checks each)
    # head_dim_multiple: 16 bytes of a half type (interface.py's alignment); 8 to 256 on sm90, at most 128 on sm100
    # except (192, 128) and (256, 256): `library_reasons`
    support = Support(devices=frozenset({"cuda"}), dtypes=HALF, max_head_dim=256, head_dim_multiple=8,
                      masks=frozenset({"none", "bool"}))  # a mask only as a window structure

    def arguments(self, inp: SDPAInputs) -> dict:
        return fa4_kwargs(call_kwargs(inp, alibi=False))

    def library_reasons(self, inp: SDPAInputs) -> list[str]:
        out = super().library_reasons(inp)
        e, ev = inp.query.shape[-1], inp.value.shape[-1]
        if inp.query.device.type == "cuda" and torch.cuda.get_device_capability(inp.query.device)[0] in (10, 11) \
                and max(e, ev) > 128 and (e, ev) not in ((192, 128), (256, 256)):
            out.append(f"head dims E={e}, Ev={ev} on sm100/sm110 (FlashAttention-4 takes up to 128 there, or "
                       "(192, 128) and (256, 256))")
        return out

    def prepare_inputs(self, inp: SDPAInputs) -> Callable[[], torch.Tensor]:
        return declare_compiles(super().prepare_inputs(inp))  # the first call compiles its kernels: set-up
