# errors of dq and dk against fp64 where dP - D cancels, rows across chunked's key tiles (Lk 1537); the tolerance
# is 2 x naive's error + the floor (of max |ref|, at least 1)
import torch, sdpa_impls
from sdpa_impls.reference import max_abs_error, ERROR_FLOOR
torch.set_num_threads(1)
def compare(tag, dt, q, k, v, mask, do):
    def grads(name):
        d = torch.float64 if name == "ref" else dt
        x = [t.to(d).clone().requires_grad_() for t in (q, k, v)]
        f = sdpa_impls.reference if name == "ref" else sdpa_impls.get(name)
        f(*x, attn_mask=None if mask is None else mask.to(d)).backward(do.to(d))
        return [t.grad for t in x]
    ref = grads("ref")
    e = {n: [max_abs_error(a, b) for a, b in zip(grads(n), ref)] for n in ["naive", "chunked", "fused", "torch_sdpa_math"]}
    tol = [2 * e["naive"][i] + ERROR_FLOOR[dt] * max(1, float(ref[i].abs().max())) for i in range(3)]
    print(tag, "| tolerance dq %.2e dk %.2e" % tuple(tol[:2]), "|", " | ".join(f"{n} dq {r[0]:.2e} dk {r[1]:.2e}" for n, r in e.items()))
# (a) bf16, every key's value row the same: exact dQ = dK = 0
torch.manual_seed(0)
q, k = torch.randn(1, 2, 300, 8).bfloat16(), torch.randn(1, 2, 1537, 8).bfloat16()
v = torch.tensor([0.7, -1.3] * 40).bfloat16().expand(1, 2, 1537, 80).contiguous()
compare("(a) bf16 equal value rows", torch.bfloat16, q, k, v, None, torch.randn(1, 2, 300, 80).bfloat16())
# (b) bf16, a per-key bias making key 7 dominate each row
torch.manual_seed(0)
q, k, v = torch.randn(1, 1, 2047, 8).bfloat16(), torch.randn(1, 1, 1537, 8).bfloat16(), torch.randn(1, 1, 1537, 80).bfloat16()
mask = torch.zeros(1537, dtype=torch.bfloat16); mask[7] = 20.0
compare("(b) bf16 bias 20 on key 7", torch.bfloat16, q, k, v, mask, torch.randn(1, 1, 2047, 80).bfloat16())
# (c) fp32, the same with bias 40 and 1024 query rows
torch.manual_seed(0)
q, k, v = torch.randn(1, 1, 1024, 8), torch.randn(1, 1, 1537, 8), torch.randn(1, 1, 1537, 80)
mask = torch.zeros(1537); mask[7] = 40.0
compare("(c) fp32 bias 40 on key 7", torch.float32, q, k, v, mask, torch.randn(1, 1, 1024, 80))
