"""Many points measured in one process, kept for a front end that reports them from other processes (asv's
`setup_cache`, whose value its `track_` benchmarks read): the `sdpa-bench run` sequence (`measure.run_case`:
reasons → fp64 check → closure → timing → peak memory) over every case, every result kept by (implementation, case id).

It applies where one process may run every point of a batch one after another; where each point needs a process of
its own (a crash must not take the others down), use `sdpa-bench run`, which saves each point as it finishes.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

from .grid import Case
from .measure import Options, run_case
from .result import Result

Batch = dict[tuple[str, str], Result]


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
