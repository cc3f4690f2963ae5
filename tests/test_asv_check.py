"""`asv check --python=same` passes on the suite for a preset with every mode and for one without backward-only
cases, run as a user runs it (real asv, this interpreter, the repository's asv.conf.json)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

asv_util = pytest.importorskip("asv.util", reason="asv is not installed (pip install -e .[asv])")

ROOT = Path(__file__).resolve().parents[1]


def config(tmp: Path) -> Path:
    """The repository's asv.conf.json with its results, html and environments in tmp (nothing written here)."""
    conf = asv_util.load_json(str(ROOT / "asv.conf.json"), js_comments=True)
    conf.update(repo=str(ROOT), benchmark_dir=str(ROOT / "benchmarks"), env_dir=str(tmp / "env"),
                results_dir=str(tmp / "results"), html_dir=str(tmp / "html"))
    path = tmp / "asv.conf.json"
    path.write_text(json.dumps(conf))
    return path


@pytest.mark.parametrize("preset", ["smoke", "gpu"], ids=["smoke-no-bwd-cases", "gpu-every-mode"])
def test_asv_check_passes(preset: str, tmp_path: Path) -> None:
    env = os.environ | {"SDPA_BENCH_PRESET": preset, "HOME": str(tmp_path)}
    env.pop("SDPA_BENCH_IMPLS", None)
    done = subprocess.run([sys.executable, "-m", "asv", "check", "--python=same", "--config", str(config(tmp_path))],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "No problems found" in out, out[-3000:]
    assert "wrong number of arguments" not in out
