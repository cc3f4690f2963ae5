"""The machine's speed at the moment of each sample of a CPU benchmark: a short fixed piece of work, timed with the
benchmark's own clock right before its first sample and after each one.

    probe = SpeedProbe(timer)          # a pytest-benchmark `teardown`: runs after the warm-up round and every round
    benchmark.pedantic(fn, iterations=n, rounds=r, warmup_rounds=1, teardown=probe)
    probe.around(r)  -> r + 1 durations: before sample 1, then after each sample

On a shared VM the CPU time of the same call moves between two levels about 1.7× apart for seconds at a time (a
neighbour on the same physical core), often within one benchmark, so a run's median lands on either level. Every
kernel slows by about the same factor, and a probe measured next to a sample slows with it: dividing each sample by
its probes (continuous.verdict) removes most of that movement. The work is a small fp32 GEMM, warmed and then timed
32 times in a row, the same in every sdpa-bench: about 0.45 ms on one core of the AMX Xeon, after every sample.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

SHAPE = (64, 64, 256)  # (m, k, n) of the probe's GEMM: 2 MFLOP, in L1/L2 of any CPU
# Untimed GEMMs first: after a 64 MiB write, two timed GEMMs took 1.67-1.93x their time after nothing with none
# before them and 1.00-1.26x after three (AMX Xeon; the higher with another process on the other core). Without them,
# the probe after a long sample timed the cache misses the sample left behind, not the machine's speed.
WARM = 3
# Then CALLS timed GEMMs in one stretch: a stretch of 2 (0.03 ms) jittered more than a sample of 20-250 ms does, and
# the L 1024 benchmarks of the ci preset spread more between processes scaled by it than as measured. 32 (about
# 0.4 ms) averages the jitter out: 20 processes of the ci preset, each sample scaled by each probe in turn, spread
# (SD of the log, median over rows) 0.043 as the suite probed until then, 0.045 warmed first, 0.033 warmed and 32 long;
# on the L 1024 rows 0.204, 0.076 and 0.056, against 0.049 unscaled (docs/records/2026-11-28-xeon-amx-probe.md).
CALLS = 32
WORK = f"{CALLS}x fp32 mm {SHAPE[0]}x{SHAPE[1]}x{SHAPE[2]} after {WARM} untimed"  # recorded with the durations: sides compare only alike


class SpeedProbe:
    """Runs WARM GEMMs of SHAPE, then times CALLS more with `timer`, each time it is called (its arguments are
    ignored)."""

    def __init__(self, timer: Callable[[], float]) -> None:
        m, k, n = SHAPE
        self.timer = timer
        self.a = torch.full((m, k), 0.5)
        self.b = torch.full((k, n), 0.25)
        self.out = torch.empty(m, n)
        torch.mm(self.a, self.b, out=self.out)  # a first call outside any record
        self.durations: list[float] = []

    def __call__(self, *args: object, **kwargs: object) -> None:
        for _ in range(WARM):  # untimed: the caches a long sample left cold are warm again before the clock starts
            torch.mm(self.a, self.b, out=self.out)
        start = self.timer()
        for _ in range(CALLS):
            torch.mm(self.a, self.b, out=self.out)
        self.durations.append(self.timer() - start)

    def around(self, rounds: int) -> list[float]:
        """The probes around `rounds` samples: the one after the warm-up round (before sample 1), then the one after
        each sample; pytest-benchmark's extra call after the rounds (when a sample holds several calls) is not one."""
        return self.durations[:rounds + 1]
