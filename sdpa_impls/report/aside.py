"""`run --overwrite` keeps the sweep it replaces in DIR/replaced-sweep until the new one finishes with a point
measured ok; a run stopped before it saved anything of its own puts that sweep back, so no command then reads the
folder as empty (a plain `run` started a new sweep there, and deleted the one set aside once it finished)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..errors import UsageError
from .results import OUTPUTS, RESULTS_FILE, Sweep, load

ASIDE = "replaced-sweep"


def set_aside(directory: Path) -> Path:
    """For `run --overwrite`: move what a run wrote in DIR (results, CSV, report, plots) into DIR/replaced-sweep,
    where it stays until the new sweep finishes with a point measured ok (`drop_aside`): one stopped early, or whose
    points all skip or fail here, costs no finished sweep. Where a sweep set aside before is still there, DIR's
    sweep takes its place if it finished with a point measured ok; else DIR's outputs (an unfinished replacement's)
    go, and the one set aside stays."""
    directory = Path(directory)
    aside = directory / ASIDE
    if aside.exists() and not aside.is_dir() or aside.is_symlink():
        raise UsageError(f"{aside} is where --overwrite keeps the sweep it replaces: move that file away")
    if aside.is_dir() and measured(directory):
        shutil.rmtree(aside)
    kept = aside.is_dir()
    aside.mkdir(exist_ok=True)
    for pattern in OUTPUTS:
        for path in directory.glob(pattern):
            if not kept:
                os.replace(path, aside / path.name)
            elif path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
    return aside


def measured(directory: Path, sweep: Sweep | None = None) -> bool:
    """Whether DIR's sweep (`sweep`, else read from DIR) finished with a point measured ok."""
    try:
        sweep = sweep or load(directory)
    except UsageError:  # none, or corrupt
        return False
    return "finished" in sweep.meta and any(r.status == "ok" for r in sweep.results)


def drop_aside(directory: Path, sweep: Sweep) -> None:
    """Once DIR's sweep has finished with a point measured ok, the sweep it replaced (`set_aside`) goes."""
    if measured(directory, sweep):
        shutil.rmtree(Path(directory) / ASIDE, ignore_errors=True)


def put_back(directory: Path) -> bool:
    """Where DIR has no results file but a sweep set aside (an --overwrite stopped before its first save), that
    sweep goes back where it was; True if it did."""
    directory = Path(directory)
    aside = directory / ASIDE
    if (directory / RESULTS_FILE).exists() or aside.is_symlink() or not (aside / RESULTS_FILE).is_file():
        return False
    for path in aside.iterdir():
        target = directory / path.name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        os.replace(path, target)
    aside.rmdir()
    return True
