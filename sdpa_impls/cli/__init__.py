"""Command line: `python -m sdpa_impls <command>` / `sdpa-bench <command>`; each command lives in its own module.

The one place a UsageError, or an error nobody foresaw, becomes a one-line message and exit status 2 (credentials
masked; SDPA_BENCH_TRACEBACK=1 shows an unforeseen error's traceback); nothing below imports this package.
Option defaults may come from the project's pyproject.toml, [tool.sdpa_bench.<command>] (sdpa_impls.settings).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import shlex
import signal
import sys
from typing import NoReturn

from .. import __version__, settings
from ..credentials import redact
from ..errors import USAGE_EXIT, UsageError, unforeseen


# command -> (module exposing add_arguments(parser) and run(args) -> int, one-line help).
# Modules are imported only when their command runs, so one missing or broken command never breaks the others.
COMMANDS = {
    "list": ("sdpa_impls.cli.list", "show every implementation, whether it runs on this machine and why not"),
    "run": ("sdpa_impls.cli.run", "run a sweep here and write results, a table, plots and a report"),
    "report": ("sdpa_impls.cli.report", "re-render the table, CSV, plots and report of a saved sweep"),
    "merge": ("sdpa_impls.cli.merge", "join the results of sweep shards (run --shard I/N) into one"),
    "compare": ("sdpa_impls.cli.compare", "side-by-side ratios of two sweeps (time, memory, error)"),
    "gate": ("sdpa_impls.cli.gate", "fail a change that makes attention slower, bigger or wrong"),
    "targets": ("sdpa_impls.cli.targets", "measure the CPU performance targets in one interleaved run, with a verdict"),
    "continuous": ("sdpa_impls.cli.continuous", "benchmark two git revisions side by side and judge the change (as asv continuous)"),
    "bisect": ("sdpa_impls.cli.bisect", "find the commit that made attention slower, or say that nothing did"),
    "envs": ("sdpa_impls.cli.envs", "list the environments continuous built and cached; --prune removes old ones"),
    "quickstart": ("sdpa_impls.cli.quickstart", "write a new plug-in (package, test, CI workflow) into a folder"),
}

# what builds, locks and stops environments (flock, process groups): a system without fcntl (Windows) has none of it
POSIX_ONLY = ("continuous", "bisect", "envs")


def _command_in(argv: list[str]) -> str | None:
    """The first word that is not an option: the command (the top level takes no option with a value)."""
    return next((a for a in argv if not a.startswith("-")), None)


def _empty(argv: list[str], parsers: list[argparse.ArgumentParser | None], command: str | None) -> str:
    """What is empty on the command line ("" if nothing): an empty value is an error, never "not given" (`run
    --preset ''` started the 1360-point default preset, `--impl ''` ran every implementation, `--out ''` wrote into
    the working folder). `continuous` and `bisect` name their own empty revisions."""
    takes = {o: a.nargs != 0 for p in parsers if p is not None for a in p._actions for o in a.option_strings}
    before = ""
    for token in argv:
        if token == "--":
            return ""
        option, equals, value = token.partition("=") if token.startswith("--") else ("", "", token)
        if equals and not value.strip():
            return f"{option}: an empty value; give one, or leave {option} out"
        if not equals and not token.strip():
            if takes.get(before):  # options are never abbreviated (allow_abbrev=False)
                return f"{before}: an empty value; give one, or leave {before} out"
            if command not in ("continuous", "bisect"):
                return f"an empty argument ({token!r}) where a value belongs"
        before = token
    return ""


def _load(name: str) -> object:
    module_name = COMMANDS[name][0]
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            raise UsageError(f"the {name!r} command is not available in this installation "
                             f"(module {module_name} is missing)") from None
        raise


class _Parser(argparse.ArgumentParser):
    """argparse, but a mistake on the command line is one line (which argument, what is wrong, where help is), as
    every other bad input is, not the usage block and then the error."""

    def error(self, message: str) -> NoReturn:
        print(redact(f"{self.prog}: error: {message} (see `{self.prog} --help`)"), file=sys.stderr)
        raise SystemExit(USAGE_EXIT)


def closed_streams() -> None:
    """stdout or stderr closed when the process started (`>&-`, `2>&-`, a daemon): Python made it None, which the
    first flush met as an AttributeError, a finished sweep's exit 2; it writes to /dev/null instead (the launcher
    has given its descriptor /dev/null too, before torch opened files)."""
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115 (the process's, never closed)


class _Diagnostics:
    """stderr, which carries progress and errors, never the answer: a line it cannot take (a full disk under
    `2>log`, its reader gone) is dropped, and the command goes on to its exit status. The error line that said so
    had failed too, and Python's exit 1 (what a CI reads as "regression") replaced the command's own."""

    def __init__(self, stream: object) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError:
            return len(text)

    def flush(self) -> None:
        with contextlib.suppress(OSError):
            self._stream.flush()

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


def _tolerant_output() -> None:
    """stdout and stderr in an encoding without ×, µ or → (a Windows console's cp1252, PYTHONIOENCODING=ascii) write
    such a character as ? instead of raising: a verdict, and the exit status it sets, must not be lost to a symbol; a
    UTF-8 stream writes a name the locale could not decode as its bytes; stderr drops what it cannot write."""
    closed_streams()
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "")
        if not encoding or not hasattr(stream, "reconfigure"):
            continue
        if encoding not in ("utf8", "utf8sig"):
            stream.reconfigure(errors="replace")
        elif getattr(stream, "errors", "") == "strict":  # a path the locale could not decode (PYTHONIOENCODING=utf-8
            stream.reconfigure(errors="surrogateescape")  # under LC_ALL=C): written as the file system's bytes
    if not isinstance(sys.stderr, _Diagnostics):
        sys.stderr = _Diagnostics(sys.stderr)


def settled() -> None:
    """For the process's own command (the launcher, `python -m sdpa_impls`) once main() has returned its code: a
    Ctrl-C or SIGTERM from here on no longer changes it. The interpreter's teardown (0.7 s after torch) puts
    Python's handlers back to the default, where such a signal ended a finished sweep with 130/143 and no word; an
    ignored signal stays ignored."""
    from .outputs import ignore_stops
    with contextlib.suppress(ValueError, OSError):  # ValueError: not the main thread
        ignore_stops()


def _posix() -> bool:
    try:
        import fcntl  # noqa: F401
    except ImportError:
        return False
    return True


def _taken_over() -> str:
    """What a stop says in the process that replaced a timed-out `run` (watch), before that sweep's own ending could
    (as torch imports): where the finished points are and how to go on; "" in any other process. Read without
    importing watch, which a stop during torch's import may have left half made."""
    watch = sys.modules.get(f"{__name__}.watch")
    out = os.environ.get("SDPA_BENCH_CONTINUE") or next(iter(getattr(watch, "CONTINUED", ())), "")
    return (f"; the finished points are saved in {out}; continue with: sdpa-bench run --out {shlex.quote(out)} "
            "--resume") if out else ""


def main(argv: list[str] | None = None) -> int:
    # not list(argv): once the `list` command's module is imported, `list` in this package's namespace is that module
    argv = sys.argv[1:] if argv is None else [*argv]
    _tolerant_output()
    # no abbreviations: `--pre` must not mean `--preset` today and fail once another option starts so
    parser = _Parser(prog="sdpa-bench", description="Benchmark scaled dot-product attention.", allow_abbrev=False)
    parser.add_argument("--version", action="version", version=f"sdpa-bench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = _command_in(argv)
    source = ""  # the pyproject.toml table and keys that set options, named beside a usage error
    # the prefix argparse gives the command's own errors, so every error of one command starts the same way
    prefix = f"sdpa-bench {chosen}" if chosen in COMMANDS else "sdpa-bench"
    try:
        module = command = None
        for name, (_, help_text) in COMMANDS.items():
            p = sub.add_parser(name, help=help_text, description=help_text, allow_abbrev=False)
            if name == chosen:
                module, command = _load(name), p
                module.add_arguments(p)
                settings.add_opposites(p)
        try:
            args, extra = parser.parse_known_args(argv)
            if extra:  # after the command word: the command's own error, its prefix and its --help
                after = command is not None and argv.index(extra[0]) > argv.index(chosen)
                (command if after else parser).error(f"unrecognized arguments: {' '.join(extra)}")
            empty = _empty(argv, [parser, command], chosen)
            if empty:
                (command or parser).error(empty)
        except SystemExit as exc:  # argparse printed usage and its error (or --help): its status, returned
            if exc.code == USAGE_EXIT:  # as the command would have done before its work
                from .answers import drop_earlier_answers
                drop_earlier_answers(argv, command)
            return exc.code if isinstance(exc.code, int) else USAGE_EXIT
        # defaults of the project's [tool.sdpa_bench.<command>] for what the command line leaves unset
        source = settings.apply(parser, command, argv, args, args.command, COMMANDS)
        # sdpa-bench is this process's command, which `run` may exec again: its arguments are the ones the process
        # started with (a script that sets sys.argv and calls main() would be run again whole, setup and all)
        args.own_process = argv == sys.argv[1:] == sys.orig_argv[len(sys.orig_argv) - len(argv):]
        args.argv = tuple(argv)  # as given: a command that stops early names the command that goes on
        if args.command in POSIX_ONLY and not _posix():
            raise UsageError(f"needs a POSIX system (Linux or macOS): it builds and locks environments with fcntl "
                             f"and process groups, which this Python ({sys.platform}) lacks; `run` and `compare` "
                             "time two revisions installed one after the other")
        from .outputs import terminate_as_interrupt
        with terminate_as_interrupt():  # SIGTERM (a CI's cancel) ends any command as Ctrl-C does, saying so
            code = int(module.run(args))
        sys.stdout.flush()  # a reader that went away shows here, in the handler below, not at the interpreter's exit
        return code
    except UsageError as exc:
        print(redact(f"{prefix}: error: {exc}{settings.note(source)}"), file=sys.stderr)
        return USAGE_EXIT
    except KeyboardInterrupt as exc:
        from .outputs import stopped_how
        how, code = stopped_how(exc)
        print(f"sdpa-bench: {how}{_taken_over()}", file=sys.stderr)
        return code
    except BrokenPipeError:  # the reader of stdout went away (`sdpa-bench list | head -1`): no error of ours
        with contextlib.suppress(OSError):  # nothing more reaches the closed pipe, not even at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + getattr(signal, "SIGPIPE", 13)  # what a shell reports for a writer the pipe stopped
    except Exception as exc:  # a CI reads exit 1 as "regression" or "wrong": anything unforeseen is 2, one line
        return unforeseen(prefix, exc)


if __name__ == "__main__":
    sys.exit(main())
