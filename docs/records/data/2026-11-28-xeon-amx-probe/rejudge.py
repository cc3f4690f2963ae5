"""Rejudge a kept run: all runs, and without each side's first run.  python rejudge.py DIR"""
import sys, glob, collections, numpy as np
from pathlib import Path
from sdpa_impls.continuous.verdict import judge
from sdpa_impls.gate.config import load_config
from sdpa_impls.gate.points import load_points
cfg = load_config(None, start=Path('/work/main'))
d = sys.argv[1]
def runs(role):
    fs = sorted(glob.glob(f"{d}/{role}-*.json"), key=lambda f: (('a' in f.split('-')[-1]), int(f.split('-')[-1][:-5].lstrip('a'))))
    return fs
B, H = runs('base'), runs('head')
def dec(bf, hf):
    rep = judge([load_points(f)[1] for f in bf], [load_points(f)[1] for f in hf], cfg)
    c = collections.Counter(r.decision for r in rep.rows if r.decision)
    w = np.median([r.interval[1] / r.interval[0] for r in rep.rows if r.interval])
    return dict(c), round(1 - c['undecided'] / sum(c.values()), 2), "median width", round(w, 4)
planned = [f for f in B if 'a' not in f.split('-')[-1]]
print("planned only, all", len(planned), dec(planned, [f for f in H if 'a' not in f.split('-')[-1]]))
print("planned, no first", dec(planned[1:], [f for f in H if 'a' not in f.split('-')[-1]][1:]))
print("planned, first 4", dec(planned[:4], [f for f in H if 'a' not in f.split('-')[-1]][:4]))
