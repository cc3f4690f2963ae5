"""asv benchmarks: every registered implementation × every case of the preset, one class per mode, fp64-checked first.

Thin: the grid and `prepare_point` (reasons → check against fp64 → closure) come from sdpa_impls.bench.

The preset comes from SDPA_BENCH_PRESET (default: "gpu" with CUDA, "cpu" without); SDPA_BENCH_IMPLS
(comma-separated) narrows the implementations. Parameters never depend on what is installed: an
implementation that cannot run a case raises `Unsupported` (a NotImplementedError) in `setup`, which
asv records as a skipped cell and `asv run --show-stderr` prints as "asv: skipped: Unsupported('…')".
"""
from __future__ import annotations

import contextlib
import os
import timeit
from collections.abc import Callable
from types import SimpleNamespace

from sdpa_impls import Unsupported, get, names

try:  # sdpa_impls with its bench/ layer
    from sdpa_impls.bench.check import CaseContext
    from sdpa_impls.bench.grid import Case, default_device, default_preset_name, preset
    from sdpa_impls.bench.measure import prepare_point
    from sdpa_impls.bench.memory import peak_memory
    from sdpa_impls.bench.timing import CudaEventClock
except ImportError:  # asv runs this suite against older commits too, whose modules were flat
    from sdpa_impls.grid import Case, default_device, default_preset_name, preset
    from sdpa_impls.measure import CaseContext, mode_closure
    from sdpa_impls.timing import CudaEventClock, peak_memory

    def prepare_point(impl: str, ctx: CaseContext) -> SimpleNamespace:  # the same sequence from the old parts
        implementation = get(impl)
        reasons = implementation.unsupported_reasons(**ctx.inputs.args())
        if reasons:
            raise Unsupported(impl, reasons)
        max_error, error_tolerance = ctx.check(implementation)
        return SimpleNamespace(fn=mode_closure(implementation, ctx.inputs, ctx.case.mode), max_error=max_error,
                               error_tolerance=error_tolerance)

try:  # one sample = calls_per_sample back-to-back calls (sdpa_impls.bench.timing); older commits: one call
    from sdpa_impls.bench.timing import call_context, calls_per_sample
except ImportError:
    def call_context(fn: Callable[[], object]) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def calls_per_sample(fn: Callable[[], object], device: str) -> int:
        return 1

IMPLS_ENV = "SDPA_BENCH_IMPLS"
DEVICE = default_device()
PRESET = default_preset_name(DEVICE)


def impl_names() -> list[str]:
    """All registered implementations (installed or not), or the ones SDPA_BENCH_IMPLS names, in registry order."""
    known = names()
    wanted = [n.strip() for n in os.environ.get(IMPLS_ENV, "").split(",") if n.strip()]
    unknown = sorted(set(wanted) - set(known))
    if unknown:
        raise ValueError(f"{IMPLS_ENV} names unknown implementations {unknown}; known: {', '.join(known)}")
    return [n for n in known if n in wanted] if wanted else known


def cases_of(mode: str) -> dict[str, Case]:
    """The preset's cases of one mode, by id."""
    return {case.id: case for case in preset(PRESET) if case.mode == mode}


def no_cases_id(mode: str) -> str:
    """The single placeholder parameter of a mode the preset has no cases for (asv needs one value)."""
    return f"no-{mode}-cases-in-{PRESET}"


def prepare(mode: str, impl: str, case_id: str) -> Callable[[], object]:
    """Skip (NotImplementedError) what cannot run here, refuse a wrong result, return the closure to time."""
    case = cases_of(mode).get(case_id)
    if case_id == no_cases_id(mode):
        raise NotImplementedError(f"preset {PRESET!r} has no {mode} cases")
    if case is None:  # the preset changed between discovery and this run
        raise ValueError(f"{case_id!r} is not a {mode} case of preset {PRESET!r}")
    # raises Unsupported (asv: a skipped cell) or WrongResult (a failure: a wrong implementation never gets a time)
    return prepare_point(impl, CaseContext.build(case, DEVICE)).fn


class PerCallClock:
    """asv's timer: seconds per call of the sample being taken.

    `time_sdpa` makes `calls` back-to-back calls (one sample, as sdpa_impls.bench.timing defines it for every
    front end) and asv times each `time_sdpa` on its own (a benchmark with `setup` gets number = 1), so this
    clock advances by what `base` (GPU events on CUDA, a host clock elsewhere) advanced, divided by `calls`.
    """

    def __init__(self, base: Callable[[], float]) -> None:
        self.base = base
        self.calls = 1
        self._last: float | None = None
        self._total = 0.0

    def __call__(self) -> float:
        now = self.base()
        if self._last is not None:
            self._total += (now - self._last) / self.calls
        self._last = now
        return self._total


# GPU work is asynchronous: on CUDA the clock records an event and waits for it.
CLOCK = PerCallClock(CudaEventClock() if DEVICE == "cuda" else timeit.default_timer)
_prepared: dict[tuple[str, str, str], tuple[Callable[[], object], int]] = {}
_entered: list = [None, contextlib.ExitStack()]  # (key whose call context is entered, its exit stack)


class _Mode:
    """One mode of the grid: setup checks against fp64 and builds the closure; the benchmarks only run it."""

    mode = "fwd"
    param_names = ["impl", "case"]
    timeout = 900  # seconds per parameter combination, setup (fp64 reference) included
    repeat = (3, 25, 10.0)  # samples per round: at least 3, at most 25, stop after 10 s (asv's default: 1, 5, 10)
    timer = CLOCK

    def setup(self, impl: str, case_id: str) -> None:
        # asv_runner re-runs setup before every timing sample; the check, the closure and its calls per sample
        # are made once a process, and the closure's call context (a pinned backend) is entered once
        key = (self.mode, impl, case_id)
        if key not in _prepared:
            fn = prepare(self.mode, impl, case_id)
            with call_context(fn):
                fn()  # warm-up
                _prepared[key] = (fn, calls_per_sample(fn, DEVICE))
        self.fn, self.calls = _prepared[key]
        if _entered[0] != key:
            _entered[1].close()
            _entered[1].enter_context(call_context(self.fn))
            _entered[0] = key
        CLOCK.calls = self.calls

    def teardown(self, impl: str, case_id: str) -> None:
        _entered[1].close()
        _entered[0] = None

    def time_sdpa(self, impl: str, case_id: str) -> None:
        for _ in range(self.calls):
            self.fn()

    def track_peak_memory(self, impl: str, case_id: str) -> int:
        self.fn()  # warm-up: one-time workspaces are not the operator's memory
        return peak_memory(self.fn, DEVICE)

    track_peak_memory.unit = "bytes"


def _params(mode: str) -> list[list[str]]:
    return [impl_names(), list(cases_of(mode)) or [no_cases_id(mode)]]


class Forward(_Mode):
    mode = "fwd"
    params = _params(mode)


class Backward(_Mode):
    mode = "bwd"
    params = _params(mode)


class ForwardBackward(_Mode):
    mode = "fwd+bwd"
    params = _params(mode)
