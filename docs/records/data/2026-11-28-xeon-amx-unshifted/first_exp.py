"""The first parallel fp32 exp_ of a process, against fp64: the largest relative error of three calls in a row.

    python first_exp.py none|sdpa|softmax [warm]

`sdpa` (or `softmax`) runs torch's SDPA (or a softmax) first; `warm` makes one exp_ on a scratch tensor first,
as `compute.warm_exp` does (65536 elements a thread)."""
import sys

import torch

torch.manual_seed(0)
if sys.argv[1] == "sdpa":
    q = torch.randn(1, 8, 2048, 64)
    torch.nn.functional.scaled_dot_product_attention(q, q, q)
elif sys.argv[1] == "softmax":
    torch.softmax(torch.randn(4, 256, 2048), -1)
if "warm" in sys.argv[2:]:
    torch.zeros(torch.get_num_threads() * 65536).exp_()
s = torch.randn(4, 256, 2048) * 2
calls = [s.clone().exp_() for _ in range(3)]  # before any other exp: an fp64 one first hides it
ref = s.double().exp()
print(" ".join(f"{((c.double() - ref).abs() / ref).max().item():.1e}" for c in calls))
