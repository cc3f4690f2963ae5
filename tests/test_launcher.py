"""The `sdpa-bench` launcher (sdpa_bench_cli.py): what happens before the command line can catch anything, while
sdpa_impls, and so torch, imports. A torch that does not import, or a Ctrl-C during that import, is one line and
the exit status every other such case gets, not Python's traceback and exit 1 (a CI reads 1 as "regression")."""
from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from importlib import metadata
from importlib.metadata import entry_points
from pathlib import Path

LAUNCH = "import sys, sdpa_bench_cli; sys.exit(sdpa_bench_cli.main())"


def _with_torch(tmp_path: Path, body: str) -> dict[str, str]:
    """An environment whose `import torch` runs `body` first: a torch package earlier on the path, as a broken or
    half-installed torch would be found."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(body)
    env = {k: v for k, v in os.environ.items() if k != "SDPA_BENCH_TRACEBACK"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def test_the_installed_command_starts_through_the_launcher():
    scripts = {ep.name: ep.value for ep in entry_points(group="console_scripts") if ep.name == "sdpa-bench"}
    assert scripts == {"sdpa-bench": "sdpa_bench_cli:main"}


def test_a_torch_that_does_not_import_is_one_line_and_exit_2(tmp_path):
    env = _with_torch(tmp_path, 'raise ImportError("libcudnn.so.9: cannot open shared object file")\n')
    proc = subprocess.run([sys.executable, "-c", LAUNCH, "list"], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("sdpa-bench: error: sdpa-bench cannot start in ")
    assert sys.executable in lines[0] and "ImportError: libcudnn.so.9" in lines[0]


def test_a_missing_torch_says_where_to_install_it():
    code = "import sys; sys.modules['torch'] = None; " + LAUNCH  # what `import torch` meets where none is installed
    proc = subprocess.run([sys.executable, "-c", code, "list"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (f"sdpa-bench: error: torch is not installed in {sys.executable}: install it there "
                                   "first (a CPU-only machine: `python -m pip install torch --index-url "
                                   "https://download.pytorch.org/whl/cpu`)")
    version = subprocess.run([sys.executable, "-c", code, "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.strip() == f"sdpa-bench {metadata.version('sdpa-bench')}"


def test_a_traceback_is_asked_for_by_a_value_that_means_yes(tmp_path):
    """SDPA_BENCH_TRACEBACK=0 (or false, no, off) is no request for one."""
    env = _with_torch(tmp_path, 'raise ImportError("libcudnn.so.9: cannot open shared object file")\n')
    for value, shown in (("0", False), ("off", False), ("1", True), ("yes", True)):
        proc = subprocess.run([sys.executable, "-c", LAUNCH, "list"], capture_output=True, text=True,
                              env={**env, "SDPA_BENCH_TRACEBACK": value}, timeout=60)
        assert proc.returncode == 2 and ("Traceback" in proc.stderr) == shown, (value, proc.stderr)


def ctrl_c_while_importing(env: dict[str, str], ignored: bool = False) -> tuple[int, str, str]:
    """`sdpa-bench list` sent a real Ctrl-C (SIGINT) once its torch says it is importing; (status, stdout, stderr).
    `ignored`: the process is started with SIGINT ignored, as a script's background job is."""
    proc = subprocess.Popen([sys.executable, "-c", LAUNCH, "list"], stderr=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env,
                            preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignored else None)
    try:
        assert proc.stderr.readline().strip() == "importing torch"
        proc.send_signal(signal.SIGINT)  # delivered in the middle of the import
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    return proc.returncode, out, err


def test_ctrl_c_while_torch_imports_is_interrupted_and_130(tmp_path):
    env = _with_torch(tmp_path, "import sys, time\nprint('importing torch', file=sys.stderr, flush=True)\n"
                                "time.sleep(60)\n")
    code, out, err = ctrl_c_while_importing(env)
    assert code == 130, err
    assert err.strip() == "sdpa-bench: interrupted" and out == ""


def test_ctrl_c_while_torch_imports_in_a_timed_out_runs_replacement_says_how_to_resume(tmp_path, monkeypatch):
    """The process that replaced a timed-out `run` (SDPA_BENCH_CONTINUE) stopped while torch imports says where the
    sweep's finished points are and the resume, as a stop anywhere later in it does (it said "interrupted" only)."""
    out = str(tmp_path / "my sweep")
    env = _with_torch(tmp_path, "import sys, time\nprint('importing torch', file=sys.stderr, flush=True)\n"
                                "time.sleep(60)\n")
    code, _, err = ctrl_c_while_importing({**env, "SDPA_BENCH_CONTINUE": out})
    said = (f"sdpa-bench: interrupted; the finished points are saved in {out}; continue with: sdpa-bench run --out "
            f"{shlex.quote(out)} --resume")
    assert code == 130 and err.strip() == said, (code, err)
    from sdpa_impls.cli import _taken_over, watch
    monkeypatch.setenv(watch.CONTINUE_ENV, out)
    assert said == f"sdpa-bench: interrupted{_taken_over()}"  # the launcher's words are the command line's


SWALLOWS = f"""import sys, time
print("importing torch", file=sys.stderr, flush=True)
try:
    time.sleep(60)
except KeyboardInterrupt:  # swallowed, as torch's C init can swallow one raised inside numpy's import
    pass
del sys.modules["torch"]  # then the real torch, which this module's import returns
sys.path.remove({{here!r}})
import torch
"""


def test_a_ctrl_c_that_torchs_import_swallows_still_stops_the_command(tmp_path):
    """The import went on after the Ctrl-C and the command ran to its end with exit 0."""
    code, out, err = ctrl_c_while_importing(_with_torch(tmp_path, SWALLOWS.format(here=str(tmp_path))))
    assert code == 130 and err.strip() == "sdpa-bench: interrupted" and out == "", (code, err)


def test_a_process_started_to_ignore_ctrl_c_still_ignores_it_while_torch_imports(tmp_path):
    """A background job of a script (`sdpa-bench list &`) ignores SIGINT from its start; the launcher leaves it so."""
    env = _with_torch(tmp_path, SWALLOWS.format(here=str(tmp_path)).replace("time.sleep(60)", "time.sleep(2)"))
    code, out, err = ctrl_c_while_importing(env, ignored=True)
    assert code == 0 and "naive" in out, (code, err)


def test_a_torch_that_does_not_import_shows_where_on_request_and_is_still_2(tmp_path):
    env = _with_torch(tmp_path, 'raise OSError("libcudnn.so.9: cannot open shared object file")\n')
    env["SDPA_BENCH_TRACEBACK"] = "1"
    proc = subprocess.run([sys.executable, "-c", LAUNCH, "list"], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 2, proc.stderr  # exit 1 would read as a regression in CI
    assert proc.stderr.startswith("Traceback") and 'torch/__init__.py", line 1' in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("sdpa-bench: error: sdpa-bench cannot start in ")
    assert proc.stderr.strip().endswith("(is torch installed and working there? its traceback is above)")


def test_an_unforeseen_error_shows_where_on_request_and_is_still_2(monkeypatch, capsys):
    from sdpa_impls import cli

    def unforeseen(*args, **kwargs):
        raise RuntimeError("index https://ci:hunter2@pypi.example/simple broke")

    monkeypatch.setattr(cli.settings, "apply", unforeseen)  # what runs in every command, after its options parse
    monkeypatch.setenv("SDPA_BENCH_TRACEBACK", "1")
    assert cli.main(["envs"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Traceback") and "in unforeseen" in err and "hunter2" not in err  # masked there too
    assert err.strip().splitlines()[-1].startswith("sdpa-bench envs: error: RuntimeError: index https://ci:")
    assert err.strip().endswith("(an error sdpa-bench did not foresee; its traceback is above)")  # not: set it


def test_a_url_in_the_failure_is_masked_as_everywhere_else(tmp_path):
    env = _with_torch(tmp_path, 'raise ImportError("from https://ci:hunter2@pypi.example/simple: bad wheel")\n')
    proc = subprocess.run([sys.executable, "-c", LAUNCH, "list"], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 2 and "hunter2" not in proc.stderr and "https://ci:****@pypi.example" in proc.stderr
    env["SDPA_BENCH_TRACEBACK"] = "1"
    proc = subprocess.run([sys.executable, "-c", LAUNCH, "list"], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 2 and "Traceback" in proc.stderr and "hunter2" not in proc.stderr


def _shell(tmp_path: Path, args: str, redirect: str) -> subprocess.CompletedProcess:
    """The launcher with a shell's redirection of its own streams (a closed one cannot be given through Popen)."""
    command = f"{shlex.quote(sys.executable)} -c {shlex.quote(LAUNCH)} {args} {redirect}"
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, cwd=tmp_path, timeout=120)


def test_a_closed_or_full_standard_stream_leaves_the_command_its_answer(tmp_path):
    """stdout or stderr closed at the start (`>&-`, a daemon) was None to Python: a finished command failed at its
    flush (exit 2, "AttributeError", an error nobody foresaw), and a run with stderr closed measured nothing.
    stdout on /dev/full was "No space left on device", as if the disk were full."""
    sweep = "run --preset smoke --impl naive --budget 0.005 --min-reps 2 --warmup 1 --no-memory --no-plots --out s"
    closed = _shell(tmp_path, "list", ">&-")
    assert closed.returncode == 0 and closed.stderr == "", closed.stderr
    quiet = _shell(tmp_path, sweep, "2>&-")
    assert quiet.returncode == 0 and "fwd" in quiet.stdout, quiet.stdout[-500:]
    assert len(json.loads((tmp_path / "s" / "results.json").read_text())["results"]) == 5
    if Path("/dev/full").exists():
        full = _shell(tmp_path, "list", ">/dev/full")
        assert full.returncode == 2 and full.stderr == \
            "sdpa-bench list: error: cannot write to standard output (No space left on device)\n", full.stderr
