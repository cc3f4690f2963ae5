# new / old backward of chunked (rows across key tiles), interleaved in one process. `_old_backward.py` beside
# sdpa_impls/impls/_tiled/backward.py is that file as it was at c63cf7c (git show c63cf7c:sdpa_impls/impls/_tiled/backward.py)
import torch, time, statistics, sys
from sdpa_impls.impls._tiled import backward as new, _old_backward as old
from sdpa_impls.impls._tiled.online_softmax import chunked_forward
from sdpa_impls.impls._tiled.tilemap import MaskTiles, Tiling
from sdpa_impls.impls._tiled.tiles import grouped
from sdpa_impls.impls.chunked import tile_size
from sdpa_impls.protocol import SDPAInputs
for dt in (torch.bfloat16, torch.float32):
    for L in (2048, 4096):
        q, k, v = (torch.randn(1, 8, L, 64, dtype=dt) for _ in range(3))
        inp = SDPAInputs(q, k, v, None, 0.0, True, None, True)
        q5, k4, v4, mask5 = grouped(inp)
        tiles = MaskTiles.of(inp)
        qt, kt = tile_size(torch.device("cpu"), 8)
        out5, lse, _ = chunked_forward(q5, k4, v4, mask5, True, inp.softmax_scale, True, q_tile=qt, k_tile=kt, tiles=tiles)
        d5 = torch.randn_like(out5)
        til = Tiling(qt, kt, kt, False)
        fn = {"new": lambda: new.tiled_backward(q5, k4, v4, mask5, True, inp.softmax_scale, lse, None, d5, til, tiles),
              "old": lambda: old.tiled_backward(q5, k4, v4, mask5, True, inp.softmax_scale, out5, lse, None, d5, til, tiles)}
        t = {"new": [], "old": []}
        for r in range(9):
            for name in (("new", "old") if r % 2 else ("old", "new")):
                t0 = time.perf_counter(); fn[name](); t[name].append(time.perf_counter() - t0)
        n, o = statistics.median(t["new"][1:]), statistics.median(t["old"][1:])
        print(f"{str(dt)[6:]} L{L} tiles {qt}x{kt}: backward old {o*1e3:.0f} ms new {n*1e3:.0f} ms new/old {n/o:.2f}", flush=True)
