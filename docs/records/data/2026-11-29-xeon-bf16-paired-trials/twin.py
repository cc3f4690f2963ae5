"""Two processes alive at once, one per copy (worktree), timing blocks of calls in turn (ABBA) at the driver's request."""
import json, os, statistics, subprocess, sys
A, B = sys.argv[1], sys.argv[2]
BLOCK = int(os.environ.get("TWIN_BLOCK", "1"))  # calls of a row per turn, 1 for L1024 rows, 10x for L128
rows = [("naive", dict(lq=1024, lk=1024, e=64, dtype="fp32"), 6, 1),
        ("naive", dict(lq=128, lk=128, e=64, dtype="fp32"), 60, 10),
        ("fused", dict(lq=1024, lk=1024, e=64, dtype="fp32"), 6, 1),
        ("chunked", dict(lq=128, lk=128, e=64, dtype="fp32"), 60, 10)]
spec = [(n, kw, c) for n, kw, c, _ in rows]
ws = [subprocess.Popen([sys.executable, "twin_worker.py", p, json.dumps(spec)], stdin=subprocess.PIPE,
                       stdout=subprocess.PIPE, text=True) for p in (A, B)]
for w in ws:
    assert w.stdout.readline().strip() == "ready"
out = {}
for r, (name, kw, calls, per) in enumerate(rows):
    k = per * BLOCK
    t = [[], []]
    for i in range(max(1, calls * 2 // k)):
        for s in ((0, 1) if i % 2 == 0 else (1, 0)):
            ws[s].stdin.write(f"{r} {k}\n"); ws[s].stdin.flush()
            t[s].extend(json.loads(ws[s].stdout.readline()))
    out[f"{name}-L{kw['lq']}"] = [statistics.median(x) for x in t]
for w in ws:
    w.stdin.close(); w.wait()
print(json.dumps(out))
