"""The `sdpa-bench` command's launcher, shipped beside the sdpa_impls package: the command line lives in
sdpa_impls.cli, and this module only imports it.

Importing sdpa_impls imports torch, which takes a second or more before `main()` can catch anything. So a Ctrl-C in
that second, or a torch that does not import (not installed, or a CUDA build whose libraries are missing), showed
Python's traceback and exit 1, which a CI reads as "regression". Here they are what every other interruption and
every other environment error is: "interrupted" and exit 130, or one line naming the interpreter and exit 2
(SDPA_BENCH_TRACEBACK=1 shows the traceback above it). It imports nothing heavy itself.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shlex
import signal
import sys
import traceback
from pathlib import Path

USAGE_EXIT = 2  # sdpa_impls.errors.USAGE_EXIT, which this module cannot import before the package does
TRACEBACK_ENV = "SDPA_BENCH_TRACEBACK"
CONTINUE_ENV = "SDPA_BENCH_CONTINUE"  # sdpa_impls.cli.watch.CONTINUE_ENV: set in a timed-out `run`'s replacement


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0]


def _masked(text: str) -> str:
    """`text` with URL credentials masked by sdpa_impls.credentials, as every other output is: loaded from its file,
    since importing it through the package is what failed; where even that fails, every user part masked."""
    try:
        package = importlib.util.find_spec("sdpa_impls")  # finds the package without running it
        path = Path(next(iter(package.submodule_search_locations))) / "credentials.py"
        spec = importlib.util.spec_from_file_location("_sdpa_bench_credentials", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.redact(text)
    except Exception:  # noqa: BLE001
        return re.sub(r"://[^\s/]*@", "://****@", text)


def import_failure(exc: Exception) -> str:
    """The one line for an sdpa_impls that does not import in this interpreter."""
    missing = getattr(exc, "name", None)
    if isinstance(exc, ModuleNotFoundError) and missing == "torch":
        return (f"torch is not installed in {sys.executable}: install it there first (a CPU-only machine: "
                "`python -m pip install torch --index-url https://download.pytorch.org/whl/cpu`)")
    if isinstance(exc, ModuleNotFoundError) and missing == "numpy":
        return f"numpy is not installed in {sys.executable}: `python -m pip install numpy` there first"
    where = "its traceback is above" if traceback_wanted() else f"{TRACEBACK_ENV}=1 shows where"
    return _masked(f"sdpa-bench cannot start in {sys.executable}: {type(exc).__name__}: {_first_line(exc)} "
                   f"(is torch installed and working there? {where})")


def taken_over() -> str:
    """What a stop while sdpa_impls imports says after "interrupted" in the process that replaced a timed-out `run`
    (CONTINUE_ENV), as sdpa_impls.cli's own ending there does once imported: where its sweep's finished points are
    and how to go on; "" in any other process."""
    out = os.environ.get(CONTINUE_ENV)
    return (f"; the finished points are saved in {out}; continue with: sdpa-bench run --out {shlex.quote(out)} "
            "--resume") if out else ""


def traceback_wanted() -> bool:
    """SDPA_BENCH_TRACEBACK set to anything but "", 0, false, no or off (sdpa_impls.errors says the same)."""
    return os.environ.get(TRACEBACK_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


def closed_descriptors() -> None:
    """stdout or stderr closed when the process started (`>&-`, `2>&-`, a daemon): its descriptor gets /dev/null
    before torch opens any file, so that no file this process opens, and no child's output, lands on 1 or 2."""
    for fd in (1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_WRONLY)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)


def main(argv: list[str] | None = None) -> int:
    closed_descriptors()
    if (sys.argv[1:] if argv is None else argv) == ["--version"]:  # needs no torch: the installed distribution's
        from importlib.metadata import PackageNotFoundError, version
        try:
            print(f"sdpa-bench {version('sdpa-bench')}")
            return 0
        except PackageNotFoundError:  # run from a source tree that was never installed: the package says it
            pass
    said: list[int] = []

    def interrupted(signum, frame):  # noted as well as raised: torch's C init can swallow the KeyboardInterrupt
        said.append(signum)
        raise KeyboardInterrupt

    before = signal.getsignal(signal.SIGINT)
    ours = before is signal.default_int_handler  # a SIGINT the process was started to ignore stays ignored
    if ours:
        try:
            signal.signal(signal.SIGINT, interrupted)
        except ValueError:  # off the main thread: no handler of ours
            ours = False
    try:
        from sdpa_impls.cli import main as command_line, settled
    except KeyboardInterrupt:
        said.append(signal.SIGINT)
    except Exception as exc:  # noqa: BLE001  (the package did not import: nothing of ours can run)
        if traceback_wanted():  # where it came from, and still exit 2, never 1
            print(_masked(traceback.format_exc()), file=sys.stderr, end="")
        print(f"sdpa-bench: error: {import_failure(exc)}", file=sys.stderr)
        return USAGE_EXIT
    finally:
        if ours:
            signal.signal(signal.SIGINT, before)
    if said:  # a Ctrl-C while sdpa_impls imported, even one the import swallowed, stops the command before it starts
        print(f"sdpa-bench: interrupted{taken_over()}", file=sys.stderr)
        return 130
    code = command_line(argv)
    if argv is None:  # this process's command: the answer is decided, the interpreter's teardown may not change it
        settled()
    return code


if __name__ == "__main__":
    sys.exit(main())
