"""The CPU performance targets: which points to measure (the plan), and the verdict table over their results.

The ratio targets are declared once, in gate.targets, and shared with the CI gate; the two that compare one
implementation on two cases (memory growth with L, causal against non-causal) are evaluated here alone.
`sdpa-bench targets` (cli.targets) measures the plan in interleaved rounds and prints this verdict.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from ..bench.grid import PRESETS, Case
from ..bench.measure import Options
from ..bench.result import Result
from ..bench.ceilings import gemm_key
from ..gate.targets import CEILING_TARGETS, CPU_TARGETS, RatioTarget
from ..registry import names

DEVICE = "cpu"
CORE = ("torch_sdpa", "naive", "fused", "chunked")
BF16_CASE = Case(lq=4096, lk=4096, e=128, dtype="bf16")  # the cases two of the declared targets name
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
class TargetRow:
    """One line of the verdict table; `measured` is the worst ratio over `where`."""

    what: str
    limit: float
    measured: float | None
    where: str
    at_least: bool = False  # a fraction of the ceiling: the worst is the smallest, and it must reach the limit

    @property
    def met(self) -> bool | None:
        if self.measured is None:
            return None
        return self.measured >= self.limit if self.at_least else self.measured <= self.limit


class Table:
    """Results indexed by (implementation, case) with the ratio helpers the targets need.

    `ceilings` are the run's (bench.ceilings.RunCeilings.values()); `case_ceilings` the ones sampled during each
    case's own rounds (RunCeilings.since). A fraction of the ceiling uses the case's own ceiling when there is one,
    so a slow period of the machine lands on both numbers of the fraction; else the run's."""

    def __init__(self, results: Iterable[Result], ceilings: dict[str, float] | None = None,
                 case_ceilings: dict[Case, dict[str, float]] | None = None) -> None:
        self.results = list(results)
        self.ceilings = ceilings or {}
        self.case_ceilings = case_ceilings or {}
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

    def worst(self, what: str, limit: float, pairs: Iterable[tuple[str, Callable[[], float | None]]],
              at_least: bool = False) -> TargetRow:
        """The largest ratio (`at_least`: the smallest fraction) over (label, value) pairs; a pair that could not
        be measured is named."""
        worst, where, missing = None, "", []
        for label, ratio in pairs:
            value = ratio()
            if value is None:
                missing.append(label)
            elif worst is None or (value < worst if at_least else value > worst):
                worst, where = value, label
        if missing:
            where += f" (not measured: {', '.join(missing)})"
        return TargetRow(what, limit, worst, where, at_least)

    def ceiling(self, case: Case) -> float | None:
        """The GEMM ceiling of the case's dtype that `case` is judged against: its own rounds', else the run's."""
        key = gemm_key(case.dtype, DEVICE)
        return self.case_ceilings.get(case, {}).get(key) or self.ceilings.get(key)

    def fraction(self, impl: str, case: Case) -> Callable[[], float | None]:
        """Achieved FLOP/s of `impl` on `case` over the GEMM ceiling of the case's dtype (`ceiling`)."""
        def f() -> float | None:
            t, ceiling = self.time(impl, case), self.ceiling(case)
            return case.flops() / t / ceiling if t and ceiling else None
        return f

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


def ratio_row(t: Table, target: RatioTarget) -> TargetRow:
    """A declared ratio target, judged at its limit on every cpu-preset case it selects."""
    cases = [c for c in PRESETS["cpu"] if target.applies_to(c.as_dict() | {"device": DEVICE})]
    if target.metric == "ceiling":
        return t.worst(target.what, target.limit, [(c.id, t.fraction(target.numerator, c)) for c in cases], True)
    return t.worst(target.what, target.limit,
                   [(c.id, t.ratio(target.numerator, target.denominator, c)) for c in cases])


def evaluate(t: Table) -> list[TargetRow]:
    """The declared ratio targets, then the two that compare one implementation on two cases."""
    cpu = PRESETS["cpu"]
    causal = [c for c in cpu if c.causal and c.lq >= 2048]
    small, large = (memory_case(lq) for lq in MEMORY_LENGTHS)

    def grows(impl: str) -> Callable[[], float | None]:
        def f() -> float | None:
            a, b = t.memory(impl, small), t.memory(impl, large)
            return b / a if a and b else None
        return f

    growth = f"peak memory L={MEMORY_LENGTHS[1]} / L={MEMORY_LENGTHS[0]}, {small.id.split('-', 1)[1]}"
    naive_growth = grows("naive")()
    ratios = [ratio_row(t, target) for target in CPU_TARGETS]
    return ratios[:4] + [
        t.worst(f"chunked {growth} (naive: {naive_growth:.1f}×)" if naive_growth else f"chunked {growth}", 4.5,
                [("chunked", grows("chunked"))]),
    ] + ratios[4:] + [
        t.worst("fused causal / non-causal, every L ≥ 2048 point of the cpu preset", 0.6,
                [(c.id, t.ratio("fused", "fused", c, replace(c, causal=False))) for c in causal]),
        t.worst("chunked causal / non-causal, every L ≥ 2048 point of the cpu preset", 0.6,
                [(c.id, t.ratio("chunked", "chunked", c, replace(c, causal=False))) for c in causal]),
    ] + [ratio_row(t, target) for target in CEILING_TARGETS]


def markdown(rows: list[TargetRow]) -> str:
    lines = ["| target | limit | measured | met | worst case |", "|---|---|---|---|---|"]
    for r in rows:
        value = "-" if r.measured is None else f"{r.measured:.1%}" if r.at_least else f"{r.measured:.3f}"
        met = {True: "yes", False: "**no**", None: "-"}[r.met]
        limit = f"≥ {r.limit:.0%}" if r.at_least else f"≤ {r.limit:g}"
        lines.append(f"| {r.what} | {limit} | {value} | {met} | {r.where} |")
    return "\n".join(lines)


def ceiling_table(t: Table, impls: tuple[str, ...] = ("fused", "torch_sdpa", "chunked", "naive")) -> str:
    """Every impl as a fraction of the run's GEMM ceiling on the cpu preset's L >= 2048 cases."""
    cases = [c for c in PRESETS["cpu"] if c.lq >= 2048]
    lines = ["| case | " + " | ".join(impls) + " |", "|---|" + "---|" * len(impls)]
    for c in cases:
        cells = [t.fraction(i, c)() for i in impls]
        lines.append(f"| {c.id} | " + " | ".join("-" if v is None else f"{v:.0%}" for v in cells) + " |")
    return "\n".join(lines)


