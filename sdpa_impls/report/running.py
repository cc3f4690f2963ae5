"""The point a `run` is measuring, noted in its folder while it does, so that a resumed run learns where the last
process ended with no Python error (a segfault inside an implementation, os._exit, a kill):

    mark(directory, case_id, impl) / mark(directory, None)   # before each point / after the last or an interrupt
    ended_inside(directory, sweep) -> the note to print, or None   # on --resume: counts it, fails it the second time

A point the process ended inside once is measured again (the end may have been a kill from outside); a second end
there records it as failed, so that a point that always crashes cannot stop the rest of the sweep for good.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..bench import grid
from ..bench.result import Result
from .results import Sweep

RUNNING_FILE = ".sdpa-bench-point"


def mark(directory: Path, case_id: str | None, impl: str = "") -> None:
    """Note the point about to be measured in DIR; None: none is."""
    path = Path(directory) / RUNNING_FILE
    if case_id is None:
        path.unlink(missing_ok=True)
    else:
        path.write_text(json.dumps([case_id, impl]) + "\n", encoding="utf-8")


def _noted(directory: Path) -> tuple[str, str] | None:
    try:
        case_id, impl = json.loads((Path(directory) / RUNNING_FILE).read_text(encoding="utf-8"))
        return str(case_id), str(impl)
    except (OSError, ValueError, TypeError):
        return None


def ended_inside(directory: Path, sweep: Sweep) -> str | None:
    """Where the last process of DIR's sweep ended inside a point: count it in the sweep's meta (`ended_inside`),
    and from the second time add a failed result for it. The line to print, or None."""
    point, meta = _noted(directory), sweep.meta
    mark(directory, None)
    if not point or point in sweep.done() or point[0] not in meta["case_ids"] or point[1] not in meta["impls"]:
        return None
    ends = meta.setdefault("ended_inside", {})
    key = f"{point[1]} on {point[0]}"
    ends[key] = ends.get(key, 0) + 1
    if ends[key] < 2:
        return (f"{key}: the last run's process ended inside this point; measuring it again (if a process ends "
                "there again, the point is recorded as failed)")
    case = next(c for c in grid.preset(meta["preset"]) if c.id == point[0])
    sweep.results.append(Result(impl=point[1], case=case, device=meta["device"], status="failed", reason=(
        f"the process ended inside this point {ends[key]} times with no Python error (a crash such as a segfault "
        "in the implementation, os._exit, or a kill); not measured again")))
    return f"{key}: a process ended inside this point {ends[key]} times; recorded as failed"
