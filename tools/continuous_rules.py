"""Which interval rule should `sdpa-bench continuous` use, and how many processes per side?

Its measurements: docs/records/2026-11-24-epyc-continuous-interval-rules.md.

    python tools/continuous_rules.py --noise /work/runs/noise --per-side 4,5,6 --trials 600
    python tools/continuous_rules.py --kept /work/runs/ev4 /work/runs/ev6

Each rule calls a benchmark *slower* when the lower end of an interval of its head/base ratio lies above the floor
(3 %), on times scaled by each run's speed as the time reference saw it (`speeds.run_speeds`), as `continuous`
does:

- `bootstrap`: the two-stage bootstrap interval over runs and samples with every run in, and the pooled rank test
  adjusted by Benjamini–Hochberg (`verdict.decide` without its leave-one-out condition);
- `leave-one-out`: `continuous`'s own judgement (`verdict.judge`): `bootstrap`, and the interval's lower end stays
  above the floor with any one run of either side left out;
- `welch95`: a Welch t interval (95 %, two-sided) of the difference of the means of log(per-run median): the
  process is the unit, each side has its own variance;
- `pooled95`, `pooled99`: the same with one pooled variance (n_base + n_head - 2 degrees of freedom), at 95 % and
  99 %.

`--noise` draws trials from the processes of `tools/continuous_noise.py` (one tree, all of them: ASLR on and off,
where that tool's own simulated A/A takes the ASLR-on ones only): N processes as base and N others as head,
planned rounds only (no adaptive rounds). It prints two tables: A/A, where a trial fails when any benchmark is
slower, and a synthetic copy of the `fused5` scenario on a third as many trials, where every head process's `fused`
times are multiplied by that scenario's calibration of docs/records/2026-11-24-epyc-continuous-trials.md per case and
a trial counts when a `fused` benchmark is slower. The trials share processes, so the counts are a resampling estimate, not independent trials.
`--kept` judges the finished runs of `tools/continuous_evidence.py` again (all their rounds, the extra ones
included) under each rule. Not a test.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from continuous_evidence import CHANGED, kept_runs  # noqa: E402  (this folder)
from continuous_noise import shifted  # noqa: E402
from sdpa_impls.continuous.verdict import decide, judge  # noqa: E402
from sdpa_impls.gate.config import load_config  # noqa: E402
from sdpa_impls.gate.points import load_points  # noqa: E402

FLOOR = 1.03
# fused5 measured alone, fused time of the scenario / base per ci case
# (docs/records/2026-11-24-epyc-continuous-trials.md, "Calibration"); the decode case is untouched by construction.
FUSED5 = {"L128-E64-fp32-fwd": 1.081, "L128-E64-bf16-causal-fwd": 1.104, "L96-E32-fp32-fwd+bwd": 1.024,
          "L128-E64-fp32-boolmask-fwd": 1.054, "L1024-E64-fp32-fwd": 1.048, "L1024-E64-fp32-fwd+bwd": 1.020,
          "L1024-E128-bf16-fwd": 1.037}
T_RULES = {"welch95": (0.975, False), "pooled95": (0.975, True), "pooled99": (0.995, True)}
RULES = ("bootstrap", "leave-one-out", *T_RULES)


def t_quantile(p: float, df: float) -> float:
    """The p-quantile (1/2 < p < 1) of Student's t with `df` >= 1 degrees of freedom. Under x = sqrt(df)·tan θ the
    density c·(1 + x²/df)^-(df+1)/2 dx becomes c·sqrt(df)·cos^(df-1) θ dθ on [0, π/2), a bounded integrand: its
    running integral from the median (θ = 0) on a fine grid reaches p - 1/2 at θ_p, and the quantile is
    sqrt(df)·tan θ_p."""
    theta = np.linspace(0.0, math.pi / 2, 20001)
    density = np.cos(theta) ** (df - 1.0)
    c = math.exp(math.lgamma((df + 1.0) / 2.0) - math.lgamma(df / 2.0)) / math.sqrt(math.pi)
    mass = np.concatenate(([0.0], np.cumsum((density[1:] + density[:-1]) / 2.0 * np.diff(theta)))) * c
    return math.sqrt(df) * math.tan(float(np.interp(p - 0.5, mass, theta)))


def t_lower(base: list[float], head: list[float], level: float, pooled: bool) -> float:
    """The lower end of the t interval of head/base on log(per-run median)s (exp of the difference of means)."""
    lb, lh = [math.log(v) for v in base], [math.log(v) for v in head]
    nb, nh = len(lb), len(lh)
    mb, mh = sum(lb) / nb, sum(lh) / nh
    vb = sum((v - mb) ** 2 for v in lb) / (nb - 1)
    vh = sum((v - mh) ** 2 for v in lh) / (nh - 1)
    if pooled:
        df = nb + nh - 2
        se = math.sqrt(((nb - 1) * vb + (nh - 1) * vh) / df * (1 / nb + 1 / nh))
    else:
        se = math.sqrt(vb / nb + vh / nh)
        df = se ** 4 / ((vb / nb) ** 2 / (nb - 1) + (vh / nh) ** 2 / (nh - 1)) if se > 0 else 1.0
    return math.exp(mh - mb - t_quantile(level, df) * se)


def slower(base_runs: list[list], head_runs: list[list], config, planned: int | None = None) -> dict[str, list[str]]:
    """{rule: the benchmarks it calls slower} for one trial of points (a list of runs per side). Every rule judges
    the benchmarks `continuous` judges for time (the rows with a decision), on the points `judge` scaled by each
    run's speed; the t rules take each run's median of them."""
    verdict = judge(base_runs, head_runs, config, planned=planned)
    timed = [r for r in verdict.rows if r.decision is not None]
    factor, fdr = config.continuous_rule().factor, config.alpha
    out = {"bootstrap": [r.label for r in timed if decide(r.interval, r.q, factor, fdr) == "slower"],
           "leave-one-out": [r.label for r in timed if r.decision == "slower"]}
    for rule, (level, pooled) in T_RULES.items():
        out[rule] = []
        for row in timed:
            b = [p.median_s for p in row.base if p.median_s]
            h = [p.median_s for p in row.head if p.median_s]
            if len(b) >= 2 and len(h) >= 2 and t_lower(b, h, level, pooled) > FLOOR:
                out[rule].append(row.label)
    return out


def _config():
    """This tree's gate config with `continuous`'s floor at FLOOR."""
    return dataclasses.replace(load_config(start=ROOT), continuous_time=f"median:{(FLOOR - 1) * 100:g}%")


def noise(out: Path, per_side: list[int], trials: int, shift: bool, seed: int) -> None:
    config = _config()
    recs = [json.loads(line) for line in (out / "processes.jsonl").read_text().splitlines()]
    runs = {r["index"]: load_points(out / f"p{r['index']:03d}.json")[1] for r in recs}
    what = "fused ×(fused5 calibration) in head: trials with a fused benchmark slower" if shift else \
        "A/A: trials with any benchmark slower"
    print(f"{trials} trials per row drawn from {len(runs)} processes of {out} ({what}), floor {FLOOR}")
    print("| processes per side | " + " | ".join(RULES) + " |")
    print("|---|" + "---|" * len(RULES))
    for n in per_side:
        rng = random.Random(seed)
        counts = dict.fromkeys(RULES, 0)
        for _ in range(trials):
            chosen = rng.sample(sorted(runs), 2 * n)
            base = [runs[i] for i in chosen[:n]]
            head = [shifted(runs[i], "fused", FUSED5) if shift else runs[i] for i in chosen[n:]]
            for rule, labels in slower(base, head, config).items():
                counts[rule] += any(x.startswith("fused[") for x in labels) if shift else bool(labels)
        print(f"| {n} | " + " | ".join(f"{counts[r]} ({counts[r] / trials:.1%})" for r in RULES) + " |", flush=True)


def kept(outs: list[Path]) -> None:
    config = _config()
    # the scenarios that slow an implementation's time: the label prefix of that implementation
    changed = {s: what.split(" ", 1)[1] for s, what in CHANGED.items() if what.startswith("time ")}
    table: dict[str, dict[str, list[int]]] = {}
    for out in outs:
        for scenario, _, base, head, planned in kept_runs(out, finished=True):
            row = table.setdefault(scenario, {r: [0, 0, 0] for r in RULES})
            for rule, labels in slower(base, head, config, planned).items():
                on = [x for x in labels if x.startswith(changed.get(scenario, "\0"))]
                row[rule][0] += 1
                row[rule][1] += bool(labels)
                row[rule][2] += bool(on)
    print(f"finished runs of {', '.join(map(str, outs))}, judged again at floor {FLOOR}: trials with a time check "
          "failed (of which on the changed implementation)")
    print("| scenario | trials | " + " | ".join(RULES) + " |")
    print("|---|---|" + "---|" * len(RULES))
    for scenario, row in table.items():
        n = row[RULES[0]][0]
        on = f" on {changed[scenario].rstrip('[')}" if scenario in changed else ""
        cells = [f"{row[r][1]}" + (f" ({row[r][2]}{on})" if on else "") for r in RULES]
        print(f"| {scenario} | {n} | " + " | ".join(cells) + " |")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--noise", type=Path, help="a tools/continuous_noise.py --out folder")
    p.add_argument("--per-side", default="4,5,6", help="processes per side, comma-separated (with --noise)")
    p.add_argument("--trials", type=int, default=600,
                   help="resampled A/A trials per row (with --noise; the fused5 table draws a third as many)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--kept", type=Path, nargs="+", help="tools/continuous_evidence.py --out folders")
    args = p.parse_args()
    if not args.noise and not args.kept:
        p.error("give --noise DIR or --kept DIR [DIR ...]")
    if args.noise:
        per_side = [int(v) for v in args.per_side.split(",")]
        noise(args.noise, per_side, args.trials, False, args.seed)
        noise(args.noise, per_side, max(1, args.trials // 3), True, args.seed)
    if args.kept:
        kept(args.kept)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
