"""What an implementation's reasons must be: a list of strings, empty or None when it runs the call. Any other
answer (a bare str, a list holding something else) is one TypeError naming the implementation, wherever reasons are
gathered (`list`'s probe, a sweep's point, the inputs' own check), and it fails that implementation alone."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from sdpa_impls import registry
from sdpa_impls.bench.grid import Case
from sdpa_impls.bench.inputs import make_inputs
from sdpa_impls.bench.measure import Options, run_case
from sdpa_impls.cli.list import probe
from sdpa_impls.protocol import Implementation, SDPAInputs

SAID = "it should return a list of strings"


class Answers(Implementation):
    """torch's attention, whose library_reasons answers `answer`."""

    answer: object = None

    def forward(self, inp: SDPAInputs) -> torch.Tensor:
        return F.scaled_dot_product_attention(inp.query, inp.key, inp.value, attn_mask=inp.attn_mask,
                                              is_causal=inp.is_causal, scale=inp.scale, enable_gqa=inp.enable_gqa)

    def library_reasons(self, inp: SDPAInputs) -> list[str]:
        return self.answer() if callable(self.answer) else self.answer  # type: ignore[return-value]


def registered(monkeypatch: pytest.MonkeyPatch, answer: object) -> str:
    impl = type("AnswersImpl", (Answers,), {"name": "answers_reasons", "answer": staticmethod(answer) if callable(
        answer) else answer})()
    monkeypatch.setitem(registry._REGISTRY, impl.name, impl)
    return impl.name


def sweep(name: str) -> list:
    return list(run_case(Case(lq=32, lk=32, e=16), [name, "naive"], "cpu",
                         Options(budget_s=0.01, min_reps=2, max_reps=3, memory=False)))


@pytest.mark.parametrize("answer, what", [("flashlib is not installed", "a str ('flashlib is not installed')"),
                                          (["fine", 3], "a list holding a int (3)")])
def test_reasons_that_are_no_list_of_strings_are_one_error_naming_the_implementation(
        answer: object, what: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`sdpa-bench list` showed a str one character a line, and a sweep joined its characters as the skip's
    reason."""
    name = registered(monkeypatch, answer)
    error = f"answers_reasons: library_reasons returned {what}: {SAID}"
    verdict, reasons = probe(name, "cpu")
    assert not any(verdict.values()) and len(reasons) == 1, reasons
    assert reasons[0].startswith(f"TypeError while asking: {error}"), reasons
    bad, naive = sweep(name)  # one implementation's error fails its point, never the sweep
    assert bad.status == "failed" and bad.reason.startswith(f"TypeError: {error}"), bad.reason
    assert naive.status == "ok", naive.reason
    with pytest.raises(TypeError, match=SAID):
        make_inputs(Case(lq=32, lk=32, e=16), "cpu").reasons(registry.get(name))


@pytest.mark.parametrize("answer", [None, [], (), lambda: (r for r in ())])
def test_none_or_an_empty_list_means_it_runs_the_call_in_list_and_in_a_sweep(
        answer: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """None ran in a sweep but was `no` in `sdpa-bench list` ("'NoneType' object is not iterable")."""
    name = registered(monkeypatch, answer)
    verdict, reasons = probe(name, "cpu")
    assert all(verdict[dtype] for dtype in ("fp32", "bf16", "fp16")) and "TypeError" not in " ".join(reasons), reasons
    assert [row.status for row in sweep(name)] == ["ok", "ok"]


def test_reasons_a_generator_yields_are_its_reasons(monkeypatch: pytest.MonkeyPatch) -> None:
    """A library_reasons written with `yield`: its reasons, listed and skipped as a list's (an iterable of str)."""
    name = registered(monkeypatch, lambda: (r for r in ["flashlib is not installed"]))
    verdict, reasons = probe(name, "cpu")
    assert not any(verdict.values()) and reasons == ["flashlib is not installed"], reasons
    skipped, naive = sweep(name)
    assert skipped.status == "skipped" and "flashlib is not installed" in skipped.reason, skipped.reason
    assert naive.status == "ok", naive.reason


class ProtocolOnly:
    """A plug-in that follows the protocol without the base class, whose answer is a str."""

    name = "protocol_str_reasons"

    def unsupported_reasons(self, *args: object, **kwargs: object) -> object:
        return "no GPU here"


def test_a_plugin_without_the_base_class_gets_the_same_error() -> None:
    with pytest.raises(TypeError, match=f"protocol_str_reasons: unsupported_reasons returned a str .*{SAID}"):
        make_inputs(Case(lq=32, lk=32, e=16), "cpu").reasons(ProtocolOnly())
