"""The mask-structure targets and the flex comparison, measured in one run: every (case, implementation) point
timed in shared interleaved rounds, so a ratio between two cases (fused on window-512 against fused causal) sees
the same slow periods of a shared machine as a ratio between two implementations.

    flock /tmp/sdpa-measure.lock python tools/mask_targets.py --out /tmp/mask-targets

Each point is checked against fp64 before it is timed (bench.measure.prepare_point); flex compiles before its
first sample. Prints the targets table (docs/records/2026-11-24-epyc-mask-structures.md) and the fused/chunked vs flex
table, and writes both with the raw medians to --out/mask-targets.json.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sdpa_impls.bench.ceilings import RunCeilings  # noqa: E402
from sdpa_impls.bench.check import CaseContext  # noqa: E402
from sdpa_impls.bench.grid import PRESETS, Case  # noqa: E402
from sdpa_impls.bench.measure import Options, prepare_point  # noqa: E402
from sdpa_impls.bench.timing import call_context  # noqa: E402

STRUCTURES = (("none", True), ("window-512", False), ("documents-1024", False), ("prefix-1024", False),
              ("alibi", True))
IMPLS = ("fused", "chunked", "torch_sdpa", "flex")
SERVE_IMPLS = ("fused", "chunked", "torch_sdpa")
OPTIONS = Options(warmup=1)


def cases(lengths: tuple[int, ...]) -> list[tuple[Case, tuple[str, ...]]]:
    rows = [(Case(lq=n, lk=n, e=64, dtype=d, mask=m, causal=c), IMPLS)
            for n in lengths for d in ("fp32", "bf16") for m, c in STRUCTURES]
    return rows + [(c, SERVE_IMPLS) for c in PRESETS["serve"]]


def measure(plan: list[tuple[Case, tuple[str, ...]]], rounds: int, copy: RunCeilings) -> dict:
    """Prepare every point (fp64 check, compilation), then `rounds` rounds of one sample of each; a copy-ceiling
    sample follows every round. Returns {(case id, impl): {"median_s", "samples", "compile_s"}} and skips."""
    live, out, start = [], {}, time.perf_counter()
    for case, impls in plan:
        ctx = CaseContext(case, "cpu")
        for impl in impls:
            try:
                point = prepare_point(impl, ctx)
                with call_context(point.fn):
                    sampler = OPTIONS.sampler(point.fn, "cpu")
            except Exception as exc:  # a skip or a failure is a row of the table, never the end of the run
                out[(case.id, impl)] = {"status": type(exc).__name__, "reason": str(exc)[:200]}
                print(f"[{time.perf_counter() - start:5.0f}s] {case.id} {impl}: {type(exc).__name__}", flush=True)
                continue
            live.append((case, impl, point, sampler))
            print(f"[{time.perf_counter() - start:5.0f}s] prepared {case.id} {impl}", flush=True)
        ctx = None
    samples: dict[tuple[str, str], list[float]] = {(c.id, i): [] for c, i, _, _ in live}
    for r in range(rounds):
        for case, impl, point, sampler in live:
            with call_context(point.fn):
                samples[(case.id, impl)].append(sampler.sample())
        copy.sample(("copy_bytes_per_s",), calls=1)
        print(f"[{time.perf_counter() - start:5.0f}s] round {r + 1}/{rounds}", flush=True)
    for case, impl, point, sampler in live:
        s = samples[(case.id, impl)]
        out[(case.id, impl)] = {"status": "ok", "median_s": statistics.median(s), "samples": s,
                                "compile_s": point.compile_s}
    return out


def ratio(m: dict, a: tuple[str, str], b: tuple[str, str]) -> float | None:
    if m.get(a, {}).get("status") != "ok" or m.get(b, {}).get("status") != "ok":
        return None
    return m[a]["median_s"] / m[b]["median_s"]


def fmt(x: float | None, limit: float | None = None) -> str:
    if x is None:
        return "–"
    return f"{x:.3f}" + ("" if limit is None else (" ✓" if x <= limit else " ✗"))


def targets_table(m: dict, n: int) -> list[str]:
    lines = ["| target | fp32 | bf16 |", "|---|---|---|"]
    ids = {d: {mask: Case(lq=n, lk=n, e=64, dtype=d, mask=mask, causal=c).id for mask, c in STRUCTURES}
           for d in ("fp32", "bf16")}
    for impl, mask, against, limit in (("fused", "window-512", "causal", 0.25), ("fused", "window-512", "sdpa", 0.2),
                                       ("fused", "documents-1024", "causal", 0.3),
                                       ("chunked", "window-512", "causal", 0.35),
                                       ("chunked", "documents-1024", "causal", 0.4)):
        cells = []
        for d in ("fp32", "bf16"):
            ref = (ids[d]["none"], impl) if against == "causal" else (ids[d][mask], "torch_sdpa")
            cells.append(fmt(ratio(m, (ids[d][mask], impl), ref), limit))
        what = f"{impl} causal" if against == "causal" else f"torch_sdpa, same dense mask"
        lines.append(f"| `{impl}` {mask} ≤ {limit} × {what} | {cells[0]} | {cells[1]} |")
    return lines


def serve_table(m: dict, copy_bps: float) -> list[str]:
    lines = ["| case | fused / torch_sdpa | chunked / torch_sdpa | fused GB/s | fused % of copy | torch_sdpa GB/s |",
             "|---|---|---|---|---|---|"]
    for c in PRESETS["serve"]:
        f, t = m.get((c.id, "fused"), {}), m.get((c.id, "torch_sdpa"), {})
        gbps = (lambda p: c.min_bytes() / p["median_s"] / 1e9 if p.get("status") == "ok" else None)
        fg, tg = gbps(f), gbps(t)
        lines.append(f"| {c.id} | {fmt(ratio(m, (c.id, 'fused'), (c.id, 'torch_sdpa')), 1.0)} | "
                     f"{fmt(ratio(m, (c.id, 'chunked'), (c.id, 'torch_sdpa')))} | {fmt(fg)} | "
                     f"{fmt(None if fg is None else 100 * fg * 1e9 / copy_bps)} | {fmt(tg)} |")
    return lines


def flex_table(m: dict, lengths: tuple[int, ...]) -> list[str]:
    lines = ["| case | fused / flex | chunked / flex | torch_sdpa / flex | flex ms | flex compile s |",
             "|---|---|---|---|---|---|"]
    for n in lengths:
        for d in ("fp32", "bf16"):
            for mask, causal in STRUCTURES:
                cid = Case(lq=n, lk=n, e=64, dtype=d, mask=mask, causal=causal).id
                flex = m.get((cid, "flex"), {})
                ms = f"{flex['median_s'] * 1e3:.1f}" if flex.get("status") == "ok" else flex.get("status", "–")
                comp = flex.get("compile_s")
                lines.append(f"| {cid} | {fmt(ratio(m, (cid, 'fused'), (cid, 'flex')), 1.0)} | "
                             f"{fmt(ratio(m, (cid, 'chunked'), (cid, 'flex')))} | "
                             f"{fmt(ratio(m, (cid, 'torch_sdpa'), (cid, 'flex')))} | {ms} | "
                             f"{'–' if comp is None else f'{comp:.1f}'} |")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--lengths", default="2048,8192")
    args = p.parse_args()
    lengths = tuple(int(x) for x in args.lengths.split(","))
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
    copy = RunCeilings("cpu", ("copy_bytes_per_s",))
    copy.sample()
    m = measure(cases(lengths), args.rounds, copy)
    copy_bps = copy.values()["copy_bytes_per_s"]
    text = [f"Measured in one run of {time.perf_counter() - start:.0f} s, {args.rounds} interleaved rounds; "
            f"copy ceiling {copy_bps / 1e9:.1f} GB/s (median of {len(copy.samples['copy_bytes_per_s'])} samples).",
            "", f"Targets at L = {max(lengths)} (forward, E = 64, B = 1, H = 8):", "",
            *targets_table(m, max(lengths)), "", "serve (decode batches):", "", *serve_table(m, copy_bps), "",
            "fused and chunked against compiled flex (forward, E = 64, B = 1, H = 8):", "",
            *flex_table(m, lengths)]
    print("\n".join(text))
    (args.out / "mask-targets.md").write_text("\n".join(text) + "\n", encoding="utf-8")
    (args.out / "mask-targets.json").write_text(json.dumps(
        {"|".join(k): v for k, v in m.items()} | {"copy_bytes_per_s": copy.samples["copy_bytes_per_s"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
