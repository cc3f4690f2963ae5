"""The benchmark grid: frozen Case rows and named presets, declared once, append-only; shards of a preset."""
from __future__ import annotations

import functools
import itertools
import numbers
import os
from dataclasses import asdict, dataclass

import numpy as np
import torch

from .. import masks
from ..dtypes import DTYPES

MODES = ("fwd", "bwd", "fwd+bwd")
MASKS = ("none", "bool", "float")  # no mask, a random bool mask, a random float bias; or a structure (masks.py)
PRESET_ENV = "SDPA_BENCH_PRESET"
SIZES = ("lq", "lk", "e", "batch", "heads_q", "heads_kv", "ev")


@dataclass(frozen=True, order=True)
class Case:
    """One point of the grid; `id` is its stable, readable name (e.g. L1024-E64-bf16-causal-fwd).

    `mask`: "none", "bool" (random, ~90 % kept), "float" (a random bias), or a structure that models pass:
    "window-W", "documents" / "documents-N", "prefix-P", "alibi", "padding" (`sdpa_impls.masks`).
    """

    lq: int
    lk: int
    e: int
    dtype: str = "fp32"
    causal: bool = False
    mode: str = "fwd"
    mask: str = "none"
    batch: int = 1
    heads_q: int = 8
    heads_kv: int = 8
    ev: int = 0  # 0 means "same as e"

    def __post_init__(self) -> None:
        for name in SIZES:  # a whole number of at least 1 (ev: 0 is "same as e"); a NumPy integer becomes an int
            value, least = getattr(self, name), 0 if name == "ev" else 1
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
                raise ValueError(f"Case {name}={value!r} is not a whole number of at least {least}")
            object.__setattr__(self, name, int(value))
        if not isinstance(self.causal, (bool, np.bool_)):
            raise ValueError(f"Case causal={self.causal!r} is not True or False")
        object.__setattr__(self, "causal", bool(self.causal))  # a NumPy bool too
        for name in ("dtype", "mode", "mask"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"Case {name}={getattr(self, name)!r} is not a name")
        if self.dtype not in DTYPES:
            raise ValueError(f"Case dtype {self.dtype!r} is not one of {sorted(DTYPES)}")
        if self.mode not in MODES:
            raise ValueError(f"Case mode {self.mode!r} is not one of {MODES}")
        if self.mask not in MASKS:
            spec = masks.parse(self.mask)  # ValueError for a structure with a bad parameter
            if spec is None:
                raise ValueError(f"Case mask {self.mask!r} is not one of {MASKS} nor a structure: window-W, "
                                 "documents, documents-N, prefix-P, alibi, padding")
            masks.check_shape(spec, self.lq, self.lk, self.batch)
        if self.heads_q % self.heads_kv:
            raise ValueError(f"Case heads_q={self.heads_q} is not a multiple of heads_kv={self.heads_kv}")
        if self.ev == 0:
            object.__setattr__(self, "ev", self.e)

    @property
    def id(self) -> str:
        parts = [f"L{self.lq}" if self.lq == self.lk else f"Lq{self.lq}-Lk{self.lk}", f"E{self.e}"]
        if self.ev != self.e:
            parts.append(f"Ev{self.ev}")
        parts.append(self.dtype)
        if self.causal:
            parts.append("causal")
        if self.mask in ("bool", "float"):
            parts.append(f"{self.mask}mask")
        if (self.batch, self.heads_q, self.heads_kv) != (1, 8, 8):
            parts.append(f"B{self.batch}-H{self.heads_q}" + (f"kv{self.heads_kv}" if self.gqa else ""))
        if self.mask_spec is not None:
            parts.append(self.mask_spec.id_token)
        parts.append(self.mode)
        return "-".join(parts)

    @property
    def gqa(self) -> bool:
        return self.heads_q != self.heads_kv

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def mask_spec(self) -> masks.MaskSpec | None:
        """The mask structure this case names, or None (no mask, or a random one)."""
        return None if self.mask in MASKS else masks.parse(self.mask)

    def structure(self) -> masks.Structure | None:
        """The resolved structure (`masks.resolve`: the same lengths for every case of one shape), or None."""
        return _structure(self)

    def pairs(self) -> int:
        """Query-key pairs that are computed, in one head summed over the batch: all, or exactly the unmasked ones
        under top-left causal and the mask structure (a random mask counts as all)."""
        structure = self.structure()
        if structure is not None:
            return structure.pairs(self.batch, self.causal)
        if not self.causal:
            return self.batch * self.lq * self.lk
        return self.batch * (sum(min(i + 1, self.lk) for i in range(self.lq)) if self.lq <= self.lk else (
            self.lk * (self.lk + 1) // 2 + (self.lq - self.lk) * self.lk))

    def flops(self) -> float:
        """2 FLOPs per multiply-add in both GEMMs; backward counts 2.5× the forward."""
        fwd = 2.0 * self.heads_q * self.pairs() * (self.e + self.ev)
        return fwd * {"fwd": 1.0, "bwd": 2.5, "fwd+bwd": 3.5}[self.mode]

    def kv_tokens(self) -> int:
        """Keys (and values) the case needs, summed over the batch: a padded batch needs only each row's length."""
        structure = self.structure()
        if structure is not None and structure.kind == "padding":
            return sum(structure.lengths)
        return self.batch * self.lk

    def mask_elements(self) -> int:
        """Elements of the dense attn_mask the inputs hold: (Lq, Lk) for the random masks and the bool structures,
        one per batch row for padding, one per query head for ALiBi."""
        if self.mask == "none":
            return 0
        return {"alibi": self.heads_q, "padding": self.batch}.get(self.mask, 1) * self.lq * self.lk

    def mask_bytes(self) -> int:
        """Bytes of the dense attn_mask the inputs hold (`mask_elements`; bool, or the case's dtype for a bias)."""
        return self.mask_elements() * (self.torch_dtype.itemsize if self.mask in ("float", "alibi") else 1)

    def min_bytes(self) -> float:
        """The least memory traffic: every input read once, every output written once. A structure's mask is
        not counted (it can be computed from its few parameters); a random mask is read once."""
        item = self.torch_dtype.itemsize
        q = self.batch * self.heads_q * self.lq * self.e
        k = self.heads_kv * self.kv_tokens() * self.e
        v = self.heads_kv * self.kv_tokens() * self.ev
        o = self.batch * self.heads_q * self.lq * self.ev
        mask = {"bool": 1, "float": item}.get(self.mask, 0) * self.lq * self.lk  # as the inputs hold it
        fwd = item * (q + k + v + o) + mask
        bwd = item * 2 * (q + k + v + o) + mask  # read q, k, v, out, dout; write dq, dk, dv
        return {"fwd": fwd, "bwd": bwd, "fwd+bwd": fwd + bwd}[self.mode]

    def as_dict(self) -> dict:
        return asdict(self) | {"id": self.id}


@functools.lru_cache(maxsize=4096)
def _structure(case: Case) -> masks.Structure | None:
    spec = case.mask_spec
    return None if spec is None else masks.resolve(spec, case.lq, case.lk, case.batch, case.heads_q)


def _cases(**axes: tuple) -> tuple[Case, ...]:
    keys = list(axes)
    rows = []
    for values in itertools.product(*(axes[k] for k in keys)):
        row = dict(zip(keys, values))
        row.setdefault("lk", row.get("lq"))
        rows.append(Case(**row))
    return tuple(rows)


def _gpu_cases() -> tuple[Case, ...]:
    """16k tokens per case and model width 2048 (batch = 16384 / L, heads = 2048 / E), as FlashAttention's benchmarks."""
    rows = []
    for lq, e, dtype, causal, mode in itertools.product((512, 1024, 2048, 4096, 8192, 16384), (64, 128, 256),
                                                        ("fp16", "bf16", "fp32"), (False, True), MODES):
        h = 2048 // e
        rows.append(Case(lq=lq, lk=lq, e=e, dtype=dtype, causal=causal, mode=mode, batch=16384 // lq,
                         heads_q=h, heads_kv=h))
    return tuple(rows)


# The structures of the `masks` preset, with the anchors they are read against: causal and no mask. ALiBi models
# are causal decoders, so `alibi` runs causal; window and documents are causal by themselves.
MASKS_SWEEP = (("none", False), ("none", True), ("window-512", False), ("documents-1024", False),
               ("prefix-1024", False), ("alibi", True))


def _mask_cases(lqs: tuple[int, ...], es: tuple[int, ...], dtypes: tuple[str, ...], modes: tuple[str, ...],
                tokens: int | None = None, width: int | None = None,
                sweep: tuple[tuple[str, bool], ...] = MASKS_SWEEP) -> tuple[Case, ...]:
    """Every (mask, causal) of `sweep` over the axes; with `tokens`/`width`, batch = tokens / L and heads = width / E
    (the gpu preset's sizing), else one batch row of 8 heads."""
    rows = []
    for lq, e, dtype, mode, (mask, causal) in itertools.product(lqs, es, dtypes, modes, sweep):
        b, h = (tokens // lq, width // e) if tokens and width else (1, 8)
        rows.append(Case(lq=lq, lk=lq, e=e, dtype=dtype, causal=causal, mode=mode, mask=mask, batch=b,
                         heads_q=h, heads_kv=h))
    return tuple(rows)


# A serving decode batch: 16 sequences of seeded KV lengths (512 to 16k) padded to 16k, GQA 32/8 x 128, one new
# token per sequence or four (speculative decoding, bottom-right causal among them).
_SERVE = _cases(lq=(1, 4), lk=(16384,), e=(128,), dtype=("fp32", "bf16"), batch=(16,), heads_q=(32,), heads_kv=(8,),
                mask=("padding",))

_SMOKE = (
    Case(lq=128, lk=128, e=64),
    Case(lq=128, lk=128, e=64, dtype="bf16", causal=True),
    Case(lq=96, lk=96, e=32, mode="fwd+bwd"),
    Case(lq=128, lk=128, e=64, mask="bool"),
    Case(lq=1, lk=256, e=64, heads_q=8, heads_kv=2),
)

PRESETS: dict[str, tuple[Case, ...]] = {
    "smoke": _SMOKE,
    # smoke plus the cases of the CPU performance targets of docs/explanation/cpu-performance.md at a size CI affords
    # (L=1024): `tox -e gate` measures it; its in-run rules check the memory ratios, and the targets with
    # `cpu_targets = true`
    "ci": _SMOKE + (
        Case(lq=1024, lk=1024, e=64),
        Case(lq=1024, lk=1024, e=64, mode="fwd+bwd"),
        Case(lq=1024, lk=1024, e=128, dtype="bf16"),
    ),
    "quick": _cases(lq=(256, 1024, 2048), e=(64,), dtype=("fp32", "bf16"), causal=(False, True),
                      mode=("fwd", "fwd+bwd")),
    "cpu": _cases(lq=(256, 512, 1024, 2048, 4096), e=(64, 128), dtype=("fp32", "bf16"), causal=(False, True),
                    mode=("fwd", "fwd+bwd")),
    # appended to: the mask structures at the gpu preset's sizes, and the serve batches
    "gpu": _gpu_cases() + _mask_cases((2048, 8192, 16384), (64, 128), ("bf16",), ("fwd", "fwd+bwd"), 16384, 2048,
                                      MASKS_SWEEP[2:]) + _SERVE,
    "masks": _mask_cases((2048, 8192), (64, 128), ("fp32", "bf16"), ("fwd", "fwd+bwd")),
    "serve": _SERVE,
    "decode": _cases(lq=(1,), lk=(1024, 4096, 16384), e=(128,), dtype=("fp32", "bf16"), batch=(1, 8),
                       heads_q=(32,), heads_kv=(8,)),
    # the CI gate's default on a GPU (`continuous` on CUDA): every call at least ~50 µs of device time on an H100
    # (torch_sdpa: L 4096 causal, 16 heads × 128, ~69 GFLOP forward; decode: 0.54 GB of bf16 KV read per call),
    # so the gate judges kernels, not launches; bf16 and fp16, forward and forward+backward, two decode batches;
    # and one host-bound case for the host-overhead check (on an H200, fused's L 1024 GQA forward+backward: 0.8 ms
    # of device time, 0.9 ms more of host overhead)
    "gpu-ci": (
        _cases(lq=(4096,), e=(128,), dtype=("bf16", "fp16"), causal=(True,), mode=("fwd", "fwd+bwd"),
               heads_q=(16,), heads_kv=(16,))
        + _cases(lq=(1,), lk=(16384,), e=(128,), dtype=("bf16", "fp16"), batch=(8,), heads_q=(32,), heads_kv=(8,))
        + _cases(lq=(1024,), e=(128,), dtype=("bf16",), causal=(True,), mode=("fwd+bwd",), heads_q=(32,),
                 heads_kv=(8,))
    ),
    # the llm preset's Llama-3-8B shape at the lengths where O(L²) work and memory decide: 8k and 16k tokens, bf16,
    # and fp16 at 8k (the other half type: its own GEMM and softmax kernels)
    "llm-long": _cases(lq=(8192, 16384), e=(128,), dtype=("bf16",), causal=(True,), mode=("fwd", "fwd+bwd"),
                       heads_q=(32,), heads_kv=(8,))
    + _cases(lq=(8192,), e=(128,), dtype=("fp16",), causal=(True,), mode=("fwd", "fwd+bwd"), heads_q=(32,),
             heads_kv=(8,)),
    "llm": (  # (heads_q, heads_kv, E): Llama-3-8B / Mistral-7B, Llama-2-7B, GPT-2 small
        _cases(lq=(1024, 4096), e=(128,), dtype=("bf16",), causal=(True,), mode=("fwd", "fwd+bwd"),
                 heads_q=(32,), heads_kv=(8, 32))
        + _cases(lq=(1024,), e=(64,), dtype=("bf16",), causal=(True,), mode=("fwd", "fwd+bwd"),
                   heads_q=(12,), heads_kv=(12,))
    ),
}
# One asv run of the gpu preset would take about 2 h on one GPU (376 cases x 17 implementations at about 1.1 s
# a point: an estimate from `sdpa-bench run --preset llm` on an H200, not a measurement), too long for every commit.
# `gpu-history` is the part of it a history per commit affords, 44 cases, about 14 minutes by the same estimate
# (docs/explanation/asv-design.md): bf16 at L in {1024, 4096, 16384}, E in {64, 128}, causal on/off, every mode; two
# mask structures at L = 8192; the serve batches. Its cases are the gpu preset's own, so their ids (and graphs) are the same.
PRESETS["gpu-history"] = tuple(
    c for c in PRESETS["gpu"]
    if (c.mask == "none" and c.dtype == "bf16" and c.lq in (1024, 4096, 16384) and c.e in (64, 128))
    or (c.mask in ("window-512", "documents-1024") and c.lq == 8192 and c.e == 128)
    or c.mask == "padding")


def preset(name: str) -> tuple[Case, ...]:
    """The cases of a named preset; ValueError naming the known presets otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}") from None


def default_device() -> str:
    """The device to measure on: cuda when a CUDA device is visible, else cpu, asked without initializing CUDA.

    `torch.cuda.device_count()` counts devices through NVML (what `torch.cuda.is_available()` does only under
    PYTORCH_NVML_BASED_CUDA_CHECK=1; otherwise it starts the CUDA driver, and a child forked afterwards cannot use
    CUDA). asv's forkserver imports the benchmarks, which call this, once and forks every benchmark cell from there."""
    return "cuda" if torch.cuda.device_count() > 0 else "cpu"


def default_preset_name(device: str | None = None) -> str:
    """SDPA_BENCH_PRESET when set, else the preset that follows the device."""
    env = os.environ.get(PRESET_ENV, "").strip()
    if env:
        try:
            preset(env)  # fail early and clearly on a typo, naming where the name came from
        except ValueError as exc:
            raise ValueError(f"{PRESET_ENV}={env!r}: {exc}") from None
        return env
    return "gpu" if (device or default_device()).split(":")[0] == "cuda" else "cpu"  # cuda:1 too


def shard_of(cases: tuple[Case, ...], index: int, count: int) -> list[Case]:
    """Shard `index` (1-based) of `count`: the cases whose position is index-1 modulo count. Deterministic,
    disjoint, together complete, and each shard gets its share of the large (slow) sequence lengths."""
    if not 1 <= index <= count:
        raise ValueError(f"shard {index}/{count}: need 1 <= I <= N")
    return [c for k, c in enumerate(cases) if k % count == index - 1]
