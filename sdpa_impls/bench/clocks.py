"""The GPU's SM clock through NVML, and samples taken again when the clock had fallen (a throttled GPU).

A GPU that throttles (power, heat) runs the same kernel slower for as long as it does, and a sample taken then
says nothing about the code. Each sample reads the SM clock before and after it; one taken below `THROTTLE_FLOOR`
of the card's maximum SM clock is discarded, the GPU gets `RETRY_SLEEP_S` to recover, and the sample is taken
again, at most `MAX_RETRIES` times (then the last one is kept and counted as throttled). The card's settings are
left as they are: nothing here locks a clock.
"""
from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

THROTTLE_FLOOR = 0.75  # a sample below 75 % of the maximum SM clock is taken again (nvbench's rule)
MAX_RETRIES = 3        # then it is kept, and counted as throttled: a sweep never stalls on a hot card
RETRY_SLEEP_S = 0.05   # idle time before taking a discarded sample again


class SMClock:
    """One CUDA device's SM clock in MHz, read through NVML (`nvidia-ml-py`, which torch also uses)."""

    def __init__(self, read: Callable[[], float], max_mhz: float) -> None:
        self.read, self.max_mhz = read, max_mhz

    @classmethod
    def open(cls, device: torch.device | str) -> tuple[SMClock | None, str]:
        """The clock of `device`, found by its UUID, or None and why (no NVML, a device NVML cannot see)."""
        try:
            import pynvml
        except ImportError:
            return None, "no SM clock: nvidia-ml-py is not installed (pip install nvidia-ml-py)"
        try:
            pynvml.nvmlInit()
            uuid = str(torch.cuda.get_device_properties(torch.device(device)).uuid)
            handle = next(h for h in map(pynvml.nvmlDeviceGetHandleByIndex, range(pynvml.nvmlDeviceGetCount()))
                          if _text(pynvml.nvmlDeviceGetUUID(h)).removeprefix("GPU-") == uuid.removeprefix("GPU-"))
            max_mhz = float(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM))
            return cls(lambda: float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)), max_mhz), ""
        except StopIteration:
            return None, f"no SM clock: NVML does not list {device}"
        except Exception as exc:  # pynvml.NVMLError and friends: a reason, never a failed point
            return None, f"no SM clock: NVML: {type(exc).__name__}: {exc}"


@functools.lru_cache(maxsize=None)
def sm_clock(device: str) -> tuple[SMClock | None, str]:
    """`SMClock.open`, once per device and process; (None, reason) off CUDA."""
    if torch.device(device).type != "cuda":
        return None, "no SM clock on the CPU"
    return SMClock.open(device)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass
class ClockLog:
    """The SM clocks the kept samples saw (the lower of the readings before and after each), how many samples were
    discarded for a low clock, and how many were kept throttled after `MAX_RETRIES`."""

    max_mhz: float | None = None
    seen_mhz: list[float] = field(default_factory=list)
    discarded: int = 0
    kept_throttled: int = 0

    def summary(self) -> dict:
        """min / median / max MHz of the kept samples, the card's maximum and the counts: what a Result keeps."""
        seen = self.seen_mhz
        return {"sm_clock_mhz": [min(seen), statistics.median(seen), max(seen)] if seen else None,
                "sm_clock_max_mhz": self.max_mhz, "clock_discarded": self.discarded,
                "clock_kept_throttled": self.kept_throttled}


def steady_sample(take: Callable[[], float], clock: SMClock | None, log: ClockLog, *,
                  floor: float = THROTTLE_FLOOR, retries: int = MAX_RETRIES,
                  sleep: Callable[[float], None] = time.sleep) -> float:
    """One sample from `take`, taken again (at most `retries` times) while the clock read around it was below
    `floor` × the maximum. Without a clock it is one plain sample."""
    if clock is None:
        return take()
    log.max_mhz = clock.max_mhz
    for attempt in range(retries + 1):
        before = clock.read()
        sample = take()
        mhz = min(before, clock.read())
        if mhz >= floor * clock.max_mhz:
            break
        if attempt == retries:
            log.kept_throttled += 1
            break
        log.discarded += 1
        sleep(RETRY_SLEEP_S)
    log.seen_mhz.append(mhz)
    return sample
