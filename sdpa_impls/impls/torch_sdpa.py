"""torch_sdpa and its pinned backends: F.scaled_dot_product_attention under torch's own or a forced dispatch."""
from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..callshape import in_func_transform
from ..protocol import WITH_FP64, Implementation, SDPAInputs, Support
from ..registry import register
from ..torchver import needs_torch

# Before this release torch's math kernel divides the query heads by the key/value heads under enable_gqa, and with
# none the process dies of SIGFPE (seen with 2.5.1, 2.6.0, 2.7.0, 2.8.0, 2.9.0 and 2.11.0 on a CPU; 2.12.0 answers zeros)
EMPTY_GQA = "2.12"
_TRIGGERED = re.compile(r"\s*\(Triggered internally at .*\)\s*$", re.S)
_probe_cache: dict[tuple, list[str]] = {}
_CUDA_CHECKS = {
    SDPBackend.FLASH_ATTENTION: torch.backends.cuda.can_use_flash_attention,
    SDPBackend.EFFICIENT_ATTENTION: torch.backends.cuda.can_use_efficient_attention,
    SDPBackend.CUDNN_ATTENTION: torch.backends.cuda.can_use_cudnn_attention,
}


def _torch_messages(caught: list[warnings.WarningMessage]) -> list[str]:
    """torch's own explanations of why a kernel was not used, without the C++ source locations."""
    out = []
    for w in caught:
        text = _TRIGGERED.sub("", str(w.message)).strip()
        if text and not text.endswith("because:") and text not in out:
            out.append(text)
    return out


def sdpa_params(inp: SDPAInputs) -> torch.backends.cuda.SDPAParams:
    """torch's dispatch parameters for the call `prepare_inputs` makes (the mask as the 4-D view it passes: cuDNN's
    check refuses a 3-D mask that the call never hands it)."""
    return torch.backends.cuda.SDPAParams(inp.query, inp.key, inp.value, mask4(inp.attn_mask),
                                          float(inp.dropout_p), bool(inp.is_causal), bool(inp.enable_gqa))


def _cuda_reasons(backend: SDPBackend, inp: SDPAInputs) -> list[str]:
    """Ask torch's CUDA support checks directly, on the real shapes (cheap, no kernel runs)."""
    check = _CUDA_CHECKS[backend]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ok = check(sdpa_params(inp), True)
    return [] if ok else (_torch_messages(caught) or [f"torch refuses the {backend.name} backend for this case"])


def mask4(mask: torch.Tensor | None) -> torch.Tensor | None:
    """A mask of rank 0 to 4 as a 4-D view (leading size-1 dims), the only rank every torch kernel takes:
    torch's CPU flash kernel indexes dims -2 and -1 of the mask and refuses 3-D ones."""
    return None if mask is None else mask[(None,) * (4 - mask.dim())]


def _stride_class(t: torch.Tensor) -> tuple:
    """What torch's kernel checks read from a layout, and not the length: the broadcast dims, the order of the
    strides, the last dim's stride, and whether each stride and the start are whole 16 bytes (a decode step's
    growing cache is one class, not one probe a step)."""
    size = t.element_size()
    return (tuple(s == 0 for s in t.stride()), tuple(sorted(range(t.dim()), key=t.stride)), t.stride(-1),
            tuple(s * size % 16 == 0 for s in t.stride()), t.data_ptr() % 16 == 0)


def _probe_reasons(backend: SDPBackend | None, inp: SDPAInputs) -> list[str]:
    """Elsewhere torch exposes no checker: run the (pinned) dispatch on a slice of at most 4 query and key
    tokens of the same case (same dtype, heads, head dims, strides and alignment, mask kind and broadcast shape,
    flags, grad, empty dims) and keep torch's warnings if it refuses. The slices are detached views of the
    caller's tensors, not copies (a copy is contiguous, and a strided key then passed where the call would not),
    so no gradient reaches the caller's tensors, and the probe draws no random numbers of the caller's."""
    m = mask4(inp.attn_mask)
    q, k, v = (t[..., :4, :] for t in (inp.query, inp.key, inp.value))  # (B, H, <=4, E)
    if m is not None:
        m = m[..., : min(4, m.shape[-2]), : min(4, m.shape[-1])]  # a broadcast (size-1) dim stays 1
    layout = tuple((t.shape, _stride_class(t)) for t in (q, k, v, *(() if m is None else (m,))))
    key = (backend, inp.query.device.type, inp.query.dtype, layout, None if m is None else m.dtype,
           bool(inp.is_causal), inp.dropout_p > 0, bool(inp.enable_gqa), torch.is_grad_enabled(),
           *(t.requires_grad for t in (q, k, v, *(() if m is None else (m,)))))
    if key not in _probe_cache:  # each as the call's (an inference-mode key cannot require grad, nor a mask unasked)
        q, k, v, *m = (t.detach().requires_grad_(t.requires_grad) for t in (q, k, v, *(() if m is None else (m,))))
        m = m[0] if m else None
        cuda = [q.device] if q.device.type == "cuda" else []
        with warnings.catch_warnings(record=True) as caught, \
                torch.random.fork_rng(devices=cuda, enabled=inp.dropout_p > 0):
            warnings.simplefilter("always")
            try:
                with sdpa_kernel(backend) if backend is not None else contextlib.nullcontext():
                    out = F.scaled_dot_product_attention(q, k, v, m, inp.dropout_p, inp.is_causal,
                                                         scale=inp.scale, enable_gqa=inp.enable_gqa)
                    if out.requires_grad:  # grad mode on, and an input requires it
                        out.sum().backward()
                reasons: list[str] = []
            except RuntimeError as exc:
                reasons = _torch_messages(caught) or [str(exc).strip().splitlines()[0]]
        _probe_cache[key] = reasons
    return _probe_cache[key]


_pinned_now: SDPBackend | None = None


@contextlib.contextmanager
def pinned(backend: SDPBackend) -> Iterator[None]:
    """torch's SDPA dispatch allowed only `backend` (sdpa_kernel), entered once: the pinned closures made inside
    it skip their own per-call sdpa_kernel."""
    global _pinned_now
    previous = _pinned_now
    with sdpa_kernel(backend):
        _pinned_now = backend
        try:
            yield
        finally:
            _pinned_now = previous


class TorchSDPA(Implementation):
    """F.scaled_dot_product_attention, optionally pinned to one backend with sdpa_kernel."""

    backend: SDPBackend | None = None
    support = Support(devices=frozenset({"cpu", "cuda"}), dtypes=WITH_FP64, dropout=True, mask_grad=True)

    def library_reasons(self, inp: SDPAInputs) -> list[str]:
        if inp.enable_gqa and inp.key.shape[1] == 0:  # asked before any probe: the probe would be the crash
            too_old = needs_torch(EMPTY_GQA, "enable_gqa with no key/value heads")
            if too_old:
                return too_old
        if inp.query.device.type == "cuda" and self.backend in _CUDA_CHECKS:
            return _cuda_reasons(self.backend, inp)
        if in_func_transform():  # no probe there (no storage to class, no backward of its own): torch's call answers
            return []
        return _probe_reasons(self.backend, inp)

    def prepare_inputs(self, inp: SDPAInputs) -> Callable[[], torch.Tensor]:
        args = (inp.query, inp.key, inp.value, mask4(inp.attn_mask), inp.dropout_p, inp.is_causal)
        kwargs = {"scale": inp.scale, "enable_gqa": inp.enable_gqa}
        if self.backend is None:
            return lambda: F.scaled_dot_product_attention(*args, **kwargs)
        backend = self.backend

        def call() -> torch.Tensor:
            if _pinned_now is backend:  # inside call.context(): torch's flags already allow only this backend
                return F.scaled_dot_product_attention(*args, **kwargs)
            with sdpa_kernel(backend):  # called on its own: pin for this call (costs ~17 µs on the host)
                return F.scaled_dot_product_attention(*args, **kwargs)

        call.context = lambda: pinned(backend)  # entered once around many calls by the measuring code
        return call
    def forward(self, inp: SDPAInputs) -> torch.Tensor:
        return self.prepare_inputs(inp)()

    def prepare(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,  # type: ignore[override]
                attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0, is_causal: bool = False,
                scale: float | None = None, enable_gqa: bool = False, **kwargs: object) -> Callable[[], torch.Tensor]:
        """As every implementation's (the same checks and errors), but unpinned q, k and v of a rank other than 4
        go to torch as the caller gave them: torch's dispatch takes its fused CPU kernels only for 4-D inputs and
        computes others with math, so the (B, H, L, E) view would run another kernel than F.sdpa of the same call
        (rounding apart, causal with a negative scale: NaN from the CPU flash kernel, numbers from math). A pinned
        backend keeps the 4-D view: it is asked for its kernel."""
        fn = super().prepare(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, **kwargs)
        if self.backend is not None or all(t.dim() == 4 for t in (query, key, value)):
            return fn
        return lambda: F.scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal,
                                                      scale=scale, enable_gqa=enable_gqa)


@register
class TorchDefault(TorchSDPA):
    name = "torch_sdpa"
    description = "F.scaled_dot_product_attention with torch's own backend choice"


@register
class TorchMath(TorchSDPA):
    name = "torch_sdpa_math"
    description = "pinned to the MATH backend (composite reference kernels, every device)"
    backend = SDPBackend.MATH


@register
class TorchFlash(TorchSDPA):
    name = "torch_sdpa_flash"
    description = "pinned to FLASH_ATTENTION (CUDA: FlashAttention-2; CPU: torch's tiled CPU kernel)"
    backend = SDPBackend.FLASH_ATTENTION


@register
class TorchEfficient(TorchSDPA):
    name = "torch_sdpa_efficient"
    description = "pinned to EFFICIENT_ATTENTION (CUDA memory-efficient kernel)"
    backend = SDPBackend.EFFICIENT_ATTENTION
    support = Support(devices=frozenset({"cuda"}), dtypes=WITH_FP64, dropout=True, mask_grad=True)


@register
class TorchCudnn(TorchSDPA):
    name = "torch_sdpa_cudnn"
    description = "pinned to CUDNN_ATTENTION (cuDNN fused attention, CUDA)"
    backend = SDPBackend.CUDNN_ATTENTION
    support = Support(devices=frozenset({"cuda"}), dtypes=WITH_FP64, dropout=True, mask_grad=True)
