"""How a `run` ends when something other than a point goes wrong: a file that cannot be written, a second signal
while the first one's ending saves, a plug-in that no longer loads for the resume, a sweep resumed with nothing
left. Finished points are never lost, and a point is blamed only for what happened inside it."""
from __future__ import annotations

import fcntl
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from sdpa_impls import registry
from sdpa_impls.bench.grid import preset
from sdpa_impls.cli import main, watch
from sdpa_impls.report import aside
from sdpa_impls.report.writer_lock import only_writer
from sdpa_impls.impls.naive import Naive
from test_cli import HANGS, slow_run

FAST = ["--device", "cpu", "--budget", "0.005", "--min-reps", "2", "--warmup", "1", "--no-memory", "--no-plots"]
SMOKE = ["run", "--preset", "smoke"]


def load(directory: Path) -> dict:
    return json.loads((directory / "results.json").read_text())


def test_a_finished_sweep_resumed_measures_nothing_and_keeps_its_results(tmp_path, capsys):
    """Resuming a finished sweep (a CI that always passes --resume) changes nothing: not the ceilings its points were
    judged against, not their rooflines, not its list of sessions, nor its --no-plots."""
    out = tmp_path / "done"
    assert main([*SMOKE, "--impl", "naive", "--out", str(out), *FAST]) == 0
    before = (out / "results.json").read_bytes()
    capsys.readouterr()
    assert main([*SMOKE, "--impl", "naive", "--out", str(out), "--resume"]) == 0  # --no-plots kept from the start
    err = capsys.readouterr().err
    assert not list(out.rglob("*.png")), "a sweep started with --no-plots drew plots when resumed"
    assert f"nothing left to measure: {len(preset('smoke'))} points" in err and "measuring" not in err, err
    assert "results.json unchanged; wrote" in err and f"{out / 'results.json'}" not in err, err  # not written
    assert (out / "results.json").read_bytes() == before


def test_plots_given_to_the_resume_of_a_sweep_started_without_them_draw_them(tmp_path, capsys) -> None:
    """--plots on the resume of a sweep run with --no-plots is honoured, as --no-plots on a resume is: the resume
    draws them and its later resumes do too (it was taken for "not given" and ignored, no PNG and no word)."""
    out = tmp_path / "plain"
    assert main([*SMOKE, "--impl", "naive", "--out", str(out), *FAST]) == 0
    doc = load(out)
    doc["results"], doc["meta"] = doc["results"][:-1], {k: v for k, v in doc["meta"].items() if k != "finished"}
    (out / "results.json").write_text(json.dumps(doc))
    assert main([*SMOKE, "--impl", "naive", "--out", str(out), "--resume", "--plots"]) == 0
    assert list(out.glob("*.png")), "--plots on the resume drew no plots"
    assert load(out)["meta"]["no_plots"] is False and "finished" in load(out)["meta"]


def test_a_resume_keeps_the_point_timeout_and_counts_its_own_points(tmp_path, capsys) -> None:
    """--point-timeout is kept with the sweep: a resume without it goes on with the sweep's (its `continue with:`
    line names no option, and the default 1800 s came back), and one that gives it changes it. The closing line
    counts the points of this session, beside the sweep's whole (a resume of 2 points said "5 points in 1s")."""
    out, n = tmp_path / "kept", len(preset("smoke"))
    assert main([*SMOKE, "--impl", "naive", "--out", str(out), *FAST, "--point-timeout", "0"]) == 0
    assert load(out)["meta"]["point_timeout"] == 0.0 and f"{n} points in " in capsys.readouterr().err

    def unfinish(keep: int) -> None:
        doc = load(out)
        doc["results"], doc["meta"] = doc["results"][:keep], {k: v for k, v in doc["meta"].items() if k != "finished"}
        (out / "results.json").write_text(json.dumps(doc))
    unfinish(n - 2)
    assert main([*SMOKE, "--impl", "naive", "--out", str(out), "--resume"]) == 0
    err = capsys.readouterr().err
    assert load(out)["meta"]["point_timeout"] == 0.0 and f"2 points in " in err and f"({n} in all, measured in " in err
    unfinish(n - 1)
    assert main([*SMOKE, "--impl", "naive", "--out", str(out), "--resume", "--point-timeout", "7"]) == 0
    assert load(out)["meta"]["point_timeout"] == 7.0 and "\n1 point in " in capsys.readouterr().err
    doc = load(out)
    doc["meta"]["point_timeout"], doc["results"] = "soon", doc["results"][:-1]
    del doc["meta"]["finished"]
    (out / "results.json").write_text(json.dumps(doc))
    for argv in ([*SMOKE, "--impl", "naive", "--out", str(out), "--resume"], ["report", str(out)]):
        assert main(argv) == 2  # hand-edited: the file and the field named, exit 2
        err = capsys.readouterr().err
        assert f"{out / 'results.json'} has a malformed entry" in err and "meta.point_timeout should be" in err, err
    doc["meta"]["point_timeout"], doc["meta"]["options"]["budget_s"] = 4.0, 5.0  # measured with --budget 5
    (out / "results.json").write_text(json.dumps(doc))
    for given in ([], ["--point-timeout", "2"]):  # the saved 4 s, or 2 s given: either stops points still measuring
        assert main([*SMOKE, "--impl", "naive", "--out", str(out), "--resume", *given]) == 2
        err = capsys.readouterr().err
        assert f"--point-timeout {(given or ['', '4'])[1]} would stop points that are still measuring: each measures " \
               "for up to --budget 5 s" in err, err
    assert len(load(out)["results"]) == n - 1  # nothing measured
    meta: dict = {}  # where nothing was given or kept: the default, or 4 budgets where those are longer
    assert watch.kept(None, meta, 1.0) == watch.DEFAULT_S and watch.kept(None, {}, 3600.0) == 4 * 3600.0


def test_a_shard_is_checked_against_its_own_preset_on_resume(tmp_path, capsys) -> None:
    """Shard 90 of 96 holds a case of `masks` (96 cases) and none of the CPU's default preset (`cpu`, 80): a resume
    that names the shard, not the preset (as the resume's own refusal says to), goes on with the saved preset; a new
    sweep of that shard of `cpu` is refused before any folder is made. (cudnn_frontend skips on the CPU: no L 8192
    point is measured, and a sweep of skips alone is exit 2.)"""
    out = tmp_path / "masks-90"
    assert main(["run", "--preset", "masks", "--shard", "90/96", "--impl", "cudnn_frontend", "--out", str(out),
                 *FAST]) == 2
    capsys.readouterr()
    assert main(["run", "--device", "cpu", "--shard", "90/96", "--out", str(out), "--resume", "--no-plots"]) == 2
    assert "nothing left to measure: 1 points" in capsys.readouterr().err
    assert main(["run", "--device", "cpu", "--shard", "90/96", "--out", str(tmp_path / "new"), *FAST]) == 2
    assert "preset cpu has 80 cases, so shard 90 holds none" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def _file_size_limit() -> None:  # in the child: writes past 6 kB fail with EFBIG, as on a full disk
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (6000, 6000))


def test_a_save_that_fails_keeps_the_saved_points_and_blames_no_point(tmp_path):
    """results.json that cannot be written (here a file-size limit; a full disk is the same error) ends the run with
    one line and exit 2: the file keeps the points saved before, no temp file is left to fill the disk, and the
    point being measured is not noted as one the process died in, so --resume measures it without a crash note."""
    out = tmp_path / "full"
    cmd = [sys.executable, "-m", "sdpa_impls", *SMOKE, "--impl", "naive", "--out", str(out), *FAST]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=150, preexec_fn=_file_size_limit)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and last.startswith(f"sdpa-bench run: error: cannot save {out / 'results.json'}: "), \
        proc.stderr[-2000:]
    assert last.endswith(f"it holds what was saved before (make room, then continue with: sdpa-bench run --out {out} "
                         "--resume)") and "Traceback" not in proc.stderr, last
    assert sorted(p.name for p in out.iterdir()) == ["results.json"]
    kept = len(load(out)["results"])
    assert kept < len(preset("smoke"))
    proc = subprocess.run([*cmd, "--resume"], capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0 and "ended inside" not in proc.stderr, proc.stderr[-2000:]
    assert f"resuming {out}: {kept} of {len(preset('smoke'))}" in proc.stderr
    assert len(load(out)["results"]) == len(preset("smoke"))


def test_sigterm_after_ctrl_c_does_not_cut_the_ending_short(tmp_path):
    """A CI cancels a job with SIGINT and then SIGTERM: the first signal's ending runs whole (saved points, report,
    the resume command last) and its exit code stands (130), whatever the second arrives during."""
    out = tmp_path / "cancelled"
    cmd = [sys.executable, "-m", "sdpa_impls", *SMOKE, "--impl", "naive", "--out", str(out), "--device", "cpu",
           "--budget", "1", "--min-reps", "2", "--max-reps", "10000", "--warmup", "1", "--no-memory", "--no-plots"]
    proc = slow_run(cmd, out)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.02)
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    saved = len(load(out)["results"])
    assert proc.returncode == 130 and 1 <= saved < len(preset("smoke")), err[-2000:]
    assert f"interrupted; {saved} of {len(preset('smoke'))} points are saved" in err.strip().splitlines()[-1]
    assert (out / "report.md").exists() and "Traceback" not in err


HELD = """
import signal, sys, time
from pathlib import Path
from sdpa_impls.cli import main, watch
from sdpa_impls.impls.naive import Naive
from sdpa_impls.registry import register

STOPS = {signal.SIGINT, signal.SIGTERM}


@register
class Held(Naive):
    name = "held"
    held = False

    def forward(self, inp):  # once a point is saved, both signals wait for the end of one call, as a torch call holds them
        if not Held.held and (Path(sys.argv[1]) / "results.json").exists():
            Held.held = True
            signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
            print("holding", file=sys.stderr, flush=True)
            while not STOPS <= signal.sigpending():
                time.sleep(0.005)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
        return super().forward(inp)


sys.exit(main(["run", "--preset", "smoke", "--impl", "held", "--out", sys.argv[1], "--device", "cpu", "--budget",
               "0.005", "--min-reps", "2", "--warmup", "1", "--no-memory", "--no-plots"]))
"""


def test_ctrl_c_and_sigterm_caught_together_end_as_interrupted_without_a_word_of_the_second(tmp_path):
    """A CI's SIGINT and SIGTERM can both arrive while one torch call runs, and Python then handles them one after
    the other: the second, already on its way when the first ignored it, is ignored without Python's "ignored due to
    race condition" traceback, which read as a crash above the interrupted run's last line."""
    (tmp_path / "held.py").write_text(HELD)
    out = tmp_path / "both"
    proc = subprocess.Popen([sys.executable, str(tmp_path / "held.py"), str(out)], stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    head = []
    while not head or head[-1] not in ("holding\n", ""):
        head.append(proc.stderr.readline())
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGTERM)
    err = "".join(head) + proc.communicate(timeout=120)[1]
    saved = len(load(out)["results"])
    assert proc.returncode == 130 and "Traceback" not in err and "race" not in err, err[-2000:]
    assert f"interrupted; {saved} of {len(preset('smoke'))} points are saved" in err.strip().splitlines()[-1], err


class Flaky(Naive):
    name = "flaky"


def test_a_plugin_that_no_longer_loads_stops_the_resume(tmp_path, monkeypatch, capsys):
    """A plug-in that measured part of a sweep and fails to load for its resume would have its points left saved as
    skipped ("failed to load"), and a later resume, with it mended, would never measure them: the resume stops."""
    monkeypatch.setitem(registry._REGISTRY, "flaky", Flaky())
    out = tmp_path / "half"
    assert main([*SMOKE, "--impl", "flaky,naive", "--out", str(out), *FAST]) == 0
    doc = load(out)  # as an interrupted sweep leaves it: flaky's last points not measured yet
    doc["results"] = [r for r in doc["results"] if r["impl"] != "flaky" or r["case"]["id"] == doc["meta"]["case_ids"][0]]
    del doc["meta"]["finished"]
    (out / "results.json").write_text(json.dumps(doc))
    monkeypatch.setitem(registry._REGISTRY, "flaky", registry.BrokenPlugin("flaky", "ImportError: no module x"))
    capsys.readouterr()
    assert main([*SMOKE, "--out", str(out), "--resume", "--no-plots"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"sdpa-bench run: error: {out}: cannot resume: plug-in 'flaky' failed to load: ImportError: no "
                   "module x (its points left would be skipped for good; mend it and resume again)"), err
    assert load(out) == doc


WRAPPER = """
import sys, time
import sdpa_impls
from sdpa_impls.cli import main, watch
from sdpa_impls.impls.naive import Naive
from sdpa_impls.registry import register


@register
class Slow(Naive):
    name = "slow"

    def forward(self, inp):
        time.sleep(0.25)
        return super().forward(inp)


sys.argv[1:] = ["run", "--preset", "smoke", "--impl", "slow", "--out", sys.argv[1], "--point-timeout", "0.1",
                "--device", "cpu", "--budget", "0", "--min-reps", "1", "--max-reps", "1", "--warmup", "0",
                "--no-memory", "--no-plots"]
sys.exit(main(sys.argv[1:]))
"""


def test_a_script_that_sets_its_own_arguments_is_not_run_again_by_the_point_timeout(tmp_path):
    """--point-timeout replaces the process with its own command line. A script that builds the arguments itself
    (and may clear its output first) is not that command line: it gets no point timeout, rather than a loop of
    restarts that never finishes."""
    (tmp_path / "wrapper.py").write_text(WRAPPER)
    out = tmp_path / "wrapped"
    proc = subprocess.run([sys.executable, str(tmp_path / "wrapper.py"), str(out)], capture_output=True, text=True,
                          timeout=150)
    assert proc.returncode == 0 and "--point-timeout" not in proc.stderr, proc.stderr[-2000:]
    assert [r["status"] for r in load(out)["results"]] == ["ok"] * len(preset("smoke"))


def test_the_process_that_replaces_a_timed_out_one_keeps_the_folder_locked(tmp_path):
    """--point-timeout replaces the process (exec): the folder's lock goes with it, held at every moment, so that no
    `run --resume` started meanwhile takes the folder (and the replaced run's own job then fails on it)."""
    (tmp_path / "hangs.py").write_text(HANGS)
    out = tmp_path / "hang"
    proc = subprocess.Popen([sys.executable, str(tmp_path / "hangs.py"), *SMOKE, "--impl", "hangs,naive", "--out",
                             str(out), *FAST, "--point-timeout", "2"], stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "HOW": "sleeps"})
    lines: list[str] = []
    threading.Thread(target=lambda: [lines.append(line) for line in proc.stderr], daemon=True).start()

    def said(text: str) -> bool:
        return any(text in line for line in lines)
    deadline = time.monotonic() + 120
    while not said("the sweep goes on in a new process") and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    free = False
    with open(out / ".sdpa-bench-run.lock", "a+") as lock:  # another run's try, again and again, until it resumes
        while not free and not said("resuming") and proc.poll() is None and time.monotonic() < deadline:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                free = True
                fcntl.flock(lock, fcntl.LOCK_UN)
            except BlockingIOError:
                time.sleep(0.01)
    proc.wait(timeout=150)
    assert said("resuming") and not free, "".join(lines)[-2000:]
    assert proc.returncode == 0, "".join(lines)[-2000:]


def test_overwrite_keeps_the_sweep_it_replaces_until_the_new_one_measures(tmp_path, capsys) -> None:
    """--overwrite sets DIR's sweep aside (DIR/replaced-sweep) instead of deleting it first: a replacement whose
    points all skip here, or one stopped before its first point, costs no finished sweep (a folder where a plot's
    name is moves too: deleting it failed once results.json was gone). A second --overwrite keeps the finished sweep
    set aside, not the replacement, unless DIR's finished with a point measured ok; such a sweep drops it."""
    out = tmp_path / "kept"
    assert main([*SMOKE, "--impl", "naive", "--out", str(out), *FAST]) == 0
    before = (out / "results.json").read_bytes()
    (out / "time-fwd.png").mkdir()
    capsys.readouterr()
    assert main([*SMOKE, "--impl", "cudnn_frontend", "--out", str(out), "--overwrite", *FAST]) == 2  # CUDA only
    assert f"the sweep it replaces is kept in {out / 'replaced-sweep'}" in capsys.readouterr().err
    assert (out / "replaced-sweep" / "results.json").read_bytes() == before
    assert (out / "replaced-sweep" / "time-fwd.png").is_dir()
    assert {r["status"] for r in load(out)["results"]} == {"skipped"}
    aside.set_aside(out)  # as a second --overwrite does, here stopped before its first save
    assert (out / "replaced-sweep" / "results.json").read_bytes() == before and not (out / "results.json").exists()
    capsys.readouterr()  # the next run puts it back, and refuses it as any sweep held: a new one deleted it at its end
    assert main([*SMOKE, "--impl", "naive", "--out", str(out), *FAST]) == 2
    err = capsys.readouterr().err
    assert "put back the sweep that an --overwrite stopped before its first save set aside" in err and \
        "already holds a sweep" in err, err
    assert (out / "results.json").read_bytes() == before and not (out / "replaced-sweep").exists()
    assert (out / "time-fwd.png").is_dir()  # all of it
    (out / "time-fwd.png").rmdir()
    assert main([*SMOKE, "--impl", "naive", "--out", str(out), "--overwrite", *FAST]) == 0
    assert not (out / "replaced-sweep").exists() and len(load(out)["results"]) == len(preset("smoke"))
    newer = (out / "results.json").read_bytes()
    (out / "replaced-sweep").mkdir()  # left by a finished sweep whose report was cut short: the newer one is kept
    (out / "replaced-sweep" / "results.json").write_bytes(before)
    aside.set_aside(out)
    assert (out / "replaced-sweep" / "results.json").read_bytes() == newer


def test_a_report_that_cannot_be_written_leaves_the_earlier_files_whole(tmp_path) -> None:
    """results.csv and report.md are written whole or not at all: a `report` stopped by a full disk (here a file
    size limit) left a results.csv cut after a few rows, every row with all its columns, that read as whole. A temp
    file left by a writer killed mid-save is removed by the next run in the folder."""
    out = tmp_path / "whole"
    assert main([*SMOKE, "--impl", "naive,chunked", "--out", str(out), *FAST]) == 0
    csv_before, md_before = (out / "results.csv").read_bytes(), (out / "report.md").read_bytes()
    assert len(csv_before) > 1000

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
    proc = subprocess.run([sys.executable, "-m", "sdpa_impls", "report", str(out), "--no-plots"], capture_output=True,
                          text=True, timeout=150, preexec_fn=limit)
    assert proc.returncode == 2 and f"{out / 'results.csv'}: cannot write" in proc.stderr, proc.stderr[-2000:]
    assert (out / "results.csv").read_bytes() == csv_before and (out / "report.md").read_bytes() == md_before
    assert main(["report", str(out)]) == 0  # the plots too: each image larger than the limit below
    pngs = {p.name: p.read_bytes() for p in out.glob("*.png")}
    assert len(pngs) >= 3 and min(map(len, pngs.values())) > 30_000

    def png_limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (30_000, 30_000))
    proc = subprocess.run([sys.executable, "-m", "sdpa_impls", "report", str(out)], capture_output=True, text=True,
                          timeout=150, preexec_fn=png_limit)
    assert "plots skipped" in proc.stderr, proc.stderr[-2000:]
    assert {p.name: p.read_bytes() for p in out.glob("*.png")} == pngs  # as they were, none cut short
    child = subprocess.Popen(["true"])
    child.wait()  # its pid is no process's now
    leftover = out / f".results.json.{child.pid}.tmp"
    leftover.write_text('{"format": "sdpa-bench-results", "meta"')
    assert sorted(p.name for p in out.iterdir() if p.name.endswith(".tmp")) == [leftover.name]
    assert main([*SMOKE, "--impl", "naive,chunked", "--out", str(out), "--resume"]) == 0
    assert not leftover.exists()


def test_a_merge_names_the_shard_a_run_is_still_writing(tmp_path, capsys) -> None:
    """A merge of shards one of which a `run` still writes holds what that shard had saved, and says so, naming
    the folder and its process, rather than telling the user to resume a shard that is running."""
    shards = [tmp_path / f"s{i}" for i in (1, 2)]
    for i, shard in enumerate(shards, 1):
        assert main([*SMOKE, "--shard", f"{i}/2", "--impl", "naive", "--out", str(shard), *FAST]) == 0
    doc = load(shards[1])  # as a running shard has it: a point not measured yet
    doc["results"], doc["meta"] = doc["results"][:-1], {k: v for k, v in doc["meta"].items() if k != "finished"}
    (shards[1] / "results.json").write_text(json.dumps(doc))
    capsys.readouterr()
    with only_writer(shards[1]):
        assert main(["merge", str(tmp_path / "m"), *map(str, shards), "--no-plots"]) == 0
    err = capsys.readouterr().err
    assert f"({shards[1]} (process {os.getpid()}): still being written by `run`; then merge them again" in err, err
    assert "resume" not in err


def test_a_merged_sweep_is_never_measured_again_and_a_missing_shard_is_named(tmp_path, capsys) -> None:
    """A merged sweep whose first shard was saved whole but never marked finished (stopped in its last ceilings) is
    whole: its resume measures nothing and keeps its ceilings. A merge that lacks a shard (its cases in none of the
    merged ones) is refused by the resume, which names the missing shard, rather than read as whole."""
    shards = [tmp_path / f"s{i}" for i in (1, 2)]
    for i, shard in enumerate(shards, 1):
        assert main([*SMOKE, "--shard", f"{i}/2", "--impl", "naive", "--out", str(shard), *FAST]) == 0
    doc = load(shards[0])
    doc["meta"] = {k: v for k, v in doc["meta"].items() if k != "finished"}
    (shards[0] / "results.json").write_text(json.dumps(doc))
    merged, part = tmp_path / "m", tmp_path / "part"
    assert main(["merge", str(merged), *map(str, shards), "--no-plots"]) == 0
    before = (merged / "results.json").read_bytes()
    capsys.readouterr()
    assert main([*SMOKE, "--impl", "naive", "--out", str(merged), "--resume"]) == 0
    err = capsys.readouterr().err
    assert "nothing left to measure" in err and "measuring" not in err, err
    assert (merged / "results.json").read_bytes() == before
    assert main(["merge", str(part), str(shards[1]), "--no-plots"]) == 0
    before = (part / "results.json").read_bytes()
    capsys.readouterr()
    assert main([*SMOKE, "--impl", "naive", "--out", str(part), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "each was finished, but a case is in none of them (shard 1/2): merge them with the missing shard" in err, err
    assert (part / "results.json").read_bytes() == before


def test_a_refused_command_leaves_the_folder_as_it_was_and_a_run_no_lock_file(tmp_path, capsys) -> None:
    """The lock file goes when its holder ends: a `run` or `targets` refused (another tool's results.json, which
    `targets` named as a sweep to --overwrite) leaves the user's folder as it was, a finished run leaves its outputs
    only, and a link planted where the lock goes is refused, its target untouched."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "results.json").write_text('{"accuracy": 0.91}')
    for command in ([*SMOKE, "--impl", "naive", *FAST], ["targets"]):
        assert main([*command, "--out", str(other)]) == 2
        assert "is not an sdpa-bench results file" in capsys.readouterr().err
        assert sorted(p.name for p in other.iterdir()) == ["results.json"]
    done = tmp_path / "done"
    assert main([*SMOKE, "--impl", "naive", "--out", str(done), *FAST]) == 0
    assert not (done / ".sdpa-bench-run.lock").exists() and (done / "results.json").exists()
    (tmp_path / "theirs").write_text("keep")
    (done / ".sdpa-bench-run.lock").symlink_to(tmp_path / "theirs")
    capsys.readouterr()
    assert main([*SMOKE, "--impl", "naive", "--out", str(done), "--resume"]) == 2
    assert ".sdpa-bench-run.lock is a link" in capsys.readouterr().err
    assert (tmp_path / "theirs").read_text() == "keep"


def test_a_run_that_opened_the_lock_file_as_its_holder_removed_it_locks_the_new_one(tmp_path, monkeypatch) -> None:
    """Between a second run's open of the lock file and its lock, the first may end and remove the file: the second
    must then lock the file at the path (a third run would create it and lock it too: two writers), not the removed
    one."""
    from sdpa_impls.report import writer_lock

    opened = os.fdopen
    removed: list[str] = []

    def open_then_lose_it(fd, *args, **kwargs):  # the holder ends right after this open
        handle = opened(fd, *args, **kwargs)
        if not removed:
            removed.append("once")
            os.unlink(tmp_path / writer_lock.LOCK_FILE)
        return handle
    monkeypatch.setattr(writer_lock.os, "fdopen", open_then_lose_it)
    with only_writer(tmp_path):
        assert removed and writer_lock.writer(tmp_path) == f"process {os.getpid()}"


def test_a_lock_file_put_in_place_of_a_runs_own_is_left_to_its_owner(tmp_path) -> None:
    """A run's lock file removed meanwhile (by hand, a sync tool) and a later run's in its place: the first run, as it
    ends, removes only its own, or a third run could then write beside the second."""
    lock = tmp_path / ".sdpa-bench-run.lock"
    with only_writer(tmp_path):
        lock.unlink()
        lock.write_text("process 1\n")
    assert lock.read_text() == "process 1\n"


def test_a_lock_on_a_relative_folder_ends_cleanly_where_the_working_folder_was_deleted(tmp_path, monkeypatch) -> None:
    """`run --out rel` in a folder deleted meanwhile: its error ("cannot save ...") must not be replaced, as the lock
    ends, by a FileNotFoundError of the working folder ("an error sdpa-bench did not foresee")."""
    here = tmp_path / "gone"
    (here / "rel").mkdir(parents=True)
    monkeypatch.chdir(here)
    with only_writer(Path("rel")):
        for path in (here / "rel" / ".sdpa-bench-run.lock", here / "rel", here):
            path.unlink() if path.is_file() else path.rmdir()
    monkeypatch.chdir(tmp_path)


def test_the_temp_files_of_a_dead_writer_are_removed_plots_too(tmp_path):
    """A process killed while writing a plot leaves `.NAME.png.PID.tmp`, as it does for results.json: both go."""
    from sdpa_impls.report.files import remove_leftovers
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    names = [f".{n}.{dead.pid}.tmp" for n in ("results.json", "report.md", "roofline.png", "time-fwd_bwd.png")]
    mine, other = f".roofline.png.{os.getpid()}.tmp", ".notes.txt.1.tmp"  # this process's; not a write_whole name
    for name in [*names, mine, other]:
        (tmp_path / name).write_text("x")
    remove_leftovers(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([mine, other])
