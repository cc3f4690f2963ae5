"""Trials of `sdpa-bench bisect` on planted histories: how often it names the planted commit, and only it, and how
often a history with nothing planted is "no regression".

    python tools/bisect_trials.py --trials 10 --commits 32 --size 0.05:0.15 [--aa 10] [--impl naive]
                                  [-k L1024-E64-fp32-fwd] [--seed 1] [--out trials.json] [-- BISECT OPTIONS]

One throw-away clone of this repository (its HEAD) in a temporary folder. Each trial is a branch of it: `--commits`
commits after that HEAD, each appending a line to a file outside the package, and at one commit drawn at random the
slowdown planted: the implementation's forward also spins for SIZE of its own CPU time (SIZE drawn from `--size`),
so the suite's CPU timer sees the call SIZE slower. An A/A trial (`--aa`) is the same history with nothing planted.
Each trial runs `python -m sdpa_impls bisect BASE HEAD --impl IMPL -k CASE --json ...` in the clone with this
interpreter (the clone's own code orchestrates, so editing this tree meanwhile changes nothing; each side is a
revision of the clone) and records what it
answered, the comparisons it took and its time. Prints a Markdown table and writes every trial's JSON to --out.
"""
from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMPL_FILES = {"naive": ("sdpa_impls/impls/naive.py", "Naive")}
PLANT = """

# planted by tools/bisect_trials.py: every call also spins for {size:.4f} of its own CPU time
import time as _planted_time  # noqa: E402

_planted_forward = {cls}.forward


def _planted(self, inp):
    start = _planted_time.process_time()
    out = _planted_forward(self, inp)
    spent = _planted_time.process_time() - start
    while _planted_time.process_time() - start < spent * {factor!r}:
        pass
    return out


{cls}.forward = _planted
"""
ENV = {"GIT_AUTHOR_NAME": "trials", "GIT_AUTHOR_EMAIL": "trials@example.com", "GIT_COMMITTER_NAME": "trials",
       "GIT_COMMITTER_EMAIL": "trials@example.com"}


def git(repo: Path, *args: str) -> str:
    import os

    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=os.environ | ENV).stdout.strip()


def write_history(repo: Path, base: str, branch: str, commits: int, planted: int | None, size: float,
                  impl: str) -> list[str]:
    """`commits` commits on a new branch from `base`; the one at index `planted` (0-based) plants the slowdown."""
    git(repo, "checkout", "-q", "-B", branch, base)
    path, cls = IMPL_FILES[impl]
    made = []
    for i in range(commits):
        note = repo / "docs" / "bisect-trial.txt"
        note.parent.mkdir(exist_ok=True)
        with note.open("a", encoding="utf-8") as fh:
            fh.write(f"commit {i + 1} of {branch}\n")
        subject = f"trial note {i + 1}"
        if i == planted:
            target = repo / path
            target.write_text(target.read_text() + PLANT.format(size=size, factor=1.0 + size, cls=cls))
            subject = f"{impl}: planted slowdown of {size:.1%}"
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", subject)
        made.append(git(repo, "rev-parse", "HEAD"))
    return made


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10, help="planted trials")
    parser.add_argument("--aa", type=int, default=0, help="trials with nothing planted")
    parser.add_argument("--commits", type=int, default=32)
    parser.add_argument("--size", default="0.05:0.15", help="the planted slowdown, LOW:HIGH (drawn uniformly)")
    parser.add_argument("--impl", default="naive", choices=list(IMPL_FILES))
    parser.add_argument("-k", dest="select", default="L1024-E64-fp32-fwd")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("bisect-trials.json"))
    parser.add_argument("rest", nargs="*", help="more options of `sdpa-bench bisect` (after --)")
    args = parser.parse_args()
    low, high = (float(x) for x in args.size.split(":"))
    rng = random.Random(args.seed)
    results = []
    with tempfile.TemporaryDirectory(prefix="sdpa-bisect-trials-") as tmp:
        repo = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(repo)], check=True)
        base = git(repo, "rev-parse", "HEAD")
        plan = [("planted", i) for i in range(args.trials)] + [("A/A", i) for i in range(args.aa)]
        for kind, i in plan:
            planted = rng.randrange(args.commits) if kind == "planted" else None
            size = rng.uniform(low, high) if kind == "planted" else 0.0
            made = write_history(repo, base, f"trial-{kind[0]}{i}", args.commits, planted, size, args.impl)
            keep = args.out.with_suffix("")  # every trial's whole answer beside the summary
            keep.mkdir(parents=True, exist_ok=True)
            out = keep / f"trial-{len(results) + 1}.json"
            start = time.monotonic()
            done = subprocess.run([sys.executable, "-m", "sdpa_impls", "bisect", base, made[-1], "--impl",
                                   args.impl, "-k", args.select, "--json", str(out), *args.rest], cwd=repo,
                                  capture_output=True, text=True)
            answer = json.loads(out.read_text()) if out.is_file() else {}
            culprit = (answer.get("culprit") or "").split(" ")[0]
            right = planted is not None and culprit and made[planted].startswith(culprit)
            row = {"kind": kind, "planted_index": planted, "size": round(size, 4), "exit": done.returncode,
                   "answer": answer.get("answer"), "culprit": answer.get("culprit"), "right": bool(right),
                   "among": answer.get("among"), "comparisons": answer.get("comparisons"),
                   "seconds": round(time.monotonic() - start, 1), "steps": [
                       (s["kind"], s["verdict"]) for s in answer.get("steps", [])],
                   "error": done.stderr.strip().splitlines()[-1] if done.returncode == 2 and done.stderr else ""}
            results.append(row)
            print(json.dumps(row), flush=True)
            args.out.write_text(json.dumps({"commits": args.commits, "impl": args.impl, "select": args.select,
                                            "seed": args.seed, "options": args.rest, "trials": results}, indent=1))
    print("\n| trial | planted at | size | answer | right | comparisons | time |\n|---|---|---|---|---|---|---|")
    for r in results:
        where = "-" if r["planted_index"] is None else str(r["planted_index"] + 1)
        print(f"| {r['kind']} | {where} | {r['size']:.1%} | {r['answer']} | {'yes' if r['right'] else '-'} | "
              f"{r['comparisons']} | {r['seconds']:.0f} s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
