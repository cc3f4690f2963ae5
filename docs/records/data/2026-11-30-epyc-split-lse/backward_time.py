"""The tiled backward with P = exp((S - max) - log-sum) against the same loop with one subtraction (the cost of the
second pass over the tile), interleaved in one process (order shuffled each round):
    python backward_time.py ROUNDS
It needs a scratch flag in sdpa_impls/impls/_tiled/backward.py: `SCRATCH = [True]` at module level, and the
multi-tile P computed as `(minus_into(...).sub_(log-sum) if SCRATCH[0] else minus_into(...)).exp_()`."""
import random, statistics, sys, time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
import sdpa_impls
from sdpa_impls.impls._tiled import backward
from sdpa_impls.protocol import SDPAInputs

rng = random.Random(0)
gap = torch.zeros(2048, 2048, dtype=torch.bool)
gap[:, :256] = gap[:, 1024:] = True  # two key runs: fused's backward reads the row's max and log-sum
POINTS = [("chunked", torch.float32, 2048, None), ("chunked", torch.bfloat16, 2048, None),
          ("chunked", torch.float32, 4096, None), ("fused", torch.float32, 2048, gap)]
for name, dtype, length, mask in POINTS:
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 8, length, 64, dtype=dtype, requires_grad=True) for _ in range(3))
    call = sdpa_impls.get(name).prepare_inputs(SDPAInputs(q, k, v, mask))
    dout = torch.randn_like(call())

    def bwd():
        out = call()
        start = time.perf_counter()
        torch.autograd.grad(out, (q, k, v), dout)
        return time.perf_counter() - start

    times = {True: [], False: []}
    for flag in times:
        backward.SCRATCH[0] = flag
        bwd()
    for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 9):
        order = list(times)
        rng.shuffle(order)
        for flag in order:
            backward.SCRATCH[0] = flag
            times[flag].append(bwd())
    two, one = times[True], times[False]
    print(f"{name} {str(dtype)[6:]} L {length}{' two-run mask' if mask is not None else ''}: two subtractions / one "
          f"min {min(two) / min(one):.3f} median {statistics.median(two) / statistics.median(one):.3f} "
          f"(one: median {statistics.median(one) * 1e3:.0f} ms)", flush=True)
