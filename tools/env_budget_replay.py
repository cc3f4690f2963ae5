"""Replay `sdpa-bench continuous`'s planned and adaptive rounds on the kept runs of one long comparison of two
environments, to count how often the default budget for environments decides a row, and how often it fails an A/A.

    python tools/env_budget_replay.py RUNS --log STDERR.txt [--planned 4] [--factor 2] [--fixed S]
                                      [--trials 200] [--seed 0] [--unit measured|probe]

RUNS is the --keep-runs folder of a comparison run with many rounds and no extra ones (`--rounds 16
--adaptive-budget 0`), both sides in processes of their own (two environments): base-1.json ... base-R.json and
the same for head. Each trial draws an order of rounds 2..R (round 1, which checked against fp64, stays first),
judges the first `--planned` rounds with continuous.verdict.judge, then replays continuous.adaptive.extend's loop:
while rows are undecided and the next round fits the budget, the next round in the drawn order adds its points
for the undecided rows only (continuous.adaptive.selection picks them, as a real extra round measures them), and
everything is judged again. The budget is `--factor` times the planned rounds' seconds, at least 75 s
(continuous.comparison.choose_budget); a round's seconds come from the kept comparison's progress lines (its
stderr, STDERR.txt): the first round's own, and the median of the others as a full round's; an extra round of n of
N benchmarks costs `--fixed` + (full - fixed) * n / N (`--fixed`: the seconds two processes take to start and
import, measured apart). A trial that runs out of kept
rounds before its budget is counted as "truncated" (it judged fewer looks than a real run would).

`--unit measured` judges times as measured, as continuous does when torch differs between the sides (no time
reference, no speed probe); `probe` as it does when torch is the same (scaled by the CPU speed probe). The trials
share processes, so the counts are a resampling estimate, not independent trials. Not a test.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import random
import re
from collections import Counter
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sdpa_impls.continuous.adaptive import selection  # noqa: E402
from sdpa_impls.continuous.comparison import ADAPTIVE_BUDGET  # noqa: E402
from sdpa_impls.continuous.verdict import judge  # noqa: E402
from sdpa_impls.gate.config import load_config  # noqa: E402
from sdpa_impls.gate.points import load_points  # noqa: E402


def rounds(folder: Path) -> dict[str, list[list]]:
    """Each side's points per numbered round, in round order."""
    out = {}
    for side in ("base", "head"):
        files = sorted(folder.glob(f"{side}-[0-9]*.json"), key=lambda f: int(f.stem.split("-")[1]))
        out[side] = [load_points(f)[1] for f in files]
    if not out["base"] or len(out["base"]) != len(out["head"]):
        raise SystemExit(f"{folder}: expected as many numbered base and head runs, found {len(out['base'])} and "
                         f"{len(out['head'])}")
    return out


def seconds(text: str) -> float:
    """fmt_duration's 42s, 3m05s or 1h07m as seconds."""
    h, m, s = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", text).groups()
    return 3600 * int(h or 0) + 60 * int(m or 0) + int(s or 0)


def round_seconds(log: Path) -> tuple[float, float]:
    """(the first round's seconds, the median of the later rounds') from `continuous`'s progress lines."""
    marks = [(seconds(m[1]), m[2]) for m in re.finditer(r"^\[\s*(\S+)\] (round \d+/\d+|\w+: .* installed)",
                                                        log.read_text(), re.M)]
    starts = [t for t, what in marks if not what.startswith("round")]
    ends = [t for t, what in marks if what.startswith("round")]
    if not starts or len(ends) < 2:
        raise SystemExit(f"{log}: no progress lines of installed sides and two rounds")
    later = [b - a for a, b in zip(ends, ends[1:])]
    return ends[0] - max(starts), statistics.median(later)


def trial(sides: dict, order: list[int], config, planned: int, factor: float, first_s: float, full_s: float,
          fixed_s: float) -> dict:
    """One replayed comparison over the rounds `order` (indices into the kept runs)."""
    base = [sides["base"][i] for i in order[:planned]]
    head = [sides["head"][i] for i in order[:planned]]
    report = judge(base, head, config)
    total = len(report.rows)
    planned_s = first_s + (planned - 1) * full_s
    budget = max(ADAPTIVE_BUDGET, factor * planned_s)
    spent, estimate, extra, truncated = 0.0, full_s, [], False
    rest = order[planned:]
    while report.undecided:
        if spent + estimate > budget:
            break
        if not rest:
            truncated = True
            break
        names = set(selection(report, config.time_reference))
        i = rest.pop(0)
        base.append([p for p in sides["base"][i] if p.name.rsplit("::", 1)[-1] in names])
        head.append([p for p in sides["head"][i] if p.name.rsplit("::", 1)[-1] in names])
        estimate = fixed_s + (full_s - fixed_s) * len(names) / total
        spent += estimate
        extra.append(len(names))
        report = judge(base, head, config)
    return {"exit": report.exit_code, "decided": total - len(report.undecided), "rows": total,
            "failed": [f"{c.kind} {c.subject}" for c in report.failures], "extra_rounds": len(extra),
            "seconds": round(planned_s + spent, 1), "budget_s": round(budget, 1), "truncated": truncated}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("--log", type=Path, required=True, help="the kept comparison's stderr (progress lines)")
    parser.add_argument("--planned", type=int, default=4)
    parser.add_argument("--factor", type=float, default=2.0)
    parser.add_argument("--fixed", type=float, default=8.0, help="seconds two processes take to start and import")
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--unit", choices=("measured", "probe"), default="measured")
    args = parser.parse_args()
    sides = rounds(args.runs)
    first_s, full_s = round_seconds(args.log)
    config = load_config(start=ROOT)
    config = dataclasses.replace(config, time_reference="", speed_probe=args.unit == "probe")
    rng = random.Random(args.seed)
    results = []
    for _ in range(args.trials):
        later = list(range(1, len(sides["base"])))
        rng.shuffle(later)
        results.append(trial(sides, [0, *later], config, args.planned, args.factor, first_s, full_s,
                             args.fixed))
    n = len(results)
    alarms = sum(r["exit"] == 1 for r in results)
    decided = sum(r["decided"] for r in results) / sum(r["rows"] for r in results)
    at_80 = sum(r["decided"] >= 0.8 * r["rows"] for r in results)
    print(json.dumps({"kept_rounds": len(sides["base"]), "trials": n, "unit": args.unit, "factor": args.factor,
                      "first_round_s": first_s, "full_round_s": full_s, "fixed_s": args.fixed, "failed": alarms,
                      "failed_draws": [i for i, r in enumerate(results) if r["exit"] == 1],
                      "decided_share": round(decided, 3), "trials_with_80pct_decided": at_80,
                      "truncated": sum(r["truncated"] for r in results),
                      "median_extra_rounds": sorted(r["extra_rounds"] for r in results)[n // 2],
                      "median_seconds": sorted(r["seconds"] for r in results)[n // 2],
                      "checks_failed": dict(Counter(f for r in results for f in r["failed"]).most_common())},
                     indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
