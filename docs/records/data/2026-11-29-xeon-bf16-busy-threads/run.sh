#!/bin/bash
# The smoke preset's naive points three ways, one after another: 2 threads on a quiet machine (q), 2 threads
# beside one busy process (b1: `yes > /dev/null`), 1 thread beside the same busy process (o1). Then per point:
# samples, median, IQR, slowest sample, and how many samples took more than twice the quiet median.
set -u
B=${SDPA_BENCH:-sdpa-bench}
rm -rf q b1 o1
$B run --preset smoke --impl naive --out q --no-memory --no-plots --budget 0.5 >/dev/null 2>&1
yes >/dev/null & Y=$!
$B run --preset smoke --impl naive --out b1 --no-memory --no-plots --budget 0.5 >/dev/null 2>&1
OMP_NUM_THREADS=1 $B run --preset smoke --impl naive --out o1 --no-memory --no-plots --budget 0.5 >/dev/null 2>&1
kill $Y
python - <<'PY'
import json, statistics as st
docs = {d: json.load(open(f"{d}/results.json")) for d in ("q", "b1", "o1")}
quiet = {r["case"]["id"]: r["median_s"] for r in docs["q"]["results"]}
for d, doc in docs.items():
    for r in doc["results"]:
        s = r["samples"]
        q1, _, q3 = st.quantiles(s, n=4)
        slow = sum(x > 2 * quiet[r["case"]["id"]] for x in s)
        print(f"{d:3} {doc['meta']['machine']['threads']} {r['case']['id']:32} n {len(s):3} median {r['median_s'] * 1e6:6.0f} us"
              f"  IQR {(q3 - q1) * 1e6:5.0f} us  slowest {max(s) * 1e6:6.0f} us  > 2x quiet median {slow}/{len(s)}")
PY
