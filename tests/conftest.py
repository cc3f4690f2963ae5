"""pytest hooks of this repository's own test session: plain `pytest` runs each benchmark of the suite once, as a
smoke test, and tests that need a newer torch than the oldest one the project runs on skip saying so. The suite's
options (--sdpa-preset, --sdpa-impl, --sdpa-device) come from its plug-in, sdpa_bench_pytest."""
from __future__ import annotations

import signal

import pytest

from sdpa_impls.torchver import needs_torch


def pytest_configure(config: pytest.Config) -> None:
    # runs before pytest-benchmark's own (trylast) pytest_configure, so this takes effect
    if not config.getoption("benchmark_only", False) and not config.getoption("benchmark_enable", False):
        config.option.benchmark_disable = True  # plain `pytest`: each benchmark runs once, as a smoke test
    config.addinivalue_line("markers", "needs_torch(minimum, feature): skip on a torch older than `minimum` with "
                                       "torchver's reason, '<feature> needs torch ≥ <minimum> (this is <running>)'")


def pytest_runtest_setup(item: pytest.Item) -> None:
    reasons = [r for mark in item.iter_markers("needs_torch") for r in needs_torch(*mark.args)]
    if reasons:
        pytest.skip("; ".join(reasons))


@pytest.fixture(autouse=True)
def _signal_dispositions():
    """A command stopped in-process (a test of Ctrl-C or SIGTERM) leaves the stop signals ignored, as it does in
    its own process to the exit: put back here, so that a later test's subprocess does not inherit them ignored."""
    stops = [s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None]
    before = {s: signal.getsignal(s) for s in stops}
    yield
    for s, handler in before.items():
        if handler is not None and signal.getsignal(s) is not handler:
            signal.signal(s, handler)
