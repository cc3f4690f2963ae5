"""Many points measured together, kept for a front end that reports them from other processes (asv's
`setup_cache`, whose value its `track_` benchmarks read): the `sdpa-bench run` sequence (`measure.run_case`:
reasons → fp64 check → closure → timing → peak memory) over every case, every result kept by (implementation, case id).

`measure_batch` runs them in this process. `measure_isolated` runs them in a child interpreter, so that a point that
ends its process with no Python error (a segfault in a compiled kernel, an abort, os._exit) is that point's failure,
not the batch's: the points after it are measured in a new child. (`sdpa-bench run` saves each point as it finishes,
and --resume goes past such a point.)
"""
from __future__ import annotations

import faulthandler
import importlib
import os
import pickle
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from typing import IO

from .grid import Case
from .measure import Options, run_case
from .result import Result

Batch = dict[tuple[str, str], Result]
STACK_FRAMES = 6  # of a crash's Python stack, the innermost, in the failed point's reason


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
                     seed: int = 0, on_result: Callable[[Result], object] | None = None) -> Batch:
    """As `measure_batch`, the same points with the same inputs, measured in a child interpreter (this process must
    not have used CUDA, which it leaves to the child). Where the child ends inside a point, that point is a failed
    Result saying how it ended (its Python stack is on stderr), and a new child measures the rest. Implementations
    registered in `__main__`, which a child cannot import, are measured here, as by `measure_batch`."""
    from .. import registry
    cases = list(cases)
    modules = sorted({type(registry.get(name)).__module__ for name in impl_names})
    if "__main__" in modules:
        return measure_batch(cases, impl_names, device, options, seed, on_result)
    batch: Batch = {}
    while True:
        todo = [(case, [n for n in impl_names if (n, case.id) not in batch]) for case in cases]
        todo = [(case, names) for case, names in todo if names]
        if not todo:
            return batch
        before = len(batch)
        with tempfile.TemporaryFile("w+") as stack:  # where a crash's Python stack goes (faulthandler)
            inside, how = _child(todo, modules, device, options, seed, batch, on_result, stack)
            stack.seek(0)
            frames = [line.strip() for line in stack.read().splitlines() if line.strip().startswith("File ")]
        if inside is None and len(batch) == before:  # no point started: the child itself is broken
            raise RuntimeError(f"the measuring child process ({sys.executable}) {how} before its first point")
        if inside is not None:
            case, name = inside
            where = f"; where (most recent call first): {'; '.join(frames[:STACK_FRAMES])}" if frames else ""
            result = Result(impl=name, case=case, device=device, status="failed", reason=(
                f"the process ended inside this point ({how}) with no Python error: a crash such as a segfault in "
                f"the implementation, os._exit or a kill{where}"))
            batch[(name, case.id)] = result
            if on_result is not None:
                on_result(result)


def _child(todo: list[tuple[Case, list[str]]], modules: list[str], device: str, options: Options, seed: int,
           batch: Batch, on_result: Callable[[Result], object] | None, stack: IO[str]
           ) -> tuple[tuple[Case, str] | None, str]:
    """One child over `todo`, its results added to `batch`, a crash's stack written to `stack`: the point it ended
    inside (None: none) and how it ended."""
    read, write = os.pipe()
    try:
        child = subprocess.Popen([sys.executable, "-c", "from sdpa_impls.bench.batch import _serve; _serve()",
                                  str(write), str(stack.fileno())], stdin=subprocess.PIPE,
                                 pass_fds=(write, stack.fileno()))
    finally:
        os.close(write)
    inside = None
    try:
        with os.fdopen(read, "rb") as messages:
            try:
                child.stdin.write(pickle.dumps((sys.path, modules, todo, device, options, seed)))
                child.stdin.close()
            except BrokenPipeError:  # it ended at once: said below by how it ended
                pass
            while True:
                try:
                    kind, value = pickle.load(messages)
                except (EOFError, pickle.UnpicklingError):
                    break
                if kind == "start":
                    inside = value
                else:
                    batch[(value.impl, value.case.id)] = value
                    inside = None
                    if on_result is not None:
                        on_result(value)
        code = child.wait()
    finally:
        if child.poll() is None:  # an interrupt, or asv's timeout in this process: the child goes with it
            child.kill()
            child.wait()
    how = (f"killed by {signal.Signals(-code).name}" if code < 0 and -code in signal.valid_signals()
           else f"exit status {code}")
    return inside, how


def _serve() -> None:
    """The child: reads its points from stdin, and writes to the first file descriptor named in argv a "start"
    message before each point (its case and implementation) and a "result" message after it; a crash's stack goes to
    the second."""
    faulthandler.enable(int(sys.argv[2]))
    path, modules, todo, device, options, seed = pickle.load(sys.stdin.buffer)
    sys.path[:] = path
    for module in modules:  # implementations registered by importing their module (built-ins, a test's module)
        importlib.import_module(module)
    with os.fdopen(int(sys.argv[1]), "wb") as out:
        def send(kind: str, value: object) -> None:
            pickle.dump((kind, value), out)
            out.flush()
        for case, names in todo:
            send("start", (case, names[0]))  # the case's inputs and fp64 reference belong to its first point
            for i, result in enumerate(run_case(case, names, device, options, seed)):
                send("result", result)
                if i + 1 < len(names):
                    send("start", (case, names[i + 1]))
