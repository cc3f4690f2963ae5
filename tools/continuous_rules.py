"""Which interval rule should `sdpa-bench continuous` use, and how many processes per side (docs/gate.md)?

    python tools/continuous_rules.py --noise /work/runs/noise --per-side 4,5,6 --trials 600
    python tools/continuous_rules.py --kept /work/runs/ev4 /work/runs/ev6

Each rule calls a benchmark *slower* when the lower end of an interval of its head/base ratio lies above the floor
(3 %), on times scaled by each run's speed as the time reference saw it (`verdict.run_speeds`), as `continuous`
does:

- `bootstrap`: `continuous`'s own judgement (`verdict.judge`): the two-stage bootstrap over runs and samples, and
  the pooled rank test adjusted by Benjamini–Hochberg;
- `welch95`: a Welch t interval (95 %, two-sided) of the difference of the means of log(per-run median): the
  process is the unit, each side has its own variance;
- `pooled95`, `pooled99`: the same with one pooled variance (n_base + n_head - 2 degrees of freedom), at 95 % and
  99 %.

`--noise` draws trials from the processes of `tools/continuous_noise.py` (one tree): N processes as base and N
others as head, planned rounds only (no adaptive rounds); an A/A trial fails when any benchmark is slower, and
with `--shift` every head process's `fused` times are multiplied by the `fused5` calibration of docs/gate.md per
case (a synthetic copy of that scenario: it counts trials in which a `fused` benchmark is slower). The trials share
processes, so the counts are a resampling estimate, not independent trials. `--kept` judges the finished runs of
`tools/continuous_evidence.py` again (all their rounds, the extra ones included) under each rule. Not a test.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from continuous_evidence import CHANGED, kept_runs  # noqa: E402  (this folder)
from continuous_noise import shifted  # noqa: E402
from sdpa_impls.continuous.verdict import _by_key, _scaled, judge, run_speeds  # noqa: E402
from sdpa_impls.gate.config import load_config  # noqa: E402
from sdpa_impls.gate.points import load_points  # noqa: E402

FLOOR = 1.03
REFERENCE = "torch_sdpa"
# fused5 measured alone, fused time of the scenario / base per ci case (docs/gate.md, "Calibration"); the decode
# case is untouched by construction.
FUSED5 = {"L128-E64-fp32-fwd": 1.081, "L128-E64-bf16-causal-fwd": 1.104, "L96-E32-fp32-fwd+bwd": 1.024,
          "L128-E64-fp32-boolmask-fwd": 1.054, "L1024-E64-fp32-fwd": 1.048, "L1024-E64-fp32-fwd+bwd": 1.020,
          "L1024-E128-bf16-fwd": 1.037}
T_RULES = {"welch95": (0.975, False), "pooled95": (0.975, True), "pooled99": (0.995, True)}
RULES = ("bootstrap", *T_RULES)


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h


def _incomplete_beta(a: float, b: float, x: float) -> float:
    if x <= 0.0 or x >= 1.0:
        return max(0.0, min(1.0, x))
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def t_quantile(p: float, df: float) -> float:
    """The p-quantile (p > 0.5) of Student's t with `df` degrees of freedom, by bisection on its CDF."""
    def upper_tail(t: float) -> float:
        return 0.5 * _incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    lo, hi = 0.0, 1e3
    for _ in range(200):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if upper_tail(mid) > 1.0 - p else (lo, mid)
    return (lo + hi) / 2.0


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


def slower(base_runs: list[list], head_runs: list[list], config) -> dict[str, list[str]]:
    """{rule: the benchmarks it calls slower} for one trial of points (a list of runs per side)."""
    verdict = judge(base_runs, head_runs, config)
    out = {"bootstrap": [r.label for r in verdict.rows if r.decision == "slower"]}
    base, head = _by_key(base_runs), _by_key(head_runs)
    speeds = run_speeds(base + head, REFERENCE)
    if speeds is not None:
        base, head = _scaled(base, speeds[:len(base)]), _scaled(head, speeds[len(base):])
    keys = [k for k in dict.fromkeys(k for run in head for k in run) if k[0] != REFERENCE]
    for rule, (level, pooled) in T_RULES.items():
        out[rule] = []
        for key in keys:
            b = [run[key].median_s for run in base if key in run and run[key].median_s]
            h = [run[key].median_s for run in head if key in run and run[key].median_s]
            if len(b) >= 2 and len(h) >= 2 and t_lower(b, h, level, pooled) > FLOOR:
                out[rule].append(f"{key[0]}[{key[1]}]")
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
        for scenario, _, base, head, _ in kept_runs(out, finished=True):
            row = table.setdefault(scenario, {r: [0, 0, 0] for r in RULES})
            for rule, labels in slower(base, head, config).items():
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
        cells = [f"{row[r][1]}" + (f" ({row[r][2]} on fused)" if scenario in changed else "") for r in RULES]
        print(f"| {scenario} | {n} | " + " | ".join(cells) + " |")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--noise", type=Path, help="a tools/continuous_noise.py --out folder")
    p.add_argument("--per-side", default="4,5,6", help="processes per side, comma-separated (with --noise)")
    p.add_argument("--trials", type=int, default=600, help="resampled trials per row (with --noise)")
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
