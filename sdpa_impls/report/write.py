"""Everything a sweep leaves behind, written in one call: the printed tables, results.csv, the plots, report.md."""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import TextIO

from ..errors import UsageError
from ..fmt import path_text

from .csvfile import CSV_FILE, write_csv
from .markdown import REPORT_FILE, write_markdown
from .results import RESULTS_FILE, Sweep
from .tables import SweepTable, tables


def write_report(directory: Path, sweep: Sweep, stdout: TextIO | None = None, plots: bool = True) -> list[Path]:
    """Print the tables and (re)write results.csv, the PNG plots and report.md; returns the files written.

    Plotting problems (e.g. matplotlib not installed) are reported and skipped: the other files still appear.
    """
    stdout = stdout or sys.stdout
    directory = Path(directory)
    layout = SweepTable(sweep)
    try:  # the files first: a stdout whose reader went away (`| head`) or that cannot be written must not lose them
        files = _write_files(directory, sweep, layout, plots)
    except OSError as exc:  # e.g. a folder where report.md goes: results.json, written before, stays as it is
        with contextlib.suppress(OSError):  # the tables still printed, unless stdout fails too
            print(tables(layout), file=stdout)
        again = f"sdpa-bench report {path_text(str(directory))}"
        raise UsageError(f"{exc.filename or directory}: cannot write ({exc.strerror or exc}); the results in "
                         f"{directory / RESULTS_FILE} are saved; once it can be written, `{again}` writes the "
                         "report") from None
    print(tables(layout), file=stdout)
    return files


def _write_files(directory: Path, sweep: Sweep, layout: SweepTable, plots: bool) -> list[Path]:
    files = [write_csv(directory / CSV_FILE, sweep.results)]
    images: list[tuple[str, str]] = []
    skipped = ""  # why there are no plots, for report.md too: a reader of it later sees no stderr
    if plots:
        try:
            from .plots import write_plots
            from .structure_plots import write_structure_plots

            images = write_plots(directory, sweep) + write_structure_plots(directory, sweep)
        except ImportError as exc:
            skipped = f"{exc} (pip install 'sdpa-bench[plots]')"
        except Exception as exc:  # a plotting bug must not cost the CSV and the report
            skipped = f"{type(exc).__name__}: {exc}"
        if skipped:
            print(f"sdpa-bench: plots skipped: {skipped}", file=sys.stderr)
    files += [directory / name for _, name in images]
    files.append(write_markdown(directory / REPORT_FILE, sweep, layout, images, skipped))
    return files
