# independent of sdpa-bench's code: torch.profiler (not the autograd profiler sdpa-bench uses) with memory records,
# around one bf16 SDPA call, B1 H8 L1024 E64, one thread; every allocation and free replayed in time order
import torch, torch.nn.functional as F
from torch.profiler import profile, ProfilerActivity
torch.manual_seed(0); torch.set_num_threads(1)
q, k, v = (torch.randn(1, 8, 1024, 64, dtype=torch.bfloat16) for _ in range(3))
F.scaled_dot_product_attention(q, k, v)
with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
    out = F.scaled_dot_product_attention(q, k, v)
rec = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
live = peak = 0
for _, n in rec:
    live += n; peak = max(peak, live)
print(f"{torch.__version__}: peak {peak} B over {sum(n > 0 for _, n in rec)} allocations: "
      + ", ".join(str(n) for _, n in rec if n > 0))
