import json, sys, numpy as np
runs = [json.loads(l) for l in open(sys.argv[1])]
for name in runs[0]:
    fx = np.log([r[name]["fixed"] for r in runs]); fr = np.log([r[name]["fresh"] for r in runs])
    # between processes: SD of each process's median over blocks (fixed inputs)
    bp_fixed = np.std(np.median(fx, axis=1), ddof=1); bp_fresh = np.std(np.median(fr, axis=1), ddof=1)
    # within a process: SD over blocks, median over processes
    wb_fixed = np.median(np.std(fx, axis=1, ddof=1)); wb_fresh = np.median(np.std(fr, axis=1, ddof=1))
    print(f"{name:11s} between-proc fixed {bp_fixed:.4f} fresh {bp_fresh:.4f} | within-proc block SD fixed {wb_fixed:.4f} fresh {wb_fresh:.4f}")
    print("   per-proc fixed medians", np.round(np.exp(np.median(fx, axis=1)), 3))
    print("   per-proc fresh medians", np.round(np.exp(np.median(fr, axis=1)), 3))
print("temporal: corr of adjacent fixed/fresh blocks; SD of (fresh-fixed) per block / sqrt2")
for name in runs[0]:
    fx = np.log([r[name]["fixed"] for r in runs]); fr = np.log([r[name]["fresh"] for r in runs])
    fxc = fx - fx.mean(axis=1, keepdims=True); frc = fr - fr.mean(axis=1, keepdims=True)
    c = np.corrcoef(fxc.ravel(), frc.ravel())[0, 1]
    # lag-1 within fixed series
    l1 = np.corrcoef(fxc[:, :-1].ravel(), fxc[:, 1:].ravel())[0, 1]
    print(f"{name:11s} corr(fixed_b, fresh_b) {c:.2f}  lag1 corr fixed {l1:.2f}  sd(diff)/sqrt2 {np.std(fr-fx, ddof=1)/np.sqrt(2):.4f}")
