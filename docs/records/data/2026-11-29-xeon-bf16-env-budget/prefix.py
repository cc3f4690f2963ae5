"""Undecided rows after the planned rounds and after each extra round of one kept comparison (exactly its runs)."""
import sys, json
sys.path.insert(0, "/work/main")
from pathlib import Path
from sdpa_impls.continuous.verdict import judge
from sdpa_impls.gate.config import load_config
from sdpa_impls.gate.points import load_points
runs = Path(sys.argv[1])
config = load_config(start=Path("/work/main"))
load = lambda side, tag: load_points(runs / f"{side}-{tag}.json")[1]
planned = sorted(int(f.stem.split("-")[1]) for f in runs.glob("base-[0-9]*.json"))
extra = sorted(int(f.stem.split("-a")[1]) for f in runs.glob("base-a*.json"))
base = [load("base", i) for i in planned]; head = [load("head", i) for i in planned]
for k in range(len(extra) + 1):
    if k:
        base.append(load("base", f"a{k}")); head.append(load("head", f"a{k}"))
    r = judge(base, head, config, planned=len(planned))
    print(f"after {k} extra round(s): {len(r.undecided)} timed rows undecided, exit {r.exit_code}")
