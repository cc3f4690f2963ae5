"""Count how often `sdpa-bench continuous` fails an unchanged tree and catches real regressions (docs/gate.md).

    python tools/continuous_evidence.py --trials 10 --out /tmp/continuous-evidence --lock /tmp/sdpa-measure.lock

(--lock: each `continuous` run holds that lock, so other measurements on the machine take turns with it.)

Builds a scratch git repository from this working tree (commit `base`), then one branch per scenario, each a
real code or docs change committed on top of `base`:
  aa        a docs-only change (README.md): must pass;
  fused10   `fused` computes S = scale·Q Kᵀ once more for the first 2/8 of each query tile's rows (one extra GEMM
            into the scratch tile the real GEMM then overwrites): measured alone, one thread, +10 % (L1024 fp32
            fwd), +12 % (L128 fp32), +13 % (L128 bf16 causal), but ~0 % on L1024 bf16;
  fused25   the same for 5/8 of the rows: ~+25 % (between +18 % at 4/8 and +30 % at 6/8 on the fp32 cases);
  chunkedmem `chunked` holds an extra buffer of 1/50 of the query's elements during the call: ~+1 % peak memory.
Each trial runs, for every scenario in turn, exactly what CI runs (`tox -e continuous`'s command, the ci preset,
naive/chunked/fused + the time reference, default rounds), from the scratch repository:
    python -m sdpa_impls continuous base <branch> --impl naive --impl chunked --impl fused --json ...
(keeping every run's pytest-benchmark JSON next to the verdict) and records the exit status, the wall time, the
failed checks and the fused / chunked head/base ratios. A
summary table is printed at the end (and after every trial). Not a test: each run takes minutes.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sdpa_impls.continuous.revisions import snapshot_working_tree  # noqa: E402

FUSED = "sdpa_impls/impls/fused.py"
CHUNKED = "sdpa_impls/impls/chunked.py"
GEMM = "            torch.baddbmm(sd, rows3(q4, i0, i1), kt3[..., :k_end], beta=0, alpha=scale, out=sd)\n"
CHUNKED_CALL = "        return lambda: tiled_attention(inp, fwd, Q_TILE, k_tile, widen)\n"
CI_ARGS = ["--impl", "naive", "--impl", "chunked", "--impl", "fused"]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def branch(repo: Path, name: str, path: str, old: str, new: str) -> None:
    git(repo, "checkout", "-q", "-b", name, "base")
    target = repo / path
    text = target.read_text()
    assert old in text, f"{path}: the line to change is gone"
    target.write_text(text.replace(old, new))
    git(repo, "commit", "-q", "-am", name)


def extra_gemm(eighths: int) -> str:
    """The regression: the first GEMM again on `eighths`/8 of the tile's rows, into the scratch the real one fills."""
    return (f"            r = max(1, (i1 - i0) * {eighths} // 8)  # a regression: an extra GEMM on part of the tile\n"
            "            torch.baddbmm(take(sbuf, n, g * r, k_end), rows3(q4, i0, i0 + r), kt3[..., :k_end], beta=0,\n"
            "                          alpha=scale, out=take(sbuf, n, g * r, k_end))\n")


def build_repo(out: Path, eighths10: int, eighths25: int) -> Path:
    repo = out / "repo"
    if repo.exists():
        return repo
    snapshot_working_tree(ROOT, repo)
    git(repo, "init", "-q", "-b", "base")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    git(repo, "checkout", "-q", "-b", "aa")
    with (repo / "README.md").open("a") as fh:
        fh.write("\nA docs-only change.\n")
    git(repo, "commit", "-q", "-am", "aa: docs only")
    for name, n in (("fused10", eighths10), ("fused25", eighths25)):
        branch(repo, name, FUSED, GEMM, extra_gemm(n) + GEMM)
    branch(repo, "chunkedmem", CHUNKED, CHUNKED_CALL,
           "        def call() -> torch.Tensor:\n"
           "            extra = torch.empty(q.numel() // 50, dtype=q.dtype, device=q.device)  # a regression: +memory\n"
           "            out = tiled_attention(inp, fwd, Q_TILE, k_tile, widen)\n"
           "            del extra\n            return out\n        return call\n")
    git(repo, "checkout", "-q", "base")
    return repo


def one(repo: Path, scenario: str, out: Path, lock: str | None) -> dict:
    start = time.perf_counter()
    lock_cmd = ["flock", lock] if lock else []
    done = subprocess.run([*lock_cmd, sys.executable, "-m", "sdpa_impls", "continuous", "base", scenario, *CI_ARGS,
                           "--json", str(out), "--keep-runs", str(out.with_suffix(""))], cwd=repo,
                          capture_output=True, text=True, env=os.environ | {"PYTHONPATH": str(repo)})
    wall = time.perf_counter() - start
    took = re.search(r"\[\s*([0-9hms]+)\] done: exit", done.stderr)
    verdict = json.loads(out.read_text()) if out.is_file() else {}
    ratios = {impl: statistics.median([r["ratio"] for r in verdict.get("rows", []) if r["impl"] == impl
                                       and r["ratio"] is not None] or [float("nan")]) for impl in ("fused", "chunked")}
    return {"scenario": scenario, "exit": done.returncode, "wall_s": round(wall, 1),
            "continuous_took": took.group(1) if took else None,
            "failed": [f"{f['kind']} {f['subject']}" for f in verdict.get("failures", [])],
            "median_ratio": ratios, "stderr_tail": done.stderr[-400:] if done.returncode == 2 else ""}


def rejudge(out: Path) -> list[dict]:
    """Judge the kept runs of every finished trial again with this tree's gate code and the scratch repository's
    config (no measuring): how a change to the rule would have decided the same measurements."""
    from sdpa_impls.gate.config import load_config
    from sdpa_impls.gate.points import load_points
    from sdpa_impls.continuous.verdict import judge

    config = load_config(start=out / "repo")
    results = []
    for runs in sorted(p for p in out.glob("*-[0-9][0-9]") if p.is_dir()):
        scenario, trial = runs.name.rsplit("-", 1)
        base = [load_points(f)[1] for f in sorted(runs.glob("base-*.json"))]
        head = [load_points(f)[1] for f in sorted(runs.glob("head-*.json"))]
        if not base or len(base) != len(head):
            continue  # an interrupted run
        report = judge(base, head, config)
        fused = [r.ratio for r in report.rows if r.impl == "fused" and r.ratio is not None]
        results.append({"scenario": scenario, "trial": int(trial), "exit": report.exit_code, "wall_s": 0.0,
                        "failed": [f"{c.kind} {c.subject}" for c in report.failures],
                        "median_ratio": {"fused": statistics.median(fused) if fused else float("nan")}})
    return results


def summary(results: list[dict]) -> str:
    lines = ["| scenario | trials | exit 0 | exit 1 | exit 2 | a time check failed | a memory check failed | "
             "median fused ratio | wall incl. lock wait |", "|---|---|---|---|---|---|---|---|---|"]
    for s in ("aa", "fused10", "fused25", "chunkedmem"):
        rs = [r for r in results if r["scenario"] == s]
        if not rs:
            continue
        codes = [r["exit"] for r in rs]
        walls = [r["wall_s"] for r in rs]
        fused = statistics.median(r["median_ratio"]["fused"] for r in rs)
        timed = sum(any(f.startswith("time ") for f in r["failed"]) for r in rs)
        memory = sum(any(f.startswith("memory ") for f in r["failed"]) for r in rs)
        lines.append(f"| {s} | {len(rs)} | {codes.count(0)} | {codes.count(1)} | {codes.count(2)} | {timed} | "
                     f"{memory} | {fused:.3f} | {min(walls):.0f}–{max(walls):.0f} s |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("continuous-evidence"))
    parser.add_argument("--eighths-10", type=int, default=2, help="eighths of each tile's rows GEMMed again, ~+10 %%")
    parser.add_argument("--eighths-25", type=int, default=5, help="the same for ~+25 %%")
    parser.add_argument("--lock", help="run each continuous under `flock LOCK` (a shared machine's measurement lock)")
    parser.add_argument("--scenarios", default="aa,fused10,fused25,chunkedmem")
    parser.add_argument("--rejudge", action="store_true",
                        help="measure nothing: judge the kept runs in OUT again with this tree's gate code")
    args = parser.parse_args()
    if args.rejudge:
        results = rejudge(args.out)
        for r in results:
            print(f"{r['scenario']}-{r['trial']:02d}: exit {r['exit']}, failed: {r['failed'][:4]}")
        print(summary(results))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    repo = build_repo(args.out, args.eighths_10, args.eighths_25)
    log = args.out / "results.jsonl"
    results = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
    for t in range(args.trials):
        for scenario in args.scenarios.split(","):
            if sum(r["scenario"] == scenario for r in results) > t:
                continue  # resumed: this trial of this scenario is done
            r = one(repo, scenario, args.out / f"{scenario}-{t:02d}.json", args.lock) | {"trial": t}
            results.append(r)
            with log.open("a") as fh:
                fh.write(json.dumps(r) + "\n")
            print(f"trial {t} {scenario}: exit {r['exit']}, continuous took {r['continuous_took']}, "
                  f"fused ×{r['median_ratio']['fused']:.3f}, failed: {r['failed'][:4]}", flush=True)
        print(summary(results), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
