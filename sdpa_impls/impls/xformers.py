"""xformers: xformers.ops.memory_efficient_attention (BMHK layout); an optional dependency, CUDA only.

xformers' fmha/flash.py imports `flash_attn.flash_attn_interface` (FlashAttention-2) whenever `flash_attn` can be
found. flash-attn-4 installs `flash_attn` as a namespace package holding only `cute`, so with it alone that import
fails and so would xformers'. There xformers is imported with `flash_attn` hidden (`hidden_module`), as where
FlashAttention-2 is not installed: its flash op then calls torch's own flash kernel. Any other failure is its reason.

xformers' own compiled extension (`_C`) loads only with the torch and CUDA it was built for; elsewhere xformers
warns and imports. Its attention ops do not need `_C`: cutlass (`cutlassF-pt`/`cutlassB-pt`) calls torch's
`aten._efficient_attention_forward/backward`, flash without FlashAttention-2 (`fa2F@<version>-pt`) calls
`aten._flash_attention_forward/backward`, and `triton_splitKF` is Triton; each op's own `is_available` says whether
its kernel exists. Which op runs is xformers' dispatch's choice (`fmha._dispatch_fw`/`_dispatch_bw`), passed to the
call and reported as the closure's `op`; where it refuses a case its words are the reasons, with one note that `_C`
did not load. xformers 0.0.35 keeps its build metadata only when `_C` loads, so it then takes a CUDA build for one
without CUDA and refuses every op on CUDA ("xFormers wasn't build with CUDA support"): where the wheel's own
metadata says it was built with CUDA and this torch is a CUDA build, that flag is set to what the metadata says.
"""
from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable
from types import ModuleType

import torch

from ..protocol import Implementation, SDPAInputs, Support
from ..registry import register
from .flash_attn_package import fa4_namespace_only, hidden_module
from .xformers_bias import NativeBias, native_bias


@functools.lru_cache(maxsize=None)
def _fmha() -> tuple[ModuleType | None, str]:
    """Import xformers' fmha lazily (it is slow and noisy); the error text when it is missing. Where xformers takes
    its CUDA build for one without CUDA (`_cuda_build_unread`), its flag is set to what its build metadata says."""
    namespace = fa4_namespace_only()
    try:
        with hidden_module("flash_attn") if namespace else contextlib.nullcontext():
            from xformers.ops import fmha
    except Exception as exc:  # ImportError, or a build that does not match this torch
        if isinstance(exc, ModuleNotFoundError) and exc.name and exc.name.startswith("xformers"):
            return None, "xformers is not installed (pip install xformers)"
        return None, f"xformers failed to import: {type(exc).__name__}: {exc}{_flash_attn_note(exc)}"
    if not hasattr(fmha, "memory_efficient_attention"):  # an incomplete install: a reason, not an AttributeError
        return None, "xformers.ops.fmha imports without memory_efficient_attention (an incomplete xformers install)"
    import xformers

    built = _build_info(xformers)
    common = getattr(fmha, "common", None)
    if hasattr(common, "_built_with_cuda") and _cuda_build_unread(
            getattr(xformers, "_has_cpp_library", True), built[1] if built else None, torch.version.cuda):
        common._built_with_cuda = True  # what its own build metadata says (see the module docstring)
    return fmha, ""


def _flash_attn_note(exc: BaseException) -> str:
    """Where the import failed in the installed flash_attn package, which one that is."""
    text = f"{getattr(exc, 'name', '') or ''} {exc}"
    if "flash_attn" not in text and "Flash-Attention" not in text:
        return ""
    flash = sys.modules.get("flash_attn")
    where = getattr(flash, "__file__", None) or ", ".join(getattr(flash, "__path__", [])) or "not imported"
    return f" (xformers' fmha/flash.py imports FlashAttention-2 from the installed flash_attn package: {where})"


def _build_info(xformers: ModuleType) -> tuple[str, int | None] | None:
    """(torch version, CUDA version) xformers' `_C` was built for, from the error of its failed load; None when it
    loaded or the error carries no build metadata."""
    exc = getattr(getattr(xformers, "_cpp_lib", None), "_cpp_library_load_exception", None)
    built = getattr(exc, "build_info", None)
    if built is None:
        return None
    try:
        return str(built.torch_version), built.cuda_version
    except (KeyError, TypeError, AttributeError):  # build metadata of another shape
        return None


def _cuda_build_unread(loaded: bool, built_cuda: int | None, torch_cuda: str | None) -> bool:
    """Whether xformers takes its CUDA build for one without CUDA: `_C` did not load (so xformers 0.0.35 kept no
    build metadata and `fmha.common._built_with_cuda` is False), its metadata says CUDA `built_cuda`, and this torch
    is a CUDA build (`torch_cuda`, torch.version.cuda). Then every op would refuse every CUDA case for that alone."""
    return not loaded and built_cuda is not None and torch_cuda is not None


def _kernels_note() -> str:
    """One note for xformers' refusals where its compiled extension `_C` did not load, or "" where it loaded.
    Never a reason by itself: xformers' attention ops do not need `_C` (the module docstring)."""
    import xformers

    if getattr(xformers, "_has_cpp_library", True):
        return ""
    built = _build_info(xformers)
    if built is not None:
        cuda = f" with CUDA {built[1] // 100}.{built[1] % 100}" if isinstance(built[1], int) else ""  # 1208: 12.8
        return (f"(xformers' compiled kernels did not load: built for torch {built[0]}{cuda}, "
                f"this is torch {torch.__version__})")
    exc = getattr(getattr(xformers, "_cpp_lib", None), "_cpp_library_load_exception", None)
    first = str(exc).strip().splitlines()[0] if exc is not None and str(exc).strip() else "no compiled extension"
    return f"(xformers' compiled kernels did not load: {first})"


def _with_note(reasons: list[str], note: str) -> list[str]:
    """xformers' reasons for refusing a case, with `note` added once; no reasons stay none (a case an op accepts
    runs, whatever the note)."""
    return [*reasons, note] if reasons and note else list(reasons)


def _op_names(ops: tuple[object, ...]) -> str:
    """The xformers ops that run a call, by xformers' own names (`NAME`): "cutlassF-pt", or with gradients
    "fa2F@2.5.7-pt + fa2B@2.5.7-pt"."""
    return " + ".join(str(getattr(op, "NAME", op)) for op in ops if op is not None)


def _grouped(inp: SDPAInputs) -> bool:
    """Whether xformers gets the 5-D BMGHK layout: GQA forward only (no xformers backward op supports BMGHK,
    so with gradients K/V are repeated per query head into plain BMHK)."""
    return inp.query.shape[1] != inp.key.shape[1] and not inp.needs_grad


def _layout(inp: SDPAInputs, packed: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(B, H, L, E) -> BMHK views, or for GQA forward BMGHK (B, L, Hkv, G, E) with K/V broadcast over G.

    GQA with gradients: K/V repeated to Hq heads (a copy, made inside the call so that autograd sums the
    gradients of the G copies back into each key/value head). `packed`: the batch as one row of concatenated
    sequences, (1, B·L, ...), xformers' variable-length layout (a copy of each tensor at its own size, made before
    the GQA broadcast: K/V keep stride 0 over G, so xformers still sees grouped heads and reads each K/V head once)."""
    q, k, v = inp.query.transpose(1, 2), inp.key.transpose(1, 2), inp.value.transpose(1, 2)  # (B, L, H, E)
    if packed:
        q, k, v = (t.reshape(1, -1, *t.shape[2:]) for t in (q, k, v))  # (1, B·L, H, E)
    hq, hkv = q.shape[2], k.shape[2]
    if hq != hkv:
        g = hq // hkv
        k = k.unsqueeze(3).expand(-1, -1, -1, g, -1)  # (B, Lk, Hkv, G, E), stride 0 over G
        v = v.unsqueeze(3).expand(-1, -1, -1, g, -1)
        if _grouped(inp):
            q = q.unflatten(2, (hkv, g))  # query head h = kv head h // G, member h % G
        else:
            k, v = k.flatten(2, 3), v.flatten(2, 3)  # (B, Lk, Hq, E): query head h reads kv head h // G
    return q, k, v


def _bias_tensor(inp: SDPAInputs) -> torch.Tensor:
    """The mask (and causal triangle) as a dense additive bias in the layout xformers checks: (B, H, Lq, Lk) for
    BMHK inputs (fmha.Inputs.validate_inputs), (B, Hkv, G, Lq, Lk) for BMGHK (the cutlass op selects head group
    g with `select(dim=1)`). Rows are padded to 8 elements in memory, as xformers' alignment check requires of
    every stride but the last."""
    q, k = inp.query, inp.key
    b, hq, lq, lk, hkv = q.shape[0], q.shape[1], q.shape[2], k.shape[2], k.shape[1]
    heads = (hkv, hq // hkv) if _grouped(inp) else (hq,)
    padded = (lk + 7) // 8 * 8
    bias = torch.zeros((b, *heads, lq, padded), dtype=q.dtype, device=q.device)[..., :lk]
    # inverted or cast at the mask's own size, then broadcast as a view: query head h -> (h // G, h % G)
    boolean = inp.attn_mask.dtype == torch.bool
    m = ~inp.attn_mask if boolean else inp.attn_mask.to(q.dtype)
    m = m.expand(b, hq, lq, lk).reshape(b, *heads, lq, lk)
    if boolean:
        bias.masked_fill_(m, float("-inf"))
    else:
        bias.add_(m)
    if inp.is_causal:
        bias.masked_fill_(torch.ones(lq, lk, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return bias


def _native(inp: SDPAInputs) -> NativeBias | None:
    q = inp.query
    return native_bias(inp.structure, q.shape[0], q.shape[2], inp.key.shape[2], inp.is_causal)


def _bias(inp: SDPAInputs, fmha: ModuleType, native: bool = True) -> tuple[object | None, bool]:
    """(xformers' attention bias, packed layout): LowerTriangularMask for plain causal, the structure's own class
    (`xformers_bias`) where one states it and `native`, else the dense tensor of `_bias_tensor`."""
    if inp.attn_mask is None:
        return (fmha.attn_bias.LowerTriangularMask() if inp.is_causal else None), False
    described = _native(inp) if native else None
    if described is not None:
        return described.build(fmha.attn_bias), described.packed
    return _bias_tensor(inp), False


def _dispatch(inp: SDPAInputs, fmha: ModuleType, bias: object | None, packed: bool
              ) -> tuple[tuple[object, object | None] | None, list[str]]:
    """xformers' own choice, (forward op, backward op with gradients), or None and its reasons for refusing."""
    q, k, v = _layout(inp, packed)
    x_inp = fmha.Inputs(query=q, key=k, value=v, attn_bias=bias, p=inp.dropout_p, scale=inp.scale)
    x_inp.validate_inputs()  # a ValueError here is a bug in our layout: it fails the point, never skips it
    try:
        fw = fmha._dispatch_fw(x_inp, inp.needs_grad)
        bw = None
        if inp.needs_grad:  # a variable-length bias's log-sum-exp comes in the forward op's format
            bw = fmha._dispatch_bw(x_inp, varlen_lse_packed=getattr(fw, "VARLEN_LSE_PACKED", None))
    except NotImplementedError as exc:
        return None, [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (fw, bw), []


def _chosen(inp: SDPAInputs, fmha: ModuleType
            ) -> tuple[object | None, bool, tuple[object, object | None] | None, list[str]]:
    """The structure's native bias where xformers runs it, else the dense one: (bias, packed, ops, reasons)."""
    bias, packed = _bias(inp, fmha)
    ops, reasons = _dispatch(inp, fmha, bias, packed)
    if reasons and _native(inp) is not None and inp.attn_mask is not None:
        bias, packed = _bias(inp, fmha, native=False)
        ops, reasons = _dispatch(inp, fmha, bias, packed)
    return bias, packed, ops, reasons


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
        return _with_note(_chosen(inp, fmha)[3], _kernels_note())

    def prepare_inputs(self, inp: SDPAInputs) -> Callable[[], torch.Tensor]:
        """The call with the ops xformers' dispatch chose, passed explicitly, so the closure's `op` names what runs."""
        fmha, _ = _fmha()
        bias, packed, ops, _ = _chosen(inp, fmha)  # the structure's own bias is built here, outside the timed call
        b, hq, lq, ev = inp.query.shape[0], inp.query.shape[1], inp.query.shape[2], inp.value.shape[-1]
        p, scale = inp.dropout_p, inp.scale
        attention = fmha.memory_efficient_attention
        if inp.needs_grad:  # views (and the GQA repeat) inside the call: autograd builds a fresh graph each call
            def call() -> torch.Tensor:
                q, k, v = _layout(inp, packed)
                out = attention(q, k, v, attn_bias=bias, p=p, scale=scale, op=ops)
                return out.reshape(b, lq, hq, ev).transpose(1, 2)

            call.op = _op_names(ops or ())  # type: ignore[attr-defined]
            return call
        q, k, v = _layout(inp, packed)

        def call_fwd() -> torch.Tensor:
            out = attention(q, k, v, attn_bias=bias, p=p, scale=scale, op=ops)
            return out.reshape(b, lq, hq, ev).transpose(1, 2)  # (B or 1, B·L, ...) back to (B, H, L, Ev)

        call_fwd.op = _op_names(ops or ())  # type: ignore[attr-defined]
        return call_fwd

    def forward(self, inp: SDPAInputs) -> torch.Tensor:
        return self.prepare_inputs(inp)()
