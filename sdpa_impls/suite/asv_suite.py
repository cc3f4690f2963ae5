"""asv benchmarks: every registered implementation × every case of the preset, one class per mode, measured in one
process per mode and reported by thin parametrized `track_` benchmarks (see docs/explanation/asv-design.md).

A project's asv suite is this module's classes: `from sdpa_impls.suite.asv_suite import Forward, Backward,
ForwardBackward` in a file of its benchmark folder. sdpa-bench's own (benchmarks/bench_sdpa.py) reads this file from
its tree, so every commit of its history is measured by today's suite; hence the fallbacks below for the modules of
older commits.

Each class's `setup_cache` measures every (implementation, case) of its mode with the sequence `sdpa-bench run` uses
(sdpa_impls.bench.batch over measure.run_case: reasons → fp64 check → closure → timing → peak memory), in a child
interpreter, so that a point that crashes it, or runs past POINT_DEADLINE_S, fails alone (batch.measure_isolated);
asv pickles what it returns, and `track_time_sdpa` (seconds, with its samples) and `track_peak_memory` (bytes) report
each point from it in a child forked by asv's forkserver, which imported this module once.

The preset comes from SDPA_BENCH_PRESET (default: "gpu" with CUDA, "cpu" without); SDPA_BENCH_IMPLS (comma-separated)
narrows the implementations. Parameters never depend on what is installed: a point that cannot run raises
`Unsupported` (a NotImplementedError) in `setup`, which asv records as a skipped cell and `asv run --show-stderr`
prints as "asv: skipped: Unsupported('…')"; a wrong point raises `WrongResult` there, a failed cell. Nothing here
initializes CUDA at import (the forkserver forks from this module's importer).
"""
from __future__ import annotations

import functools
import inspect
import itertools
import os
import sys
from collections.abc import Callable, Iterable

from sdpa_impls import Unsupported, names


def _older_layout(err: ImportError) -> None:
    """Pass where `err` says sdpa_impls lacks a module or a name (an older commit's layout, which the fallback after
    it replaces); else raise it: a dependency missing (numpy, say) is named as such, not hidden behind a fallback
    that then fails on a module of the old layout."""
    if not (err.name or "").startswith("sdpa_impls"):
        raise err


try:  # sdpa_impls with its bench/ layer
    from sdpa_impls.bench.check import WrongResult
    from sdpa_impls.bench.grid import Case, default_device, default_preset_name, preset
    from sdpa_impls.bench.measure import run_case
except ImportError as err:  # asv runs this suite against older commits too, whose modules were flat
    _older_layout(err)
    from sdpa_impls.grid import Case, default_device, default_preset_name, preset
    from sdpa_impls.measure import WrongResult, run_case

try:  # a point's crash fails that point, not its mode: a child interpreter measures the batch (again after a crash)
    from sdpa_impls.bench.batch import measure_isolated as measure_batch
except ImportError as err:  # commits from before it: in setup_cache's own process; before the batch module, this loop
    _older_layout(err)
    try:
        from sdpa_impls.bench.batch import measure_batch
    except ImportError as err:
        _older_layout(err)
        def measure_batch(cases: Iterable[Case], impl_names: list[str], device: str,
                          on_result: Callable[[object], object] | None = None) -> dict:
            batch = {}
            for case in cases:
                for result in run_case(case, impl_names, device):
                    batch[(result.impl, case.id)] = result
                    if on_result is not None:
                        on_result(result)
            return batch

try:  # a plug-in named on purpose that does not load fails, as in pytest and `run` (older commits: skipped)
    from sdpa_impls.registry import loaded
except ImportError as err:
    _older_layout(err)
    def loaded(name: str) -> object:
        return name

try:  # SDPA_BENCH_CPU_BF16 and SDPA_BENCH_CPU_EXP: a value neither takes is refused before anything is measured
    from sdpa_impls.impls._tiled.compute import check_settings
except ImportError as err:  # commits from before them
    _older_layout(err)
    def check_settings() -> None:
        pass

IMPLS_ENV = "SDPA_BENCH_IMPLS"
STARTS_ENV = "SDPA_BENCH_ASV_STARTS"  # a file each interpreter that imports this suite appends a line to
DEVICE = default_device()
PRESET = default_preset_name(DEVICE)
POINT_TIMEOUT_S = 120  # setup_cache's allowance per point of its mode (fp64 reference, compilation, timing)
# the deadline of one point in the measuring child: past it the point is taken as hung and fails alone, the mode's
# other points kept; generous, since a first point compiles (flex, compiled: minutes on a 2-core CPU)
POINT_DEADLINE_S = 600

check_settings()

if os.environ.get(STARTS_ENV):
    with open(os.environ[STARTS_ENV], "a") as _log:
        _log.write(f"{os.getpid()} {' '.join(sys.argv[1:3])}\n")


def impl_names() -> list[str]:
    """All registered implementations (installed or not), or the ones SDPA_BENCH_IMPLS names, in registry order
    (empty, blank or only commas: as if unset). A name this interpreter does not know is a ValueError naming it and
    the interpreter (a plug-in installed elsewhere), as is an empty name between others ("a,,b"); a plug-in named
    there that fails to load is PluginLoadError, as from `--impl` (unnamed, its points skip)."""
    known = names()
    given = os.environ.get(IMPLS_ENV, "")
    wanted = [n.strip() for n in given.split(",") if n.strip()]
    if wanted and len(wanted) != len(given.split(",")):  # "a,,b" is a typo, not a request for a and b
        raise ValueError(f"{IMPLS_ENV}={given!r}: an empty name between commas")
    unknown = [n for n in dict.fromkeys(wanted) if n not in known]
    if unknown:
        raise ValueError(f"{IMPLS_ENV}={os.environ[IMPLS_ENV]!r}: unknown implementation "
                         f"{', '.join(map(repr, unknown))} in {sys.executable} (a plug-in not installed there?); "
                         f"known: {', '.join(known)}")
    for name in wanted:
        loaded(name)
    return [n for n in known if n in wanted] if wanted else known


def cases_of(mode: str) -> dict[str, Case]:
    """The preset's cases of one mode, by id."""
    return {case.id: case for case in preset(PRESET) if case.mode == mode}


def no_cases_id(mode: str) -> str:
    """The single placeholder parameter of a mode the preset has no cases for (asv needs one value)."""
    return f"no-{mode}-cases-in-{PRESET}"


def measure_mode(mode: str) -> dict:
    """Every (implementation, case) of one mode, measured one after another in a child interpreter (a crash, or a
    point still running after POINT_DEADLINE_S, fails only its point): {(impl, case id): Result}."""
    def progress(result) -> None:  # asv shows setup_cache's output with --show-stderr when it fails
        print(f"{result.impl} {result.case.id}: {result.status}", file=sys.stderr, flush=True)

    # an older commit's measure_isolated (or the fallbacks) has no deadline: asv's setup_cache timeout is the only one
    deadline = {"deadline_s": POINT_DEADLINE_S} if "deadline_s" in inspect.signature(measure_batch).parameters else {}
    return measure_batch(cases_of(mode).values(), impl_names(), DEVICE, on_result=progress, **deadline)


def point(points: dict, mode: str, impl: str, case_id: str):
    """The measured Result of one cell; raises what asv turns into a skipped cell (NotImplementedError) or a failed
    one (anything else: a wrong result is a WrongResult with its fp64 error, never a number)."""
    if case_id == no_cases_id(mode):
        raise NotImplementedError(f"preset {PRESET!r} has no {mode} cases")
    result = points.get((impl, case_id))
    if result is None:  # the preset or SDPA_BENCH_IMPLS changed between discovery and this run
        raise ValueError(f"{impl} × {case_id!r} was not measured: not a {mode} point of preset {PRESET!r} with "
                         f"{IMPLS_ENV}={os.environ.get(IMPLS_ENV, '')!r}")
    if result.status == "skipped":
        raise Unsupported(impl, [result.reason])
    if result.status == "wrong":
        raise WrongResult(result.reason)
    if result.status != "ok":
        raise RuntimeError(f"{impl} × {case_id} {result.status}: {result.reason}")
    return result


def _cell_only(benchmark: Callable[..., object]) -> Callable[..., object]:
    """`benchmark` for a mode without cases, called with the cell's (impl, case) and no points. `asv check` counts
    each benchmark's arguments against its setup's; at run time `setup_without_cases` skips the cell first."""
    @functools.wraps(benchmark)  # keeps the name, unit and version (asv keeps a series by its version)
    def cell(self, impl: str, case_id: str) -> object:
        return benchmark(self, {}, impl, case_id)

    return cell


class _Mode:
    """One mode of the grid: `setup_cache` (in each subclass) measures it; the benchmarks report one point each."""

    mode = "fwd"
    param_names = ["impl", "case"]
    timeout = 120  # seconds per cell: a forked child reads the measured points

    def setup(self, points: dict, impl: str, case_id: str) -> None:
        self.result = point(points, self.mode, impl, case_id)

    def setup_without_cases(self, impl: str, case_id: str) -> None:
        # a mode the preset has no case for has no setup_cache (no interpreter, import or device start measures
        # nothing), so asv passes no points: each of its placeholder cells is skipped, saying why
        point({}, self.mode, impl, case_id)

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "setup_cache" not in vars(cls):  # asv passes only the cell's parameters: every benchmark takes those
            for name in [n for n in dir(cls) if n.startswith(("time_", "track_"))]:
                setattr(cls, name, _cell_only(getattr(cls, name)))

    def track_time_sdpa(self, points: dict, impl: str, case_id: str) -> dict:
        # asv's runner reads a {"samples", "number"} result as a time_ benchmark's: it stores the median as the
        # value and the samples' statistics (quartiles, confidence interval, count, calls per sample) beside it
        return {"samples": list(self.result.samples), "number": getattr(self.result, "calls_per_sample", 1)}

    track_time_sdpa.unit = "seconds"

    if DEVICE == "cuda":  # a CUDA point has two times (sdpa_impls.bench.devicetime); a CPU point has one
        def track_device_time(self, points: dict, impl: str, case_id: str) -> dict:
            # the CUDA-graph replays; where the call cannot be captured, its eager samples (the device time is
            # then the eager time, and `sdpa-bench run`'s report says why)
            r = self.result
            if getattr(r, "device_samples", ()):
                return {"samples": list(r.device_samples), "number": r.device_calls_per_sample}
            return {"samples": list(r.samples), "number": getattr(r, "calls_per_sample", 1)}

        track_device_time.unit = "seconds"

        def track_host_overhead(self, points: dict, impl: str, case_id: str) -> float:
            value = getattr(self.result, "host_overhead_s", None)
            if value is None:
                raise NotImplementedError(f"no host overhead: {self.result.device_time_reason or 'one time'}")
            return value

        track_host_overhead.unit = "seconds"

    def track_peak_memory(self, points: dict, impl: str, case_id: str) -> int:
        return self.result.peak_memory_bytes

    track_peak_memory.unit = "bytes"
    # the value means what it meant when each point ran in its own process (sdpa_impls.bench.memory.peak_memory after
    # a warm-up call): the version asv derived from that code, so the stored history stays on the same graph
    track_peak_memory.version = "97282593293c845ab71ba62e41f6b1d2c836213841f1aa8b3d6b7224d540c182"


def legacy_time_sdpa(params: list[list[str]]) -> Callable[..., None]:
    """`time_sdpa`, the series of times sdpa-bench's own history measured before the batch, for one class (`params`
    are its cells); `keep_legacy_series` adds it to the classes of that history only.

    asv times a `time_` benchmark itself, in a process per cell, so the times now come from `track_time_sdpa`. This one
    stays so that the site keeps plotting the stored points: it carries the version asv derived from its former code
    (asv hides results of another version), and asv_runner skips each of its cells before `setup` (skip_params), so
    it measures nothing and holds no value for a new commit."""
    def time_sdpa(self, points: dict, impl: str, case_id: str) -> None:
        pass

    time_sdpa.rounds = 1
    time_sdpa.skip_params = list(itertools.product(*params))
    time_sdpa.version = "aa12a47c9efaed7179708b37acfdf4f9f3305a1db944a8174459dfac75a150f2"
    return time_sdpa


def _params(mode: str) -> list[list[str]]:
    return [impl_names(), list(cases_of(mode)) or [no_cases_id(mode)]]


def _cache_timeout(params: list[list[str]]) -> int:
    return 600 + POINT_TIMEOUT_S * len(params[0]) * len(params[1])


# The three classes below repeat their setup_cache on purpose: asv keys a cache by the defining function's module and
# line, so one shared definition (inherited, or made by a factory) would give all three modes a single cache, filled
# by whichever mode ran first; and each benchmark's version, which keeps its stored series on the site, hashes the
# setup_cache's source.

class Forward(_Mode):
    mode = "fwd"
    params = _params(mode)

    if cases_of(mode):
        def setup_cache(self) -> dict:
            return measure_mode(self.mode)

        setup_cache.timeout = _cache_timeout(params)
    else:
        setup = _Mode.setup_without_cases


class Backward(_Mode):
    mode = "bwd"
    params = _params(mode)

    if cases_of(mode):
        def setup_cache(self) -> dict:
            return measure_mode(self.mode)

        setup_cache.timeout = _cache_timeout(params)
    else:
        setup = _Mode.setup_without_cases


class ForwardBackward(_Mode):
    mode = "fwd+bwd"
    params = _params(mode)

    if cases_of(mode):
        def setup_cache(self) -> dict:
            return measure_mode(self.mode)

        setup_cache.timeout = _cache_timeout(params)
    else:
        setup = _Mode.setup_without_cases


def keep_legacy_series() -> None:
    """Give each class the `time_sdpa` of sdpa-bench's own stored history (legacy_time_sdpa), so that its site keeps
    plotting the points measured before the batch. sdpa-bench's benchmarks/bench_sdpa.py calls it; a project's own
    suite, which has no such points, leaves it out and shows no empty graphs."""
    for cls in (Forward, Backward, ForwardBackward):
        legacy = legacy_time_sdpa(cls.params)
        cls.time_sdpa = legacy if "setup_cache" in vars(cls) else _cell_only(legacy)
