"""A virtual environment layered on the running one, with what pip installs on top: a `.pth` line adds this
environment's site-packages behind the new one's own, so it holds exactly this environment plus pip's packages.

    build(folder, requirements, constraints, what) -> seconds   # made in `folder`; GateInputError with pip's lines

pip runs in a process group of its own, stopped with everything it started when the build stops (an error, Ctrl-C,
a timeout: given Ctrl-C, which it answers by removing its temporary folders, then killed) and, on Linux, pip itself
when the process that started it dies (kill -9 of the run, or of a CI job's process group, which pip's own group is
not in): a pip left alone would go on downloading gigabytes into the cache.
What pip has started by then (a build backend's compiler) is not signalled and may finish its own step.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import sysconfig
import time
import venv
from collections.abc import Sequence
from pathlib import Path

from ..credentials import redact
from ..errors import GateInputError, MachineError
from .envkey import underlay_dirs
from .envs import is_path, python_of, user_path
from .outcomes import last_line, step_said

LINK_FILE = "_sdpa_bench_underlay.pth"
PIP_TIMEOUT_S = 3600.0  # a CUDA build of torch is several GB
PIP_STOP_S = 3.0  # a stopped build: what pip is given to remove its temporary folders, within a CI's grace period
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _in_pips_process() -> object:
    """In pip's process, before it runs: Ctrl-C as Python takes it by default (a command started with SIGINT
    ignored, `cmd &` in a script, passes that on: pip could not be stopped with its clean-up), and SIGKILL once
    the thread that started it is gone (Linux's prctl). libc is looked up here, in the parent: the child only
    calls it."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None
    except (OSError, AttributeError):
        prctl = None
    parent = os.getpid()

    def arm() -> None:
        with contextlib.suppress(ValueError):  # started off the main thread: its disposition stays
            signal.signal(signal.SIGINT, signal.SIG_DFL)
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != parent:  # it died before the call: no signal will come
                os._exit(1)
    return arm


def _pip(cmd: list[str], what: str) -> None:
    """Run pip in its own process group, stopped with everything it started when the build is stopped (an error,
    Ctrl-C, a timeout: Ctrl-C first, then killed) or this process dies (module docstring); GateInputError with
    pip's own error lines when it fails."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=_in_pips_process())
    try:
        out, err = proc.communicate(timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise GateInputError(f"environment {what!r}: pip took more than {PIP_TIMEOUT_S:.0f} s") from None
    finally:
        if proc.poll() is None:  # Ctrl-C first, which pip answers by removing its temporary folders; then a kill
            try:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGINT)
                proc.wait(timeout=PIP_STOP_S)
            except subprocess.TimeoutExpired:
                pass
            finally:  # also where a second Ctrl-C stops the wait
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)  # and whatever it started (a build backend)
                proc.wait()
    if proc.returncode < 0:  # killed (the kernel's OOM killer, another user): its last line would be a progress bar
        raise GateInputError(f"environment {what!r}: pip was killed by {signal.Signals(-proc.returncode).name}")
    if proc.returncode != 0:
        lines = [line.rstrip() for line in (err or out or "").splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("ERROR")]
        if any(line.startswith("Traceback") for line in lines) or not errors:  # "ERROR: Exception:": what it was;
            errors.append(last_line(err or out or "") if lines else "(pip printed nothing)")  # no ERROR: no usage
        elif step_said(err) and step_said(err) not in errors:  # "ERROR: Failed to build": what the step said, why
            errors.append(step_said(err))
        full = any("No space left on device" in line for line in lines)  # the machine's, not the revision's
        raise (MachineError if full else GateInputError)(
            f"environment {what!r}: pip could not install it (exit {proc.returncode}): " + "; ".join(errors[-6:])
            + (" (a full disk is this machine's, not the revision's: free some, or give --env-cache a folder on "
               "another disk)" if full else ""))  # one line, as every unusable input is said


def build(folder: Path, requirements: Sequence[str], constraints: str = "", what: str = "") -> float:
    """Create a virtual environment in `folder` layered on this one (module docstring) and pip-install
    `requirements` (pip's arguments; local paths made absolute) into it with `constraints` (a file's text, kept
    only during the build); the seconds taken. GateInputError with pip's error lines, naming `what`."""
    start = time.monotonic()
    venv.EnvBuilder(with_pip=False, symlinks=os.name != "nt").create(folder)
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(folder), "platbase": str(folder)}))
    purelib.mkdir(parents=True, exist_ok=True)
    # `import site; site.addsitedir(...)`, not a bare path: it also runs the .pth files there (editable installs).
    # Not --system-site-packages: a venv made from inside another (tox's) would see the base interpreter's packages.
    (purelib / LINK_FILE).write_text("".join(f"import site; site.addsitedir({d!r})\n" for d in underlay_dirs()),
                                     encoding="utf-8")
    cmd = [str(python_of(folder)), "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
           "--no-build-isolation"]
    pins = folder / "constraints.txt"
    if constraints:
        pins.write_text(constraints, encoding="utf-8")
        cmd += ["-c", str(pins)]
    cmd += [str(user_path(w).resolve()) if is_path(w) and user_path(w).exists() else w for w in requirements]
    try:
        _pip(cmd, what or " ".join(requirements))
    finally:
        pins.unlink(missing_ok=True)  # what a revision pins may name private addresses: not kept
    for record in purelib.glob("*.dist-info/direct_url.json"):  # pip keeps a URL's query (?token=...) there
        said = record.read_text(encoding="utf-8")
        if redact(said) != said:
            record.write_text(redact(said), encoding="utf-8")
    return time.monotonic() - start
