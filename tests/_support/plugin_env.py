"""Builds (once per test session) a virtual environment that sees exactly the test environment's packages plus
the test plug-ins installed for real, so their entry points are discovered the way a user's would be."""
from __future__ import annotations

import os
import site
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

PLUGIN_SRC = Path(__file__).resolve().parents[1] / "plugins" / "sdpa_test_plugins"
LINK_FILE = "_sdpa_test_environment.pth"
# How the gate tests and tools/gate_evidence.py measure: the smoke preset, naive and the test_tunable plug-in,
# as docs/gate.md recommends for a shared CPU machine (one thread, CPU time of the process), with short runs
GATE_BENCH_ARGS = ("--sdpa-device", "cpu", "--sdpa-preset", "smoke", "--sdpa-impl", "naive", "--sdpa-impl", "test_tunable",
                   "--benchmark-timer=time.process_time", "--benchmark-max-time=0.25", "--benchmark-min-rounds=20")


def test_site_dirs() -> list[str]:
    """The site-packages folders of the interpreter running the tests (tox's venv, say), in search order."""
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
        dirs.append(site.getusersitepackages())
    return [d for d in dirs if os.path.isdir(d)]


def build_plugin_env(root: Path) -> Path:
    """Create `root/venv` linked to the test environment's packages, pip-install the plug-in package; return its python.

    Why a .pth file and not `--system-site-packages`: a venv made from inside another venv (tox's) is built on
    the *base* interpreter, so `--system-site-packages` shows it the base interpreter's packages, not the test
    environment's: on a machine whose base python3 lacks torch the plug-in environment had no torch, and on one
    that has it, the subprocess silently tested another torch. The .pth line `import site; site.addsitedir(...)`
    adds the running environment's site-packages behind the venv's own, and, unlike a bare path line, also runs
    the .pth files found there, so the editable install of sdpa-bench (a .pth import hook) works too. Entry
    points are read from the dist-info folders on sys.path, so the plug-ins installed here and sdpa-bench's own
    are discovered as a user's would be. `pip install --target` would instead copy packages, torch included.
    """
    env_dir = root / "venv"
    venv.EnvBuilder(system_site_packages=False, with_pip=False).create(env_dir)
    python = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(env_dir), "platbase": str(env_dir)}))
    purelib.mkdir(parents=True, exist_ok=True)
    lines = [f"import site; site.addsitedir({d!r})" for d in test_site_dirs()]
    (purelib / LINK_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    # the outer interpreter's pip installs into the new environment (no network, no build isolation)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--prefix", str(env_dir), str(PLUGIN_SRC)], check=True)
    return python


def run_gate_benchmarks(python: Path, out: Path, extra_env: dict[str, str]) -> subprocess.CompletedProcess:
    """One real pytest-benchmark run of tests/test_benchmarks.py with GATE_BENCH_ARGS into `out` (raw samples
    saved), in the plug-in environment, with one thread and `extra_env` (e.g. SDPA_TUNABLE_SLOWDOWN)."""
    tests = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SDPA_TUNABLE")} | {"OMP_NUM_THREADS": "1"}
    return subprocess.run([str(python), "-m", "pytest", str(tests / "test_benchmarks.py"), "-q", "-p", "no:cacheprovider",
                           "--benchmark-only", *GATE_BENCH_ARGS, f"--benchmark-json={out}", "--benchmark-save-data"],
                          cwd=tests.parent, env=env | extra_env, capture_output=True, text=True, timeout=300)
