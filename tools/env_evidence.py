"""Count how often `sdpa-bench continuous` across two environments fails when nothing changed, and how often it
catches a dependency made 5 % slower (docs/explanation/gate-statistics.md, "The environments").

    python tools/env_evidence.py --out /tmp/env-evidence [--trials aa=3,plugin5=3] [--resamples aa=20,plugin5=10]

The dependency is a real package at two versions: the test plug-in of tests/plugins (sdpa-test-plugins), whose
test_tunable computes naive attention BASE_REPEATS times. Three environments are built under OUT/envs, each
layered on this one as `continuous` builds them (sdpa_impls.continuous.envs), each its own build:
  a, b   the plug-in at 0.1.0, 20 repeats: two environments built separately from the same pins;
  c      the plug-in at 0.2.0, 21 repeats: 5 % more work in test_tunable, nothing else changed.
Scenarios, each a real `continuous` of the working tree against itself (no revisions), the environments named as
interpreters:
  aa       --base-env a --head-env b: must pass;
  plugin5  --base-env a --head-env c: caught when a `time test_tunable[...]` check fails.
Each trial runs with continuous's defaults but --preset (default smoke), --impl test_tunable and CI's 75 s of
extra rounds, its runs kept; torch is the same on both sides, so times are in units of torch_sdpa as with one
environment. Then each scenario is judged again on subsets of its kept runs (one fewer run a side than a real
trial kept), as tools/gpu_gate_evidence.py does; the table gives real and resampled counts apart with their 95 %
bounds (Clopper–Pearson). Takes minutes per trial.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from continuous_evidence import CI_BUDGET, counts_of  # noqa: E402
from gpu_gate_evidence import resampled, table  # noqa: E402
from sdpa_impls.continuous.envbuild import build
from sdpa_impls.continuous.envs import python_of  # noqa: E402

PLUGIN = ROOT / "tests" / "plugins" / "sdpa_test_plugins"
SCENARIOS = {"aa": ("a", "b"), "plugin5": ("a", "c")}
ENVS = {"a": ("0.1.0", 20), "b": ("0.1.0", 20), "c": ("0.2.0", 21)}


def plugin_at(dest: Path, version: str, repeats: int) -> Path:
    """The test plug-in package as `version`, its test_tunable doing `repeats` units of work."""
    if not dest.exists():
        shutil.copytree(PLUGIN, dest, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        meta = dest / "pyproject.toml"
        meta.write_text(meta.read_text().replace('version = "0.1.0"', f'version = "{version}"'))
        module = dest / "src" / "sdpa_test_plugins" / "__init__.py"
        module.write_text(module.read_text().replace("BASE_REPEATS = 4 ", f"BASE_REPEATS = {repeats} "))
    return dest


def environments(out: Path) -> dict[str, str]:
    """The three environments' interpreters, each built once into OUT/envs/<name>."""
    pythons = {}
    for name, (version, repeats) in ENVS.items():
        folder = out / "envs" / name
        if not python_of(folder).is_file():
            source = plugin_at(out / "plugins" / name, version, repeats)
            seconds = build(folder, [str(source)])
            print(f"environment {name}: sdpa-test-plugins {version} ({repeats} repeats) built in {seconds:.0f} s",
                  flush=True)
        pythons[name] = str(python_of(folder))
    return pythons


def real_trial(scenario: str, pythons: dict[str, str], out: Path, preset: str) -> dict:
    k = len(list(out.glob(f"{scenario}-[0-9][0-9].json")))
    verdict_file = out / f"{scenario}-{k:02d}.json"
    base, head = SCENARIOS[scenario]
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "sdpa_impls", "continuous", "--base-env", pythons[base],
                           "--head-env", pythons[head], "--preset", preset, "--impl", "test_tunable", "--adaptive-budget", CI_BUDGET,
                           "--json", str(verdict_file), "--keep-runs", str(verdict_file.with_suffix(""))],
                          cwd=ROOT, capture_output=True, text=True)
    verdict = json.loads(verdict_file.read_text()) if verdict_file.is_file() else {}
    return {"scenario": scenario, "trial": k, "kind": "real", "exit": done.returncode,
            "wall_s": round(time.perf_counter() - start, 1),
            "failed": [f"{f['kind']} {f['subject']}" for f in verdict.get("failures", [])],
            "stderr_tail": done.stderr[-600:] if done.returncode not in (0, 1) else ""}


def outcome(scenario: str, failed: list[str], exit_code: int) -> bool:
    """A/A: a false alarm (exit 1). plugin5: caught where it changed (a time check of test_tunable failed)."""
    if scenario == "aa":
        return exit_code == 1
    return any(f.startswith("time test_tunable[") for f in failed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("env-evidence"))
    parser.add_argument("--trials", default="aa=3,plugin5=3", help="real trials per scenario (default aa=3,plugin5=3)")
    parser.add_argument("--resamples", default="aa=20,plugin5=10", help="resampled trials (default aa=20,plugin5=10)")
    parser.add_argument("--preset", default="smoke")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    trials, resamples = counts_of(args.trials, tuple(SCENARIOS)), counts_of(args.resamples, tuple(SCENARIOS))
    args.out.mkdir(parents=True, exist_ok=True)
    pythons = environments(args.out)
    log = args.out / "results.jsonl"
    kept = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
    for t in range(max(trials.values(), default=0)):  # interleaved: trial t of each scenario, then t + 1
        for scenario, n in trials.items():
            if t >= n or sum(r["scenario"] == scenario for r in kept) > t:
                continue
            r = real_trial(scenario, pythons, args.out, args.preset)
            kept.append(r)
            with log.open("a") as fh:
                fh.write(json.dumps(r) + "\n")
            print(f"real {scenario}: exit {r['exit']} in {r['wall_s']:.0f} s, failed: {r['failed'][:4]}"
                  + (f"\n{r['stderr_tail']}" if r["stderr_tail"] else ""), flush=True)
    # resampled as tools/gpu_gate_evidence.py does: this tree's gate settings, so times in torch_sdpa's units, as
    # continuous judges two environments that share torch
    results = kept + [r for s, n in resamples.items() for r in resampled(args.out, s, n, None, args.seed)]
    print(table(results, tuple(SCENARIOS), outcome))
    return 0


if __name__ == "__main__":
    sys.exit(main())
