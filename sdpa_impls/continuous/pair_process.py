"""One process that times both sides of a comparison in turn: run as a script (never imported from the package
under test), with the interpreter both sides share.

    python pair_process.py SPEC.json      # exit 0: both files written; 3: these sides cannot share a process

A process's own speed is shared by all the code in it: two copies of the package timed in turn in one process
spread 0.5-1.2 % in their ratio from one process to the next, against 1.3-3 % for either copy alone
(docs/records/2026-11-28-xeon-bf16-pairs.md). So each side's tree is imported here, under its own name
`sdpa_impls`: the first side's modules are put aside, the second's imported, and before anything of one side runs,
its modules are put back in `sys.modules` and its install folder first on `sys.path` (outside every timed region),
so a lazy import inside a call finds its own side's code.

SPEC holds, per side (`base`, `head`): its install folder (`site`), the JSON file of its first process
(`template`: the suite's own output, which names every benchmark, its preset and case) and the file to write
(`out`); `names`, the benchmarks to time (test names; empty: every benchmark both templates hold); `first`, the
side imported first and of the first sample (the comparison draws it per round, so neither side is always first); `max_time` and `min_rounds`, as the suite sizes its rounds.
Per benchmark, each side prepares its own closure on its own inputs with its own `prepare_point` (no check: its
first process checked), calibrates its own calls per sample, and then the sides take one sample each in turn (the
first side alternating), the speed probe timed after every sample. Each side's file is its template with those
samples and probes in place of the template's, the checks, memory and kernels left out, as in a repeat process.
A benchmark one side cannot prepare is left out of both files, with a line on stderr.
"""
from __future__ import annotations

import os
import sys

# run as a script, its own folder would come first on sys.path, and its bisect.py would shadow the standard library's
sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != os.path.dirname(os.path.realpath(__file__))]

import copy  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

CANNOT_PAIR = 3  # exit status: the sides cannot share this process (an API the pairing needs is missing)
MAX_ROUNDS = 10_000
SIDES = ("base", "head")


class Side:
    """One side's tree in this process: its install folder and the modules loaded from it."""

    def __init__(self, role: str, spec: dict) -> None:
        self.role, self.site = role, os.path.realpath(spec["site"])
        self.out = spec["out"]
        with open(spec["template"], encoding="utf-8") as f:
            self.template = json.load(f)
        self.modules: dict[str, object] = {}
        self.api: dict[str, object] = {}

    def owns(self, module: object) -> bool:
        where = getattr(module, "__file__", None) or next(iter(getattr(module, "__path__", None) or ()), "")
        return bool(where) and os.path.realpath(where).startswith(self.site + os.sep)


def activate(side: Side, sides: list[Side]) -> None:
    """`side`'s modules in sys.modules and its folder first on sys.path; the other side's out of both."""
    for other in sides:
        if other is not side:
            for name in other.modules:
                sys.modules.pop(name, None)
    sys.modules.update(side.modules)
    sys.path[:] = [side.site] + [p for p in sys.path if p not in {s.site for s in sides}]


def settle(side: Side) -> None:
    """Remember every module loaded from `side`'s folder so far (lazy imports included)."""
    side.modules.update({n: m for n, m in list(sys.modules.items()) if n not in side.modules and side.owns(m)})


def load(side: Side, sides: list[Side]) -> None:
    """Import `side`'s package and the parts of it the pairing calls; SystemExit(CANNOT_PAIR) when one is missing."""
    activate(side, sides)
    try:
        import sdpa_impls
        from sdpa_impls.bench import grid, measure, probe, timing
    except ImportError as exc:
        print(f"{side.role}'s sdpa-bench cannot be paired: {exc}", file=sys.stderr)
        raise SystemExit(CANNOT_PAIR) from None
    settle(side)
    if not side.owns(sdpa_impls):
        print(f"{side.role}'s sdpa_impls came from {sdpa_impls.__file__}, not {side.site}", file=sys.stderr)
        raise SystemExit(CANNOT_PAIR)
    needed = {"preset": (grid, "preset"), "CaseContext": (measure, "CaseContext"),
              "prepare_point": (measure, "prepare_point"), "calibrate": (timing, "calibrate"),
              "call_context": (timing, "call_context"), "SpeedProbe": (probe, "SpeedProbe"), "WORK": (probe, "WORK"),
              "Unsupported": (sdpa_impls, "Unsupported")}
    missing = [f"{m.__name__}.{attr}" for m, attr in needed.values() if not hasattr(m, attr)]
    if missing:
        print(f"{side.role}'s sdpa-bench cannot be paired: it has no {', '.join(missing)}", file=sys.stderr)
        raise SystemExit(CANNOT_PAIR)
    side.api = {key: getattr(m, attr) for key, (m, attr) in needed.items()}


def _entries(side: Side) -> dict[str, dict]:
    out = {}
    for bench in side.template.get("benchmarks") or ():
        name = str(bench.get("name") or "")
        if name and (bench.get("extra_info") or {}).get("case"):
            out[name] = bench
    return out


def _case(side: Side, extra: dict) -> object:
    cases = {c.id: c for c in side.api["preset"](extra["preset"])}
    return cases[extra["case"]]


def prepare(side: Side, sides: list[Side], extra: dict) -> tuple[object, int, float]:
    """The side's closure of one benchmark, warmed, with its calls per sample and a sample's seconds."""
    activate(side, sides)
    api = side.api
    ctx = api["CaseContext"](_case(side, extra), "cpu")
    point = api["prepare_point"](extra["impl"], ctx, check=False)
    with api["call_context"](point.fn):
        point.fn()
        calls, sample_s = api["calibrate"](point.fn, "cpu")
        start = time.perf_counter()  # read again, here (either side's sdpa-bench): the slower side's one reading
        for _ in range(calls):  # sizes every round, and a call held up in it would leave a handful
            point.fn()
        sample_s = min(sample_s, time.perf_counter() - start)
    settle(side)
    return point.fn, calls, sample_s


def timed(bench: dict, samples: list[float], probes: list[float], work: str, calls: int) -> dict:
    """The template's benchmark with these per-call samples and probes, as a repeat process would write it: what
    only the first process measures, and what the template derived from its own time, left empty."""
    out = copy.deepcopy(bench)
    stats = out.setdefault("stats", {})
    stats.update(data=samples, median=statistics.median(samples), min=min(samples), max=max(samples),
                 mean=statistics.fmean(samples), rounds=len(samples))
    extra = out.setdefault("extra_info", {})
    extra.update({key: None for key in ("peak_memory_bytes", "max_error", "error_tolerance", "roofline_pct",
                                          "roofline_gemm", "ceilings", "tflops", "gbps", "iqr_s",
                                          "speedup_vs_torch_sdpa")})
    extra.update(kernels=[], checked=False, probe_s=probes, probe=work, median_s=statistics.median(samples),
                 calls_per_sample=calls, paired=True)
    return out


def run(spec: dict) -> None:
    import torch

    torch.set_num_threads(1)
    sides = [Side(role, spec["sides"][role]) for role in SIDES]
    first = SIDES.index(spec.get("first", "base"))
    for side in (sides if first == 0 else sides[::-1]):  # imported first: the side that samples first, drawn per round
        load(side, sides)
    clock = time.process_time
    entries = [_entries(side) for side in sides]
    names = [n for n in entries[1] if n in entries[0] and (not spec.get("names") or n in spec["names"])]
    activate(sides[1], sides)
    probe = sides[1].api["SpeedProbe"](clock)
    work = str(sides[1].api["WORK"])
    written: list[list[dict]] = [[], []]
    for name in names:
        prepared = []
        for side, entry in zip(sides, entries):
            try:
                prepared.append(prepare(side, sides, entry[name]["extra_info"]))
            except Exception as exc:  # the side's Unsupported or anything else: this benchmark is not paired
                print(f"{name}: {side.role} not prepared ({type(exc).__name__}: {exc})", file=sys.stderr)
                break
        if len(prepared) < 2:
            continue
        slowest = max(sample_s for _, _, sample_s in prepared)
        rounds = min(max(int(spec["min_rounds"]), int(float(spec["max_time"]) / max(slowest, 1e-9))), MAX_ROUNDS)
        samples: list[list[float]] = [[], []]
        probes: list[list[float]] = [[], []]
        probe()
        for r in range(rounds):
            for i in ((first, 1 - first) if r % 2 == 0 else (1 - first, first)):
                fn, calls, _ = prepared[i]
                activate(sides[i], sides)
                if not probes[i]:
                    probes[i].append(probe.durations[-1])
                with sides[i].api["call_context"](fn):
                    start = clock()
                    for _ in range(calls):
                        fn()
                    spent = clock() - start
                samples[i].append(spent / calls)
                probe()
                probes[i].append(probe.durations[-1])
        for i in (0, 1):
            written[i].append(timed(entries[i][name], samples[i], probes[i], work, prepared[i][1]))
        print(f"{name}: {rounds} samples a side", file=sys.stderr, flush=True)
    for side, benches in zip(sides, written):
        doc = {k: v for k, v in side.template.items() if k != "benchmarks"} | {"benchmarks": benches}
        with open(side.out, "w", encoding="utf-8") as f:
            json.dump(doc, f)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: pair_process.py SPEC.json", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        run(json.load(f))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
