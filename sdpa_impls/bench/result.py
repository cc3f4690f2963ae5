"""One measured (or skipped, failed, wrong) point as a frozen Result, the metrics derived from its samples, and
the form pytest-benchmark keeps (`extra_info`)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from .ceilings import attainable, roof_gemm, roofline_pct
from .grid import Case
from .devicetime import HOST, DeviceTiming
from .timing import Timing

SPEED_BASELINE = "torch_sdpa"  # speed-ups are reported against this one
STATUSES = ("ok", "skipped", "failed", "wrong")  # what a point's `status` may be


@dataclass(frozen=True)
class Result:
    """One point. Times in seconds, memory in bytes; `status` is "ok", "skipped", "failed" or "wrong" (STATUSES)."""

    impl: str
    case: Case
    device: str
    status: str
    reason: str = ""
    median_s: float | None = None
    iqr_s: float | None = None
    samples: tuple[float, ...] = ()
    calls_per_sample: int = 1  # each sample is the mean of this many back-to-back calls
    tflops: float | None = None
    gbps: float | None = None
    roofline_pct: float | None = None
    roofline_gemm: str | None = None  # the GEMM ceiling of its roof, e.g. gemm_flops_tf32 for fp32 on sm80+
    roofline_bound: str | None = None  # the ceiling the roof was: roofline_gemm, or copy_bytes_per_s (memory-bound)
    peak_memory_bytes: int | None = None
    max_error: float | None = None
    error_tolerance: float | None = None
    speedup_vs_torch_sdpa: float | None = None
    kernels: tuple[str, ...] = ()  # what one profiled call ran: CUDA kernels, or aten ops on CPU; longest first
    compile_s: float | None = None  # compiled implementations: the first call (compilation + one call), once
    op: str = ""  # the library's own name for what ran, where the implementation says (xformers: "cutlassF-pt")
    # Device time (bench.devicetime): `median_s` above is the eager time, a loop of calls as a user makes them. On
    # CUDA the call is also captured in a CUDA graph and its replays timed: the GPU's own time. method "cuda-graph",
    # "eager" (not capturable: `device_time_reason` says why, and the device time is the eager time) or "cpu" (one
    # time). TFLOP/s, GB/s and % of roofline come from the device time (`speed_s`).
    device_time_method: str = ""
    device_time_reason: str = ""
    device_time_s: float | None = None
    device_iqr_s: float | None = None
    device_samples: tuple[float, ...] = ()
    device_calls_per_sample: int = 1
    host_overhead_s: float | None = None  # eager − device time per call, with a graph's device time
    clocks: dict | None = None  # CUDA: SM clocks the samples saw, and the samples taken again for a low clock
    other_cpus: float | None = None  # CPUs' worth of other processes' work while the samples were taken (Linux)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["case"] = self.case.as_dict()
        d["samples"] = list(self.samples)
        d["kernels"] = list(self.kernels)
        d["device_samples"] = list(self.device_samples)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Result:
        case = {k: v for k, v in d["case"].items() if k != "id"}
        return cls(**{**d, "case": Case(**case), "samples": tuple(d.get("samples", ())),
                      "kernels": tuple(d.get("kernels", ())), "device_samples": tuple(d.get("device_samples", ()))})

    @property
    def speed_s(self) -> float | None:
        """The time speed is computed from: the device time where there is one, else the one (eager) time."""
        return self.device_time_s if self.device_time_s is not None else self.median_s

    def timed(self, timing: Timing, device: DeviceTiming | None = None) -> Result:
        """This result with the eager timing, the device timing (`devicetime.device_timing`; none: the eager time
        alone, as the pytest suite's CPU points) and what follows: TFLOP/s and GB/s (`on_roofline` adds the %)."""
        fields = derived_metrics(self.case, timing)
        if device is not None:
            dev = device.timing or timing  # EAGER and HOST: the eager time is the device time, marked so
            fields |= {"device_time_method": device.method, "device_time_reason": device.reason,
                       "device_time_s": dev.median if device.method != HOST else None,
                       "device_iqr_s": dev.iqr if device.method != HOST else None,
                       "device_samples": device.timing.samples if device.timing else (),
                       "device_calls_per_sample": dev.calls_per_sample,
                       "host_overhead_s": timing.median - dev.median if device.timing else None}
            speed = fields["device_time_s"] or timing.median
            fields |= {k: v for k, v in derived_metrics(self.case, Timing(speed, 0.0, ())).items()
                       if k in ("tflops", "gbps")}
        return replace(self, **fields)

    def on_roofline(self, ceilings: dict[str, float]) -> Result:
        """`roofline_pct` against the ceilings measured in the same run (`bench.ceilings.RunCeilings.values()`);
        unchanged when it has no time or the run lacks the ceiling its dtype needs."""
        gemm = roof_gemm(self.case.dtype, self.device.split(":")[0], ceilings)
        if self.status != "ok" or not self.speed_s or gemm is None or "copy_bytes_per_s" not in ceilings:
            return self
        pct = roofline_pct(self.case.flops(), self.case.min_bytes(), self.speed_s, gemm, ceilings)
        return replace(self, roofline_pct=pct, roofline_gemm=gemm,
                       roofline_bound=attainable(self.case.flops(), self.case.min_bytes(), gemm, ceilings)[1])

    def with_speedup(self, baseline_median_s: float | None) -> Result:
        """`speedup_vs_torch_sdpa` = the baseline's time / this time (`speed_s` of both), when both exist."""
        if self.status != "ok" or not baseline_median_s or not self.speed_s:
            return self
        return replace(self, speedup_vs_torch_sdpa=baseline_median_s / self.speed_s)

    def extra_info(self) -> dict:
        """The point as pytest-benchmark's `extra_info` holds it: every field but the samples (the benchmark's
        own stats keep those), the case flattened into its fields, and `case` as the case id."""
        d = {k: v for k, v in self.as_dict().items() if k not in ("samples", "case")}  # device_samples stay
        return d | {k: v for k, v in self.case.as_dict().items() if k != "id"} | {"case": self.case.id}


def derived_metrics(case: Case, timing: Timing) -> dict:
    """Median/IQR plus TFLOP/s and GB/s of the minimal traffic."""
    t = timing.median
    return {"median_s": t, "iqr_s": timing.iqr, "samples": timing.samples,
            "calls_per_sample": timing.calls_per_sample,
            "tflops": case.flops() / t / 1e12 if t > 0 else None,
            "gbps": case.min_bytes() / t / 1e9 if t > 0 else None}


def with_speedups(results: list[Result]) -> list[Result]:
    """Every result with `speedup_vs_torch_sdpa` against torch_sdpa's result of the same case and device."""
    base = {(r.case, r.device): r.speed_s for r in results if r.impl == SPEED_BASELINE and r.status == "ok"}
    return [r.with_speedup(base.get((r.case, r.device))) for r in results]
