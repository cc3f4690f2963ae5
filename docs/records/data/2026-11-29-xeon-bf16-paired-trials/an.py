"""Per design, the SD (between processes) of log(side 2 / side 1) per row, and the mean ratio: an A/A of one tree."""
import json, math, statistics as st, sys
for name in sys.argv[1:]:
    R = [json.loads(l) for l in open(name)]
    print(f"{name} ({len(R)} processes)")
    for k in R[0]:
        d = [math.log(r[k][1] / r[k][0]) for r in R]
        print(f"  {k:13s} SD of log ratio {st.stdev(d):.4f}  mean ratio {math.exp(st.mean(d)):.4f}  "
              f"largest |log| {max(abs(x) for x in d):.3f}  side-1 median SD {st.stdev([math.log(r[k][0]) for r in R]):.4f}")
