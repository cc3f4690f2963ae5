"""glibc's allocator thresholds, fixed for a measuring process.

glibc gives a block its own mapping when it is at least the mmap threshold, and returns freed memory at the top of
the heap above the trim threshold. Left automatic, the mmap threshold starts at 128 KiB and rises (up to 32 MiB, the
trim threshold to twice it) only once such a block is freed. Whether a call's temporaries of a few hundred KiB are
faulted in afresh on every call therefore depends on the order of the process's first allocations, and one process
measures the same call 1x and the next 1.5x (`naive` at L 128: records/2026-11-28-xeon-amx-allocator).

`fix()` sets both thresholds where a long-running process ends up (STEADY), once per process, before anything is
timed: `prepare_point` calls it, so pytest-benchmark, asv and the command line measure alike. The comparison
commands also set the same values through the environment of every process they start (continuous.sides), which
covers a revision of the code from before this module. Blocks of 32 MiB and more still get their own mapping, as
in any process. A process whose environment sets any of glibc's MALLOC_ variables or GLIBC_TUNABLES keeps its own
settings; elsewhere than glibc, nothing is done.
"""
from __future__ import annotations

import ctypes
import functools
import os
import platform

# mallopt's parameters (glibc's malloc.h) and their values here
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
STEADY = {M_MMAP_THRESHOLD: 32 << 20, M_TRIM_THRESHOLD: 64 << 20}
ENV = {"MALLOC_MMAP_THRESHOLD_": str(STEADY[M_MMAP_THRESHOLD]),  # the same, as glibc's environment variables
       "MALLOC_TRIM_THRESHOLD_": str(STEADY[M_TRIM_THRESHOLD])}


def caller_chose(environ: dict[str, str] | os._Environ = os.environ) -> bool:
    """Whether the environment already sets glibc's allocator (then it is left as it is)."""
    return any(k.startswith("MALLOC_") or k == "GLIBC_TUNABLES" for k in environ)


@functools.cache
def fix() -> bool:
    """Set the thresholds of STEADY in this process, once; whether they are set (False: not glibc, or the caller's
    environment chose its own)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc" or caller_chose():
        return False
    try:
        libc = ctypes.CDLL(None)
        return all(libc.mallopt(param, value) == 1 for param, value in STEADY.items())
    except (OSError, AttributeError):
        return False
