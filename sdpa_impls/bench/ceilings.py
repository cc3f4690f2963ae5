"""This machine's measured ceilings (a large GEMM per dtype, a large copy) and "% of roofline" against them."""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from ..dtypes import from_name
from .machine import machine_info, machine_key
from .timing import time_closure

CEILINGS_CACHE = Path(os.environ.get("SDPA_BENCH_CACHE", Path.home() / ".cache" / "sdpa-bench")) / "ceilings.json"


TF32 = "gemm_flops_tf32"


def uses_tf32(device: torch.device | str) -> bool:
    """Whether fp32 attention here runs on TF32 tensor cores: on CUDA sm80+ torch's flash, efficient and cuDNN
    kernels and xformers' kernels compute fp32 inputs in TF32 whatever `allow_tf32` says."""
    device = torch.device(device)
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 8


def gemm_key(dtype: str, device: torch.device | str) -> str:
    """The GEMM ceiling a case of `dtype` is held to: the TF32 GEMM for fp32 where `uses_tf32`, else the dtype's."""
    return TF32 if dtype == "fp32" and uses_tf32(device) else f"gemm_flops_{dtype}"


def needed_ceilings(dtypes: tuple[str, ...] | list[str], device: torch.device | str) -> tuple[str, ...]:
    """Every ceiling the cases of `dtypes` need here: each dtype's GEMM (fp32 in IEEE fp32, and in TF32 where
    `uses_tf32`, so a report shows both) and the copy bandwidth."""
    keys = [f"gemm_flops_{d}" for d in dtypes] + [gemm_key(d, device) for d in dtypes]
    return tuple(dict.fromkeys(keys)) + ("copy_bytes_per_s",)


def _measure_ceiling(device: torch.device, what: str) -> float:
    """`gemm_flops_<dtype>`: FLOP/s of a square GEMM, grown until one call takes >= 20 ms (slow dtypes
    such as fp16 on CPU stay small; `tf32`: fp32 inputs with TF32 matmuls allowed, IEEE fp32 otherwise);
    `copy_bytes_per_s`: read + write bytes/s of a large copy."""
    if what == "copy_bytes_per_s":
        src = torch.empty(64 << 20 if device.type == "cpu" else 1 << 30, dtype=torch.uint8, device=device).fill_(1)
        dst = torch.empty_like(src)
        t = time_closure(lambda: dst.copy_(src), device, budget_s=0.5, min_reps=3, max_reps=50, warmup=1)
        return 2.0 * src.numel() / min(t.samples)  # a ceiling is the best rate seen, not the typical one
    if what == TF32:
        saved = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            return _measure_ceiling(device, "gemm_flops_fp32")
        finally:
            torch.backends.cuda.matmul.allow_tf32 = saved
    dtype = from_name(what.rsplit("_", 1)[1])
    if dtype == torch.float32 and device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32:
        raise RuntimeError("the fp32 ceiling needs torch.backends.cuda.matmul.allow_tf32 = False (IEEE fp32)")
    for n in (256, 512, 1024, 2048, 4096, 8192):
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        t = time_closure(lambda: a @ b, device, budget_s=0.3, min_reps=3, max_reps=50, warmup=1)
        if t.median >= 0.02 or n == (8192 if device.type == "cuda" else 2048):
            return 2.0 * n**3 / min(t.samples)
    raise AssertionError("unreachable")


def ceilings(device: torch.device | str, needed: tuple[str, ...] = ("gemm_flops_fp32", "copy_bytes_per_s"),
             cache: Path = CEILINGS_CACHE) -> dict[str, float]:
    """This machine's measured ceilings (each measured once, cached per machine and torch version)."""
    device = torch.device(device)
    key = machine_key(machine_info(device))
    try:
        stored = json.loads(cache.read_text())
    except (OSError, ValueError):
        stored = {}
    mine = stored.setdefault(key, {})
    missing = [w for w in needed if w not in mine]
    for what in missing:
        mine[what] = _measure_ceiling(device, what)
    if missing:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(stored, indent=1))
            tmp.replace(cache)
        except OSError:
            pass  # an unwritable cache only costs a re-measurement next time
    return dict(mine)


def roofline_pct(flops: float, nbytes: float, seconds: float, gemm: str, ceil: dict[str, float]) -> float:
    """Achieved FLOP/s as a percentage of min(GEMM peak `ceil[gemm]`, arithmetic intensity × copy bandwidth)."""
    attainable = min(ceil[gemm], flops / nbytes * ceil["copy_bytes_per_s"])
    return 100.0 * flops / seconds / attainable
