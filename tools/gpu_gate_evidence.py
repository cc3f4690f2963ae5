"""The gate's goal table on a GPU within one short run: real `continuous` trials of each scenario, then resampled ones.

    python tools/gpu_gate_evidence.py --out /tmp/gpu-evidence [--budget 540] [--resamples aa=20,dev2=10,...]

Builds a scratch git repository from this working tree (commit `base`) with one branch per scenario, each a real
change committed on top of `base`:
  aa      a docs-only change (README.md): must pass;
  dev2    `fused` adds 2 % device time: each call ends with one `torch.cuda._sleep` kernel on its stream, as many SM
          cycles as 2 % of the call's own device time (measured once per prepared call, outside the timed one, at
          the SM clock NVML reads then). Real GPU time in the same stream, so a CUDA-graph replay holds it too;
  dev5    the same, 5 %;
  host20  `fused` adds 20 % host overhead and no GPU work: each call first spins on the host for 20 % of its
          eager-minus-device time per call (measured once per prepared call). It shows where a call is host-bound;
          a call whose GPU work outlasts its launches hides it, as it would hide a real one.

Each scenario runs as CI would on a GPU (`continuous` with this tree's defaults: the gpu-ci preset, `--impl fused`,
the time reference; extra rounds for undecided benchmarks capped at 30 s, `--continuous-args`) with its runs kept
(--keep-runs), one after another, until `--budget` seconds are spent: always the scenario with the fewest real
trials so far (`--scenarios` picks them and their order; an OUT kept from an earlier run counts), so one trial of
each comes first, then more while time is left; a scenario left without one is named at the end.

Then each scenario is judged again on subsets of its kept runs (`--resamples`; each resampled trial draws
`--subset` base and `--subset` head runs without replacement from one real trial's, seeded; by default one fewer
than the real trial kept): more trials than the budget affords to run, each on real runs. Resampled trials of one
real trial share runs, so they are not independent: the table gives the real and the resampled counts apart, the
bounds for both (one-sided Clopper–Pearson, 95 %), and the wall time of each real `continuous`; below it, the
setup and per-round seconds the real trials recorded, and from them the wall time of a default trial (4 rounds, at
most 30 s of extra rounds), estimated.

Shortened trials: at 2 rounds a side a trial took 90–93 s on an H200, so one at the default 4 rounds should take
about twice that (the estimate under the table says how much, from the trials' own timing), and 9 minutes hold two
or three. `--continuous-args "--rounds 3 --adaptive-budget 0"` makes each trial shorter while a resampled one still
draws 2 runs of 3 a side (9 subset pairs per real trial; with 2 rounds a resampled trial would have 1 run a side,
and no run to leave out; so `aa`'s 20 need three real trials); a scenario that did not fit gets its trial from a second
call with the same `--out` and `--continuous-args` (its kept trials count). The wall time of a default trial is then
the printed estimate, which says so.

A catch counts only on what the scenario changed: a `time fused[...]` failure for dev2/dev5, a `host fused[...]`
failure for host20 (and host20's `time` checks must not fail: the device time did not change).
Needs a CUDA device; the scenarios' code and the resampling are checked on the CPU by tests/test_gpu_evidence.py.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from continuous_evidence import base_and_aa, bounds, branch, counts_of, git  # noqa: E402
from sdpa_impls.continuous.comparison import ROUNDS as DEFAULT_ROUNDS  # noqa: E402

FUSED = "sdpa_impls/impls/fused.py"
RETURN = "        return with_op(lambda: tiled_attention(inp, forward, tiling, tiles, widen, nan_check), computes)\n"  # fused's prepared closure
SCENARIOS = ("aa", "dev2", "dev5", "host20")
CAUGHT = {"dev2": "time fused[", "dev5": "time fused[", "host20": "host fused["}
RESAMPLES = "aa=20,dev2=10,dev5=10,host20=10"  # the goal table's trial counts
ARGS = ["--impl", "fused"]  # continuous's defaults otherwise: the gpu-ci preset on CUDA, the time reference added


def device_regression(fraction: float) -> str:
    """fused's closure, ending each call with a sleep kernel of `fraction` of the call's device time."""
    return (
        "        call = lambda: tiled_attention(inp, forward, tiling, tiles, widen, nan_check)\n"
        "        if q.device.type != 'cuda':  # a regression planted for the GPU evidence: CUDA only\n"
        "            return with_op(call, computes)\n"
        "        call()\n"
        "        torch.cuda.synchronize(q.device)\n"
        "        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)\n"
        "        start.record()\n"
        "        call()\n"
        "        end.record()\n"
        "        end.synchronize()\n"
        f"        cycles = int({fraction!r} * start.elapsed_time(end) * 1e-3 * torch.cuda.clock_rate(q.device) * 1e6)\n"
        "\n"
        "        def slower() -> torch.Tensor:\n"
        "            out = call()\n"
        "            torch.cuda._sleep(cycles)  # a regression: more device time on the call's stream\n"
        "            return out\n"
        "        return with_op(slower, computes)\n")


def host_regression(fraction: float) -> str:
    """fused's closure, spinning on the host before each call for `fraction` of its eager − device time."""
    return (
        "        call = lambda: tiled_attention(inp, forward, tiling, tiles, widen, nan_check)\n"
        "        if q.device.type != 'cuda':  # a regression planted for the GPU evidence: CUDA only\n"
        "            return with_op(call, computes)\n"
        "        from ..bench.timing import Sampler, one_sample\n"
        "        eager = Sampler(call, q.device, warmup=1)\n"
        "        graph = Sampler(call, q.device, warmup=0, cuda_graph=True)\n"
        "        host_s = max(0.0, one_sample(call, q.device, eager.calls) - one_sample(graph.fn, q.device, graph.calls))\n"
        f"        spin_s = {fraction!r} * host_s\n"
        "\n"
        "        def slower() -> torch.Tensor:\n"
        "            stop = time.perf_counter() + spin_s  # a regression: host work only, no GPU work\n"
        "            while time.perf_counter() < stop:\n"
        "                pass\n"
        "            return call()\n"
        "        return with_op(slower, computes)\n")


# one real trial's seconds before any has run here: the shortest seen on an H200 (3 rounds a side, no extra rounds)
# took 135-140 s, so a budget under this starts none rather than one that its step's timeout kills unfinished
FIRST_TRIAL_S = 130.0


def trial_s(trials: list[dict]) -> float:
    """How long the next real trial may take: the longest of `trials` (this call's, else those kept from an earlier
    call on this machine), else FIRST_TRIAL_S."""
    return max((float(r["wall_s"]) for r in trials), default=FIRST_TRIAL_S)


def build_repo(out: Path) -> Path:
    """The scratch repository: `base` (this working tree) and one branch per scenario."""
    repo = out / "repo"
    if repo.exists():
        return repo
    base_and_aa(repo)
    for name, new in (("dev2", device_regression(0.02)), ("dev5", device_regression(0.05)),
                      ("host20", host_regression(0.20))):
        branch(repo, name, FUSED, RETURN, new)
        if name == "host20":  # the spin reads the host clock
            text = (repo / FUSED).read_text().replace("import functools\n", "import functools\nimport time\n", 1)
            (repo / FUSED).write_text(text)
            git(repo, "commit", "-q", "-am", "host20: import time")
    git(repo, "checkout", "-q", "base")
    return repo


def real_trial(repo: Path, scenario: str, out: Path, extra: list[str]) -> dict:
    """One `continuous base SCENARIO` as CI runs it, its runs kept in `out/<scenario>-<k>/`."""
    k = len(list(out.glob(f"{scenario}-[0-9][0-9].json")))
    verdict_file = out / f"{scenario}-{k:02d}.json"
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "sdpa_impls", "continuous", "base", scenario, *ARGS, *extra,
                           "--json", str(verdict_file), "--keep-runs", str(verdict_file.with_suffix(""))],
                          cwd=repo, capture_output=True, text=True, env=os.environ | {"PYTHONPATH": str(repo)})
    verdict = json.loads(verdict_file.read_text()) if verdict_file.is_file() else {}
    return {"scenario": scenario, "trial": k, "kind": "real", "exit": done.returncode,
            "wall_s": round(time.perf_counter() - start, 1),
            "failed": [f"{f['kind']} {f['subject']}" for f in verdict.get("failures", [])],
            "rounds": verdict.get("run", {}).get("planned_rounds"), "timing": verdict.get("run", {}).get("timing", {}),
            "stderr_tail": done.stderr[-600:] if done.returncode not in (0, 1) else ""}


def next_scenario(chosen: list[str], trials: list[dict]) -> str:
    """The scenario to run next: of `chosen`, the first with the fewest real trials so far (`trials` holds those of
    this run and of an earlier one kept in the same OUT), so that every scenario gets one before any gets two."""
    real = [r["scenario"] for r in trials if r.get("kind", "real") == "real"]
    return min(chosen, key=lambda s: (real.count(s), chosen.index(s)))


def subsets(n_base: int, n_head: int, size: int, count: int, seed: int) -> list[tuple[tuple[int, ...], ...]]:
    """`count` distinct (base runs, head runs) index subsets of `size` each (fewer when fewer exist), seeded."""
    size_b, size_h = min(size, n_base), min(size, n_head)
    every = list(itertools.product(itertools.combinations(range(n_base), size_b),
                                   itertools.combinations(range(n_head), size_h)))
    random.Random(seed).shuffle(every)
    return every[:count]


def resampled(out: Path, scenario: str, count: int, size: int | None, seed: int) -> list[dict]:
    """`count` trials of `scenario` judged again on subsets of the runs its real trials kept (spread over them):
    `size` runs a side, or (None) one fewer than a real trial kept (at least 1), so that there are subsets to draw."""
    from sdpa_impls.continuous.verdict import judge
    from sdpa_impls.gate.config import load_config
    from sdpa_impls.gate.points import load_points

    config = load_config(start=out / "repo" if (out / "repo").is_dir() else ROOT)  # kept runs alone: this tree's
    trials = sorted(p for p in out.glob(f"{scenario}-[0-9][0-9]") if p.is_dir())
    results: list[dict] = []
    for t, runs in enumerate(trials):
        sides = {s: [load_points(f)[1] for f in sorted(runs.glob(f"{s}-[0-9]*.json"))] for s in ("base", "head")}
        share = count // len(trials) + (t < count % len(trials))
        k = size or max(1, min(len(sides["base"]), len(sides["head"])) - 1)
        for b, h in subsets(len(sides["base"]), len(sides["head"]), k, share, seed + t):
            report = judge([sides["base"][i] for i in b], [sides["head"][i] for i in h], config)
            results.append({"scenario": scenario, "trial": f"{runs.name}:{b}/{h}", "kind": "resampled",
                            "exit": report.exit_code, "wall_s": 0.0,
                            "failed": [f"{c.kind} {c.subject}" for c in report.failures]})
    return results


def outcome(scenario: str, failed: list[str], exit_code: int) -> bool:
    """A/A: whether it failed (a false alarm). A regression: whether it was caught where it changed (host20 also
    needs no fused time failure: its device time did not change)."""
    if scenario == "aa":
        return exit_code == 1
    hit = any(f.startswith(CAUGHT[scenario]) for f in failed)
    return hit and not (scenario == "host20" and any(f.startswith("time fused[") for f in failed))


def table(results: list[dict], scenarios: tuple[str, ...] = SCENARIOS,
          judged: Callable[[str, list[str], int], bool] | None = None) -> str:
    """The goal table: per scenario and kind (real, resampled), the count with its 95 % bound and wall times;
    `judged(scenario, failed, exit)` says whether a trial counts (default `outcome`); "aa" counts false alarms."""
    judged = judged or outcome
    lines = ["| scenario | kind | trials | outcome | rate (95 % bound) | wall of a real continuous |",
             "|---|---|---|---|---|---|"]
    for s in scenarios:
        for kind in ("real", "resampled"):
            rs = [r for r in results if r["scenario"] == s and r["kind"] == kind]
            if not rs:
                continue
            k, n = sum(judged(s, r["failed"], r["exit"]) for r in rs), len(rs)
            lower, upper = bounds(k, n)
            what, rate = (("failed", f"{k / n:.0%} (≤ {upper:.1%})") if s == "aa" else
                          ("caught", f"{k / n:.0%} (≥ {lower:.1%})"))
            walls = [r["wall_s"] for r in rs if kind == "real"]
            wall = f"{min(walls):.0f}–{max(walls):.0f} s" if walls else "–"
            lines.append(f"| {s} | {kind} | {n} | {what} {k} of {n} | {rate} | {wall} |")
    return "\n".join(lines)


def estimated_wall(results: list[dict], rounds: int = DEFAULT_ROUNDS, adaptive_s: float = 30.0) -> str:
    """What one `continuous` of `rounds` planned rounds and at most `adaptive_s` of extra ones takes, estimated
    from the real trials' own timing (setup, then the same time per round): how a shortened trial's wall time
    answers the goal table's "one continuous" row. Empty when no real trial recorded its timing."""
    timed = [r for r in results if r.get("kind") == "real" and r.get("timing")]
    if not timed:
        return ""
    setup = [r["timing"]["setup_s"] for r in timed]
    per_round = [r["timing"]["per_round_s"] for r in timed]
    low, high = (min(setup) + rounds * min(per_round), max(setup) + rounds * max(per_round) + adaptive_s)
    planned = sorted({r.get("rounds") for r in timed if r.get("rounds")})
    return (f"real trials ({'/'.join(map(str, planned))} planned rounds a side): setup {min(setup):.0f}–"
            f"{max(setup):.0f} s, a round {min(per_round):.0f}–{max(per_round):.0f} s; so a continuous of {rounds} "
            f"rounds with at most {adaptive_s:.0f} s of extra rounds takes about {low:.0f}–{high:.0f} s "
            "(estimated from these, not measured)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("gpu-evidence"))
    parser.add_argument("--budget", type=float, default=540, help="seconds of real trials (default 540: 9 minutes)")
    parser.add_argument("--resamples", default=RESAMPLES, help=f"trials judged on kept runs (default {RESAMPLES})")
    parser.add_argument("--subset", type=int, default=None,
                        help="runs per side in a resampled trial (default: one fewer than the runs a side a real "
                             "trial kept, at least 1: 3 at continuous's default 4 rounds, 2 with --rounds 3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS),
                        help=f"the scenarios to run, in order (default {','.join(SCENARIOS)}); with OUT kept from an "
                             "earlier run, the ones with the fewest real trials there go first")
    parser.add_argument("--continuous-args", default="--adaptive-budget 30",
                        help="more arguments for each real continuous (default: --adaptive-budget 30)")
    parser.add_argument("--rejudge", action="store_true",
                        help="measure nothing: resample the runs kept in OUT with this tree's gate code (and OUT/repo's "
                             "config, or this tree's where OUT holds the runs alone)")
    args = parser.parse_args()
    counts = counts_of(args.resamples, SCENARIOS)
    chosen = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    if not chosen or set(chosen) - set(SCENARIOS):
        parser.error(f"--scenarios: {args.scenarios!r}; each one of {', '.join(SCENARIOS)}")
    log = args.out / "results.jsonl"
    if not args.rejudge:
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("gpu_gate_evidence: needs a CUDA device (torch.cuda.is_available() is False); "
                             "--rejudge resamples runs kept on one")
        args.out.mkdir(parents=True, exist_ok=True)
        repo = build_repo(args.out)
        deadline = time.perf_counter() + args.budget
        kept = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
        done: list[dict] = []
        while True:
            scenario = next_scenario(chosen, kept + done)
            took = trial_s(done or kept)
            if time.perf_counter() + took > deadline:
                break  # the next one would not finish within the budget
            r = real_trial(repo, scenario, args.out, args.continuous_args.split())
            done.append(r)
            with log.open("a") as fh:
                fh.write(json.dumps(r) + "\n")
            print(f"real {scenario}: exit {r['exit']} in {r['wall_s']:.0f} s, failed: {r['failed'][:4]}"
                  + (f"\n{r['stderr_tail']}" if r["stderr_tail"] else ""), flush=True)
        missing = [s for s in chosen if not any(r["scenario"] == s for r in kept + done)]
        if missing:
            print(f"no real trial of {', '.join(missing)} within --budget {args.budget:.0f} s (one takes about "
                  f"{trial_s(done or kept):.0f} s): run again with the same --out and "
                  f"--scenarios {','.join(missing)}, a longer --budget, or fewer rounds in --continuous-args",
                  flush=True)
    results = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
    for scenario, n in counts.items():
        results += resampled(args.out, scenario, n, args.subset, args.seed)
    print(table(results))
    wall = estimated_wall(results)
    if wall:
        print(wall)
    return 0


if __name__ == "__main__":
    sys.exit(main())
