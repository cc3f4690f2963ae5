"""Measurements in one normalized shape for the gate and `compare`: `Point` rows and the machine they came from.

Public API (independent of the pytest-benchmark file format):

    Point(impl, case_id, median_s, samples, peak_memory_bytes, max_error, error_tolerance, status, case, name)
    load_points(path) -> (machine: dict, points: list[Point])     # a pytest-benchmark JSON file
    load_points(path, others=[]) -> ...                           # ... that may hold other benchmarks too
    points_from_results(results) -> list[Point]                   # the CLI's own `measure.Result` rows

`machine` is `sdpa_impls.bench.machine.machine_info()` (pytest-benchmark files carry it as
`machine_info["sdpa_bench"]`). Feed two point lists to `sdpa_impls.gate.compare.compare_points`.
Every unusable file raises `GateInputError` with one message that names the file.
"""
from __future__ import annotations

import json
import math
import reprlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..bench.result import STATUSES
from ..errors import GateInputError

SECTION = "sdpa_bench"  # what the suite's pytest plug-in adds to the file of the session (sdpa_bench_pytest)
# what a ratio rule's `when` may test: the case's fields, and the device it ran on (cpu, cuda)
CASE_FIELDS = ("lq", "lk", "e", "ev", "dtype", "causal", "mode", "mask", "batch", "heads_q", "heads_kv", "device")



@dataclass(frozen=True)
class Point:
    """One implementation on one case: time (seconds), raw samples, peak memory (bytes) and error vs fp64."""

    impl: str
    case_id: str
    median_s: float | None
    samples: tuple[float, ...] = ()
    peak_memory_bytes: int | None = None
    max_error: float | None = None
    error_tolerance: float | None = None
    status: str = "ok"
    case: dict = field(default_factory=dict, compare=False)  # lq, lk, e, dtype, ... for rule conditions
    name: str = ""  # the benchmark's own name, e.g. test_sdpa[naive-L128-E64-fp32-fwd]
    ceiling_fraction: float | None = None  # achieved FLOP/s / the same run's GEMM ceiling of its dtype
    host_overhead_s: float | None = None  # CUDA: eager − device time per call (bench.devicetime), else None
    kernels: tuple[str, ...] = field(default=(), compare=False)  # one profiled call's kernels (aten ops on CPU)
    # CPU: the speed probe's durations around the samples (bench.probe): one before the first sample and one after
    # each, so len(samples) + 1 of them; () when not recorded
    probe_s: tuple[float, ...] = field(default=(), compare=False)
    probe_work: str = field(default="", compare=False)  # what the probe timed (bench.probe.WORK)
    preset: str = field(default="", compare=False)  # the suite's preset that ran it ("" where not recorded)
    reason: str = field(default="", compare=False)  # why a point that failed or answered wrong did (its error)
    other_cpus: float | None = field(default=None, compare=False)  # other processes' CPUs while it was timed

    @property
    def key(self) -> tuple[str, str]:
        return (self.impl, self.case_id)

    @property
    def label(self) -> str:
        return f"{self.impl}[{self.case_id}]"


def _number(value: object, what: str, where: str) -> float | None:
    """A finite number or None; GateInputError otherwise (an infinite time read as "inf s ×inf pass")."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise GateInputError(f"{where}: {what} should be a finite number, got {value!r}")
    return float(value)


def _not_negative(value: object, what: str, where: str) -> float | None:
    """_number of a time, a memory size, an error or a tolerance, which the suite never writes below 0: a negative
    one is a corrupt file (exit 2), not a speed-up or a wrong result."""
    number = _number(value, what, where)
    if number is not None and number < 0:
        raise GateInputError(f"{where}: {what} should be >= 0, got {value!r}")
    return number


def _text(value: object, what: str, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise GateInputError(f"{where}: {what} should be a name, got {reprlib.repr(value)}")
    return value


def _benchmark_name(bench: dict, index: int) -> str:
    return str(bench.get("fullname") or bench.get("name") or f"benchmarks[{index}]")


def _is_other(bench: object) -> bool:
    """A benchmark of another test in the same session: no sense of sdpa-bench's suite in its name, its parameter
    (`sdpa_point`) or its extra_info (both "impl" and "case": a user's benchmark may record an "impl" of its own)."""
    if not isinstance(bench, dict):
        return False
    extra, params = bench.get("extra_info"), bench.get("params")
    ours = (isinstance(extra, dict) and "impl" in extra and "case" in extra) or (
        isinstance(params, dict) and "sdpa_point" in params)
    return not ours and "test_sdpa[" not in _benchmark_name(bench, 0)


def _is_unfinished(bench: object) -> bool:
    """A benchmark of the suite's that a stopped session saved before the suite recorded what it measured."""
    return isinstance(bench, dict) and not bench.get("extra_info") and "test_sdpa[" in _benchmark_name(bench, 0)


def _point_from_benchmark(bench: object, index: int, source: str) -> Point:
    if not isinstance(bench, dict):
        raise GateInputError(f"{source}: benchmarks[{index}] is not an object")
    name = _benchmark_name(bench, index)
    where = f"{source}: benchmark {name}"
    extra = bench.get("extra_info") or {}
    stats = bench.get("stats")
    if not isinstance(extra, dict) or not isinstance(stats, dict):
        raise GateInputError(f"{where} has no stats/extra_info objects (is this a pytest-benchmark JSON file?)")
    impl, case_id = extra.get("impl"), extra.get("case") or bench.get("group")
    if not impl or not case_id:
        raise GateInputError(f"{where} has no extra_info 'impl'/'case' (not written by the sdpa-bench suite?)")
    impl, case_id = _text(impl, "extra_info.impl", where), _text(case_id, "extra_info.case", where)
    data = stats.get("data")
    if data is None:  # saved without --benchmark-save-data: no raw samples, the time rule says so and uses its factor
        data = []
    if not isinstance(data, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                             and math.isfinite(v) and v >= 0 for v in data):
        raise GateInputError(f"{where}: stats.data should be a list of finite times >= 0, got {reprlib.repr(data)}")
    memory = _not_negative(extra.get("peak_memory_bytes"), "extra_info.peak_memory_bytes", where)
    preset = extra.get("preset")
    return Point(
        impl=impl, case_id=case_id,
        median_s=_not_negative(stats.get("median"), "stats.median", where),
        samples=tuple(float(v) for v in data),
        peak_memory_bytes=None if memory is None else int(memory),
        max_error=_not_negative(extra.get("max_error"), "extra_info.max_error", where),
        error_tolerance=_not_negative(extra.get("error_tolerance"), "extra_info.error_tolerance", where),
        status=_status(extra.get("status", "ok"), where),
        case={k: extra[k] for k in CASE_FIELDS if k in extra},
        name=name,
        ceiling_fraction=_ceiling_fraction(extra, where),
        host_overhead_s=_number(extra.get("host_overhead_s"), "extra_info.host_overhead_s", where),
        kernels=_kernels(extra.get("kernels"), where),
        probe_s=_probes(extra.get("probe_s"), len(data)),
        probe_work=str(extra.get("probe") or ""),
        preset=preset if isinstance(preset, str) else "",
        other_cpus=_number(extra.get("other_cpus"), "extra_info.other_cpus", where),
    )


def _status(value: object, where: str) -> str:
    if value not in STATUSES:  # an unknown one would read as a wrong result (exit 1), not as a corrupt file
        raise GateInputError(f"{where}: extra_info.status should be one of {', '.join(STATUSES)}, got {value!r}")
    return str(value)


def _kernels(value: object, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(k, str) for k in value):
        raise GateInputError(f"{where}: extra_info.kernels should be a list of kernel names, got {reprlib.repr(value)}")
    return tuple(value)


def _ceiling_fraction(extra: dict, where: str) -> float | None:
    """ceiling_fraction of a benchmark's extra_info, once its tflops, roofline_gemm and ceilings have the suite's
    types."""
    ceilings, gemm = extra.get("ceilings"), extra.get("roofline_gemm")
    if ceilings is not None and not isinstance(ceilings, dict):
        raise GateInputError(f"{where}: extra_info.ceilings should be an object, got {reprlib.repr(ceilings)}")
    for key, value in (ceilings or {}).items():
        _number(value, f"extra_info.ceilings[{key!r}]", where)
    if gemm is not None and not isinstance(gemm, str):
        raise GateInputError(f"{where}: extra_info.roofline_gemm should be a ceiling's name, got {reprlib.repr(gemm)}")
    return ceiling_fraction(_number(extra.get("tflops"), "extra_info.tflops", where), gemm, ceilings)


def _probes(value: object, samples: int) -> tuple[float, ...]:
    """The probe durations of a point when they are what bench.probe writes (samples + 1 positive numbers), else ()."""
    if not isinstance(value, list) or len(value) != samples + 1 or not samples:
        return ()
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 for v in value):
        return ()
    return tuple(float(v) for v in value)


def ceiling_fraction(tflops: object, gemm: object, ceilings: object) -> float | None:
    """Achieved FLOP/s as a fraction of the run's own GEMM ceiling `ceilings[gemm]`; None when not recorded."""
    if not isinstance(ceilings, dict) or not isinstance(tflops, (int, float)) or not ceilings.get(gemm):
        return None
    return float(tflops) * 1e12 / float(ceilings[gemm])


def load_points(path: str | Path, others: list[str] | None = None, session: bool = False) -> tuple[dict, list[Point]]:
    """(machine, points) of a pytest-benchmark JSON file written by the sdpa-bench suite.

    With a list `others`, the file may also hold the benchmarks of other tests run in the same session: they are
    left out, and their names appended to it. Raises GateInputError when the file is missing, unreadable, not JSON
    (corrupt or truncated), not a pytest-benchmark file, was saved by a session stopped inside one of the suite's
    benchmarks, holds the same implementation × case twice, or (without `others`) holds a benchmark the suite did
    not write. With `session`, also what the suite's plug-in recorded of the session (sdpa_bench_pytest, in files
    of sdpa-bench since it did): a session stopped before its end (Ctrl-C, -x) is GateInputError too, and its
    points that failed or answered wrong, which saved no benchmark, are points with that status.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise GateInputError(f"{path}: no such file") from None
    except IsADirectoryError:
        hint = ("; it holds a `run`'s results: compare two of those with `sdpa-bench compare DIR_A DIR_B`"
                if (path / "results.json").is_file() else "")
        raise GateInputError(f"{path}: a folder, not a pytest-benchmark JSON file{hint}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise GateInputError(f"{path}: cannot be read ({exc})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        hint = "the file is empty" if not text.strip() else f"{exc.msg} at line {exc.lineno} column {exc.colno}"
        raise GateInputError(f"{path}: not valid JSON, truncated or corrupt ({hint})") from None
    except RecursionError:
        raise GateInputError(f"{path}: not a pytest-benchmark JSON file (nested deeper than Python reads)") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        hint = ("; it is a `run`'s results: compare two of those with `sdpa-bench compare DIR_A DIR_B`"
                if isinstance(doc, dict) and doc.get("format") == "sdpa-bench-results" else "")
        raise GateInputError(f"{path}: not a pytest-benchmark JSON file (no 'benchmarks' list){hint}")
    info = doc.get("machine_info") if isinstance(doc.get("machine_info"), dict) else {}
    suite_info = info.get("sdpa_bench")  # the suite's own fields, which tell machines apart
    if suite_info is not None and not isinstance(suite_info, dict):
        raise GateInputError(f"{path}: machine_info.sdpa_bench should be an object, got {reprlib.repr(suite_info)}")
    machine = dict(suite_info or {})
    if not machine and isinstance(info.get("cpu"), dict):  # a plain pytest-benchmark file: what it knows
        machine = {"cpu": info["cpu"].get("brand_raw")}
    benchmarks = list(enumerate(doc["benchmarks"]))
    stopped = next((_benchmark_name(b, i) for i, b in benchmarks if _is_unfinished(b)), None)
    if stopped is not None:  # the points after it are missing too: no verdict, rather than "missing" failures
        raise GateInputError(f"{path}: the pytest session that wrote it was interrupted, inside {stopped} (saved with "
                             "no extra_info), so the benchmarks after it are missing; run the suite to the end")
    if others is not None:
        others += [_benchmark_name(b, i) for i, b in benchmarks if _is_other(b)]
        benchmarks = [(i, b) for i, b in benchmarks if not _is_other(b)]
    points = [_point_from_benchmark(b, i, str(path)) for i, b in benchmarks]
    if session:  # a point that failed after pytest-benchmark kept its timing is the failure, not the time
        failures = _session_failures(doc.get(SECTION), path)
        points = [p for p in points if p.key not in {f.key for f in failures}] + failures
    seen: dict[tuple[str, str], str] = {}
    for p in points:
        if p.key in seen:
            raise GateInputError(f"{path}: {p.label} appears twice ({seen[p.key]} and {p.name}); "
                                 "save one run per file")
        seen[p.key] = p.name
    return machine, points


def _session_failures(section: object, path: Path) -> list[Point]:
    """The points the session's record (sdpa_bench_pytest.SECTION) names as failed or wrong; GateInputError where
    it says the session stopped early, or is not the record's shape. A file without one (older, or written
    otherwise) has none."""
    if section is None:
        return []
    failed = section.get("failed") if isinstance(section, dict) else None
    if not isinstance(failed, list) or not all(isinstance(f, dict) and isinstance(f.get("impl"), str) and
                                               isinstance(f.get("case"), str) and f.get("status") in ("wrong", "failed")
                                               for f in failed):
        raise GateInputError(f"{path}: {SECTION} should be an object with a list 'failed' of points (impl, case, "
                             f"status 'wrong' or 'failed'), got {reprlib.repr(section)}")
    if section.get("stopped"):
        first = f"; {failed[0]['impl']}[{failed[0]['case']}] failed first" if failed else ""
        raise GateInputError(f"{path}: the pytest session that wrote it stopped before its end "
                             f"({reprlib.repr(section['stopped'])[1:-1]}{first}), so the benchmarks after it are "
                             "missing; run the suite to the end")
    where = f"{path}: {SECTION}.failed"
    return [Point(impl=f["impl"], case_id=f["case"], median_s=None, status=f["status"],
                  max_error=_not_negative(f.get("max_error"), "max_error", where),
                  error_tolerance=_not_negative(f.get("error_tolerance"), "error_tolerance", where),
                  name=f"test_sdpa[{f['impl']}-{f['case']}]", reason=str(f.get("message") or "")) for f in failed]


def points_from_results(results: Iterable, ceilings: dict | None = None) -> list[Point]:
    """Points from `sdpa_impls.bench.result.Result` rows (or their `as_dict()` form, e.g. a results.json row);
    `ceilings`: the run's own (a sweep's `meta["ceilings"]`), for ceiling rules."""
    out = []
    for r in results:
        d = r if isinstance(r, dict) else r.as_dict()
        case = d["case"] | ({"device": d["device"]} if d.get("device") else {})
        out.append(Point(
            impl=d["impl"], case_id=case["id"], median_s=d.get("median_s"), samples=tuple(d.get("samples") or ()),
            peak_memory_bytes=d.get("peak_memory_bytes"), max_error=d.get("max_error"),
            error_tolerance=d.get("error_tolerance"), status=d.get("status", "ok"),
            case={k: case[k] for k in CASE_FIELDS if k in case}, name=f"{d['impl']}[{case['id']}]",
            ceiling_fraction=ceiling_fraction(d.get("tflops"), d.get("roofline_gemm"), ceilings),
            host_overhead_s=d.get("host_overhead_s"), reason=d.get("reason") or ""))
    return out
