"""The command line as a user runs it: real subprocesses, real sweeps, every file checked, kill and resume."""
from __future__ import annotations

import copy
import csv
import json
import os
import re
import statistics
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from sdpa_impls import names
from sdpa_impls.bench.grid import preset
from sdpa_impls.bench.machine import source_revision
from sdpa_impls.bench.result import Result
from held import CRASHES_MODULE

CPU = ["--device", "cpu"]  # these tests describe a CPU sweep, also on a machine with a GPU
FAST = [*CPU, "--budget", "0.005", "--min-reps", "2", "--warmup", "1"]
SMOKE_POINTS = len(preset("smoke")) * len(names())
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PROGRESS_LINE = re.compile(r"^\[(\d+)/(\d+)\s+\d+%\] (\S+)  (\S+): ", re.M)


def cli(*args: str, timeout: float = 150, env: dict[str, str] | None = None,
        cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sdpa_impls", *args], capture_output=True, text=True,
                          timeout=timeout, env=None if env is None else os.environ | env, cwd=cwd)


def load(directory: Path) -> dict:
    return json.loads((directory / "results.json").read_text())


def slow_run(cmd: list[str], out: Path) -> subprocess.Popen:
    """`cmd`, a `run` into `out`, started and left running once its first point is saved (or once it ended)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if (out / "results.json").exists() and load(out)["results"]:
            break
        time.sleep(0.05)
    return proc


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("cli") / "smoke"
    proc = cli("run", "--preset", "smoke", "--out", str(out), *FAST)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc


def test_run_writes_results_json_with_every_point_and_its_samples(smoke):
    out, _ = smoke
    doc = load(out)
    assert doc["format"] == "sdpa-bench-results"
    meta = doc["meta"]
    assert meta["preset"] == "smoke" and meta["machine"]["device"] == "cpu"
    assert meta["options"]["budget_s"] == 0.005 and meta["options"]["min_reps"] == 2
    assert meta["ceilings"]["gemm_flops_fp32"] > 0 and meta["ceilings"]["copy_bytes_per_s"] > 0
    spread = meta["ceiling_spread"]["gemm_flops_fp32"]  # measured in this run: at its start and at its end
    assert spread["n"] >= 2 and spread["min"] <= meta["ceilings"]["gemm_flops_fp32"] <= spread["max"]
    keys = [(r["case"]["id"], r["impl"]) for r in doc["results"]]
    assert len(keys) == len(set(keys)) == SMOKE_POINTS
    ok = [r for r in doc["results"] if r["status"] == "ok"]
    assert {r["impl"] for r in ok} >= {"naive", "chunked", "fused", "torch_sdpa"}
    for r in ok:
        assert len(r["samples"]) >= 2 and r["median_s"] > 0 and r["peak_memory_bytes"] > 0
        assert r["max_error"] <= r["error_tolerance"]
        assert r["kernels"] and r["calls_per_sample"] >= 1  # what one profiled call ran; the sample's call count
        judged = Result.from_dict(r).on_roofline(meta["ceilings"])  # against this run's own ceilings
        assert r["roofline_pct"] == pytest.approx(judged.roofline_pct) and r["roofline_pct"] > 0
    skipped = {r["impl"]: r["reason"] for r in doc["results"] if r["status"] == "skipped"}
    assert "device=cpu" in skipped["xformers"] or "not installed" in skipped["xformers"]
    # the speed-up the CSV and the report show is in the JSON too
    assert all(r["speedup_vs_torch_sdpa"] == 1.0 for r in ok if r["impl"] == "torch_sdpa")
    assert all(r["speedup_vs_torch_sdpa"] > 0 for r in ok), [r["speedup_vs_torch_sdpa"] for r in ok]


def test_csv_rows_match_the_json(smoke):
    out, _ = smoke
    with open(out / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    by_key = {(r["case"]["id"], r["impl"]): r for r in load(out)["results"]}
    assert len(rows) == len(by_key)
    for row in rows:
        r = by_key[(row["case_id"], row["impl"])]
        assert row["status"] == r["status"] and row["dtype"] == r["case"]["dtype"]
        if r["status"] == "ok":
            assert float(row["median_s"]) == pytest.approx(r["median_s"], rel=1e-12)
            assert int(row["n_samples"]) == len(r["samples"])
            assert int(row["peak_memory_bytes"]) == r["peak_memory_bytes"]
        else:
            assert row["median_s"] == "" and row["reason"] == r["reason"]


def test_plots_are_png_images_linked_from_the_report(smoke):
    import matplotlib.image

    out, _ = smoke
    report = (out / "report.md").read_text()
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report)
    assert {"time-fwd.png", "time-fwd_bwd.png", "memory-fwd.png", "roofline.png"} <= set(links)
    for name in links:
        data = (out / name).read_bytes()
        assert data[:8] == PNG_MAGIC, name
        height, width = matplotlib.image.imread(out / name).shape[:2]
        assert width >= 600 and height >= 300, name
    assert "AMD" in report or "cpu" in report  # the machine description
    assert "## What ran" in report and "aten::_scaled_dot_product_flash_attention_for_cpu" in report
    assert "torch " in report and "| L128-E64-fp32-fwd |" in report
    # an implementation that ran nowhere: its causes over all cases, each once (fp32 and bf16 skip it differently)
    flash = next(line for line in report.splitlines() if line.startswith("- flash_attn: "))
    assert flash.count("device=cpu (supported: cuda)") == 1 and "dtype=fp32 (supported: bf16, fp16)" in flash, flash


def test_table_and_progress(smoke):
    _, proc = smoke
    assert "median time per call" in proc.stdout and "peak memory" in proc.stdout
    assert "L128-E64-bf16-causal-fwd" in proc.stdout
    header = next(line for line in proc.stdout.splitlines() if line.startswith("case "))
    assert "naive" in header and "xformers" not in header  # a column of skips becomes a note instead
    assert re.search(r"^\s+xformers: ", proc.stdout, re.M)
    lines = PROGRESS_LINE.findall(proc.stderr)  # not a terminal: one line per finished point
    assert len(lines) == SMOKE_POINTS and lines[-1][:2] == (str(SMOKE_POINTS), str(SMOKE_POINTS))


def test_report_re_renders_from_saved_results(smoke):
    out, _ = smoke
    for name in ("results.csv", "report.md", "roofline.png"):
        (out / name).unlink()
    proc = cli("report", str(out))
    assert proc.returncode == 0, proc.stderr
    assert (out / "roofline.png").read_bytes()[:8] == PNG_MAGIC
    assert "roofline.png" in (out / "report.md").read_text()
    assert len((out / "results.csv").read_text().splitlines()) == SMOKE_POINTS + 1


def test_an_unwritable_stderr_or_a_stdout_gone_keeps_the_exit_status_and_the_files(smoke, tmp_path):
    """stderr carries no answer: a full disk under `2>log` loses its lines, not the command's exit status (the error
    line failing too had given Python's 1, a CI's "regression"). A stdout whose reader went away (`| head`) ends the
    command with 141 after the files are written, not before."""
    out = tmp_path / "copy"
    shutil.copytree(smoke[0], out)
    for name in ("results.csv", "report.md"):
        (out / name).unlink()
    with open("/dev/full", "w") as full:
        for argv, code in ((["report", str(out), "--no-plots"], 0), (["report", str(tmp_path / "none")], 2)):
            done = subprocess.run([sys.executable, "-m", "sdpa_impls", *argv], stdout=subprocess.DEVNULL,
                                  stderr=full, timeout=120)
            assert done.returncode == code, argv
    (out / "report.md").unlink()
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the tables are printed
    try:
        done = subprocess.run([sys.executable, "-m", "sdpa_impls", "report", str(out), "--no-plots"], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write)
    assert done.returncode == 128 + signal.SIGPIPE and (out / "report.md").is_file(), done.stderr[-2000:]


def test_killed_run_resumes_without_repeating_finished_points(tmp_path):
    out = tmp_path / "killed"
    impls = "naive,chunked,torch_sdpa"
    total = len(preset("smoke")) * 3
    cmd = [sys.executable, "-m", "sdpa_impls", "run", "--preset", "smoke", "--impl", impls, "--out", str(out),
           *CPU, "--budget", "0.25", "--min-reps", "2", "--warmup", "1", "--no-memory"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    before: list[dict] = []
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if (out / "results.json").exists():
                before = load(out)["results"]  # atomic writes: always a complete file
                if len(before) >= 3:
                    break
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert 3 <= len(before) < total, "the run finished before it could be killed"
    saved = load(out)["results"]  # what the killed process left behind
    assert len(saved) >= len(before) and saved[:len(before)] == before
    killed_s = load(out)["meta"]["wall_s"]  # its measuring time until its last point, which a total counts
    assert killed_s > 0, killed_s

    resumed = cli("run", "--out", str(out), "--resume", env={"SDPA_BENCH_CPU_BF16": "fp32"})
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"{len(saved)} of {total} points already finished" in resumed.stderr
    ran_again = PROGRESS_LINE.findall(resumed.stderr)
    assert len(ran_again) == total - len(saved)
    assert not {(c, i) for _, _, c, i in ran_again} & {(r["case"]["id"], r["impl"]) for r in saved}
    final = load(out)["results"]
    assert len({(r["case"]["id"], r["impl"]) for r in final}) == len(final) == total
    # finished points kept as measured (same samples), not re-run; only their % of roofline is judged again,
    # against the ceilings of the whole run (the killed part's samples and the resumed part's)
    assert [{k: v for k, v in r.items() if k != "roofline_pct"} for r in final[:len(saved)]] == [
        {k: v for k, v in r.items() if k != "roofline_pct"} for r in saved]
    meta = load(out)["meta"]
    assert meta["wall_s"] > killed_s
    assert meta["ceiling_spread"]["gemm_flops_fp32"]["n"] >= 3  # the killed run's first sample, the resumed run's two
    assert (out / "report.md").exists() and (out / "results.csv").exists()
    # which code measured which points: the start and the resume, each with this checkout's source
    assert [s["first_point"] for s in meta["sessions"]] == [1, len(saved) + 1]
    assert meta["sessions"][0]["source"] == meta["sessions"][1]["source"] == source_revision()
    assert (f"points {len(saved) + 1}–{total}: {source_revision()}" in (out / "report.md").read_text())
    # a CPU variable set for the resume only: kept with that session, and said beside its points
    assert "settings" not in meta["sessions"][0] and meta["sessions"][1]["settings"] == {"SDPA_BENCH_CPU_BF16": "fp32"}
    assert ", SDPA_BENCH_CPU_BF16=fp32" in (out / "report.md").read_text().split(f"points {len(saved) + 1}–")[1]


CRASHES = CRASHES_MODULE + """
import sys
from sdpa_impls.cli import main

sys.exit(main(sys.argv[1:]))
"""


def test_a_point_whose_process_keeps_crashing_fails_and_the_rest_is_measured(tmp_path):
    """A segfault inside an implementation ends the process with no Python error: it prints where it was, the
    finished points are saved, and the point is noted in the folder. --resume measures it once more; where the
    process ends there again, the point is recorded as failed and every point after it is measured."""
    (tmp_path / "crashes.py").write_text(CRASHES)
    out = tmp_path / "crash"
    argv = [sys.executable, str(tmp_path / "crashes.py"), "run", "--preset", "smoke", "--impl", "crashes,naive",
            "--out", str(out), *FAST, "--no-memory", "--no-plots"]
    for attempt, said in enumerate(("", "the last run's process ended inside this point; measuring it again")):
        proc = subprocess.run(argv + (["--resume"] if attempt else []), capture_output=True, text=True, timeout=150)
        assert proc.returncode == -signal.SIGSEGV, proc.stderr[-2000:]
        assert "Fatal Python error: Segmentation fault" in proc.stderr and "in forward" in proc.stderr
        assert said in proc.stderr and len(load(out)["results"]) == 2  # the first case's two points
    last = subprocess.run(argv + ["--resume"], capture_output=True, text=True, timeout=150)
    assert last.returncode == 0, last.stderr[-2000:]
    assert "crashes on L128-E64-bf16-causal-fwd: a process ended inside this point 2 times" in last.stderr
    results = load(out)["results"]
    assert len(results) == 2 * len(preset("smoke"))
    failed = [r for r in results if r["status"] != "ok"]
    assert [(r["impl"], r["case"]["id"]) for r in failed] == [("crashes", "L128-E64-bf16-causal-fwd")], failed
    assert "ended inside this point 2 times with no Python error" in failed[0]["reason"]
    assert load(out)["meta"]["ended_inside"] == {"crashes on L128-E64-bf16-causal-fwd": 2}


def test_a_new_sweep_forgets_the_point_an_earlier_one_ended_inside(tmp_path):
    """--overwrite starts a new sweep: the point the replaced sweep's process ended inside is not this sweep's, and a
    resume after a kill before its first point took it for one (counted, and failed the second time)."""
    (tmp_path / "crashes.py").write_text(CRASHES)
    killed = tmp_path / "killed.py"  # the same command, killed once the new sweep is saved, before its first point
    killed.write_text("import os, sys\nfrom sdpa_impls.report import running\nnote = running.mark\n"
                      "running.mark = lambda d, case, impl='': os._exit(9) if case else note(d, None)\n"
                      + CRASHES.split("\n", 1)[1])
    out = tmp_path / "crash"
    argv = ["run", "--preset", "smoke", "--impl", "crashes,naive", "--out", str(out), *FAST, "--no-memory",
            "--no-plots"]
    proc = subprocess.run([sys.executable, str(tmp_path / "crashes.py"), *argv], capture_output=True, text=True,
                          timeout=150)
    assert proc.returncode == -signal.SIGSEGV and (out / ".sdpa-bench-point").exists(), proc.stderr[-2000:]
    proc = subprocess.run([sys.executable, str(killed), *argv, "--overwrite"], capture_output=True, text=True,
                          timeout=150)
    assert proc.returncode == 9 and load(out)["results"] == [], proc.stderr[-2000:]
    proc = subprocess.run([sys.executable, str(tmp_path / "crashes.py"), *argv, "--resume"], capture_output=True,
                          text=True, timeout=150)
    assert proc.returncode == -signal.SIGSEGV and "ended inside" not in proc.stderr, proc.stderr[-2000:]
    assert "ended_inside" not in load(out)["meta"]


HANGS = """
import ctypes, os, signal, sys, time
import torch
import sdpa_impls
from sdpa_impls.cli import main, watch
from sdpa_impls.protocol import Implementation
from sdpa_impls.registry import register

watch.HELD_GIL_GRACE_S = 1.0  # a call holding the GIL ends the process one second after the timeout


@register
class Hangs(Implementation):
    name = "hangs"

    def forward(self, inp):
        if inp.query.dtype == torch.bfloat16:  # the smoke preset's second case
            if os.environ["HOW"] == "holds-gil":
                ctypes.PyDLL(None).sleep(3600)  # a C call that keeps the GIL: no Python thread runs meanwhile
            if os.environ["HOW"] == "swallows-ctrl-c":  # a Ctrl-C that never ends the point it came in
                try:
                    os.kill(os.getpid(), signal.SIGINT)
                    time.sleep(1)
                except KeyboardInterrupt:
                    pass
            time.sleep(3600)  # as a deadlocked kernel does: never returns
        return sdpa_impls.get("naive").forward(inp)


sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("how", ["sleeps", "holds-gil", "swallows-ctrl-c"])
def test_a_point_that_never_returns_is_stopped_and_the_sweep_goes_on(tmp_path, how):
    """A point past --point-timeout is stopped: `run` prints where it is stuck, saves it as failed and runs its
    command line again in its place, which measures the rest of the sweep, all in the one command. A stuck call that
    holds the GIL (no Python thread can run) ends the process with SIGALRM and its stack, leaving the point noted for
    --resume as one a process ended inside. A Ctrl-C that came while the point hung still ends the command."""
    (tmp_path / "hangs.py").write_text(HANGS)
    out = tmp_path / "hang"
    argv = [sys.executable, str(tmp_path / "hangs.py"), "run", "--preset", "smoke", "--impl", "hangs,naive",
            "--out", str(out), *FAST, "--no-memory", "--no-plots", "--point-timeout", "2"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=150, env={**os.environ, "HOW": how})
    assert "in forward" in proc.stderr, proc.stderr[-2000:]  # the stuck thread's stack, down to the plug-in's line
    results = load(out)["results"]
    if how == "holds-gil":
        assert proc.returncode == -signal.SIGALRM, proc.stderr[-2000:]  # a shell says 142
        assert len(results) == 2 and json.loads((out / ".sdpa-bench-point").read_text()) == [
            "L128-E64-bf16-causal-fwd", "hangs"]
        return
    if how == "swallows-ctrl-c":  # the Ctrl-C still ends the command, rather than a new process that ignores it
        assert proc.returncode == 130 and len(results) == 3, proc.stderr[-2000:]
        assert proc.stderr.strip().splitlines()[-1].startswith("sdpa-bench: interrupted; 3 of 10 points are saved")
        return
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "hangs on L128-E64-bf16-causal-fwd is still running after 2s (--point-timeout)" in proc.stderr
    assert "the sweep goes on in a new process" in proc.stderr and f"resuming {out}: 3 of 10" in proc.stderr
    assert len(results) == 2 * len(preset("smoke")) and not (out / ".sdpa-bench-point").exists()
    failed = [r for r in results if r["status"] != "ok"]
    assert [(r["impl"], r["case"]["id"]) for r in failed] == [("hangs", "L128-E64-bf16-causal-fwd")], failed
    assert failed[0]["reason"].startswith("still running after 2 s (--point-timeout)")
    assert len(load(out)["meta"]["sessions"]) == 2 and (out / "report.md").exists()


def _ignores(pid: int, sig: int) -> bool:
    """Whether process `pid` ignores `sig` (Linux: SigIgn in /proc/PID/status); False once it has ended."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next((int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigIgn:")), 0)
    return bool(mask >> (sig - 1) & 1)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads signal dispositions from /proc (Linux)")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_after_the_answer_leaves_the_exit_code_of_a_finished_run(sig, tmp_path):
    """Once main() has returned, the interpreter tears itself down (0.7 s with torch), with Python's handlers the
    default again: a signal there ended a finished sweep with 130 or 143 and no word, a failure to CI. Sent once the
    process ignores it (the moment is read from /proc, not guessed with a sleep)."""
    out = tmp_path / "done"
    proc = subprocess.Popen([sys.executable, "-m", "sdpa_impls", "run", "--preset", "smoke", "--impl", "naive",
                             "--out", str(out), *FAST, "--no-memory", "--no-plots"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while proc.poll() is None and not _ignores(proc.pid, sig) and time.monotonic() < deadline:
        time.sleep(0.002)
    assert proc.poll() is None, "the process ended without ignoring the signal in its teardown"
    proc.send_signal(sig)
    assert proc.wait(60) == 0 and len(load(out)["results"]) == len(preset("smoke"))


def test_after_a_stop_both_signals_stay_ignored_also_past_an_enclosing_handler() -> None:
    """Every command runs inside main's terminate_as_interrupt, `run` and the others inside their own too: the first
    signal's ending must not be cut short by a second one once the command's returns (main's put Python's default
    handlers back, and a second SIGTERM ended a saving run with 143 unsaid)."""
    from sdpa_impls.cli.outputs import STOPS, Terminated, terminate_as_interrupt

    before = {s: signal.getsignal(s) for s in STOPS}  # SIGHUP too: a process started here would inherit it ignored
    try:
        with terminate_as_interrupt():  # main's
            with pytest.raises(Terminated), terminate_as_interrupt():  # the command's
                os.kill(os.getpid(), signal.SIGTERM)
        assert {s: signal.getsignal(s) for s in before} == {s: signal.SIG_IGN for s in before}
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


@pytest.mark.parametrize("sig, said", [("SIGTERM", "terminated (SIGTERM)"), ("SIGHUP", "hung up (SIGHUP)")])
def test_sigterm_ends_any_command_with_one_line_and_143(sig: str, said: str) -> None:
    """A command with no ending of its own (`list`, `report`, `merge`) ended by SIGTERM (a CI's cancel) exited 143
    saying nothing, where Ctrl-C says "interrupted": it says "terminated (SIGTERM)". SIGHUP (a closed terminal, a
    dropped ssh session) ends a command as SIGTERM does, a `run` saving its points and saying how to resume (it
    read as a crash inside the point, which a second hang-up there recorded as failed), with 129."""
    script = ("import os, signal, sys, threading, time\n"
              "from sdpa_impls.cli import main\n"
              "def once_running():  # the command's handler is in place: it runs\n"
              f"    while signal.getsignal(signal.{sig}) is signal.SIG_DFL:\n"
              "        time.sleep(0.001)\n"
              f"    os.kill(os.getpid(), signal.{sig})\n"
              "threading.Thread(target=once_running, daemon=True).start()\n"
              "sys.exit(main(['list', '--device', 'cpu']))\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 128 + getattr(signal, sig) and proc.stderr == f"sdpa-bench: {said}\n", proc
    # the process a `run` past --point-timeout starts in its place, stopped before it took the sweep over (as torch
    # imports): the resume line that process's sweep would have said, not "interrupted" alone
    env = {**os.environ, "SDPA_BENCH_CONTINUE": "/tmp/a sweep"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert proc.stderr == f"sdpa-bench: {said}; the finished points are saved in /tmp/a sweep; continue with: " \
                          "sdpa-bench run --out '/tmp/a sweep' --resume\n", proc


def test_sigterm_stops_a_run_the_way_ctrl_c_does(tmp_path):
    """A batch scheduler's time limit sends SIGTERM: the finished points, a report and the resume command stay (one
    that can be pasted, for a folder with a space). Meanwhile no other `run` may write the same folder."""
    out = tmp_path / "terminated run"
    cmd = [sys.executable, "-m", "sdpa_impls", "run", "--preset", "smoke", "--impl", "naive", "--out", str(out),
           *CPU, "--budget", "4", "--min-reps", "2", "--max-reps", "10000", "--warmup", "1", "--no-memory",
           "--no-plots"]  # each point four whole seconds: the run outlasts the second command, also on a busy machine
    proc = slow_run(cmd, out)
    second = cli("run", "--preset", "smoke", "--impl", "naive", "--out", str(out), "--resume", *CPU)
    assert second.returncode == 2 and "is being written by another `sdpa-bench run` (process " in second.stderr, \
        second.stderr
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    saved = load(out)["results"]
    assert 1 <= len(saved) < len(preset("smoke")), "the run finished before it could be terminated"
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert f"terminated (SIGTERM); {len(saved)} of {len(preset('smoke'))} points are saved" in err
    assert f"sdpa-bench run --out '{out}' --resume" in err.strip().splitlines()[-1] and "Traceback" not in err
    assert (out / "report.md").exists()


def test_shards_are_disjoint_and_merge_into_the_whole_preset(tmp_path):
    dirs = []
    for shard in ("1/2", "2/2"):
        d = tmp_path / f"shard{shard[0]}"
        proc = cli("run", "--preset", "smoke", "--impl", "naive", "--shard", shard, "--out", str(d), *FAST,
                   "--no-memory", "--no-plots")
        assert proc.returncode == 0, proc.stderr[-2000:]
        dirs.append(d)
    ids = [{r["case"]["id"] for r in load(d)["results"]} for d in dirs]
    assert not ids[0] & ids[1] and ids[0] | ids[1] == {c.id for c in preset("smoke")}
    merged = tmp_path / "merged"
    proc = cli("merge", str(merged), *map(str, dirs), "--no-plots")
    assert proc.returncode == 0, proc.stderr
    doc = load(merged)
    assert doc["meta"]["case_ids"] == [c.id for c in preset("smoke")] and doc["meta"]["no_plots"] is True
    drawn = tmp_path / "drawn"  # shards run with --no-plots, merged with plots: the file says what merge did
    assert cli("merge", str(drawn), *map(str, dirs)).returncode == 0
    assert "no_plots" not in load(drawn)["meta"] and list(drawn.glob("*.png"))
    assert len(doc["results"]) == len(preset("smoke")) and doc["meta"]["shard"] is None
    # each shard's start stays with its shard: the merged sweep was measured by both, not by the first one
    assert "sessions" not in doc["meta"]
    assert [m["sessions"] for m in doc["meta"]["merged_from"]] == [load(d)["meta"]["sessions"] for d in dirs]
    said = (merged / "report.md").read_text()  # and the report says which code measured each shard
    assert "Code that measured it: shard 1/2: " in said and "; shard 2/2: " in said, said[:1500]
    for d, shard in zip(dirs, ("1/2", "2/2")):  # and the ceilings each shard's points are judged against
        gemm = load(d)["meta"]["ceilings"]["gemm_flops_fp32"]
        row = rf"\| ceilings measured by shard {shard} \|[^\n]*GEMM fp32 {gemm / 1e12:.3g} TFLOP/s"
        assert re.search(row, said), said
    assert "ceilings measured in this run" not in said
    pooled = {}  # the merged sweep's own ceilings pool both shards' samples: each dtype's roof is there
    for d in dirs:
        for key, values in load(d)["meta"]["ceiling_samples"].items():
            pooled.setdefault(key, []).extend(values)
    assert doc["meta"]["ceilings"] == {k: statistics.median(v) for k, v in pooled.items() if v}
    assert doc["meta"]["ceiling_samples"] == pooled
    from sdpa_impls.report.markdown import machine_lines  # shards run on two machines: each one's is shown
    elsewhere = doc["meta"] | {"merged_from": [doc["meta"]["merged_from"][0], doc["meta"]["merged_from"][1] | {
        "machine": doc["meta"]["merged_from"][1]["machine"] | {"threads": 96}}]}
    rows = "\n".join(machine_lines(elsewhere))
    assert "| CPU, shard 1/2 |" in rows and re.search(r"\| CPU, shard 2/2 \| .*, 96 torch threads \|", rows), rows
    assert "| CPU |" in said and "shard 1/2 |" not in said.split("ceilings measured by")[0]
    again = cli("merge", str(tmp_path / "twice"), str(dirs[0]), str(dirs[0]))
    assert again.returncode == 2 and "is one shard given twice" in again.stderr
    cut = tmp_path / "cut shard"  # a shard left unfinished: its missing points are that shard's to measure, on its
    cut.mkdir()  # machine; `run --resume` of the merged folder measured them here, as its report told it to
    doc = load(dirs[1])
    doc["results"] = doc["results"][:-1]
    (cut / "results.json").write_text(json.dumps(doc))
    partial = tmp_path / "partial"
    proc = cli("merge", str(partial), str(dirs[0]), str(cut), "--no-plots")
    assert proc.returncode == 0 and f"resume the unfinished shards ({cut}); then merge" in proc.stderr, proc.stderr
    said = (partial / "report.md").read_text()
    assert f"resume the unfinished shards, {cut}, then merge them again" in said and "--resume`" \
        not in said, said[:2000]  # the finished shard is not named as one to resume
    proc = cli("run", "--out", str(partial), "--resume", *FAST)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].endswith(
        f"{partial} was merged from shards ({dirs[0]}, {cut}): resume the unfinished shards ({cut}), then merge them "
        "again into a new --out"), proc.stderr
    proc = cli("run", "--out", str(merged), "--resume")  # a whole merge: nothing to measure, its report again, 0
    assert proc.returncode == 0 and "nothing left to measure" in proc.stderr, proc.stderr[-2000:]
    proc = cli("run", "--out", str(merged), "--resume", "--preset", "cpu")  # was taken: exit 0, nothing checked
    assert proc.returncode == 2 and "not --preset cpu" in proc.stderr, proc.stderr[-2000:]
    other = tmp_path / "other-seed"  # shard 2 again, measured otherwise: not a part of the same sweep
    proc = cli("run", "--preset", "smoke", "--impl", "naive", "--shard", "2/2", "--out", str(other), *FAST,
               "--no-memory", "--no-plots", "--seed", "7")
    assert proc.returncode == 0, proc.stderr[-2000:]
    mixed = cli("merge", str(tmp_path / "mixed"), str(dirs[0]), str(other))
    assert mixed.returncode == 2 and "were run with different seeds (0 against 7)" in mixed.stderr, mixed.stderr
    edited = []  # the same implementations named in another order are the same points; a timing option that
    for d, impls, budget in zip(dirs, (["naive", "torch_sdpa"], ["torch_sdpa", "naive"]), (0.005, 0.5)):  # differs
        doc = load(d)  # is named alone, not as two whole option tables
        doc["meta"]["impls"], doc["meta"]["options"]["budget_s"] = impls, budget
        (tmp_path / f"edited{len(edited)}").mkdir()
        (tmp_path / f"edited{len(edited)}" / "results.json").write_text(json.dumps(doc))
        edited.append(str(tmp_path / f"edited{len(edited)}"))
    proc = cli("merge", str(tmp_path / "reordered"), *edited, "--no-plots")
    assert proc.returncode == 2 and "timing options (budget_s 0.005 against" in proc.stderr, proc.stderr
    doc = load(Path(edited[1]))
    doc["meta"]["options"]["budget_s"] = 0.005
    (Path(edited[1]) / "results.json").write_text(json.dumps(doc))
    proc = cli("merge", str(tmp_path / "reordered"), *edited, "--no-plots")
    assert proc.returncode == 0 and load(tmp_path / "reordered")["meta"]["impls"] == ["naive", "torch_sdpa"], proc.stderr
    older = copy.deepcopy(doc)  # a shard of an older version, whose preset had a case this one lacks: kept, with
    row = older["results"][0]["case"]  # its rows, after the preset's (merge dropped the id, and the file it wrote
    gone = row["id"]  # was corrupt to its own reader)
    row["lq"], row["lk"], row["id"] = 129, 129, gone.replace("L128", "L129")
    older["meta"]["case_ids"] = [row["id"] if c == gone else c for c in older["meta"]["case_ids"]]
    (tmp_path / "older").mkdir()
    (tmp_path / "older" / "results.json").write_text(json.dumps(older))
    proc = cli("merge", str(tmp_path / "with-older"), edited[0], str(tmp_path / "older"), "--no-plots")
    assert proc.returncode == 0 and cli("report", str(tmp_path / "with-older"), "--no-plots").returncode == 0
    assert load(tmp_path / "with-older")["meta"]["case_ids"][-1] == row["id"], proc.stderr
    assert "1 of the 5 cases of preset smoke are in none of these shards" in proc.stderr  # the renamed one's own
    doc["meta"]["machine"]["threads"] = 96  # a shard of another machine: said, since compare then judges no time
    (Path(edited[1]) / "results.json").write_text(json.dumps(doc))
    proc = cli("merge", str(tmp_path / "two-machines"), *edited, "--no-plots")
    assert proc.returncode == 0 and "note: the shards ran on different machines (threads: " in proc.stderr, proc.stderr


def test_list_shows_every_implementation_and_why_xformers_cannot_run(tmp_path):
    proc = cli("list", *CPU)
    assert proc.returncode == 0, proc.stderr
    for name in names():
        assert re.search(rf"^{name}\s", proc.stdout, re.M), name
    line = next(line for line in proc.stdout.splitlines() if line.startswith("xformers "))
    assert line.split()[1:4] == ["no", "no", "no"]
    assert "device=cpu (supported: cuda)" in proc.stdout or "not installed" in line
    assert re.search(r"^naive\s+yes\s+yes\s+yes", proc.stdout, re.M)
    versions = next(line for line in proc.stdout.splitlines() if line.startswith("versions:"))
    assert "torch 2." in versions and "xformers" in versions and "CUDA" in versions
    table = proc.stdout.split("why not\n", 1)[1].split("\n\n", 1)[0]
    blocks = re.split(r"\n(?=\S)", table)  # an implementation's line and the reasons under it
    assert len(blocks) == len(names())
    from sdpa_impls.cli.list import DTYPES, FEATURES
    label = "|".join(re.escape(k) for k in [*DTYPES, *FEATURES])
    for block in blocks:
        first, *rest = block.splitlines()
        reasons = [re.sub(rf"^(?:(?:{label})(?:, )?)+: ", "", line.strip())
                   for line in [first.split("  ")[-1], *rest] if line.strip() not in ("", "yes", "no", "-")]
        assert len(reasons) == len(set(reasons)), block  # each reason said once, not once per dtype


def test_a_reader_that_goes_away_is_no_error_of_the_tool():
    """`sdpa-bench list | head -1`: the pipe closes before the tool has written; the status is the one a shell gives a
    writer its pipe stopped (141), with no message, not exit 2 and "an error sdpa-bench did not foresee"."""
    proc = subprocess.Popen([sys.executable, "-m", "sdpa_impls", "list", *CPU], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # the reader is gone before the first line
    err = proc.stderr.read()
    assert proc.wait(timeout=150) == 141 and not err.strip(), err


def test_list_says_each_reason_once_and_labels_what_it_stops():
    from sdpa_impls.cli.list import _grouped
    everywhere = {"fp32": ["a", "b", "fp32 is not supported"], "bf16": ["a", "b"], "fp16": ["a", "b"]}
    assert _grouped(everywhere, nothing_runs=True) == ["a", "b", "fp32: fp32 is not supported"]
    assert _grouped({"bwd": ["no backward"]}, nothing_runs=False) == ["bwd: no backward"]
    assert _grouped({"fp16": ["x"], "bwd": ["x", "y"]}, nothing_runs=False) == ["fp16, bwd: x", "bwd: y"]


@pytest.mark.parametrize("args, message", [
    (["run", "--preset", "nope"], "unknown preset 'nope'"),
    (["run", "--preset", "smoke", "--impl", "naive,nope"], "unknown implementation 'nope'"),
    (["run", "--preset", "smoke", "--shard", "3/2"], "need 1 <= I <= N"),
    (["run", "--preset", "smoke", "--shard", "half"], "must look like I/N"),
    (["run", "--preset", "smoke", "--shard", "7/7"], "preset smoke has 5 cases, so shard 7 holds none"),
    (["run", "--preset", "smoke", "--point-timeout", "1e10"], "--point-timeout must be at most 604800 seconds"),
    (["run", "--preset", "smoke", "--min-sample", "100"], "--min-sample must be at most 10 seconds; got 100"),
    (["run", "--preset", "smoke", "--budget", "-1"], "--budget must be >= 0"),
    (["run", "--preset", "smoke", "--device", "cpu", "--cuda-graph"], "--cuda-graph needs --device cuda"),
    *[pytest.param([cmd, "--device", "cuda"], "--device cuda: no CUDA device is available to this torch (",
                   marks=pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here"))
      for cmd in ("run", "list")],
    (["run", "--preset", "smoke", "--min-sample", "-1"], "--min-sample must be >= 0"),
    (["run", "--preset", "smoke", "--min-sample", "nan"], "--min-sample must be >= 0 seconds and finite; got nan"),
    (["run", "--preset", "smoke", "--budget", "inf"], "--budget must be >= 0 seconds and finite; got inf"),
    (["report", "{tmp}/nothing-here"], "does not exist"),
    # what argparse refuses is one line too, not the usage block before it
    (["continuous", "--preset", "smok"], "sdpa-bench continuous: error: argument --preset: invalid choice: 'smok'"),
    (["run", "--budget", "x"], "sdpa-bench run: error: argument --budget: invalid float value: 'x'"),
    (["nope"], "sdpa-bench: error: argument COMMAND: invalid choice: 'nope'"),
    (["run", "--budgt", "1"], "sdpa-bench run: error: unrecognized arguments: --budgt 1 (see `sdpa-bench run --help`)"),
    (["--budgt", "list"], "sdpa-bench: error: unrecognized arguments: --budgt (see `sdpa-bench --help`)"),
    (["gate", "--baseline", "{tmp}/a.json", "--candidate", "{tmp}/b.json"], "a.json, {tmp}/b.json: no such files (pytest-benchmark writes none where no benchmark was timed"),
])
def test_user_errors_exit_2_with_one_clear_message(tmp_path, args, message):
    proc = cli(*[a.replace("{tmp}", str(tmp_path)) for a in args], cwd=tmp_path)  # a run let through writes there
    assert proc.returncode == 2
    assert message.replace("{tmp}", str(tmp_path)) in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.count("error:") == 1 and proc.stderr.count("\n") == 1, proc.stderr


def test_version_names_the_package() -> None:
    import sdpa_impls

    proc = cli("--version")
    assert proc.returncode == 0 and proc.stdout == f"sdpa-bench {sdpa_impls.__version__}\n", proc


def test_overwrite_deletes_no_other_tools_results_json(tmp_path):
    """--overwrite removes what a run wrote; a folder holding another tool's results.json (and its report.md) is
    refused whole, as is a results.json that is a folder, and nothing in it is deleted."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "results.json").write_text('{"accuracy": 0.91}')
    (other / "report.md").write_text("their report")
    for extra in ((), ("--overwrite",)):
        proc = cli("run", "--preset", "smoke", "--impl", "naive", "--out", str(other), *extra, *FAST)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert "is not an sdpa-bench results file" in proc.stderr and "choose another --out" in proc.stderr
    assert (other / "results.json").read_text() == '{"accuracy": 0.91}' and (other / "report.md").exists()
    from sdpa_impls.report.results import not_a_sweep
    (other / "results.json").write_text('{"format":"sdpa-bench-results","version":1,"meta":{')  # compact, cut short
    assert not_a_sweep(other) is None  # a sweep of ours, which --overwrite may replace
    (tmp_path / "dir" / "results.json").mkdir(parents=True)
    proc = cli("run", "--preset", "smoke", "--out", str(tmp_path / "dir"), "--overwrite", *FAST)
    assert proc.returncode == 2 and "results.json is a folder" in proc.stderr and "Traceback" not in proc.stderr


def test_unwritable_out_corrupt_resume_and_existing_results_exit_2(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    proc = cli("run", "--preset", "smoke", "--out", str(blocker / "out"))
    assert proc.returncode == 2 and "cannot write to output folder" in proc.stderr
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "results.json").write_text('{"format": "sdpa-bench-results", "meta": {')  # cut short
    proc = cli("run", "--preset", "smoke", "--out", str(corrupt), "--resume")
    assert proc.returncode == 2 and "is not valid JSON" in proc.stderr and "Traceback" not in proc.stderr
    proc = cli("run", "--preset", "smoke", "--out", str(corrupt))
    assert proc.returncode == 2 and "--resume" in proc.stderr
    assert (corrupt / "results.json").read_text().endswith('"meta": {')  # never overwritten unasked
    proc = cli("run", "--preset", "smoke", "--impl", "naive", "--out", str(corrupt), "--overwrite", *FAST,
               "--no-memory", "--no-plots")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(load(corrupt)["results"]) == len(preset("smoke"))
    doc = load(corrupt)  # edited by hand: the right keys holding the wrong things, or a point twice
    for name, edit, said in (("none", {"impls": None}, "meta.impls should be a list, not NoneType"),
                             ("twice", None, "is there twice")):
        damaged = tmp_path / name
        damaged.mkdir()
        text = copy.deepcopy(doc)
        if edit:
            text["meta"] |= edit
        else:
            text["results"].append(text["results"][0])
        (damaged / "results.json").write_text(json.dumps(text))
        proc = cli("report", str(damaged))
        assert proc.returncode == 2 and said in proc.stderr and str(damaged) in proc.stderr, proc.stderr
        assert proc.stderr.count("\n") == 1, proc.stderr
    (corrupt / "report.md").unlink()
    (corrupt / "report.md").mkdir()  # a folder where the report goes: the results stay, and the message says so
    proc = cli("report", str(corrupt))
    assert proc.returncode == 2 and "report.md: cannot write" in proc.stderr and "are saved" in proc.stderr


def test_a_resume_with_other_options_is_refused_in_the_options_words(smoke):
    out, _ = smoke  # measured with memory, unsharded
    for flag, said in ((["--no-memory"], "holds a sweep with memory measured, not --no-memory"),
                       (["--shard", "1/2"], "holds a sweep with no --shard, not --shard 1/2")):
        proc = cli("run", "--preset", "smoke", "--out", str(out), "--resume", *flag)
        assert proc.returncode == 2 and said in proc.stderr, proc.stderr


def test_a_resume_in_a_project_whose_table_sets_other_defaults_continues_the_sweep(smoke, tmp_path):
    """The command an interrupted run prints (`run --out DIR --resume`), run in a plug-in's folder whose
    [tool.sdpa_bench.run] names another preset and implementations: the sweep's own settings go on; the same values
    typed on the command line are still refused."""
    out, _ = smoke
    project = tmp_path / "plugin"
    project.mkdir()
    (project / "pyproject.toml").write_text('[tool.sdpa_bench.run]\npreset = "quick"\nimpl = ["naive"]\nseed = 7\n'
                                           "budget = 0.5\n")
    proc = cli("run", "--out", str(out), "--resume", cwd=project)
    assert proc.returncode == 0 and "nothing left to measure" in proc.stderr + proc.stdout, proc.stderr
    proc = cli("run", "--out", str(out), "--resume", "--preset", "quick", cwd=project)
    assert proc.returncode == 2 and "holds a sweep with --preset smoke, not --preset quick" in proc.stderr


def test_an_older_versions_sweep_is_read_as_it_is_and_resumed_only_by_its_version(smoke, tmp_path):
    """A sweep written by an older sdpa-bench had been resumed silently (its points recording less than the new
    ones), refused as "another machine", and re-rendered with timing and ceilings its file does not state."""
    old = tmp_path / "old"
    old.mkdir()
    doc = load(smoke[0])
    doc["version"] = 1
    doc["meta"]["options"].pop("min_sample_s")
    doc["meta"].pop("ceiling_samples")
    doc["results"] = doc["results"][:3]  # unfinished
    (old / "results.json").write_text(json.dumps(doc))
    proc = cli("run", "--preset", "smoke", "--out", str(old), "--resume", *FAST)
    assert proc.returncode == 2 and "was started by an older sdpa-bench (results format 1; this one resumes only format 2" in \
        proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert cli("report", "--no-plots", str(old)).returncode == 0
    report = (old / "report.md").read_text()
    assert "how many calls each sample timed: unsaid" in report and "lasting at least" not in report, report[:3000]
    assert "ceilings (where measured: unsaid in an older file)" in report and "measured in this run" not in report
    assert load(old)["version"] == 1 and len(load(old)["results"]) == 3  # read as it is, not relabelled
    doc["version"] = 3
    (old / "results.json").write_text(json.dumps(doc))
    proc = cli("report", str(old))
    assert proc.returncode == 2 and "reads 1, 2; a newer sdpa-bench wrote it: upgrade this one" in proc.stderr


def test_compare_puts_two_sweeps_side_by_side_through_the_gate(smoke, tmp_path):
    out, _ = smoke
    (tmp_path / "link").symlink_to(out)  # a sweep against itself passes whatever it holds
    same = cli("compare", str(out), str(tmp_path / "link"))
    assert same.returncode == 2 and same.stderr.strip().splitlines() == [
        f"sdpa-bench compare: error: {out} and {tmp_path / 'link'} are one sweep: compare it with another"], same.stderr
    twin = shutil.copytree(out, tmp_path / "twin")
    proc = cli("compare", str(out), str(twin))
    assert proc.returncode == 0 and "note" not in proc.stderr, proc.stderr
    measured = [r for r in load(out)["results"] if r["status"] != "skipped"]
    for r in measured:
        row = next(line for line in proc.stdout.splitlines() if line.startswith(f"{r['impl']}[{r['case']['id']}]"))
        verdict = "pass, time is the reference" if r["impl"] == "torch_sdpa" else "pass"  # the gate's default
        assert "×1.00" in row and row.rstrip().endswith(f"  {verdict}")
    assert "xformers[" not in proc.stdout  # skipped points are not measurements
    doc = load(twin)  # an unfinished sweep: its points not yet measured are said to be so, beside the rows missing
    doc["results"] = doc["results"][:-1]
    (twin / "results.json").write_text(json.dumps(doc))
    proc = cli("compare", str(out), str(twin))
    assert proc.returncode == 0 and (f"note: {twin} is unfinished ({len(doc['results'])} of {len(doc['results']) + 1} "
                                     "points): the points it lacks are not measured yet") in proc.stderr, proc.stderr
    missing = cli("compare", str(out), str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr and "Traceback" not in missing.stderr


def test_impl_names_are_repeated_or_comma_separated_in_every_command() -> None:
    from sdpa_impls.cli.outputs import impl_names
    from sdpa_impls.errors import UsageError

    assert impl_names(["fused,naive", " torch_sdpa ", "naive"]) == ("fused", "naive", "torch_sdpa")
    assert impl_names(None) == ()
    for typo in ([","], ["naive", ","], ["naive,,fused"], ["naive,"]):  # an empty name is a typo, never skipped
        with pytest.raises(UsageError, match="empty name between commas|names no implementation"):
            impl_names(typo)


def test_a_session_on_busy_cpus_says_so_in_the_report() -> None:
    from sdpa_impls.report.markdown import sessions_text

    meta = {"sessions": [{"first_point": 1, "source": "abc1234", "started": "t0"},
                         {"first_point": 4, "source": "abc1234", "started": "t1", "load_average": 1.93}]}
    text = sessions_text(meta, 6)
    assert "points 1–3: abc1234, started t0;" in text
    assert "points 4–6: abc1234, started t1 on busy CPUs (load average 1.93" in text


def test_an_implementation_that_fails_every_point_fails_the_run(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A kernel that raises on every case measured nothing: `run` exits 1 and names it (a failed point among measured
    ones stays a result, exit 0), so a CI job that runs a plug-in does not pass on a kernel that never ran."""
    import sdpa_impls
    from sdpa_impls import registry
    from sdpa_impls.cli import main
    from sdpa_impls.impls.naive import Naive

    class Raises(Naive):
        name = "test_raises_always"

        def forward(self, inp):
            raise RuntimeError("kernel exploded")

    class RaisesOnce(Naive):  # fails the first smoke case only
        name = "test_raises_once"

        def forward(self, inp):
            if inp.query.shape[-2] == preset("smoke")[0].lq and not inp.is_causal:
                raise RuntimeError("one bad shape")
            return super().forward(inp)

    for cls in (Raises, RaisesOnce):
        sdpa_impls.register(cls)
    try:
        rc = main(["run", "--preset", "smoke", "--impl", "test_raises_once,naive", "--out", str(tmp_path / "a"),
                   "--no-plots", *FAST])
        assert rc == 0, capsys.readouterr().err[-2000:]
        assert "failed on every point" not in capsys.readouterr().err
        once = {r["status"] for r in load(tmp_path / "a")["results"] if r["impl"] == "test_raises_once"}
        assert once == {"ok", "failed"}, once
        rc = main(["run", "--preset", "smoke", "--impl", "test_raises_always,naive", "--out", str(tmp_path / "b"),
                   "--no-plots", *FAST])
        err = capsys.readouterr().err
        assert rc == 1, err[-2000:]
        line = [x for x in err.splitlines() if "failed on every point" in x]
        assert len(line) == 1 and "test_raises_always" in line[0] and "kernel exploded" in line[0], err[-2000:]
        assert all(r["status"] == "ok" for r in load(tmp_path / "b")["results"] if r["impl"] == "naive")
    finally:
        for cls in (Raises, RaisesOnce):
            registry._REGISTRY.pop(cls.name, None)
