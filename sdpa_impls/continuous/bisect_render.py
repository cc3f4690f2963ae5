"""The answer of `sdpa-bench bisect` as text, Markdown (a PR or issue comment) or JSON.

    render(search, markdown=False) -> str
    as_dict(search) -> dict
"""
from __future__ import annotations

import dataclasses
import re
from collections import Counter

from ..fmt import cell, code, fit_comment, fmt_duration, table
from .bisect_answer import CULPRIT, INCONCLUSIVE, NO_REGRESSION, UNDECIDED, Search
from .bisect_replay import REPLAY_FORMAT
from .steps import Step

EXIT_MEANING = ("exit 0: no regression between GOOD and BAD; 1: culprit found and confirmed against its parent; "
                "3: GOOD and BAD differ but the culprit was not pinned down (the candidates left are named); 4: "
                "undecided, no row judged slower but some the endpoints could not tell apart; 2: unusable input; "
                "130, 143 or 129: stopped by Ctrl-C, SIGTERM or SIGHUP, the finished steps kept in --json.")


def _headline(search: Search, shown, unfinished: str | None = None) -> str:
    if unfinished:
        return f"{unfinished.upper()} after {len(search.steps)} step(s), no answer yet"
    if search.answer == CULPRIT:
        return f"CULPRIT {shown(search.culprit)}"
    if search.answer == INCONCLUSIVE and len(search.among) == 1:  # one left: the search ended, unconfirmed
        return (f"INCONCLUSIVE: {shown(search.among[0])} is the only {search.unit} left, not confirmed against its "
                "parent")
    if search.answer == INCONCLUSIVE:
        return f"INCONCLUSIVE: the first slower {search.unit} is one of {len(search.among)}"
    if search.answer == UNDECIDED:  # no row slower, but "no regression" would be a guess for these
        return (f"UNDECIDED: GOOD and BAD could not be told apart on {len(search.undecided)} row(s), which may be "
                "slower or not; no other row is slower")
    return "NO REGRESSION between GOOD and BAD"


def _rows_cell(step: Step) -> str:
    """A step's rows in a cell: the one row, or how many got each verdict and the range of their ratios."""
    if len(step.rows) <= 1:
        return step.rows[0].text() if step.rows else ""
    counts = Counter(r.verdict for r in step.rows)
    ratios = [r.ratio for r in step.rows if r.ratio is not None]
    spread = f", ×{min(ratios):.3f}–{max(ratios):.3f}" if ratios else ""
    return f"{len(step.rows)} rows: " + ", ".join(f"{n} {v}" for v, n in counts.most_common()) + spread


def render(search: Search, markdown: bool = False, unfinished: str | None = None) -> str:
    """The answer first (culprit, or the commits left, or no regression), the rows under test, what differs at the
    culprit, every step with its verdict and time, then notes. `unfinished`: the steps of a search stopped before its
    answer ("interrupted"), said as such. In Markdown it fits in one comment (fmt.fit_comment): the rows counted,
    not listed, then cut at a line."""
    if markdown:
        return fit_comment(lambda fold: _text(search, True, unfinished, fold))
    return _text(search, False, unfinished, False)


def _text(search: Search, markdown: bool, unfinished: str | None, fold: bool) -> str:
    shown = code if markdown else str  # in Markdown, what a person wrote (subjects, names, paths) is a code span
    in_cell = cell if markdown else str

    def short(name: str) -> str:  # a commit by its abbreviated hash, a release by its whole name
        return name.split(" ")[0] if search.unit == "commit" else name
    bullet = "- " if markdown else "  "
    out = [f"{'## ' if markdown else ''}sdpa-bench bisect: {_headline(search, shown, unfinished)} — GOOD "
           f"{shown(search.good)}, "
           f"BAD {shown(search.bad)}, {len(search.commits)} {search.unit}(s), {search.comparisons} comparison(s)"
           + (f" and {skips} for skipped {search.unit}(s)" if (skips := len(search.steps) - search.comparisons) else "")
           + f", {fmt_duration(search.seconds)}", ""]
    def listed(rows) -> list[str]:  # folded: counted, so that the commits below fit in one comment
        return [f"{bullet}{len(rows)} rows, listed in --json and in the command's own output"] if fold else [
            f"{bullet}{shown(r.text())}" for r in rows]
    if search.rows:
        out += ["Slower or bigger at BAD than at GOOD (the rows under test):"] + listed(search.rows) + [""]
    if search.answer == CULPRIT and not unfinished:
        confirm = search.steps[-1]
        out += [f"Culprit {shown(search.culprit)}, against its parent {shown(confirm.base)}:"] + listed(confirm.rows)
        if search.files:
            out += [f"{bullet}files changed: " + ", ".join(shown(f) for f in search.files[:20])
                    + (f" and {len(search.files) - 20} more" if len(search.files) > 20 else "")]
        out += [f"{bullet}{shown(n)}" for n in confirm.notes if not n.startswith("adaptive")] + [""]
    elif search.answer == INCONCLUSIVE and not unfinished:
        out += [f"The first slower {search.unit} is one of:" if len(search.among) > 1 else
                f"The only {search.unit} left (the notes say why it is not confirmed):"] + [f"{bullet}{shown(c)}" + (
            f" (skipped: {shown(search.skipped[c])})" if c in search.skipped else "") for c in search.among] + [""]
    if search.steps:
        out += table(["#", "step", "base", "head", "verdict", "floor", "rows (head/base, 95% CI)", "time"],
                     [[str(i), s.kind, in_cell(short(s.base)) if s.base else "-", in_cell(short(s.head)), s.verdict,
                       f"×{s.floor:.3f}" if s.floor else "-",
                       in_cell(_rows_cell(s) or next((n for n in s.notes if not n.startswith("adaptive")), "-")),
                       fmt_duration(s.seconds)]
                      for i, s in enumerate(search.steps, 1)], markdown).splitlines()
    notes = [*search.notes, EXIT_MEANING]
    if search.answer in (NO_REGRESSION, UNDECIDED) and not search.rows and not unfinished:
        notes.insert(0, "no benchmark was slower at BAD than at GOOD by more than the gate's floor" + (
            ", but the undecided ones could not be judged" if search.answer == UNDECIDED else "") + "; nothing was "
            "searched.")
    out += ["", "Steps' rows in full: --json."] if any(len(s.rows) > 1 for s in search.steps) else []
    out += ["", "Notes:"] + [f"{bullet}{_spans(n, search) if markdown else n}" for n in notes]
    return "\n".join(out) + "\n"


def _spans(note: str, search: Search) -> str:
    """A note with each commit it names (`abc1234 subject`, as the search names them) made a code span: a subject
    is anyone's text, and a Markdown note would ping, link or render it. Longest names first, each once."""
    names = sorted((n for n in search.ids if n), key=len, reverse=True) if search.unit == "commit" else []
    if not names:
        return note
    return re.sub("|".join(map(re.escape, names)), lambda m: code(m.group(0)), note)


def as_dict(search: Search, unfinished: str | None = None) -> dict:
    """JSON-ready: the answer and exit code, the culprit or the commits left, the rows under test, every step. Each
    commit is named as the text shows it ("abc1234 subject") and, under the same key with `_id`, by its full hash
    (a release by its version), for a script to check out or tag. `resume` holds what a search that resumes this
    one needs (`bisect --resume`). `unfinished` ("in progress", "interrupted"): the steps so far, with that as the
    answer and no exit code."""
    ids = search.ids.get
    return {"answer": search.answer, "exit_code": search.exit_code, "good": search.good, "bad": search.bad,
            "good_id": ids(search.good), "bad_id": ids(search.bad), "culprit_id": ids(search.culprit or ""),
            "commit_ids": [ids(c) for c in search.commits], "among_ids": [ids(c) for c in search.among],
            "commits": search.commits, "culprit": search.culprit, "among": search.among, "files": search.files,
            "skipped": search.skipped, "undecided": search.undecided,
            "rows": [dataclasses.asdict(r) for r in search.rows],
            "comparisons": search.comparisons, "seconds": round(search.seconds, 1),
            "steps": [dataclasses.asdict(s) for s in search.steps], "notes": search.notes,
            "resume": {"format": REPLAY_FORMAT, "settings": search.settings, "state": search.state}} | (
        {"answer": unfinished, "exit_code": None} if unfinished else {})
