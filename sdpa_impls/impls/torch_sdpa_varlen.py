"""torch_sdpa_varlen: packed documents as a jagged nested tensor, one causal F.scaled_dot_product_attention over them."""
from __future__ import annotations

import logging
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..protocol import Support, SDPAInputs
from ..registry import register
from .torch_sdpa import TorchSDPA, _torch_messages

NEEDS_DOCUMENTS = "needs a packed-documents structure (mask documents or documents-N): it runs each document alone"
_NJT_LOGGER = "torch.nested._internal.sdpa"  # where torch says why no kernel takes nested inputs
_probe_cache: dict[tuple, list[str]] = {}


def offsets(lengths: tuple[int, ...], batch: int, device: torch.device) -> torch.Tensor:
    """Where each document starts in the packed (B·L) tokens, and the end: every batch row holds the same documents."""
    starts = torch.tensor((0, *lengths * batch), dtype=torch.int64).cumsum(0)
    return starts.to(device)


def to_jagged(x: torch.Tensor, offs: torch.Tensor, lengths: tuple[int, ...], heads: int | None = None) -> torch.Tensor:
    """(B, H, L, E) -> a jagged nested tensor (documents, H, j, E) over the packed tokens (a copy).
    `heads`: repeat each of the H heads heads/H times first (GQA's K/V; torch's nested kernels take no enable_gqa).
    The shortest and longest document are given, not left for torch to read back from the device at each call (a
    host sync per tensor on CUDA, inside the timed call where the layout change is part of it)."""
    b, h, n, e = x.shape
    if heads is not None and heads != h:
        x = x.repeat_interleave(heads // h, dim=1)  # query head i reads key/value head i // G
        h = heads
    values = x.transpose(1, 2).reshape(b * n, h, e).contiguous()  # (B·L, H, E), contiguous as torch requires
    return torch.nested.nested_tensor_from_jagged(values, offs, min_seqlen=min(lengths),
                                                  max_seqlen=max(lengths)).transpose(1, 2)


def from_jagged(out: torch.Tensor, batch: int) -> torch.Tensor:
    """The jagged (documents, H, j, Ev) output back to the packed (B, H, L, Ev) layout (a view)."""
    values = out.transpose(1, 2).values()  # (B·L, H, Ev)
    return values.unflatten(0, (batch, -1)).transpose(1, 2)


def jagged_attention(inp: SDPAInputs, offs: torch.Tensor, lengths: tuple[int, ...]) -> torch.Tensor:
    """Causal attention inside every document (`lengths`, starting at `offs`), the documents as one jagged batch."""
    hq = inp.query.shape[1]
    q, k, v = (to_jagged(t, offs, lengths, hq) for t in (inp.query, inp.key, inp.value))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=inp.scale)
    return from_jagged(out, inp.query.shape[0])


def _probe(inp: SDPAInputs) -> list[str]:
    """Run the nested call on two documents of two tokens with the case's dtype, heads, head dims, device and
    grad; torch's own explanation (its nested-SDPA log lines and warnings) when it refuses."""
    q, k, v = inp.query, inp.key, inp.value
    key = (q.device.type, q.dtype, q.shape[1], k.shape[1], q.shape[-1], v.shape[-1], inp.needs_grad)
    if key in _probe_cache:
        return _probe_cache[key]
    small = [t.detach()[:1, :, :4].clone().requires_grad_(inp.needs_grad) for t in (q, k, v)]  # (1, H, 4, E)
    logger, records = logging.getLogger(_NJT_LOGGER), []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    torch_logger = logging.getLogger("torch")  # torch's other warnings while it tries (an fx note on every first
    torch_level = torch_logger.level  # nested call) are not the caller's: `list` printed one on stderr
    torch_logger.setLevel(logging.ERROR)
    reasons: list[str] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                out = jagged_attention(SDPAInputs(*small, scale=inp.scale), offsets((2, 2), 1, q.device), (2, 2))
                if inp.needs_grad:
                    out.sum().backward()
            except RuntimeError as exc:
                said = [r.getMessage().strip() for r in records]
                said = [s for s in said if s and not s.endswith("because:")] + _torch_messages(caught)
                reasons = list(dict.fromkeys(said)) or [str(exc).strip().splitlines()[0]]
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
        torch_logger.setLevel(torch_level)
    _probe_cache[key] = reasons
    return reasons


@register
class TorchVarlen(TorchSDPA):
    name = "torch_sdpa_varlen"
    description = "packed documents as a jagged nested tensor (layout=torch.jagged), one causal SDPA call over them"
    support = Support(devices=frozenset({"cpu", "cuda"}), dropout=False)

    def not_supported_reasons(self, inp: SDPAInputs) -> list[str]:
        reasons = super().not_supported_reasons(inp)
        if inp.structure is None or inp.structure.kind != "documents":
            return [NEEDS_DOCUMENTS, *reasons]
        return reasons

    def library_reasons(self, inp: SDPAInputs) -> list[str]:
        if inp.is_empty:
            return ["a dimension of size 0: no documents to nest"]
        return _probe(inp)  # also without documents (not_supported_reasons says it needs them): where torch's nested
        # SDPA refuses this device or dtype (the CPU: no is_causal), that is why it never runs here, and `list` says so

    def prepare_inputs(self, inp: SDPAInputs) -> Callable[[], torch.Tensor]:
        lengths = inp.structure.lengths
        offs = offsets(lengths, inp.query.shape[0], inp.query.device)
        if inp.needs_grad:  # the layout change inside the call: autograd builds a fresh graph each call
            return lambda: jagged_attention(inp, offs, lengths)
        hq, b = inp.query.shape[1], inp.query.shape[0]
        q, k, v = (to_jagged(t, offs, lengths, hq) for t in (inp.query, inp.key, inp.value))
        scale = inp.scale
        return lambda: from_jagged(F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale), b)

    def forward(self, inp: SDPAInputs) -> torch.Tensor:
        return self.prepare_inputs(inp)()
