"""The pytest plug-in of sdpa-bench's suite (sdpa_impls.suite.test_sdpa), beside the package: loaded in every pytest
session of an environment with sdpa-bench (entry point `sdpa_bench` of pytest11; `-p no:sdpa_bench` leaves it out),
it adds three options and acts only on the tests that take the `sdpa_point` fixture: their parametrization, timer
on CUDA, and machine in pytest-benchmark's JSON. It imports sdpa_impls (and torch) only once such a test is
collected: other test sessions pay nothing for it."""
from __future__ import annotations

import contextlib
import os
import shlex
import warnings
from collections.abc import Callable

import pytest

SUITE_FIXTURE = "sdpa_point"
DEFAULT_TIMER = "time.perf_counter"  # pytest-benchmark's --benchmark-timer when none is given
CUDA_TIMER = "sdpa_impls.bench.timing.cuda_event_clock"
_SUITE_SELECTED = "_sdpa_bench_suite"  # set on the config when the session collected the suite's tests
PRESET_VARIABLE = "SDPA_BENCH_PRESET"  # sdpa_impls.bench.grid.PRESET_ENV, named here without importing torch
CPU_VARIABLES = ("SDPA_BENCH_CPU_BF16", "SDPA_BENCH_CPU_EXP")  # what `fused` and `chunked` compute in on a CPU
_TRACER = "_sdpa_bench_tracer"  # the tracing tools at work while the suite was collected (bench.machine.active_tracer)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sdpa-bench")
    group.addoption("--sdpa-preset", default=None, metavar="NAME",
                    help="grid preset to benchmark (smoke, ci, quick, cpu, gpu, ...: docs/reference/presets.md); "
                         "default: $SDPA_BENCH_PRESET, else the device's preset with --benchmark-only, else 'smoke'")
    group.addoption("--sdpa-impl", action="append", default=None, metavar="NAME",
                    help="benchmark only this implementation (repeatable, or comma-separated); default: every "
                         "registered one")
    group.addoption("--sdpa-device", default=None, metavar="DEVICE",
                    help="cpu or cuda (cuda:N); default: cuda when available")


def pytest_configure(config: pytest.Config) -> None:
    """The suite's options, $SDPA_BENCH_PRESET and CPU_VARIABLES, checked before collection: a typo is one line, pytest's
    usage error (exit 4); an empty value never means "the default". Sessions naming none import nothing here."""
    for flag in ("--sdpa-preset", "--sdpa-device"):
        value = config.getoption(flag.lstrip("-").replace("-", "_"))
        if value is not None and not value.strip():
            raise pytest.UsageError(f"{flag}: an empty value; give one, or leave {flag} out")
    config.pluginmanager.register(_Tally(config), "sdpa-bench-tally")
    impls = config.getoption("sdpa_impl")
    if impls and not all(given.strip() for given in impls):  # `--sdpa-impl a --sdpa-impl=`, as `run --impl` says
        raise pytest.UsageError("--sdpa-impl: an empty value; give one, or leave --sdpa-impl out")
    if impls and not any(n.strip() for given in impls for n in given.split(",")):
        raise pytest.UsageError(f"--sdpa-impl {','.join(impls)!r}: names no implementation")
    for given in impls or ():  # `--sdpa-impl a,,b` is a typo, not a request for a and b
        if not all(n.strip() for n in given.split(",")):
            raise pytest.UsageError(f"--sdpa-impl {given!r}: an empty name between commas")
    if not (config.getoption("sdpa_preset") or config.getoption("sdpa_impl") or config.getoption("sdpa_device")
            or any(os.environ.get(v, "").strip() for v in (PRESET_VARIABLE, *CPU_VARIABLES))):
        return
    try:
        device = config.getoption("sdpa_device")
        if device:
            _check_device(device)
        selected_preset(config)
        selected_impls(config)
        from sdpa_impls.impls._tiled.compute import check_settings
        check_settings()  # SDPA_BENCH_CPU_BF16, SDPA_BENCH_CPU_EXP: as `run` reads them, before any point
    except (ValueError, LookupError, ImportError) as exc:
        raise pytest.UsageError(str(exc)) from None


def _check_device(device: str) -> None:
    import torch

    try:
        kind = torch.device(device).type
    except RuntimeError:
        kind = None
    if kind not in ("cpu", "cuda"):
        raise ValueError(f"--sdpa-device {device}: the suite runs on cpu or cuda (cuda:N)")


def device_of(config: pytest.Config) -> str:
    from sdpa_impls.bench.grid import default_device

    return config.getoption("sdpa_device") or default_device()


def selected_preset(config: pytest.Config) -> str:
    from sdpa_impls.bench.grid import PRESET_ENV, default_preset_name, preset

    name = config.getoption("sdpa_preset")
    if name:
        preset(name)  # a typo fails the run with the list of known presets
        return name
    if not config.getoption("benchmark_only", False):
        name = os.environ.get(PRESET_ENV, "").strip()
        if not name:
            return "smoke"
        try:
            preset(name)
        except ValueError as exc:  # the variable is named, as default_preset_name names it
            raise ValueError(f"{PRESET_ENV}={name!r}: {exc}") from None
        return name
    return default_preset_name(device_of(config))


def selected_impls(config: pytest.Config) -> list[str]:
    import sdpa_impls
    from sdpa_impls.bench.result import SPEED_BASELINE
    from sdpa_impls.registry import loaded

    named = [n.strip() for given in _impls_given(config) for n in given.split(",") if n.strip()]
    wanted = named or sdpa_impls.names()
    for name in named or ():  # an unknown name fails the run with the list of known ones, and so does a plug-in
        loaded(name)  # named on purpose that does not load (unnamed, its points skip, saying why)
    # the speed baseline runs first in each case, so the others can report a speedup against it
    return sorted(dict.fromkeys(wanted), key=lambda n: n != SPEED_BASELINE)


def _impls_given(config: pytest.Config) -> list[str]:
    """--sdpa-impl's values: the command line's where it names any (a default in addopts is replaced), else addopts'."""
    every = [str(v) for v in config.getoption("sdpa_impl") or ()]
    defaults = _read([], config)
    set_there = sum(a.startswith("--sdpa-impl=") or (a == "--sdpa-impl" and i + 1 < len(defaults))
                    for i, a in enumerate(defaults))
    return every[set_there:] or every


def _read(args: list[str], config: pytest.Config) -> list[str]:
    """`args`, then addopts (the ini file's, then $PYTEST_ADDOPTS), with each @file's lines, as pytest reads them."""
    args = [*map(str, args), *map(str, config.getini("addopts")), *shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))]
    for i, at in enumerate(args):  # an @file inside an @file too, each once
        if at.startswith("@") and at not in args[:i]:
            with contextlib.suppress(OSError, UnicodeDecodeError):
                args += (config.invocation_params.dir / at[1:]).read_text().splitlines()
    return args


def _cuda_events(config: pytest.Config, device: str) -> bool:
    """Whether the suite times with CUDA events: on CUDA, unless --benchmark-timer names another clock."""
    import torch

    given = str(config.getoption("benchmark_timer", DEFAULT_TIMER))
    return torch.device(device).type == "cuda" and given == DEFAULT_TIMER


def timer_name(config: pytest.Config, device: str) -> str:
    return CUDA_TIMER if _cuda_events(config, device) else str(config.getoption("benchmark_timer", DEFAULT_TIMER))


def suite_timer(config: pytest.Config, device: str) -> Callable[[], float]:
    """The clock the suite's samples are read with: CUDA events on CUDA (GPU time, not the launch's), else
    --benchmark-timer (e.g. time.process_time on a shared CPU runner)."""
    from pytest_benchmark.utils import load_timer  # the option holds the timer's name

    return load_timer(timer_name(config, device)).target


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if SUITE_FIXTURE not in metafunc.fixturenames:
        return
    from sdpa_impls.bench.grid import preset

    config = metafunc.config
    try:
        cases = preset(selected_preset(config))
        impls = selected_impls(config)
    except (ValueError, LookupError, ImportError) as exc:
        raise pytest.UsageError(str(exc)) from None
    # case-major: one fp64 reference per case. Each point is (implementation, case id): plain strings, so that
    # pytest-benchmark's JSON keeps them as its `params` (a Case object would be "UNSERIALIZABLE[...]" there)
    points = [(impl, case.id) for case in cases for impl in impls]
    metafunc.parametrize(SUITE_FIXTURE, points, ids=[f"{impl}-{case_id}" for impl, case_id in points])


# pytest-benchmark's options that the suite's own sampling replaces (docs/explanation/measurement.md): a sample is
# the fewest back-to-back calls lasting 1 ms, after one warm-up call and one warm-up round, in every front end
REPLACED_OPTIONS = ("--benchmark-min-time", "--benchmark-warmup", "--benchmark-calibration-precision")


def _benchmark_loaded(config: pytest.Config) -> bool:
    """Whether pytest-benchmark's plug-in is loaded, by entry point (`benchmark`) or by name (`-p
    pytest_benchmark.plugin`, as `continuous` runs the suite); True where it is not installed (check_suite says so)."""
    try:
        import pytest_benchmark.plugin as plugin
    except ImportError:
        return True
    return config.pluginmanager.is_registered(plugin)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    suite = [item for item in items if SUITE_FIXTURE in getattr(item, "fixturenames", ())]
    if not suite:
        return
    from sdpa_impls.bench.machine import active_tracer
    from sdpa_impls.suite.session import check_suite

    # here, not while collecting: pytest's usage error, one line, not a collection error
    if not _benchmark_loaded(config):  # installed, but not loaded (-p no:benchmark in addopts)
        raise pytest.UsageError("sdpa-bench's suite needs pytest-benchmark's plug-in, which this session does not "
                                "load (-p no:benchmark): drop that option to run it")
    check_suite(device_of(config), config.getoption("benchmark_json", None))
    setattr(config, _SUITE_SELECTED, True)
    setattr(config, _TRACER, active_tracer(hooks=False))  # pytest-benchmark pauses sys.settrace's while it times
    given = _read(list(config.invocation_params.args), config)  # every way pytest takes options
    replaced = sorted({o for o in REPLACED_OPTIONS for arg in given if str(arg).startswith(o)})
    if replaced:
        warnings.warn(pytest.PytestConfigWarning(
            f"sdpa-bench's suite samples as `sdpa-bench run` and asv do (the fewest calls lasting 1 ms, one warm-up "
            f"round): {', '.join(replaced)} do not change its benchmarks"))
    from sdpa_impls.suite.session import MAX_ROUNDS
    if (config.getoption("benchmark_min_rounds", None) or 0) > MAX_ROUNDS:  # a point's rounds are capped at it
        warnings.warn(pytest.PytestConfigWarning(
            f"sdpa-bench's suite times at most {MAX_ROUNDS:,} rounds a point: --benchmark-min-rounds "
            f"{config.getoption('benchmark_min_rounds')} gets {MAX_ROUNDS:,}"))
    if _cuda_events(config, device_of(config)):  # only the suite's benchmarks: a session's other ones keep theirs
        timer = suite_timer(config, device_of(config))
        for item in suite:
            item.add_marker(pytest.mark.benchmark(timer=timer))


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-benchmark, which may not be installed
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    if getattr(config, _SUITE_SELECTED, False):
        machine_info["sdpa_bench"] = _suite_machine(config)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_benchmark_compare_machine_info(config: pytest.Config, machine_info: dict, compared_benchmark: dict) -> None:
    """--benchmark-compare reads the saved run's machine before this session has collected anything, so before
    the suite's tests set `sdpa_bench`: against a saved run of the suite, describe it here, so that pytest-benchmark
    compares the suite's machine fields (torch, threads, timer) rather than warning that the machine differs."""
    if "sdpa_bench" in (compared_benchmark.get("machine_info") or {}) and "sdpa_bench" not in machine_info:
        machine_info["sdpa_bench"] = _suite_machine(config)


def _suite_machine(config: pytest.Config) -> dict:
    from sdpa_impls.bench.machine import machine_info as describe_machine

    from sdpa_impls.bench.machine import active_tracer

    device = device_of(config)  # --benchmark-compare asks before collection: the tools of now, as collection reads them
    traced = getattr(config, _TRACER) if hasattr(config, _TRACER) else active_tracer(hooks=False)
    return describe_machine(device, timer=timer_name(config, device)) | {"tracer": traced}


SUITE_FILE = "sdpa_impls/suite/test_sdpa.py"
FAILED_POINT = "sdpa_bench_failed"  # a report's user property: a suite point that failed, and how
SECTION = "sdpa_bench"  # the key of what the session adds to pytest-benchmark's JSON (gate.points reads it)


class _Tally:
    """The suite's points measured and skipped in this session (in xdist's controller too, from its workers'
    reports). Where every one was skipped, nothing failed and no other test ran, the session exits 5 ("nothing
    ran", as `run` exits 2): a CI job that measured nothing is not green. Not under --benchmark-skip.
    It adds to pytest-benchmark's JSON (`SECTION`) the suite's points that failed or answered wrong (a failed test
    saves no benchmark) and whether the session stopped early (Ctrl-C, -x): `gate` fails the one, refuses the other."""

    def __init__(self, config: pytest.Config) -> None:
        self.config, self.measured, self.skipped, self.others, self.nothing = config, 0, 0, 0, False
        self.session: pytest.Session | None = None
        self.failed: dict[tuple[str, str], dict] = {}
        self.cut = ""  # why tests were left unrun (-x, --maxfail): a stop after the last one leaves nothing out

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        yield
        session = item.session
        if nextitem is not None and (session.shouldstop or session.shouldfail):
            self.cut = str(session.shouldstop or session.shouldfail)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):  # in the process that ran it
        params = getattr(getattr(item, "callspec", None), "params", {})
        excinfo = call.excinfo
        if SUITE_FIXTURE in params and excinfo is not None and not excinfo.errisinstance(
                (pytest.skip.Exception, KeyboardInterrupt)):
            exc, (impl, case_id) = excinfo.value, params[SUITE_FIXTURE]
            wrong = type(exc).__name__ == "WrongResult"  # bench.check's, named here without importing torch
            item.user_properties.append((FAILED_POINT, {
                "impl": impl, "case": case_id, "status": "wrong" if wrong else "failed",
                "max_error": getattr(exc, "error", None) if wrong else None,
                "error_tolerance": getattr(exc, "tolerance", None) if wrong else None,
                "message": (f"{type(exc).__name__}: {exc}".strip().splitlines() or [""])[0][:300]}))
        yield

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not str(report.location[0]).replace(os.sep, "/").endswith(SUITE_FILE):
            self.others += report.when == "call"  # a session of other tests too: theirs is the exit status
            return
        if hasattr(report, "wasxfail"):
            return
        failed = next((v for k, v in report.user_properties if k == FAILED_POINT), None) if report.failed else None
        if failed:  # xdist's workers' reports carry it too
            self.failed.setdefault((failed["impl"], failed["case"]), failed)
        if report.skipped:
            self.skipped += 1
        elif report.when == "call" and report.passed:
            self.measured += 1

    @pytest.hookimpl(optionalhook=True)  # pytest-benchmark's, when it saves a file (in its sessionfinish)
    def pytest_benchmark_update_json(self, config: pytest.Config, benchmarks: list, output_json: dict) -> None:
        if not getattr(config, _SUITE_SELECTED, False):
            return
        session = self.session
        stopped = "interrupted" if session and session.exitstatus == pytest.ExitCode.INTERRUPTED else self.cut
        output_json[SECTION] = {"stopped": stopped, "failed": list(self.failed.values())}

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.skipped and not self.measured and not self.others and session.exitstatus == pytest.ExitCode.OK and \
                not self.config.getoption("benchmark_skip", False):
            session.exitstatus, self.nothing = pytest.ExitCode.NO_TESTS_COLLECTED, True

    def pytest_terminal_summary(self, terminalreporter: object) -> None:
        if getattr(self.config, _TRACER, None):
            from sdpa_impls.suite.session import tracer_warning
            terminalreporter.write_line(tracer_warning(getattr(self.config, _TRACER)), yellow=True)  # type: ignore
        if self.nothing:
            terminalreporter.write_line(  # type: ignore[attr-defined]
                f"sdpa-bench: nothing was measured: all {self.skipped} of the suite's points were skipped here "
                "(-rs lists why); exit 5", red=True)


@pytest.fixture(scope="session")
def sdpa_device(pytestconfig: pytest.Config) -> str:
    return device_of(pytestconfig)


@pytest.fixture(scope="session")
def sdpa_preset_name(pytestconfig: pytest.Config) -> str:
    return selected_preset(pytestconfig)
