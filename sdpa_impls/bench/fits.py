"""Will a point fit in memory? Estimates made before running it, so that a point too large for this device is
skipped with a reason instead of failing out of memory, and the fp64 reference is never what runs out."""
from __future__ import annotations

from pathlib import Path

import torch

from ..protocol import Unsupported
from ..reference import REFERENCE_CHUNK_BYTES
from .grid import Case

# Bytes per (batch, query head, query, key) held at the peak by the implementations that materialize the scores:
# naive holds the scores, their fp32 softmax and its cast (about 3 fp32 copies; the brief measured ~100 GB at
# L=16384, 32 heads); with backward the saved softmax, its gradient and the score gradient double it.
QUADRATIC_BYTES_PER_SCORE = {"fwd": 12, "bwd": 24, "fwd+bwd": 24}
QUADRATIC = frozenset({"naive", "torch_sdpa_math", "compiled"})  # compiled: naive under torch.compile
TILE_BYTES = 512 << 20  # the largest score tile of the tiled implementations (fused on CUDA)
HEADROOM = 0.9  # use at most this share of the free memory


def _io_bytes(case: Case, itemsize: int) -> int:
    """Q, K, V and the output (and, with backward, the output gradient and dq, dk, dv) in `itemsize` bytes."""
    q = case.batch * case.heads_q * case.lq * case.e
    kv = case.batch * case.heads_kv * case.lk * (case.e + case.ev)
    o = case.batch * case.heads_q * case.lq * case.ev
    return itemsize * (q + kv + o) * (1 if case.mode == "fwd" else 2)


def _prepared_bytes(impl: str, case: Case) -> int:
    """What `prepare` builds once beside the inputs and holds while the point runs: xformers' dense bias, (B, Hq, Lq,
    Lk) in the query dtype with rows padded to 8 (16 GiB for ALiBi at L = 16384 with 32 heads in bf16), for every
    mask: where a class states the structure, xformers' dispatch can still refuse it for a dtype or mode and the
    dense bias is built then. The other implementations' prepared state is within the estimate's margin."""
    if impl != "xformers" or case.mask == "none":
        return 0
    return case.batch * case.heads_q * case.lq * ((case.lk + 7) // 8 * 8) * case.torch_dtype.itemsize


def point_bytes(impl: str, case: Case) -> int:
    """About the most memory `impl` holds running `case` (its inputs, and what `prepare` built, included)."""
    io, mask = _io_bytes(case, case.torch_dtype.itemsize), case.mask_bytes()
    if impl in QUADRATIC:
        return io + mask + QUADRATIC_BYTES_PER_SCORE[case.mode] * case.batch * case.heads_q * case.lq * case.lk
    # the tensors and their copies; the mask, and one copy of it in fp32 at most (torch turns a bool mask into one of
    # the query dtype on CUDA, fused holds an fp32 mask in half precision) or, for xformers, its dense bias: what
    # prepare built, twice (the timed closure's, and the fp64 check's own call of the implementation)
    prepared = 2 * _prepared_bytes(impl, case)
    mask_copy = 0 if prepared else 4 * case.mask_elements()
    return 3 * io + mask + mask_copy + prepared + min(TILE_BYTES, 8 * case.batch * case.heads_q * case.lq * case.lk)


def reference_bytes(case: Case, grad_case: Case | None) -> int:
    """About the most memory the fp64 check holds: an (Lq, Lk) bool mask and fp64 bias, the dense mask itself,
    fp64 copies of the tensors (grouped under GQA, never repeated per query head), a few blocks of scores, and for
    `grad_case` (the case or the slice whose gradients are checked) the blockwise gradients."""
    block = min(REFERENCE_CHUNK_BYTES, 8 * case.batch * case.heads_q * case.lq * case.lk)  # one block of scores
    total = 9 * case.lq * case.lk + case.mask_bytes() + _io_bytes(case, 8) + 6 * block
    if grad_case is not None:
        total += 2 * _io_bytes(grad_case, 8)
    return total


def free_bytes(device: str | torch.device) -> int | None:
    """Memory free for a point here: CUDA's free memory plus what torch's caching allocator holds unused;
    on CPU the kernel's MemAvailable. None when unknown."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def ensure_fits(what: str, need: int, device: str | torch.device, free: int | None = None) -> None:
    """Raise Unsupported (a skip, with the numbers) when `need` bytes do not fit in the free memory of `device`."""
    free = free_bytes(device) if free is None else free
    if free is not None and need > HEADROOM * free:
        raise Unsupported(what, [f"{what} needs about {need / 2**30:.1f} GiB of {torch.device(device).type} "
                                 f"memory; {free / 2**30:.1f} GiB free"])
