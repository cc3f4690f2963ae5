import torch, time, statistics as st, math
def t(f, n=20):
    for _ in range(3): f()
    r=[]
    for _ in range(n):
        a=time.perf_counter(); f(); r.append(time.perf_counter()-a)
    return st.median(r)*1e3
L,E=4096,128
for heads,rows in [(4,256),(2,256),(8,256),(2,512),(4,512),(8,512),(8,1024)]:
    dt=torch.bfloat16
    q=torch.randn(heads,rows,E,dtype=dt); kt=torch.randn(heads,L,E,dtype=dt).transpose(1,2).contiguous(); v=torch.randn(heads,L,E,dtype=dt)
    S=torch.empty(heads,rows,L,dtype=dt); O=torch.empty(heads,rows,E,dtype=dt); F=torch.empty(heads,rows,L)
    n=8*4096/(heads*rows)
    a=t(lambda: torch.baddbmm(S,q,kt,beta=0,alpha=0.1,out=S)); b=t(lambda: torch.softmax(S,-1,out=S)); c=t(lambda: torch.bmm(S,v,out=O))
    d=t(lambda: S.exp_()); e=t(lambda: S.sum(-1,dtype=torch.float32)); f=t(lambda: torch.exp(S,out=F))
    g=t(lambda: torch.softmax(S,-1,dtype=torch.float32,out=F))
    print(heads,rows,'per call: QK %.1f softmax %.1f PV %.1f | exp_ %.1f sum %.1f exp->f32 %.1f softmax->f32 %.1f'%tuple(x*n for x in (a,b,c,d,e,f,g)), flush=True)
