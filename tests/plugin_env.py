"""Builds (once per test session) a virtual environment that sees this interpreter's packages plus the
test plug-ins installed for real, so their entry points are discovered the way a user's would be."""
from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

PLUGIN_SRC = Path(__file__).parent / "plugins" / "sdpa_test_plugins"


def build_plugin_env(root: Path) -> Path:
    """Create `root/venv` with --system-site-packages, pip-install the plug-in package; return its python."""
    env_dir = root / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
    python = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    # the outer interpreter's pip installs into the new environment (no network, no build isolation)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--prefix", str(env_dir), str(PLUGIN_SRC)], check=True)
    return python
