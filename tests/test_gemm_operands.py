"""What reaches the GEMMs of chunked and fused on the CPU: bf16 right operands in a layout oneDNN takes as it is.

torch hands a bf16 batched GEMM to oneDNN only as a compact batch of plain or transposed matrices, and copies any
other operand itself first (element by element for a transposed view). `tiles.columns_t` copies a key range of K
or V row by row instead, where the policy says `COMPACT_TRANSPOSED`; the answers must not move by a bit."""
from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import sdpa_impls
from sdpa_impls.impls._tiled.budget import BF16_ENV, CpuTiling, cuda_tiling, forced_tiling
from sdpa_impls.protocol import SDPAInputs

GEMMS = {torch.ops.aten.bmm.default, torch.ops.aten.bmm.out, torch.ops.aten.baddbmm.default,
         torch.ops.aten.baddbmm.out}


def onednn_layout(t: torch.Tensor) -> bool:
    """A (batch, rows, cols) operand oneDNN's matmul takes without a copy: contiguous, or a compact batch of
    transposed matrices (torch's own test before it hands a bf16 GEMM over)."""
    b, r, c = t.shape
    return t.is_contiguous() or t.stride() == (r * c, 1, r)


class RightOperands(TorchDispatchMode):
    """Records the right operand of every bf16 bmm / baddbmm that is a transposed view (Kᵀ, Vᵀ, ...)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[torch.Tensor] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in GEMMS:
            right = args[1] if func in (torch.ops.aten.bmm.default, torch.ops.aten.bmm.out) else args[2]
            if right.dtype == torch.bfloat16 and right.stride(-2) == 1 and right.shape[-1] > 1:
                self.seen.append(right)
        return func(*args, **(kwargs or {}))


def call(name: str, inp: SDPAInputs, grad: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Output and gradients of one prepared forward+backward, and the transposed bf16 operands its GEMMs got."""
    fn = sdpa_impls.get(name).prepare_inputs(inp)
    with RightOperands() as seen:
        out = fn()
        grads = torch.autograd.grad(out, (inp.query, inp.key, inp.value), grad)
    return [out, *grads], seen.seen


@pytest.mark.parametrize("name, causal, mask, lk, heads", [
    ("fused", True, None, 300, 4),  # 256-row tiles: the first one's keys end at 256 of 300
    ("fused", False, "window", 300, 4),  # a sliding window: key runs that start past 0 as well
    ("chunked", True, None, 300, 4),  # 128-row tiles, keys up to each tile's last row
    ("chunked", False, None, 600, 16),  # 16 heads fill the budget at 512 keys: tiles of keys 0-512 and 512-600
])
def test_key_ranges_reach_the_bf16_gemms_compact_and_the_answers_stay(monkeypatch: pytest.MonkeyPatch, name: str,
                                                                      causal: bool, mask: str | None, lk: int,
                                                                      heads: int) -> None:
    """With the choice on, every transposed bf16 operand is one oneDNN takes as it is; with it off, some are not
    (the case slices key ranges); the output and the gradients are the same bit for bit. Planned with a fixed CPU
    policy (2 threads, 1 MiB L2), so the tiles, and what they slice, are this test's on any machine, and bf16
    computed in bf16: a CPU whose bf16 GEMM is the slower would compute it in fp32, with no bf16 GEMM to test."""
    monkeypatch.setenv(BF16_ENV, "bf16")
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, heads, lk, 32, generator=gen).to(torch.bfloat16).requires_grad_() for _ in range(3))
    attn_mask = None
    if mask == "window":
        rows, cols = torch.arange(lk)[:, None], torch.arange(lk)[None, :]
        attn_mask = (cols <= rows) & (cols > rows - 100)
    inp = SDPAInputs(q, k, v, attn_mask=attn_mask, is_causal=causal)
    grad = torch.randn(1, heads, lk, 32, generator=gen).to(torch.bfloat16)
    got = {}
    with forced_tiling(CpuTiling(2, 1 << 20)):
        for flag in (False, True):
            monkeypatch.setattr(CpuTiling, "COMPACT_TRANSPOSED", flag)
            got[flag] = call(name, inp, grad)
    strided = [t for t in got[False][1] if not onednn_layout(t)]
    assert strided, "the plan sliced no key range: the case tests nothing"
    assert all(onednn_layout(t) for t in got[True][1]), [(t.shape, t.stride()) for t in got[True][1]]
    for a, b in zip(got[False][0], got[True][0]):
        assert torch.equal(a, b)


def test_the_cuda_plan_hands_the_strided_view_over() -> None:
    """cuBLAS takes any batch stride: the CUDA plan (forced on CPU tensors) copies nothing for it."""
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 300, 16, generator=gen).to(torch.bfloat16).requires_grad_() for _ in range(3))
    inp = SDPAInputs(q, k, v, is_causal=True)
    with cuda_tiling(1 << 20):  # a 1 MiB free card: its 64-row tiles slice the keys
        _, seen = call("chunked", inp, torch.ones(1, 2, 300, 16, dtype=torch.bfloat16))
    assert any(not onednn_layout(t) for t in seen)

