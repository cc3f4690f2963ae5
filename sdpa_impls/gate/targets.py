"""The CPU performance targets that are ratios, declared once: of two implementations' times, or of one
implementation's FLOP/s to the GEMM ceiling measured in the same run.

The targets report (`sdpa-bench targets`) judges each at its limit on the cases of the `cpu` preset it names;
the CI gate (`cpu_targets = true` in its config) checks the same ratio at a wider limit on the `ci` preset,
with a margin for a shared machine. Targets that compare one implementation on two cases (causal against
non-causal, memory growth with L) cannot be in-run ratio rules: the report alone evaluates those.
"""
from __future__ import annotations

from dataclasses import dataclass

from .points import Point
from .rules import RatioRule


@dataclass(frozen=True)
class RatioTarget:
    """`numerator` time / `denominator` time <= `limit` on the cases `where` selects (ratio-rule conditions);
    with `metric="ceiling"`, `denominator="gemm"` and `op=">="`: FLOP/s / the run's GEMM ceiling >= `limit`."""

    what: str
    numerator: str
    denominator: str
    limit: float
    where: str
    # the gate's limit on the ci preset, the target plus a margin (docs/records/2026-11-21-epyc-ci-rule-margins.md);
    ci_limit: float | None
    ci_where: str           # None: the ci preset has no case it applies to, the targets report alone judges it
    metric: str = "time"
    op: str = "<="

    def rule(self, ci: bool = False) -> RatioRule:
        limit, where = (self.ci_limit, self.ci_where) if ci else (self.limit, self.where)
        return RatioRule.parse(f"{self.metric}: {self.numerator} / {self.denominator} {self.op} {limit:g} "
                               f"when {where} and device == cpu")

    def applies_to(self, case: dict) -> bool:
        """Whether a case (a `Case.as_dict()` with `device`) is one the target is judged on."""
        point = Point(self.numerator, case["id"], None, case=case)
        return all(c.holds(point) for c in self.rule().conditions)


FP32_FWD, FP32_TRAIN = "dtype == fp32 and mode == fwd", "dtype == fp32 and mode == fwd+bwd"
# Comments: the range of the ci-preset ratio over 10 runs of `tox -e gate` on the project's 2-core VM.
CPU_TARGETS = (
    RatioTarget("fused / torch_sdpa, L4096-E128-bf16-fwd", "fused", "torch_sdpa", 0.5, "case == L4096-E128-bf16-fwd",
                0.7, "dtype == bf16 and mode == fwd and L >= 1024"),  # 0.30-0.43
    RatioTarget("fused / torch_sdpa, L2048-E64-fp32-fwd", "fused", "torch_sdpa", 1.15, "case == L2048-E64-fp32-fwd",
                1.75, FP32_FWD + " and L >= 1024"),  # 1.02-1.38
    RatioTarget("fused / naive, every point of the cpu preset", "fused", "naive", 1.0, "L >= 1",
                1.0, "L >= 1024"),  # 0.13-0.55
    RatioTarget("chunked / torch_sdpa, every fp32 fwd point of the cpu preset", "chunked", "torch_sdpa", 1.5, FP32_FWD,
                2.25, FP32_FWD + " and L >= 1024"),  # 1.23-1.74
    RatioTarget("fused / torch_sdpa, every fp32 fwd+bwd point of the cpu preset", "fused", "torch_sdpa", 2.0,
                FP32_TRAIN, 2.5, FP32_TRAIN + " and L >= 1024"),  # 1.06-1.87
    RatioTarget("chunked / torch_sdpa, every fp32 fwd+bwd point of the cpu preset", "chunked", "torch_sdpa", 2.0,
                FP32_TRAIN, 2.5, FP32_TRAIN + " and L >= 1024"),  # 1.18-1.66
)


def _ceiling(what: str, impl: str, limit: float, where: str, ci_limit: float | None, ci_where: str) -> RatioTarget:
    return RatioTarget(what, impl, "gemm", limit, where, ci_limit, ci_where, metric="ceiling", op=">=")


BIG = "L >= 2048 and causal == false"
# Fractions of the GEMM ceiling measured in the same run (a square GEMM of the case's dtype, bench.ceilings);
# causal cases count only the unmasked pairs, a backward 2.5x the forward's FLOPs. Comments: the ci-preset
# fractions (L = 1024, one thread) over three runs of the benchmark suite
# (docs/records/2026-11-21-epyc-ci-rule-margins.md); the gate's limit sits about 20 % below the lowest, where a
# ratio to torch_sdpa needed 50 % (1.75 for a 1.15 target).
CEILING_TARGETS = (
    _ceiling("fused fwd, fp32 and bf16, L ≥ 2048, E 64/128, causal off: of the GEMM ceiling", "fused", 0.85,
             f"mode == fwd and {BIG}", 0.55, "mode == fwd and L >= 1024"),  # fp32 79-81 %, bf16 68-71 %
    _ceiling("fused fwd, causal, L ≥ 2048: of the GEMM ceiling (unmasked pairs)", "fused", 0.80,
             "mode == fwd and L >= 2048 and causal == true", None, ""),  # the ci preset has no causal L=1024 case
    _ceiling("fused fwd+bwd, fp32 and bf16, L ≥ 2048: of the GEMM ceiling", "fused", 0.60,
             "mode == fwd+bwd and L >= 2048", 0.55, "mode == fwd+bwd and L >= 1024"),  # fp32 73-74 %
    _ceiling("chunked fwd, fp32, L ≥ 1024: of the GEMM ceiling", "chunked", 0.65,
             "mode == fwd and dtype == fp32 and L >= 1024", 0.5, "mode == fwd and dtype == fp32 and L >= 1024"),
)  # chunked: 68-70 %


def ci_rules() -> tuple[RatioRule, ...]:
    """The gate's in-run rules for the CPU targets (`cpu_targets = true`)."""
    return tuple(t.rule(ci=True) for t in CPU_TARGETS + CEILING_TARGETS if t.ci_limit is not None)
