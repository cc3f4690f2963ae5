"""The implementation contract: one call signature and one input validator; what an implementation can run is
declared as data (`Support`, sdpa_impls.support)."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from .callshape import QKVText, plain_number, shape_text, to_bhle
from .masks import Structure
from .support import ALL_HALF_AND_FLOAT, WITH_FP64, Support  # noqa: F401  (the contract's names, in one place)
from .support import as_reasons

# what the measuring code reads from a prepared call besides `op` (compilation, call_context, device time, graphs)
MARKERS = ("compiles", "compile_s_before", "context", "not_capturable", "rebuild")


class Unsupported(NotImplementedError):
    """Raised when an implementation is called on a case it cannot run here; carries the reasons."""

    def __init__(self, name: str, reasons: list[str]) -> None:
        self.impl = name
        self.reasons = list(reasons)
        super().__init__(f"{name} cannot run this case: " + "; ".join(self.reasons))

    def __reduce__(self) -> tuple:  # pickled whole (notes too): a process pool's worker hands it back as raised
        return type(self), (self.impl, self.reasons), self.__dict__


@dataclass(frozen=True)
class SDPAInputs:
    """The arguments of one call, exactly as `F.scaled_dot_product_attention` takes them."""

    query: torch.Tensor  # (B, Hq, Lq, E)
    key: torch.Tensor  # (B, Hkv, Lk, E)
    value: torch.Tensor  # (B, Hkv, Lk, Ev)
    attn_mask: torch.Tensor | None = None  # broadcastable to (B, Hq, Lq, Lk)
    dropout_p: float = 0.0
    is_causal: bool = False
    scale: float | None = None
    enable_gqa: bool = False
    # not a drop-in argument: the structure `attn_mask` is the dense form of (sdpa_impls.masks), when the caller
    # knows it. An implementation with a native form for it may read it in `prepare_inputs`; the answer must
    # still equal the dense mask's.
    structure: Structure | None = None

    def __post_init__(self) -> None:  # a NumPy scalar or 0-d tensor as a Python float, where torch reads it so
        for name in ("dropout_p", "scale"):
            object.__setattr__(self, name, plain_number(getattr(self, name)))

    @property
    def mask_kind(self) -> str:
        if self.attn_mask is None:
            return "none"
        return "bool" if self.attn_mask.dtype == torch.bool else "float"

    @property
    def softmax_scale(self) -> float:
        """1/√E unless given; with E = 0 every score is an empty sum, 0, whatever the scale: 1."""
        e = self.query.shape[-1]
        return self.scale if self.scale is not None else (1.0 / math.sqrt(e) if e else 1.0)

    @property
    def is_empty(self) -> bool:
        """Nothing to compute: the output has no elements, or there are no keys (Lk = 0 or Hkv = 0),
        which gives zeros. torch answers all of these (zeros, zero gradients) rather than raising."""
        b, hq, lq, _ = self.query.shape
        hkv, lk = self.key.shape[1], self.key.shape[2]
        return b * hq * lq * self.value.shape[-1] * hkv * lk == 0

    @property
    def needs_grad(self) -> bool:
        """Query, key or value requires grad: the call is prepared for a backward, whatever the grad mode now (a
        closure prepared under torch.no_grad may be called with autograd on); a call under no_grad or inference
        mode computes the forward alone, as `tiled_attention` and torch's kernels do at the call."""
        return any(t.requires_grad for t in (self.query, self.key, self.value))

    @property
    def mask_needs_grad(self) -> bool:
        """A float mask that requires grad (a learned bias), with autograd on: its gradient is wanted."""
        m = self.attn_mask
        return m is not None and m.requires_grad and torch.is_grad_enabled()


class _NoAttention(torch.autograd.Function):
    """Zeros of the output shape, with zero gradients for query, key and value."""

    @staticmethod
    def forward(ctx, query, key, value, shape):  # type: ignore[override]
        ctx.inputs = [(t.shape, t.dtype, t.device) for t in (query, key, value)]
        return query.new_zeros(shape)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        return (*(torch.zeros(shape, dtype=dtype, device=dev) for shape, dtype, dev in ctx.inputs), None)


def with_op(fn: Callable[[], torch.Tensor], op: str) -> Callable[[], torch.Tensor]:
    """A prepared call carrying `op`, what it runs in the implementation's own words (see Implementation.prepare);
    `fn` unchanged when `op` is empty, else `fn` itself with the attribute, or where `fn` takes no attribute (a bound
    method, a builtin) a function calling it that carries its other markers (`MARKERS`) too."""
    if op:
        try:
            fn.op = op  # type: ignore[attr-defined]
        except (AttributeError, TypeError):
            call, fn = fn, lambda: call()
            for name in MARKERS:
                if hasattr(call, name):
                    setattr(fn, name, getattr(call, name))
            fn.op = op  # type: ignore[attr-defined]
    return fn


def empty_attention(inp: SDPAInputs) -> torch.Tensor:
    """The answer to a call with nothing to compute (`inp.is_empty`), as torch gives it: (B, Hq, Lq, Ev) zeros,
    empty or not (no keys means no attention), and zero gradients of the input shapes."""
    b, hq, lq, _ = inp.query.shape
    return _NoAttention.apply(inp.query, inp.key, inp.value, (b, hq, lq, inp.value.shape[-1]))


def validate(inp: SDPAInputs) -> None:
    """Raise one ValueError naming the offending tensors and shapes; the same text for every implementation."""
    named = (("query", inp.query), ("key", inp.key), ("value", inp.value))
    for name, t in named:
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"sdpa: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"sdpa: {name} must be 4-D (B, H, L, E); got {t.dim()}-D shape {shape_text(t)}")
        if not t.is_floating_point():
            raise ValueError(f"sdpa: {name} has dtype {t.dtype}; a floating-point dtype is required")
    for name, flag in (("is_causal", inp.is_causal), ("enable_gqa", inp.enable_gqa)):
        if not isinstance(flag, bool):  # torch refuses these too; `is_causal="no"` would have meant causal
            kind = f"{type(flag).__module__}.{type(flag).__qualname__}".removeprefix("builtins.")  # numpy.bool
            raise ValueError(f"sdpa: {name} must be a bool, got {kind} {flag!r}")
    for name, number in (("dropout_p", inp.dropout_p), ("scale", inp.scale)):
        if (number is not None or name == "dropout_p") and not isinstance(number, (int, float)):
            raise ValueError(f"sdpa: {name} must be a number, got {type(number).__name__} {number!r}")
    q, k, v = inp.query, inp.key, inp.value
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"sdpa: query, key and value must share one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"sdpa: query, key and value must be on one device; got {q.device}, {k.device}, {v.device}")
    shapes = QKVText(q, k, v)  # text only in an error raised: torch.compile traces no str() of a size
    if not (q.shape[0] == k.shape[0] == v.shape[0]):
        raise ValueError(f"sdpa: batch sizes differ: {shapes}")
    if k.shape[1] != v.shape[1]:  # with enable_gqa, two counts that each divide Hq arrive here repeated to one
        raise ValueError(f"sdpa: key heads ({k.shape[1]}) and value heads ({v.shape[1]}) must each divide the query "
                         f"heads ({q.shape[1]}) with enable_gqa: {shapes}" if inp.enable_gqa else
                         f"sdpa: key and value must have the same number of heads: {shapes}")
    if k.shape[2] != v.shape[2]:
        raise ValueError(f"sdpa: key and value must have the same sequence length: {shapes}")
    if q.shape[3] != k.shape[3]:
        raise ValueError(f"sdpa: query and key must have the same head dim E: {shapes}")
    hq, hkv = q.shape[1], k.shape[1]
    if hkv == 0:
        pass  # no key/value heads: nothing to attend to, zeros for every query head (torch 2.13 answers the same)
    elif inp.enable_gqa:
        if hq % hkv:
            raise ValueError(f"sdpa: query heads ({hq}) must be a multiple of key/value heads ({hkv}): {shapes}")
    elif hq != hkv:
        raise ValueError(f"sdpa: query and key/value heads differ ({hq} vs {hkv}) and enable_gqa=False: {shapes}")
    _validate_mask(inp, shapes)
    if not 0.0 <= float(inp.dropout_p) <= 1.0:  # 1: every weight dropped, zeros (torch answers so)
        raise ValueError(f"sdpa: dropout_p must be in [0, 1]; got {inp.dropout_p}")
    if inp.scale is not None and not math.isfinite(float(inp.scale)):
        raise ValueError(f"sdpa: scale must be a finite number or None; got {inp.scale}")
    if inp.structure is not None and not isinstance(inp.structure, Structure):
        raise ValueError(f"sdpa: structure must be a sdpa_impls.masks.Structure or None, got "
                         f"{type(inp.structure).__name__}")
    if inp.structure is not None and inp.attn_mask is None:
        raise ValueError(f"sdpa: a mask structure ({inp.structure.spec.word}) comes with its dense attn_mask")


def _validate_mask(inp: SDPAInputs, shapes: str) -> None:
    m = inp.attn_mask
    if m is None:
        return
    if not isinstance(m, torch.Tensor):
        raise ValueError(f"sdpa: attn_mask must be a torch.Tensor or None, got {type(m).__name__}")
    q = inp.query
    if m.dtype not in (torch.bool, torch.float32, q.dtype):
        raise ValueError(f"sdpa: attn_mask dtype {m.dtype} must be bool, float32 or the query dtype {q.dtype}")
    if m.device != q.device:
        raise ValueError(f"sdpa: attn_mask is on {m.device} but query is on {q.device}")
    target = (q.shape[0], q.shape[1], q.shape[2], inp.key.shape[2])
    ok = m.dim() <= 4
    if ok:
        try:
            ok = torch.broadcast_shapes(m.shape, target) == torch.Size(target)
        except RuntimeError as exc:  # a mismatch is a plain RuntimeError (torch._check); subclasses such as
            if type(exc) is not RuntimeError:  # RecursionError say nothing about the mask: let them travel up
                raise
            ok = False
    if not ok:
        raise ValueError(
            f"sdpa: attn_mask {shape_text(m)} does not broadcast to (B, Hq, Lq, Lk) = "
            f"({', '.join(map(str, target))}); {shapes}"
        )


@runtime_checkable
class SDPAImplementation(Protocol):
    """What every implementation offers: a drop-in call for F.scaled_dot_product_attention and its reasons."""

    name: str

    def __call__(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0, is_causal: bool = False,
                 scale: float | None = None, enable_gqa: bool = False) -> torch.Tensor: ...

    def unsupported_reasons(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                            is_causal: bool = False, scale: float | None = None,
                            enable_gqa: bool = False) -> list[str]: ...

    def prepare(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0, is_causal: bool = False,
                scale: float | None = None, enable_gqa: bool = False) -> Callable[[], torch.Tensor]: ...


class Implementation:
    """Base class: validation, reasons and the prepare/call split shared by every implementation.

    Subclasses set `name` and `support`, implement `forward(inp)`, and may override
    `library_reasons(inp)` (the library's own checks), `prepare_inputs(inp)` (work that
    must stay out of the timed closure, e.g. layout changes) or extend `not_supported_reasons(inp)`
    with `super()` (the whole answer, e.g. to put "not installed" first).
    """

    name: str = ""
    support: Support = Support()
    description: str = ""
    eager: bool = False  # True: a torch.compile'd caller runs the drop-in eagerly (a graph break), not traced

    def forward(self, inp: SDPAInputs) -> torch.Tensor:
        raise NotImplementedError

    def library_reasons(self, inp: SDPAInputs) -> list[str]:
        """Reasons from the library's own support checks; called only when the data checks pass. A list of strings
        (empty or None: none); any other answer is a TypeError naming the implementation."""
        return []

    def prepare_inputs(self, inp: SDPAInputs) -> Callable[[], torch.Tensor]:
        return lambda: self.forward(inp)

    def not_supported_reasons(self, inp: SDPAInputs) -> list[str]:
        """Validate (one ValueError for bad input), then the data checks of `support`, then the library's own
        checks when those pass. Empty when this implementation can run `inp` here."""
        validate(inp)
        return self.support.reasons(inp) or as_reasons(self.name, "library_reasons", self.library_reasons(inp))

    def unsupported_reasons(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                            is_causal: bool = False, scale: float | None = None,
                            enable_gqa: bool = False) -> list[str]:
        """Empty when this implementation can run the call here; else one sentence per obstacle."""
        call = to_bhle(query, key, value, attn_mask, enable_gqa, cast=True)
        return as_reasons(self.name, "not_supported_reasons", call.checked(lambda: self.not_supported_reasons(
            SDPAInputs(call.query, call.key, call.value, call.attn_mask, dropout_p, is_causal, scale, enable_gqa))))

    def prepare(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0, is_causal: bool = False,
                scale: float | None = None, enable_gqa: bool = False, *,
                structure: Structure | None = None) -> Callable[[], torch.Tensor]:
        """Validate and check support once; return a zero-argument closure that only computes. q, k and v of any
        rank from 2 and batch dims that broadcast, as torch takes them, are computed as (B, H, L, E)
        (`callshape.to_bhle`), and the answer comes back at the caller's shape. `structure`
        (keyword only) names what the dense `attn_mask` is, for implementations with a native form of it. The
        closure may carry an `op` string, the library's own name for what it runs (xformers: "cutlassF-pt"),
        which a benchmark records with the point."""
        call = to_bhle(query, key, value, attn_mask, enable_gqa, cast=True)  # under torch.autocast: torch's dtype
        inp = SDPAInputs(call.query, call.key, call.value, call.attn_mask, dropout_p, is_causal, scale, enable_gqa,
                         structure)
        reasons = as_reasons(self.name, "not_supported_reasons", call.checked(lambda: self.not_supported_reasons(inp)))
        if reasons:
            raise Unsupported(self.name, reasons)
        with call.autocast_off():
            return call.wrap(self.prepare_inputs(inp))  # the caller's shape back, the library's `op` kept

    def __call__(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0, is_causal: bool = False,
                 scale: float | None = None, enable_gqa: bool = False) -> torch.Tensor:
        call = lambda: self.prepare(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)()  # noqa
        # only while dynamo traces: torch.compiler.disable imports dynamo, 1.4 s of every process's start
        return torch.compiler.disable(call)() if self.eager and torch.compiler.is_compiling() else call()

    def __repr__(self) -> str:
        return f"<sdpa implementation {self.name!r}>"
