"""Builds (once per test session) a virtual environment that sees this interpreter's packages plus the
test plug-ins installed for real, so their entry points are discovered the way a user's would be."""
from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

PLUGIN_SRC = Path(__file__).parent / "plugins" / "sdpa_test_plugins"
# How the gate tests and tests/gate_evidence.py measure: the smoke preset, naive and the test_tunable plug-in,
# as docs/gate.md recommends for a shared CPU machine (one thread, CPU time of the process), with short runs
GATE_BENCH_ARGS = ("--sdpa-preset", "smoke", "--sdpa-impl", "naive", "--sdpa-impl", "test_tunable",
                   "--benchmark-timer=time.process_time", "--benchmark-max-time=0.25", "--benchmark-min-rounds=20")


def build_plugin_env(root: Path) -> Path:
    """Create `root/venv` with --system-site-packages, pip-install the plug-in package; return its python."""
    env_dir = root / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
    python = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    # the outer interpreter's pip installs into the new environment (no network, no build isolation)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--prefix", str(env_dir), str(PLUGIN_SRC)], check=True)
    return python


def run_gate_benchmarks(python: Path, out: Path, extra_env: dict[str, str]) -> subprocess.CompletedProcess:
    """One real pytest-benchmark run of tests/test_benchmarks.py with GATE_BENCH_ARGS into `out` (raw samples
    saved), in the plug-in environment, with one thread and `extra_env` (e.g. SDPA_TUNABLE_SLOWDOWN)."""
    tests = Path(__file__).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("SDPA_TUNABLE")} | {"OMP_NUM_THREADS": "1"}
    return subprocess.run([str(python), "-m", "pytest", str(tests / "test_benchmarks.py"), "-q", "-p", "no:cacheprovider",
                           "--benchmark-only", *GATE_BENCH_ARGS, f"--benchmark-json={out}", "--benchmark-save-data"],
                          cwd=tests.parent, env=env | extra_env, capture_output=True, text=True, timeout=300)
