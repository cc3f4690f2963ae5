"""Seeded inputs of one case on one device: standard-normal Q, K, V (never zeros), mask and output gradient."""
from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..masks import Structure
from ..protocol import Implementation, SDPAInputs
from ..support import as_reasons
from .grid import Case


@dataclass(frozen=True)
class Inputs:
    """Seeded tensors of one case on one device; `grad_out` is set for the backward modes."""

    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    attn_mask: torch.Tensor | None
    is_causal: bool
    grad_out: torch.Tensor | None
    structure: Structure | None = None  # the mask's structure, when the case names one; attn_mask is its dense form

    @property
    def enable_gqa(self) -> bool:
        return self.query.shape[1] != self.key.shape[1]

    def args(self) -> dict:
        return {"query": self.query, "key": self.key, "value": self.value, "attn_mask": self.attn_mask,
                "is_causal": self.is_causal, "enable_gqa": self.enable_gqa}

    def reasons(self, impl: object) -> list[str]:
        """Why `impl` cannot run these inputs here (empty when it can), asked as `prepare` will call it: with the
        mask's structure for an `Implementation`, whose answer may depend on it (a native form, or none)."""
        name = getattr(impl, "name", repr(impl))  # a plug-in's answer that is no list of str: one TypeError, as ours
        if self.structure is not None and isinstance(impl, Implementation):
            got = impl.not_supported_reasons(SDPAInputs(**self.args(), structure=self.structure))
            return as_reasons(name, "not_supported_reasons", got)
        return as_reasons(name, "unsupported_reasons", impl.unsupported_reasons(**self.args()))  # type: ignore

    def prepare(self, impl: object) -> Callable[[], torch.Tensor]:
        """`impl`'s prepared closure for these inputs. The drop-in arguments, plus the mask's structure for an
        `Implementation` (which may read a native form of it in `prepare_inputs`; plug-ins that only follow the
        protocol get the dense mask alone)."""
        if self.structure is not None and isinstance(impl, Implementation):
            return impl.prepare(**self.args(), structure=self.structure)
        return impl.prepare(**self.args())  # type: ignore[attr-defined]

    def call(self, impl: object) -> torch.Tensor:
        """One call of `impl` on these inputs, as `prepare` would time it (the drop-in call without a structure)."""
        if self.structure is not None and isinstance(impl, Implementation):
            return self.prepare(impl)()
        return impl(**self.args())  # type: ignore[operator]


def make_inputs(case: Case, device: str | torch.device, seed: int = 0) -> Inputs:
    """Standard-normal Q, K, V (never zeros), seeded by the case id so every implementation sees the same data."""
    device = torch.device(device)
    gen = torch.Generator(device=device).manual_seed(seed * 1_000_003 + zlib.crc32(case.id.encode()))
    grad = case.mode != "fwd"

    def randn(*shape: int) -> torch.Tensor:
        t = torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(case.torch_dtype)
        return t.requires_grad_(grad)

    q = randn(case.batch, case.heads_q, case.lq, case.e)  # (B, Hq, Lq, E)
    k = randn(case.batch, case.heads_kv, case.lk, case.e)  # (B, Hkv, Lk, E)
    v = randn(case.batch, case.heads_kv, case.lk, case.ev)  # (B, Hkv, Lk, Ev)
    mask = None
    structure = case.structure()
    if structure is not None:  # built once per case, outside every timed region
        mask = structure.dense(case.batch, case.heads_q, case.torch_dtype, device)
    elif case.mask == "bool":  # keep ~90 % of the keys, broadcast over batch and heads
        mask = torch.rand((case.lq, case.lk), generator=gen, device=device) < 0.9
    elif case.mask == "float":  # an additive bias of order 1
        mask = torch.randn((case.lq, case.lk), generator=gen, device=device).to(case.torch_dtype)
    grad_out = None
    if grad:
        grad_out = torch.randn((case.batch, case.heads_q, case.lq, case.ev), generator=gen, device=device,
                               dtype=torch.float32).to(case.torch_dtype)
    return Inputs(q, k, v, mask, case.causal, grad_out, structure)
