"""pytest options and hooks: which preset and implementations the benchmarks sweep, honest timing on CUDA, and
tests that need a newer torch than the oldest one the project runs on."""
from __future__ import annotations

import os

import pytest
import torch

import sdpa_impls
from sdpa_impls.bench.grid import PRESET_ENV, PRESETS, default_device, default_preset_name, preset
from sdpa_impls.bench.machine import machine_info as describe_machine
from sdpa_impls.bench.result import SPEED_BASELINE
from sdpa_impls.torchver import needs_torch


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sdpa-bench")
    group.addoption("--sdpa-preset", default=None, metavar="NAME",
                    help=f"grid preset to benchmark ({', '.join(PRESETS)}); default: $SDPA_BENCH_PRESET, else the "
                         "device's preset with --benchmark-only, else 'smoke' (benchmarks run once as smoke tests)")
    group.addoption("--sdpa-impl", action="append", default=None, metavar="NAME",
                    help="benchmark only this implementation (repeatable); default: every registered one")
    group.addoption("--sdpa-device", default=None, metavar="DEVICE", help="cpu or cuda; default: cuda when available")


def pytest_configure(config: pytest.Config) -> None:
    # runs before pytest-benchmark's own (trylast) pytest_configure, so these options take effect
    only = config.getoption("benchmark_only", False)
    if not only and not config.getoption("benchmark_enable", False):
        config.option.benchmark_disable = True  # plain `pytest`: each benchmark runs once, as a smoke test
    device = config.getoption("sdpa_device") or default_device()
    timer_default = "time.perf_counter"
    if torch.device(device).type == "cuda" and str(config.getoption("benchmark_timer", timer_default)) == timer_default:
        config.option.benchmark_timer = "sdpa_impls.bench.timing.cuda_event_clock"  # GPU time, not async launch time
    config.addinivalue_line("markers", "needs_torch(minimum, feature): skip on a torch older than `minimum` with "
                                       "torchver's reason, '<feature> needs torch ≥ <minimum> (this is <running>)'")


def selected_preset(config: pytest.Config) -> str:
    name = config.getoption("sdpa_preset")
    if name:
        preset(name)  # a typo fails the run with the list of known presets
        return name
    if not config.getoption("benchmark_only", False):
        return os.environ.get(PRESET_ENV) or "smoke"
    return default_preset_name(config.getoption("sdpa_device") or default_device())


def selected_impls(config: pytest.Config) -> list[str]:
    wanted = config.getoption("sdpa_impl") or sdpa_impls.names()
    for name in wanted:
        sdpa_impls.get(name)  # unknown names fail the run with the list of known ones
    # the speed baseline runs first in each case, so the others can report a speedup against it
    return sorted(wanted, key=lambda n: n != SPEED_BASELINE)


def pytest_runtest_setup(item: pytest.Item) -> None:
    reasons = [r for mark in item.iter_markers("needs_torch") for r in needs_torch(*mark.args)]
    if reasons:
        pytest.skip("; ".join(reasons))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "sdpa_point" not in metafunc.fixturenames:
        return
    config = metafunc.config
    try:
        cases = preset(selected_preset(config))
        impls = selected_impls(config)
    except (ValueError, LookupError) as exc:
        raise pytest.UsageError(str(exc)) from None
    points = [(impl, case) for case in cases for impl in impls]  # case-major: one fp64 reference per case
    metafunc.parametrize("sdpa_point", points, ids=[f"{impl}-{case.id}" for impl, case in points])


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    machine_info["sdpa_bench"] = describe_machine(config.getoption("sdpa_device") or default_device(),
                                                  timer=str(config.getoption("benchmark_timer")))


@pytest.fixture(scope="session")
def sdpa_device(pytestconfig: pytest.Config) -> str:
    device = pytestconfig.getoption("sdpa_device") or default_device()
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        pytest.skip(f"--sdpa-device {device}: no CUDA device on this machine")
    return device


@pytest.fixture(scope="session")
def sdpa_preset_name(pytestconfig: pytest.Config) -> str:
    return selected_preset(pytestconfig)
