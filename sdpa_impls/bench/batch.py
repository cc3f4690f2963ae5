"""Many points measured together, kept for a front end that reports them from other processes (asv's
`setup_cache`, whose value its `track_` benchmarks read): the `sdpa-bench run` sequence (`measure.run_case`:
reasons → fp64 check → closure → timing → peak memory) over every case, every result kept by (implementation, case id).

`measure_batch` runs them in this process. `measure_isolated` runs them in a child interpreter, so that a point that
ends its process with no Python error (a segfault in a compiled kernel, an abort, os._exit) is that point's failure,
not the batch's: the points after it are measured in a new child. Given a deadline, so is a point that never
returns: the child is stopped, the point failed, and a new child goes on. (`sdpa-bench run` saves each point as it
finishes, and --resume goes past such a point; its --point-timeout stops one that never returns.)
"""
from __future__ import annotations

import contextlib
import faulthandler
import importlib
import json
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from typing import IO

from .grid import Case
from .measure import Options, run_case
from .result import Result

Batch = dict[tuple[str, str], Result]
STACK_FRAMES = 6  # of a crash's Python stack, the innermost, in the failed point's reason
DUMP_SIGNAL = signal.SIGUSR1  # the child writes its Python stack on it (faulthandler), before a deadline's kill
DUMP_WAIT_S = 2.0  # the longest a stuck child is given to write that stack


def measure_batch(cases: Iterable[Case], impl_names: list[str], device: str, options: Options = Options(),
                  seed: int = 0, on_result: Callable[[Result], object] | None = None) -> Batch:
    """Every implementation on every case, case by case (one case's inputs and fp64 reference at a time), as
    `sdpa-bench run` measures them. Never raises for a point: a skip, a wrong result or a failure is its Result's
    `status` and `reason`. `on_result` sees each result as soon as it exists (e.g. progress on stderr)."""
    batch: Batch = {}
    for case in cases:
        for result in run_case(case, impl_names, device, options, seed):
            batch[(result.impl, case.id)] = result
            if on_result is not None:
                on_result(result)
    return batch


def measure_isolated(cases: Iterable[Case], impl_names: list[str], device: str, options: Options = Options(),
                     seed: int = 0, on_result: Callable[[Result], object] | None = None,
                     deadline_s: float | None = None) -> Batch:
    """As `measure_batch`, the same points with the same inputs, measured in a child interpreter with this one's
    sys.path and environment (what this process set at run time, torch.set_num_threads say, does not reach it; nor
    need this process use CUDA, which it leaves to the child). Where the child ends inside a point, that point is a
    failed Result saying how it ended and where (the innermost frames of its Python stack), and a new child measures
    the rest. With `deadline_s`, a point still running after that many seconds is stopped the same way: the child
    writes its Python stack and is killed, the point is a failed Result saying so and where, and a new child measures
    the rest. Where a child cannot register an implementation by importing its class's module (one registered in
    `__main__`, or by other code), or off POSIX, the points are measured here, as by `measure_batch` (no deadline)."""
    from .. import registry
    cases, known = list(cases), set(registry.names())
    modules = sorted({type(registry.get(name)).__module__ for name in impl_names if name in known})
    if "__main__" in modules or os.name != "posix":
        return measure_batch(cases, impl_names, device, options, seed, on_result)
    batch: Batch = {}

    def add(result: Result) -> None:
        batch[(result.impl, result.case.id)] = result
        if on_result is not None:
            on_result(result)
    while True:
        todo = [(case, [n for n in impl_names if (n, case.id) not in batch]) for case in cases]
        todo = [(case, names) for case, names in todo if names]
        if not todo:
            return batch
        before = len(batch)
        with tempfile.TemporaryFile("w+") as stack:  # where a crash's Python stack goes (faulthandler)
            inside, how, unknown, expired = _child(todo, modules, device, options, seed, add, stack, deadline_s)
            stack.seek(0)
            frames = [line.strip() for line in stack.read().splitlines() if line.strip().startswith("File ")]
        if unknown:  # the child could not register them: the rest is measured here
            for case, names in todo:
                for result in run_case(case, names, device, options, seed):
                    add(result)
            return batch
        if inside is None and len(batch) == before:  # no point started: the child itself is broken
            raise RuntimeError(f"the measuring child process ({sys.executable}) {how} before its first point")
        if inside is not None:
            case, name = inside
            where = f"; where (most recent call first): {'; '.join(frames[:STACK_FRAMES])}" if frames else ""
            add(Result(impl=name, case=case, device=device, status="failed", reason=(
                f"still running after {deadline_s:g} s (the per-point deadline): stopped, not measured again{where}"
                if expired else f"the process ended inside this point ({how}) with no Python error: a crash such as "
                f"a segfault in the implementation, os._exit or a kill{where}")))


def _child(todo: list[tuple[Case, list[str]]], modules: list[str], device: str, options: Options, seed: int,
           add: Callable[[Result], None], stack: IO[str], deadline_s: float | None = None
           ) -> tuple[tuple[Case, str] | None, str, list[str], bool]:
    """One child over `todo`, each result given to `add`, a crash's stack written to `stack`: the point it ended
    inside (None: none), how it ended, the implementations it could not register (then it measured nothing), and
    whether it was stopped for running past `deadline_s` in that point."""
    read, write = os.pipe()
    program = ("import json, sys; sys.path[:] = json.loads(sys.argv[3])\n"  # before anything is imported
               "from sdpa_impls.bench.batch import _serve; _serve()")
    try:
        child = subprocess.Popen([sys.executable, "-c", program, str(write), str(stack.fileno()), json.dumps(
            [p for p in sys.path if isinstance(p, str)])], stdin=subprocess.PIPE, pass_fds=(write, stack.fileno()))
    except BaseException:
        os.close(read)
        raise
    finally:
        os.close(write)
    inside, unknown, since = None, [], 0.0

    def overdue() -> bool:
        return inside is not None and deadline_s is not None and time.monotonic() - since > deadline_s
    try:
        try:
            child.stdin.write(pickle.dumps((modules, todo, device, options, seed)))
        except BrokenPipeError:  # it ended at once: said below by how it ended
            pass
        finally:
            with contextlib.suppress(BrokenPipeError):
                child.stdin.close()
        for kind, value in _messages(read, child, overdue):
            if kind == "start":
                inside, since = value, time.monotonic()
            elif kind == "unknown":
                unknown = value
            else:
                add(value)
                inside = None
        expired = overdue() and child.poll() is None
        if expired:
            _stop(child, stack)
        status = child.wait()
    finally:
        os.close(read)
        if child.poll() is None:  # an interrupt, or asv's timeout in this process: the child goes with it
            child.kill()
            child.wait()
    how = (f"killed by {signal.Signals(-status).name}" if status < 0 and -status in signal.valid_signals()
           else f"exit status {status}")
    return inside, how, unknown, expired


def _stop(child: subprocess.Popen, stack: IO[str]) -> None:
    """Kills a child stuck in a point, once it has written its Python stack to `stack` (faulthandler, on DUMP_SIGNAL;
    a handler in C, so also where the stuck call holds the GIL), or after DUMP_WAIT_S."""
    with contextlib.suppress(ProcessLookupError):
        child.send_signal(DUMP_SIGNAL)
    before, end = -1, time.monotonic() + DUMP_WAIT_S
    while time.monotonic() < end and child.poll() is None:
        time.sleep(0.05)
        size = os.fstat(stack.fileno()).st_size
        if size and size == before:  # written, and no longer growing
            break
        before = size
    child.kill()


def _messages(read: int, child: subprocess.Popen, overdue: Callable[[], bool] = lambda: False
              ) -> Iterator[tuple[str, object]]:
    """The child's messages (each a length, then its pickle), as they come; they end at the pipe's end, once the
    child has ended and what it wrote is read (a process it started may hold the pipe open after it), or once
    `overdue()` (checked at least every half second)."""
    buffer = b""
    while True:
        if select.select([read], [], [], 0.5)[0]:
            chunk = os.read(read, 1 << 20)
            if not chunk:
                return
            buffer += chunk
        elif child.poll() is not None:
            return
        while len(buffer) >= 8 and len(buffer) >= 8 + (size := struct.unpack("!Q", buffer[:8])[0]):
            yield pickle.loads(buffer[8:8 + size])
            buffer = buffer[8 + size:]
        if overdue():
            return


def _serve() -> None:
    """The child: reads its points from stdin, and writes to the first file descriptor named in argv a "start"
    message before each point (its case and implementation) and a "result" message after it ("unknown" and nothing
    else where it cannot register an implementation); a crash's stack goes to the second, as does its stack on
    DUMP_SIGNAL (the parent's deadline)."""
    from .. import registry
    pipe, stack = int(sys.argv[1]), int(sys.argv[2])
    for fd in (pipe, stack):  # not passed on to what the implementations run
        os.set_inheritable(fd, False)
    faulthandler.enable(stack)
    faulthandler.register(DUMP_SIGNAL, file=stack)
    modules, todo, device, options, seed = pickle.load(sys.stdin.buffer)
    for module in modules:  # implementations registered by importing their module (built-ins, a test's module)
        importlib.import_module(module)

    def send(kind: str, value: object) -> None:
        data = pickle.dumps((kind, value))
        os.write(pipe, struct.pack("!Q", len(data)))
        view = memoryview(data)
        while view:
            view = view[os.write(pipe, view):]
    missing = sorted({name for _, names in todo for name in names} - set(registry.names()))
    if missing:
        send("unknown", missing)
        return
    for case, names in todo:
        send("start", (case, names[0]))  # the case's inputs and fp64 reference belong to its first point
        for i, result in enumerate(run_case(case, names, device, options, seed)):
            send("result", result)
            if i + 1 < len(names):
                send("start", (case, names[i + 1]))
