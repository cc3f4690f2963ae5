import sys, json, glob
from pathlib import Path
from sdpa_impls.continuous.comparison import Plan, compare
from sdpa_impls.continuous.assemble import Request
from sdpa_impls.continuous.project import find
sel, rounds, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
c = compare(Request("HEAD", "HEAD", impl=("naive",)), Plan(rounds=rounds, adaptive_budget=0, select=sel, keep_runs=out, seed=5),
            find(Path.cwd(), True), lambda t: None)
for r in c.report.rows:
    print(r.label, r.ratio, r.interval, r.decision)
print(c.report.notes)
