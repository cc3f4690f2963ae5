"""Resampled A/A trials (and a planted slowdown on every head sample) of kept continuous runs, judged by the
project's verdict with each benchmark's power of the speed probe fitted over both sides ("fitted", tried here and
not adopted) and with power 1 (the project's rule).  python trials.py K TRIALS PLANT DIR...  (run from a checkout)"""
import sys, glob, math, random, time, collections
from dataclasses import replace
from pathlib import Path
from statistics import median
import sdpa_impls.continuous.verdict as V
from sdpa_impls.continuous.speeds import probe_typical
from sdpa_impls.gate.config import load_config
from sdpa_impls.gate.points import load_points
cfg = load_config(None, start=Path.cwd())
k, n_trials, plant = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
POWERS = {}

def beside(p, typical):
    return [math.log((p.probe_s[i] + p.probe_s[i + 1]) / 2 / typical) for i in range(len(p.samples))]

def probe_powers(base, head, typical):
    """Least-squares slope of log(sample) on log(probe/typical), each side's means removed, clipped to [0, 1]."""
    sums = {}
    for side in (base, head):
        per = {}
        for run in side:
            for key, p in run.items():
                if p.samples and p.probe_s:
                    xs, ys = per.setdefault(key, ([], []))
                    xs += beside(p, typical); ys += [math.log(s) for s in p.samples]
        for key, (xs, ys) in per.items():
            mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
            a = sums.setdefault(key, [0.0, 0.0])
            a[0] += sum((x - mx) * (y - my) for x, y in zip(xs, ys)); a[1] += sum((x - mx) ** 2 for x in xs)
    return {key: min(1.0, max(0.0, xy / xx)) if xx > 0 else 1.0 for key, (xy, xx) in sums.items()}

def scaled_with_powers(runs, typical):
    out = []
    for run in runs:
        new = {}
        for key, p in run.items():
            s = tuple(x * math.exp(-POWERS.get(key, 1.0) * b) for x, b in zip(p.samples, beside(p, typical)))
            new[key] = replace(p, samples=s, median_s=median(s))
        out.append(new)
    return out

original = V.probe_scaled
def slowed(run, f):
    return [replace(p, samples=tuple(s * f for s in p.samples), median_s=(p.median_s or 0) * f) if p.samples else p
            for p in run]
for d in sys.argv[4:]:
    n = len(glob.glob(f"{d}/base-[0-9]*.json"))
    rounds = [(load_points(f"{d}/base-{i}.json")[1], load_points(f"{d}/head-{i}.json")[1]) for i in range(1, n + 1)]
    res = collections.defaultdict(collections.Counter); t0 = time.time()
    for method in ("power 1", "fitted"):
        V.probe_scaled = scaled_with_powers if method == "fitted" else original
        rng = random.Random(11)
        for t in range(n_trials):
            pick = rng.sample(range(n), k)
            pairs = [rounds[i] if rng.random() < 0.5 else rounds[i][::-1] for i in pick]
            for label, f in (("A/A", 1.0), (f"+{plant:.0%}", 1 + plant)):
                b = [p[0] for p in pairs]; h = [slowed(p[1], f) for p in pairs]
                bk, hk = [{x.key: x for x in r} for r in b], [{x.key: x for x in r} for r in h]
                typ = probe_typical(bk + hk)
                POWERS.clear(); POWERS.update(probe_powers(bk, hk, typ) if typ else {})
                rep = V.judge(b, h, cfg)
                rows = [r for r in rep.rows if r.decision and r.impl != cfg.time_reference]
                c = res[(method, label)]
                c["rows"] += len(rows); c["trials"] += 1
                c["slower"] += sum(r.decision == "slower" for r in rows)
                c["not slower"] += sum(r.decision == "not slower" for r in rows)
                c["trials with a slower row"] += any(r.decision == "slower" for r in rows)
    print(f"{d}: {n} rounds, {n_trials} trials of {k}, {time.time() - t0:.0f} s")
    for (m, label), c in sorted(res.items()):
        print(f"   {m:8s} {label:5s} decided {(c['slower'] + c['not slower']) / c['rows']:.3f}  "
              f"slower {c['slower'] / c['rows']:.3f}  not slower {c['not slower'] / c['rows']:.3f}  "
              f"trials with a slower row {c['trials with a slower row']}/{c['trials']}")
    sys.stdout.flush()
