"""Which of xformers' attention-bias classes states a mask structure natively, as plain data (no xformers import).

| structure      | xformers.ops.fmha.attn_bias class                                   | inputs            |
|----------------|---------------------------------------------------------------------|-------------------|
| `window-W`     | `LocalAttentionFromBottomRightMask(window_left=W-1, window_right=0)` | (B, L, H, E)      |
| `documents`    | `BlockDiagonalCausalMask.from_seqlens(lengths × B)`                 | packed (1, B·L, H, E) |
| `padding`      | `BlockDiagonalCausalWithOffsetPaddedKeysMask.from_seqlens(...)`     | packed (1, B·Lq, H, E), keys (1, B·Lk, H, E) |
| `prefix-P`, `alibi` | none: the dense bias tensor                                    |                   |
"""
from __future__ import annotations

from dataclasses import dataclass

from ..masks import Structure


@dataclass(frozen=True)
class NativeBias:
    """One xformers attention bias: `attn_bias.<cls>.<constructor>(**kwargs)` (`constructor` "" = the class itself).

    `packed`: the batch goes to xformers as one row of concatenated sequences, (1, B·Lq, H, E) and (1, B·Lk, H, E),
    its variable-length convention; the output comes back as (1, B·Lq, H, Ev)."""

    cls: str
    constructor: str
    kwargs: tuple[tuple[str, object], ...]
    packed: bool

    def build(self, attn_bias_module: object) -> object:
        """The bias object, from xformers' `fmha.attn_bias` module."""
        cls = getattr(attn_bias_module, self.cls)
        make = getattr(cls, self.constructor) if self.constructor else cls
        return make(**dict(self.kwargs))


def native_bias(structure: Structure | None, batch: int, lq: int, lk: int, is_causal: bool) -> NativeBias | None:
    """xformers' own bias class for `structure` on this shape, or None where none states exactly the dense mask
    (together with top-left `is_causal`), so the caller keeps the dense bias tensor.

    - window: xformers aligns local attention at the bottom right; ours is top-left, and they agree when Lq == Lk.
      Top-left causal adds nothing (the window is causal already).
    - documents: block-diagonal causal over the packed batch (every row holds the same documents).
    - padding: per row, Lq queries (the last Lq tokens) over the first n_b of Lk padded keys, causal from the
      bottom right; top-left causal would cut it further (dense then). Only when every n_b >= Lq: a query with
      no key at all must return zeros, which xformers' kernels are not known to promise.
    """
    if structure is None:
        return None
    kind = structure.kind
    if kind == "window" and lq == lk:
        return NativeBias("LocalAttentionFromBottomRightMask", "",
                          (("window_left", structure.spec.param - 1), ("window_right", 0)), packed=False)
    if kind == "documents":
        return NativeBias("BlockDiagonalCausalMask", "from_seqlens",
                          (("q_seqlen", list(structure.lengths) * batch),), packed=True)
    if kind == "padding" and not is_causal and min(structure.lengths) >= lq:
        return NativeBias("BlockDiagonalCausalWithOffsetPaddedKeysMask", "from_seqlens",
                          (("q_seqlen", [lq] * batch), ("kv_padding", lk), ("kv_seqlen", list(structure.lengths))),
                          packed=True)
    return None
