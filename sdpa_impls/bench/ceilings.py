"""The ceilings of one run (a large GEMM per dtype, a large copy), measured in that run, and "% of roofline".

A ceiling describes the machine's state while the run lasted, and these machines change speed from day to
day: nothing here is cached. `RunCeilings` times every ceiling at the start of a run and again between its
cases, and a run's results are judged against the median of its own samples (the spread is reported with it), or
a case against the samples taken during its own rounds (`mark` / `since`).
"""
from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator

import torch

from ..dtypes import from_name
from .timing import synchronize, time_closure

TF32 = "gemm_flops_tf32"


def uses_tf32(device: torch.device | str) -> bool:
    """Whether fp32 inputs can reach TF32 tensor cores here (CUDA sm80+), so that the TF32 GEMM is their roof: torch's
    efficient kernel and xformers' cutlass kernels compute fp32 as three TF32 products whatever `allow_tf32` says
    (flash and cuDNN take no fp32); torch.matmul, which our own implementations use, stays IEEE fp32 by default."""
    device = torch.device(device)
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 8


def gemm_key(dtype: str, device: torch.device | str) -> str:
    """The GEMM ceiling a case of `dtype` is held to: the TF32 GEMM for fp32 where `uses_tf32`, else the dtype's."""
    return TF32 if dtype == "fp32" and uses_tf32(device) else f"gemm_flops_{dtype}"


def gemm_keys(dtype: str, device: torch.device | str) -> tuple[str, ...]:
    """The GEMM ceilings a case of `dtype` may reach, of which the highest measured is its roof: `gemm_key`'s, and on
    a CPU for bf16 and fp16 also the fp32 GEMM, since an implementation may compute a half-precision call in fp32
    where that is faster (chunked and fused do where this CPU's bf16 GEMM is slower; fp16 always): a roof it can
    pass is no roof."""
    own = gemm_key(dtype, device)
    return (own, "gemm_flops_fp32") if torch.device(device).type == "cpu" and dtype != "fp32" else (own,)


def roof_gemm(dtype: str, device_type: str, ceil: dict[str, float]) -> str | None:
    """The GEMM ceiling a case's roof is, read from the ceilings a run measured (so a report is drawn anywhere,
    without asking this machine's device): the highest of those `gemm_keys` can name (the dtype's own, TF32 for
    fp32 where the run measured it, the fp32 GEMM for bf16 and fp16 on a CPU); None when the run measured none."""
    keys = [f"gemm_flops_{dtype}"] + ([TF32] if dtype == "fp32" else []) + (
        ["gemm_flops_fp32"] if device_type == "cpu" and dtype != "fp32" else [])
    measured = [k for k in keys if ceil.get(k)]
    return max(measured, key=ceil.__getitem__) if measured else None


def needed_ceilings(dtypes: tuple[str, ...] | list[str], device: torch.device | str) -> tuple[str, ...]:
    """Every ceiling the cases of `dtypes` need here: each dtype's GEMMs (fp32 in IEEE fp32, and in TF32 where
    `uses_tf32`, so a report shows both; on a CPU fp32 for every dtype, `gemm_keys`) and the copy bandwidth."""
    keys = [f"gemm_flops_{d}" for d in dtypes] + [k for d in dtypes for k in gemm_keys(d, device)]
    return tuple(dict.fromkeys(keys)) + ("copy_bytes_per_s",)


MIN_GEMM_CALL_S = 0.02  # a GEMM call at least this long has reached the size where its rate stops growing
GEMM_SIZES = (256, 512, 1024, 2048, 4096, 8192)


@contextlib.contextmanager
def _tf32(on: bool) -> Iterator[None]:
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = on
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def ceiling_closure(device: torch.device | str, what: str) -> tuple[Callable[[], object], float, str]:
    """(closure, work per call, shape) for one ceiling.

    `gemm_flops_<dtype>`: a square GEMM (FLOPs per call), grown until one call takes >= 20 ms, up to 4096 on
    CPU and 8192 on CUDA (fp32 in IEEE fp32; `gemm_flops_tf32`: fp32 inputs with TF32 matmuls allowed);
    `copy_bytes_per_s`: a large copy (bytes read + written per call)."""
    device = torch.device(device)
    if what == "copy_bytes_per_s":
        src = torch.empty(64 << 20 if device.type == "cpu" else 1 << 30, dtype=torch.uint8, device=device).fill_(1)
        dst = torch.empty_like(src)
        return (lambda: dst.copy_(src)), 2.0 * src.numel(), f"{src.numel() >> 20} MiB"
    tf32 = what == TF32
    dtype = torch.float32 if tf32 else from_name(what.rsplit("_", 1)[1])
    top = 8192 if device.type == "cuda" else 4096
    for n in GEMM_SIZES:
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)

        def gemm(a: torch.Tensor = a, b: torch.Tensor = b) -> torch.Tensor:
            with _tf32(tf32):
                return a @ b
        t = time_closure(gemm, device, budget_s=0.0, min_reps=2, max_reps=2, warmup=1)
        if t.median >= MIN_GEMM_CALL_S or n == top:
            return gemm, 2.0 * n**3, f"{n}x{n}x{n}"
    raise AssertionError("unreachable")


class RunCeilings:
    """The ceilings one run is judged against, re-measured while it runs.

    `sample()` times every ceiling once more (the median of 3 calls gives one rate); call it before the first
    case and between cases (`sample_if_due`). `values()` is the median rate of each ceiling over the run,
    `spread()` its min, median, max and sample count. A resumed run continues the samples it saved."""

    def __init__(self, device: torch.device | str, keys: tuple[str, ...],
                 samples: dict[str, list[float]] | None = None, every_s: float = 30.0,
                 clock: Callable[[], float] | None = None) -> None:
        self.device = torch.device(device)
        self.clock = clock  # the clock the run's points are timed with, when it is not time_closure's own
        self.keys = tuple(keys)
        self.samples = {k: list((samples or {}).get(k, ())) for k in self.keys}
        self.shapes: dict[str, str] = {}
        self.every_s = every_s
        self._closures: dict[str, tuple[Callable[[], object], float]] = {}
        self._last = float("-inf")

    def sample(self, keys: tuple[str, ...] | None = None, calls: int = 3) -> None:
        """One more rate for each of `keys` (all by default): `calls` timed calls, their median."""
        for key in keys or self.keys:
            if key not in self._closures:
                fn, work, self.shapes[key] = ceiling_closure(self.device, key)
                self._closures[key] = (fn, work)
            fn, work = self._closures[key]
            if self.clock is None:
                took = time_closure(fn, self.device, budget_s=0.0, min_reps=calls, max_reps=calls, warmup=0).median
            else:
                took = statistics.median(self._clocked(fn) for _ in range(calls))
            self.samples[key].append(work / took)
        self._last = time.perf_counter()

    def _clocked(self, fn: Callable[[], object]) -> float:
        synchronize(self.device)
        start = self.clock()
        fn()
        synchronize(self.device)
        return max(self.clock() - start, 1e-12)

    def sample_if_due(self) -> bool:
        """Sample when `every_s` seconds have passed since the last sample (bounds the cost on long runs)."""
        if time.perf_counter() - self._last < self.every_s:
            return False
        self.sample()
        return True

    def values(self) -> dict[str, float]:
        return {k: statistics.median(v) for k, v in self.samples.items() if v}

    def mark(self) -> dict[str, int]:
        """How many samples each ceiling has now: `since(mark)` later reads only the samples taken after it."""
        return {k: len(v) for k, v in self.samples.items()}

    def since(self, mark: dict[str, int]) -> dict[str, float]:
        """The median rate of each ceiling over the samples taken after `mark` (e.g. during one case's rounds);
        ceilings not sampled since are left out."""
        return {k: statistics.median(v[mark.get(k, 0):]) for k, v in self.samples.items() if v[mark.get(k, 0):]}

    def spread(self) -> dict[str, dict]:
        return {k: {"min": min(v), "median": statistics.median(v), "max": max(v), "n": len(v),
                    "shape": self.shapes.get(k)} for k, v in self.samples.items() if v}

    def meta(self) -> dict:
        """What a sweep's metadata keeps: `ceilings` (the medians), `ceiling_spread` and the raw samples."""
        return {"ceilings": self.values(), "ceiling_spread": self.spread(), "ceiling_samples": self.samples}


def roofline_pct(flops: float, nbytes: float, seconds: float, gemm: str, ceil: dict[str, float]) -> float:
    """Achieved FLOP/s as a percentage of min(GEMM peak `ceil[gemm]`, arithmetic intensity × copy bandwidth)."""
    return 100.0 * flops / seconds / attainable(flops, nbytes, gemm, ceil)[0]


def attainable(flops: float, nbytes: float, gemm: str, ceil: dict[str, float]) -> tuple[float, str]:
    """(the roof in FLOP/s, which ceiling it is: `gemm`, or "copy_bytes_per_s" where intensity × bandwidth is lower)."""
    by_copy = flops / nbytes * ceil["copy_bytes_per_s"]
    return (ceil[gemm], gemm) if ceil[gemm] <= by_copy else (by_copy, "copy_bytes_per_s")
