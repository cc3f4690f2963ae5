"""asv runs today's benchmarks/ against old commits: the suite must import and measure against the flat module
layout of commits from before sdpa_impls/bench/ existed, so a history over a range that spans the move stays
one line per benchmark."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OLD_MODULE = "sdpa_impls/measure.py"  # the flat layout's measuring module

PROBE = """
import sys
# asv installs the old commit for real; a test environment's editable install of today's tree adds an import hook
# that would serve today's sdpa_impls.bench on top of the old package: drop it, as an asv environment has none
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")]
import json, sdpa_impls
import benchmarks.bench_sdpa as suite
case = next(iter(suite.cases_of("fwd")))
bench = suite.Forward()
out = {"sdpa_impls": sdpa_impls.__file__, "layered": hasattr(sdpa_impls, "bench") or None, "case": case,
       "names": [c.__name__ for c in (suite.Forward, suite.Backward, suite.ForwardBackward)]}
points = bench.setup_cache()  # every forward point of the preset, measured by that commit's run_case
bench.setup(points, "naive", case)
out["time"] = bench.track_time_sdpa(points, "naive", case)
out["memory"] = bench.track_peak_memory(points, "naive", case)
try:
    bench.setup(points, "torch_sdpa_cudnn", case)
except NotImplementedError as exc:
    out["skip"] = str(exc)
print(json.dumps(out))
"""


def git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        pytest.skip(f"git {' '.join(args)} failed here: {done.stderr.strip()[:200]}")
    return done.stdout.strip()


def test_todays_benchmarks_measure_a_commit_from_before_the_move(tmp_path: Path) -> None:
    moved = git("rev-list", "-1", "HEAD", "--", OLD_MODULE)  # the commit that removed the flat module
    if not moved:
        pytest.skip(f"this checkout's history has no {OLD_MODULE} (a shallow clone?)")
    old = f"{moved}^"
    archive = tmp_path / "old.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), old, "sdpa_impls"], check=True, timeout=120)
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "old", filter="data")
    assert (tmp_path / "old" / OLD_MODULE).is_file()
    # the old package first on the path, today's benchmarks/ after it, as asv arranges an old commit's environment
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(tmp_path / "old"), str(ROOT)]),
                        "SDPA_BENCH_PRESET": "smoke", "SDPA_BENCH_IMPLS": "naive,torch_sdpa_cudnn"}
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["sdpa_impls"].startswith(str(tmp_path / "old")) and out["layered"] is None
    assert out["names"] == ["Forward", "Backward", "ForwardBackward"]  # the asv benchmark names are unchanged
    assert out["memory"] >= 8 * 128 * 128 * 4  # naive's (H, L, L) fp32 scores of the smoke case
    assert len(out["time"]["samples"]) >= 5 and all(t > 0 for t in out["time"]["samples"]) and out["time"]["number"] >= 1
    assert "torch_sdpa_cudnn cannot run this case" in out.get("skip", "")


def test_the_suite_in_an_interpreter_without_sdpa_bench_says_to_install_it(tmp_path: Path) -> None:
    """With `--environment existing:PYTHON` asv measures the package installed in that interpreter and drops
    PYTHONPATH, so a tree that was never installed there is one clear error naming the interpreter and the install,
    not a ModuleNotFoundError deep in the suite (an interpreter without site-packages stands in for it here)."""
    done = subprocess.run([sys.executable, "-I", "-S", "-c",
                           f"import runpy; runpy.run_path({str(ROOT / 'benchmarks' / 'bench_sdpa.py')!r})"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: sdpa-bench is not installed in " + sys.executable), done.stderr
    assert "pip install -e ." in last
