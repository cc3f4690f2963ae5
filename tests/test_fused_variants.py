"""tools/fused_variants.py on the CPU, at a small size: every experiment checked and timed, the copy-first
helpers give the one-pass answers bit for bit, and a variant this torch cannot run is reported with its reason."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import fused_variants as fv  # noqa: E402
from sdpa_impls.impls._tiled.budget import CpuTiling, CudaTiling, choice, cuda_tiling  # noqa: E402
from sdpa_impls.impls._tiled.backward import times_into  # noqa: E402
from sdpa_impls.impls._tiled.online_softmax import minus_into  # noqa: E402


def test_a_small_run_checks_and_times_every_experiment(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "v.json"
    code = fv.main(["--device", "cpu", "--length", "256", "--heads", "2", "--dim", "16", "--rounds", "2",
                    "--budget", "0.005", "--out", str(out)])
    assert code == 0, capsys.readouterr()
    doc = json.loads(out.read_text())
    assert doc["device"] == "cpu" and doc["wrong"] == {}
    rows = {e["name"]: e["rows"] for e in doc["experiments"]}
    assert list(rows) == ["band", "p", "ds", "dp", "softmax", "chunked fwd", "chunked fwd+bwd", "fused fwd+bwd",
                          "fused fwd+bwd dS", "fused fwd window-512"]
    for name in ("chunked fwd", "chunked fwd+bwd", "fused fwd+bwd"):  # whole calls, CAST_FIRST off then on
        assert [r["variant"].split(" (")[1] for r in rows[name]] == ["CAST_FIRST = False)", "CAST_FIRST = True)"]
        assert rows[name][0]["ratio"] == 1.0 and rows[name][1]["median_s"] > 0
    assert [r["variant"].split(" (")[1] for r in rows["fused fwd+bwd dS"]] == ["SOFTMAX_BACKWARD = False)",
                                                                             "SOFTMAX_BACKWARD = True)"]
    assert [r["variant"].split(" (")[1] for r in rows["fused fwd window-512"]] == ["WIDEN_MASKED = False)",
                                                                                 "WIDEN_MASKED = True)"]
    assert CpuTiling.CAST_FIRST is True and CpuTiling.SOFTMAX_BACKWARD is True  # restored after the calls
    assert CpuTiling.WIDEN_MASKED is True and CudaTiling.WIDEN_MASKED is False
    for name in ("band", "p", "ds", "softmax"):
        assert len(rows[name]) >= 2 and rows[name][0]["ratio"] == 1.0
        assert all(r["median_s"] > 0 and len(r["rounds"]) == 2 for r in rows[name])
    first, mixed = rows["dp"]
    assert first["ratio"] == 1.0
    assert ("on cpu" in mixed["skipped"]) if "skipped" in mixed else mixed["ratio"] > 0  # CUDA-only in torch 2.13
    printed = capsys.readouterr().out
    assert "| band | today: strided add of a broadcast bias |" in printed and "/ first" in printed


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_copy_first_gives_the_one_pass_answers_bit_for_bit(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(1)
    s = (torch.randn((3, 40, 72), generator=gen) * 8).to(dtype)
    s[0, 0, :5] = float("-inf")  # masked scores stay -inf
    x = torch.randn((3, 40, 1), generator=gen) * 8
    p = torch.rand((3, 40, 72), generator=gen)
    one, two = torch.empty(3, 40, 72), torch.empty(3, 40, 72)
    assert torch.equal(minus_into(one, s, x, False), minus_into(two, s, x, True))
    assert torch.equal(times_into(one, p, s, False), times_into(two, p, s, True))


def test_cast_first_follows_the_policy_without_reading_memory() -> None:
    assert choice(torch.device("cpu"), "CAST_FIRST") is CpuTiling.CAST_FIRST is True
    with cuda_tiling():  # the CUDA plan forced on CPU tensors keeps the CUDA choice (and its op counts)
        assert choice(torch.device("cpu"), "CAST_FIRST") is CudaTiling.CAST_FIRST is False


def test_an_unknown_choice_is_named() -> None:
    with pytest.raises(ValueError, match="unknown tiling choice 'CAST_FRIST'.*CAST_FIRST"):
        choice(torch.device("cpu"), "CAST_FRIST")  # type: ignore[arg-type]


def test_fp16_adds_the_softmax_choice_of_fused_which_the_cpu_cannot_take(tmp_path: Path) -> None:
    """In fp16 the whole calls add `fused` fwd+bwd with SOFTMAX_FROM_HALF off and on; on the CPU, where fp16 is
    computed in fp32, the second is reported as skipped with that reason, and the flag is left as it was."""
    out, before = tmp_path / "v.json", (CpuTiling.SOFTMAX_FROM_HALF, CudaTiling.SOFTMAX_FROM_HALF)
    assert fv.main(["--device", "cpu", "--dtype", "fp16", "--only", "softmax", "--only", "calls", "--length", "128",
                    "--heads", "2", "--dim", "16", "--rounds", "1", "--budget", "0.002", "--out", str(out)]) == 0
    rows = {e["name"]: e["rows"] for e in json.loads(out.read_text())["experiments"]}
    assert list(rows) == ["softmax", "chunked fwd", "chunked fwd+bwd", "fused fwd+bwd", "fused fwd+bwd dS",
                          "fused fwd+bwd softmax", "fused fwd window-512"]
    off, on = rows["fused fwd+bwd softmax"]
    assert off["ratio"] == 1.0 and "computes in fp32" in on["skipped"]
    assert rows["softmax"][1]["median_s"] > 0  # the tile-level pass runs anywhere: checked against today's first
    assert (CpuTiling.SOFTMAX_FROM_HALF, CudaTiling.SOFTMAX_FROM_HALF) == before == (False, True)
