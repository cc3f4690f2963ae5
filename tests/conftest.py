"""pytest hooks of this repository's own test session: plain `pytest` runs each benchmark of the suite once, as a
smoke test, and tests that need a newer torch than the oldest one the project runs on skip saying so. The suite's
options (--sdpa-preset, --sdpa-impl, --sdpa-device) come from its plug-in, sdpa_bench_pytest."""
from __future__ import annotations

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
