"""The CPU performance targets: measure them in one interleaved run, print the verdict table, plot time vs L.

    flock /tmp/sdpa-measure.lock python -m sdpa_impls.targets --out docs/

Every case times all its implementations on the same inputs in interleaved rounds, one call of each per
round (measure.run_case_interleaved), so a slower period of a shared machine lands on all of them alike
and each ratio compares medians over the same rounds. Peak memory is measured in a separate pass.
"""
from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from .bench.grid import PRESETS, Case
from .bench.machine import machine_info
from .bench.measure import Options, run_case, run_case_interleaved
from .bench.result import Result
from .registry import names

DEVICE = "cpu"
CORE = ("torch_sdpa", "naive", "fused", "chunked")
BF16_CASE = Case(lq=4096, lk=4096, e=128, dtype="bf16")
FP32_CASE = Case(lq=2048, lk=2048, e=64)
MEMORY_LENGTHS = (2048, 8192)
TIMING = Options(budget_s=0.5, min_reps=5, max_reps=15, warmup=1, memory=False)  # 5+ rounds per case
MEMORY = Options(budget_s=0.0, min_reps=1, max_reps=1, warmup=0, memory=True)


def _plotted(c: Case) -> bool:
    """The plot's panels: forward and forward+backward, fp32 at E=64 and bf16 at E=128, causal off."""
    return not c.causal and (c.dtype, c.e) in (("fp32", 64), ("bf16", 128))


def memory_case(lq: int) -> Case:
    return Case(lq=lq, lk=lq, e=64, mode="fwd+bwd")


@dataclass(frozen=True)
class Row:
    """One line of the verdict table; `measured` is the worst ratio over `where`."""

    what: str
    limit: float
    measured: float | None
    where: str

    @property
    def met(self) -> bool | None:
        return None if self.measured is None else self.measured <= self.limit


class Table:
    """Results indexed by (implementation, case) with the ratio helpers the targets need."""

    def __init__(self, results: Iterable[Result]) -> None:
        self.results = list(results)
        ok = [r for r in self.results if r.status == "ok"]
        # the memory pass repeats one case of the cpu preset (L=2048, E=64, fp32, fwd+bwd) with a single,
        # non-interleaved call: its times must not replace the interleaved ones
        self.by = {(r.impl, r.case): r for r in ok if r.peak_memory_bytes is None}
        self.peaks = {(r.impl, r.case): r for r in ok if r.peak_memory_bytes is not None}

    def time(self, impl: str, case: Case) -> float | None:
        r = self.by.get((impl, case))
        return r.median_s if r else None

    def memory(self, impl: str, case: Case) -> float | None:
        r = self.peaks.get((impl, case))
        return r.peak_memory_bytes if r else None

    def worst(self, what: str, limit: float, pairs: Iterable[tuple[str, Callable[[], float | None]]]) -> Row:
        """The largest ratio over (label, ratio) pairs; a pair that could not be measured is named."""
        worst, where, missing = None, "", []
        for label, ratio in pairs:
            value = ratio()
            if value is None:
                missing.append(label)
            elif worst is None or value > worst:
                worst, where = value, label
        if missing:
            where += f" (not measured: {', '.join(missing)})"
        return Row(what, limit, worst, where)

    def ratio(self, a: str, b: str, case_a: Case, case_b: Case | None = None) -> Callable[[], float | None]:
        def f() -> float | None:
            ta, tb = self.time(a, case_a), self.time(b, case_b or case_a)
            return ta / tb if ta and tb else None
        return f


def plan() -> list[tuple[Case, list[str], bool]]:
    """(case, implementations, timed) in run order: the cpu preset, timed in interleaved rounds, then the two
    memory cases, measured for peak memory (one of them is also a cpu-preset case: it runs twice)."""
    everyone = [n for n in names() if n not in CORE]
    out = []
    for case in PRESETS["cpu"]:
        impls = list(CORE) + (everyone if _plotted(case) else [])
        out.append((case, impls, True))
    for lq in MEMORY_LENGTHS:
        out.append((memory_case(lq), ["naive", "chunked", "fused", "torch_sdpa"], False))
    return out


def measure(stream=sys.stdout) -> list[Result]:
    results = []
    start = time.perf_counter()
    for case, impls, timed in plan():
        rows = run_case_interleaved(case, impls, DEVICE, TIMING) if timed else run_case(case, impls, DEVICE, MEMORY)
        for r in rows:
            results.append(r)
            shown = f"{r.median_s * 1e3:9.1f} ms" if r.status == "ok" else f"{r.status}: {r.reason[:70]}"
            mem = f"  peak {r.peak_memory_bytes / 2**20:8.1f} MiB" if r.peak_memory_bytes else ""
            print(f"[{time.perf_counter() - start:6.0f}s] {case.id:28s} {r.impl:20s} {shown}{mem}",
                  file=stream, flush=True)
    return results


def evaluate(t: Table) -> list[Row]:
    cpu = PRESETS["cpu"]
    fp32_fwd = [c for c in cpu if c.dtype == "fp32" and c.mode == "fwd"]
    fp32_train = [c for c in cpu if c.dtype == "fp32" and c.mode == "fwd+bwd"]
    causal = [c for c in cpu if c.causal and c.lq >= 2048]
    small, large = (memory_case(lq) for lq in MEMORY_LENGTHS)

    def grows(impl: str) -> Callable[[], float | None]:
        def f() -> float | None:
            a, b = t.memory(impl, small), t.memory(impl, large)
            return b / a if a and b else None
        return f

    growth = f"peak memory L={MEMORY_LENGTHS[1]} / L={MEMORY_LENGTHS[0]}, {small.id.split('-', 1)[1]}"
    naive_growth = grows("naive")()
    return [
        t.worst("fused / torch_sdpa, " + BF16_CASE.id, 0.5,
                [(BF16_CASE.id, t.ratio("fused", "torch_sdpa", BF16_CASE))]),
        t.worst("fused / torch_sdpa, " + FP32_CASE.id, 1.15,
                [(FP32_CASE.id, t.ratio("fused", "torch_sdpa", FP32_CASE))]),
        t.worst("fused / naive, every point of the cpu preset", 1.0,
                [(c.id, t.ratio("fused", "naive", c)) for c in cpu]),
        t.worst("chunked / torch_sdpa, every fp32 fwd point of the cpu preset", 1.5,
                [(c.id, t.ratio("chunked", "torch_sdpa", c)) for c in fp32_fwd]),
        t.worst(f"chunked {growth} (naive: {naive_growth:.1f}×)" if naive_growth else f"chunked {growth}", 4.5,
                [("chunked", grows("chunked"))]),
        t.worst("fused / torch_sdpa, every fp32 fwd+bwd point of the cpu preset", 2.0,
                [(c.id, t.ratio("fused", "torch_sdpa", c)) for c in fp32_train]),
        t.worst("chunked / torch_sdpa, every fp32 fwd+bwd point of the cpu preset", 2.0,
                [(c.id, t.ratio("chunked", "torch_sdpa", c)) for c in fp32_train]),
        t.worst("fused causal / non-causal, every L ≥ 2048 point of the cpu preset", 0.6,
                [(c.id, t.ratio("fused", "fused", c, replace(c, causal=False))) for c in causal]),
        t.worst("chunked causal / non-causal, every L ≥ 2048 point of the cpu preset", 0.6,
                [(c.id, t.ratio("chunked", "chunked", c, replace(c, causal=False))) for c in causal]),
    ]


def markdown(rows: list[Row]) -> str:
    lines = ["| target | limit | measured | met | worst case |", "|---|---|---|---|---|"]
    for r in rows:
        value = "-" if r.measured is None else f"{r.measured:.3f}"
        met = {True: "yes", False: "**no**", None: "-"}[r.met]
        lines.append(f"| {r.what} | ≤ {r.limit:g} | {value} | {met} | {r.where} |")
    return "\n".join(lines)


def plot(t: Table, path: Path) -> Path:
    """Time vs L on log-log axes, one panel per (dtype, E, mode) of the plotted cases, one line per implementation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    panels = sorted({(c.dtype, c.e, c.mode) for c in PRESETS["cpu"] if _plotted(c)},
                    key=lambda p: (p[2] != "fwd", p[0] != "fp32"))
    fig, axes = plt.subplots(2, 2, figsize=(12, 9), squeeze=False)
    grid = {c for c in PRESETS["cpu"] if _plotted(c)}
    impls = [n for n in names() if any(r.impl == n and r.case in grid for r in t.by.values())]
    for ax, (dtype, e, mode) in zip(axes.flat, panels):
        for k, impl in enumerate(impls):
            pts = sorted((c.lq, r.median_s) for (i, c), r in t.by.items()
                         if i == impl and c in grid and (c.dtype, c.e, c.mode) == (dtype, e, mode))
            if pts:
                ax.plot(*zip(*pts), marker="osD^vPX*"[k % 8], label=impl, color=plt.get_cmap("tab10")(k))
        ax.set(xscale="log", yscale="log", xlabel="sequence length L", ylabel="median time per call (s)",
               title=f"{dtype}, E={e}, {mode}, non-causal, B=1, H=8")
        lengths = sorted({c.lq for c in grid})
        ax.set_xticks(lengths, labels=[str(x) for x in lengths])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.grid(True, which="both", alpha=0.3)
    axes.flat[0].legend()
    info = machine_info(DEVICE)
    fig.suptitle(f"CPU attention, {info['cpu']}, {info['threads']} threads, torch {info['torch']}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sdpa_impls.targets", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="directory for performance-time-vs-L.png")
    args = parser.parse_args(argv)
    if args.out is not None:
        try:  # before a 20-minute run, not after it
            import matplotlib  # noqa: F401
        except ImportError:
            parser.error("--out needs matplotlib for the plot: pip install 'sdpa-bench[plots]' (or leave out --out)")
    start = time.perf_counter()
    info = machine_info(DEVICE)
    print(f"machine: {info['cpu']}, {info['threads']} threads, torch {info['torch']}, python {info['python']}")
    table = Table(measure())
    rows = evaluate(table)
    print(f"\nmeasured in one run of {time.perf_counter() - start:.0f} s\n")
    print(markdown(rows))
    bad = [r for r in table.results if r.status in ("wrong", "failed")]
    for r in bad:
        print(f"{r.status}: {r.impl} on {r.case.id}: {r.reason}")
    if args.out is not None:
        print(f"plot: {plot(table, args.out / 'performance-time-vs-L.png')}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
