"""Builds (once per test session) a virtual environment that sees exactly the test environment's packages plus
the test plug-ins installed for real, so their entry points are discovered the way a user's would be."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from sdpa_impls.continuous.envbuild import build
from sdpa_impls.continuous.envs import python_of

PLUGIN_SRC = Path(__file__).resolve().parents[1] / "plugins" / "sdpa_test_plugins"
# How the gate tests and tools/gate_evidence.py measure: the smoke preset, naive and the test_tunable plug-in,
# as docs/guide/gate-your-ci.md recommends for a shared CPU machine (one thread, CPU time of the process), with short runs
GATE_BENCH_ARGS = ("--sdpa-device", "cpu", "--sdpa-preset", "smoke", "--sdpa-impl", "naive", "--sdpa-impl", "test_tunable",
                   "--benchmark-timer=time.process_time", "--benchmark-max-time=0.25", "--benchmark-min-rounds=20")


def build_plugin_env(root: Path) -> Path:
    """Create `root/venv` layered on the test environment (its packages behind the venv's own, as `continuous`
    builds a side's environment: sdpa_impls.continuous.envbuild.build) with the plug-in package installed; its python.
    Entry points are read from the dist-info folders on sys.path, so the plug-ins installed here and sdpa-bench's
    own are discovered as a user's would be."""
    build(root / "venv", ["--no-deps", "--no-index", str(PLUGIN_SRC)])
    return python_of(root / "venv")


def run_gate_benchmarks(python: Path, out: Path, extra_env: dict[str, str]) -> subprocess.CompletedProcess:
    """One real pytest-benchmark run of tests/test_benchmarks.py with GATE_BENCH_ARGS into `out` (raw samples
    saved), in the plug-in environment, with one thread and `extra_env` (e.g. SDPA_TUNABLE_SLOWDOWN)."""
    tests = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SDPA_TUNABLE")} | {"OMP_NUM_THREADS": "1"}
    return subprocess.run([str(python), "-m", "pytest", str(tests / "test_benchmarks.py"), "-q", "-p", "no:cacheprovider",
                           "-p", "no:hypothesispytest", "--benchmark-only", *GATE_BENCH_ARGS, f"--benchmark-json={out}", "--benchmark-save-data"],
                          cwd=tests.parent, env=env | extra_env, capture_output=True, text=True, timeout=300)
