import json, math, statistics as st, random
T975 = {3: 3.182, 6: 2.447, 7: 2.365, 14: 2.145}
P = [json.loads(l) for l in open('/tmp/pair/planted-pair.jsonl')]
S = [json.loads(l) for l in open('/tmp/pair/planted-single.jsonl')]
A = [s["r"] for s in S if s["side"] == "A"]; C = [s["r"] for s in S if s["side"] == "C"]
for k in ("naive-L1024", "naive-L128", "fused-L1024", "chunked-L128"):
    d = [math.log(r[k][1] / r[k][0]) for r in P]
    line = f"{k:13s} paired (one process, both copies): ratio {math.exp(st.mean(d)):.4f}, SD of log ratio per process {st.stdev(d):.4f}"
    if k in A[0]:
        a = [math.log(r[k]) for r in A]; c = [math.log(r[k]) for r in C]
        line += f" | separate processes: ratio {math.exp(st.mean(c) - st.mean(a)):.4f}, SD per process A {st.stdev(a):.4f} C {st.stdev(c):.4f}"
    print(line)
    # 95% interval half-width at K processes (pairs), t-based, from the per-process SDs
    for K in (4, 8):
        hp = T975[K - 1] * st.stdev(d) / math.sqrt(K)
        msg = f"    K={K}: paired half-width {hp:.4f}"
        if k in A[0]:
            se = math.sqrt(st.variance(a) / K + st.variance(c) / K)
            msg += f", separate {T975[2 * K - 2] * se:.4f}"
        print(msg)
