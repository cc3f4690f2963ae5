"""results.csv: one row per (case, implementation), the case's fields and every metric; samples stay in results.json."""
from __future__ import annotations

import csv
import io
from pathlib import Path

from ..bench.result import Result, with_speedups
from .files import write_whole

CSV_FILE = "results.csv"
CSV_CASE_FIELDS = ("lq", "lk", "e", "ev", "dtype", "causal", "mode", "mask", "batch", "heads_q", "heads_kv")
CSV_RESULT_FIELDS = ("median_s", "iqr_s", "tflops", "gbps", "roofline_pct", "roofline_gemm", "roofline_bound",
                     "peak_memory_bytes", "max_error", "error_tolerance", "speedup_vs_torch_sdpa", "compile_s",
                     "device_time_method", "device_time_s", "device_iqr_s", "host_overhead_s", "device_time_reason",
                     "other_cpus")


def write_csv(path: Path, results: list[Result]) -> Path:
    """One row per (case, implementation); samples stay in results.json. Written whole or not at all."""
    text = io.StringIO()
    w = csv.writer(text)
    w.writerow(["case_id", "impl", "device", "status", *CSV_CASE_FIELDS, *CSV_RESULT_FIELDS, "n_samples",
                "reason", "kernels"])
    for r in with_speedups(results):
        w.writerow([r.case.id, r.impl, r.device, r.status, *(getattr(r.case, k) for k in CSV_CASE_FIELDS),
                    *("" if getattr(r, k) is None else getattr(r, k) for k in CSV_RESULT_FIELDS),
                    len(r.samples), r.reason, ";".join(r.kernels)])
    return write_whole(path, text.getvalue())
