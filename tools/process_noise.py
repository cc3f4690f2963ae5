"""Where a process's time goes, and how it drifts: the question behind undecided rows of `continuous` and UNKNOWN
steps of `bisect` on a noisy CPU.

    python tools/process_noise.py [--impl naive --impl torch_sdpa] [--lq 1024] [--processes 6] [--blocks 6]
                                  [--keep-freed-memory]

Starts `--processes` processes per implementation, alternating, each one thread (as `continuous` runs its sides).
Each process times `--blocks` blocks of 5 calls on fresh inputs with the CPU time of the process (the suite's timer
on CPU) and prints every block's median, the user and system time per call and the minor page faults per call.
`--keep-freed-memory` runs the processes with glibc's allocator told never to return memory to the system
(MALLOC_MMAP_MAX_=0, MALLOC_TRIM_THRESHOLD_ large), so a call that allocates large temporaries no longer pays page
faults: the difference between the two runs is what page faults add to the time and to its spread.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

CHILD = r"""
import resource, statistics, sys, time
import torch
torch.set_num_threads(1)
import sdpa_impls
from sdpa_impls.bench.grid import Case
from sdpa_impls.bench.inputs import make_inputs
impl, lq, blocks = sdpa_impls.get(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
kept, medians, users, systems, faults = [], [], [], [], []
for b in range(blocks):
    inp = make_inputs(Case(lq=lq, lk=lq, e=64), "cpu", seed=b)
    kept.append(inp)
    call = lambda: impl(inp.query, inp.key, inp.value, attn_mask=inp.attn_mask, is_causal=inp.is_causal)
    call()
    times = []
    for _ in range(5):
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.process_time()
        call()
        t1, r1 = time.process_time(), resource.getrusage(resource.RUSAGE_SELF)
        times.append(t1 - t0)
        users.append(r1.ru_utime - r0.ru_utime)
        systems.append(r1.ru_stime - r0.ru_stime)
        faults.append(r1.ru_minflt - r0.ru_minflt)
    medians.append(statistics.median(times) * 1e3)
print(" ".join(f"{m:.1f}" for m in medians), f"| median {statistics.median(medians):.1f} ms, user "
      f"{statistics.median(users) * 1e3:.1f} ms, system {statistics.median(systems) * 1e3:.1f} ms, "
      f"{statistics.median(faults):.0f} page faults per call")
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", action="append", default=None)
    parser.add_argument("--lq", type=int, default=1024)
    parser.add_argument("--processes", type=int, default=6)
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--keep-freed-memory", action="store_true")
    args = parser.parse_args()
    impls = args.impl or ["naive", "torch_sdpa"]
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    if args.keep_freed_memory:
        env |= {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 36)}
    medians: dict[str, list[float]] = {name: [] for name in impls}
    for i in range(args.processes):
        for name in impls:
            done = subprocess.run([sys.executable, "-c", CHILD, name, str(args.lq), str(args.blocks)], env=env,
                                  capture_output=True, text=True, check=True)
            line = done.stdout.strip()
            print(f"{name:>12} process {i + 1}: {line}", flush=True)
            medians[name].append(float(line.split("| median ")[1].split(" ms")[0]))
    for name, values in medians.items():
        print(f"{name}: process medians {min(values):.1f}-{max(values):.1f} ms, spread (max/min) "
              f"{max(values) / min(values):.2f}, SD {statistics.stdev(values) / statistics.mean(values):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
