"""Regression rules as small objects whose verdict message carries its numbers: time, memory, correctness, in-run ratios.

    TimeRule.parse("median:15%", alpha=0.01).check(baseline_point, candidate_point[, base_ref, cand_ref]) -> Check
    MemoryRule.parse("peak:1%").check(baseline_point, candidate_point) -> Check
    correctness_check(point) -> Check
    RatioRule.parse("time: fused / torch_sdpa <= 1.5 when dtype == fp32").check(points, alpha) -> [Check]

Ratio rule syntax: `METRIC: IMPL / IMPL OP LIMIT [when FIELD OP VALUE [and ...]]` with METRIC
`time` (medians, plus a rank test on the raw samples) or `peak_memory`, or `ceiling: IMPL / gemm OP FRACTION`
(achieved FLOP/s over the same run's GEMM ceiling of the case's dtype), OP one of <= < >= >, and
FIELD a case field (lq, lk, e, ev, dtype, causal, mode, mask, batch, heads_q, heads_kv; `L` = lq), `device`
or `case` (the case id); `==`/`!=` on text fields match fnmatch patterns, e.g. `case == *-fwd`.
It is checked on every case where both implementations ran in the candidate, and is "n/a" when none did.
"""
from __future__ import annotations

import fnmatch
import operator
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..fmt import fmt_bytes, fmt_factor, fmt_seconds
from .points import CASE_FIELDS, Point
from .ranktest import mann_whitney_u

PASS, FAIL, NA, REFUSED, INFO = "pass", "FAIL", "n/a", "refused", "info"
NO_CASE = "no case where"  # how an in-run rule that applied to no case that ran begins its message
# a check's `mark`: what a check that judged nothing stands for, for code to tell without reading its prose
IDLE, REFERENCE, FAILED_BOTH = "idle rule", "time reference", "failed in both"
OPS = {"<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt,
       "==": operator.eq, "!=": operator.ne}
METRICS = {"time": "median_s", "peak_memory": "peak_memory_bytes", "ceiling": "ceiling_fraction"}
GEMM = "gemm"  # the denominator of a ceiling rule: the run's own GEMM ceiling, not an implementation
FIELD_ALIASES = {"L": "lq"}
# the values a condition may compare a field with (a pattern with * ? [ is taken as it is); mask names a structure too
KNOWN_VALUES = {"dtype": ("fp32", "bf16", "fp16"), "mode": ("fwd", "bwd", "fwd+bwd"), "device": ("cpu", "cuda"),
                "causal": ("true", "false")}
NUMERIC_FIELDS = ("lq", "lk", "e", "ev", "batch", "heads_q", "heads_kv")


@dataclass(frozen=True)
class Check:
    """The outcome of one rule on one subject (a benchmark or a ratio rule at one case)."""

    kind: str  # time | memory | correctness | ratio | missing | new
    subject: str
    status: str  # pass | FAIL | n/a | refused | info
    message: str
    mark: str = ""  # "" | IDLE (a ratio rule no case ran for) | REFERENCE (the time reference's row) | FAILED_BOTH
    # a time check judged in units of the time reference: (candidate / baseline in those units, the reference's name)
    referenced: tuple[float, str] | None = None

    @property
    def failed(self) -> bool:
        return self.status == FAIL


def _percent(spec: str, stat: str, what: str) -> float:
    m = re.fullmatch(rf"\s*{stat}\s*:\s*([0-9]*\.?[0-9]+)\s*%\s*", spec)
    if not m:
        raise ValueError(f"{what} {spec!r} should look like '{stat}:10%' (or 'off')")
    if float(m.group(1)) == float("inf"):  # 400 digits: "a regression above ×inf" judges nothing
        raise ValueError(f"{what} {spec!r}: {m.group(1)[:12]}... % is too large a number")
    return float(m.group(1))


def smallest_p(n1: int, n2: int) -> float:
    """The smallest p-value the one-sided rank test can give with these sample sizes (perfect separation)."""
    return mann_whitney_u(range(n2, n2 + n1), range(n2), "greater").pvalue


def slower_p(slow: Sequence[float], fast: Sequence[float], alpha: float, alternative: str = "greater"
             ) -> tuple[float | None, str]:
    """(p-value, note) of "`slow` is larger than `fast`"; p is None when the samples cannot show it at `alpha`."""
    if not slow or not fast:
        return None, "no raw samples (save with --benchmark-save-data): factor alone"
    if smallest_p(len(slow), len(fast)) >= alpha:
        return None, f"{len(slow)} vs {len(fast)} samples cannot reach p < {alpha:g}: factor alone"
    return mann_whitney_u(slow, fast, alternative).pvalue, ""


@dataclass(frozen=True)
class TimeRule:
    """`median:15%`: the candidate median above baseline × 1.15 and, on raw samples, slower with p < alpha.

    With reference points (the same case's reference implementation in each run), times are first divided
    by the reference's median, so a machine that is busier during one run slows both and cancels out.
    """

    percent: float
    alpha: float

    @classmethod
    def parse(cls, spec: str, alpha: float) -> TimeRule:
        if not 0.0 < alpha < 1.0:
            raise ValueError(f"alpha should be between 0 and 1, got {alpha!r}")
        return cls(_percent(spec, "median", "time rule"), alpha)

    @property
    def factor(self) -> float:
        return 1.0 + self.percent / 100.0

    def check(self, base: Point, cand: Point, base_ref: Point | None = None, cand_ref: Point | None = None) -> Check:
        if base.median_s is None or cand.median_s is None:
            return Check("time", cand.label, NA, "no median time recorded")
        label, fmt, unit = cand.label, fmt_seconds, ""
        if base_ref is not None and cand_ref is not None and base_ref.median_s and cand_ref.median_s:
            base, cand, unit = relative_to(base, base_ref.median_s), relative_to(cand, cand_ref.median_s), cand_ref.impl

            def fmt(value: float | None, ref: str = cand_ref.impl) -> str:
                return f"{value:.3g}× {ref}"
        ratio = cand.median_s / base.median_s if base.median_s > 0 else float("inf")
        referenced = (ratio, unit) if unit else None
        head = f"median {fmt(cand.median_s)}"
        limit = f"baseline {fmt(base.median_s)} × {fmt_factor(self.factor)}"
        if ratio <= self.factor:
            return Check("time", label, PASS, f"{head} <= {limit} (×{ratio:.3f})" if ratio >= 0.0095 else
                         f"{head} <= {limit} (×{ratio:.2g})", referenced=referenced)
        p, note = slower_p(cand.samples, base.samples, self.alpha)
        if p is None:
            return Check("time", label, FAIL, f"{head} > {limit} ({note})", referenced=referenced)
        if p < self.alpha:
            return Check("time", label, FAIL, f"{head} > {limit} (p={p:.2g})", referenced=referenced)
        return Check("time", label, PASS, f"{head} > {limit} but not significant (p={p:.2g} >= {self.alpha:g})",
                     referenced=referenced)


def relative_to(point: Point, scale: float) -> Point:
    """`point` with its median and samples divided by `scale` (its reference's median on the same case and run)."""
    return replace(point, median_s=point.median_s / scale, samples=tuple(s / scale for s in point.samples))


@dataclass(frozen=True)
class MemoryRule:
    """`peak:1%`: the candidate's peak memory above baseline × 1.01 (peak memory is deterministic: no test)."""

    percent: float

    @classmethod
    def parse(cls, spec: str) -> MemoryRule:
        return cls(_percent(spec, "peak", "memory rule"))

    def check(self, base: Point, cand: Point) -> Check:
        if base.peak_memory_bytes is None or cand.peak_memory_bytes is None:
            return Check("memory", cand.label, NA, "no peak memory recorded")
        factor = 1.0 + self.percent / 100.0
        text = (f"peak {fmt_bytes(cand.peak_memory_bytes)} %s baseline {fmt_bytes(base.peak_memory_bytes)} "
                f"× {fmt_factor(factor)}")
        if cand.peak_memory_bytes > base.peak_memory_bytes * factor:
            return Check("memory", cand.label, FAIL, text % ">" + f" (+{cand.peak_memory_bytes - base.peak_memory_bytes} B)")
        return Check("memory", cand.label, PASS, text % "<=")


def correctness_check(point: Point) -> Check:
    """A wrong benchmark fails whatever its speed: status must be ok and max_error <= error_tolerance."""
    if point.status != "ok":
        return Check("correctness", point.label, FAIL, f"status {point.status!r}, not 'ok'"
                     + (f": {point.reason}" if point.reason else ""))
    if point.max_error is None or point.error_tolerance is None:
        return Check("correctness", point.label, NA, "no error vs fp64 recorded")
    if point.max_error <= point.error_tolerance:
        return Check("correctness", point.label, PASS,
                     f"max |error| {point.max_error:.3g} <= tolerance {point.error_tolerance:.3g}")
    return Check("correctness", point.label, FAIL,
                 f"max |error| {point.max_error:.3g} > tolerance {point.error_tolerance:.3g}: wrong result")


@dataclass(frozen=True)
class Condition:
    """`FIELD OP VALUE` on a case, e.g. `lq >= 2048`, `dtype == fp32`, `case == *-fwd`."""

    field: str
    op: str
    value: str

    @classmethod
    def parse(cls, text: str) -> Condition:
        m = re.fullmatch(r"\s*(\w+)\s*(<=|>=|==|!=|<|>)\s*(\S+)\s*", text)
        field = FIELD_ALIASES.get(m.group(1), m.group(1)) if m else ""
        if not m or field not in CASE_FIELDS + ("case",):
            raise ValueError(f"condition {text.strip()!r} should be FIELD OP VALUE with FIELD one of "
                             f"case, L, {', '.join(CASE_FIELDS)}")
        value, known = m.group(3), KNOWN_VALUES.get(field)
        if known and not any(c in value for c in "*?[") and value.lower() not in known:  # a typo would hold nowhere
            raise ValueError(f"condition {text.strip()!r}: {field} is one of {', '.join(known)}, not {value!r}")
        if field in NUMERIC_FIELDS:
            try:
                float(value)
            except ValueError:
                raise ValueError(f"condition {text.strip()!r}: {field} is a number, not {value!r}") from None
        return cls(field, m.group(2), value)

    def holds(self, point: Point) -> bool:
        have = point.case_id if self.field == "case" else point.case.get(self.field)
        if have is None:
            return False
        if isinstance(have, bool) or isinstance(have, str):
            have, want = str(have).lower(), self.value.lower()
            if self.op in ("==", "!="):
                return fnmatch.fnmatchcase(have, want) == (self.op == "==")
            return OPS[self.op](have, want)
        try:
            return OPS[self.op](float(have), float(self.value))
        except ValueError:
            return False


RULE_RE = re.compile(r"\s*(?P<metric>\w+)\s*:\s*(?P<num>[\w.-]+)\s*/\s*(?P<den>[\w.-]+)\s*(?P<op><=|>=|<|>)\s*"
                     r"(?P<limit>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(?:when\s+(?P<cond>.+?))?\s*")


@dataclass(frozen=True)
class RatioRule:
    """An in-run rule between two implementations on the same case of one run; see the module docstring."""

    text: str
    metric: str
    numerator: str
    denominator: str
    op: str
    limit: float
    conditions: tuple[Condition, ...] = ()

    @classmethod
    def parse(cls, text: str) -> RatioRule:
        m = RULE_RE.fullmatch(text) if isinstance(text, str) else None
        if not m:
            raise ValueError(f"ratio rule {text!r} should look like 'time: fused / torch_sdpa <= 1.5' or "
                             "'peak_memory: chunked / naive <= 0.5 when lq >= 2048'")
        if m.group("metric") not in METRICS:
            raise ValueError(f"ratio rule {text!r}: metric {m.group('metric')!r} is not one of {', '.join(METRICS)}")
        if (m.group("metric") == "ceiling") != (m.group("den") == GEMM):
            raise ValueError(f"ratio rule {text!r}: a ceiling rule reads 'ceiling: IMPL / gemm >= FRACTION', and "
                             "only a ceiling rule divides by gemm")
        conds = tuple(Condition.parse(c) for c in re.split(r"\s+and\s+", m.group("cond"))) if m.group("cond") else ()
        if float(m.group("limit")) == float("inf"):  # 400 digits: a limit no ratio reaches, a rule that never fails
            raise ValueError(f"ratio rule {text!r}: its limit is too large a number (infinite)")
        return cls(" ".join(text.split()), m.group("metric"), m.group("num"), m.group("den"), m.group("op"),
                   float(m.group("limit")), conds)

    def check(self, points: Sequence[Point], alpha: float) -> list[Check]:
        by_key = {p.key: p for p in points if p.status == "ok"}
        cases = sorted({p.case_id for p in points})
        checks = []
        for case_id in cases:
            num = by_key.get((self.numerator, case_id))
            den = num if self.metric == "ceiling" else by_key.get((self.denominator, case_id))
            if num is None or den is None or not all(c.holds(num) for c in self.conditions):
                continue
            checks.append(self._check_case(num, den, alpha))
        if not checks:
            why = (f"{NO_CASE} both {self.numerator} and {self.denominator} ran"
                   + (" and " + " and ".join(f"{c.field} {c.op} {c.value}" for c in self.conditions)
                      if self.conditions else ""))
            checks.append(Check("ratio", self.text, NA, why, mark=IDLE))
        return checks

    def _check_case(self, num: Point, den: Point, alpha: float) -> Check:
        subject = f"{self.text} @ {num.case_id}"
        a, b = getattr(num, METRICS[self.metric]), getattr(den, METRICS[self.metric])
        if a is None or b is None:
            return Check("ratio", subject, NA, f"{self.metric} not recorded")
        if self.metric == "ceiling":  # a fraction of a ceiling timed in the same run: no second time to rank against
            text = (f"{self.numerator} at {a:.1%} of this run's GEMM ceiling, "
                    f"{'' if OPS[self.op](a, self.limit) else 'not '}{self.op} {self.limit:.0%}")
            return Check("ratio", subject, PASS if OPS[self.op](a, self.limit) else FAIL, text)
        ratio = a / b if b else float("inf") if a else 1.0
        fmt = fmt_seconds if self.metric == "time" else fmt_bytes
        text = (f"{self.numerator} {fmt(a)} / {self.denominator} {fmt(b)} = {ratio:.3g} "
                f"{'' if OPS[self.op](ratio, self.limit) else 'not '}{self.op} {self.limit:g}")
        if OPS[self.op](ratio, self.limit):
            return Check("ratio", subject, PASS, text)
        if self.metric != "time":
            return Check("ratio", subject, FAIL, text)
        scaled = [self.limit * s for s in den.samples]
        p, note = slower_p(num.samples, scaled, alpha, "greater" if self.op in ("<=", "<") else "less")
        if p is None:
            return Check("ratio", subject, FAIL, f"{text} ({note})")
        if p < alpha:
            return Check("ratio", subject, FAIL, f"{text} (p={p:.2g})")
        return Check("ratio", subject, PASS, f"{text} but not significant (p={p:.2g} >= {alpha:g})")
