"""The check before any timing: an implementation's output and gradients against the fp64 reference, under
flash-attention's rule (at most 2× naive's error in the same dtype, plus a floor)."""
from __future__ import annotations

import math
from dataclasses import replace

import torch

from ..reference import max_abs_error, naive_rounding, reference, tolerance, vetted_baseline
from ..registry import get
from .fits import ensure_fits, point_bytes, reference_bytes
from .grid import Case
from .inputs import Inputs, make_inputs
from .refgrads import reference_grads
from .result import Result

BASELINE_IMPL = "naive"  # the error every other implementation is allowed twice of
COPY_MAX_BYTES = 256 << 20  # a larger input (a GPU case's dense mask) is watched by its sum, not a copy
GRAD_CHECK_MAX_SCORES = 1 << 27  # larger cases check their gradients on a slice: one batch, one or two heads


class WrongResult(AssertionError):
    """An implementation's output (or gradient) is further from the fp64 reference than the tolerance: the error and
    the tolerance it broke, where they are numbers."""

    def __init__(self, message: str, error: float | None = None, tolerance: float | None = None) -> None:
        super().__init__(message)
        self.error, self.tolerance = error, tolerance


def grad_slice(case: Case) -> Case:
    """The part of `case` whose gradients are checked: all of it up to GRAD_CHECK_MAX_SCORES scores, else one
    batch and one or two query heads (two query heads over one key/value head under GQA), same L, E, mask, causal."""
    if case.batch * case.heads_q * case.lq * case.lk <= GRAD_CHECK_MAX_SCORES:
        return case
    g = case.heads_q // case.heads_kv
    hq = min(2, g) if g > 1 else min(2, case.heads_q)
    return replace(case, batch=1, heads_q=hq, heads_kv=1 if g > 1 else hq)


def sliced_inputs(inputs: Inputs, part: Case) -> Inputs:
    """Fresh leaves holding the first `part.batch` batches and heads of `inputs` (the same tensors when whole)."""
    def cut(t: torch.Tensor, heads: int) -> torch.Tensor:
        return t.detach()[: part.batch, :heads].clone().requires_grad_(True)

    structure = None if inputs.structure is None else inputs.structure.sliced(part.batch, part.heads_q)
    mask = cut_mask(inputs.attn_mask, part.batch, part.heads_q)
    return Inputs(cut(inputs.query, part.heads_q), cut(inputs.key, part.heads_kv), cut(inputs.value, part.heads_kv),
                  mask, inputs.is_causal, inputs.grad_out[: part.batch, : part.heads_q], structure)


def cut_mask(mask: torch.Tensor | None, batch: int, heads: int) -> torch.Tensor | None:
    """The mask of the first `batch` rows and `heads` query heads, where it is not broadcast over them (a padded
    batch's (B, 1, Lq, Lk), ALiBi's (Hq, Lq, Lk))."""
    if mask is None or mask.dim() < 3:
        return mask
    index = [slice(None)] * mask.dim()
    if mask.shape[-3] > 1:
        index[-3] = slice(0, heads)
    if mask.dim() == 4 and mask.shape[0] > 1:
        index[0] = slice(0, batch)
    return mask[tuple(index)]


# torch's process-wide settings an implementation could leave changed for every point after it: (name, get, set)
SETTINGS = (("torch threads", torch.get_num_threads, torch.set_num_threads),
            ("grad mode", torch.is_grad_enabled, torch.set_grad_enabled),
            ("default dtype", torch.get_default_dtype, torch.set_default_dtype))


def no_device(device: str) -> str | None:
    """Why no case can run on `device` here (CUDA, where this torch has none), else None."""
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        return f"no CUDA device is available to this torch ({torch.__version__}, CUDA {torch.version.cuda or 'none'})"
    return None


class CaseContext:
    """The inputs of one case, and (computed on first use, once for all implementations) the fp64 reference and
    naive's errors. A case whose reference cannot be computed raises the same error for every implementation."""

    def __init__(self, case: Case, device: str, seed: int = 0) -> None:
        self.case = case
        self.device = device
        self.inputs: Inputs = make_inputs(case, device, seed)
        self.seed = seed
        self.grad_case: Case | None = grad_slice(case) if case.mode != "fwd" else None
        self._grad_inputs: Inputs | None = None
        self._expected: tuple[torch.Tensor, tuple[torch.Tensor, ...] | None, dict[str, float]] | None = None
        self._error: BaseException | None = None
        self.cut: dict[str, float] = {}  # naive's errors the rule did not count whole (reference.vetted_baseline)

    @classmethod
    def build(cls, case: Case, device: str, seed: int = 0) -> CaseContext:
        return cls(case, device, seed)

    def expected(self) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None, dict[str, float]]:
        """(fp64 output, fp64 (dq, dk, dv) of `grad_case` or None, naive's errors by name); computed once."""
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
        ensure_fits("the fp64 reference", reference_bytes(case, self.grad_case), self.device)
        with torch.no_grad():
            ref = reference(inputs.query, inputs.key, inputs.value, inputs.attn_mask, is_causal=case.causal,
                            enable_gqa=inputs.enable_gqa)
        grads = None
        if self.grad_case is not None:
            self._grad_inputs = sliced_inputs(inputs, self.grad_case)
            if hasattr(self, "_versions"):  # made during a point (the first to check gradients): watched from now
                new = [(n, t) for n, t in self._tensors() if n not in self._versions]
                self._versions |= {n: t._version for n, t in new}
                if self._copies is not None:
                    self._copies |= _copies(new)
            gi = self._grad_inputs
            grads = reference_grads(gi.query, gi.key, gi.value, gi.grad_out, gi.attn_mask, is_causal=case.causal)
        self._expected = (ref, grads, {})
        baseline: dict[str, float] = {}
        naive = get(BASELINE_IMPL)
        for part in ("out", "grads"):  # naive may not fit (the output at full size, say): that part uses the floor
            try:
                baseline |= self._errors(naive, part)
            except Exception:
                pass
        refs = {"out": ref} | (dict(zip(("dq", "dk", "dv"), grads)) if grads is not None else {})

        def rounded() -> float:  # the witness of a large naive error: fp64, rounded where naive's GEMMs round
            with torch.no_grad():
                return max_abs_error(reference(inputs.query, inputs.key, inputs.value, inputs.attn_mask,
                                               is_causal=case.causal, enable_gqa=inputs.enable_gqa,
                                               rounding=naive_rounding(case.torch_dtype)), ref)
        vetted = vetted_baseline(baseline, refs, case.torch_dtype, rounded)
        self.cut = {name: baseline[name] for name in baseline if vetted[name] != baseline[name]}
        if str(self.device).startswith("cuda"):
            torch.cuda.empty_cache()
        return ref, grads, vetted

    def _errors(self, impl, part: str) -> dict[str, float]:
        """"out": max |error| of the whole case's output; "grads": of dq, dk, dv on `grad_case` (and of the output
        there too when `grad_case` is the whole case, which then needs only the one run)."""
        ref_out, ref_grads, _ = self.expected()
        inp = self.inputs
        whole = self.grad_case == self.case
        if part == "out":
            if whole:
                return {}
            ensure_fits(impl.name, point_bytes(impl.name, replace(self.case, mode="fwd")), self.device)
            with torch.no_grad():
                return {"out": max_abs_error(self.answer(impl, inp, inp.call(impl)), ref_out)}
        if ref_grads is None:
            return {}
        gi = self._grad_inputs
        ensure_fits(impl.name, point_bytes(impl.name, self.grad_case), self.device)
        q, k, v = (t.detach().requires_grad_(True) for t in (gi.query, gi.key, gi.value))
        out = self.answer(impl, gi, replace(gi, query=q, key=k, value=v).call(impl))  # as timed: with the structure
        grads = torch.autograd.grad(out, (q, k, v), gi.grad_out)
        errs = {"out": max_abs_error(out.detach(), ref_out)} if whole else {}
        for name, g, r in zip(("dq", "dk", "dv"), grads, ref_grads):
            errs[name] = max_abs_error(g, r)
        return errs

    def answer(self, impl, inp: Inputs, out: object) -> torch.Tensor:
        """`out`, where it is what torch would answer the call: a tensor of the query's dtype and device and shape
        (B, Hq, Lq, Ev); else WrongResult saying what the implementation returned (a wrong shape can broadcast
        against the reference and pass, a wrong dtype be more accurate than the case's)."""
        q, v = inp.query, inp.value
        want = (tuple(q.shape[:-1]) + tuple(v.shape[-1:]), q.dtype, q.device)
        got = (tuple(out.shape), out.dtype, out.device) if isinstance(out, torch.Tensor) else None
        if got != want:
            said = type(out).__name__ if got is None else f"{got[0]} {got[1]} on {got[2]}"
            raise WrongResult(f"{impl.name} returned {said}; the call's answer is {want[0]} {want[1]} on {want[2]}")
        return out  # type: ignore[return-value]

    def mark(self, contents: bool = False) -> None:
        """Note the version counters of the case's tensors and torch's process-wide settings, before an
        implementation runs; with `contents`, a copy of the tensors too (for its first calls: a write through
        `.data`, NumPy or a kernel's raw pointer leaves the version counter as it was)."""
        self._versions = {name: t._version for name, t in self._tensors()}
        self._settings = [get() for _, get, _ in SETTINGS]
        self._copies: dict[str, torch.Tensor] | None = _copies(self._tensors()) if contents else None
        self._written: list[str] = []

    def settle(self) -> None:
        """Compare the inputs with their copies from `mark`, and let the copies go (before the point is timed)."""
        if self._copies is not None:
            self._written = [n for n, t in self._tensors() if n in self._copies and not _same(t, self._copies[n])]
            self._copies = None

    def changed(self) -> tuple[list[str], list[str]]:
        """Since `mark`: the case's tensors written in place (an implementation that changes its inputs), and
        torch's settings changed ("torch threads 2 -> 1": one that sets them for every implementation after it)."""
        marked = getattr(self, "_versions", {})
        settings = [f"{what} {was} -> {get()}" for (what, get, _), was in zip(SETTINGS, getattr(self, "_settings", []))
                    if get() != was]
        if getattr(self, "_copies", None) is not None:
            self.settle()
        versions = [name for name, t in self._tensors() if name in marked and t._version != marked[name]]
        return list(dict.fromkeys(versions + getattr(self, "_written", []))), settings

    def restore(self) -> None:
        """The case's tensors made again, in place (prepared closures keep them), for the implementations after."""
        fresh = make_inputs(self.case, self.device, self.seed)
        pairs = [(self.inputs, fresh)]
        if self._grad_inputs is not None and self.grad_case is not None:
            pairs.append((self._grad_inputs, sliced_inputs(fresh, self.grad_case)))
        with torch.no_grad():
            for mine, new in pairs:
                for name in ("query", "key", "value", "attn_mask", "grad_out"):
                    if getattr(mine, name) is not None:
                        getattr(mine, name).copy_(getattr(new, name))
        self.mark()

    def kept(self, result: Result) -> Result:
        """`result`, or a failure where its implementation changed the case since `mark` (`put_back`)."""
        said = self.put_back()
        return result if not said else Result(impl=result.impl, case=result.case, device=result.device,
                                              status="failed", reason=f"{result.impl} {said}")

    def put_back(self) -> str:
        """What the implementation run since `mark` changed: the case's tensors written in place, torch's settings;
        both put back (the tensors made again) for the implementations after it, which would otherwise be checked
        and timed on what it left. '' where it changed nothing."""
        inputs, settings = self.changed()
        if not (inputs or settings):
            return ""
        for (_, _, put), was in zip(SETTINGS, self._settings):
            put(was)
        if inputs:
            self.restore()
        did = ([f"wrote into its inputs in place ({', '.join(inputs)})"] if inputs else []) + (
            [f"changed torch's settings ({', '.join(settings)})"] if settings else [])
        return f"{' and '.join(did)}; put back for the implementations after it"

    def _tensors(self) -> list[tuple[str, torch.Tensor]]:
        parts = [("", self.inputs)] + ([("gradient check's ", self._grad_inputs)] if self._grad_inputs else [])
        return [(prefix + name, t) for prefix, inp in parts
                for name in ("query", "key", "value", "attn_mask", "grad_out") if (t := getattr(inp, name)) is not None]

    def errors(self, impl) -> dict[str, float]:
        """Max |error| of the output (whole case) and of dq, dk, dv (on `grad_case`, when checked) against fp64."""
        return self._errors(impl, "out") | self._errors(impl, "grads")

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
                where = "" if name == "out" or self.grad_case == self.case else f" (on {self.grad_case.id})"
                counted = baseline.get(name, float("nan"))
                cut = (f"; naive's own {self.cut[name]:.3g} is more than the rule counts without a witness, so "
                       "naive itself is off") if name in self.cut else ""
                raise WrongResult(f"{impl.name}: max |error| of {name}{where} vs fp64 is {err:.3g} > tolerance "
                                  f"{tol:.3g} (2 × naive's {counted:.3g} + floor{cut})", err, tol)
            worst = max(worst, (err / tol, err, tol))
        return worst[1], worst[2]


def _copies(tensors) -> dict[str, torch.Tensor]:
    """What `mark` keeps of each input to compare after the first calls: a copy, or the sum of one larger than
    COPY_MAX_BYTES; none where memory is short (the version counters still watch them)."""
    try:
        return {n: t.clone() if t.numel() * t.element_size() <= COPY_MAX_BYTES else _total(t) for n, t in tensors}
    except (RuntimeError, MemoryError):  # torch's OutOfMemoryError is a RuntimeError: no point fails for a copy
        return {}


def _total(t: torch.Tensor) -> torch.Tensor:
    return t.sum(dtype=torch.float64) if t.is_floating_point() else t.sum(dtype=torch.int64)


def _same(t: torch.Tensor, kept: torch.Tensor) -> bool:
    """Whether `t` still holds what `kept` (its copy, or its sum: a write that keeps the sum, or one into a mask whose
    sum is -inf, goes unseen) says; NaN equal to NaN."""
    now = _total(t) if kept.dim() == 0 and t.dim() > 0 else t
    if torch.equal(now, kept):
        return True
    return now.is_floating_point() and bool((now.isnan() == kept.isnan()).all()) and torch.equal(
        now.nan_to_num(), kept.nan_to_num())

