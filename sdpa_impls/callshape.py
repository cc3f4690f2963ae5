"""The shapes torch's SDPA takes, made the (B, H, L, E) every implementation computes on, and the answer given back
at the caller's shape.

torch multiplies q, k and v as batched matrices: every dim in front of (L, E) broadcasts, and q, k, v may have any
rank from 2 up (rank 2 is (L, E), rank 3 (H, L, E), rank 5 (B, X, H, L, E), ...); the output has the largest rank
and the broadcast shape. Here the dims in front of the heads become one batch dim (views where the layout allows), a
size-1 batch or head dim is broadcast (expanded, not copied), with enable_gqa key and value heads of two counts are
repeated (copied) to one, and heads that do not broadcast are left for `protocol.validate` to name. The mask follows
the same batch dims; one that would enlarge the output is left as it is, and validate refuses it, as torch does.

    to_bhle(query, key, value, attn_mask, enable_gqa, cast) -> Call(query, key, value, attn_mask, restore, given, ...)
    call.checked(check)                  # check(); its ValueError names the caller's shapes, not the (B, H, L, E)
    autocast(query, key, value, attn_mask) -> ((q, k, v, mask) as torch.autocast casts them, its device or None)
    call.wrap(fn)                        # a prepared closure at the caller's shape (and with autocast off)
    shape_text(tensor) -> "(2, 3, 8, 16)"       # how every shape error writes a shape
    qkv_text(q, k, v) -> "query (...), key (...), value (...)"   # how every shape error ends
    in_func_transform() -> bool          # whether torch.func's vmap, grad or jvp transforms this call
"""
from __future__ import annotations

import contextlib
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Call:
    """The call's tensors as (B, H, L, E), or as given where they are not tensors (validate names those)."""

    query: Any
    key: Any
    value: Any
    attn_mask: Any
    restore: Callable[[torch.Tensor], torch.Tensor]  # (B, H, Lq, Ev) -> the caller's rank and batch dims
    given: str = ""  # where q, k and v were reshaped: their shapes as the caller gave them, as the errors write them
    mask_given: str = ""  # and then the mask's and the scores' shapes: "attn_mask (7, 9) ... the scores (6, 9)"
    autocast: str | None = None  # the device whose autocast cast q, k, v (`autocast`): computed with it off

    def autocast_off(self) -> Any:
        """The context the call computes in: autocast off where it cast the inputs, else no change."""
        return torch.autocast(self.autocast, enabled=False) if self.autocast else contextlib.nullcontext()

    def wrap(self, fn: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
        """`fn` (a prepared closure) as the caller calls it: the answer at the caller's shape, computed with autocast
        off where it cast the inputs; `fn` itself where neither applies. Keeps `fn`'s attributes (a library's `op`)."""
        if self.restore is _same and self.autocast is None:
            return fn

        def call() -> torch.Tensor:
            with self.autocast_off():
                return self.restore(fn())

        call.__dict__.update(fn.__dict__)
        return call

    def checked(self, check: Callable[[], Any]) -> Any:
        """check() (validate, the support checks); a ValueError that names q's, k's and v's (B, H, L, E) shapes
        (and the mask's) names the caller's instead, so that an error about a 3-D or 5-D call shows the shapes the
        caller passed."""
        try:
            return check()
        except ValueError as exc:
            if not self.given or type(exc) is not ValueError:  # q, k or v no tensor: validate's words as they are
                raise
            computed = qkv_text(self.query, self.key, self.value)
            if computed not in str(exc):
                raise
            text = str(exc).replace(computed, self.given)
            if self.mask_given and isinstance(self.attn_mask, torch.Tensor):
                q, k = self.query, self.key
                target = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
                text = text.replace(f"attn_mask {shape_text(self.attn_mask)} does not broadcast to (B, Hq, Lq, Lk) = "
                                    f"({', '.join(map(str, target))})", self.mask_given)
            raise ValueError(text) from None


def autocast(query: object, key: object, value: object, attn_mask: object) -> tuple[tuple, str | None]:
    """The arguments as torch.autocast hands them to SDPA (a lower-precision op on the CPU and on CUDA), and the device
    whose autocast is on: where it is on for the query's device, each floating tensor but fp64 on that device cast to
    autocast's dtype (the call then computes with autocast off, as torch's kernels do for inputs of that dtype);
    elsewhere the arguments as given and None."""
    args = (query, key, value, attn_mask)
    device = query.device.type if isinstance(query, torch.Tensor) else None
    if device not in ("cpu", "cuda") or not torch.is_autocast_enabled(device):
        return args, None
    dtype = torch.get_autocast_dtype(device)
    return tuple(t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64
                 and t.device.type == device else t for t in args), device


def _same(out: torch.Tensor) -> torch.Tensor:
    return out


def shape_text(t: torch.Tensor) -> str:
    """A tensor's shape as the errors write it: (2, 3, 8, 16)."""
    return "(" + ", ".join(str(s) for s in t.shape) + ")"


def qkv_text(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> str:
    """q's, k's and v's shapes as every shape error ends them (protocol.validate; Call.checked replaces them)."""
    return f"query {shape_text(query)}, key {shape_text(key)}, value {shape_text(value)}"


class QKVText:
    """qkv_text(query, key, value), made when formatted (into an error's message), not when made."""

    def __init__(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
        self.tensors = (query, key, value)

    def __format__(self, spec: str) -> str:
        return qkv_text(*self.tensors)


def _heads(hq: int, hk: int, hv: int, gqa: bool) -> tuple[int, int, int]:
    """The heads q, k and v are expanded to: broadcast where a size-1 side allows (with enable_gqa, only between k
    and v); as they are otherwise, for validate to name. With enable_gqa, key and value heads of two counts that
    each divide Hq are both repeated to their least common multiple: query head i reads key head i // (Hq / Hk) and
    value head i // (Hq / Hv), as torch's math kernel answers (its fused kernels refuse two counts)."""
    if gqa and hk != hv and hk > 1 and hv > 1 and hq % hk == 0 and hq % hv == 0:
        return hq, math.lcm(hk, hv), math.lcm(hk, hv)
    sizes = (hk, hv) if gqa else (hq, hk, hv)
    try:
        h = torch.broadcast_shapes(*((s,) for s in sizes))[0]
    except RuntimeError:
        return hq, hk, hv
    return (hq, h, h) if gqa else (h, h, h)


def _repeated(t: torch.Tensor, lead: tuple[int, ...], heads: int) -> torch.Tensor:
    """`t` (..., H, L, E) as (B, heads, L, E): each of its H heads repeated heads / H times in place (a size-1 head
    dim broadcast, as a view where the layout allows); H as it is where it does not divide `heads`."""
    h = t.shape[-3]
    times = heads // h if h and heads % h == 0 else 1
    return t.unsqueeze(-3).expand(*lead, h, times, *t.shape[-2:]).reshape(math.prod(lead), h * times, *t.shape[-2:])


def _qk_scores(q: torch.Tensor, k: torch.Tensor, gqa: bool) -> tuple[int, ...] | None:
    """The shape of q·kᵀ as torch's call makes it, a mask then added into it in place: q's and k's leading dims
    broadcast (with enable_gqa, k's heads repeated to q's), not value's; None where they do not broadcast."""
    k_lead = (*k.shape[:-3], q.shape[-3]) if gqa else tuple(k.shape[:-2])
    try:
        return (*torch.broadcast_shapes(q.shape[:-2], k_lead), q.shape[-2], k.shape[-2])
    except RuntimeError:
        return None  # validate names the sizes


def _grows(mask: tuple[int, ...], scores: tuple[int, ...]) -> bool:
    """Whether a mask of this shape broadcasts to more than `scores` (more dims, or a size where scores have 1);
    False where it does not broadcast at all, which validate names."""
    try:
        return tuple(torch.broadcast_shapes(mask, scores)) != tuple(scores)
    except RuntimeError:
        return False


def to_bhle(query: object, key: object, value: object, attn_mask: object, enable_gqa: object,
            cast: bool = False) -> Call:
    """q, k, v (and the mask) as (B, H, L, E), with `restore` for the answer; inputs that are already so, with one
    batch size and heads torch would not broadcast, come back as they are. ValueError for a tensor below rank 2,
    for batch dims that do not broadcast and for a mask of more dims than the scores (torch refuses all three)."""
    device = None
    if cast:  # a drop-in call: under torch.autocast, the dtype torch's SDPA gets there
        (query, key, value, attn_mask), device = autocast(query, key, value, attn_mask)
    named = (("query", query), ("key", key), ("value", value))
    if not all(isinstance(t, torch.Tensor) for _, t in named):
        return Call(query, key, value, attn_mask, _same)  # validate names what is not a tensor
    q, k, v = query, key, value
    assert isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)
    for name, t in (*named, ("attn_mask", attn_mask)):
        if isinstance(t, torch.Tensor) and (t.is_nested or t.layout != torch.strided):  # each kernel failed its own way
            raise ValueError(f"sdpa: {name} is a {'nested' if t.is_nested else str(t.layout).removeprefix('torch.')} "
                             "tensor; the implementations take dense (strided) tensors")
    for name, t in named:
        if t.dim() < 2:
            raise ValueError(f"sdpa: {name} must have at least 2 dims (..., L, E); got {t.dim()}-D shape "
                             f"{shape_text(t)}")
    top = max(q.dim(), k.dim(), v.dim())
    if isinstance(attn_mask, torch.Tensor) and attn_mask.dim() > top:  # torch adds it into the scores in place
        raise ValueError(f"sdpa: attn_mask {shape_text(attn_mask)} has {attn_mask.dim()} dims, more than the {top} "
                         f"of the attention's scores (the rank of query, key and value); {qkv_text(q, k, v)}")
    gqa = enable_gqa is True
    if gqa and min(q.dim(), k.dim(), v.dim()) < 3:  # torch's own call fails with an IndexError at dim -3
        raise ValueError(f"sdpa: enable_gqa=True needs a heads dim (..., H, L, E) on query, key and value; "
                         f"{qkv_text(q, k, v)}")
    scores = _qk_scores(q, k, gqa)
    if isinstance(attn_mask, torch.Tensor) and scores is not None and _grows(attn_mask.shape, scores):
        raise ValueError(f"sdpa: attn_mask {shape_text(attn_mask)} would enlarge the scores of query and key "
                         f"({', '.join(map(str, scores))}), which it is added into in place (value's batch dims do "
                         f"not count); {qkv_text(q, k, v)}")
    heads = _heads(q.shape[-3] if q.dim() > 2 else 1, k.shape[-3] if k.dim() > 2 else 1,
                   v.shape[-3] if v.dim() > 2 else 1, gqa)
    if q.dim() == k.dim() == v.dim() == 4 and q.shape[0] == k.shape[0] == v.shape[0] and \
            heads == (q.shape[1], k.shape[1], v.shape[1]):
        return Call(q, k, v, attn_mask, _same, autocast=device)
    padded = [t[(None,) * (max(top, 4) - t.dim())] for _, t in named]
    try:
        lead = tuple(torch.broadcast_shapes(*(t.shape[:-3] for t in padded)))
    except RuntimeError:
        raise ValueError("sdpa: batch sizes differ and do not broadcast: "
                         + ", ".join(f"{n} {shape_text(t)}" for (n, _), t in zip(named, padded))) from None
    b = math.prod(lead)
    q4, k4, v4 = (_repeated(t, lead, h) for t, h in zip(padded, heads))
    mask = attn_mask
    if isinstance(mask, torch.Tensor) and 2 <= mask.dim() <= len(lead) + 3:
        m = mask[(None,) * (len(lead) + 3 - mask.dim())]
        try:
            mask = m.expand(*lead, *m.shape[-3:]).reshape(b, *m.shape[-3:]) if any(s != 1 for s in m.shape[:-3]) \
                else m.reshape(1, *m.shape[-3:])
        except RuntimeError:
            mask = attn_mask  # does not broadcast to the output: validate says so

    def restore(out: torch.Tensor) -> torch.Tensor:
        full = out.reshape(*lead, *out.shape[1:])
        return full[(0,) * (full.dim() - top)] if full.dim() > top else full

    scores = (*lead, heads[0], q.shape[-2], k.shape[-2])[max(0, 4 - top):]  # as the caller's rank has them
    mask_given = isinstance(attn_mask, torch.Tensor) and \
        f"attn_mask {shape_text(attn_mask)} does not broadcast to the scores ({', '.join(map(str, scores))})"
    return Call(q4, k4, v4, mask, restore, qkv_text(q, k, v), mask_given or "", device)


def plain_number(x: Any) -> Any:
    """`dropout_p` or `scale` as a Python float where torch takes it as one: a NumPy scalar (np.float32, np.int64) or
    a 0-d tensor of a real dtype that does not require grad, and a Python int (2**70 past int64, as torch reads it
    too), and a bool (torch reads True as 1.0; flex's generated code took True as a name). Anything else is returned
    as it is, for `validate` to refuse."""
    if isinstance(x, bool):
        return float(x)
    if isinstance(x, torch.Tensor):
        if x.dim() == 0 and not x.is_complex() and not x.requires_grad:
            return float(x)
        return x
    if not isinstance(x, (bool, float)) and isinstance(x, numbers.Real):
        try:
            return float(x)
        except OverflowError:  # past any float: `validate` says it is not finite
            return math.inf if x > 0 else -math.inf
    return x


def in_func_transform() -> bool:
    """Whether torch.func (vmap, grad, jvp, ...) transforms this call: its tensors are wrappers without storage.
    Never while torch.compile traces a call (dynamo reads the stack as not empty there, in a plain compiled call)."""
    peek = getattr(torch._C._functorch, "peek_interpreter_stack", None)
    return peek is not None and not torch.compiler.is_compiling() and peek() is not None
