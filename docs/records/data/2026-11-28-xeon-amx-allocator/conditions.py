"""A/A comparison whose rounds cycle through launch conditions (both sides of a round get the same one):
default, pinned to CPU 1, glibc keeping freed memory, both.  python conditions.py ROUNDS SEED KEEPDIR"""
import sys, itertools
from sdpa_impls.continuous import sides as S
CONDS = ["default", "pin", "malloc", "pin+malloc"]
orig = S.run_round
calls = itertools.count()
log = open(sys.argv[3] + ".conds", "w")
def patched(side, out, pytest_args, cpu, timeout, padding="", prefix=(), repeat=False):
    i = next(calls); rnd = i // 2
    cond = "first" if rnd == 0 else CONDS[(rnd - 1) % len(CONDS)]
    log.write(f"{out.name} {cond}\n"); log.flush()
    env_orig = S.side_env
    def env(*a, **k):
        e = env_orig(*a, **k)
        if "malloc" in cond:
            e["MALLOC_MMAP_MAX_"] = "0"; e["MALLOC_TRIM_THRESHOLD_"] = str(64 << 30); e["MALLOC_TOP_PAD_"] = str(256 << 20)
        return e
    S.side_env = env
    try:
        return orig(side, out, pytest_args, cpu, timeout, padding, ("taskset", "-c", "1") if "pin" in cond else prefix, repeat)
    finally:
        S.side_env = env_orig
S.run_round = patched
from sdpa_impls.cli import main as climain_main
sys.exit(climain_main(["continuous", "HEAD", "HEAD", "--rounds", sys.argv[1], "--adaptive-budget", "0",
                       "--seed", sys.argv[2], "--keep-runs", sys.argv[3], "--json", sys.argv[3] + ".json"]))
