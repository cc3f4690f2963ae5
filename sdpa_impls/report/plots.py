"""PNG plots of a sweep (matplotlib, Agg): time and peak memory against sequence length, throughput on the roofline."""
from __future__ import annotations

import io
import math
import textwrap
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator  # noqa: E402

from ..bench.ceilings import roof_gemm  # noqa: E402
from ..bench.grid import Case  # noqa: E402
from ..bench.result import Result  # noqa: E402
from ..fmt import fmt_bytes, fmt_seconds  # noqa: E402
from ..registry import names  # noqa: E402
from .files import write_whole  # noqa: E402
from .results import Sweep  # noqa: E402

MODE_MARKERS = {"fwd": "o", "fwd+bwd": "^", "bwd": "s"}
MODE_FILE = {"fwd": "fwd", "fwd+bwd": "fwd_bwd", "bwd": "bwd"}
MAX_COLS = 4


IMPL_MARKERS = "osD^vPX*hp"


def _colors(impls: list[str]) -> dict[str, tuple]:
    """One fixed colour per implementation (by its place in the catalogue), the same in every plot."""
    order = names() + [i for i in impls if i not in names()]
    cmap = plt.get_cmap("tab10")
    return {i: cmap(order.index(i) % 10) for i in impls}


def _style(impl: str, colors: dict[str, tuple]) -> dict:
    """Colour, marker and a size that shrinks along the list, so equal values still show every implementation."""
    k = list(colors).index(impl)
    return {"color": colors[impl], "marker": IMPL_MARKERS[k % len(IMPL_MARKERS)], "ms": max(9 - 0.7 * k, 3.5)}


def _panel_key(c: Case) -> tuple:
    """Everything but the sequence length and the batch (and the mode, which gets its own file)."""
    return (c.e, c.ev, c.dtype, c.causal, c.mask, c.heads_q, c.heads_kv, None if c.lq == c.lk else c.lq)


def _panels(results: list[Result]) -> list[list[Result]]:
    """Case families, one line per implementation each. The batch joins a family when the preset ties it
    to L (the gpu preset keeps B·L = 16k tokens); a batch that varies on its own splits the family."""
    loose: dict[tuple, list[Result]] = defaultdict(list)
    for r in results:
        loose[_panel_key(r.case)].append(r)
    out = []
    for rs in loose.values():
        batches: dict[int, set[int]] = defaultdict(set)
        for r in rs:
            batches[r.case.lk].add(r.case.batch)
        if all(len(b) == 1 for b in batches.values()):
            out.append(rs)
        else:
            by_batch: dict[int, list[Result]] = defaultdict(list)
            for r in rs:
                by_batch[r.case.batch].append(r)
            out += by_batch.values()
    return out


def _per_sequence(rs: list[Result]) -> bool:
    return len({r.case.batch for r in rs}) > 1


def _panel_title(rs: list[Result]) -> str:
    c = rs[0].case
    parts = [f"E={c.e}" + (f", Ev={c.ev}" if c.ev != c.e else ""), c.dtype, "causal" if c.causal else "non-causal"]
    if c.mask != "none":
        parts.append(f"{c.mask} mask")
    heads = f"H={c.heads_q}" + (f"/{c.heads_kv} kv" if c.heads_kv != c.heads_q else "")
    tokens = {r.case.batch * r.case.lk for r in rs}
    if not _per_sequence(rs):
        parts.append(f"B={c.batch}, {heads}")
    else:
        parts.append((f"B·L={tokens.pop()}" if len(tokens) == 1 else "B varies") + f", {heads}")
    if c.lq != c.lk:
        parts.append(f"Lq={c.lq}")
    return ", ".join(parts)


def _grid(n: int) -> tuple[plt.Figure, list[plt.Axes]]:
    cols = min(MAX_COLS, n)
    rows = math.ceil(n / cols)
    width = max(4.4 * cols, 10.0)  # room for the title and the legend even with one panel
    fig, axes = plt.subplots(rows, cols, figsize=(width, 3.5 * rows + 1.4), layout="constrained", squeeze=False)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _log_axis(ax: plt.Axes, which: str, values: list[float], fmt: Callable[[float], str],
              binary: bool = False) -> None:
    """Log scale with labelled round ticks (1-2-5 × 10^k, or 2^k for bytes) even when the data span less
    than a decade, and limits that end on a tick just outside the data."""
    lo, hi = min(values) / 1.15, max(values) * 1.15
    if binary:
        cands = [2.0**k for k in range(math.floor(math.log2(lo)) - 1, math.ceil(math.log2(hi)) + 2)]
    else:
        cands = [m * 10.0**k for k in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 2)
                 for m in (1, 2, 5)]
    below, above = max(c for c in cands if c <= lo), min(c for c in cands if c >= hi)
    ticks = [c for c in cands if below <= c <= above]
    if len(ticks) > 8:  # wide range: fewer, evenly spaced ticks
        if binary:
            step = math.ceil(len(ticks) / 8)
            ticks = [t for t in ticks if round(math.log2(t)) % step == 0]
        else:
            ticks = [t for t in ticks if abs(math.log10(t) - round(math.log10(t))) < 1e-9]
    axis = ax.yaxis if which == "y" else ax.xaxis
    (ax.set_yscale if which == "y" else ax.set_xscale)("log")
    (ax.set_ylim if which == "y" else ax.set_xlim)(below, above)
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(FuncFormatter(lambda v, _: fmt(v)))


def _x_axis(ax: plt.Axes, xs: list[int], label: str) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticks(xs, [str(x) for x in xs])
    if len(xs) == 1:  # one point: give it room
        ax.set_xlim(xs[0] / 1.6, xs[0] * 1.6)
    ax.set_xlabel(label)
    ax.grid(True, which="major", alpha=0.3)


def _legend(fig: plt.Figure, colors: dict[str, tuple], extra: list[Line2D] = (), by_marker: bool = True) -> None:
    handles = [Line2D([], [], label=i, **(_style(i, colors) if by_marker else {"color": c, "marker": "o", "ls": ""}))
               for i, c in colors.items()] + list(extra)
    per_row = max(3, int(fig.get_figwidth() / 2.2))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), per_row), frameon=False)


def _title(sweep: Sweep, what: str, not_run: list[str]) -> str:
    m = sweep.meta.get("machine") or {}
    title = f"{what}\npreset {sweep.meta.get('preset')} on {m.get('device_name', '?')}"
    if m.get("device") == "cpu":
        title += f", {m.get('threads')} threads"
    if not_run:  # wrapped: with every CUDA-only implementation on a CPU, one line ran off the figure
        title += "\n" + textwrap.fill("not run here (see report): " + ", ".join(not_run), 110)
    missing: dict[str, int] = {}  # points with no time to plot: failed or wrong
    for r in sweep.results:
        if r.status in ("failed", "wrong") and r.impl not in not_run:
            missing[r.impl] = missing.get(r.impl, 0) + 1
    if missing:
        title += "\n" + textwrap.fill("failed or wrong, not plotted (see report): "
                                      + ", ".join(f"{i} ({n})" for i, n in missing.items()), 110)
    return title


def _vs_length(sweep: Sweep, ok: list[Result], mode: str, colors: dict[str, tuple], not_run: list[str],
               memory: bool, path: Path) -> bool:
    """One panel per case family of `mode`, x = sequence length, one line per implementation."""
    panels = _panels([r for r in ok if r.case.mode == mode and (r.peak_memory_bytes or not memory)])
    if not panels:
        return False
    fig, axes = _grid(len(panels))
    guides = []
    for ax, rs in zip(axes, panels):
        first = rs[0].case
        xs = sorted({r.case.lk for r in rs})
        divide = memory and _per_sequence(rs)  # B shrinks as L grows: per-sequence memory keeps the slopes true

        def y(r: Result) -> float:
            return (r.peak_memory_bytes / (r.case.batch if divide else 1)) if memory else r.median_s

        for impl in colors:
            pts = sorted((r.case.lk, y(r)) for r in rs if r.impl == impl)
            if pts:
                ax.plot(*zip(*pts), label=impl, alpha=0.85, **_style(impl, colors))
        _x_axis(ax, xs, "L = Lq = Lk" if first.lq == first.lk else "Lk (keys)")
        _log_axis(ax, "y", [y(r) for r in rs], fmt_bytes if memory else fmt_seconds, binary=memory)
        ax.set_title(_panel_title(rs), fontsize=9)
        if memory and len(xs) > 1:  # O(L) and O(L²) guides through the smallest measured value at the first L
            y0 = min(y(r) for r in rs if r.case.lk == xs[0])
            for power, style in ((1, ":"), (2, "--")):
                ax.plot(xs, [y0 * (x / xs[0]) ** power for x in xs], style, color="grey", lw=1)
            guides = [Line2D([], [], ls=":", color="grey", label="∝ L (guide)"),
                      Line2D([], [], ls="--", color="grey", label="∝ L² (guide)")]
    per_seq = memory and any(_per_sequence(rs) for rs in panels)
    fig.supylabel("median time per call" if not memory else
                  "peak memory of one call" + (" per sequence (÷ B where B·L is fixed)" if per_seq else ""))
    what = "Peak memory vs sequence length (log-log)" if memory else "Median time vs sequence length (log-log)"
    fig.suptitle(_title(sweep, f"{what}, mode {mode}", not_run), fontsize=11)
    _legend(fig, colors, guides)
    save_figure(fig, path)
    return True


def _roofline(sweep: Sweep, ok: list[Result], colors: dict[str, tuple], not_run: list[str], path: Path) -> bool:
    """Achieved TFLOP/s against arithmetic intensity, under this machine's measured roof, one panel per dtype."""
    ceil = sweep.meta.get("ceilings") or {}
    shards = sweep.meta.get("merged_from") or []  # pooled over shards of one machine, else one shard's each
    whose = ("" if all(s.get("machine") == shards[0].get("machine") for s in shards)
             else " (one shard's; report.md lists each shard's)")
    by_dtype: dict[str, list[Result]] = defaultdict(list)
    for r in ok:
        if r.tflops:
            by_dtype[r.case.dtype].append(r)
    if not by_dtype:
        return False
    fig, axes = _grid(len(by_dtype))
    for ax, (dtype, rs) in zip(axes, sorted(by_dtype.items())):
        ai = [r.case.flops() / r.case.min_bytes() for r in rs]
        for r, x in zip(rs, ai):
            ax.scatter(x, r.tflops, color=colors[r.impl], marker=MODE_MARKERS.get(r.case.mode, "o"), s=22,
                       alpha=0.85)
        # the roof each point's roofline_pct is a percentage of (from the run's own ceilings)
        gemm = roof_gemm(dtype, rs[0].device.split(":")[0], ceil) or f"gemm_flops_{dtype}"
        peak, bw = ceil.get(gemm), ceil.get("copy_bytes_per_s")
        if peak and bw:
            lo, hi = min(ai) / 2, max(ai) * 2
            knee = peak / bw
            xs = [lo] + ([knee] if lo < knee < hi else []) + [hi]
            ax.plot(xs, [min(peak, x * bw) / 1e12 for x in xs], color="black", lw=1.5)
            ax.annotate(f"roof: GEMM {gemm.rsplit('_', 1)[1]} {peak / 1e12:.3g} TFLOP/s, copy {bw / 1e9:.3g} GB/s"
                        + whose,
                        (0.98, 0.03), xycoords="axes fraction", ha="right", va="bottom", fontsize=7,
                        bbox={"boxstyle": "round", "fc": "white", "ec": "none", "alpha": 0.8})
        roof = [min(peak, x * bw) / 1e12 for x in (min(ai), max(ai))] if peak and bw else []
        _log_axis(ax, "x", ai, lambda v: f"{v:g}")
        _log_axis(ax, "y", [r.tflops for r in rs] + roof, lambda v: f"{v:g}")
        ax.set_xlabel("arithmetic intensity (FLOP per byte of minimal traffic)")
        ax.set_title(dtype, fontsize=9)
        ax.grid(True, which="major", alpha=0.3)
    fig.supylabel("achieved TFLOP/s")
    modes = sorted({r.case.mode for r in ok}, key=list(MODE_MARKERS).index)
    extra = [Line2D([], [], ls="", marker=MODE_MARKERS[m], color="grey", label=m) for m in modes]
    extra.append(Line2D([], [], color="black", label="roofline (measured)"))
    fig.suptitle(_title(sweep, "Achieved throughput vs the measured roofline", not_run), fontsize=11)
    _legend(fig, colors, extra, by_marker=False)
    save_figure(fig, path)
    return True


def save_figure(fig: object, path: Path) -> None:
    """The figure as a PNG written whole (files.write_whole: a full disk leaves no image cut short), then closed."""
    image = io.BytesIO()
    try:
        fig.savefig(image, dpi=110, format="png")
    finally:
        plt.close(fig)
    write_whole(path, image.getvalue())


def write_plots(directory: Path, sweep: Sweep) -> list[tuple[str, str]]:
    """Write the PNGs into `directory`; returns (title, file name) of each, in reading order."""
    ok = [r for r in sweep.results if r.status == "ok" and r.median_s]
    ran = [i for i in sweep.meta.get("impls", []) if any(r.impl == i for r in ok)]
    ran += sorted({r.impl for r in ok} - set(ran))
    not_run = [i for i in sweep.meta.get("impls", []) if i not in ran]
    colors = _colors(ran)
    modes = sorted({r.case.mode for r in ok}, key=list(MODE_MARKERS).index)
    images: list[tuple[str, str]] = []
    for mode in modes:
        name = f"time-{MODE_FILE[mode]}.png"
        if _vs_length(sweep, ok, mode, colors, not_run, False, Path(directory) / name):
            images.append((f"Time vs sequence length ({mode})", name))
    for mode in modes:
        name = f"memory-{MODE_FILE[mode]}.png"
        if _vs_length(sweep, ok, mode, colors, not_run, True, Path(directory) / name):
            images.append((f"Peak memory vs sequence length ({mode})", name))
    if _roofline(sweep, ok, colors, not_run, Path(directory) / "roofline.png"):
        images.append(("Throughput vs roofline", "roofline.png"))
    return images
