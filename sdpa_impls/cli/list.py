"""`list`: every implementation, whether it runs on this machine per dtype and feature, and why not."""
from __future__ import annotations

import argparse

import torch

from ..bench.check import no_device
from ..bench.grid import Case, default_device
from ..bench.inputs import make_inputs
from ..bench.machine import machine_info
from ..dtypes import DTYPES
from ..errors import UsageError
from ..impls._tiled.budget import bf16_compute
from ..impls._tiled.compute import check_settings, unshifted_base
from ..registry import get, names, shadowed
from ..support import as_reasons
from ..report.markdown import machine_lines

PROBE_L, PROBE_E = 128, 64
# feature probes, run with the first dtype an implementation supports: label -> changes to the base case
FEATURES = {"E=256": {"e": 256}, "bwd": {"mode": "fwd+bwd"}, "causal": {"causal": True},
            "mask": {"mask": "bool"}, "GQA": {"heads_q": 8, "heads_kv": 2}}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", choices=("cpu", "cuda"), help="probe this device (default: cuda when available)")


def _reasons(impl_name: str, case: Case, device: str) -> list[str]:
    """The implementation's own answer on small seeded inputs of `case` (an error in asking is a reason too)."""
    try:
        got = get(impl_name).unsupported_reasons(**make_inputs(case, device).args())
        return as_reasons(impl_name, "unsupported_reasons", got)  # a str was listed one character a line
    except Exception as exc:
        return [f"{type(exc).__name__} while asking: {exc}"]


def probe(impl_name: str, device: str) -> tuple[dict[str, bool | None], list[str]]:
    """({dtype or feature: runs? (None = not probed)}, the reasons against: each once, labelled unless common to
    all)."""
    verdict: dict[str, bool | None] = {}
    found: dict[str, list[str]] = {}
    for dtype in DTYPES:
        found[dtype] = _reasons(impl_name, Case(lq=PROBE_L, lk=PROBE_L, e=PROBE_E, dtype=dtype), device)
        verdict[dtype] = not found[dtype]
    first = next((d for d in DTYPES if verdict[d]), None)
    for label, change in FEATURES.items():
        if first is None:
            verdict[label] = None
            continue
        case = Case(**({"lq": PROBE_L, "lk": PROBE_L, "e": PROBE_E, "dtype": first} | change))
        found[label] = _reasons(impl_name, case, device)
        verdict[label] = not found[label]
    return verdict, _grouped({k: v for k, v in found.items() if v}, nothing_runs=first is None)


def _grouped(failing: dict[str, list[str]], nothing_runs: bool) -> list[str]:
    """Each reason once, in first-seen order: bare where nothing runs and every dtype meets it, else after the
    dtypes or features it stops."""
    where: dict[str, list[str]] = {}
    for label, reasons in failing.items():
        for reason in reasons:
            where.setdefault(reason, []).append(label)
    return [reason if nothing_runs and len(labels) == len(failing) else f"{', '.join(labels)}: {reason}"
            for reason, labels in where.items()]


def run(args: argparse.Namespace) -> int:
    device = args.device or default_device()
    why = no_device(device)
    if why:
        raise UsageError(f"--device {device}: {why}")
    try:  # one line before the table, as `run` says it, not after 50 lines
        check_settings()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    info = machine_info(device)
    print("\n".join(line.strip("| ").replace(" | ", ": ", 1) for line in machine_lines({"machine": info})))
    print(f"probed on {device} with L={PROBE_L}, E={PROBE_E}, B=1, H=8; {', '.join(FEATURES)} with the first "
          "dtype that runs\n")
    columns = list(DTYPES) + list(FEATURES)
    width = max(len(n) for n in names()) + 2
    print("implementation".ljust(width) + "  ".join(c.ljust(max(len(c), 3)) for c in columns) + "  why not")
    runnable = 0
    for name in names():
        verdict, reasons = probe(name, device)
        runnable += any(verdict[d] for d in DTYPES)
        cells = ["-" if verdict[c] is None else ("yes" if verdict[c] else "no") for c in columns]
        line = name.ljust(width) + "  ".join(v.ljust(max(len(c), 3)) for v, c in zip(cells, columns))
        pad = " " * (len(line) + 2)
        print((line + "  " + ("\n" + pad).join(reasons)).rstrip())
    # the probe's shape only: an implementation limited to other head dims or lengths runs those (its reason says)
    print(f"\n{runnable} of {len(names())} implementations run the probe (L={PROBE_L}, E={PROBE_E}) on {device} here.")
    for entry in shadowed():  # a plug-in that would otherwise be measured as the built-in, unsaid
        print(f"note: the plug-in entry point {entry} is not loaded: {entry.split(' = ')[0]} is a built-in "
              "implementation (--impl names the built-in); give the plug-in another name")
    for name in names():
        print(f"  {name}: {getattr(get(name), 'description', '') or '(no description)'}")
    if device == "cpu":  # chosen per CPU, recorded with every bf16 point of these as its `op`
        bf16 = bf16_compute(torch.device("cpu"))
        print(f"\nbf16 calls of chunked and fused: {bf16.reason}" + ("" if bf16.widen else
              "; scores rounded to bf16, as naive's (SDPA_BENCH_CPU_BF16=fp32: torch's accuracy, slower)"))
        print(f"fused's fp32 inference without a row max: {unshifted_base(torch.device('cpu')).reason}")
    return 0
