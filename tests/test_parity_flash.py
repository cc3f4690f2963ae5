"""Input cases of flash-attention's tests/test_flash_attn.py, under the fp64 rule for every implementation.

Ported: output, causal, kv- and qkv-packed, varlen (as padding masks), split-kv and the backward-overflow tests,
with flash-attention's batch and head counts trimmed; sequence lengths, head dims, GQA/MQA and input scales kept.
flash-attention aligns causal to the bottom right when Lq != Lk; ours (and torch's) is top-left: the cases are
ported, with `is_causal` meaning ours, and flash-attention's bottom-right pattern appears as an explicit bool mask.
Dropout, softcap and paged KV are outside our protocol; alibi and sliding windows become float and bool masks.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

import pytest
import torch

from test_correctness import IMPLS, check_against_fp64, one_intra_op_thread  # noqa: F401 (fixture)

HALF = (torch.float16, torch.bfloat16)
pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


@dataclass(frozen=True)
class Flash:
    """One input case. `source` names the upstream test; (Lq, Lk, d) and the flags are flash-attention's."""

    source: str
    lq: int
    lk: int
    d: int
    b: int = 1
    h: int = 1
    hkv: int | None = None  # mqa: 1 (with h = 2), gqa: 2 (with h = 4)
    causal: bool = False
    layout: str = "separate"  # separate (BSHD views) | kvpacked | qkvpacked: strided views of one tensor
    mask: str = "none"  # none | padding | qpadding | alibi | window | bottom_right
    q_lens: tuple[int, ...] = ()  # qpadding: the query lengths of the batch
    q_mul: float = 1.0
    kv_mul: float = 1.0
    dtypes: tuple[torch.dtype, ...] = HALF
    grad: bool = True

    @property
    def name(self) -> str:
        flags = [f for f, on in (("causal", self.causal), (self.layout, self.layout != "separate"),
                                 (self.mask, self.mask != "none")) if on]
        heads = f"h{self.h}" + (f"kv{self.hkv}" if self.hkv else "")
        return "-".join([self.source.removeprefix("test_flash_attn_"), f"{self.lq}x{self.lk}", f"d{self.d}", heads,
                         *flags])

    def make(self, dtype: torch.dtype, device: str) -> dict:
        gen = torch.Generator(device=device).manual_seed(zlib.crc32(self.name.encode()))
        hkv = self.hkv or self.h

        def randn(*shape: int) -> torch.Tensor:
            return torch.randn(shape, generator=gen, device=device)

        if self.layout == "qkvpacked":  # (B, S, 3, H, D) -> three (B, H, S, D) views
            qkv = randn(self.b, self.lq, 3, self.h, self.d).to(dtype)
            q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
        else:
            q = randn(self.b, self.lq, self.h, self.d).to(dtype).transpose(1, 2)  # (B, H, Lq, D) view of BSHD
            if self.layout == "kvpacked":
                kv = randn(self.b, self.lk, 2, hkv, self.d).to(dtype)
                k, v = kv[:, :, 0].transpose(1, 2), kv[:, :, 1].transpose(1, 2)
            else:
                k, v = (randn(self.b, self.lk, hkv, self.d).to(dtype).transpose(1, 2) for _ in range(2))
        q, k, v = q * self.q_mul, k * self.kv_mul, v * self.kv_mul
        return {"query": q, "key": k, "value": v, "attn_mask": self._mask(gen, device), "is_causal": self.causal,
                "enable_gqa": hkv != self.h}

    def _mask(self, gen: torch.Generator, device: str) -> torch.Tensor | None:
        b, h, lq, lk = self.b, self.h, self.lq, self.lk
        rows = torch.arange(lq, device=device)[:, None]
        cols = torch.arange(lk, device=device)[None, :]
        if self.mask == "qpadding":  # given query lengths, all keys: (B, 1, Lq, 1), padded queries get zeros
            keep_q = torch.arange(lq, device=device) < torch.tensor(self.q_lens, device=device)[:, None]  # (B, Lq)
            return keep_q[:, None, :, None]
        if self.mask == "padding":  # generate_random_padding_mask(mode="random"): lengths in [max - 20, max]
            q_len, k_len = (torch.randint(max(1, n - 20), n + 1, (b, 1), generator=gen, device=device)
                            for n in (lq, lk))
            keep_q, keep_k = torch.arange(lq, device=device) < q_len, torch.arange(lk, device=device) < k_len
            return keep_q[:, None, :, None] & keep_k[:, None, None, :]  # (B, 1, Lq, Lk); padded queries get zeros
        if self.mask == "alibi":  # attn_bias_from_alibi_slopes: fp32, (B, H, 1, Lk) with causal, else (B, H, Lq, Lk)
            slopes = torch.rand((b, h), generator=gen, device=device)[:, :, None, None] * 0.3
            if self.causal:
                return torch.arange(-lk + 1, 1, device=device, dtype=torch.float32) * slopes
            return -slopes * (rows + lk - lq - cols).abs()
        if self.mask == "window":  # a local window (left, right) around flash-attention's bottom-right diagonal
            left, right = (int(x) for x in torch.randint(0, lk, (2,), generator=gen, device=device))
            diag = rows + lk - lq
            return (cols >= diag - left) & (cols <= diag + right)  # (Lq, Lk)
        if self.mask == "bottom_right":  # flash-attention's own causal: key j <= i + Lk - Lq
            return cols <= rows + lk - lq
        return None


GQA, MQA = {"h": 4, "hkv": 2}, {"h": 2, "hkv": 1}
CASES = [
    # test_flash_attn_output: seqlen pairs, odd and large head dims, mha/mqa/gqa, kv-packed, causal, alibi, local
    Flash("test_flash_attn_output", 113, 203, 59),
    Flash("test_flash_attn_output", 128, 217, 111, causal=True, layout="kvpacked", **GQA),
    Flash("test_flash_attn_output", 108, 256, 32, causal=True, mask="alibi", **MQA),
    Flash("test_flash_attn_output", 512, 256, 64, causal=True, layout="kvpacked"),
    Flash("test_flash_attn_output", 256, 512, 40, mask="window", **GQA),
    Flash("test_flash_attn_output", 113, 211, 256, causal=True),
    Flash("test_flash_attn_output", 1024, 1023, 128, causal=True),
    Flash("test_flash_attn_output", 113, 203, 96, mask="bottom_right"),
    # test_flash_attn_varlen_output: random query and key lengths, run here as padding masks
    Flash("test_flash_attn_varlen_output", 1, 147, 64, b=3, mask="padding"),
    Flash("test_flash_attn_varlen_output", 113, 203, 59, b=2, causal=True, layout="kvpacked", mask="padding", **GQA),
    Flash("test_flash_attn_varlen_output", 512, 256, 80, b=2, mask="padding", **MQA),
    Flash("test_flash_attn_varlen_output", 128, 217, 160, b=2, mask="padding"),
    # test_flash_attn_causal (and swap_sq_sk): rows with a single key, very unequal Lq and Lk
    Flash("test_flash_attn_causal", 1, 239, 64, causal=True),
    Flash("test_flash_attn_causal", 239, 1, 32, causal=True),
    Flash("test_flash_attn_causal", 3, 799, 80, causal=True),
    Flash("test_flash_attn_causal", 799, 3, 40, causal=True),
    Flash("test_flash_attn_causal", 127, 513, 96, causal=True),
    Flash("test_flash_attn_causal", 513, 127, 111, causal=True),
    Flash("test_flash_attn_causal", 1, 239, 64, mask="bottom_right"),
    # test_flash_attn_splitkv (and swap_sq_sk): few queries against many keys, and the reverse
    Flash("test_flash_attn_splitkv", 3, 1024, 64),
    Flash("test_flash_attn_splitkv", 1, 339, 32, causal=True),
    Flash("test_flash_attn_splitkv", 64, 800, 59, mask="alibi"),
    Flash("test_flash_attn_splitkv", 16, 20000, 32),
    Flash("test_flash_attn_splitkv", 20000, 16, 32, causal=True),
    Flash("test_flash_attn_splitkv", 1024, 3, 128),
    # test_flash_attn_qkvpacked: q, k and v as strided views of one (B, S, 3, H, D) tensor
    Flash("test_flash_attn_qkvpacked", 97, 97, 32, layout="qkvpacked"),
    Flash("test_flash_attn_qkvpacked", 200, 200, 80, causal=True, layout="qkvpacked"),
    # test_flash_attn_bwd_overflow: fp16, q × 5, k and v × 3, short sequences (seqlen % 128 != 0)
    *(Flash("test_flash_attn_bwd_overflow", n, n, d, b=2, h=2, causal=c, q_mul=5.0, kv_mul=3.0,
            dtypes=(torch.float16,))
      for n, d, c in [(1, 16, False), (2, 32, True), (5, 64, False), (17, 16, True), (128, 64, True),
                      (128, 32, False)]),
    # test_flash_attn_bwd_varlen_overflow: query lengths 76, 34, 146 against one key each, × 3
    *(Flash("test_flash_attn_bwd_varlen_overflow", 146, 1, d, b=3, h=2, causal=c, mask="qpadding",
            q_lens=(76, 34, 146), q_mul=3.0, kv_mul=3.0, dtypes=(torch.float16,))
      for d, c in [(16, True), (32, False), (64, True)]),
]
POINTS = [pytest.param(case, dtype, id=f"{case.name}-{str(dtype).removeprefix('torch.')}")
          for case in CASES for dtype in case.dtypes]

# torch's own CPU flash kernel (behind torch_sdpa and torch_sdpa_flash) misses the rule here by its own rounding,
# measured on torch 2.13 CPU with these seeds. Not ours to change: recorded as non-strict xfails, not hidden.
TORCH_CPU_FLASH_MISSES = {
    "splitkv-20000x16-d32-h1-causal": "dK summed over 20000 query rows: fp16 0.125 > tolerance 0.117 (naive's "
                                      "0.0156); bf16 passes with this draw, missed (0.875 > 0.786) with another",
    "bwd_overflow-2x2-d32-h2-causal": "near one-hot rows (q x 5, k x 3): fp16 dq 0.0088 and dk 0.0089 > tolerance "
                                      "0.0020 (naive's 7.6e-06 and 3.8e-06)",
}


@pytest.mark.parametrize("impl", IMPLS, ids=lambda i: i.name)  # the top one varies fastest: one fp64 reference
@pytest.mark.parametrize("case,dtype", POINTS)  # per case, shared by every implementation
def test_flash_attn_case_matches_fp64(impl, case: Flash, dtype: torch.dtype,
                                      request: pytest.FixtureRequest) -> None:
    miss = TORCH_CPU_FLASH_MISSES.get(case.name)
    if miss and impl.name in ("torch_sdpa", "torch_sdpa_flash"):  # the cases run on CPU tensors
        request.applymarker(pytest.mark.xfail(reason=f"torch's CPU flash kernel: {miss}", strict=False))
    check_against_fp64(impl, case, dtype)
