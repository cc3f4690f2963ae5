"""fused's old path (softmax, 256-row tiles) against its new one (unshifted exp where bounded, 512-row inference
tiles with no key to skip) and torch's SDPA, in one process, each round in alternating order:

    python ab.py ROUNDS L E DTYPE [causal|window]      # prints one line of medians and ratios

The old path is this code with the policy's UNSHIFTED_EXP off and FUSED_ROWS_WHOLE = FUSED_ROWS (budget.CpuTiling).
`window`: the drop-in call with a 512-key window mask (its tile map remembered) against the prepared causal call."""
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
import torch  # noqa: E402

import sdpa_impls  # noqa: E402
from sdpa_impls.bench.check import CaseContext  # noqa: E402
from sdpa_impls.bench.grid import Case  # noqa: E402
from sdpa_impls.bench.measure import prepare_point  # noqa: E402
from sdpa_impls.impls._tiled.budget import CpuTiling, forced_tiling, l2_cache_bytes  # noqa: E402


class Old(CpuTiling):
    UNSHIFTED_EXP = False
    FUSED_ROWS_WHOLE = CpuTiling.FUSED_ROWS


rounds, length, e, dtype = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
kind = sys.argv[5] if len(sys.argv) > 5 else ""
threads, l2 = torch.get_num_threads(), l2_cache_bytes()
fns = {}
if kind == "window":
    causal = CaseContext(Case(lq=length, lk=length, e=e, dtype=dtype, causal=True), "cpu")
    inputs = CaseContext(Case(lq=length, lk=length, e=e, dtype=dtype, mask="window-512"), "cpu").inputs.args()
    for name, policy in (("old", Old), ("new", CpuTiling)):
        with forced_tiling(policy(threads, l2)):
            fns[f"{name} causal"] = prepare_point("fused", causal).fn

        def window(policy=policy):
            with forced_tiling(policy(threads, l2)):
                return sdpa_impls.get("fused")(**inputs)
        fns[f"{name} window"] = window
else:
    ctx = CaseContext(Case(lq=length, lk=length, e=e, dtype=dtype, causal=kind == "causal"), "cpu")
    fns["torch"] = prepare_point("torch_sdpa", ctx).fn
    for name, policy in (("old", Old), ("new", CpuTiling)):
        with forced_tiling(policy(threads, l2)):
            fns[name] = prepare_point("fused", ctx).fn  # checked against fp64 here
for fn in fns.values():
    fn()
samples = {k: [] for k in fns}
for r in range(rounds):
    for k in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
        start = time.perf_counter()
        fns[k]()
        samples[k].append(time.perf_counter() - start)
m = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
label = f"L{length} E{e} {dtype} {kind or 'fwd'}"
if kind == "window":
    print(f"{label}: ms {m['old causal']:.1f} {m['old window']:.1f} {m['new causal']:.1f} {m['new window']:.1f}  "
          f"window/causal old {m['old window'] / m['old causal']:.3f} new {m['new window'] / m['new causal']:.3f}  "
          f"new/old window {m['new window'] / m['old window']:.3f} causal {m['new causal'] / m['old causal']:.3f}")
else:
    print(f"{label}: torch {m['torch']:.2f} ms  old/torch {m['old'] / m['torch']:.3f}  "
          f"new/torch {m['new'] / m['torch']:.3f}  new/old {m['new'] / m['old']:.3f}", flush=True)
