"""What the suite's pytest plug-in (sdpa_bench_pytest, beside the package) checks and says once the suite is
collected: here, so that a pytest session that does not collect it imports neither sdpa_impls nor torch."""
from __future__ import annotations

import contextlib
import os

import pytest

from ..paths import cannot_write

NEEDS_BENCHMARK = "5.2"  # pytest-benchmark's pedantic(teardown=...): the suite's probe after each round
MAX_ROUNDS = 10_000  # a point's rounds at most, --benchmark-min-rounds included (the plug-in warns of a larger one)


def check_suite(device: str, benchmark_json: object = None) -> None:
    """Usage errors (exit 4) before any point, where the suite is collected: no pytest-benchmark with what it needs
    (each point would fail, no JSON be written); CUDA named where this torch has none (not a green run of skips); a
    --benchmark-json that cannot be written (pytest-benchmark opens it after the last point, and its traceback then
    loses every measurement)."""
    from importlib.metadata import distributions

    import torch
    from packaging.version import InvalidVersion, Version

    have, needs = next((d.version for d in distributions(name="pytest-benchmark")), "none"), NEEDS_BENCHMARK
    with contextlib.suppress(InvalidVersion):  # an rc or dev build of 5.2 has what 5.2 has
        if have == "none" or Version(have).release < tuple(map(int, needs.split("."))):
            raise pytest.UsageError(f"sdpa-bench's suite needs pytest-benchmark >= {needs}, here {have}: "
                                    f"python -m pip install 'pytest-benchmark>={needs}'")
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        raise pytest.UsageError(f"--sdpa-device {device}: no CUDA device is available to this torch "
                                f"({torch.__version__}, CUDA {torch.version.cuda or 'none'})")
    if isinstance(benchmark_json, (str, os.PathLike)):  # a Path from pytest-benchmark 5
        why = cannot_write(benchmark_json)
        if why:
            raise pytest.UsageError(f"--benchmark-json {benchmark_json}: {why}")


def tracer_warning(tracer: str) -> str:
    """What a session timed under a tracing tool (bench.machine.active_tracer) says at its end."""
    return (f"sdpa-bench: the suite was timed under {tracer}: its times include that tool's cost on every Python "
            "call (pytest-benchmark pauses sys.settrace's tools, not these), and the gate compares them only with "
            "runs under the same tools. Time without it: with pytest-cov, --no-cov or -p no:cov")
