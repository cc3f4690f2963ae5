"""What one run of a side's suite says beside its benchmark file: the tests that failed, and the ones it skipped
with their reasons, as lines in the form of pytest's short summary:

    FAILED sdpa_impls/suite/test_sdpa.py::test_sdpa[naive-L128-...] - WrongResult: ...
    SKIPPED test_sdpa[naive-L96-...] - naive: backward (...)

    outcome_lines(output, junit) -> tuple[str, ...]   # FAILED/ERROR lines of pytest's output, then SKIPPED lines
    skipped_tests(junit) -> tuple[str, ...]          # the SKIPPED lines of pytest's JUnit XML report
    labelled(line) -> (label, message)               # the benchmark a line is about (`impl[case]`), its message
    by_label(lines) -> ({label: error}, {label: skip reason})
    clear_runs(folder) -> int                        # remove the run files an earlier comparison left there
    last_line(text) -> str                           # the line of a process's output that says what failed

The skips come from pytest's own JUnit XML report (`--junitxml`), whose every test case carries its skip reason
(pytest's terminal summary groups skips by the line that raised them, not by test), so a benchmark that base
measured and head skipped is named with head's reason (`verdict.judge`). The report is pytest's, so a revision of
any age writes it.
"""
from __future__ import annotations

import signal

import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

SKIPPED = "SKIPPED "
PIP_TRAILERS = ("note:", "hint:")  # what pip ends a failure with after the error itself ("hint: See above ...")
PIP_STEPS = ("Running command", "Cloning", "Preparing", "Installing", "Getting", "Building")  # pip's, not a cause
RUN_FILE = re.compile(r"(base|head)-a?\d+\.(json|junit\.xml)")  # each run of a side, in the runs folder (a: extra)


def clear_runs(folder: Path) -> int:
    """Remove the run files (RUN_FILE) an earlier comparison left in `folder` (--keep-runs), and nothing else; how
    many. A shorter comparison's runs beside a longer one's read as one comparison."""
    earlier = [f for f in folder.iterdir() if RUN_FILE.fullmatch(f.name) and f.is_file()]
    for f in earlier:
        f.unlink()
    return len(earlier)


def outcome_lines(output: str, junit: Path) -> tuple[str, ...]:
    failed = [line.strip() for line in output.splitlines() if line.startswith(("FAILED ", "ERROR "))]
    return (*failed, *skipped_tests(junit))


def skipped_tests(junit: Path) -> tuple[str, ...]:
    """`SKIPPED <test name> - <reason>` for every skipped test case of the report at `junit`; none where it is
    missing or unreadable (a run that did not finish says so through its exit status)."""
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError):
        return ()
    out = []
    for case in root.iter("testcase"):
        skip = case.find("skipped")
        if skip is not None:
            reason = " ".join((skip.get("message") or "").split())
            out.append(f"{SKIPPED}{case.get('name', '')}" + (f" - {reason}" if reason else ""))
    return tuple(out)


def labelled(line: str) -> tuple[str, str]:
    """A line of `outcome_lines` as the benchmark's label (`impl[case]`, the test's own id where it is not the
    suite's) and its message (the error, or the skip's reason; "" if none)."""
    nodeid, _, message = line.split(" ", 1)[-1].partition(" - ")
    test = nodeid.rpartition("::")[2]
    params = test.partition("[")[2].removesuffix("]")
    impl, _, case = params.partition("-")
    label = f"{impl}[{case}]" if test.startswith("test_sdpa[") and case else test
    return label, message.strip()


def by_label(lines: Sequence[str]) -> tuple[dict[str, str], dict[str, str]]:
    """The failed tests' errors and the skipped tests' reasons among `lines`, each by benchmark label."""
    failed: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for line in lines:
        label, message = labelled(line)
        (skipped if line.startswith(SKIPPED) else failed)[label] = message
    return failed, skipped


def last_line(text: str) -> str:
    """The line that says what failed: the last one, or the failed step's own (`step_said`); not pip's notes and
    hints after it ("hint: See above for details.")."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    own = step_said(text)
    if own:
        return own
    while len(lines) > 1 and lines[-1].lower().startswith(PIP_TRAILERS):
        lines.pop()
    return lines[-1] if lines else "(no output)"


def step_said(text: str) -> str | None:
    """What the step pip ran said last where pip reports its failure: a build backend's last line (before pip's
    "[end of output]"), or the error a command (git clone) printed before pip's "error: subprocess-exited-with-error";
    None where pip reports no such step."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    ends = [i for i, line in enumerate(lines) if line == "[end of output]"]
    if ends and ends[-1] > 0 and not lines[ends[-1] - 1].startswith("╰─>"):
        return lines[ends[-1] - 1]
    # pip 23 says "error: subprocess-exited-with-error" twice, the second time after its own note
    for i in reversed([i for i, line in enumerate(lines) if line == "error: subprocess-exited-with-error"]):
        before = lines[i - 1] if i > 0 else ""
        if before and not before.startswith(PIP_STEPS) and not before.lower().startswith(PIP_TRAILERS):
            return before
    return None


def crash_said(returncode: int, text: str) -> str:
    """How a run ended by a signal (`returncode` < 0, as subprocess reports it): the signal's name, and where the
    output of Python's faulthandler puts the crash (its fatal error, the innermost frame of the thread that crashed;
    its stack lists the most recent call first). Not the last line, which is its list of extension modules."""
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    lines = [line.strip() for line in text.splitlines()]
    fatal = next((line for line in lines if line.startswith("Fatal Python error")), "")
    stack = lines[lines.index(fatal):] if fatal else lines
    frame = next((line for line in stack if line.startswith("File ")), "")
    return f"ended by {name}" + "".join(f"; {part}" for part in (fatal, frame and f"innermost frame: {frame}") if part)
