"""Where an A/A difference of `sdpa-bench continuous` comes from: one tree, many benchmark processes, the candidate
causes varied at random per process, and how much of the spread between processes each one explains
(docs/records/2026-11-24-epyc-continuous-noise.md).

    python tools/continuous_noise.py --out /tmp/continuous-noise --processes 64 --lock /tmp/sdpa-measure.lock
    python tools/continuous_noise.py --out /tmp/continuous-noise --analyze      # the stored processes only

The working tree is copied twice, to a short path and to a long one, and each copy is installed as `continuous`
installs a side. Then --processes benchmark processes run in pairs, back to back, each exactly as `continuous`
runs one side on CPU (its own suite, the ci preset, `--benchmark-max-time` 0.1, 8 rounds at least, one thread,
process time, raw samples), with --impl (default chunked and fused) and the time reference. Every process draws
at random, from --seed:

- which copy it runs (short or long path: path length, the folder's place on disk);
- the core it is pinned to (`taskset -c 0` or `-c 1`: CPU placement);
- address-space randomization on or off (`setarch -R`: with it off, every process of one environment size gets
  the same layout, so whatever differs between processes then is not layout);
- its environment size (`SDPA_CONTINUOUS_PAD`, 0 to 4095 characters, as `continuous` draws it);
and its place in its pair (first or second) follows from the order.

Per benchmark, the log of each process's median is fitted by least squares on those factors; the output gives
each factor's effect in per cent with a 95 % interval, the spread between processes that no factor explains
(with ASLR on and off), the spread of a process's median from its own samples, and what the pooled rank test
of `continuous` makes of identical trees: 4 processes against 4 others, drawn from the ASLR-on processes
(as `continuous` runs them), how often p < 0.01 and how large the ratio of medians gets. Not a test: it takes
about 20 s per process.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sdpa_impls.continuous.revisions import snapshot_working_tree  # noqa: E402
from sdpa_impls.continuous.schedule import MAX_PADDING  # noqa: E402
from sdpa_impls.continuous.comparison import Plan, pytest_args  # noqa: E402
from sdpa_impls.continuous.sides import Side, install, run_round  # noqa: E402
from sdpa_impls.gate.points import load_points  # noqa: E402
from sdpa_impls.gate.ranktest import mann_whitney_u  # noqa: E402

COPIES = {"short": "s", "long": "a-folder-name-much-longer-than-the-other-one-so-every-path-differs-in-length"}
FACTORS = ("second", "long_path", "core1", "aslr_off")  # each a 0/1 column of the fit, beside the intercept
RECORDS = "processes.jsonl"


def prepare(out: Path) -> dict[str, Side]:
    sides = {}
    for copy, folder in COPIES.items():
        tree, site = out / folder / "tree", out / folder / "site"
        side = Side(copy, copy, tree, site, sys.executable)
        if not site.is_dir():
            snapshot_working_tree(ROOT, tree)
            install(side)
        sides[copy] = side
    return sides


def run_process(side: Side, json_out: Path, impls: list[str], core: int, aslr: bool, pad: int,
                lock: str | None) -> dict:
    """One benchmark process of `side`, exactly as `continuous` runs a side on CPU, pinned to `core`, with or without
    address-space randomization; its per-benchmark medians and their own standard errors (of the log). `wall_s`
    counts any wait for `lock`."""
    args = pytest_args(Plan(preset="ci"), True)
    side = dataclasses.replace(side, impls=tuple(dict.fromkeys([*impls, "torch_sdpa"])))
    prefix = (["flock", lock] if lock else []) + ["taskset", "-c", str(core)] + (
        [] if aslr else ["setarch", os.uname().machine, "-R"])
    start = time.perf_counter()
    done = run_round(side, json_out, args, True, 900, "x" * pad, prefix)
    if done.returncode != 0 or not json_out.is_file():
        raise SystemExit(f"a benchmark process failed (exit {done.returncode}):\n{done.tail}")
    _, points = load_points(json_out)
    return {"wall_s": round(time.perf_counter() - start, 2),
            "medians": {p.label: statistics.median(p.samples) for p in points if p.samples},
            "logsd": {p.label: statistics.stdev([math.log(s) for s in p.samples]) / math.sqrt(len(p.samples))
                      for p in points if len(p.samples) > 1}}


def measure(out: Path, processes: int, impls: list[str], seed: int, lock: str | None) -> None:
    sides = prepare(out)
    records = out / RECORDS
    done = len(records.read_text().splitlines()) if records.is_file() else 0
    rng = random.Random(seed)
    draws = [{"copy": rng.choice(list(COPIES)), "core": rng.randrange(2), "aslr": rng.random() < 0.5,
              "pad": rng.randrange(MAX_PADDING)} for _ in range(processes)]
    for i in range(done, processes):
        d = draws[i]
        got = run_process(sides[d["copy"]], out / f"p{i:03d}.json", impls, d["core"], d["aslr"], d["pad"], lock)
        rec = {"index": i, "pair": i // 2, "position": i % 2, **d, **got}
        with records.open("a") as fh:
            fh.write(json.dumps(rec) + "\n")
        print(f"[{i + 1}/{processes}] {d['copy']:5s} core {d['core']} aslr {'on ' if d['aslr'] else 'off'} "
              f"pad {d['pad']:4d} position {i % 2 + 1}: {got['wall_s']:.1f} s", file=sys.stderr, flush=True)


def design(rec: dict) -> list[float]:
    return [1.0, rec["position"], rec["copy"] == "long", rec["core"] == 1, not rec["aslr"]]


def fit(recs: list[dict], label: str) -> dict:
    """Least squares of log(median) on the factors: effects (%) with 95 % intervals and the residual spread."""
    rows = [r for r in recs if label in r["medians"]]
    x = np.array([design(r) for r in rows], dtype=float)
    y = np.log([r["medians"][label] for r in rows])
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ beta
    dof = len(y) - x.shape[1]
    s2 = float(resid @ resid) / dof
    se = np.sqrt(np.diag(s2 * np.linalg.inv(x.T @ x)))
    aslr = np.array([r["aslr"] for r in rows])
    within = statistics.median(r["logsd"][label] for r in rows if label in r["logsd"])
    q1, q3 = np.percentile(resid, [25, 75])
    order = np.argsort([r["index"] for r in rows])  # residuals in the order the processes ran
    return {"n": len(y), "effects": {f: (math.expm1(beta[k + 1]) * 100, 1.96 * se[k + 1] * 100)
                                     for k, f in enumerate(FACTORS)},
            "sd_on": float(np.std(resid[aslr], ddof=1)) * 100, "sd_off": float(np.std(resid[~aslr], ddof=1)) * 100,
            "robust": float(q3 - q1) / 1.349 * 100, "lag1": float(np.corrcoef(resid[order][:-1], resid[order][1:])[0, 1]),
            "within": within * 100}


def pooled_aa(recs: list[dict], label: str, draws: int, rng: random.Random) -> tuple[float, float, float]:
    """4 ASLR-on processes against 4 others, samples pooled per side as `continuous` pools them (before its
    interval): the share with one-sided p < 0.01 either way, and the 50th and 95th percentile of |log ratio|."""
    pool = [r for r in recs if r["aslr"] and label in r["medians"]]
    if len(pool) < 8:
        return float("nan"), float("nan"), float("nan")
    samples = {id(r): r["samples"][label] for r in pool}
    hits, logs = 0, []
    for _ in range(draws):
        chosen = rng.sample(pool, 8)
        a = [s for r in chosen[:4] for s in samples[id(r)]]
        b = [s for r in chosen[4:] for s in samples[id(r)]]
        logs.append(abs(math.log(statistics.median(b) / statistics.median(a))))
        hits += min(mann_whitney_u(b, a).pvalue, mann_whitney_u(a, b).pvalue) < 0.01
    logs.sort()
    return hits / draws, math.expm1(logs[len(logs) // 2]) * 100, math.expm1(logs[int(len(logs) * 0.95)]) * 100


def shifted(points: list, impl: str, factor: float | dict[str, float]) -> list:
    """`impl`'s samples × factor: a synthetic slowdown of one implementation, uniform, or per case id when `factor`
    maps case ids to factors (a case it does not name is left as it is)."""
    def times(p) -> float:
        return factor.get(p.case_id, 1.0) if isinstance(factor, dict) else factor
    return [dataclasses.replace(p, samples=tuple(s * times(p) for s in p.samples),
                                median_s=p.median_s * times(p) if p.median_s else p.median_s) if p.impl == impl else p
            for p in points]


def simulated_aa(out: Path, recs: list[dict], floors: list[float], trials: int, extra: int, seed: int,
                 shift: tuple[str, float] | None = None) -> None:
    """Identical trees judged by `continuous`'s own rule at each floor: per trial, 4 ASLR-on processes as base and 4
    others as head (in the order they ran), then `continuous`'s own adaptive rounds (`adaptive.extend`) with a budget
    of `extra` rounds, each one more stored process per side cut to the benchmarks the rounds select (the undecided
    ones and the time reference on their cases). Trials share processes (a resampling estimate, not independent trials). `shift` (impl, factor)
    multiplies that implementation's samples in every head process: a synthetic uniform slowdown, for the power."""
    from sdpa_impls.continuous.adaptive import extend
    from sdpa_impls.gate.config import load_config

    config = load_config(start=out / COPIES["short"] / "tree")
    pool = [r for r in recs if r["aslr"]]
    if len(pool) < 8:
        print("fewer than 8 ASLR-on processes: no simulated trials")
        return
    runs = {r["index"]: load_points(out / f"p{r['index']:03d}.json")[1] for r in pool}
    rng = random.Random(seed)
    draws = [sorted(rng.sample(pool, min(len(pool), 8 + 2 * extra)), key=lambda r: r["index"]) for _ in range(trials)]
    what = f"with head's {shift[0]} × {shift[1]:g}" if shift else "A/A"
    print(f"\n{trials} simulated trials ({what}) of `continuous`'s rule (4 + 4 processes, up to {extra} adaptive "
          f"rounds), drawn from {len(pool)} ASLR-on processes:")
    print(f"| floor | trials failed{' on ' + shift[0] if shift else ''} | trials with undecided at the end | mean extra rounds | worst lower end |")
    print("|---|---|---|---|---|")
    for floor in floors:
        cfg = dataclasses.replace(config, continuous_time=f"median:{floor:g}%")
        failed = undecided = rounds = 0
        worst = 0.0
        for chosen in draws:
            planned, rest = chosen[:8], chosen[8:]
            base, head = [runs[r["index"]] for r in planned[0::2]], [runs[r["index"]] for r in planned[1::2]]
            if shift:
                head = [shifted(h, *shift) for h in head]
            ticks = [0.0]  # one "second" per extra round: a budget of `extra` seconds allows `extra` rounds

            def measure_round(terms: list[str], index: int) -> tuple[list, list, list]:
                ticks[0] += 1
                b, h = (load_cut(rest[2 * (index - 1) + k], terms) for k in (0, 1))
                return b, shifted(h, *shift) if shift else h, []

            def load_cut(rec: dict, terms: list[str]) -> list:
                return [p for p in runs[rec["index"]] if p.name.rsplit("::", 1)[-1] in terms]

            outcome = extend(base, head, [], cfg, measure_round, budget_s=min(extra, len(rest) // 2),
                             first_estimate_s=1.0, clock=lambda: ticks[0])
            verdict = outcome.report
            rounds += outcome.adaptive.rounds
            failed += any(c.kind == "time" and (not shift or c.subject.startswith(shift[0] + "["))
                          for c in verdict.failures)
            undecided += bool(verdict.undecided)
            worst = max([worst] + [r.interval[0] for r in verdict.rows if r.interval and r.impl != config.time_reference])
        print(f"| {floor:g} % | {failed} of {trials} | {undecided} | {rounds / trials:.1f} | {worst:.3f} |")


def analyze(out: Path, draws: int, seed: int, floors: list[float], trials: int, extra: int,
            shifts: list[tuple[str, float]] = ()) -> None:
    recs = [json.loads(line) for line in (out / RECORDS).read_text().splitlines()]
    for r in recs:  # the raw samples, for the pooled rank test
        _, points = load_points(out / f"p{r['index']:03d}.json")
        r["samples"] = {p.label: p.samples for p in points}
    labels = sorted({k for r in recs for k in r["medians"]})
    on = sum(r["aslr"] for r in recs)
    print(f"{len(recs)} processes ({on} with ASLR on, {len(recs) - on} off); wall {sum(r['wall_s'] for r in recs):.0f} s")
    rng = random.Random(seed)
    if len(recs) <= 2 * (len(FACTORS) + 1):
        print(f"too few processes to fit {len(FACTORS)} factors and a spread: measure more")
        return
    print("effects in % of the time (95 % interval half-width); spread between processes no factor explains (SD "
          "of the residual, %, ASLR on / off; robust SD: interquartile range / 1.349, all processes; lag-1: "
          "correlation of consecutive processes' residuals, a drift over time); a process median's own spread (SE "
          "from its samples, %); identical trees, 4 vs 4 ASLR-on processes pooled: share with p < 0.01, median and "
          "95th percentile |ratio - 1| (%)")
    columns = ["benchmark", *FACTORS, "SD on", "SD off", "robust SD", "lag-1", "own SE", "p<0.01", "50% abs(r-1)",
               "95% abs(r-1)"]
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for label in labels:
        f = fit(recs, label)
        share, mid, hi = pooled_aa(recs, label, draws, rng)
        eff = " | ".join(f"{v:+.2f} ± {h:.2f}" for v, h in f["effects"].values())
        print(f"| `{label}` | {eff} | {f['sd_on']:.2f} | {f['sd_off']:.2f} | {f['robust']:.2f} | {f['lag1']:+.2f} | "
              f"{f['within']:.2f} | {share:.2f} | "
              f"{mid:.2f} | {hi:.2f} |")
    if trials:
        simulated_aa(out, recs, floors, trials, extra, seed)
        for impl, factor in shifts:
            simulated_aa(out, recs, floors, trials, extra, seed, (impl, factor))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="folder for the copies, the runs and processes.jsonl")
    p.add_argument("--processes", type=int, default=64, help="benchmark processes in all (default 64); resumes")
    p.add_argument("--impl", action="append", help="implementations (default chunked and fused; the time "
                                                   "reference torch_sdpa is added)")
    p.add_argument("--seed", type=int, default=0, help="seed of the draws (default 0)")
    p.add_argument("--lock", help="flock this file around each process")
    p.add_argument("--analyze", action="store_true", help="only analyze the processes stored in --out")
    p.add_argument("--draws", type=int, default=2000, help="4-vs-4 draws of the pooled rank test (default 2000)")
    p.add_argument("--floors", default="2,3,5", help="floors of the time check to simulate, in %% (default 2,3,5)")
    p.add_argument("--trials", type=int, default=200, help="simulated A/A trials per floor (default 200; 0: none)")
    p.add_argument("--shift", action="append", default=[], metavar="IMPL=FACTOR",
                   help="also simulate head's IMPL samples × FACTOR (e.g. fused=1.05): the power (repeatable)")
    p.add_argument("--extra", type=int, default=4, help="adaptive rounds at most per simulated trial (default 4)")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.analyze:
        impls = list(dict.fromkeys((args.impl or ["chunked", "fused"]) + ["torch_sdpa"]))
        measure(args.out, args.processes, impls, args.seed, args.lock)
    analyze(args.out, args.draws, args.seed, [float(f) for f in args.floors.split(",")], args.trials,
            args.extra, [(x.split("=")[0], float(x.split("=")[1])) for x in args.shift])
    return 0


if __name__ == "__main__":
    sys.exit(main())
