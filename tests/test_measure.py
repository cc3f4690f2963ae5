"""The measurement of one point: every outcome becomes a Result, interleaved rounds time implementations alike."""
from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import sys
import time

import pytest
import torch

import sdpa_impls
from sdpa_impls.impls import torch_sdpa

from sdpa_impls.bench import allocator
from sdpa_impls.bench.check import CaseContext
from sdpa_impls.bench.grid import Case
from sdpa_impls.bench.measure import Options, run_case, run_case_interleaved, run_point
from sdpa_impls.bench.timing import Sampler
from sdpa_impls.bench.result import with_speedups
from sdpa_impls.bench.timing import (calibrate, call_context, confirmed_sample_s, round_sample, same_context,
                                     time_closure)


def test_run_point_turns_every_outcome_into_a_result() -> None:
    ctx = CaseContext(Case(lq=64, lk=64, e=32), "cpu")
    fast = Options(budget_s=0.01, min_reps=2, warmup=1)
    ok = run_point("fused", ctx, fast)
    assert ok.status == "ok" and ok.median_s > 0 and ok.max_error <= ok.error_tolerance
    assert ok.peak_memory_bytes > 0 and ok.tflops > 0 and ok.roofline_pct is None  # no run ceilings yet
    judged = ok.on_roofline({"gemm_flops_fp32": ok.tflops * 1e12 * 2, "copy_bytes_per_s": 1e15})
    assert judged.roofline_pct == pytest.approx(50.0) and judged.roofline_gemm == "gemm_flops_fp32"
    skipped = run_point("torch_sdpa_cudnn", ctx, fast)
    assert skipped.status == "skipped" and "cuda" in skipped.reason
    unknown = run_point("does_not_exist", ctx, fast)
    assert unknown.status == "failed" and "unknown implementation" in unknown.reason
    base = run_point("torch_sdpa", ctx, fast)
    sped = {r.impl: r for r in with_speedups([base, ok, skipped])}
    assert sped["torch_sdpa"].speedup_vs_torch_sdpa == 1.0
    assert sped["fused"].speedup_vs_torch_sdpa == pytest.approx(base.median_s / ok.median_s)
    assert sped["torch_sdpa_cudnn"].speedup_vs_torch_sdpa is None


def test_interleaved_rounds_time_every_implementation_alike() -> None:
    """One sample of each implementation per round: all get the same number of samples; a bad one is a Result."""
    names = ["naive", "torch_sdpa_cudnn", "fused", "does_not_exist", "chunked"]
    rows = run_case_interleaved(Case(lq=64, lk=64, e=32), names, "cpu",
                                Options(budget_s=0.0, min_reps=4, max_reps=4, warmup=1, memory=False))
    assert [r.impl for r in rows] == names  # in the order asked for
    by = {r.impl: r for r in rows}
    assert by["torch_sdpa_cudnn"].status == "skipped" and by["does_not_exist"].status == "failed"
    timed = [by[n] for n in ("naive", "fused", "chunked")]
    assert all(r.status == "ok" and len(r.samples) == 4 and r.max_error <= r.error_tolerance for r in timed)
    assert all(r.peak_memory_bytes is None for r in timed)  # memory=False: no memory pass
    more = run_case_interleaved(Case(lq=64, lk=64, e=32), ["fused", "naive"], "cpu",
                                Options(budget_s=0.02, min_reps=2, max_reps=50, warmup=0))
    assert all(sum(r.samples) * r.calls_per_sample >= 0.02 or len(r.samples) == 50 for r in more)  # the budget holds for the slowest too
    assert len(more[0].samples) == len(more[1].samples) and more[0].peak_memory_bytes > 0


def test_interleaved_rounds_shuffle_who_follows_whom(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call runs slower right after a larger one: each round's order is drawn anew (seeded), so no implementation
    always follows the same one."""
    seen: list[int] = []
    real = Sampler.sample

    def spy(self: Sampler) -> float:
        seen.append(id(self))
        return real(self)

    monkeypatch.setattr(Sampler, "sample", spy)
    names, rounds = ["naive", "fused", "chunked"], 12
    rows = run_case_interleaved(Case(lq=32, lk=32, e=16), names, "cpu",
                                Options(budget_s=0.0, min_reps=rounds, max_reps=rounds, warmup=0, memory=False))
    assert [len(r.samples) for r in rows] == [rounds] * 3
    orders = [tuple(seen[i:i + 3]) for i in range(0, len(seen), 3)]
    assert len(orders) == rounds and all(len(set(o)) == 3 for o in orders)  # one sample of each a round
    assert len(set(orders)) > 1  # not one order for every round
    assert len({(a, b) for o in orders for a, b in zip(o, o[1:])}) > 3  # more pairs than one turning cycle has


@pytest.mark.parametrize("option", ["flush_l2", "cuda_graph"])
def test_interleaved_rounds_and_run_point_take_every_timing_option(option: str) -> None:
    """Both front ends pass the CUDA-only options through: on CPU each timed point fails saying why."""
    case = Case(lq=32, lk=32, e=16)
    opts = Options(budget_s=0.0, min_reps=1, max_reps=1, warmup=0, memory=False, **{option: True})
    rows = run_case_interleaved(case, ["naive", "fused"], "cpu", opts)
    single = run_point("naive", CaseContext(case, "cpu"), opts)
    for r in [*rows, single]:
        assert r.status == "failed" and f"{option} needs a CUDA device" in r.reason, r


def test_a_sample_is_back_to_back_calls_lasting_the_minimum() -> None:
    x = torch.randn(8, 8)
    fast = time_closure(lambda: x @ x, "cpu", budget_s=0.0, min_reps=3, max_reps=3, warmup=1, min_sample_s=2e-3)
    assert fast.calls_per_sample > 1 and len(fast.samples) == 3
    assert fast.calls_per_sample * max(fast.samples) >= 2e-3 * 0.5  # at least ~the minimum, whatever the noise
    slow = time_closure(lambda: time.sleep(3e-3), "cpu", budget_s=0.0, min_reps=2, max_reps=2, warmup=0,
                        min_sample_s=2e-3)
    assert slow.calls_per_sample == 1 and min(slow.samples) >= 3e-3


def test_calibration_hands_back_the_sample_it_measured_last() -> None:
    """The suite sizes its rounds from calibrate's own last sample instead of timing one more."""
    calls: list[float] = []

    def spin() -> None:  # 0.1 ms on one thread: a small GEMM on two threads took 2 ms while other work held a CPU
        start = time.perf_counter()
        while time.perf_counter() - start < 1e-4:
            pass
        calls.append(start)

    n, sample_s = calibrate(spin, "cpu", min_sample_s=2e-3)
    assert 1 < n < 10_000 and sample_s >= 2e-3  # what it returns is a sample that lasted the minimum
    assert len(calls) > n  # it tried fewer calls first
    slow_n, slow_s = calibrate(lambda: time.sleep(3e-3), "cpu", min_sample_s=2e-3)
    assert slow_n == 1 and slow_s >= 3e-3


def test_a_reading_held_up_once_does_not_size_a_benchmark_to_a_handful_of_rounds() -> None:
    """The suite's rounds are max_time / one sample: a 2 ms call read once as 150 ms (a busy CPU) had left a 1 s
    budget 6 rounds; the reading is taken again while that costs at most a fifth of what the rounds would take."""
    held = [0.15]

    def call() -> None:
        time.sleep(held.pop() if held else 2e-3)

    assert calibrate(lambda: time.sleep(0.15), "cpu")[1] >= 0.15  # calibrate alone keeps such a reading
    calls, sample_s = round_sample(call, "cpu", max_time=1.0, least=5)
    assert calls == 1 and sample_s < 0.05 and int(1.0 / sample_s) >= 20, sample_s  # ~2 ms: hundreds of rounds
    spent = time.perf_counter()
    assert confirmed_sample_s(call, "cpu", 1, 0.3, 1.0 / 5) == 0.3  # a reading dearer than the spare: kept, unread
    assert time.perf_counter() - spent < 0.1


def test_a_held_up_reading_of_a_short_call_is_calibrated_again() -> None:
    """A 0.1 ms call held up for 150 ms in its first reading: one call per sample, which the confirmed reading shows
    is under the minimum sample, so calibration is done again and a sample lasts the minimum."""
    held = [0.15]

    def call() -> None:
        if held:
            time.sleep(held.pop())
        start = time.perf_counter()
        while time.perf_counter() - start < 1e-4:
            pass

    calls, sample_s = round_sample(call, "cpu", max_time=1.0, least=5)
    assert calls > 1 and sample_s >= 1e-3 * 0.9, (calls, sample_s)


def test_one_held_up_call_does_not_fix_one_call_per_sample() -> None:
    """A 0.2 ms call held up once for 6 ms (a descheduled thread on a busy CPU) during calibration: the reading is
    taken again, and the samples still last the minimum instead of being single noisy calls."""
    held = [6e-3]

    def call() -> None:
        time.sleep(held.pop() if held else 2e-4)

    n, sample_s = calibrate(call, "cpu", min_sample_s=2e-3)
    assert n > 1 and sample_s >= 2e-3


class Recorder:
    """A closure with a call context that records whether each call ran inside it."""

    def __init__(self) -> None:
        self.inside = 0
        self.calls: list[bool] = []
        self.entered = 0

    @contextlib.contextmanager
    def context(self):
        self.entered += 1
        self.inside += 1
        try:
            yield
        finally:
            self.inside -= 1

    def __call__(self) -> None:
        self.calls.append(self.inside > 0)


def test_the_timing_loop_enters_a_closures_context_once_outside_its_calls() -> None:
    fn = Recorder()
    timing = time_closure(fn, "cpu", budget_s=0.0, min_reps=5, max_reps=5, warmup=2)
    assert len(timing.samples) == 5 and len(fn.calls) >= 7 and all(fn.calls)
    assert fn.entered <= 2  # warm-up + calibration, then the samples: never once per call
    wrapped = same_context(lambda: fn(), fn)
    assert call_context(wrapped) is not None and wrapped.context == fn.context


def test_a_pinned_backend_is_entered_once_and_restored() -> None:
    """Inside its context the pinned closure finds torch's flags set to its backend alone; outside, nothing leaks."""
    from torch.nn.attention import SDPBackend

    q = torch.randn(1, 2, 8, 16)
    fn = sdpa_impls.get("torch_sdpa_math").prepare(q, q, q)
    before = torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.math_sdp_enabled()
    with call_context(fn):
        assert torch_sdpa._pinned_now is SDPBackend.MATH
        assert torch.backends.cuda.math_sdp_enabled() and not torch.backends.cuda.flash_sdp_enabled()
        inside = fn()
    assert torch_sdpa._pinned_now is None
    assert (torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.math_sdp_enabled()) == before
    torch.testing.assert_close(fn(), inside)  # outside the context it pins itself per call


@pytest.mark.parametrize("impl", ["fused", "torch_sdpa"])
def test_a_backward_only_rebuild_makes_the_leaves_gradient_accumulators_anew(impl: str) -> None:
    """A CUDA graph capture rebuilds the backward-only closure's forward on the capture stream. Autograd keeps a
    leaf's gradient accumulator, with the stream it was made on, as long as some graph holds it: a forward built
    while the previous output lives would reuse the accumulators of the first build, on the default stream, and
    the capture would fail. The rebuild drops the old graph first, so each build makes them anew."""
    from sdpa_impls.bench.inputs import make_inputs
    from sdpa_impls.bench.measure import BackwardOnly, mode_closure

    inputs = make_inputs(Case(lq=64, lk=64, e=16, mode="bwd"), "cpu")
    fn = mode_closure(sdpa_impls.get(impl), inputs, "bwd")
    assert isinstance(fn, BackwardOnly)

    def accumulator(leaf: torch.Tensor) -> torch.autograd.graph.Node:
        return leaf.view_as(leaf).grad_fn.next_functions[0][0]  # the leaf's one live AccumulateGrad node

    leaves = (inputs.query, inputs.key, inputs.value)
    for leaf in leaves:
        accumulator(leaf).metadata["first build"] = True
    assert all("first build" in accumulator(leaf).metadata for leaf in leaves)  # the same node while it lives
    fn.rebuild()
    assert not any("first build" in accumulator(leaf).metadata for leaf in leaves)
    grads = fn()
    assert [g.shape for g in grads] == [leaf.shape for leaf in leaves]


@pytest.mark.parametrize("impl", ["compiled", "naive"])
def test_a_compiled_backward_only_closure_runs_with_donated_buffers_off_then_restores_them(impl: str) -> None:
    """Backward only calls backward again on one graph (retain_graph). A compiled forward's backward that frees
    its saved tensors refuses that (torch 2.11 on CUDA: "compiled with non-empty donated buffers"), so a closure
    whose forward compiles runs its backward with donation off, and leaves torch's setting as it found it; a closure
    that compiles nothing runs with the setting untouched."""
    from sdpa_impls.bench.inputs import make_inputs
    from sdpa_impls.bench.measure import mode_closure

    inputs = make_inputs(Case(lq=64, lk=64, e=16, mode="bwd"), "cpu")
    fn = mode_closure(sdpa_impls.get(impl), inputs, "bwd")
    seen: list[bool] = []
    handle = inputs.query.register_hook(lambda g: seen.append(torch._functorch.config.donated_buffer))
    try:
        before = torch._functorch.config.donated_buffer
        fn()
        fn()  # the same graph again, as every timed call after the first
    finally:
        handle.remove()
    assert seen == [impl != "compiled" and before] * 2
    assert torch._functorch.config.donated_buffer == before


# A child allocating a 1 MiB buffer: whether glibc gave it a mapping of its own (mallinfo2's hblks, 1 or 0); with
# PREPARE, after the suite's first prepare_point.
MAPPED_BLOCKS = ("import ctypes\nclass M(ctypes.Structure): _fields_ = [(n, ctypes.c_size_t) for n in "
                 "'arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost'.split()]\n"
                 "libc = ctypes.CDLL(None); libc.mallinfo2.restype = M\n"
                 "before = libc.mallinfo2().hblks; held = bytearray(1 << 20)\n"
                 "print(libc.mallinfo2().hblks - before)")
PREPARE = ("from sdpa_impls.bench.check import CaseContext\nfrom sdpa_impls.bench.grid import Case\n"
           "from sdpa_impls.bench.measure import prepare_point\n"
           "prepare_point('naive', CaseContext(Case(lq=16, lk=16, e=16), 'cpu'))\n")


def mapped_blocks(env: dict[str, str], prepare: bool = False) -> int:
    done = subprocess.run([sys.executable, "-c", (PREPARE if prepare else "") + MAPPED_BLOCKS], env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    return int(done.stdout.split()[-1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's allocator settings: this libc is "
                    f"{platform.libc_ver()[0] or 'not glibc'}")
def test_a_measuring_process_fixes_glibcs_thresholds_unless_its_environment_chose() -> None:
    """Left automatic, glibc maps a 1 MiB block on its own (faulted in afresh on every use) until the first such
    block is freed; the first prepare_point fixes the thresholds where a long-running process ends up."""
    plain = {k: v for k, v in os.environ.items() if not allocator.caller_chose({k: v})}
    assert mapped_blocks(plain) == 1  # a fresh process, automatic threshold (128 KiB)
    assert mapped_blocks(plain, prepare=True) == 0  # from the heap: the threshold is 32 MiB now
    assert mapped_blocks(plain | {"MALLOC_ARENA_MAX": "2"}, prepare=True) == 1  # the caller's own choice stands
    assert mapped_blocks(plain | allocator.ENV) == 0  # the same values through the environment (continuous)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a torch without CUDA: here CUDA is available")
def test_a_cuda_case_on_a_torch_without_cuda_is_skipped_with_one_line() -> None:
    """From Python as from the command line: one reason naming the torch, not each implementation's CUDA error."""
    case = Case(lq=32, lk=32, e=16)
    for r in [*run_case(case, ["fused", "torch_sdpa"], "cuda"), *run_case_interleaved(case, ["naive"], "cuda")]:
        assert r.status == "skipped" and r.reason.startswith("no CUDA device is available to this torch (")
