"""The asv suite's inputs and its measurement's limits: a point that never returns fails alone, past its deadline, and
the points of its mode measured before and after it are kept (it had run until asv's setup_cache timeout, and every
cell of the mode was then skipped); SDPA_BENCH_IMPLS of only commas or blanks is as if unset."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from held import bf16_fault_module

# `sleeps` never returns on bf16 inputs, as a deadlocked kernel or a spinning plug-in does; the child imports it by
# name, as it does a plug-in
SLEEPS_MODULE = bf16_fault_module("sleeps", "time", "time.sleep(10**6)")
SLEEP_LINE = 'sleepmod.py", line 15 in forward'  # where the stuck child is, from its Python stack

# argv: the folder of sleepmod, "batch" (measure_isolated itself) or "suite" (the asv suite's setup_cache), deadline
DRIVE = """
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
import sleepmod
deadline = float(sys.argv[3])
started = time.monotonic()
if sys.argv[2] == "batch":
    from sdpa_impls.bench.batch import measure_isolated
    from sdpa_impls.bench.grid import preset
    from sdpa_impls.bench.measure import Options
    cases = [c for c in preset("smoke") if c.mode == "fwd"][:3]
    batch = measure_isolated(cases, ["sleeps", "naive"], "cpu", Options(budget_s=0.05, min_reps=5, max_reps=20),
                             deadline_s=deadline)
else:  # what asv runs for the Forward cells: its setup_cache, in a process of its own
    os.environ.update(SDPA_BENCH_PRESET="smoke", SDPA_BENCH_IMPLS="sleeps")
    from sdpa_impls.suite import asv_suite
    asv_suite.POINT_DEADLINE_S = deadline  # the suite's 600 s, shortened for a test
    batch = asv_suite.Forward().setup_cache()
took = time.monotonic() - started
print(json.dumps({"took": took, "points": {f"{i} {c}": [r.status, r.reason] for (i, c), r in batch.items()}}))
"""
HUNG = "sleeps L128-E64-bf16-causal-fwd"
BOUND_S = 90  # well under the sleep (10**6 s); with no deadline the driver runs until this and the test fails


def drive(tmp_path: Path, how: str, deadline_s: float) -> tuple[float, dict]:
    (tmp_path / "sleepmod.py").write_text(SLEEPS_MODULE)
    (tmp_path / "drive.py").write_text(DRIVE)
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, str(tmp_path / "drive.py"), str(tmp_path), how, str(deadline_s)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=BOUND_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its measuring child, which would sleep on
        proc.communicate()
        pytest.fail(f"a point that never returns held the whole {how} past {BOUND_S} s (no deadline)")
    assert proc.returncode == 0, err[-3000:]
    said = json.loads(out)
    assert said["took"] < time.monotonic() - started < BOUND_S
    return said["took"], said["points"]


def test_a_point_past_its_deadline_fails_alone_and_the_batch_goes_on(tmp_path: Path) -> None:
    """measure_isolated with a deadline: the child stuck in a point writes where it is and is killed, the point fails
    saying so, and a new child measures the points after it; those before it are kept."""
    took, points = drive(tmp_path, "batch", 4)
    hung = points.pop(HUNG)
    assert hung[0] == "failed" and hung[1].startswith("still running after 4 s (the per-point deadline): stopped"), hung
    assert SLEEP_LINE in hung[1], hung[1]  # where it was stuck, which asv shows for the cell
    assert sorted(points) == ["naive L128-E64-bf16-causal-fwd", "naive L128-E64-fp32-boolmask-fwd",
                              "naive L128-E64-fp32-fwd", "sleeps L128-E64-fp32-boolmask-fwd",
                              "sleeps L128-E64-fp32-fwd"]
    assert all(status == "ok" for status, _ in points.values()), points
    assert 4 < took < 60, took  # the deadline, two children's start and six short points; nowhere near the sleep


def test_the_asv_suite_gives_each_point_its_deadline(tmp_path: Path) -> None:
    """asv's setup_cache for the forward mode: the hung point is a failed cell with its reason, and every other cell
    of the mode (before and after it) has its measured Result, instead of the whole mode skipped when asv's
    setup_cache timeout (600 s + 120 s a point) kills it."""
    took, points = drive(tmp_path, "suite", 8)  # points of 1 s of samples
    hung = points.pop(HUNG)
    assert hung[0] == "failed" and "still running after 8 s (the per-point deadline)" in hung[1], hung
    assert SLEEP_LINE in hung[1], hung[1]
    assert sorted(points) == ["sleeps L128-E64-fp32-boolmask-fwd", "sleeps L128-E64-fp32-fwd",
                              "sleeps Lq1-Lk256-E64-fp32-B1-H8kv2-fwd"]
    assert all(status == "ok" for status, _ in points.values()), points
    assert 8 < took < 60, took


@pytest.mark.parametrize("value", ["", " ", ",", ", ,", " ,, "])
def test_impls_of_only_commas_or_blanks_are_as_if_unset(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """docs/reference/configuration.md: "empty, blank or only commas: as if unset" (it was a ValueError for ",")."""
    from sdpa_impls import names
    from sdpa_impls.suite import asv_suite
    monkeypatch.setenv(asv_suite.IMPLS_ENV, value)
    assert asv_suite.impl_names() == names() and "naive" in names()


def test_impls_keep_refusing_an_empty_name_between_others(monkeypatch: pytest.MonkeyPatch) -> None:
    from sdpa_impls.suite import asv_suite
    monkeypatch.setenv(asv_suite.IMPLS_ENV, "naive,,torch_sdpa")
    with pytest.raises(ValueError, match="an empty name between commas"):
        asv_suite.impl_names()
    monkeypatch.setenv(asv_suite.IMPLS_ENV, " torch_sdpa , naive ")
    assert asv_suite.impl_names() == [n for n in asv_suite.names() if n in ("naive", "torch_sdpa")]
