"""`python -m sdpa_impls.suite.asv_machine`: a device it cannot describe is one line and exit 2."""
from __future__ import annotations

import pytest
import torch

from sdpa_impls.suite import asv_machine


@pytest.mark.parametrize("device, said", [
    ("tpu", "--device tpu: not a device this tool describes; available here: cpu"),
    (f"cuda:{torch.cuda.device_count()}", "no such CUDA device for this torch"),  # one past the last, on any machine
    ("cuda:x", "--device cuda:x: not a device this tool describes"),
])
def test_a_device_that_is_not_there_is_one_line_and_exit_2(device: str, said: str, capsys) -> None:
    assert asv_machine.main(["--device", device, "--dry-run"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and said in err, err
    assert err.startswith("python -m sdpa_impls.suite.asv_machine: error: ")
