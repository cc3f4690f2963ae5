"""Tile sizes per device in one place: query rows, key tiles, head groups and the score-tile budget, with reasons."""
from __future__ import annotations

import contextlib
import contextvars
import functools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

import torch

MiB = 1 << 20


def fit_rows(budget: int, bytes_per_row: int, lo: int, hi: int, step: int) -> int:
    """The largest multiple of `step` in [lo, hi] such that rows × bytes_per_row <= budget (lo if none)."""
    rows = budget // max(1, bytes_per_row) // step * step
    return int(max(lo, min(hi, rows)))


@functools.lru_cache(maxsize=None)
def cache_bytes(level: int) -> int:
    """Size of cpu0's cache at `level` from sysfs (L2 is per core, L3 shared); 0 when it cannot be read."""
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            if (index / "level").read_text().strip() == str(level):
                text = (index / "size").read_text().strip().upper()
                unit = {"K": 1024, "M": 1024 * 1024}.get(text[-1], 1)
                return int(text.rstrip("KM")) * unit
        except (OSError, ValueError):
            continue
    return 0


def l2_cache_bytes() -> int:
    """Per-core L2 size; 1 MiB when it cannot be read."""
    return cache_bytes(2) or 1 << 20


@dataclass(frozen=True)
class CpuTiling:
    """Cache-sized tiles: each thread works on whole heads whose score tiles stay in its own L2.

    The score tile of one head group may take twice the L2 size per thread (4 MiB on 2 cores with 1 MiB L2
    each): the tile is written by one GEMM, rewritten by the softmax and read by the next GEMM, and on the EPYC
    this was tuned on 2 MiB per thread beat 4 and 8 MiB per thread by 5-10 % (fp32 and bf16, L = 1024..4096).
    """

    threads: int
    l2_bytes: int

    # fused: query rows per tile in steps of 32 from 32 to 256: below 32 rows the GEMMs lose speed, above 256
    # they gain nothing (the sweep of 32-512 rows in docs/records/2026-11-23-epyc-cpu-targets.md found these within
    # 1-2 % of the best)
    FUSED_ROWS = (32, 256, 32)
    # fused's inference forward with no causal flag and no mask (no key to skip): up to 512 rows. On the AMX Xeon:
    # bf16 L 4096 E 128 0.83-0.90 of the time of 256 rows; causal, where a tile computes its diagonal block whole,
    # slower (fp32 L 2048: 1.42-1.54 -> 1.70 × torch). docs/records/2026-11-28-xeon-amx-unshifted.md
    FUSED_ROWS_WHOLE = (32, 512, 32)
    # chunked: 128 query rows keep the GEMMs efficient while a causal row of tiles wastes at most half a tile on
    # the diagonal; the key tile (128 to 1024, a bound independent of L) then fills the budget
    CHUNKED_Q_TILE = 128
    CHUNKED_K_TILE = (128, 1024, 128)
    # An fp32 tile made from a tile of the input dtype and an fp32 operand (P = exp(S − max), dS = P ⊙ dP): copy
    # the input-dtype tile into the fp32 one first, then work in place. torch's CPU sub/mul of mixed dtypes casts
    # into a temporary first: slower and larger than the copy and the fp32 operation (docs/explanation/tiling.md).
    CAST_FIRST = True
    # fp16 on the CPU always computes in fp32 (`compute.fp16_in_fp32`): no fp16 score tile to read from
    SOFTMAX_FROM_HALF = False
    # dS = P ⊙ (dP − rowsum(P ⊙ dP)) of a row whose keys fit one tile (fused's backward): torch's softmax-backward
    # kernel in one pass over fp32 P and dP, instead of a product, a row sum and an addcmul (three passes); the
    # formula naive's softmax backward computes (docs/explanation/tiling.md)
    SOFTMAX_BACKWARD = True
    # Kᵀ and Vᵀ of a key range short of L (a causal tile's keys, a key tile), not fp32: the rows copied into a
    # compact block first (`tiles.columns_t`). oneDNN's bf16 GEMM takes a transposed batch only when it is compact, and
    # torch's own copy of the strided view is element by element: the score GEMM with its copy took 0.45-0.76 of
    # the time on the AMX Xeon (docs/explanation/tiling.md). fp32 GEMMs take the strided view as it is.
    COMPACT_TRANSPOSED = True
    # fused's fp32 inference forward with bounded scores (`compute.unshifted_exp`): P = exp(S) in place, no row max,
    # its row sums, and P V divided by them, instead of torch.softmax (2 G scores/s a core on the AMX Xeon, an exp
    # pass alone 6): with the wider tiles, 0.87-0.90 of the old time there (fp32, L 2048, E 64;
    # docs/explanation/tiling.md). Not bf16 tiles: there an exp pass and a row sum cost more than the softmax.
    UNSHIFTED_EXP = True
    # fused's masked inference forward: tiles as tall as the keys they compute allow (`fused.widened`). A 512-key
    # window, fp32 L 8192: 32 → 256 rows, 0.29 → 0.15-0.17 of causal (AVX2 EPYC, records/2026-12-04-epyc-avx2-*)
    WIDEN_MASKED = True

    @property
    def score_tile_bytes(self) -> int:
        return self.threads * 2 * self.l2_bytes

    def group_heads(self, heads: int, bytes_per_head: int) -> int:
        """As many kv heads as fit the budget, at least one per thread (each GEMM then gives each thread whole
        heads, whose tiles stay in that core's cache)."""
        t = self.threads
        return fit_rows(self.score_tile_bytes, bytes_per_head, t, max(t, heads), t)

    def fused_tile(self, b: int, hkv: int, g: int, lq: int, lk: int, itemsize: int,
                   whole: bool = False) -> tuple[int, int]:
        """(query rows, kv heads): rows that fit the budget for one head per thread, then as many heads as fit;
        `whole`: an inference forward whose tiles compute every key (FUSED_ROWS_WHOLE)."""
        bounds = self.FUSED_ROWS_WHOLE if whole else self.FUSED_ROWS
        rows = min(lq, fit_rows(self.score_tile_bytes, self.threads * g * lk * itemsize, *bounds))
        return rows, self.group_heads(b * hkv, rows * g * lk * itemsize)

    def chunked_tile(self, heads: int) -> tuple[int, int]:
        """(query rows, keys) per tile: `heads` (B·Hq) fp32 score tiles of CHUNKED_Q_TILE rows within the budget."""
        q = self.CHUNKED_Q_TILE
        return q, fit_rows(self.score_tile_bytes, heads * q * 4, *self.CHUNKED_K_TILE)


@dataclass(frozen=True)
class CudaTiling:
    """Few large tiles: on a GPU each tile costs a handful of kernel launches (a few µs of host time each in eager
    PyTorch), and the score tile never fits the L2 (50 MiB on an H200) anyway, so tiles are as large as the
    causal skip and the memory budget allow.

    The score-tile budget is a sixteenth of the device's free memory, at most 512 MiB: on any card with 8 GiB
    free that is 512 MiB, which holds a 1024-row fp32 tile of 32 heads × 4096 keys (fused's training tile in the
    llm preset at L 4096), and it leaves the rest of the card to the inputs, the gradients and the caller.
    """

    free_bytes: int

    BUDGET_CAP = 512 * MiB
    BUDGET_SHARE = 16  # budget = free memory / 16, at most BUDGET_CAP
    # fused: 64 to 1024 query rows in steps of 64. 1024 rows at L 4096 causal compute 1.25× the causal minimum
    # (today's 2048 rows: 1.5×) in 4 tiles of a few launches each, and each tile's GEMMs are 1024 × keys × E
    # per head: thousands of thread blocks on 132 SMs. 64 is the tile map's key block, the smallest useful tile.
    FUSED_ROWS = (64, 1024, 64)
    # chunked: 1024 × 1024 tiles. The old 128-row tiles issued ~15 launches per 128 × 1024 key tile and were
    # launch-bound (3-6× slower than naive); 1024 × 1024 has 8× fewer tiles, the same causal waste as fused
    # (1.25× at L 4096), and a score tile that does not grow with L (O(L) memory: 32 heads hold 128 MiB fp32
    # plus 64 MiB bf16, against naive's gigabytes at L 4096).
    CHUNKED_Q_TILE = (64, 1024, 64)
    CHUNKED_K_TILE = (128, 1024, 128)
    # Measured by tools/fused_variants.py on an H200 (records/2026-11-30-h200-variants-speed-asv), L 4096 causal,
    # 32 heads x 128, each the whole call against its alternative. One mixed-dtype kernel per tile: copying into
    # fp32 first (CpuTiling.CAST_FIRST) took 1.07-1.13x (chunked fwd and fwd+bwd, fused fwd+bwd; bf16 and fp16).
    CAST_FIRST = False
    # fused's fp16 training forward: softmax reading the fp16 scores and writing fp32 P in one kernel (CUDA's
    # half-to-float softmax; torch has it for fp16, not bf16), the causal band and the row max on the fp16 tile:
    # about 10 of the ~32 bytes that pass moves per score, the same answers. The tile's pass 0.56x, fused fwd+bwd
    # 0.94x (11.4 against 12.2 ms).
    SOFTMAX_FROM_HALF = True
    # fused's dS through torch's softmax-backward kernel (CpuTiling.SOFTMAX_BACKWARD), two kernels instead of
    # three: fused fwd+bwd took 1.01x with it (bf16 and fp16)
    SOFTMAX_BACKWARD = False
    # cuBLAS takes any batch stride: the strided Kᵀ and Vᵀ go to the GEMM as they are, no copy
    COMPACT_TRANSPOSED = False
    UNSHIFTED_EXP = False  # a GPU tile is bound by launches, not the softmax's passes; the bound's reductions sync
    WIDEN_MASKED = False  # taller tiles compute 1.5-2× the keys a row: 1.77× the time on an H200 (tiling.md)

    @property
    def score_tile_bytes(self) -> int:
        return min(self.BUDGET_CAP, self.free_bytes // self.BUDGET_SHARE // MiB * MiB)

    def group_heads(self, heads: int, bytes_per_head: int) -> int:
        """All heads in one group when they fit the budget (one launch covers them), else as many as fit."""
        return fit_rows(self.score_tile_bytes, bytes_per_head, 1, max(1, heads), 1)

    def fused_tile(self, b: int, hkv: int, g: int, lq: int, lk: int, itemsize: int,
                   whole: bool = False) -> tuple[int, int]:
        """(query rows, kv heads): up to 1024 rows of every head within the budget, then fewer heads if even
        64 rows of all of them do not fit (`whole` changes nothing here)."""
        rows = min(fit_rows(self.score_tile_bytes, b * hkv * g * lk * itemsize, *self.FUSED_ROWS), lq)
        return rows, self.group_heads(b * hkv, rows * g * lk * itemsize)

    def chunked_tile(self, heads: int) -> tuple[int, int]:
        """(query rows, keys) per tile: 1024 × 1024, smaller where `heads` (B·Hq) such tiles of fp32 scores and
        their input-dtype copy would pass the budget (keys first, then rows)."""
        k = fit_rows(self.score_tile_bytes, heads * self.CHUNKED_Q_TILE[1] * 6, *self.CHUNKED_K_TILE)
        return fit_rows(self.score_tile_bytes, heads * k * 6, *self.CHUNKED_Q_TILE), k


# bf16 on a CPU: the tiled implementations compute in fp32 (inputs widened once, the answer rounded once) where this
# CPU's bf16 GEMM is slower than its fp32 GEMM. With AVX-512 BF16 or AMX the bf16 GEMM is the faster one; without
# them oneDNN emulates it, and on a 2-core Xeon with AVX-512 but no BF16 it ran at 25 GF/s against 129 GF/s for
# fp32, which made bf16 `fused` 4.3× torch's SDPA (torch's CPU kernel computes bf16 in fp32 there). The rates are
# measured once per process, on one thread, on a score-tile GEMM (`gemm_rates`); fp32 is chosen only below
# BF16_SLOW × the fp32 rate, so a CPU where the two are close keeps bf16 in every process, not one or the other by
# the noise of the probe. SDPA_BENCH_CPU_BF16 = "bf16" or "fp32" sets the choice (another class of CPU's path,
# tested on this one).
BF16_SLOW = 0.7
BF16_ENV = "SDPA_BENCH_CPU_BF16"
PROBE_SHAPE = (256, 64, 1024)  # rows × head dim × keys of one head's score tile (fused's largest row count)
PROBE_REPEATS = 5


@functools.lru_cache(maxsize=None)
def gemm_rates() -> dict[str, float]:
    """GF/s of one core's bf16 and fp32 GEMMs of one head's score tile (PROBE_SHAPE): the best of PROBE_REPEATS
    calls of each, the two dtypes alternating, after two warm-up calls each (oneDNN's first bf16 calls build its
    kernels: 9 GF/s on the AMX Xeon, then 500). Once per process, a few milliseconds.

    One thread, timed by the thread's own CPU time: with several threads, a process busy on another core stalls
    the GEMM's thread barrier, and both dtypes then take about the stall's time. A 2-core run whose other core was
    busy measured 15 GF/s for bf16 against 9 for fp32 where the two are 46 and 211, and chose bf16. The ratio of
    the two rates is the same per core as for the whole CPU."""
    import time

    m, k, n = PROBE_SHAPE
    operands = {name: (torch.ones(m, k, dtype=dtype), torch.ones(k, n, dtype=dtype), torch.empty(m, n, dtype=dtype))
                for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32))}
    best = dict.fromkeys(operands, float("inf"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for repeat in range(2 + PROBE_REPEATS):
            for name, (a, b, out) in operands.items():
                start = time.thread_time()
                torch.mm(a, b, out=out)
                if repeat >= 2:
                    best[name] = min(best[name], time.thread_time() - start)
    finally:
        torch.set_num_threads(threads)
    return {name: 2 * m * k * n / max(t, 1e-9) / 1e9 for name, t in best.items()}


@dataclass(frozen=True)
class Bf16Compute:
    """The dtype bf16 calls compute in on this CPU, and why (recorded with a benchmark's point as its `op`)."""

    dtype: torch.dtype
    reason: str

    @property
    def widen(self) -> bool:
        return self.dtype == torch.float32


def bf16_compute(device: torch.device) -> Bf16Compute:
    """How the tiled implementations compute a bf16 call on `device`: in bf16 on CUDA and on a CPU whose bf16 GEMM
    keeps up, in fp32 on a CPU whose bf16 GEMM runs below BF16_SLOW × its fp32 rate, or as SDPA_BENCH_CPU_BF16
    says. ValueError for another value of that variable."""
    if device.type != "cpu" or isinstance(_FORCED.get(), CudaTiling):  # (a CUDA plan checked on the CPU too)
        return Bf16Compute(torch.bfloat16, "bf16 compute")
    forced = os.environ.get(BF16_ENV, "").strip().lower()
    if forced:
        if forced not in ("bf16", "fp32"):
            raise ValueError(f"{BF16_ENV} should be bf16 or fp32 (or unset), got {forced!r}")
        dtype = torch.bfloat16 if forced == "bf16" else torch.float32
        return Bf16Compute(dtype, f"{forced} compute ({BF16_ENV}={forced})")
    rates = gemm_rates()
    bf16, fp32 = rates["bf16"], rates["fp32"]
    slow = bf16 < BF16_SLOW * fp32
    return Bf16Compute(torch.float32 if slow else torch.bfloat16,
                       f"{'fp32' if slow else 'bf16'} compute (this CPU's bf16 GEMM {bf16:.0f} GF/s, "
                       f"fp32 {fp32:.0f} GF/s)")


TilePolicy = CpuTiling | CudaTiling
NOMINAL_FREE_BYTES = 64 << 30  # where the free memory cannot be read (a plan forced on other tensors): a large card
_FORCED: contextvars.ContextVar[TilePolicy | None] = contextvars.ContextVar("forced_tiling", default=None)


def free_device_bytes(device: torch.device) -> int:
    """Free memory of a CUDA device (the driver's count), or NOMINAL_FREE_BYTES where it cannot be read."""
    if device.type == "cuda" and torch.cuda.is_available():
        return int(torch.cuda.mem_get_info(device)[0])
    return NOMINAL_FREE_BYTES


def tiling_for(device: torch.device) -> TilePolicy:
    """The tiling policy of `device`, or the CUDA one forced by `cuda_tiling` (for any device).

    Call it where a plan is built (`prepare_inputs`): on CUDA it reads the free memory from the driver."""
    forced = _FORCED.get()
    if forced is not None:
        return forced
    if device.type == "cpu":
        return CpuTiling(torch.get_num_threads(), l2_cache_bytes())
    return CudaTiling(free_device_bytes(device))


Choice = Literal["CAST_FIRST", "SOFTMAX_FROM_HALF", "SOFTMAX_BACKWARD", "COMPACT_TRANSPOSED", "UNSHIFTED_EXP",
                 "WIDEN_MASKED"]


def choice(device: torch.device, name: Choice) -> bool:
    """A class-level choice of `device`'s policy (or the forced one), e.g. `CAST_FIRST`: cheap in a call, since
    it does not read the free memory. ValueError for a name that is not one of `Choice`."""
    if name not in get_args(Choice):
        raise ValueError(f"unknown tiling choice {name!r} (one of {', '.join(get_args(Choice))})")
    forced = _FORCED.get()
    return getattr(type(forced) if forced is not None else CpuTiling if device.type == "cpu" else CudaTiling, name)


@contextlib.contextmanager
def forced_tiling(policy: TilePolicy) -> Iterator[TilePolicy]:
    """Plan with `policy` whatever the tensors' device: a CUDA plan's answers, launches and memory can then be
    checked on the CPU. Prepare and call inside the block (a prepared closure keeps the plan it was given)."""
    token = _FORCED.set(policy)
    try:
        yield policy
    finally:
        _FORCED.reset(token)


def cuda_tiling(free_bytes: int = NOMINAL_FREE_BYTES) -> contextlib.AbstractContextManager[TilePolicy]:
    """`forced_tiling` with the CUDA policy of a GPU that has `free_bytes` free; ValueError unless positive."""
    if free_bytes <= 0:
        raise ValueError(f"free_bytes must be positive, got {free_bytes}")
    return forced_tiling(CudaTiling(free_bytes))


def group_heads(device: torch.device, heads: int, bytes_per_head: int) -> int:
    """KV heads processed together on `device` (see CpuTiling.group_heads, CudaTiling.group_heads)."""
    return tiling_for(device).group_heads(heads, bytes_per_head)


def policy_key(device: torch.device) -> tuple:
    """What a plan built for `device` depends on: the policy's class (its constants), its score-tile budget and the
    thread count. Plans made under one key serve every call with the same key (`tilemap.recent_derived`); on
    CUDA the budget is the free memory's share, so a plan is not reused after the free memory shrank past it."""
    policy = tiling_for(device)
    return type(policy).__name__, policy.score_tile_bytes, torch.get_num_threads()
