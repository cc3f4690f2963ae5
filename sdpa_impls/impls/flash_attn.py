"""flash_attn, flash_attn3: FlashAttention-2's `flash_attn_func` and FA3's (`flash_attn_interface`); optional, CUDA only.

Their layout is (B, L, H, E) and their causal mask is aligned to the bottom-right corner; the conversions to and from
this suite's (B, H, L, E) top-left contract are the pure functions `to_blhe`, `from_blhe` and `causal_window`. They
take no mask tensor: a `window-W` structure (both) and `alibi` (FlashAttention-2) are stated by their own arguments,
`structure_kwargs`.

flash-attn-4 (flash_attn4.py) installs `flash_attn` as a namespace package holding only `cute`. Where
FlashAttention-2 is not installed beside it, `flash_attn` imports but is not FlashAttention-2: `fa4_namespace_only`
says so, flash_attn's reason names it, and xformers (whose fmha imports `flash_attn.flash_attn_interface` whenever
`flash_attn` can be found) imports with it hidden.
"""
from __future__ import annotations

import functools
import importlib
from collections.abc import Callable

import torch

from ..protocol import Implementation, SDPAInputs, Support
from ..registry import register
from .flash_attn_package import FA4_NAMESPACE, fa4_namespace_only

HALF = frozenset({torch.float16, torch.bfloat16})


def to_blhe(t: torch.Tensor) -> torch.Tensor:
    """(B, H, L, E) -> (B, L, H, E), a view: flash-attn reads any strides whose last one is 1."""
    return t.transpose(1, 2)


def from_blhe(t: torch.Tensor) -> torch.Tensor:
    """(B, L, H, Ev) -> (B, H, L, Ev), a view."""
    return t.transpose(1, 2)


def causal_window(is_causal: bool, lq: int, lk: int) -> tuple[bool, tuple[int, int]] | None:
    """(causal, window_size) giving flash-attn's mask the meaning of ours, or None when none does.

    flash-attn lets query i see keys i + lk - lq - left ..., i + lk - lq + right (window_size = (left, right);
    -1 = no limit, and a side >= lk counts as -1); causal=True is right = 0. Our causal is top-left: i sees
    keys <= i, so right = lq - lk. That is 0 (causal=True) for lq = lk, a positive window for lk < lq < 2·lk, and
    out of reach for lq < lk (a negative side means no limit) or lq >= 2·lk (the side reaches lk)."""
    if not is_causal:
        return False, (-1, -1)
    if lq == lk:
        return True, (-1, -1)
    if lk < lq < 2 * lk:
        return False, (-1, lq - lk)
    return None


def structure_kwargs(inp: SDPAInputs, alibi: bool) -> dict | None:
    """flash_attn_func's arguments that state the mask's structure, or None where they cannot (Lq = Lk only, where
    flash-attn's bottom-right alignment is ours):
    - `window-W`: window_size=(W - 1, 0), query i seeing keys i - W + 1 ... i; top-left `is_causal` adds nothing;
    - `alibi` (`alibi`: FlashAttention-2 has alibi_slopes): the per-query-head slopes, which flash-attn turns into
      the bias -slope·|i + Lk - Lq - j| added to the scaled scores, ours -slope·|i - j|; causal as without a mask.
    `alibi_slopes` is a tuple here; `prepare_inputs` makes the fp32 tensor on the device."""
    s, lq, lk = inp.structure, inp.query.shape[2], inp.key.shape[2]
    if s is None or lq != lk:
        return None
    if s.kind == "window":
        return {"causal": False, "window_size": (s.spec.param - 1, 0)}
    if s.kind == "alibi" and alibi:
        causal, window = causal_window(inp.is_causal, lq, lk)
        return {"causal": causal, "window_size": window, "alibi_slopes": s.slopes}
    return None


def call_kwargs(inp: SDPAInputs, alibi: bool = True) -> dict:
    """flash_attn_func's keyword arguments for this call (a mask must have its `structure_kwargs`, and without
    one the window must exist: see `causal_window`)."""
    if inp.attn_mask is not None:
        return {"softmax_scale": inp.softmax_scale, **structure_kwargs(inp, alibi)}
    causal, window = causal_window(inp.is_causal, inp.query.shape[2], inp.key.shape[2])
    return {"softmax_scale": inp.softmax_scale, "causal": causal, "window_size": window}


def mapping_reasons(inp: SDPAInputs, alibi: bool = True, one_head_dim: bool = True) -> list[str]:
    """What this call asks that flash_attn_func cannot express (pure argument checks, no GPU needed)."""
    q, k, v = inp.query, inp.key, inp.value
    out = []
    if inp.attn_mask is not None:
        if structure_kwargs(inp, alibi) is None:
            native = "a `window-W` structure (window_size)" + (" and `alibi` (alibi_slopes)" if alibi else "")
            out.append(f"attn_mask: flash_attn_func takes no mask tensor; it states {native} natively, with Lq = Lk")
    elif causal_window(inp.is_causal, q.shape[2], k.shape[2]) is None:
        out.append(f"top-left causal with Lq={q.shape[2]}, Lk={k.shape[2]}: flash-attn's causal mask is aligned "
                   "bottom-right and its window_size reaches top-left only for Lk <= Lq < 2·Lk")
    if one_head_dim and v.shape[-1] != q.shape[-1]:
        out.append(f"Ev={v.shape[-1]} != E={q.shape[-1]} (flash_attn_func takes one head dim for q, k and v)")
    return out


@functools.lru_cache(maxsize=None)
def _load(module: str, install: str) -> tuple[Callable | None, str]:
    """`module.flash_attn_func`, or None and why (not installed, FlashAttention-4's namespace where FlashAttention-2
    is asked for, or an import error of a build for another torch)."""
    if module == "flash_attn" and fa4_namespace_only():
        return None, f"{FA4_NAMESPACE}; it spans {fa4_namespace_only()}"
    try:
        return importlib.import_module(module).flash_attn_func, ""
    except Exception as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name and exc.name.split(".")[0] == module.split(".")[0]:
            return None, f"{module} is not installed ({install})"
        return None, f"{module} failed to import: {type(exc).__name__}: {exc}"


class FlashAttn(Implementation):
    """flash_attn_func of one FlashAttention generation; subclasses name the module and the GPUs it runs on."""

    module = "flash_attn"
    install = "pip install flash-attn"
    min_capability: tuple[int, int] = (8, 0)
    max_capability: tuple[int, int] | None = None
    alibi = True  # flash_attn_func has alibi_slopes
    one_head_dim = True  # one head dim for q, k and v

    def arguments(self, inp: SDPAInputs) -> dict:
        """flash_attn_func's keyword arguments for this call (what does not depend on the device)."""
        return call_kwargs(inp, self.alibi)

    def not_supported_reasons(self, inp: SDPAInputs) -> list[str]:
        reasons = super().not_supported_reasons(inp)
        fn, missing = _load(self.module, self.install)
        if inp.is_empty:
            reasons.append("a dimension of size 0: flash-attn is not called on empty inputs")
        return reasons if fn is not None else [missing, *reasons]  # "not installed" first, wherever it runs

    def library_reasons(self, inp: SDPAInputs) -> list[str]:
        out = mapping_reasons(inp, self.alibi, self.one_head_dim)
        if inp.query.device.type == "cuda":
            cap = torch.cuda.get_device_capability(inp.query.device)
            top = self.max_capability
            if cap < self.min_capability or (top is not None and cap > top):
                want = f"sm{self.min_capability[0]}{self.min_capability[1]}" + (" or newer" if top is None else "")
                out.append(f"compute capability sm{cap[0]}{cap[1]} ({self.module} runs on {want})")
        return out

    def prepare_inputs(self, inp: SDPAInputs) -> Callable[[], torch.Tensor]:
        fn, _ = _load(self.module, self.install)
        q, k, v = (to_blhe(t) for t in (inp.query, inp.key, inp.value))
        kwargs = self.arguments(inp)
        if "alibi_slopes" in kwargs:
            kwargs["alibi_slopes"] = torch.tensor(kwargs["alibi_slopes"], dtype=torch.float32, device=q.device)
        if inp.dropout_p:
            kwargs["dropout_p"] = inp.dropout_p

        def call() -> torch.Tensor:
            out = fn(q, k, v, **kwargs)
            return from_blhe(out[0] if isinstance(out, tuple) else out)  # some FA3 releases return (out, lse)

        return call

    def forward(self, inp: SDPAInputs) -> torch.Tensor:
        return self.prepare_inputs(inp)()


@register
class FlashAttn2(FlashAttn):
    name = "flash_attn"
    description = "FlashAttention-2 flash_attn_func, (B, L, H, E) views (optional: pip install flash-attn; CUDA)"
    support = Support(devices=frozenset({"cuda"}), dtypes=HALF, max_head_dim=256,
                      masks=frozenset({"none", "bool", "float"}), dropout=True)  # a mask only as its structure


@register
class FlashAttn3(FlashAttn):
    name = "flash_attn3"
    description = "FlashAttention-3 flash_attn_interface.flash_attn_func (Hopper sm90; built from flash-attention's hopper/)"
    module = "flash_attn_interface"
    install = "build it from flash-attention's hopper/ directory"
    min_capability = max_capability = (9, 0)
    alibi = False
    # head_dim_multiple: hopper/flash_api.cpp checks head_size % 8 == 0 and does not pad (FlashAttention-2 pads)
    support = Support(devices=frozenset({"cuda"}), dtypes=HALF, max_head_dim=256, head_dim_multiple=8,
                      masks=frozenset({"none", "bool"}))  # a mask only as a window structure

