import torch, time
torch.manual_seed(0)
for dt in (torch.float32, torch.bfloat16, torch.float16):
    for (m,n,k) in ((4096,4096,4096),(256,256,128),(256,128,256)):
        a=torch.randn(m,k,dtype=dt); b=torch.randn(k,n,dtype=dt)
        for _ in range(3): a@b
        reps = max(3, int(2e10/(2*m*n*k)))
        t=time.perf_counter()
        for _ in range(reps): a@b
        dtt=(time.perf_counter()-t)/reps
        print(dt, (m,n,k), f"{2*m*n*k/dtt/1e9:.0f} GF/s")
