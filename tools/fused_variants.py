"""The elementwise passes that lead `fused`'s and `chunked`'s GPU profiles, each timed against the alternatives that
would replace it, on the tiles the CUDA plan makes
(docs/records/2026-11-26-h200-llm-speed.md, "What the H200 profiles say").

    python tools/fused_variants.py --device cuda --out /tmp/variants.json

Five experiments on one score tile of the llm preset's L 4096 causal case (B 1, H 32, E 128, bf16) as
`budget.CudaTiling` cuts it:

- `band`: the causal bias added to the columns of the last query tile that cross the diagonal (`TileMasker`: a
  column slice of every row, the bias broadcast over the heads), against a bool `masked_fill_` of the same slice
  and a bias materialized per head (no broadcast operand).
- `p`: the backward's P = exp(S − lse) from bf16 scores and the fp32 log-sum-exp into an fp32 tile, as one
  mixed-dtype `torch.sub` (what `CudaTiling.CAST_FIRST = False` does) against a copy into fp32 first and the
  subtraction in place (`CpuTiling.CAST_FIRST`; `online_softmax.minus_into`). `chunked`'s forward does the same
  with the running max.
- `ds`: the backward's P ⊙ dP, fp32 P and a bf16 dP into fp32, the same two ways (`online_softmax.times_into`).
- `dp`: `chunked`'s dP = dO Vᵀ of one key tile as an fp32 GEMM of fp32 copies (the copies made beforehand, so
  today's way is timed at its cheapest), against the GEMM of the bf16 operands written in fp32 (`out_dtype`,
  which this torch has on CUDA only).
- `softmax`: `fused`'s training forward, whose P is fp32: the score tile copied into fp32 and softmaxed in place,
  against a softmax that reads the input-dtype tile and writes fp32 P (`SOFTMAX_FROM_HALF`; one kernel on CUDA
  for fp16, a cast then the softmax for bf16 and on the CPU).

Then `calls`: whole prepared calls of the same case (`chunked` fwd and fwd+bwd, `fused` fwd+bwd), each with the
device's `CAST_FIRST` off and on, as the suite times them: what decides `CudaTiling.CAST_FIRST`; `fused` fwd+bwd
with `SOFTMAX_BACKWARD` off and on (dS through torch's softmax-backward kernel); and in fp16, `fused` fwd+bwd with
`SOFTMAX_FROM_HALF` off and on (on CUDA only: fp16 on the CPU computes in fp32); last, `fused`'s forward with a
512-key window mask at 4 × L, prepared with `WIDEN_MASKED` off and on (`masked_forward`).

Every variant starts from the same inputs and is checked against the first one's result, the way the CUDA plan
computes it today (bitwise where the arithmetic is the same, within bf16's tolerance for a GEMM that may sum in
another order) before it is timed. Variants are timed in interleaved rounds, on CUDA as CUDA-graph replays
(device time, `timing.time_closure`; a call that cannot be captured eagerly, and the experiment says so), on the
CPU as calls; a time is the median over rounds, and each is given as a ratio to the first variant's. Not a test:
what it prints decides which change to make in `fused` and `chunked`, each then timed there before it stays.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sdpa_impls.bench.grid import Case  # noqa: E402
from sdpa_impls.bench.inputs import make_inputs  # noqa: E402
from sdpa_impls.bench.measure import mode_closure  # noqa: E402
from sdpa_impls.bench.timing import same_context, time_closure  # noqa: E402
from sdpa_impls.impls._tiled.budget import CpuTiling, CudaTiling, free_device_bytes  # noqa: E402
from sdpa_impls.registry import get  # noqa: E402
from sdpa_impls.impls._tiled.backward import times_into  # noqa: E402
from sdpa_impls.impls._tiled.online_softmax import minus_into  # noqa: E402
from sdpa_impls.impls._tiled.tiles import NEG_INF, TileMasker  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class Variant:
    """One way to compute an experiment's result: `run` writes it, `result` reads it back after a run; or why
    it cannot run here (`skipped`)."""

    name: str
    run: Callable[[], object] | None
    result: Callable[[], torch.Tensor] | None = None
    skipped: str = ""


@dataclass
class Experiment:
    name: str
    shape: str
    variants: list[Variant]
    exact: bool  # the same arithmetic: results must match bitwise
    # otherwise: the largest |difference| allowed, relative to the largest |result| (1e-5: the same products summed
    # in another order in fp32; a whole call whose fp32 steps round differently may move its output by an ulp)
    tolerance: float = 1e-5
    rows: list[dict] = field(default_factory=list)


def policy(device: torch.device) -> CudaTiling:
    """The CUDA plan's tiling for this device's free memory (a nominal large card on the CPU)."""
    return CudaTiling(free_device_bytes(device))


def band(device: torch.device, dtype: torch.dtype, length: int, heads: int, gen: torch.Generator) -> Experiment:
    rows, _ = policy(device).fused_tile(1, heads, 1, length, length, torch.empty(0, dtype=dtype).element_size())
    i0 = length - rows  # the last query tile: every key up to the diagonal, the widest band
    start = torch.randn((heads, rows, length), generator=gen).to(device=device, dtype=dtype)
    s = start.clone()
    masker = TileMasker(None, True, rows, device, {})
    upper = torch.ones((rows, rows), dtype=torch.bool, device=device).triu_(1)[:, 1:]
    per_head = masker._upper_bias(dtype)[:, 1:].expand(heads, rows, rows - 1).contiguous()

    def fresh(fn: Callable[[], object]) -> Callable[[], torch.Tensor]:
        def result() -> torch.Tensor:
            s.copy_(start)
            fn()
            return s.clone()
        return result

    today = lambda: masker.apply_(s, None, i0, length, 0, length)  # noqa: E731
    fill = lambda: s[..., i0 + 1:].masked_fill_(upper, NEG_INF)  # noqa: E731
    head_bias = lambda: s[..., i0 + 1:].add_(per_head)  # noqa: E731
    variants = [Variant("today: strided add of a broadcast bias", today, fresh(today)),
                Variant("masked_fill_ of a bool triangle", fill, fresh(fill)),
                Variant("add of a per-head bias (no broadcast)", head_bias, fresh(head_bias))]
    return Experiment("band", f"scores ({heads}, {rows}, {length}), band of {rows - 1} columns", variants, True)


def p_from_lse(device: torch.device, dtype: torch.dtype, length: int, heads: int, gen: torch.Generator
               ) -> Experiment:
    rows, _ = policy(device).fused_tile(1, heads, 1, length, length, 4)  # the backward's fp32 P tile
    s = torch.randn((heads, rows, length), generator=gen).to(device=device, dtype=dtype)
    lse = (torch.randn((heads, rows, 1), generator=gen) + 4).to(device)
    p = torch.empty((heads, rows, length), dtype=torch.float32, device=device)
    one = lambda: minus_into(p, s, lse, False).exp_()  # noqa: E731
    two = lambda: minus_into(p, s, lse, True).exp_()  # noqa: E731
    variants = [Variant("one mixed-dtype sub (CudaTiling), then exp_", one, lambda: (one(), p.clone())[1]),
                Variant("copy into fp32, sub_ (CpuTiling), then exp_", two, lambda: (two(), p.clone())[1])]
    return Experiment("p", f"S ({heads}, {rows}, {length}) {dtype}, lse fp32, P fp32", variants, True)


def ds_from_dp(device: torch.device, dtype: torch.dtype, length: int, heads: int, gen: torch.Generator
               ) -> Experiment:
    rows, _ = policy(device).fused_tile(1, heads, 1, length, length, 4)
    p = torch.rand((heads, rows, length), generator=gen).to(device)
    dp_ = torch.randn((heads, rows, length), generator=gen).to(device=device, dtype=dtype)
    ds = torch.empty_like(p)
    one = lambda: times_into(ds, p, dp_, False)  # noqa: E731
    two = lambda: times_into(ds, p, dp_, True)  # noqa: E731
    variants = [Variant("one mixed-dtype mul (CudaTiling)", one, lambda: (one(), ds.clone())[1]),
                Variant("copy into fp32, mul_ (CpuTiling)", two, lambda: (two(), ds.clone())[1])]
    return Experiment("ds", f"P ({heads}, {rows}, {length}) fp32 ⊙ dP {dtype} into fp32", variants, True)


def dp(device: torch.device, dtype: torch.dtype, length: int, heads: int, dim: int, gen: torch.Generator
       ) -> Experiment:
    q_tile, k_tile = policy(device).chunked_tile(heads)
    q_tile, k_tile = min(q_tile, length), min(k_tile, length)
    dout = torch.randn((heads, q_tile, dim), generator=gen).to(device=device, dtype=dtype)
    v = torch.randn((heads, k_tile, dim), generator=gen).to(device=device, dtype=dtype)
    dout32, v32 = dout.float(), v.float()
    out = torch.empty((heads, q_tile, k_tile), dtype=torch.float32, device=device)
    today = lambda: torch.bmm(dout32, v32.transpose(1, 2), out=out)  # noqa: E731
    variants = [Variant("today: fp32 GEMM of fp32 copies", today, lambda: (today(), out.clone())[1])]
    mixed = lambda: torch.bmm(dout, v.transpose(1, 2), out_dtype=torch.float32, out=out)  # noqa: E731
    try:
        mixed()
        variants.append(Variant(f"{dtype} GEMM into fp32 (out_dtype)", mixed, lambda: (mixed(), out.clone())[1]))
    except (RuntimeError, NotImplementedError, TypeError) as exc:
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        variants.append(Variant(f"{dtype} GEMM into fp32 (out_dtype)", None,
                                skipped=f"torch {torch.__version__} on {device.type}: {why.split('. ')[0]}"))
    return Experiment("dp", f"dO ({heads}, {q_tile}, {dim}) · Vᵀ ({heads}, {dim}, {k_tile}) into fp32", variants,
                      False)


@contextlib.contextmanager
def choice_set(device: torch.device, name: str, flag: bool) -> Iterator[None]:
    """This device's policy choice `name` (`CAST_FIRST`, ...) set to `flag` inside the block, restored after."""
    policy_cls = CudaTiling if device.type == "cuda" else CpuTiling
    old = getattr(policy_cls, name)
    setattr(policy_cls, name, flag)
    try:
        yield
    finally:
        setattr(policy_cls, name, old)


def with_choice(fn: Callable[[], object], name: str, flag: bool, device: torch.device) -> Callable[[], object]:
    """`fn` run with this device's policy choice `name` set to `flag` (a captured graph keeps the path it
    captured)."""
    def run() -> object:
        with choice_set(device, name, flag):
            return fn()
    return same_context(run, fn)


def softmax_tile(device: torch.device, dtype: torch.dtype, length: int, heads: int, gen: torch.Generator
                 ) -> Experiment:
    rows, _ = policy(device).fused_tile(1, heads, 1, length, length, 4)  # the training forward's fp32 tile
    start = (torch.randn((heads, rows, length), generator=gen) * 4).to(device=device, dtype=dtype)
    s = start.clone()
    pf = torch.empty((heads, rows, length), dtype=torch.float32, device=device)
    copied = lambda: torch.softmax(pf.copy_(s), dim=-1, out=pf)  # noqa: E731
    direct = lambda: torch.softmax(s, dim=-1, dtype=torch.float32, out=pf)  # noqa: E731
    variants = [Variant("copy into fp32, softmax in place (bf16's plan)", copied, lambda: (copied(), pf.clone())[1]),
                Variant(f"softmax of the {dtype} tile into fp32 P (fp16's plan on CUDA)", direct,
                        lambda: (direct(), pf.clone())[1])]
    return Experiment("softmax", f"S ({heads}, {rows}, {length}) {dtype} -> P fp32", variants, False)


def ulps(dtype: str) -> float:
    """Two units in the last place of `dtype` (bf16 or fp16), relative: how far a whole call's output and gradients
    may move when an fp32 step inside it rounds differently."""
    return 2 * torch.finfo(DTYPES[dtype]).eps


def answer_of(call: Callable[[], object]) -> Callable[[], torch.Tensor]:
    """A whole call's output (and gradients) as one flat fp32 tensor, to compare variants by."""
    def answer() -> torch.Tensor:
        out = call()
        parts = out if isinstance(out, tuple) else (out,)
        return torch.cat([t.detach().flatten().float() for t in parts])
    return answer


def whole_calls(device: torch.device, dtype: str, length: int, heads: int, dim: int) -> list[Experiment]:
    """Whole calls, causal, B 1, both ways of `CAST_FIRST`: `chunked` fwd and fwd+bwd, `fused` fwd+bwd (its
    forward has no mixed-dtype op); `fused` fwd+bwd both ways of `SOFTMAX_BACKWARD`, and in fp16 of
    `SOFTMAX_FROM_HALF`; then `masked_forward`. On CUDA this is what decides those choices of `CudaTiling`."""
    experiments = []
    for name, mode in (("chunked", "fwd"), ("chunked", "fwd+bwd"), ("fused", "fwd+bwd")):
        case = Case(lq=length, lk=length, e=dim, dtype=dtype, causal=True, mode=mode, heads_q=heads, heads_kv=heads)
        fn = mode_closure(get(name), make_inputs(case, device), mode)
        calls = {flag: with_choice(fn, "CAST_FIRST", flag, device) for flag in (False, True)}
        experiments.append(Experiment(f"{name} {mode}", case.id, [
            Variant("one mixed-dtype op (CAST_FIRST = False)", calls[False], answer_of(calls[False])),
            Variant("copy into fp32 first (CAST_FIRST = True)", calls[True], answer_of(calls[True]))], True))
    # `case` and `fn` are the loop's last: fused fwd+bwd, the call the two choices below change
    off, on = (with_choice(fn, "SOFTMAX_BACKWARD", flag, device) for flag in (False, True))
    experiments.append(Experiment("fused fwd+bwd dS", case.id, [
        Variant("product, row sum, addcmul (SOFTMAX_BACKWARD = False)", off, answer_of(off)),
        Variant("one softmax backward (SOFTMAX_BACKWARD = True)", on, answer_of(on))], False, ulps(dtype)))
    if dtype == "fp16":
        off = with_choice(fn, "SOFTMAX_FROM_HALF", False, device)
        variants = [Variant("copy into fp32, softmax (SOFTMAX_FROM_HALF = False)", off, answer_of(off))]
        if device.type == "cuda":
            on = with_choice(fn, "SOFTMAX_FROM_HALF", True, device)
            variants.append(Variant("softmax of the fp16 tile (SOFTMAX_FROM_HALF = True)", on, answer_of(on)))
        else:
            variants.append(Variant("softmax of the fp16 tile (SOFTMAX_FROM_HALF = True)", None,
                                    skipped="fp16 on the CPU computes in fp32: no fp16 tile to read"))
        experiments.append(Experiment("fused fwd+bwd softmax", case.id, variants, False, ulps(dtype)))
    experiments.append(masked_forward(device, dtype, length, heads, dim))
    return experiments


def masked_forward(device: torch.device, dtype: str, length: int, heads: int, dim: int) -> Experiment:
    """`fused`'s inference forward with a 512-key window mask at 4 × `length` (on an H200 with 32 heads of bf16,
    512-row tiles by the budget), prepared with the device's `WIDEN_MASKED` off and on: the policy's rows against
    rows doubled while the keys the tiles compute fit (`fused.widened`). What decides `CudaTiling.WIDEN_MASKED`.
    Each variant has inputs of its own, so neither reuses the other's remembered plan."""
    case = Case(lq=4 * length, lk=4 * length, e=dim, dtype=dtype, mask="window-512", heads_q=heads, heads_kv=heads)
    calls = {}
    for flag in (False, True):  # the plan is made as the closure is prepared, and kept
        with choice_set(device, "WIDEN_MASKED", flag):
            calls[flag] = mode_closure(get("fused"), make_inputs(case, device), "fwd")
    return Experiment("fused fwd window-512", case.id, [
        Variant("the policy's rows (WIDEN_MASKED = False)", calls[False], answer_of(calls[False])),
        Variant("rows widened (WIDEN_MASKED = True)", calls[True], answer_of(calls[True]))], False, ulps(dtype))


def check(exp: Experiment) -> dict[str, str]:
    """Why a variant's result differs from the first one's (empty: every runnable variant agrees)."""
    want = exp.variants[0].result()
    wrong = {}
    for v in exp.variants[1:]:
        if v.run is None:
            continue
        got = v.result()
        if exp.exact:
            same = torch.equal(got, want)
        else:  # the same products (exact in fp32), summed in another order
            same = torch.allclose(got, want, rtol=exp.tolerance, atol=exp.tolerance * want.abs().max().item())
        if not same:
            wrong[v.name] = f"differs from the first variant's (max |diff| {(got - want).abs().max().item():.3g})"
    return wrong


def measure(exp: Experiment, device: torch.device, rounds: int, budget_s: float) -> None:
    """Median over `rounds` interleaved rounds of each runnable variant's median time, and its ratio to the first variant's."""
    runnable = [v for v in exp.variants if v.run is not None]
    medians: dict[str, list[float]] = {v.name: [] for v in runnable}
    graph = device.type == "cuda"
    for _ in range(rounds):
        for v in runnable:
            try:
                t = time_closure(v.run, device, budget_s=budget_s, min_reps=5, max_reps=200, warmup=1,
                                 cuda_graph=graph)
            except RuntimeError as exc:  # a call that cannot be captured: its eager time, said so
                if not graph:
                    raise
                torch.cuda.synchronize(device)
                graph, exp.shape = False, f"{exp.shape} (eager: not captured: {str(exc).splitlines()[0][:80]})"
                t = time_closure(v.run, device, budget_s=budget_s, min_reps=5, max_reps=200, warmup=1)
            medians[v.name].append(t.median)
    base = statistics.median(medians[exp.variants[0].name])
    for v in exp.variants:
        if v.run is None:
            exp.rows.append({"variant": v.name, "skipped": v.skipped})
            continue
        med = statistics.median(medians[v.name])
        exp.rows.append({"variant": v.name, "median_s": med, "ratio": med / base, "rounds": medians[v.name]})


def table(experiments: list[Experiment], device: str) -> str:
    lines = [f"device: {device}", "", "| experiment | variant | median | / first |", "|---|---|---:|---:|"]
    for exp in experiments:
        for row in exp.rows:
            if "skipped" in row:
                lines.append(f"| {exp.name} | {row['variant']} | skipped: {row['skipped']} | |")
            else:
                lines.append(f"| {exp.name} | {row['variant']} | {row['median_s'] * 1e6:.1f} µs | "
                             f"{row['ratio']:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    p.add_argument("--length", type=int, default=4096, help="L of the causal case (default 4096)")
    p.add_argument("--heads", type=int, default=32, help="heads, B = 1 (default 32)")
    p.add_argument("--dim", type=int, default=128, help="head dim E of the dP GEMM (default 128)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    p.add_argument("--budget", type=float, default=0.1, help="seconds of samples per variant and round")
    p.add_argument("--only", action="append", choices=("band", "p", "ds", "dp", "softmax", "calls"),
                   help="run only these experiments")
    p.add_argument("--out", type=Path, help="write the rows, with every round's median, as JSON here")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: this torch sees no CUDA device")
    if args.length < 2 or args.heads < 1 or args.dim < 1 or args.rounds < 1 or args.budget <= 0:
        p.error("--length must be at least 2; --heads, --dim and --rounds at least 1; --budget above 0")
    dtype, gen = DTYPES[args.dtype], torch.Generator().manual_seed(0)
    makers = {"band": lambda: band(device, dtype, args.length, args.heads, gen),
              "p": lambda: p_from_lse(device, dtype, args.length, args.heads, gen),
              "ds": lambda: ds_from_dp(device, dtype, args.length, args.heads, gen),
              "dp": lambda: dp(device, dtype, args.length, args.heads, args.dim, gen),
              "softmax": lambda: softmax_tile(device, dtype, args.length, args.heads, gen)}
    experiments, wrong = [], {}
    for name in args.only or [*makers, "calls"]:
        made = (whole_calls(device, args.dtype, args.length, args.heads, args.dim) if name == "calls"
                else [makers[name]()])
        for exp in made:
            bad = check(exp)
            wrong.update({f"{exp.name}: {k}": why for k, why in bad.items()})
            exp.variants = [v for v in exp.variants if v.name not in bad]  # a wrong variant is reported, not timed
            measure(exp, device, args.rounds, args.budget)
            print(f"{exp.name}: {exp.shape}", file=sys.stderr)
            experiments.append(exp)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(table(experiments, f"{name}, torch {torch.__version__}, {args.dtype}, L {args.length}, H {args.heads}"))
    for k, why in wrong.items():
        print(f"wrong: {k}: {why}")
    if args.out:
        args.out.write_text(json.dumps({"device": name, "torch": torch.__version__, "args": {
            k: str(v) for k, v in vars(args).items()}, "wrong": wrong, "experiments": [
            {"name": e.name, "shape": e.shape, "rows": e.rows} for e in experiments]}, indent=1))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
