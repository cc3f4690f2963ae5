"""fused's fp32 inference forward without the softmax's row max (`compute.unshifted_exp`): P = exp(S) where a bound on
every score keeps exp in fp32's normal range, the row sums from the P V GEMM. It is taken exactly where the bound
holds and the policy allows it, its answers meet the correctness rule up to the bound's edge (scores of ±40), and a
row with every key masked still gets zeros. Its inference tiles without keys to skip are wider (`FUSED_ROWS_WHOLE`)."""
from __future__ import annotations

import pytest
import torch

import sdpa_impls
from sdpa_impls.bench.check import CaseContext
from sdpa_impls.bench.grid import Case
from sdpa_impls.bench.measure import prepare_point
from sdpa_impls.impls import fused
from sdpa_impls.impls._tiled import compute
from sdpa_impls.impls._tiled.budget import BF16_ENV, CpuTiling, cuda_tiling, forced_tiling
from sdpa_impls.impls._tiled.compute import EXP2_FASTER, EXP_ENV, SCORE_BOUND, UNSHIFTED_MIN_KEYS, unshifted_base
from sdpa_impls.impls._tiled.tilemap import MaskTiles
from sdpa_impls.protocol import SDPAInputs
from sdpa_impls.reference import max_abs_error, reference, tolerance

CPU = torch.device("cpu")
E = 32


class Shifted(CpuTiling):
    """This CPU's policy with the softmax kept (the path before the unshifted exp)."""
    UNSHIFTED_EXP = False


def shifted() -> forced_tiling:
    return forced_tiling(Shifted(torch.get_num_threads(), 1 << 20))


def inputs(lk: int, q_scale: float = 1.0, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(lk)
    q = torch.randn(1, 2, 64, E, generator=gen) * q_scale
    k, v = torch.randn(1, 2, lk, E, generator=gen), torch.randn(1, 2, lk, E, generator=gen)
    return tuple(t.to(dtype) for t in (q, k, v))


def op_of(*args: torch.Tensor, **kw: object) -> str:
    return getattr(sdpa_impls.get("fused").prepare(*args, **kw), "op", "")


def bound(q: torch.Tensor, k: torch.Tensor) -> float:
    return float(q.double().norm(dim=-1).max() * k.double().norm(dim=-1).max()) / E ** 0.5


def test_it_is_taken_exactly_where_the_scores_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BF16_ENV, raising=False)
    monkeypatch.setenv(EXP_ENV, "exp")
    lk = UNSHIFTED_MIN_KEYS
    q, k, v = inputs(lk)
    assert bound(q, k) <= SCORE_BOUND
    assert op_of(q, k, v) == "unshifted exp"
    assert op_of(q, k, v, is_causal=True) == "unshifted exp"
    assert op_of(q, k, v, attn_mask=torch.rand(64, lk, generator=torch.Generator().manual_seed(0)) > 0.5) \
        == "unshifted exp"
    assert compute._warm_exp.cache_info().currsize >= 1  # prepare made the process's first parallel exp_ itself
    assert op_of(q, k, v, attn_mask=torch.zeros(64, lk)) == ""  # a float mask: its bias is not in the bound
    assert op_of(*(t[:, :, :lk // 2] if t is not q else t for t in (q, k, v))) == ""  # too few keys to pay off
    big = q * (1.01 * SCORE_BOUND / bound(q, k))
    assert bound(big, k) > SCORE_BOUND and op_of(big, k, v) == ""
    assert op_of(*(t.requires_grad_() for t in inputs(lk))) == ""  # training keeps the log-sum-exp path
    with cuda_tiling():  # the GPU policy does not take it
        assert op_of(q, k, v) == ""
    with shifted():
        assert op_of(q, k, v) == ""
    monkeypatch.setenv(BF16_ENV, "fp32")  # bf16 computed in fp32 takes it; bf16 tiles do not
    assert op_of(*inputs(lk, dtype=torch.bfloat16)) == "fp32 compute, unshifted exp"
    monkeypatch.setenv(BF16_ENV, "bf16")
    assert op_of(*inputs(lk, dtype=torch.bfloat16)) == "bf16 compute"
    monkeypatch.setenv(EXP_ENV, "exp2")  # the other base, where this CPU's exp2 is the faster
    assert op_of(q, k, v) == op_of(q, k, v, is_causal=True) == "unshifted exp2"
    assert op_of(big, k, v) == ""


def test_exp2_is_chosen_exactly_where_this_cpus_exp2_is_faster(monkeypatch: pytest.MonkeyPatch) -> None:
    """The base of the unshifted exp follows the rates measured in this process (each positive and finite), or the
    setting; an unknown setting is one clear error; CUDA, which takes no unshifted exp, says exp."""
    monkeypatch.delenv(EXP_ENV, raising=False)
    rates = compute.exp_rates()
    assert all(0 < r < float("inf") for r in rates.values()), rates
    found = unshifted_base(CPU)
    assert found.log2 == (rates["exp2"] >= EXP2_FASTER * rates["exp"])
    assert found.reason.startswith(("exp2 (" if found.log2 else "exp (") + "this CPU's fp32 exp ")
    assert not unshifted_base(torch.device("cuda")).log2
    for forced in ("exp", "exp2"):
        monkeypatch.setenv(EXP_ENV, forced)
        assert unshifted_base(CPU).log2 == (forced == "exp2")
    monkeypatch.setenv(EXP_ENV, "exp10")
    with pytest.raises(ValueError, match=f"{EXP_ENV} should be exp or exp2"):
        unshifted_base(CPU)


@pytest.mark.parametrize("base", ["exp", "exp2"])
@pytest.mark.parametrize("edge", ["+40", "-40", "random"])
@pytest.mark.parametrize("mask", ["none", "causal", "dead rows"])
def test_its_answers_meet_the_rule_up_to_the_bounds_edge(edge: str, mask: str, base: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Scores of exactly +40 or -40 everywhere (each query along, or against, a common key direction), where exp
    without a shift is largest or smallest, and random ones; with every key of some rows masked (they get 0). Either
    base: exp(S), or exp2 of the scores scaled by log2 e in the GEMM."""
    monkeypatch.setenv(EXP_ENV, base)
    lk = UNSHIFTED_MIN_KEYS
    q, k, v = inputs(lk)
    if edge != "random":
        direction = torch.nn.functional.normalize(torch.randn(E, generator=torch.Generator().manual_seed(1)), dim=0)
        k = direction.expand_as(k) * 4.0
        size = 0.999 * SCORE_BOUND * E ** 0.5 / 4.0
        q = direction.expand_as(q) * (size if edge == "+40" else -size)
        assert 39.9 < bound(q, k) <= SCORE_BOUND
    kw: dict = {"is_causal": True} if mask == "causal" else {}
    if mask == "dead rows":
        keep = torch.rand(64, lk, generator=torch.Generator().manual_seed(2)) > 0.3
        keep[5] = keep[40] = False
        kw["attn_mask"] = keep
    assert op_of(q, k, v, **kw) == f"unshifted {base}"
    got = sdpa_impls.get("fused")(q, k, v, **kw)
    with shifted():
        softmax = sdpa_impls.get("fused")(q, k, v, **kw)
    naive = sdpa_impls.get("naive")(q, k, v, **kw)
    ref = reference(q, k, v, attn_mask=kw.get("attn_mask"), is_causal=mask == "causal")
    assert torch.isfinite(got).all()
    if mask == "dead rows":
        assert got[:, :, [5, 40]].eq(0).all() and softmax[:, :, [5, 40]].eq(0).all()
        ref = torch.nan_to_num(ref)  # fp64 softmax of a row of -inf: 0/0
        naive = torch.nan_to_num(naive)
    err = max_abs_error(got, ref)
    assert err <= tolerance(max_abs_error(naive, ref), torch.float32, ref), err
    assert torch.allclose(got, softmax, rtol=1e-5, atol=1e-6)


def test_inference_tiles_with_no_key_to_skip_are_wider() -> None:
    """With 2 threads of 2 MiB L2 (an 8 MiB score tile), fp32 rows of 2048 keys: 512 for an inference tile that
    computes every key, 256 otherwise (a causal diagonal block is computed whole)."""
    with forced_tiling(CpuTiling(2, 2 << 20)):
        assert fused.tile_shape(CPU, 1, 8, 1, 2048, 2048, 4, whole=True) == (512, 2)
        assert fused.tile_shape(CPU, 1, 8, 1, 2048, 2048, 4) == (256, 4)
        for causal, inference, rows in ((False, True, 512), (False, False, 256), (True, True, 256)):
            case = Case(lq=2048, lk=2048, e=E, causal=causal)
            tiles = MaskTiles.of(SDPAInputs(**CaseContext(case, "cpu").inputs.args()))
            assert fused.fused_plan(tiles, CPU, 1, 1, 4, inference)[0] == rows, (causal, inference)
        point = prepare_point("fused", CaseContext(Case(lq=2048, lk=2048, e=E), "cpu"))  # 512-row tiles
    assert point.max_error <= point.error_tolerance


@pytest.mark.parametrize("base", ["exp", "exp2"])
@pytest.mark.parametrize("heads", [(2, 2), (4, 2)], ids=["MHA", "GQA"])
def test_a_row_longer_than_its_tile_is_summed_in_key_blocks(base: str, heads: tuple[int, int],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """With no key to skip and a score budget that 64 rows of every key overflow, the unshifted forward keeps its
    rows and takes the keys a block at a time (the last block shorter): the answer meets the rule and matches the
    softmax path; a causal call of the same inputs keeps whole rows."""
    monkeypatch.setenv(EXP_ENV, base)
    hq, hkv = heads
    gen = torch.Generator().manual_seed(7)
    lk = 1000
    q = torch.randn(1, hq, 64, E, generator=gen)
    k, v = torch.randn(1, hkv, lk, E, generator=gen), torch.randn(1, hkv, lk, E, generator=gen)
    kw = {"enable_gqa": hq != hkv}
    small = CpuTiling(2, 32 << 10)  # a 128 KiB score tile: 2 threads × 64 rows × 256 keys of fp32, per kv head
    with forced_tiling(small):
        tiles = MaskTiles.of(SDPAInputs(q, k, v, **kw))
        rows, _, keys = fused.fused_plan(tiles, CPU, 1, hq // hkv, 4, True, True)
        assert rows == 64 and keys == 256 // (hq // hkv) and lk % keys
        assert fused.fused_plan(MaskTiles.of(SDPAInputs(q, k, v, is_causal=True, **kw)), CPU, 1, hq // hkv, 4, True,
                                True)[2] == lk
        assert op_of(q, k, v, **kw) == f"unshifted {base}"
        got = sdpa_impls.get("fused")(q, k, v, **kw)
    with shifted():
        softmax = sdpa_impls.get("fused")(q, k, v, **kw)
    ref = reference(q, k, v, enable_gqa=kw["enable_gqa"])
    naive = sdpa_impls.get("naive")(q, k, v, **kw)
    assert max_abs_error(got, ref) <= tolerance(max_abs_error(naive, ref), torch.float32, ref)
    assert torch.allclose(got, softmax, rtol=1e-5, atol=1e-6)
