"""What an implementation can run, declared as data (`Support`), and the sentences a call it cannot run gets."""
from __future__ import annotations

import numbers
from collections.abc import Iterable
from dataclasses import dataclass, fields
import torch

from .callshape import in_func_transform
from .dtypes import short_name

ALL_HALF_AND_FLOAT = frozenset({torch.float32, torch.float16, torch.bfloat16})
WITH_FP64 = ALL_HALF_AND_FLOAT | {torch.float64}  # a drop-in's dtypes where fp64 is computed as fp64 (no grid point)
MASK_KINDS = frozenset({"none", "bool", "float"})
_EXAMPLES = {"devices": "{'cuda'}", "dtypes": "{torch.float16, torch.bfloat16}", "masks": "{'none', 'bool'}"}


@dataclass(frozen=True)
class Support:
    """What an implementation can run, as data; `reasons` turns a call into sentences of what is not. Each field is
    checked as it is given (TypeError or ValueError naming it), and a set of any kind is kept as a frozenset."""

    devices: frozenset[str] = frozenset({"cpu", "cuda"})
    dtypes: frozenset[torch.dtype] = ALL_HALF_AND_FLOAT
    max_head_dim: int | None = None
    head_dim_multiple: int = 1  # E and Ev must be multiples of this (a kernel that neither pads nor checks them)
    masks: frozenset[str] = MASK_KINDS
    dropout: bool = False
    backward: bool = True
    mask_grad: bool = False  # a float attn_mask that requires grad (a learned bias) gets its gradient
    func_transforms: bool = True  # runs under torch.func's vmap, grad and jvp (whose tensors have no storage)

    def __post_init__(self) -> None:
        """A wrong field is told here, where the implementation declares it, not as a wrong reason at every call; a
        frozenset of each set, so that a Support hashes and compares."""
        for name, kind, what in (("devices", str, "device types"), ("dtypes", torch.dtype, "torch dtypes"),
                                 ("masks", str, "mask kinds")):
            given = getattr(self, name)
            items = None if isinstance(given, (str, bytes)) else _items(given, name)
            if items is None or not all(isinstance(x, kind) for x in items):
                raise TypeError(f"Support({name}=...) takes a set of {what}, e.g. {_EXAMPLES[name]}; got {given!r}")
            object.__setattr__(self, name, frozenset(items))
        wrong = sorted(d for d in self.devices if not _device_type(d))
        if wrong:
            raise ValueError(f"Support(devices=...): {', '.join(map(repr, wrong))} is no device type (cpu, cuda, "
                             "...: torch.device(...).type, without an index)")
        if not self.masks <= MASK_KINDS:
            raise ValueError(f"Support(masks=...): {', '.join(sorted(self.masks - MASK_KINDS))} is no mask kind "
                             f"(the kinds: {', '.join(sorted(MASK_KINDS))})")
        for name, least, none_ok in (("max_head_dim", 1, True), ("head_dim_multiple", 1, False)):
            given = getattr(self, name)
            if not (given is None and none_ok) and (not _whole(given) or given < least):
                raise ValueError(f"Support({name}=...) takes a whole number >= {least}"
                                 f"{' or None' if none_ok else ''}; got {given!r}")
        for f in fields(self):
            given = getattr(self, f.name)
            if f.type == "bool" and not (isinstance(given, bool) or type(given).__name__ in ("bool_", "bool")):
                raise TypeError(f"Support({f.name}=...) takes True or False; got {given!r}")

    def reasons(self, inp: SDPAInputs) -> list[str]:  # noqa: F821  (protocol's, which imports this module)
        out: list[str] = []
        dev = inp.query.device.type
        if dev not in self.devices:
            out.append(f"device={dev} (supported: {', '.join(sorted(self.devices))})")
        if inp.query.dtype not in self.dtypes:
            names = ", ".join(sorted(short_name(d) for d in self.dtypes))
            out.append(f"dtype={short_name(inp.query.dtype)} (supported: {names})")
        head = max(inp.query.shape[-1], inp.value.shape[-1])
        if self.max_head_dim is not None and head > self.max_head_dim:
            out.append(f"head dim {head} > {self.max_head_dim}")
        m = self.head_dim_multiple
        if inp.query.shape[-1] % m or inp.value.shape[-1] % m:
            out.append(f"head dim E={inp.query.shape[-1]}, Ev={inp.value.shape[-1]} (supported: multiples of {m})")
        if inp.mask_kind not in self.masks:
            out.append(f"attn_mask of kind {inp.mask_kind} (supported: {', '.join(sorted(self.masks))})")
        if inp.dropout_p > 0 and not self.dropout:
            out.append(f"dropout_p={inp.dropout_p} (this implementation has no dropout)")
        if inp.needs_grad and not self.backward:
            out.append("backward (inputs require grad; this implementation is forward-only)")
        if inp.mask_needs_grad and not self.mask_grad:
            out.append("attn_mask requires grad (a learned bias; this implementation computes no gradient for it)")
        if not self.func_transforms and in_func_transform():
            out.append("inside torch.func's vmap, grad or jvp (this implementation runs only outside them)")
        return out


def _whole(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _device_type(name: str) -> bool:
    try:
        return torch.device(name).type == name
    except (RuntimeError, ValueError):
        return False


def _items(given: object, name: str) -> list:
    try:
        return list(given)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(f"Support({name}=...) takes a set; got {given!r}") from None


def as_reasons(impl_name: str, method: str, got: object) -> list[str]:
    """An implementation's answer from `method` (library_reasons, not_supported_reasons, unsupported_reasons) as the
    list of reasons it is: None and an empty list, tuple or generator mean it runs the call; anything else that is not
    an iterable of str (a bare str is one: taken one character a reason) is a TypeError naming the implementation."""
    if got is None:
        return []
    if isinstance(got, Iterable) and not isinstance(got, (str, bytes)):
        kind, got = type(got).__name__, list(got)  # a generator's reasons too, read once
        wrong = next((r for r in got if not isinstance(r, str)), None)
        if wrong is None:
            return got
        what = f"a {kind} holding a {type(wrong).__name__} ({wrong!r:.60})"
    else:
        what = f"a {type(got).__name__} ({got!r:.60})"
    raise TypeError(f"{impl_name}: {method} returned {what}: it should return a list of strings, one sentence a "
                    "reason (empty, or None, when it runs the call)")
