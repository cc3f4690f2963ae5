"""Count how often `sdpa-bench continuous` fails an unchanged tree and catches real regressions.

Its measurements: docs/records/2026-11-25-epyc-continuous-leave-one-out.md and the records it cites.

    python tools/continuous_evidence.py --table --out /tmp/continuous-evidence --lock /tmp/sdpa-measure.lock
    python tools/continuous_evidence.py --calibrate --out /tmp/continuous-evidence --lock /tmp/sdpa-measure.lock

(--lock: each measuring process holds that lock, so other measurements on the machine take turns with it.)

Builds a scratch git repository from this working tree (commit `base`), then one branch per scenario, each a
real code or docs change committed on top of `base`:
  aa         a docs-only change (README.md): must pass;
  fused5     `fused` computes S = scale·Q Kᵀ once more for the first 2/16 of each query tile's rows (one extra GEMM
             into the scratch tile the real GEMM then overwrites; none on a tile of fewer than 8 rows, so decode is
             untouched): measured alone (--calibrate, 3 processes each) +2 % to +10 %, median +4.8 %, on the 7 ci
             cases it touches;
  fused10    the same for 4/16 of the rows: +4 % to +34 % alone, median +11 % (the same run; +10 % on L1024 fp32
             fwd, +12 % on L128 fp32 and +13 % on L128 bf16 causal when first measured);
  fused25    the same for 10/16 of the rows: ~+25 % (between +18 % at 8/16 and +30 % at 12/16 on the fp32 cases);
  chunkedmem `chunked` holds an extra buffer of 1/50 of the query's elements during the call: ~+1 % peak memory.
--trials N runs every scenario N times; --trials aa=40,fused5=10 names a count per scenario; --table is the goal
table of docs/records/2026-11-25-epyc-continuous-leave-one-out.md (A/A 40, +5 %, +10 % and +1 % memory 10 each).
Trials interleave the scenarios (trial t of each, then t + 1), and a run resumes where results.jsonl in OUT stops, with the scratch repository of its first
start: the code measured stays that tree's (a new OUT measures a new tree). Each runs exactly what CI runs
(`tox -e continuous`'s command: the ci preset, naive/chunked/fused + the time reference, default rounds, the same
adaptive budget), from the scratch repository:
    python -m sdpa_impls continuous base <branch> --impl naive --impl chunked --impl fused --adaptive-budget 75 ...
keeping every run's pytest-benchmark JSON next to the verdict, and records the exit status, wall time, failed
checks, undecided benchmarks, seed and order of sides, extra rounds, and the fused / chunked head/base ratios. A
summary table with rates and their 95 % bounds (Clopper–Pearson) is printed after every trial.

--calibrate measures each fused scenario alone, as the +10 % one was: `fused` on every case of the ci preset, one
thread, `time.process_time`, the median of --calls calls, in separate processes alternating base and the scenario
(--calibrate-rounds each); it prints the scenario / base ratio per case. Not a test: each run takes minutes.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sdpa_impls.continuous.revisions import snapshot_working_tree  # noqa: E402

FUSED = "sdpa_impls/impls/fused.py"
CHUNKED = "sdpa_impls/impls/chunked.py"
GEMM = "            sd = take(sbuf, n, m, cols[-1])  # (heads, G·rows, keys of the plan)\n"  # fused's regressions go before
CHUNKED_CALL = "        return with_op(lambda: tiled_attention(inp, fwd, tiling, tiles, widen, nan_check), computes)\n"
CI_ARGS = ["--impl", "naive", "--impl", "chunked", "--impl", "fused"]
CI_BUDGET = "75"  # tox.ini's --adaptive-budget for `tox -e continuous`
SCENARIOS = ("aa", "fused5", "fused10", "fused25", "chunkedmem")
SIXTEENTHS = {"fused5": 2, "fused10": 4, "fused25": 10}  # of each query tile's rows GEMMed again
# the goal table of docs/records/2026-11-25-epyc-continuous-leave-one-out.md
TABLE = "aa=40,fused5=10,fused10=10,chunkedmem=10"


# the scratch repositories' commits need a name on a machine with no git identity configured (a bare GPU image)
IDENTITY = {"GIT_AUTHOR_NAME": "evidence", "GIT_AUTHOR_EMAIL": "evidence@localhost",
            "GIT_COMMITTER_NAME": "evidence", "GIT_COMMITTER_EMAIL": "evidence@localhost"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=os.environ | IDENTITY).stdout.strip()


def branch(repo: Path, name: str, path: str, old: str, new: str) -> None:
    git(repo, "checkout", "-q", "-b", name, "base")
    target = repo / path
    text = target.read_text()
    assert old in text, f"{path}: the line to change is gone"
    target.write_text(text.replace(old, new))
    git(repo, "commit", "-q", "-am", name)


def extra_gemm(sixteenths: int) -> str:
    """The regression: the first GEMM again on `sixteenths`/16 of the tile's rows, into the scratch the real one
    fills."""
    return (f"            r = (i1 - i0) * {sixteenths} // 16  # a regression: an extra GEMM on part of the tile\n"
            "            j0, j1 = key_tiles[0].j0, key_tiles[-1].j1\n"
            "            if r:  # none on a tile too short for it (decode: one query row)\n"
            "                torch.baddbmm(take(sbuf, n, g * r, j1 - j0), rows3(q4, i0, i0 + r), kt3[..., j0:j1], beta=0,\n"
            "                              alpha=scale, out=take(sbuf, n, g * r, j1 - j0))\n")


def base_and_aa(repo: Path) -> None:
    """A scratch repository at `repo`: this working tree as commit `base`, and branch `aa` (a docs-only change)."""
    snapshot_working_tree(ROOT, repo)
    git(repo, "init", "-q", "-b", "base")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    git(repo, "checkout", "-q", "-b", "aa")
    with (repo / "README.md").open("a") as fh:
        fh.write("\nA docs-only change.\n")
    git(repo, "commit", "-q", "-am", "aa: docs only")


def build_repo(out: Path, sixteenths: dict[str, int]) -> Path:
    repo = out / "repo"
    if repo.exists():
        print(f"resuming with {repo}: the tree it was built from, not this one, is what is measured", file=sys.stderr)
        return repo
    base_and_aa(repo)
    for name, n in sixteenths.items():
        branch(repo, name, FUSED, GEMM, extra_gemm(n) + GEMM)
    branch(repo, "chunkedmem", CHUNKED, CHUNKED_CALL,
           "        def call() -> torch.Tensor:\n"
           "            extra = torch.empty(q.numel() // 50, dtype=q.dtype, device=q.device)  # a regression: +memory\n"
           "            out = tiled_attention(inp, fwd, tiling, tiles, widen, nan_check)\n"
           "            del extra\n            return out\n        return with_op(call, computes)\n")
    git(repo, "checkout", "-q", "base")
    return repo


def one(repo: Path, scenario: str, out: Path, lock: str | None, budget: str = CI_BUDGET) -> dict:
    start = time.perf_counter()
    lock_cmd = ["flock", lock] if lock else []
    done = subprocess.run([*lock_cmd, sys.executable, "-m", "sdpa_impls", "continuous", "base", scenario, *CI_ARGS,
                           "--adaptive-budget", budget, "--json", str(out), "--keep-runs", str(out.with_suffix(""))],
                          cwd=repo, capture_output=True, text=True, env=os.environ | {"PYTHONPATH": str(repo)})
    wall = time.perf_counter() - start
    took = re.search(r"\[\s*([0-9hms]+)\] done: exit", done.stderr)
    verdict = json.loads(out.read_text()) if out.is_file() else {}
    ratios = {impl: statistics.median([r["ratio"] for r in verdict.get("rows", []) if r["impl"] == impl
                                       and r["ratio"] is not None] or [float("nan")]) for impl in ("fused", "chunked")}
    return {"scenario": scenario, "exit": done.returncode, "wall_s": round(wall, 1),
            "continuous_took": took.group(1) if took else None,
            "failed": [f"{f['kind']} {f['subject']}" for f in verdict.get("failures", [])],
            "undecided": verdict.get("undecided", []), "run": verdict.get("run", {}),
            "median_ratio": ratios, "stderr_tail": done.stderr[-400:] if done.returncode == 2 else ""}


def kept_runs(out: Path, adaptive_rounds: int | None = None, finished: bool = False):
    """(scenario, trial, base runs, head runs, planned rounds) of every trial kept in `out`, runs in the order they
    ran (planned, then extra), only the first `adaptive_rounds` extra rounds when given; a run interrupted with a
    side short is left out, and with `finished` every run that did not end (no `<trial>.json` verdict)."""
    from sdpa_impls.gate.points import load_points

    for runs in sorted(p for p in out.glob("*-[0-9][0-9]") if p.is_dir()):
        if finished and not (out / f"{runs.name}.json").is_file():
            continue
        scenario, trial = runs.name.rsplit("-", 1)
        files = {side: sorted((f for f in runs.glob(f"{side}-*.json") if _kept(f, adaptive_rounds)),
                              key=_round_order) for side in ("base", "head")}
        base, head = ([load_points(f)[1] for f in files[side]] for side in ("base", "head"))
        if not base or len(base) != len(head):
            continue  # an interrupted run
        planned = sum(not f.stem.split("-")[1].startswith("a") for f in files["head"])  # a1, a2: adaptive rounds
        yield scenario, int(trial), base, head, planned


def rejudge(out: Path, floor: str | None = None, adaptive_rounds: int | None = None) -> list[dict]:
    """Judge the kept runs of every trial again with this tree's gate code and the scratch repository's
    config (no measuring), `floor` (e.g. "median:3%") replacing its continuous_time: how a change to the rule would
    have decided the same measurements. The extra rounds stay the ones the measured rule chose; `adaptive_rounds`
    keeps only the first K of them, which is what a smaller --adaptive-budget would have measured (the rounds
    run one after another, each choosing its benchmarks from the ones before it). A trial stopped during its extra
    rounds counts with the rounds it finished."""
    import dataclasses

    from sdpa_impls.continuous.verdict import judge
    from sdpa_impls.gate.config import load_config

    config = load_config(start=out / "repo")
    if floor:
        config = dataclasses.replace(config, continuous_time=floor)
    results = []
    for scenario, trial, base, head, planned in kept_runs(out, adaptive_rounds):
        report = judge(base, head, config, planned=planned)
        fused = [r.ratio for r in report.rows if r.impl == "fused" and r.ratio is not None]
        results.append({"scenario": scenario, "trial": trial, "exit": report.exit_code, "wall_s": 0.0,
                        "failed": [f"{c.kind} {c.subject}" for c in report.failures],
                        "undecided": [r.label for r in report.undecided],
                        "median_ratio": {"fused": statistics.median(fused) if fused else float("nan")}})
    return results


def _round_order(f: Path) -> tuple[bool, int]:
    """Planned rounds (base-3.json) first, then the adaptive ones (base-a1.json), each in the order they ran."""
    tag = f.stem.split("-")[1]
    return tag.startswith("a"), int(tag.lstrip("a"))


def _kept(f: Path, adaptive_rounds: int | None) -> bool:
    tag = f.stem.split("-")[1]
    return adaptive_rounds is None or not tag.startswith("a") or int(tag[1:]) <= adaptive_rounds


def _binomial_cdf(k: int, n: int, p: float) -> float:
    return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k + 1))


def bounds(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """One-sided Clopper–Pearson bounds of a rate seen k times in n: (lower, upper), each at `level`."""
    def solve(target: Callable[[float], bool]) -> float:
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if target(mid) else (lo, mid)
        return (lo + hi) / 2
    alpha = 1 - level
    upper = 1.0 if k == n else solve(lambda p: _binomial_cdf(k, n, p) > alpha)
    lower = 0.0 if k == 0 else solve(lambda p: 1 - _binomial_cdf(k - 1, n, p) < alpha)
    return lower, upper


CHANGED = {"fused5": "time fused[", "fused10": "time fused[", "fused25": "time fused[",
           "chunkedmem": "memory chunked["}


def caught_where_changed(scenario: str, failed: list[str]) -> bool:
    """Whether a regression scenario's run failed a check of the kind it changed, on the implementation it changed:
    a time check of `fused`, a memory check of `chunked`. A failure elsewhere (an untouched benchmark's time) is a
    false alarm that happens to fail the run, not a catch."""
    return any(f.startswith(CHANGED[scenario]) for f in failed) if scenario in CHANGED else False


def summary(results: list[dict]) -> str:
    lines = ["| scenario | trials | exit 0 | exit 1 | exit 2 | a time check failed | a memory check failed | "
             "caught where changed | rate (95 % bound) | with undecided | extra rounds | median fused ratio | "
             "wall incl. lock wait |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in SCENARIOS:
        rs = [r for r in results if r["scenario"] == s]
        if not rs:
            continue
        codes = [r["exit"] for r in rs]
        walls = [r["wall_s"] for r in rs]
        fused = statistics.median(r["median_ratio"]["fused"] for r in rs)
        timed = sum(any(f.startswith("time ") for f in r["failed"]) for r in rs)
        memory = sum(any(f.startswith("memory ") for f in r["failed"]) for r in rs)
        undecided = sum(bool(r.get("undecided")) for r in rs)
        extra = [r.get("run", {}).get("adaptive", {}).get("selected", []) for r in rs]
        caught = sum(caught_where_changed(s, r["failed"]) for r in rs)
        n = len(rs)
        k = codes.count(1) if s == "aa" else caught  # a regression counts as caught on what it changed only
        lower, upper = bounds(k, n)
        rate = f"failed {k / n:.0%} (≤ {upper:.1%})" if s == "aa" else f"caught {k / n:.0%} (≥ {lower:.1%})"
        where = "–" if s == "aa" else str(caught)
        lines.append(f"| {s} | {n} | {codes.count(0)} | {codes.count(1)} | {codes.count(2)} | {timed} | {memory} | "
                     f"{where} | {rate} | "
                     f"{undecided} | {statistics.median(len(e) for e in extra):g} median, {max(map(len, extra))} max | "
                     f"{fused:.3f} | {min(walls):.0f}–{max(walls):.0f} s (median {statistics.median(walls):.0f}) |")
    return "\n".join(lines)


CALIBRATE = """
import statistics, sys, time, torch
torch.set_num_threads(1)
from sdpa_impls.bench.check import CaseContext
from sdpa_impls.bench.grid import preset
from sdpa_impls.bench.measure import prepare_point
for case in preset("ci"):
    fn = prepare_point("fused", CaseContext(case, "cpu")).fn
    fn()
    took = []
    for _ in range(int(sys.argv[1])):
        start = time.process_time()
        fn()
        took.append(time.process_time() - start)
    print(case.id, statistics.median(took))
"""


def calibrate(repo: Path, scenarios: list[str], calls: int, rounds: int, lock: str | None) -> dict[str, dict]:
    """Each fused scenario alone: median time of `fused` per ci case in processes alternating base and the
    scenario (`rounds` each, the median over them), printed as the scenario / base ratio per case."""
    lock_cmd = ["flock", lock] if lock else []
    env = os.environ | {"PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1"}

    def times(rev: str) -> dict[str, float]:
        git(repo, "checkout", "-q", rev)
        done = subprocess.run([*lock_cmd, sys.executable, "-c", CALIBRATE, str(calls)], cwd=repo, env=env,
                              capture_output=True, text=True, check=True)
        return {line.split()[0]: float(line.split()[1]) for line in done.stdout.splitlines()}

    ratios = {}
    try:
        for scenario in scenarios:
            seen: dict[str, dict[str, list[float]]] = {"base": {}, scenario: {}}
            for i in range(rounds):
                for rev in ("base", scenario) if i % 2 == 0 else (scenario, "base"):
                    for case, t in times(rev).items():
                        seen[rev].setdefault(case, []).append(t)
            ratios[scenario] = {case: statistics.median(seen[scenario][case]) / statistics.median(ts)
                                for case, ts in seen["base"].items()}
            print(f"{scenario} alone ({calls} calls, {rounds} process(es) each, one thread, process time): "
                  + ", ".join(f"{case} ×{r:.3f}" for case, r in ratios[scenario].items()), flush=True)
    finally:
        git(repo, "checkout", "-q", "base")
    return ratios


def plan(trials: str, scenarios: str) -> dict[str, int]:
    """{scenario: trials} from --trials N (every scenario of --scenarios) or --trials aa=40,fused5=10."""
    if "=" not in trials:
        return {s: int(trials) for s in scenarios.split(",")}
    return counts_of(trials, SCENARIOS)


def counts_of(text: str, known: tuple[str, ...]) -> dict[str, int]:
    """{scenario: N} from "aa=40,fused5=10"; SystemExit naming the known scenarios for an unknown one."""
    counts = {name: int(n) for name, n in (item.split("=") for item in text.split(","))}
    unknown = set(counts) - set(known)
    if unknown:
        raise SystemExit(f"unknown scenario(s) {sorted(unknown)}; known: {', '.join(known)}")
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", default="10", help="N for every scenario, or SCENARIO=N,... (e.g. aa=40,fused5=10)")
    parser.add_argument("--table", action="store_true", help=f"the goal table's trials: --trials {TABLE}")
    parser.add_argument("--out", type=Path, default=Path("continuous-evidence"))
    for name, n in SIXTEENTHS.items():
        parser.add_argument(f"--sixteenths-{name[5:]}", type=int, default=n, dest=name,
                            help=f"sixteenths of each tile's rows GEMMed again in {name} (default {n})")
    parser.add_argument("--lock", help="run each measuring process under `flock LOCK` (a shared machine's lock)")
    parser.add_argument("--scenarios", default="aa,fused5,fused10,chunkedmem", help="for --trials N")
    parser.add_argument("--adaptive-budget", default=CI_BUDGET, help=f"as tox -e continuous (default {CI_BUDGET})")
    parser.add_argument("--rejudge", action="store_true",
                        help="measure nothing: judge the kept runs in OUT again with this tree's gate code")
    parser.add_argument("--floor", help="--rejudge with this continuous_time instead of the repository's (e.g. median:3%%)")
    parser.add_argument("--adaptive-rounds", type=int, metavar="K",
                        help="--rejudge keeping only the first K extra rounds of each run (a smaller budget)")
    parser.add_argument("--calibrate", action="store_true", help="measure each fused scenario alone, then stop")
    parser.add_argument("--calls", type=int, default=100, help="--calibrate: timed calls per case and process")
    parser.add_argument("--calibrate-rounds", type=int, default=3, help="--calibrate: processes per tree")
    args = parser.parse_args()
    if args.rejudge:
        results = rejudge(args.out, args.floor, args.adaptive_rounds)
        for r in results:
            print(f"{r['scenario']}-{r['trial']:02d}: exit {r['exit']}, failed: {r['failed'][:4]}")
        print(summary(results))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    repo = build_repo(args.out, {name: getattr(args, name) for name in SIXTEENTHS})
    if args.calibrate:
        calibrate(repo, list(SIXTEENTHS), args.calls, args.calibrate_rounds, args.lock)
        return 0
    counts = plan(TABLE if args.table else args.trials, args.scenarios)
    log = args.out / "results.jsonl"
    results = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
    for t in range(max(counts.values(), default=0)):
        for scenario, n in counts.items():
            if t >= n or sum(r["scenario"] == scenario for r in results) > t:
                continue  # this scenario has its trials, or (resumed) this trial of it is done
            r = one(repo, scenario, args.out / f"{scenario}-{t:02d}.json", args.lock, args.adaptive_budget)
            r["trial"] = t
            results.append(r)
            with log.open("a") as fh:
                fh.write(json.dumps(r) + "\n")
            print(f"trial {t} {scenario}: exit {r['exit']}, continuous took {r['continuous_took']}, "
                  f"fused ×{r['median_ratio']['fused']:.3f}, failed: {r['failed'][:4]}, "
                  f"undecided: {len(r['undecided'])}", flush=True)
        print(summary(results), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
