"""The CPU performance targets harness: its plan covers the cpu preset, its verdict takes the worst ratio and names gaps.

The timing itself is bench.measure.run_case_interleaved (tests/test_measure.py); here the evaluation is fed Results
whose times are chosen so that each target's worst case is known.
"""
from __future__ import annotations

import contextlib
import io
from dataclasses import replace

import pytest

from sdpa_impls.cli import main
from sdpa_impls.report import results as store, targets
from sdpa_impls.bench.ceilings import RunCeilings
from sdpa_impls.bench.grid import PRESETS
from sdpa_impls.bench.result import Result


def test_plan_runs_every_cpu_case_then_the_memory_cases() -> None:
    plan = targets.plan()
    cpu = len(PRESETS["cpu"])
    assert [(case, timed) for case, _, timed in plan[:cpu]] == [(case, True) for case in PRESETS["cpu"]]
    assert [(case, timed) for case, _, timed in plan[cpu:]] == [
        (targets.memory_case(n), False) for n in targets.MEMORY_LENGTHS]
    assert targets.memory_case(2048) in PRESETS["cpu"]  # so "timed" must come from the plan, not from the case
    cases = [case for case, _, _ in plan]
    assert all(set(targets.CORE) <= set(impls) for _, impls, _ in plan)
    assert targets.BF16_CASE in cases and targets.FP32_CASE in cases


def _results(slow_case_factor: float) -> list[Result]:
    """fused at half of torch_sdpa's time everywhere, except one cpu case where it is `slow_case_factor` × torch."""
    out = []
    for case in PRESETS["cpu"]:
        t = 1e-3 * case.lq / 256 * (0.5 if case.causal else 1.0)
        fused = t * (slow_case_factor if case == PRESETS["cpu"][3] else 0.5)
        out += [Result("torch_sdpa", case, "cpu", "ok", median_s=t), Result("naive", case, "cpu", "ok", median_s=2 * t),
                Result("fused", case, "cpu", "ok", median_s=fused), Result("chunked", case, "cpu", "ok", median_s=t)]
    for lq, mib in zip(targets.MEMORY_LENGTHS, (10, 30)):
        case = targets.memory_case(lq)
        out += [Result("chunked", case, "cpu", "ok", median_s=1.0, peak_memory_bytes=mib << 20),
                Result("naive", case, "cpu", "ok", median_s=1.0, peak_memory_bytes=16 * mib << 20)]
    return out


def test_each_target_reports_its_worst_case() -> None:
    ceilings = {"gemm_flops_fp32": 2e11, "gemm_flops_bf16": 8e11, "copy_bytes_per_s": 1e11}
    results = _results(3.0)
    rows = targets.evaluate(targets.Table(results, ceilings))
    assert len(rows) == 13 and all(r.measured is not None for r in rows)
    worst = next(r for r in rows if r.what.startswith("fused / naive"))
    assert worst.measured == pytest.approx(1.5) and worst.where == PRESETS["cpu"][3].id and worst.met is False
    bf16 = next(r for r in rows if r.what.startswith("fused / torch_sdpa, L4096"))
    assert bf16.measured == pytest.approx(0.5) and bf16.met is True
    memory = next(r for r in rows if "peak memory" in r.what)
    assert memory.measured == pytest.approx(3.0) and "naive: 3.0×" in memory.what  # 16×30 / 16×10
    causal = next(r for r in rows if r.what.startswith("chunked causal"))
    assert causal.measured == pytest.approx(0.5) and causal.met is True
    slow_train = next(r for r in rows if r.what.startswith("fused / torch_sdpa, every fp32 fwd+bwd"))
    assert slow_train.measured == pytest.approx(3.0) and slow_train.where == PRESETS["cpu"][3].id
    # the memory pass's single timed call of L2048-E64-fp32-fwd+bwd (1 s here) does not replace the timed result
    chunked_train = next(r for r in rows if r.what.startswith("chunked / torch_sdpa, every fp32 fwd+bwd"))
    assert chunked_train.measured == pytest.approx(1.0)
    # a ceiling target: the smallest fraction of the run's GEMM ceiling of the case's dtype, over the cases it names
    fused_fwd = next(r for r in rows if r.what.startswith("fused fwd, fp32 and bf16"))
    times = {r.case: r.median_s for r in results if r.impl == "fused"}
    expected = {c.id: c.flops() / times[c] / ceilings[f"gemm_flops_{c.dtype}"] for c in PRESETS["cpu"]
                if c.mode == "fwd" and c.lq >= 2048 and not c.causal}
    assert len(expected) == 8 and fused_fwd.at_least
    assert fused_fwd.measured == pytest.approx(min(expected.values())) and expected[fused_fwd.where] == min(expected.values())
    assert fused_fwd.met is (min(expected.values()) >= 0.85)
    table = targets.markdown(rows)
    misses = sum(r.met is False for r in rows)
    assert table.count("\n") == len(rows) + 1 and table.count("| **no** |") == misses >= 2
    assert f"| ≥ 85% | {fused_fwd.measured:.1%} |" in table
    assert "| L2048-E64-fp32-fwd |" in targets.ceiling_table(targets.Table(results, ceilings))


def test_a_target_that_could_not_be_measured_is_named_not_passed() -> None:
    results = [r for r in _results(0.5) if not (r.impl == "fused" and r.case == targets.BF16_CASE)]
    results.append(replace(Result("fused", targets.BF16_CASE, "cpu", "failed"), reason="boom"))
    rows = targets.evaluate(targets.Table(results))
    row = rows[0]
    assert row.measured is None and row.met is None and "not measured: " + targets.BF16_CASE.id in row.where
    no_ceiling = [r for r in rows if r.at_least]  # no ceilings measured: every fraction is "not measured"
    assert len(no_ceiling) == 4 and all(r.measured is None and r.met is None for r in no_ceiling)
    assert "| - | - |" in targets.markdown([row])


def test_a_fraction_of_the_ceiling_is_judged_against_the_ceiling_of_the_case_s_own_rounds() -> None:
    """A slow period over one case's rounds cuts both its implementations' speed and the GEMM samples taken in those
    rounds to a tenth: against its own ceiling the case keeps its fraction, against the run's median it looks worst."""
    ceilings = {"gemm_flops_fp32": 2e11, "gemm_flops_bf16": 8e11, "copy_bytes_per_s": 1e11}
    slow = next(c for c in PRESETS["cpu"] if c.mode == "fwd" and c.lq >= 2048 and not c.causal)
    key = f"gemm_flops_{slow.dtype}"
    steady = _results(0.5)
    results = [replace(r, median_s=r.median_s * 10) if r.case == slow else r for r in steady]
    own = {slow: {key: ceilings[key] / 10}}

    def row(table: targets.Table) -> targets.TargetRow:
        return next(r for r in targets.evaluate(table) if r.what.startswith("fused fwd, fp32 and bf16"))

    per_case, run_wide, before = (row(targets.Table(results, ceilings, own)), row(targets.Table(results, ceilings)),
                                  row(targets.Table(steady, ceilings)))
    assert targets.Table(results, ceilings, own).fraction("fused", slow)() == pytest.approx(
        targets.Table(steady, ceilings).fraction("fused", slow)())
    assert per_case.measured == pytest.approx(before.measured) and per_case.where == before.where != slow.id
    assert run_wide.where == slow.id and run_wide.measured < per_case.measured
    # a case without samples of its own falls back to the run's ceiling
    other = next(c for c in PRESETS["cpu"] if c != slow and c.mode == "fwd" and c.lq >= 2048 and not c.causal)
    assert targets.Table(results, ceilings, own).ceiling(other) == ceilings[f"gemm_flops_{other.dtype}"]


def test_run_ceilings_read_the_samples_of_one_stretch() -> None:
    meter = RunCeilings("cpu", ("gemm_flops_fp32", "copy_bytes_per_s"), samples={"gemm_flops_fp32": [9.0, 9.0]})
    mark = meter.mark()
    meter.samples["gemm_flops_fp32"] += [1.0, 3.0, 2.0]  # what sample() appends during a case's rounds
    assert meter.since(mark) == {"gemm_flops_fp32": 2.0}  # copy_bytes_per_s was not sampled since: left out
    assert meter.values()["gemm_flops_fp32"] == 3.0


def test_the_command_refuses_a_foreign_file_and_ends_on_sigterm_as_run_does(tmp_path) -> None:
    """`targets --overwrite` replaces a sweep, not another tool's results.json (it measured 20 minutes, then could
    not save); SIGTERM (a CI's time limit) ends it with 143 and says so, as `run` does (it said "interrupted", 130)."""
    import signal
    import subprocess
    import sys
    import time

    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "results.json").write_text("[1, 2]")
    done = subprocess.run([sys.executable, "-m", "sdpa_impls", "targets", "--out", str(tmp_path / "foreign"),
                           "--overwrite"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "is not an sdpa-bench results file" in done.stderr, done.stderr
    assert (tmp_path / "foreign" / "results.json").read_text() == "[1, 2]"
    out = tmp_path / "tt"
    import os
    proc = subprocess.Popen([sys.executable, "-m", "sdpa_impls", "targets", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))  # else the line comes with the first case's
    assert proc.stdout is not None and proc.stdout.readline().startswith("machine: ")  # measuring from here
    time.sleep(1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert err.strip().splitlines()[-1] == (f"sdpa-bench targets: terminated (SIGTERM); {out} is as it was: no case "
                                             "had finished"), err[-2000:]
    assert not (out / "results.json").exists()


def _stopped_after_a_case(args: list[str]) -> tuple[int, str, str]:
    """`sdpa-bench targets ARGS`, sent SIGTERM once the first case has finished: its points are printed once all
    are measured, and the second case takes seconds."""
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "sdpa_impls", "targets", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    seen = [proc.stdout.readline() for _ in range(2)]  # the machine, then the first case's first point
    proc.send_signal(signal.SIGTERM)
    rest, err = proc.communicate(timeout=120)
    return proc.returncode, "".join(seen) + rest, err


def test_an_interrupted_run_judges_and_saves_the_cases_it_finished(tmp_path) -> None:
    """A CI's time limit 20 minutes into the run lost every case measured; now the finished ones are judged and
    saved as a sweep, and a sweep the folder already held is not replaced by a part of a run."""
    import json
    import signal

    import re

    out = tmp_path / "tt"
    code, stdout, err = _stopped_after_a_case(["--out", str(out)])
    said = re.fullmatch(r"sdpa-bench targets: terminated \(SIGTERM\); the (\d+) finished cases? (is|are) saved in "
                        r".*", err.strip().splitlines()[-1])
    assert code == 128 + signal.SIGTERM and said, err[-2000:]
    done = int(said.group(1))  # 1, or 2 where the second case had ended before the signal came
    plan = [case.id for case, _, _ in targets.plan()]
    assert done in (1, 2) and f"interrupted after {done} of {len(plan)} cases" in stdout, stdout
    assert "(not measured: " in stdout, stdout
    saved = json.loads((out / "results.json").read_text())
    assert saved["meta"]["case_ids"] == plan[:done] and "interrupted" in saved["meta"], saved["meta"]
    assert f"interrupted after {done} of" in (out / "targets.md").read_text() and (out / "report.md").exists()
    # each case with its own implementations; the timed points (the memory cases' peaks are judged, not saved)
    points = {(case.id, impl) for case, impls, timed in targets.plan() if timed for impl in impls}
    assert saved["meta"]["planned_points"] == len(points) and saved["meta"]["made_by"] == "targets", saved["meta"]
    assert store.load(out).planned == len(points) and not store.load(out).complete  # not cases × every impl
    assert (f"points finished (measure the targets again with `sdpa-bench targets --out {out} --overwrite`)"
            in (out / "report.md").read_text())
    with contextlib.redirect_stderr(io.StringIO()) as said, contextlib.redirect_stdout(io.StringIO()):
        assert main(["run", "--out", str(out), "--resume"]) == 2  # it timed implementations targets never planned
    assert (f"{out} holds a `sdpa-bench targets` run, which `run --resume` does not continue: measure the targets "
            f"again with `sdpa-bench targets --out {out} --overwrite`") in said.getvalue(), said.getvalue()
    before = (out / "results.json").read_bytes()
    code, stdout, err = _stopped_after_a_case(["--out", str(out), "--overwrite"])
    assert code == 128 + signal.SIGTERM and re.fullmatch(
        rf"sdpa-bench targets: terminated \(SIGTERM\); {re.escape(str(out))} is as it was: a part of a run does not "
        r"replace the sweep it holds \(the verdict of the [12] finished cases? is above\)",
        err.strip().splitlines()[-1]), err[-2000:]
    assert "interrupted after" in stdout and (out / "results.json").read_bytes() == before


def test_a_stop_whose_exception_a_point_swallowed_is_raised_again_between_points() -> None:
    """A library's broad `except` around a point can eat the exception a signal raised; the signal's handler then
    ignores further signals, so the run went on to its end. The loop raises it again before the next case."""
    import os
    import signal

    from sdpa_impls.cli.outputs import Terminated, raise_if_stopped, terminate_as_interrupt

    with pytest.raises(Terminated), terminate_as_interrupt():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # the handler runs between bytecodes
                pass
        except BaseException:  # noqa: BLE001 (what the library did)
            pass
        raise_if_stopped()
    with terminate_as_interrupt():  # the next command starts afresh
        raise_if_stopped()
