"""Two copies of sdpa_impls (two worktrees) loaded in one process, their calls alternated (ABBA), CPU time, one thread.
Prints one JSON line: per row, the median call time of each copy, and of each copy's separate blocks."""
import json, os, statistics, sys, time, random, importlib
import torch
torch.set_num_threads(1)
A, B = sys.argv[1], sys.argv[2]
def load(path):
    for m in [m for m in sys.modules if m == "sdpa_impls" or m.startswith("sdpa_impls.")]:
        del sys.modules[m]
    sys.path.insert(0, path)
    mod = importlib.import_module("sdpa_impls")
    from sdpa_impls.bench.check import CaseContext
    from sdpa_impls.bench.grid import Case
    sys.path.remove(path)
    assert mod.__file__.startswith(path), mod.__file__
    mods = {m: sys.modules[m] for m in sys.modules if m == "sdpa_impls" or m.startswith("sdpa_impls.")}
    return mod, CaseContext, Case, mods
rows = [("naive", dict(lq=1024, lk=1024, e=64, dtype="fp32"), 6),
        ("naive", dict(lq=128, lk=128, e=64, dtype="fp32"), 60),
        ("fused", dict(lq=1024, lk=1024, e=64, dtype="fp32"), 6),
        ("chunked", dict(lq=128, lk=128, e=64, dtype="fp32"), 60)]
sides = [load(A), load(B)]
clock = time.process_time
out = {}
for name, kw, calls in rows:
    fs = []
    for mod, CaseContext, Case, mods in sides:
        sys.modules.update(mods)
        args = CaseContext(Case(**kw), "cpu").inputs.args()
        f = mod.get(name).prepare(**args); f(); f()
        fs.append((f, mods))
    t = [[], []]
    for i in range(calls * 2):
        order = (0, 1) if (i % 2 == 0) else (1, 0)
        for s in order:
            f, mods = fs[s]
            sys.modules.update(mods)
            c = clock(); f(); t[s].append(clock() - c)
    out[f"{name}-L{kw['lq']}"] = [statistics.median(x) for x in t]
print(json.dumps(out))
