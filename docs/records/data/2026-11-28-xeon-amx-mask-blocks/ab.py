"""fused's drop-in call with a bool mask, its negated mask blocks kept (new) against read from the mask on every call
(old, the code before), and fused's prepared causal call of the same length, in one process, rounds in alternating
order; the two answers must be equal:

    python ab.py L DTYPE [MASK]     # MASK: a structure of the grid (default window-512); prints one line
"""
import statistics, sys, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
import torch  # noqa: E402
import sdpa_impls
from sdpa_impls.impls._tiled import tiles
from sdpa_impls.bench.check import CaseContext
from sdpa_impls.bench.grid import Case
from sdpa_impls.bench.measure import prepare_point
L = int(sys.argv[1]); dtype = sys.argv[2]; mask = sys.argv[3] if len(sys.argv) > 3 else "window-512"
causal = prepare_point("fused", CaseContext(Case(lq=L, lk=L, e=64, dtype=dtype, causal=True), "cpu")).fn
inputs = CaseContext(Case(lq=L, lk=L, e=64, dtype=dtype, mask=mask), "cpu").inputs.args()
f = sdpa_impls.get("fused")
new_neg = tiles.TileMasker._negated
def old():
    tiles.TileMasker._negated = lambda self, m: m.logical_not()
    try: return f(**inputs)
    finally: tiles.TileMasker._negated = new_neg
new = lambda: f(**inputs)
a, b = old(), new()
assert torch.equal(a, b)
fns = {"causal": causal, "old": old, "new": new}
s = {k: [] for k in fns}
for r in range(9):
    for k in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
        t = time.perf_counter(); fns[k](); s[k].append(time.perf_counter() - t)
m = {k: statistics.median(v) for k, v in s.items()}
print(f"L{L} {dtype} {mask}: causal {m['causal']*1e3:.1f} old {m['old']*1e3:.1f} new {m['new']*1e3:.1f} ms; /causal old {m['old']/m['causal']:.3f} new {m['new']/m['causal']:.3f}; new/old {m['new']/m['old']:.3f}", flush=True)
