"""The shared contract: names, lookup, Unsupported with reasons, and one validation message for every implementation."""
from __future__ import annotations

import pytest
import torch

import sdpa_impls
from sdpa_impls import Unsupported, reference

BUILTINS = ["naive", "chunked", "fused", "xformers", "torch_sdpa", "torch_sdpa_math", "torch_sdpa_flash",
            "torch_sdpa_efficient", "torch_sdpa_cudnn", "torch_sdpa_varlen", "flex", "compiled", "flash_attn",
            "flash_attn3", "flashinfer"]
CALLABLES = [sdpa_impls.get(n) for n in BUILTINS] + [reference]


def test_names_lists_every_builtin_in_order() -> None:
    assert sdpa_impls.names()[: len(BUILTINS)] == BUILTINS
    for name in BUILTINS:
        impl = sdpa_impls.get(name)
        assert impl.name == name and isinstance(impl, sdpa_impls.SDPAImplementation)


def test_unknown_name_lists_known_ones() -> None:
    with pytest.raises(LookupError, match="unknown implementation 'nope'; known: naive, chunked"):
        sdpa_impls.get("nope")


def t(*shape: int, dtype: torch.dtype = torch.float32, device: str = "cpu") -> torch.Tensor:
    return torch.randn(shape).to(dtype=dtype, device=device) if dtype.is_floating_point else \
        torch.ones(shape, dtype=dtype, device=device)


BAD_INPUTS = {
    "1-D query": (dict(query=t(8), key=t(1, 2, 5, 8), value=t(1, 2, 5, 8)), "query must have at least 2 dims"),
    "batch mismatch": (dict(query=t(2, 2, 5, 8), key=t(3, 2, 5, 8), value=t(3, 2, 5, 8)), "batch sizes differ"),
    "head dim mismatch": (dict(query=t(1, 2, 5, 8), key=t(1, 2, 5, 4), value=t(1, 2, 5, 8)), "same head dim E"),
    "Lk != Lv": (dict(query=t(1, 2, 5, 8), key=t(1, 2, 6, 8), value=t(1, 2, 7, 8)), "same sequence length"),
    "kv heads differ": (dict(query=t(1, 2, 5, 8), key=t(1, 2, 5, 8), value=t(1, 3, 5, 8)), "same number of heads"),
    "gqa not a multiple": (dict(query=t(1, 3, 5, 8), key=t(1, 2, 5, 8), value=t(1, 2, 5, 8), enable_gqa=True),
                           "must be a multiple"),
    "heads differ, no gqa": (dict(query=t(1, 4, 5, 8), key=t(1, 2, 5, 8), value=t(1, 2, 5, 8)), "enable_gqa=False"),
    "mask does not broadcast": (dict(query=t(1, 2, 5, 8), key=t(1, 2, 6, 8), value=t(1, 2, 6, 8),
                                     attn_mask=torch.ones(5, 5, dtype=torch.bool)), "does not broadcast"),
    "mixed dtypes": (dict(query=t(1, 2, 5, 8), key=t(1, 2, 5, 8, dtype=torch.bfloat16), value=t(1, 2, 5, 8)),
                     "share one dtype"),
    "integer dtype": (dict(query=t(1, 2, 5, 8, dtype=torch.int32), key=t(1, 2, 5, 8, dtype=torch.int32),
                           value=t(1, 2, 5, 8, dtype=torch.int32)), "floating-point dtype is required"),
    "mixed devices": (dict(query=t(1, 2, 5, 8), key=t(1, 2, 5, 8, device="meta"), value=t(1, 2, 5, 8)),
                      "one device"),
    "mask dtype": (dict(query=t(1, 2, 5, 8), key=t(1, 2, 5, 8), value=t(1, 2, 5, 8),
                        attn_mask=torch.zeros(5, 5, dtype=torch.float64)), "attn_mask dtype"),
    "dropout out of range": (dict(query=t(1, 2, 5, 8), key=t(1, 2, 5, 8), value=t(1, 2, 5, 8), dropout_p=1.5),
                             "dropout_p must be in"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS), ids=str)
def test_bad_input_gets_the_same_error_everywhere(case: str) -> None:
    args, fragment = BAD_INPUTS[case]
    messages = set()
    for fn in CALLABLES:
        with pytest.raises(ValueError) as info:
            fn(**args)
        messages.add(str(info.value))
        if fn is not reference:
            with pytest.raises(ValueError):
                fn.unsupported_reasons(**args)
    assert len(messages) == 1, messages
    (message,) = messages
    assert fragment in message and message.startswith("sdpa: ")


def test_shape_errors_name_the_shapes() -> None:
    args, _ = BAD_INPUTS["head dim mismatch"]
    with pytest.raises(ValueError, match=r"query \(1, 2, 5, 8\), key \(1, 2, 5, 4\), value \(1, 2, 5, 8\)"):
        sdpa_impls.get("fused")(**args)


def test_unsupported_raises_with_the_reasons() -> None:
    q = t(1, 2, 8, 16)
    impl = sdpa_impls.get("torch_sdpa_cudnn")
    reasons = impl.unsupported_reasons(q, q, q)
    if not reasons:
        pytest.skip("cuDNN attention runs here")
    with pytest.raises(Unsupported) as info:
        impl(q, q, q)
    assert isinstance(info.value, NotImplementedError)
    assert info.value.reasons == reasons and reasons[0] in str(info.value)


def test_xformers_explains_itself_on_cpu() -> None:  # CPU tensors: the same reasons on a machine with a GPU
    q = t(1, 2, 8, 16)
    reasons = sdpa_impls.get("xformers").unsupported_reasons(q, q, q)
    assert any("xformers is not installed" in r or "device=cpu (supported: cuda)" in r for r in reasons), reasons


def test_dropout_support_is_declared() -> None:
    q = t(1, 2, 8, 16)
    assert sdpa_impls.get("naive").unsupported_reasons(q, q, q, dropout_p=0.1) == []
    for name in ("chunked", "fused"):
        assert any("dropout" in r for r in sdpa_impls.get(name).unsupported_reasons(q, q, q, dropout_p=0.1))


@pytest.mark.parametrize("name", ["naive", "torch_sdpa_math"])
def test_dropout_is_unbiased(name: str) -> None:
    """E[dropout output] equals the output without dropout (kept weights are rescaled by 1/(1-p))."""
    torch.manual_seed(0)
    q, k, v = t(1, 2, 16, 8), t(1, 2, 16, 8), t(1, 2, 16, 8)
    impl = sdpa_impls.get(name)
    exact = impl(q, k, v)
    runs = torch.stack([impl(q, k, v, dropout_p=0.3) for _ in range(2000)])
    assert not torch.equal(runs[0], exact)
    assert (runs.mean(0) - exact).abs().max() < 0.1


def test_only_a_shape_mismatch_is_reported_as_a_mask_that_does_not_broadcast(monkeypatch: pytest.MonkeyPatch) -> None:
    """broadcast_shapes signals a mismatch with a plain RuntimeError; anything else (a RecursionError is a
    RuntimeError too) says nothing about the mask and travels up unchanged, never as "does not broadcast"."""
    def deep(*shapes: object) -> torch.Size:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(torch, "broadcast_shapes", deep)
    q = t(1, 2, 5, 8)
    for fn in CALLABLES:
        with pytest.raises(RecursionError):
            fn(q, q, q, attn_mask=torch.ones(5, 5, dtype=torch.bool))


@pytest.mark.parametrize("shapes", [((0, 2, 4, 8), (0, 2, 5, 8)), ((1, 2, 0, 8), (1, 2, 5, 8)),
                                    ((1, 2, 4, 8), (1, 2, 0, 8)), ((1, 2, 4, 8), (1, 0, 5, 8)),
                                    ((1, 2, 4, 0), (1, 2, 5, 0))], ids=["B=0", "Lq=0", "Lk=0", "Hkv=0", "E=0"])
def test_empty_dimensions_are_valid_input(shapes: tuple) -> None:
    """torch answers these (empty or zero outputs), so they are not errors; every implementation's reasons answer."""
    (qs, ks), gqa = shapes, shapes[1][1] != shapes[0][1]
    q, k = t(*qs), t(*ks)
    sdpa_impls.validate(sdpa_impls.SDPAInputs(q, k, k, enable_gqa=gqa))
    for name in BUILTINS:
        assert isinstance(sdpa_impls.get(name).unsupported_reasons(q, k, k, enable_gqa=gqa), list)


@pytest.mark.parametrize("shape", [(), (5,), (3, 1, 5), (1, 1, 4, 5)], ids=lambda s: f"{len(s)}-D")
def test_every_reasons_check_answers_for_masks_of_any_rank(shape: tuple) -> None:
    """A mask of rank 0 to 4 that broadcasts to (B, Hq, Lq, Lk) is valid everywhere, and no reasons check
    indexes a dimension it does not have."""
    q, k = t(2, 3, 4, 8), t(2, 3, 5, 8)
    for mask in (torch.ones(shape, dtype=torch.bool), torch.zeros(shape)):
        for name in BUILTINS:
            assert isinstance(sdpa_impls.get(name).unsupported_reasons(q, k, k, attn_mask=mask), list)


def test_unsupported_travels_through_pickle_as_raised() -> None:
    """A process pool's worker hands an exception back pickled; Unsupported's own arguments had made that a
    TypeError (and the pool broken)."""
    import copy
    import pickle

    raised = Unsupported("mine", ["dtype=fp64", "device=cuda"])
    raised.add_note("while checking")
    for back in (pickle.loads(pickle.dumps(raised)), copy.copy(raised)):
        assert type(back) is Unsupported and (back.impl, back.reasons, str(back), back.__notes__) == \
            ("mine", ["dtype=fp64", "device=cuda"], str(raised), ["while checking"])


def test_with_op_names_a_bound_method_or_builtin_it_cannot_mark() -> None:
    class Kernel:
        def run(self) -> torch.Tensor:
            return torch.ones(2)

    marked = [sdpa_impls.with_op(fn, "mine") for fn in (Kernel().run, torch.zeros(3).clone)]
    assert [m.op for m in marked] == ["mine", "mine"] and [m().shape[0] for m in marked] == [2, 3]
    plain = lambda: torch.ones(1)  # noqa: E731
    assert sdpa_impls.with_op(plain, "x") is plain and sdpa_impls.with_op(plain, "") is plain
    Kernel.run.not_capturable, Kernel.run.context = "reads the clock", "ctx"  # read through the bound method
    marked = sdpa_impls.with_op(Kernel().run, "mine")
    assert (marked.op, marked.not_capturable, marked.context) == ("mine", "reads the clock", "ctx")


@pytest.mark.parametrize("given, error", [
    (dict(devices="cuda"), "takes a set of device types, e.g. {'cuda'}; got 'cuda'"),
    (dict(devices=""), "takes a set of device types, e.g. {'cuda'}; got ''"),
    (dict(devices={"cuda:0"}), "'cuda:0' is no device type"),
    (dict(dtypes=frozenset({"bf16"})), "takes a set of torch dtypes"),
    (dict(dtypes=5), "Support(dtypes=...) takes a set; got 5"),
    (dict(masks={"bools"}), "bools is no mask kind"),
    (dict(head_dim_multiple=0), "Support(head_dim_multiple=...) takes a whole number >= 1; got 0"),
    (dict(max_head_dim=2.5), "Support(max_head_dim=...) takes a whole number >= 1 or None; got 2.5"),
    (dict(dropout=1), "Support(dropout=...) takes True or False; got 1"),
])
def test_support_tells_a_wrong_field_where_it_is_declared(given: dict, error: str) -> None:
    """A string of devices had read as its characters (a device 'c' supported), a head-dim multiple of 0 raised
    ZeroDivisionError at every call, and a dtype by name refused every call."""
    with pytest.raises((TypeError, ValueError)) as raised:
        sdpa_impls.Support(**given)
    assert error in str(raised.value)


def test_support_of_plain_sets_is_the_frozen_one() -> None:
    given = sdpa_impls.Support(devices={"cpu"}, dtypes=[torch.float32], masks=(m for m in ("none", "bool")))
    frozen = sdpa_impls.Support(devices=frozenset({"cpu"}), dtypes=frozenset({torch.float32}),
                                masks=frozenset({"none", "bool"}))
    assert given == frozen and hash(given) == hash(frozen) and isinstance(given.devices, frozenset)
    import numpy

    assert sdpa_impls.Support(head_dim_multiple=numpy.int64(8), dropout=numpy.True_).head_dim_multiple == 8


def test_check_on_cuda_without_one_fails_saying_so() -> None:
    """torch's own error had come out of its random generator; a skip would let a GPU runner without its GPU pass."""
    from sdpa_impls.testing import cases, check

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device: check runs there")
    with pytest.raises(RuntimeError, match="^check on cuda: no CUDA device is available to this torch") as raised:
        check("naive", cases()[0], device="cuda")
    assert not isinstance(raised.value, Unsupported)
