"""Count the gate's false alarms and catches over repeated real runs.

Its numbers: docs/records/2026-11-21-epyc-gate-false-alarms.md.

    flock /tmp/sdpa-measure.lock python tools/gate_evidence.py --trials 10 --out /tmp/gate-evidence

Each trial measures, in this order, with pytest-benchmark as CI would (smoke preset, `naive` and the
`test_tunable` plug-in, one thread, process time): baseline, candidate, baseline, candidate, slow, slow —
where "candidate" is the unchanged tree and "slow" is the same tree with SDPA_TUNABLE_SLOWDOWN (+25 % work
in test_tunable's forward). It then runs `sdpa-bench gate` for every config below on
  A/A:   the trial's first baseline run vs its first candidate run (one pair), and both vs both (2 × 2);
  catch: the same baselines vs the slow runs, one pair and 2 × 2,
and prints, per config, how many A/A trials failed (false alarms) and how many slowed trials failed
(catches). Trials share nothing, so the counts are of independent trials. Not a test: it takes minutes.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "_support"), str(ROOT)]  # the tests' measurement protocol

from plugin_env import build_plugin_env, run_gate_benchmarks  # noqa: E402
from sdpa_impls.cli import main as sdpa_bench  # noqa: E402

CONFIGS = {
    "median:15% (default)": 'time = "median:15%"\n',
    "median:15%, time_reference naive": 'time = "median:15%"\ntime_reference = "naive"\n',
}


def measure(python: Path, out: Path, slowdown: str | None) -> None:
    done = run_gate_benchmarks(python, out, {"SDPA_TUNABLE_SLOWDOWN": slowdown} if slowdown else {})
    if done.returncode != 0:
        raise SystemExit(f"benchmark run for {out.name} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")


def gate(config: Path, bases: list[Path], cands: list[Path]) -> tuple[int, list[str]]:
    argv = ["gate", "--config", str(config)]
    for b in bases:
        argv += ["--baseline", str(b)]
    for c in cands:
        argv += ["--candidate", str(c)]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = sdpa_bench(argv)
    return code, [line.strip() for line in out.getvalue().splitlines() if line.startswith("  time ")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--slowdown", default="1.25", help="SDPA_TUNABLE_SLOWDOWN of the slow runs (default 1.25)")
    parser.add_argument("--out", type=Path, default=Path("gate-evidence"), help="where the JSON runs are kept")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    python = build_plugin_env(args.out)
    start = time.perf_counter()
    trials = []
    for t in range(args.trials):
        runs = {}
        for name in ("base1", "cand1", "base2", "cand2", "slow1", "slow2"):
            runs[name] = args.out / f"trial{t:02d}-{name}.json"
            if not runs[name].exists():  # an interrupted experiment resumes; finished runs are kept
                measure(python, runs[name], args.slowdown if name.startswith("slow") else None)
        trials.append(runs)
        print(f"[{time.perf_counter() - start:5.0f}s] trial {t + 1}/{args.trials} measured", flush=True)
    print(f"\n{args.trials} trials; slow runs: SDPA_TUNABLE_SLOWDOWN={args.slowdown}\n")
    print(f"| config | runs compared | false alarms (A/A) | caught ({args.slowdown}× work) |\n|---|---|---|---|")
    for label, text in CONFIGS.items():
        config = args.out / "gate.toml"
        config.write_text(text)
        for shape, k in (("1 vs 1", 1), ("2 vs 2", 2)):
            alarms, caught, seen = 0, 0, []
            for r in trials:
                bases = [r["base1"], r["base2"]][:k]
                code, lines = gate(config, bases, [r["cand1"], r["cand2"]][:k])
                alarms += code != 0
                seen += [f"false alarm in {r['base1'].name[:7]}: {line}" for line in lines[:1]] if code else []
                code, _ = gate(config, bases, [r["slow1"], r["slow2"]][:k])
                caught += code == 1
            print(f"| {label} | {shape} | {alarms}/{len(trials)} | {caught}/{len(trials)} |", flush=True)
            for line in seen:
                print(f"    {line}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
