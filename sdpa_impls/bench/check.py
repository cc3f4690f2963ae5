"""The check before any timing: an implementation's output and gradients against the fp64 reference, under
flash-attention's rule (at most 2× naive's error in the same dtype, plus a floor)."""
from __future__ import annotations

import math

import torch

from ..reference import max_abs_error, reference, tolerance
from ..registry import get
from .grid import Case
from .inputs import Inputs, make_inputs

BASELINE_IMPL = "naive"  # the error every other implementation is allowed twice of
GRAD_CHECK_MAX_SCORES = 1 << 27  # larger cases check the forward output only (fp64 autograd would not fit)


class WrongResult(AssertionError):
    """An implementation's output (or gradient) is further from the fp64 reference than the tolerance."""


class CaseContext:
    """The inputs of one case, and (computed on first use, once for all implementations) the fp64 reference and
    naive's errors. A case whose reference cannot be computed raises the same error for every implementation."""

    def __init__(self, case: Case, device: str, seed: int = 0) -> None:
        self.case = case
        self.device = device
        self.inputs: Inputs = make_inputs(case, device, seed)
        self._expected: tuple[torch.Tensor, tuple[torch.Tensor, ...] | None, dict[str, float]] | None = None
        self._error: BaseException | None = None

    @classmethod
    def build(cls, case: Case, device: str, seed: int = 0) -> CaseContext:
        return cls(case, device, seed)

    def expected(self) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None, dict[str, float]]:
        """(fp64 output, fp64 (dq, dk, dv) or None, naive's errors by name); computed once."""
        if self._error is not None:
            raise self._error
        if self._expected is None:
            try:
                self._expected = self._compute()
            except Exception as exc:
                self._error = exc
                raise
        return self._expected

    def _compute(self) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None, dict[str, float]]:
        case, inputs = self.case, self.inputs
        check_grads = case.mode != "fwd" and case.batch * case.heads_q * case.lq * case.lk <= GRAD_CHECK_MAX_SCORES
        q, k, v = (t.detach().requires_grad_(check_grads) for t in (inputs.query, inputs.key, inputs.value))
        ref = reference(q, k, v, inputs.attn_mask, is_causal=case.causal, enable_gqa=inputs.enable_gqa)
        grads = torch.autograd.grad(ref, (q, k, v), inputs.grad_out.double()) if check_grads else None
        self._expected = (ref.detach(), grads, {})
        try:
            baseline = self.errors(get(BASELINE_IMPL))
        except Exception:  # naive may not fit (OOM): the tolerance falls back to the floor alone
            baseline = {}
        if self.device == "cuda":
            torch.cuda.empty_cache()
        return ref.detach(), grads, baseline

    def errors(self, impl) -> dict[str, float]:
        """Max |error| of the output (and of dq, dk, dv when checked) against fp64."""
        ref_out, ref_grads, _ = self.expected()
        inp = self.inputs
        args = inp.args()
        if ref_grads is None:
            with torch.no_grad():
                return {"out": max_abs_error(impl(**args), ref_out)}
        q, k, v = (t.detach().requires_grad_(True) for t in (inp.query, inp.key, inp.value))
        out = impl(**(args | {"query": q, "key": k, "value": v}))
        grads = torch.autograd.grad(out, (q, k, v), inp.grad_out)
        errs = {"out": max_abs_error(out.detach(), ref_out)}
        for name, g, r in zip(("dq", "dk", "dv"), grads, ref_grads):
            errs[name] = max_abs_error(g, r)
        return errs

    def check(self, impl) -> tuple[float, float]:
        """(worst error, its tolerance); raises WrongResult when any checked tensor is out of tolerance."""
        errs = self.errors(impl)
        ref_out, ref_grads, baseline = self.expected()
        refs = {"out": ref_out}
        if ref_grads is not None:
            refs |= dict(zip(("dq", "dk", "dv"), ref_grads))
        dtype = self.case.torch_dtype
        worst = (0.0, 0.0, 0.0)  # (error / tolerance, error, tolerance)
        for name, err in errs.items():
            if not math.isfinite(err):  # a NaN or inf no tolerance excuses, even when naive's is not finite either
                raise WrongResult(f"{impl.name}: {name} holds NaN or inf where the fp64 reference is finite")
            tol = tolerance(baseline.get(name, 0.0), dtype, refs[name])
            if not err <= tol:
                raise WrongResult(f"{impl.name}: max |error| of {name} vs fp64 is {err:.3g} > tolerance {tol:.3g} "
                                  f"(2 × naive's {baseline.get(name, float('nan')):.3g} + floor)")
            worst = max(worst, (err / tol, err, tol))
        return worst[1], worst[2]
