"""One set of formatters for every report, table and progress line: times, durations, bytes and tables."""
from __future__ import annotations

import datetime
import re
import shlex
from collections.abc import Callable, Sequence


def fmt_seconds(s: float | None) -> str:
    """A time with a readable unit and three significant digits: 812 µs, 12.3 ms, 1.41 s, 95 ns."""
    if s is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if abs(s) >= scale or unit == "ns":
            v = s / scale  # rounded first: .3g writes 999.6 as 1e+03
            return f"{v:.3g} {unit}" if abs(float(f"{v:.3g}")) < 1000 else f"{v:.0f} {unit}"
    raise AssertionError("unreachable")


def fmt_duration(seconds: float) -> str:
    """A wall-clock duration for humans: 42s, 3m05s, 1h07m."""
    seconds = int(round(max(seconds, 0)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def fmt_bytes(n: float | None) -> str:
    """Bytes with a binary unit and three significant digits: 512 B, 3.5 KiB, 1.2 GiB, 1005 MiB (not 1e+03)."""
    if n is None:
        return "-"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            v = n / scale  # rounded first: .3g writes 999.6 as 1e+03
            return f"{v:.3g} {unit}" if abs(float(f"{v:.3g}")) < 1000 else f"{v:.0f} {unit}"
    return f"{int(n)} B"


def fmt_factor(factor: float) -> str:
    """A threshold's factor as configured: 1.15 for 15 %, 1.004 for 0.4 % (not 1.00, which reads as "any growth"),
    with the digits it takes to never read as 1 where it is not: 1.000004 for 0.0004 %."""
    text, digits = (f"{factor:.2f}" if abs(factor * 100 - round(factor * 100)) < 1e-9 else f"{factor:.6g}"), 6
    while factor != 1 and float(text) == 1 and digits < 17:  # 17 significant digits tell any float from 1
        digits += 1
        text = f"{factor:.{digits}g}"
    return text


def table(header: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool = False,
          numeric: bool = False) -> str:
    """A plain-text (aligned, dashed rule under the header) or Markdown table.

    `numeric`: every column after the first is right-aligned (numbers line up), in Markdown too.
    """
    if markdown:
        rule = "|---|" + ("---:|" if numeric else "---|") * (len(header) - 1)
        return "\n".join(["| " + " | ".join(header) + " |", rule] + ["| " + " | ".join(r) + " |" for r in rows])
    widths = [max(len(str(row[k])) for row in [header, *rows]) for k in range(len(header))]

    def line(row: Sequence[str]) -> str:
        cells = [str(row[0]).ljust(widths[0])]
        cells += [str(v).rjust(w) if numeric else str(v).ljust(w) for v, w in zip(row[1:], widths[1:])]
        return "  ".join(cells).rstrip()

    return "\n".join([line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in rows])


def code(text: str) -> str:
    """`text` as a Markdown code span, on one line: shown as written, never a mention, link, image, emphasis or
    heading (a PR comment shows commit subjects, branch names and requirements that anyone may have written)."""
    text = " ".join(str(text).splitlines())
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def cell(text: str) -> str:
    """`text` as a Markdown table cell's code span (a `|` would end the cell)."""
    return code(text).replace("|", "\\|")


# GitHub's limit on the body of an issue or pull-request comment: 65,536 characters; counted here as UTF-8 bytes,
# never fewer than characters, so that a verdict under it is under GitHub's whatever the text
COMMENT_LIMIT = 65536


WHOLE = "in --json and in the command's own output"  # where a verdict cut to fit a PR comment is whole


def fit_comment(build: Callable[[bool], str], whole: str = WHOLE, limit: int = COMMENT_LIMIT) -> str:
    """A Markdown verdict that fits in one PR comment (a longer body is refused, and nothing is posted): `build(False)`,
    the whole of it; where that is over `limit` bytes, `build(True)`, its renderer's short form (the rows that
    passed counted, not listed); where that is over too, cut at a line, with a last line saying how many were
    left out, and where the `whole` verdict is. Measured as it is written, credentials masked (a mask can be
    longer than what it hides)."""
    from .credentials import redact

    for fold in (False, True):
        text = redact(build(fold))
        if len(text.encode()) <= limit:
            return text
    lines = text.removesuffix("\n").split("\n")  # "\n" alone: another line separator stays in its line, as counted
    kept, size = [], 0
    for n, line in enumerate(lines):
        tail = (f"_{len(lines) - n} more line(s) left out to fit one PR comment ({limit:,} bytes): the whole verdict "
                f"is {whole}._")
        if size + len(line.encode()) + 2 + len(tail.encode()) + 1 > limit:
            return "\n".join([*kept, "", tail]) + "\n"
        kept.append(line)
        size += len(line.encode()) + 1
    raise AssertionError("unreachable: the whole text is over the limit")


def now_stamp() -> str:
    """The local time now, to the second, with its UTC offset: when a sweep started, finished or was resumed."""
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def option_text(option: str, value: str) -> str:
    """`--option VALUE` as a command to copy into a shell: VALUE quoted, and joined by `=` where it starts with `-`,
    which argparse would read as an option ("--out -i": expected one argument)."""
    return f"{option}={shlex.quote(value)}" if value.startswith("-") else f"{option} {shlex.quote(value)}"


def path_text(value: str) -> str:
    """A command's last positional argument, to copy into a shell: quoted, after `--` where it starts with `-`."""
    return f"-- {shlex.quote(value)}" if value.startswith("-") else shlex.quote(value)
