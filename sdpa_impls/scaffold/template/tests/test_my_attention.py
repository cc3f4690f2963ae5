"""my_attention against the float64 reference on the cases of sdpa-bench's smoke preset, with the rule every
benchmark applies before it times a point (at most 2x the error of sdpa-bench's naive implementation in the same
dtype, plus a floor; gradients too where the case has a backward). On CUDA too, where there is a GPU."""
import pytest
import torch

from sdpa_impls.testing import Unsupported, cases, check

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", cases("smoke"), ids=lambda case: case.id)
def test_my_attention_matches_float64(case, device):
    try:
        error, tolerance = check("my_attention", case, device)  # a wrong answer raises WrongResult, a failure
    except Unsupported as exc:  # a case it declares it cannot run
        pytest.skip("; ".join(exc.reasons))
    assert error <= tolerance
