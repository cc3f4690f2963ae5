"""The least time a forward attention computed in fp32 can take on this CPU: its two GEMMs alone (Q K^T and P V,
fp32, per head, no softmax), against torch's SDPA in bf16 and fp32 on the same case, in interleaved rounds."""
import statistics, time, torch
torch.manual_seed(0)
B, H, L, E = 1, 8, 4096, 128
q32, k32, v32 = (torch.randn(B, H, L, E) for _ in range(3))
q16, k16, v16 = (t.bfloat16() for t in (q32, k32, v32))
p32 = torch.rand(B, H, L, L)
big = torch.randn(4096, 4096)
sdpa = torch.nn.functional.scaled_dot_product_attention
def gemms():
    s = q32 @ k32.transpose(-1, -2)
    return p32 @ v32
calls = {"torch_sdpa bf16": lambda: sdpa(q16, k16, v16), "torch_sdpa fp32": lambda: sdpa(q32, k32, v32),
         "the two GEMMs fp32": gemms, "GEMM 4096^3 fp32": lambda: big @ big}
flops = {"the two GEMMs fp32": 4 * B * H * L * L * E, "GEMM 4096^3 fp32": 2 * 4096 ** 3,
         "torch_sdpa bf16": 4 * B * H * L * L * E, "torch_sdpa fp32": 4 * B * H * L * L * E}
for f in calls.values(): f(); f()
t = {k: [] for k in calls}
for r in range(7):
    for k, f in calls.items():
        a = time.perf_counter(); f(); t[k].append(time.perf_counter() - a)
print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
med = {k: statistics.median(v) for k, v in t.items()}
for k in calls:
    print(f"{k:22s} {med[k]*1e3:8.1f} ms  {flops[k]/med[k]/1e9:6.0f} GF/s  (min {min(t[k])*1e3:.1f})")
print(f"the two fp32 GEMMs / torch_sdpa bf16 = {med['the two GEMMs fp32']/med['torch_sdpa bf16']:.3f}")
print(f"the same at the 4096^3 GEMM's rate / torch_sdpa bf16 = {flops['the two GEMMs fp32']/ (flops['GEMM 4096^3 fp32']/med['GEMM 4096^3 fp32']) / med['torch_sdpa bf16']:.3f}")
print(f"torch_sdpa bf16 / fp32 = {med['torch_sdpa bf16']/med['torch_sdpa fp32']:.3f}")
