"""Mask structures that models pass (sliding window, packed documents, prefix-LM, ALiBi, padded decode batches):
small frozen values, parsed from the words a case uses, from which the dense `attn_mask` is derived.

Every structure is a rule over (batch row b, query row i, key j), top-left aligned like `is_causal`, except
`padding`, whose query rows are the last Lq tokens of each batch row (its causal diagonal is at the bottom right):

| spec         | keys query i of batch row b sees                                  | dense attn_mask          |
|--------------|-------------------------------------------------------------------|--------------------------|
| `window-W`   | i - W < j <= i (W keys back, itself included)                     | bool (Lq, Lk)            |
| `documents`, `documents-N` | start(doc of i) <= j <= i (causal inside each document) | bool (Lq, Lk)          |
| `prefix-P`   | j < P or j <= i (bidirectional over the prefix, causal after it)  | bool (Lq, Lk)            |
| `alibi`      | every key, with the bias -slope_h · abs(i - j)                    | float (Hq, Lq, Lk)       |
| `padding`    | j < n_b - Lq + i + 1 (key padding; bottom-right causal for Lq > 1) | bool (B, 1, Lq, Lk)      |

Document lengths (mean N, default L/8) and KV lengths (L/32 to L, the longest = L) are seeded by the structure, Lk
and the batch (`resolve`), not by the run's seed, so a case always has the same structure and the same FLOP count.
"""
from __future__ import annotations

import math
import random
import zlib
from dataclasses import dataclass

import torch

STRUCTURES = ("window", "documents", "prefix", "alibi", "padding")
_WITH_PARAM = {"window": "W", "documents": "N", "prefix": "P"}


@dataclass(frozen=True)
class MaskSpec:
    """What a case's `mask` word says: a kind and its parameter (None where the kind takes none or it is unset)."""

    kind: str
    param: int | None = None

    @property
    def word(self) -> str:
        return self.kind if self.param is None else f"{self.kind}-{self.param}"

    @property
    def id_token(self) -> str:
        """The word in a case id: `window512`, `documents1024`, `prefix256`, `alibi`, `padding`."""
        return self.word.replace("-", "")


def parse(word: str) -> MaskSpec | None:
    """The structure a mask word names, or None for words that are not structures ("none", "bool", "float").
    ValueError for a structure word with a bad parameter."""
    kind, _, param = word.partition("-")
    if kind not in STRUCTURES:
        return None
    if not param:
        if kind in ("window", "prefix"):
            raise ValueError(f"mask {word!r}: {kind} needs its size, e.g. {kind}-256")
        return MaskSpec(kind)
    if kind not in _WITH_PARAM:
        raise ValueError(f"mask {word!r}: {kind} takes no parameter")
    try:
        value = int(param)
    except ValueError:
        raise ValueError(f"mask {word!r}: {_WITH_PARAM[kind]} must be a whole number") from None
    least = 0 if kind == "prefix" else 1
    if value < least or str(value) != param:
        raise ValueError(f"mask {word!r}: {_WITH_PARAM[kind]} must be a whole number >= {least}")
    return MaskSpec(kind, value)


def check_shape(spec: MaskSpec, lq: int, lk: int, batch: int) -> None:
    """ValueError when the structure cannot apply to a case of this shape."""
    if spec.kind == "prefix" and spec.param is not None and spec.param > lk:
        raise ValueError(f"mask {spec.word!r}: the prefix P={spec.param} is longer than the keys (Lk={lk})")
    if spec.kind == "documents" and lq != lk:
        raise ValueError(f"mask {spec.word!r}: packed documents need Lq == Lk (self-attention); got Lq={lq}, Lk={lk}")
    if spec.kind == "padding":
        if batch < 2:
            raise ValueError(f"mask {spec.word!r}: a padded batch needs batch >= 2 (a KV length per row); got {batch}")
        if lq > lk:
            raise ValueError(f"mask {spec.word!r}: decode queries are the last Lq of Lk tokens; got Lq={lq} > Lk={lk}")


@dataclass(frozen=True)
class Structure:
    """A resolved structure: the spec plus everything derived from it (lengths, slopes) for one shape.

    `lengths`: document lengths (documents, summing to Lk) or KV lengths per batch row (padding);
    `slopes`: ALiBi's per-query-head slopes. `window` and `prefix` read `spec.param`.
    """

    spec: MaskSpec
    lq: int
    lk: int
    lengths: tuple[int, ...] = ()
    slopes: tuple[float, ...] = ()

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def is_bool(self) -> bool:
        return self.kind != "alibi"

    def key_range(self, b: int, i: int) -> tuple[int, int]:
        """[lo, hi): the keys query row i of batch row b may see (one interval for every structure)."""
        lk = self.lk
        if self.kind == "window":
            return max(0, i - self.spec.param + 1), min(lk, i + 1)
        if self.kind == "documents":
            start = 0
            for n in self.lengths:
                if i < start + n:
                    return start, i + 1
                start += n
            return 0, 0
        if self.kind == "prefix":
            return 0, min(lk, max(self.spec.param, i + 1))
        if self.kind == "padding":
            n = self.lengths[b]
            return 0, max(0, min(n, n - self.lq + i + 1))
        return 0, lk  # alibi: a bias, no key is masked

    def pairs(self, batch: int, causal: bool) -> int:
        """Unmasked (query, key) pairs of one head, summed over the batch; `causal` ANDs top-left causal."""
        if self.kind == "documents":  # causal inside each document: n(n+1)/2 pairs each (top-left causal adds nothing)
            return batch * sum(n * (n + 1) // 2 for n in self.lengths)
        rows = range(batch) if self.kind == "padding" else range(1)
        total = 0
        for b in rows:
            for i in range(self.lq):
                lo, hi = self.key_range(b, i)
                if causal:
                    hi = min(hi, i + 1)
                total += max(0, hi - lo)
        return total if self.kind == "padding" else total * batch

    def dense(self, batch: int, heads_q: int, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
        """The dense attn_mask `F.scaled_dot_product_attention` takes for this structure (shapes: module doc)."""
        lq, lk = self.lq, self.lk
        i = torch.arange(lq, device=device)[:, None]  # (Lq, 1)
        j = torch.arange(lk, device=device)[None, :]  # (1, Lk)
        if self.kind == "window":
            return (j <= i) & (j > i - self.spec.param)
        if self.kind == "prefix":
            return (j <= i) | (j < self.spec.param)
        if self.kind == "documents":
            doc = torch.repeat_interleave(torch.arange(len(self.lengths), device=device),
                                          torch.tensor(self.lengths, device=device))  # (L,) document of each token
            return (doc[:, None] == doc[None, :]) & (j <= i)
        if self.kind == "padding":
            n = torch.tensor(self.lengths, device=device)[:, None, None, None]  # (B, 1, 1, 1)
            return j < torch.minimum(n, n - lq + i + 1)  # (B, 1, Lq, Lk)
        distance = (i - j).abs().float()  # alibi: (Lq, Lk) in fp32, then one head at a time into the mask dtype
        out = torch.empty((len(self.slopes), lq, lk), dtype=dtype, device=device)  # (Hq, Lq, Lk)
        for h, slope in enumerate(self.slopes):
            out[h] = distance * -slope
        return out

    def describe(self) -> str:
        """One line for a report: what the structure keeps, with its seeded lengths or slopes summarized."""
        if self.kind == "window":
            return f"sliding window: each query sees itself and the {self.spec.param - 1} keys before it"
        if self.kind == "prefix":
            return f"prefix-LM: every query sees the first {self.spec.param} keys, causal after them"
        if self.kind == "alibi":
            return f"ALiBi bias -slope·|i - j| per query head, slopes {self.slopes[0]:.3g} to {self.slopes[-1]:.3g}"
        n = self.lengths
        span = f"{min(n)} to {max(n)}, mean {sum(n) / len(n):.0f}"
        if self.kind == "documents":
            return f"{len(n)} packed documents of {span} tokens, causal inside each"
        queries = "the query is each row's last token" if self.lq == 1 else (
            f"the {self.lq} queries are each row's last tokens (bottom-right causal)")
        return f"{len(n)} rows of {span} KV tokens padded to {self.lk}; {queries}"

    def sliced(self, batch: int, heads_q: int) -> Structure:
        """The structure of the first `batch` rows and `heads_q` query heads (a gradient-check slice)."""
        lengths = self.lengths[:batch] if self.kind == "padding" else self.lengths
        return Structure(self.spec, self.lq, self.lk, lengths, self.slopes[:heads_q])


def alibi_slopes(heads: int) -> tuple[float, ...]:
    """ALiBi's geometric slopes (Press et al., 2022): 2^(-8k/n) for k = 1..n with n the power of two <= heads;
    the heads past n take the odd terms of the sequence for 2n, as the paper's reference code does."""
    n = 2 ** int(math.floor(math.log2(heads))) if heads else 0
    slopes = [2.0 ** (-8.0 * k / n) for k in range(1, n + 1)]
    slopes += [2.0 ** (-4.0 * k / n) for k in range(1, 2 * (heads - n), 2)]
    return tuple(slopes[:heads])


def document_lengths(total: int, mean: int, rng: random.Random) -> tuple[int, ...]:
    """Seeded lengths, uniform in [1, 2·mean - 1] (so of mean `mean`), the last cut to make them sum to `total`."""
    out: list[int] = []
    left = total
    while left > 0:
        n = min(left, rng.randint(1, max(1, 2 * mean - 1)))
        out.append(n)
        left -= n
    return tuple(out)


def kv_lengths(batch: int, lk: int, rng: random.Random) -> tuple[int, ...]:
    """Seeded KV lengths per batch row, uniform in [Lk/32, Lk]; one row (a seeded one) is the longest, Lk."""
    lo = max(1, lk // 32)
    out = [rng.randint(lo, lk) for _ in range(batch)]
    out[rng.randrange(batch)] = lk
    return tuple(out)


def resolve(spec: MaskSpec, lq: int, lk: int, batch: int, heads_q: int) -> Structure:
    """The structure of `spec` for one shape. Its lengths are seeded by what they depend on: the structure, Lk and
    the batch, never the dtype, head dim, heads, Lq or mode, so every case of one shape sees the same documents
    or KV lengths and a ratio between two such cases compares like with like."""
    check_shape(spec, lq, lk, batch)
    rng = random.Random(zlib.crc32(f"{spec.word}-Lk{lk}-B{batch}".encode()))
    if spec.kind == "documents":
        return Structure(spec, lq, lk, lengths=document_lengths(lk, spec.param or max(1, lk // 8), rng))
    if spec.kind == "padding":
        return Structure(spec, lq, lk, lengths=kv_lengths(batch, lk, rng))
    if spec.kind == "alibi":
        return Structure(spec, lq, lk, slopes=alibi_slopes(heads_q))
    return Structure(spec, lq, lk)


def kept_for_backward(mask: torch.Tensor | None) -> torch.Tensor | None:
    """The mask as a backward can keep it: one made under torch.inference_mode (a cached causal or padding mask)
    cannot be saved for backward, so it is copied (torch's math backend keeps a mask of its own too)."""
    return mask.clone() if mask is not None and mask.is_inference() else mask
