"""`fused` against torch's SDPA on each class of CPU this machine can stand in for, in one interleaved run per class:

    flock /tmp/sdpa-measure.lock python tools/cpu_classes.py --out /tmp/cpu-classes
    python tools/cpu_classes.py --classes native,AVX512_CORE --out DIR   # a subset

A class is this CPU as oneDNN is allowed to use it (ONEDNN_MAX_CPU_ISA): `native` (everything it has, AMX
included), `AVX512_CORE_BF16` (AVX-512 BF16, no AMX: the EPYC class), `AVX512_CORE` (AVX-512 without BF16: the
Cascade Lake / Ice Lake class), `AVX2`. Each class runs in a process of its own (the cap is read when oneDNN
starts). A cap lowers only what oneDNN runs (torch's GEMMs and its CPU flash kernel's); torch's own vectorized
loops (the softmax) keep this CPU's AVX-512, so a capped class is an approximation of that CPU, not a copy.

Per class, every point is timed in shared rounds (one sample of each per round, `--rounds` of them, in an order
shuffled each round), so each ratio compares two points that saw the same slow periods:
- fused / torch_sdpa, bf16, L 4096, E 128, forward (and fused with either compute dtype forced, to show the choice);
- fused / torch_sdpa, fp32, L 2048, E 64, forward;
- the drop-in `fused(q, k, v, attn_mask=window)` with a 512-key sliding window, fp32, L 8192, against fused's
  prepared causal call of the same length: with the mask's tile map remembered from the call before (a model's
  layers after the first), and derived again on every call (a new mask each call).
Prepared points are checked against fp64 first (bench.measure.prepare_point); the drop-in window call is checked
against torch's SDPA with the same mask. Writes DIR/<class>.json with every sample and prints the table.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLASSES = ("native", "AVX512_CORE_BF16", "AVX512_CORE", "AVX2")
BF16_CASE = dict(lq=4096, lk=4096, e=128, dtype="bf16")
FP32_CASE = dict(lq=2048, lk=2048, e=64, dtype="fp32")
LONG = 8192
SLOWEST_BF16_GF = 10.0  # below this bf16 GEMM rate the forced-bf16 point is not timed


def measure_class(rounds: int) -> dict:
    """This process's class: every point prepared, then `rounds` shared rounds. Returns the samples and notes."""
    sys.path.insert(0, str(ROOT))
    import torch

    import sdpa_impls
    from sdpa_impls.bench.check import CaseContext
    from sdpa_impls.bench.grid import Case
    from sdpa_impls.bench.measure import Options, prepare_point
    from sdpa_impls.bench.timing import call_context
    from sdpa_impls.impls._tiled import tilemap
    from sdpa_impls.impls._tiled.budget import BF16_ENV, bf16_compute, gemm_rates
    from sdpa_impls.impls._tiled.compute import exp_rates, unshifted_base

    options = Options(warmup=1)
    points: dict[str, object] = {}
    notes = {"bf16_choice": bf16_compute(torch.device("cpu")).reason, "threads": torch.get_num_threads(),
             "gemm_rates": gemm_rates(), "exp_choice": unshifted_base(torch.device("cpu")).reason,
             "exp_rates": exp_rates(), "torch": torch.__version__,
             "isa": os.environ.get("ONEDNN_MAX_CPU_ISA", "native")}

    def prepared(label: str, impl: str, case: Case, forced: str | None = None) -> None:
        if forced:
            os.environ[BF16_ENV] = forced
        try:
            point = prepare_point(impl, CaseContext(case, "cpu"))
        finally:
            os.environ.pop(BF16_ENV, None)
        with call_context(point.fn):
            points[label] = (point.fn, options.sampler(point.fn, "cpu"))
        print(f"  prepared {label} ({point.op or 'no op'})", flush=True)

    bf16, fp32 = Case(**BF16_CASE), Case(**FP32_CASE)
    prepared("bf16 fused", "fused", bf16)
    if notes["gemm_rates"]["bf16"] >= SLOWEST_BF16_GF:
        prepared("bf16 fused, bf16 compute", "fused", bf16, "bf16")
    else:  # oneDNN capped at AVX2 emulates bf16 at ~2 GF/s: one such call of this case takes half a minute
        print(f"  bf16 compute not timed: this class's bf16 GEMM runs {notes['gemm_rates']['bf16']:.0f} GF/s")
    prepared("bf16 fused, fp32 compute", "fused", bf16, "fp32")
    prepared("bf16 torch_sdpa", "torch_sdpa", bf16)
    # torch's own bf16 kernel is not all oneDNN's: a cap slows it less than it slows a real CPU of that class, where
    # torch's bf16 SDPA takes its fp32 time (2-core Xeon without AVX-512 BF16); its fp32 time stands in for it
    prepared("bf16 case, fp32 torch_sdpa", "torch_sdpa", Case(**(BF16_CASE | {"dtype": "fp32"})))
    prepared("fp32 fused", "fused", fp32)
    prepared("fp32 torch_sdpa", "torch_sdpa", fp32)

    causal = Case(lq=LONG, lk=LONG, e=64, dtype="fp32", causal=True)
    prepared("long fused causal", "fused", causal)
    window_case = Case(lq=LONG, lk=LONG, e=64, dtype="fp32", mask="window-512")
    inputs = CaseContext(window_case, "cpu").inputs.args()
    fused = sdpa_impls.get("fused")
    want = torch.nn.functional.scaled_dot_product_attention(**inputs)
    got = fused(**inputs)
    error = (got - want).abs().max().item()
    assert error < 1e-4, f"drop-in window call differs from torch's SDPA by {error:.3g}"
    notes["window_error_vs_torch"] = error

    def drop_in() -> torch.Tensor:
        return fused(**inputs)  # the mask's tile map as a model's every layer finds it: remembered after the first

    def drop_in_afresh() -> torch.Tensor:
        tilemap._recent.clear()  # as if each call brought a new mask: its tile map derived again
        return fused(**inputs)

    for label, fn in (("long fused drop-in window-512", drop_in), ("long fused drop-in window-512, afresh",
                                                                    drop_in_afresh)):
        with call_context(fn):
            points[label] = (fn, options.sampler(fn, "cpu"))
    samples: dict[str, list[float]] = {label: [] for label in points}
    start = time.perf_counter()
    order = random.Random(rounds)
    for r in range(rounds):  # shuffled each round: a call runs slower right after a larger one, whichever it is
        for label, (fn, sampler) in order.sample(list(points.items()), len(points)):
            with call_context(fn):
                samples[label].append(sampler.sample())
        print(f"  [{time.perf_counter() - start:4.0f}s] round {r + 1}/{rounds}", flush=True)
    return {"notes": notes, "samples": samples}


def ratios(result: dict) -> dict[str, float]:
    med = {k: statistics.median(v) for k, v in result["samples"].items()}
    return {"bf16 fused / torch_sdpa (L4096 E128 fwd)": med["bf16 fused"] / med["bf16 torch_sdpa"],
            "  with bf16 compute forced": med.get("bf16 fused, bf16 compute", float("nan")) / med["bf16 torch_sdpa"],
            "  with fp32 compute forced": med["bf16 fused, fp32 compute"] / med["bf16 torch_sdpa"],
            "  fused bf16 / torch_sdpa fp32 (same case)": med["bf16 fused"] / med["bf16 case, fp32 torch_sdpa"],
            "fp32 fused / torch_sdpa (L2048 E64 fwd)": med["fp32 fused"] / med["fp32 torch_sdpa"],
            "drop-in window-512 / fused causal (fp32 L8192)": med["long fused drop-in window-512"]
            / med["long fused causal"],
            "  with the mask's tile map derived every call": med["long fused drop-in window-512, afresh"]
            / med["long fused causal"]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--classes", default=",".join(CLASSES))
    p.add_argument("--one", help=argparse.SUPPRESS)  # the child process of one class
    args = p.parse_args()
    if args.one:
        result = measure_class(args.rounds)
        (args.out / f"{args.one}.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.classes.split(","):
        if name not in CLASSES:
            p.error(f"unknown class {name!r} (one of {', '.join(CLASSES)})")
        env = {k: v for k, v in os.environ.items() if k not in ("ONEDNN_MAX_CPU_ISA", "SDPA_BENCH_CPU_BF16")}
        if name != "native":
            env["ONEDNN_MAX_CPU_ISA"] = name
        print(f"{name}:", flush=True)
        done = subprocess.run([sys.executable, __file__, "--out", str(args.out), "--rounds", str(args.rounds),
                               "--one", name], env=env)
        if done.returncode != 0:
            print(f"  {name}: failed (exit {done.returncode})")
            continue
        result = json.loads((args.out / f"{name}.json").read_text(encoding="utf-8"))
        print(f"  {result['notes']['bf16_choice']}; unshifted {result['notes']['exp_choice']}; "
              f"{result['notes']['threads']} threads, torch {result['notes']['torch']}")
        for label, value in ratios(result).items():
            print(f"  {label:50s} {value:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
