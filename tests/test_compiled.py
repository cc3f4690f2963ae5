"""The implementations that compile (flex, compiled): the fp64 rule on a few fixed small shapes, torch's own reasons,
compile time reported apart from the samples, and a recompile during timing failing the point."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

import sdpa_impls
from sdpa_impls.bench.check import CaseContext
from sdpa_impls.bench.grid import Case
from sdpa_impls.bench.measure import Options, failed, run_point
from sdpa_impls.bench.result import Result
from sdpa_impls.bench.timing import time_closure
from sdpa_impls.compilation import Recompiled, compile_once, declare_compiles
from sdpa_impls.impls.compiled import compiled_textbook
from sdpa_impls.impls.flex import FLEX
from sdpa_impls.report.csvfile import write_csv
from sdpa_impls.report.markdown import write_markdown
from sdpa_impls.report.results import Sweep
from sdpa_impls.report.tables import SweepTable
from sdpa_impls.torchver import COMPILATION
from test_correctness import SPECS, check_against_fp64, one_intra_op_thread  # noqa: F401 (fixture)

COMPILED = [sdpa_impls.get(n) for n in sdpa_impls.names() if getattr(sdpa_impls.get(n), "compiles", False)]
# a few specs of test_correctness, each a new compilation (seconds): causal, a bool mask with causal and GQA, a float
# mask broadcast over rows, rows with every key masked, decode
CHECKED = [s for s in SPECS if s.name in ("causal", "gqa-causal-mask", "float-broadcast", "fully-masked-rows",
                                          "decode-Lq1")]
TORCH = f"torch {torch.__version__}"
SMALL = Case(lq=64, lk=64, e=16, heads_q=2, heads_kv=2)  # one shape every test below shares: compiled once
pytestmark = pytest.mark.usefixtures("one_intra_op_thread")
# what each implementation compiles with: on an older torch the tests below that compile skip with this reason
NEEDS = {"flex": pytest.mark.needs_torch(FLEX, "flex_attention compiled for this suite"),
         "compiled": pytest.mark.needs_torch(*COMPILATION)}


def test_flex_and_compiled_are_registered_and_compile() -> None:
    assert {i.name for i in COMPILED} == {"flex", "compiled"}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("spec", CHECKED, ids=lambda s: s.name)
@pytest.mark.parametrize("impl", COMPILED, ids=lambda i: i.name)
def test_matches_fp64_reference(impl, spec, dtype: torch.dtype) -> None:
    """The rule of test_correctness; backward where torch compiles one here (flex has none on CPU: forward)."""
    if spec.grad and impl.unsupported_reasons(*(torch.ones(1, 1, 2, 2, requires_grad=True) for _ in range(3))):
        spec = replace(spec, grad=False)
    out, grads = check_against_fp64(impl, spec, dtype)
    if spec.mask == "full_rows":
        assert (out[..., ::7, :] == 0).all(), "a query row with every key masked must give zeros"
        if grads is not None:
            assert (grads[0][..., ::7, :] == 0).all()


@NEEDS["flex"]
@NEEDS["compiled"]
def test_flex_backward_on_cpu_is_refused_in_torchs_words() -> None:
    q = torch.randn(1, 2, 8, 16, requires_grad=True)
    reasons = sdpa_impls.get("flex").unsupported_reasons(q, q, q)
    assert reasons == [f"FlexAttention does not support backward on CPU. Please set the input requires_grad to "
                       f"False or use another device. ({TORCH})"]
    assert sdpa_impls.get("compiled").unsupported_reasons(q, q, q) == []  # inductor compiles a backward here


@NEEDS["flex"]
def test_flex_answers_an_input_expanded_along_its_head_dim() -> None:
    """A v (or q, k) expanded from (…, L, 1): stride 0 in its last dim, which torch's compiled flex kernels read
    outside the tensor (an answer off by 1e32); given to them dense, it answers as torch's SDPA does."""
    gen = torch.Generator().manual_seed(3)
    q, k = torch.randn(1, 2, 16, 16, generator=gen), torch.randn(1, 2, 16, 16, generator=gen)
    v = torch.randn(1, 2, 16, 1, generator=gen).expand(1, 2, 16, 16)
    torch.testing.assert_close(sdpa_impls.get("flex")(q, k, v), F.scaled_dot_product_attention(q, k, v))


@pytest.mark.parametrize("impl", COMPILED, ids=lambda i: i.name)
def test_bad_and_empty_inputs_answer_like_every_implementation(impl) -> None:
    with pytest.raises(ValueError, match="enable_gqa=False"):
        impl(torch.randn(1, 4, 5, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8))
    q, k = torch.randn(1, 2, 4, 8, requires_grad=True), torch.randn(1, 2, 0, 8, requires_grad=True)
    out = impl(q, k, k)  # no keys: zeros, as torch answers, without compiling anything
    assert out.shape == (1, 2, 4, 8) and (out == 0).all()
    with pytest.raises(ValueError, match="dropout_p"):
        impl(q, q, q, dropout_p=1.5)
    q, k, v = torch.randn(1, 2, 4, 0), torch.randn(1, 2, 6, 0), torch.randn(1, 2, 6, 8)  # E = 0: scores all 0
    window = torch.rand(4, 6, generator=torch.Generator().manual_seed(0)) < 0.5
    for kwargs in ({}, {"is_causal": True}, {"attn_mask": window}, {"attn_mask": torch.randn(4, 6)}):
        torch.testing.assert_close(impl(q, k, v, **kwargs), F.scaled_dot_product_attention(q, k, v, **kwargs),
                                   equal_nan=True)  # flex refused it: its kernels take E >= 1


@pytest.mark.parametrize("impl", [pytest.param(n, marks=NEEDS[n]) for n in ("flex", "compiled")])
def test_compile_time_is_reported_apart_from_the_samples(impl: str, tmp_path) -> None:
    """compile_s: the first call, once, before the fp64 check and any sample; in JSON, CSV and the report."""
    ctx = CaseContext(replace(SMALL, causal=True), "cpu")
    r = run_point(impl, ctx, Options(budget_s=0.01, min_reps=2, max_reps=3, warmup=1, memory=False))
    assert r.status == "ok", r.reason
    assert r.compile_s is not None and r.compile_s > 0 and len(r.samples) >= 2
    assert Result.from_dict(r.as_dict()).compile_s == r.compile_s
    sweep = Sweep({"preset": "test", "impls": [impl], "case_ids": [ctx.case.id], "options": {}}, [r])
    csv = write_csv(tmp_path / "results.csv", [r]).read_text().splitlines()
    assert "compile_s" in csv[0].split(",") and f"{r.compile_s}" in csv[1]
    report = write_markdown(tmp_path / "report.md", sweep, SweepTable(sweep), []).read_text()
    assert "### Compile time, once per point before any sample" in report
    naive = run_point("naive", ctx, Options(budget_s=0.01, min_reps=2, max_reps=3, memory=False))
    assert naive.status == "ok" and naive.compile_s is None  # eager implementations compile nothing


@NEEDS["compiled"]
def test_backward_only_points_compile_their_forward_before_the_recompile_guard() -> None:
    """`bwd` mode builds the forward output when its closure is built; a forward that compiles must be compiled
    there, not refused by the guard that forbids compiling while timed (it refuses a first compile too), and
    compile_s counts the forward's compile with the backward's."""
    ctx = CaseContext(replace(SMALL, causal=True, mode="bwd"), "cpu")
    r = run_point("compiled", ctx, Options(budget_s=0.01, min_reps=2, max_reps=3, warmup=1, memory=False))
    assert r.status == "ok", r.reason
    assert r.compile_s is not None and r.compile_s > 0 and len(r.samples) >= 2


@NEEDS["compiled"]
def test_a_recompile_during_timing_fails_the_point_with_torchs_reason() -> None:
    """A real recompile: a closure that compiled one shape in its compile step asks for another while timed."""
    fn = compiled_textbook()
    small, other = torch.randn(1, 2, 64, 16), torch.randn(1, 2, 48, 16)
    calls = []

    def closure() -> torch.Tensor:
        x = small if not calls else other  # the compile step sees 64 rows, the timed calls 48
        calls.append(1)
        return fn(x, x, x, None, False, None, False)

    closure = declare_compiles(closure)
    assert compile_once(closure, "cpu") > 0
    with pytest.raises(Recompiled, match="recompiled during timing") as info:
        time_closure(closure, "cpu", budget_s=0.01, min_reps=2, warmup=1)
    assert "size mismatch" in str(info.value)  # torch's guard failure says what changed
    result = failed(Result("compiled", SMALL, "cpu", "ok"), info.value)
    assert result.status == "failed" and result.reason.startswith("compiled: recompiled during timing")
    again = declare_compiles(lambda: fn(other, other, other, None, False, None, False))
    assert again().shape == other.shape  # outside the guard the same call may compile again


def test_no_cpp_compiler_is_a_reason_not_a_failure(monkeypatch) -> None:
    """On the CPU torch.compile writes C++ and builds it with $CXX (else g++): without a compiler every point
    failed with InvalidCxxCompiler and `run` exited 1 as for a broken kernel, while `list` said they run."""
    import sys
    q = torch.randn(1, 2, 64, 16)
    monkeypatch.setenv("CXX", sys.executable)  # a file that is there: found (it is not asked to compile here)
    for name in ("compiled", "flex"):
        assert not any("C++ compiler" in r for r in sdpa_impls.get(name).unsupported_reasons(q, q, q))
    monkeypatch.setenv("CXX", "/nonexistent/g++")
    for name in ("compiled", "flex"):
        said = sdpa_impls.get(name).unsupported_reasons(q, q, q)
        assert "torch.compile on the CPU needs a C++ compiler: /nonexistent/g++ ($CXX) is not found" in said, said
