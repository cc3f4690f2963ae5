"""How much of the machine's CPUs other work took while a point's samples were taken (Linux: `/proc/stat`).

    snapshot() -> Snapshot | None          # before the samples
    other_cpus(before) -> float | None     # since then: CPUs' worth of work that was not this process's
    contended(other, threads, cpus) -> bool
    advice(threads) -> "on a quiet machine, or with fewer threads (OMP_NUM_THREADS=1)"   # what the warnings tell
    busy_note(counts, marked) -> str       # a comparison's note: how many timed points of each side were busy

torch's threads meet at a barrier in every parallel region, so one thread descheduled for a scheduler tick (4 ms at
250 Hz) holds up the whole call: on a 2-CPU machine another busy process turns a 0.3 ms call into 4 or 8 ms, and
the samples can even agree with each other while every one is wrong. The load average read before a sweep misses
work that starts later. This reads, for each point, the CPU time the whole machine spent busy (user, system,
interrupts, and the time a hypervisor gave this VM's CPUs to others: steal) less this process's own, over the
point's wall time. The clocks tick at 100 Hz, so a point of 0.2 s reads within about 0.1 CPU.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

try:
    import resource
except ImportError:  # not a POSIX system: no process CPU time by getrusage, and no /proc/stat to set it against
    resource = None  # type: ignore[assignment]

# other work beyond the CPUs torch's threads leave free, in CPUs, above which a point is marked: background daemons
# read about 0.01-0.05 on a quiet VM
CONTENDED_CPUS = 0.25
_TICK_S = 1.0 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)


@dataclass(frozen=True)
class Snapshot:
    wall_s: float
    busy_s: float  # the whole machine's busy CPU time since boot
    own_s: float  # this process's CPU time, every thread


def _busy_s() -> float | None:
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 8:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, *rest = (int(x) for x in fields[1:])
    steal = rest[0] if rest else 0
    return (user + nice + system + irq + softirq + steal) * _TICK_S


def snapshot() -> Snapshot | None:
    """Now, or None where the system does not say (not Linux)."""
    busy = _busy_s()
    if busy is None or resource is None:
        return None
    own = resource.getrusage(resource.RUSAGE_SELF)
    return Snapshot(time.monotonic(), busy, own.ru_utime + own.ru_stime)


def other_cpus(before: Snapshot | None) -> float | None:
    """The CPUs' worth of work that was not this process's since `before` (0 on a quiet machine), rounded to 0.01;
    None without a `before` or where the system does not say."""
    after = snapshot()
    if before is None or after is None or after.wall_s <= before.wall_s:
        return None
    others = (after.busy_s - before.busy_s) - (after.own_s - before.own_s)
    return round(max(0.0, others / (after.wall_s - before.wall_s)), 2)


def contended(other: float | None, threads: int, cpus: int | None) -> bool:
    """Whether other work of `other` CPUs competed with `threads` torch threads on a machine of `cpus` CPUs."""
    if other is None:
        return False
    spare = max(0, (cpus or threads) - threads)
    return other > spare + CONTENDED_CPUS


def advice(threads: int) -> str:
    """Where to measure again, as every busy warning ends: fewer threads only where torch uses more than one."""
    return "on a quiet machine" + (", or with fewer threads (OMP_NUM_THREADS=1)" if threads > 1 else "")


def threads_text(threads: int) -> str:
    """'1 thread', '8 threads'."""
    return f"{threads} thread{'s' if threads != 1 else ''}"


def busy_note(counts: list[tuple[str, int, int]], marked: str) -> str:
    """The note of a comparison (`compare`, `gate`) where (side, busy, timed) `counts` hold a busy point; "" where
    none was. `marked`: where a reader finds which points, e.g. "marked `busy` in each sweep's report"."""
    if not any(busy for _, busy, _ in counts):
        return ""
    return ("busy CPUs: " + ", ".join(f"{side} {busy} of {timed}" for side, busy, timed in counts) + " timed points "
            f"were measured while other processes kept busy CPUs that torch's threads needed ({marked}): their times "
            "are slowed and scattered, so read a time verdict on them with care.")
