"""sdpa-bench in a Python without the POSIX-only modules `resource` and `fcntl` (as on Windows): the commands that
time and report still run, saying only what such a system cannot tell; the ones that build and lock environments
refuse in one line. The modules are made unimportable in a real interpreter of the test environment; everything
else is real."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

WITHOUT_POSIX = ("import sys; sys.modules['resource'] = None; sys.modules['fcntl'] = None; "
                 "from sdpa_impls.cli import main; sys.exit(main(sys.argv[1:]))")


def without_posix(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT_POSIX, *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def test_a_sweep_runs_and_reports_where_resource_and_fcntl_are_missing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = without_posix("run", "--preset", "smoke", "--impl", "naive", "--budget", "0.05", "--no-plots", "--out",
                         str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))["results"]
    assert results and {r["status"] for r in results} == {"ok"}, results
    # no /proc/stat against getrusage: how busy the machine was is not known, never a 0 that says "quiet"
    assert {r.get("other_cpus") for r in results} == {None}, results
    listed = without_posix("list", cwd=tmp_path)
    assert listed.returncode == 0 and "naive" in listed.stdout, listed.stderr[-3000:]


def test_commands_that_lock_environments_refuse_in_one_line_without_fcntl(tmp_path: Path) -> None:
    for command in ("continuous", "bisect", "envs"):
        args = {"continuous": ["HEAD"], "bisect": ["HEAD~1"], "envs": []}[command]
        refused = without_posix(command, *args, cwd=tmp_path)
        assert refused.returncode == 2, (command, refused.stderr)
        assert refused.stderr.startswith(f"sdpa-bench {command}: error: needs a POSIX system (Linux or macOS)")
        assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr, refused.stderr
