"""Mask structures: the dense mask against their rules, exact pair counts, case ids and bad words, every
implementation against fp64 on every structure and its edges, the native forms (xformers' bias classes as data,
torch's jagged documents), and the report's structure plot and section."""
from __future__ import annotations

import functools
import inspect
import warnings
from dataclasses import replace

import pytest
import torch

import sdpa_impls
from sdpa_impls.bench.check import CaseContext
from sdpa_impls.bench.grid import Case, PRESETS
from sdpa_impls.masks import MaskSpec, Structure
from sdpa_impls.protocol import SDPAInputs, Unsupported
from sdpa_impls.torchver import needs_torch

IMPLS = [sdpa_impls.get(n) for n in sdpa_impls.names()]


@pytest.fixture(scope="module", autouse=True)
def one_intra_op_thread():
    """Many small cases: one intra-op thread is faster on them and does not spin against other jobs."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def small(mask: str, lq: int = 48, lk: int | None = None, **kw) -> Case:
    return Case(lq=lq, lk=lk or lq, e=kw.pop("e", 16), mask=mask, heads_q=kw.pop("heads_q", 2),
                heads_kv=kw.pop("heads_kv", 2), **kw)


# name -> (case, KV lengths that replace the seeded ones or None); all small, most with gradients
CASES = {
    "window-1": (small("window-1", mode="fwd+bwd"), None),  # each query sees only itself
    "window>=L": (small("window-64", mode="fwd+bwd"), None),  # plain causal
    "window-tiles": (small("window-100", lq=300), None),
    "documents-1": (small("documents-1", lq=40, mode="fwd+bwd"), None),  # every document one token long
    "documents-tiles": (small("documents-100", lq=300, mode="fwd+bwd"), None),  # documents across 128 and 256
    "documents-B2": (small("documents-8", batch=2, mode="fwd+bwd"), None),
    "prefix": (small("prefix-16", mode="fwd+bwd"), None),
    "alibi-gqa": (small("alibi", heads_q=8, heads_kv=2, causal=True, mode="fwd+bwd"), None),
    "padding-Lq1": (small("padding", lq=1, lk=96, batch=3, heads_q=4, heads_kv=2), None),
    "padding-Lq4": (small("padding", lq=4, lk=96, batch=3, heads_q=4, heads_kv=2, mode="fwd+bwd"), None),
    "padding-0": (small("padding", lq=4, lk=40, batch=3, heads_q=4, heads_kv=2, mode="fwd+bwd"), (0, 2, 40)),
}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@functools.lru_cache(maxsize=4)
def context(name: str, dtype: str) -> CaseContext:
    """The case's inputs and fp64 reference, shared by every implementation; hand-set KV lengths where given."""
    case, lengths = CASES[name]
    ctx = CaseContext(replace(case, dtype=dtype), "cpu")
    if lengths is not None:  # before the reference is computed: it and every implementation see these lengths
        s = Structure(case.mask_spec, case.lq, case.lk, lengths=lengths)
        ctx.inputs = replace(ctx.inputs, attn_mask=s.dense(case.batch, case.heads_q, DTYPES[dtype], "cpu"),
                             structure=s)
    return ctx


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("impl", IMPLS, ids=lambda i: i.name)
def test_every_structure_matches_fp64(impl, name: str, dtype: str) -> None:
    ctx = context(name, dtype)
    try:
        ctx.check(impl)  # WrongResult (an AssertionError) past the tolerance, output and dq, dk, dv
    except Unsupported as exc:
        pytest.skip("; ".join(exc.reasons))
    s = ctx.inputs.structure
    if s.kind == "padding":  # rows with no key: (0, ...) sees nothing; length 2 < Lq = 4 leaves 2 queries without
        with torch.no_grad():
            out = ctx.inputs.prepare(impl)()
        for b, n in enumerate(s.lengths):
            empty = [i for i in range(s.lq) if s.key_range(b, i)[1] == 0]
            assert (out[b, :, empty] == 0).all(), f"row {b} (KV length {n}): queries {empty} see no key"


def brute_force(s: Structure, batch: int) -> torch.Tensor:
    """(B, Lq, Lk) from `key_range`, one Python loop per query."""
    out = torch.zeros(batch, s.lq, s.lk, dtype=torch.bool)
    for b in range(batch):
        for i in range(s.lq):
            lo, hi = s.key_range(b, i)
            out[b, i, lo:hi] = True
    return out


RULE_CASES = [small("window-5", lq=20), small("window-1", lq=9), small("window-50", lq=20),
              small("documents-4", lq=30), small("documents", lq=64, batch=2), small("prefix-7", lq=20),
              small("prefix-0", lq=12), small("padding", lq=1, lk=50, batch=4),
              small("padding", lq=4, lk=50, batch=4), small("alibi", lq=10, lk=14, heads_q=3, heads_kv=3)]


@pytest.mark.parametrize("case", RULE_CASES, ids=lambda c: c.id)
def test_dense_is_the_key_range_rule_and_pairs_count_it(case: Case) -> None:
    s = case.structure()
    dense = s.dense(case.batch, case.heads_q, torch.float32, "cpu")
    if s.kind == "alibi":  # a bias: no key masked, the value -slope_h·|i - j|
        i, j = torch.arange(s.lq)[:, None], torch.arange(s.lk)[None, :]
        for h, slope in enumerate(s.slopes):
            torch.testing.assert_close(dense[h], -slope * (i - j).abs().float())
        keep = torch.ones(case.batch, s.lq, s.lk, dtype=torch.bool)
    else:
        keep = dense.reshape(-1, s.lq, s.lk).expand(case.batch, -1, -1)  # (B, Lq, Lk)
    assert torch.equal(keep, brute_force(s, case.batch))
    tril = torch.ones(s.lq, s.lk, dtype=torch.bool).tril()
    assert s.pairs(case.batch, causal=False) == int(keep.sum())
    assert s.pairs(case.batch, causal=True) == int((keep & tril).sum())
    assert case.pairs() == int(keep.sum())


def test_the_edges_are_what_they_say() -> None:
    causal = torch.ones(48, 48, dtype=torch.bool).tril()
    assert torch.equal(small("window-64").structure().dense(1, 2, torch.float32, "cpu"), causal)  # W >= L
    assert torch.equal(small("window-1").structure().dense(1, 2, torch.float32, "cpu"), torch.eye(48, dtype=bool))
    ones = small("documents-1", lq=40).structure()
    assert set(ones.lengths) == {1} and torch.equal(ones.dense(1, 2, torch.float32, "cpu"), torch.eye(40, dtype=bool))
    starts = [sum(CASES["documents-tiles"][0].structure().lengths[:k]) for k in range(50)]
    spans = list(zip(starts, CASES["documents-tiles"][0].structure().lengths))
    for edge in (128, 256):  # a document that crosses a 128-row tile's edge
        assert any(a < edge < a + n for a, n in spans), (edge, spans)
    s = CASES["padding-Lq4"][0].structure()  # bottom-right: the last query sees the row's last real key
    dense = s.dense(3, 4, torch.float32, "cpu")
    for b, n in enumerate(s.lengths):
        for i in range(4):
            assert torch.equal(dense[b, 0, i], torch.arange(96) < n - 4 + i + 1)


def test_every_case_of_one_shape_sees_the_same_documents_and_kv_lengths() -> None:
    """A structure's lengths follow the structure, Lk and the batch: the dtypes, head dims, heads and modes of one
    shape (and Lq = 1 or 4 of one decode batch) are timed on the same mask, so their ratios compare like with like."""
    docs = small("documents-16", lq=256).structure()
    for other in (small("documents-16", lq=256, dtype="bf16", e=64, heads_q=4, heads_kv=1, mode="fwd+bwd"),
                  small("documents-16", lq=256, causal=True)):
        assert other.structure().lengths == docs.lengths
    assert small("documents-16", lq=257).structure().lengths != docs.lengths  # another shape, other lengths
    assert small("documents-16", lq=256, batch=2).structure().lengths != docs.lengths
    decode = [small("padding", lq=lq, lk=512, batch=16, dtype=dtype, e=128, heads_q=8, heads_kv=2).structure()
              for lq in (1, 4) for dtype in ("fp32", "bf16")]
    assert len({s.lengths for s in decode}) == 1 and len(set(decode[0].lengths)) > 1


def test_case_ids_read_as_documented_and_random_masks_keep_theirs() -> None:
    assert Case(lq=8192, lk=8192, e=64, dtype="bf16", mask="window-512").id == "L8192-E64-bf16-window512-fwd"
    serve = Case(lq=4, lk=16384, e=128, dtype="bf16", batch=16, heads_q=32, heads_kv=8, mask="padding")
    assert serve.id == "Lq4-Lk16384-E128-bf16-B16-H32kv8-padding-fwd"
    assert serve in PRESETS["serve"]
    assert Case(lq=128, lk=128, e=64, mask="bool").id == "L128-E64-fp32-boolmask-fwd"  # ids before structures
    assert Case(lq=64, lk=32, e=16, dtype="bf16", causal=True, mask="float", batch=2, heads_q=4, heads_kv=2,
                mode="fwd+bwd").id == "Lq64-Lk32-E16-bf16-causal-floatmask-B2-H4kv2-fwd+bwd"
    assert Case(lq=64, lk=64, e=16, mask="documents-8", causal=True).id == "L64-E16-fp32-causal-documents8-fwd"


@pytest.mark.parametrize("kw,words", [
    ({"mask": "window-0"}, "window-0"), ({"mask": "window--3"}, "window--3"), ({"mask": "window"}, "needs its size"),
    ({"mask": "prefix-65"}, "longer than the keys"), ({"mask": "padding"}, "batch >= 2"),
    ({"mask": "documents", "lk": 32}, "Lq == Lk"), ({"mask": "alibi-2"}, "takes no parameter"),
    ({"mask": "sliding-64"}, "not one of"), ({"mask": "documents-x"}, "whole number"),
    ({"mask": "padding", "batch": 2, "lq": 8, "lk": 4}, "Lq=8 > Lk=4"),
])
def test_bad_structures_fail_when_the_case_is_built(kw: dict, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        Case(**({"lq": 64, "lk": 64, "e": 16} | kw))


# -- native forms ------------------------------------------------------------------------------------------------

def xformers_semantics(desc, batch: int, lq: int, lk: int) -> torch.Tensor:
    """The keep-mask an xformers bias stands for, by its documented rule, in the layout it gets: (Lq, Lk) per row
    unpacked, or (B·Lq, B·Lk) for the packed ones."""
    kw = dict(desc.kwargs)
    if desc.cls == "LocalAttentionFromBottomRightMask":  # q - left <= k + (Lq - Lk) <= q + right
        i, j = torch.arange(lq)[:, None], torch.arange(lk)[None, :]
        shift = lk - lq
        return (j >= i + shift - kw["window_left"]) & (j <= i + shift + kw["window_right"])
    q_lens = kw["q_seqlen"]
    k_starts = [sum(q_lens[:b]) for b in range(len(q_lens))] if "kv_padding" not in kw else \
        [b * kw["kv_padding"] for b in range(len(q_lens))]
    k_lens = kw.get("kv_seqlen", q_lens)
    out = torch.zeros(sum(q_lens), batch * lk if "kv_padding" in kw else sum(q_lens), dtype=torch.bool)
    q0 = 0
    for nq, k0, nk in zip(q_lens, k_starts, k_lens):
        i, j = torch.arange(nq)[:, None], torch.arange(nk)[None, :]
        shift = nk - nq if "kv_padding" in kw else 0  # BlockDiagonalCausalMask: top-left inside each block
        out[q0:q0 + nq, k0:k0 + nk] = j <= i + shift
        q0 += nq
    return out


@pytest.mark.parametrize("case", [small("window-1", lq=20), small("window-7", lq=20), small("window-99", lq=20),
                                  small("documents-5", lq=40), small("documents-5", lq=40, batch=3),
                                  small("padding", lq=1, lk=40, batch=3), small("padding", lq=4, lk=40, batch=3)],
                         ids=lambda c: c.id)
def test_xformers_native_bias_states_the_dense_mask(case: Case) -> None:
    from sdpa_impls.impls.xformers import _layout
    from sdpa_impls.impls.xformers_bias import native_bias

    s = case.structure()
    desc = native_bias(s, case.batch, case.lq, case.lk, case.causal)
    assert desc is not None
    keep = xformers_semantics(desc, case.batch, case.lq, case.lk)
    if desc.packed:  # the batch rows are the diagonal blocks; nothing across rows
        blocks = torch.stack([keep[b * case.lq:(b + 1) * case.lq, b * case.lk:(b + 1) * case.lk]
                              for b in range(case.batch)])
        assert int(blocks.sum()) == int(keep.sum())
        keep = blocks
    dense = s.dense(case.batch, case.heads_q, torch.float32, "cpu")
    assert torch.equal(keep.expand(case.batch, -1, -1), dense.reshape(-1, s.lq, s.lk).expand(case.batch, -1, -1))
    inp = SDPAInputs(*(torch.randn(case.batch, h, n, 8) for h, n in ((2, case.lq), (2, case.lk), (2, case.lk))),
                     attn_mask=dense, structure=s)
    q, k, _ = _layout(inp, desc.packed)  # packed: (1, B·L, H, E), row b's token i at b·L + i
    assert q.shape == ((1, case.batch * case.lq, 2, 8) if desc.packed else (case.batch, case.lq, 2, 8))
    assert torch.equal(q.reshape(case.batch, case.lq, 2, 8).transpose(1, 2), inp.query)
    assert torch.equal(k.reshape(case.batch, case.lk, 2, 8).transpose(1, 2), inp.key)


@pytest.mark.parametrize("case,causal", [(small("prefix-8"), False), (small("alibi"), True), (small("window-4"), False),
                                         (small("padding", lq=4, lk=40, batch=3), True)],
                         ids=["prefix", "alibi-causal", "window-Lq!=Lk", "padding-causal"])
def test_xformers_keeps_the_dense_bias_where_no_class_states_the_mask(case: Case, causal: bool) -> None:
    from sdpa_impls.impls.xformers_bias import native_bias

    s = case.structure()
    if case.mask == "window-4":  # top-left and bottom-right windows differ once Lq != Lk
        s = Structure(s.spec, 8, 12)
    assert native_bias(s, case.batch, s.lq, s.lk, causal) is None
    short = Structure(MaskSpec("padding"), 4, 40, lengths=(40, 3))  # a query without keys: dense, never native
    assert native_bias(short, 2, 4, 40, False) is None


def test_xformers_still_reports_not_installed_first() -> None:
    ctx = context("documents-B2", "fp32")
    reasons = sdpa_impls.get("xformers").not_supported_reasons(SDPAInputs(**ctx.inputs.args(),
                                                                          structure=ctx.inputs.structure))
    try:
        import xformers  # noqa: F401
    except ImportError:
        assert reasons[0] == "xformers is not installed (pip install xformers)"


def test_jagged_layout_splits_the_packed_documents_and_puts_them_back() -> None:
    from sdpa_impls.impls.torch_sdpa_varlen import from_jagged, offsets, to_jagged

    lengths = (3, 1, 5)
    x = torch.randn(2, 4, 9, 8)  # (B, H, L, E), each row the same three documents
    nested = to_jagged(x, offsets(lengths, 2, x.device), lengths)
    docs = nested.unbind()
    assert [d.shape for d in docs] == [torch.Size([4, n, 8]) for n in lengths * 2]
    assert torch.equal(docs[4], x[1, :, 3:4]) and torch.equal(docs[5], x[1, :, 4:9])
    assert torch.equal(from_jagged(nested, 2), x)
    grouped = to_jagged(x[:, :2], offsets(lengths, 2, x.device), lengths, heads=4)  # query head h reads kv head h // 2
    assert torch.equal(grouped.unbind()[0][3], x[0, 1, :3])
    # the shortest and longest document travel with the (transposed) view: torch's SDPA reads them instead of
    # computing them from the offsets on the device (a host sync) at every call (private accessors of torch's NJT)
    too_old = needs_torch("2.6", "reading the NJT's cached min/max seqlen (_maybe_min_seqlen, _maybe_max_seqlen)")
    if too_old:
        pytest.skip(too_old[0])  # the layout above is checked; only this last check needs the accessors
    assert (nested._maybe_min_seqlen, nested._maybe_max_seqlen) == (1, 5)


def test_jagged_layout_with_torch_nested_sdpa_equals_block_diagonal_fp64() -> None:
    """torch 2.13 runs nested SDPA on CPU without is_causal: through our layout (GQA, batch 2, gradients) it must
    equal the fp64 reference with the block-diagonal mask of the same documents."""
    from sdpa_impls.impls.torch_sdpa_varlen import from_jagged, offsets, to_jagged

    lengths, gen = (5, 1, 10), torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(s, generator=gen, requires_grad=True) for s in ((2, 4, 16, 8), (2, 2, 16, 8), (2, 2, 16, 8)))
    offs = offsets(lengths, 2, q.device)
    out = from_jagged(torch.nn.functional.scaled_dot_product_attention(
        to_jagged(q, offs, lengths), to_jagged(k, offs, lengths, 4), to_jagged(v, offs, lengths, 4)), 2)
    doc = torch.repeat_interleave(torch.arange(3), torch.tensor(lengths))
    ref = sdpa_impls.reference(q, k, v, doc[:, None] == doc[None, :], enable_gqa=True)
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
    g = torch.randn_like(out)
    for got, want in zip(torch.autograd.grad(out, (q, k, v), g), torch.autograd.grad(ref, (q, k, v), g.double())):
        torch.testing.assert_close(got.double(), want.double(), rtol=1e-4, atol=1e-4)


def test_torch_sdpa_varlen_needs_documents_and_otherwise_says_torchs_reason() -> None:
    varlen = sdpa_impls.get("torch_sdpa_varlen")
    q = torch.randn(1, 2, 16, 8)
    assert varlen.unsupported_reasons(q, q, q, is_causal=True)[0].startswith("needs a packed-documents structure")
    window = context("window-1", "fp32").inputs
    assert varlen.not_supported_reasons(SDPAInputs(**window.args(), structure=window.structure))[0].startswith(
        "needs a packed-documents structure")
    docs = context("documents-B2", "fp32")
    reasons = docs.inputs.reasons(varlen)  # as the measuring code asks: with the structure
    source = inspect.getsource(torch.nested._internal.sdpa)
    from_cpp = []  # a CUDA build's C++ checks (sdp_utils) also warn why their kernels refuse, naming their source
    if reasons:
        from sdpa_impls.impls.torch_sdpa_varlen import jagged_attention, offsets

        inp, lengths = SDPAInputs(**docs.inputs.args()), docs.inputs.structure.lengths
        with warnings.catch_warnings(record=True) as caught, pytest.raises(RuntimeError):
            warnings.simplefilter("always")
            jagged_attention(inp, offsets(lengths, docs.case.batch, inp.query.device), lengths)
        from_cpp = [str(w.message) for w in caught if "Triggered internally at" in str(w.message)]
    for reason in reasons:  # where torch refuses, its own words; where it runs, the fp64 test above checks it
        assert reason in source or any(reason in m for m in from_cpp) or reason.startswith("No viable backend"), reason
    if reasons:
        from sdpa_impls.bench.measure import prepare_point

        with pytest.raises(Unsupported) as refused:
            prepare_point("torch_sdpa_varlen", docs)
        assert refused.value.reasons == reasons
    # without documents, what torch refuses on this device is said too (`list` probes no structure): on a CPU, where
    # torch's nested SDPA takes no is_causal, `list` said only that documents were needed
    plain = SDPAInputs(**{**docs.inputs.args(), "attn_mask": None})
    from sdpa_impls.impls.torch_sdpa_varlen import NEEDS_DOCUMENTS
    assert varlen.not_supported_reasons(plain) == [NEEDS_DOCUMENTS, *reasons]


# -- the report ------------------------------------------------------------------------------------------------

def test_report_plots_time_per_structure_and_names_each_structure(tmp_path) -> None:
    from sdpa_impls.bench.result import Result
    from sdpa_impls.report.results import Sweep
    from sdpa_impls.report.write import write_report

    cases = [Case(lq=lq, lk=lq, e=64, mask=m, causal=c) for lq in (2048, 8192)
             for m, c in (("none", True), ("window-512", False), ("documents-1024", False))]
    results = [Result(impl, c, "cpu", "ok", median_s=1e-3 * (c.pairs() / 1e6) * (1 + k))
               for c in cases for k, impl in enumerate(("naive", "fused"))]
    meta = {"preset": "masks", "device": "cpu", "impls": ["naive", "fused"], "case_ids": [c.id for c in cases],
            "options": {}, "machine": {"device": "cpu", "device_name": "test CPU", "threads": 1}}
    with open(tmp_path / "out.txt", "w") as out:
        files = write_report(tmp_path, Sweep(meta, results), stdout=out)
    assert tmp_path / "structures-fwd.png" in files and (tmp_path / "structures-fwd.png").stat().st_size > 10_000
    report = (tmp_path / "report.md").read_text()
    assert "## Mask structures" in report and "(structures-fwd.png)" in report
    assert "| L8192-E64-fp32-window512-fwd | sliding window: each query sees itself and the 511 keys before it" in report
    assert "packed documents of" in report
