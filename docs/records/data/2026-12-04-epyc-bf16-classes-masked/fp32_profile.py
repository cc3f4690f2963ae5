import sys, torch
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[4]))
from sdpa_impls.protocol import SDPAInputs
from sdpa_impls.registry import get
L, E, H = int(sys.argv[1]), int(sys.argv[2]), 8
dt = getattr(torch, sys.argv[3])
torch.manual_seed(0)
q, k, v = (torch.randn(1, H, L, E, dtype=dt) for _ in range(3))
f = get("fused").prepare_inputs(SDPAInputs(q, k, v))
t = get("torch_sdpa").prepare_inputs(SDPAInputs(q, k, v))
for _ in range(3): f(); t()
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CPU]) as p:
    for _ in range(5): f()
print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=14))
with profile(activities=[ProfilerActivity.CPU]) as p:
    for _ in range(5): t()
print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=6))
