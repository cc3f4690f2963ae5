"""How `fused`'s query rows per tile move its time on the mask structures.

Its measurements: docs/records/2026-11-24-epyc-mask-structures.md.

    python tools/fused_rows.py --length 8192 [--rounds 7] [--profile]

For fp32 and bf16, causal, `window-512` and `documents-1024` at the given L (E = 64, B = 1, H = 8, forward), `fused`
is prepared once with its own tile shape (`rows=None` in the table) and once for each fixed number of query rows
per tile (32, 64, 128, 256; the heads per tile still follow `budget.group_heads`). All these closures are then
timed in shared interleaved rounds, one call each per round, and each time is the median over rounds; every
time is also given as a fraction of the default causal time of its dtype. --profile adds torch.profiler's
operator table of three default `window-512` calls per dtype: where a structured call's time goes. Not a test.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import sdpa_impls.impls.fused as fused  # noqa: E402
from sdpa_impls.bench.check import CaseContext  # noqa: E402
from sdpa_impls.bench.grid import Case  # noqa: E402
from sdpa_impls.impls._tiled.budget import group_heads  # noqa: E402
from sdpa_impls.registry import get  # noqa: E402

ROWS = (None, 32, 64, 128, 256)
STRUCTURES = (("none", True), ("window-512", False), ("documents-1024", False))
DEFAULT_SHAPE = fused.tile_shape


def fixed_rows(rows: int | None):
    """fused's tile_shape with `rows` query rows per tile (None: its own choice)."""
    def shape(device, b, hkv, g, lq, lk, itemsize):
        if rows is None:
            return DEFAULT_SHAPE(device, b, hkv, g, lq, lk, itemsize)
        r = min(rows, lq)
        return r, group_heads(device, b * hkv, r * g * lk * itemsize)
    return shape


def case(length: int, dtype: str, mask: str, causal: bool) -> Case:
    return Case(lq=length, lk=length, e=64, dtype=dtype, causal=causal, mode="fwd", mask=mask, batch=1, heads_q=8,
                heads_kv=8)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--length", type=int, default=8192, help="L (default 8192)")
    p.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    p.add_argument("--profile", action="store_true", help="also profile three default window-512 calls per dtype")
    args = p.parse_args(argv)
    closures = {}
    try:
        for dtype in ("fp32", "bf16"):
            for mask, causal in STRUCTURES:
                ctx = CaseContext(case(args.length, dtype, mask, causal), "cpu", 0)
                for rows in ROWS:
                    fused.tile_shape = fixed_rows(rows)
                    fn = ctx.inputs.prepare(get("fused"))  # a new tile map and plan for every shape
                    fn()
                    closures[(dtype, mask, rows)] = fn
    finally:
        fused.tile_shape = DEFAULT_SHAPE
    times: dict[tuple, list[float]] = {k: [] for k in closures}
    for _ in range(args.rounds):
        for k, fn in closures.items():
            start = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - start)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"fused, L={args.length}, E=64, B=1, H=8, forward; median of {args.rounds} interleaved rounds, ms "
          "(fraction of the default causal time of the dtype)")
    print("| dtype | rows per tile | causal | window-512 | documents-1024 |")
    print("|---|---|---|---|---|")
    for dtype in ("fp32", "bf16"):
        anchor = med[(dtype, "none", None)]
        for rows in ROWS:
            cells = [f"{med[(dtype, m, rows)] * 1e3:.1f} ({med[(dtype, m, rows)] / anchor:.3f})" for m, _ in STRUCTURES]
            print(f"| {dtype} | {rows or 'its own'} | " + " | ".join(cells) + " |")
    if args.profile:
        from torch.profiler import ProfilerActivity, profile
        for dtype in ("fp32", "bf16"):
            fn = closures[(dtype, "window-512", None)]
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(3):
                    fn()
            print(f"\n{dtype} window-512, its own tile shape, three calls:")
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=10))
    return 0


if __name__ == "__main__":
    sys.exit(main())
