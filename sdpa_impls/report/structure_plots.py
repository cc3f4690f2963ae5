"""PNG plots of the mask structures: time against L, one panel per implementation, one line per structure."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from ..bench.grid import Case  # noqa: E402
from ..bench.result import Result  # noqa: E402
from ..fmt import fmt_seconds  # noqa: E402
from ..registry import names  # noqa: E402
from .plots import MODE_FILE, MODE_MARKERS, _grid, _log_axis, _title, _x_axis, save_figure  # noqa: E402
from .results import Sweep  # noqa: E402


def structure_label(case: Case) -> str:
    """What a line stands for: the mask word (or the random mask) and top-left causal where set."""
    word = {"none": "", "bool": "random bool mask", "float": "random float bias"}.get(case.mask, case.mask)
    if case.causal:
        return f"{word} + causal" if word else "causal"
    return word or "no mask"


def _family(case: Case) -> tuple:
    """Everything but L, the batch and the mask: the cases a structure is read against."""
    return (case.e, case.ev, case.dtype, case.heads_q, case.heads_kv, None if case.lq == case.lk else case.lq)


def _panels(rs: list[Result]) -> dict[tuple, list[Result]]:
    """(implementation, family) -> its results, for the families that hold at least one structure."""
    by: dict[tuple, list[Result]] = defaultdict(list)
    for r in rs:
        by[(r.impl, _family(r.case))].append(r)
    return {key: group for key, group in by.items() if any(r.case.mask_spec is not None for r in group)}


def _panel_title(impl: str, case: Case, rs: list[Result]) -> str:
    heads = f"H={case.heads_q}" + (f"/{case.heads_kv} kv" if case.gqa else "")
    batches = sorted({r.case.batch for r in rs})
    parts = [impl, f"E={case.e}" + (f", Ev={case.ev}" if case.ev != case.e else ""), case.dtype, heads,
             f"B={batches[0]}" if len(batches) == 1 else "B·L fixed"]
    if case.lq != case.lk:
        parts.append(f"Lq={case.lq}")
    return ", ".join(parts)


def _one_mode(sweep: Sweep, ok: list[Result], mode: str, not_run: list[str], path: Path) -> bool:
    panels = _panels([r for r in ok if r.case.mode == mode])
    if not panels:
        return False
    labels = sorted({structure_label(r.case) for rs in panels.values() for r in rs})
    cmap = plt.get_cmap("tab10")
    styles = {lab: {"color": cmap(k % 10), "marker": "osD^vPX*hp"[k % 10]} for k, lab in enumerate(labels)}
    order = names()  # implementations in the catalogue's order within each family
    fig, axes = _grid(len(panels))
    for ax, ((impl, _), rs) in zip(axes, sorted(panels.items(), key=lambda kv: (
            str(kv[0][1]), order.index(kv[0][0]) if kv[0][0] in order else len(order), kv[0][0]))):
        first = rs[0].case
        for label in labels:
            pts = sorted((r.case.lk, r.median_s) for r in rs if structure_label(r.case) == label)
            if pts:
                ax.plot(*zip(*pts), label=label, alpha=0.85, ms=6, **styles[label])
        _x_axis(ax, sorted({r.case.lk for r in rs}), "L = Lq = Lk" if first.lq == first.lk else "Lk (keys)")
        _log_axis(ax, "y", [r.median_s for r in rs], fmt_seconds)
        ax.set_title(_panel_title(impl, first, rs), fontsize=9)
    handles = [Line2D([], [], label=lab, **styles[lab]) for lab in labels]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 4), frameon=False)
    fig.supylabel("median time per call")
    fig.suptitle(_title(sweep, f"Median time vs sequence length per mask structure (log-log), mode {mode}",
                        not_run), fontsize=11)
    save_figure(fig, path)
    return True


def write_structure_plots(directory: Path, sweep: Sweep) -> list[tuple[str, str]]:
    """`structures-<mode>.png` when the sweep has mask structures; (title, file name) of each written."""
    ok = [r for r in sweep.results if r.status == "ok" and r.median_s]
    not_run = [i for i in sweep.meta.get("impls", []) if not any(r.impl == i for r in ok)]
    images = []
    for mode in sorted({r.case.mode for r in ok}, key=list(MODE_MARKERS).index):
        name = f"structures-{MODE_FILE[mode]}.png"
        if _one_mode(sweep, ok, mode, not_run, Path(directory) / name):
            images.append((f"Time vs sequence length per mask structure ({mode})", name))
    return images
