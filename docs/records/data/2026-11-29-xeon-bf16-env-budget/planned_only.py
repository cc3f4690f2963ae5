"""The draws of tools/env_budget_replay.py (seed 0) judged on their 4 planned rounds alone: which fail."""
import sys, random, dataclasses
ROOT = "/work/main"  # the repository
sys.path.insert(0, ROOT + "/tools"); sys.path.insert(0, ROOT)
import env_budget_replay as R
from sdpa_impls.gate.config import load_config
sides = R.rounds(R.Path(sys.argv[1]))
config = dataclasses.replace(load_config(start=R.ROOT), time_reference="", speed_probe=False)
rng = random.Random(0)
bad = []
for t in range(200):
    later = list(range(1, len(sides["base"]))); rng.shuffle(later)
    order = [0, *later]
    r = R.judge([sides["base"][i] for i in order[:4]], [sides["head"][i] for i in order[:4]], config)
    if r.exit_code == 1:
        bad.append(t)
print("planned rounds alone failed in draws", bad)
