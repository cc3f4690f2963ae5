"""An earlier search's steps, read from its `--json`, for `bisect --resume`: a search takes each of them that asks
the question it asks next (continuous.bisect), so only what the earlier one did not finish is measured again.

    settings_of(query, plan) -> dict      # what the steps' verdicts depend on, kept in the --json
    load_replay(path, query, plan) -> Replay
    Resumable                             # the search's part that takes those steps (continuous.bisect._Searcher)
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from pathlib import Path

from ..errors import UsageError
from ..fmt import fmt_duration
from ..gate.rules import TimeRule
from .bisect_answer import AGAINST_BAD, CONFIRM, ENDPOINTS, SEARCH, Query, Search
from .comparison import Plan, floor_rule
from .revisions import uncommitted
from .steps import DIFFERENT, SAME, SKIPPED, UNKNOWN, RowStep, Step, verdict_of

IN_PROGRESS, INTERRUPTED = "in progress", "interrupted"  # what a --json written before the answer says
DIRTY_TREE = "the working tree has uncommitted changes"  # a note about the run's own tree: not carried to a resume


def dirty_tree(root: Path | None) -> str:
    """The note for a search in a working tree with uncommitted changes, which it does not measure (`continuous`
    compares the working tree; a search over commits cannot see them), or ""."""
    changed = uncommitted(root) if root else []
    if not changed:
        return ""
    shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
    return f"{DIRTY_TREE} ({shown}), which bisect does not measure: it searches commits, up to BAD. Commit them to " \
           "have them searched."
REPLAY_FORMAT = 1


def settings_of(query: Query, plan: Plan) -> dict:
    """What every step's verdict depends on besides the commits, as JSON: a resumed search must share all of it."""
    return {"preset": plan.preset, "rounds": plan.rounds, "max_time": plan.max_time,
            "adaptive_budget": plan.adaptive_budget, "adaptive_rounds": plan.adaptive_rounds, "paired": plan.paired,
            "impl": list(query.impl), "select": query.select, "rows": [list(r) for r in query.rows],
            "config": _contents(query.config), "package": query.package,
            "versions": list(query.versions) if query.versions is not None else None, "pre": query.pre}


def _contents(path: str | None) -> str | None:
    """What a --config file holds, as a digest: its contents decide every step's verdict, not the path it is given by."""
    if path is None:
        return None
    try:
        return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    except OSError:
        return "unreadable"  # the search says why, as for any --config


@dataclasses.dataclass
class Replay:
    """The steps of an earlier search and what its endpoints decided (`Search.state`), read from its JSON."""

    source: str
    steps: list[Step]
    state: dict
    good_id: str
    bad_id: str
    commit_ids: list[str]

    def check_line(self, good: str, bad: str, commits: list[str], unit: str) -> None:
        """UsageError where the search resumed was over another line than this one (GOOD, BAD, what is between)."""
        if (self.good_id, self.bad_id, self.commit_ids) != (good, bad, commits):
            raise UsageError(f"--resume {self.source}: that search was over {self.good_id[:12]}..{self.bad_id[:12]} "
                             f"({len(self.commit_ids)} {unit}s), this one over {good[:12]}..{bad[:12]} "
                             f"({len(commits)}): give the same GOOD and BAD")


def step_of(d: dict) -> Step:
    rows = tuple(RowStep(r["label"], r.get("ratio"), tuple(r["interval"]) if r.get("interval") else None,
                         r["verdict"], r.get("memory") or "", str(r.get("why") or "")) for r in d.get("rows") or ())
    step = Step(d["kind"], d["base"], d["head"], d["verdict"], d["floor"], rows, d.get("seconds") or 0.0,
                tuple(d.get("notes") or ()))
    said = SKIPPED if step.kind == "skip" else verdict_of(rows)  # what the search itself would have concluded
    if step.kind not in (ENDPOINTS, SEARCH, AGAINST_BAD, CONFIRM, "skip") or step.verdict != said or any(
            r.verdict not in (DIFFERENT, SAME, UNKNOWN) for r in rows):
        raise ValueError(f"step {step.kind!r} of {str(step.head)[:12]}: its verdict {step.verdict!r} is not what its "
                         "rows say")
    wrong = next((r for r in rows if not _fits(r, step.floor)), None)
    if wrong is not None:
        raise ValueError(f"step {step.kind!r} of {str(step.head)[:12]}: row {wrong.label} is {wrong.verdict}, which "
                         f"its interval {list(wrong.interval or ())} does not give at its floor ×{step.floor}")
    return step


def _fits(row: RowStep, floor: float) -> bool:
    """Whether a time row's verdict is one its interval gives at the step's floor (verdict.decide): DIFFERENT only
    wholly above it, SAME only at or below it (UNKNOWN may be either: a row not judged). A memory row, or one without
    an interval, has nothing to check."""
    if row.memory or not row.interval or not floor:
        return True
    low, high = row.interval
    factor = TimeRule.parse(floor_rule(floor), 0.5).factor  # the factor its step was judged at, from the rule's text
    return {DIFFERENT: low > factor, SAME: high <= factor}.get(row.verdict, True)


def _floor_given(steps: list[Step]) -> float | None:
    """The floor the endpoints' slower time rows give (continuous.bisect._endpoints): √ of the smallest low end of
    their intervals, 0.0 where none is slower (memory rows only, or nothing to search: the rows it read are SAME or
    UNKNOWN); None without an endpoints step to read it from."""
    if not steps or steps[0].kind != ENDPOINTS:
        return None
    lows = [r.interval[0] for r in steps[0].rows if r.verdict == DIFFERENT and not r.memory and r.interval]
    return math.sqrt(min(lows)) if lows else 0.0


def load_replay(path: str | Path, query: Query, plan: Plan) -> Replay:
    """The steps of the search whose `--json` is `path`; UsageError where it is not one, or was made with other
    settings (`settings_of`), so that none of its verdicts would be this search's."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"--resume {path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"--resume {path}: not the JSON of a bisect ({exc})") from None
    saved = doc.get("resume") if isinstance(doc, dict) else None
    if not isinstance(saved, dict) or saved.get("format") != REPLAY_FORMAT:
        raise UsageError(f"--resume {path}: not the --json of a bisect this sdpa-bench can resume")
    mine = settings_of(query, plan)
    theirs = saved.get("settings") or {}
    differ = [f"{_shown(k, theirs.get(k))} there, {_shown(k, v)} here" for k, v in mine.items() if theirs.get(k) != v]
    if differ:
        raise UsageError(f"--resume {path}: that search was measured otherwise ({'; '.join(differ)}): its "
                         "verdicts are not this one's")
    try:
        steps = [step_of(d) for d in doc.get("steps") or ()]
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"--resume {path}: a step cannot be read ({type(exc).__name__}: {exc})") from None
    state = saved.get("state") if isinstance(saved.get("state"), dict) else {}
    floor = state.get("floor")
    other = next((s for s in steps if floor and s.kind != ENDPOINTS and s.floor != floor), None)
    if other is not None:  # the endpoints decide the floor every later step is judged at
        raise UsageError(f"--resume {path}: step {other.kind!r} of {str(other.head)[:12]} was judged at "
                         f"×{other.floor}, but the search's floor is ×{floor}: not one search's steps (a file edited "
                         "by hand?)")
    given = _floor_given(steps) if "labels" in state else None  # the endpoints decided it: their rows say what
    if given is not None and not (isinstance(floor, (int, float, type(None))) and math.isclose(floor or 0.0, given)):
        raise UsageError(f"--resume {path}: step {ENDPOINTS!r} of {str(steps[0].head)[:12]}: its rows give the "
                         f"search's floor ×{given:.6f} (√ of their smallest low end), but the search's floor is "
                         f"×{floor} (a file edited by hand?)")
    return Replay(str(path), steps, saved.get("state") or {}, doc.get("good_id") or "", doc.get("bad_id") or "",
                  list(doc.get("commit_ids") or ()))


class Resumable:
    """What a search does with an earlier one's steps (`replay`): take each that asks its next question, and restore
    what the earlier endpoints decided. The search (continuous.bisect._Searcher) holds the attributes used here."""

    replay: Replay | None
    result: Search
    reused: int
    labels: tuple[str, ...]
    memory: frozenset[str]
    floor: float
    select: str | None

    def _reused(self, kind: str, base: str, head: str, tentative: bool = False) -> Step | None:
        """The earlier search's step that asks this question next (the same kind, base and head), appended to this
        search's steps; None, and no more reuse, where it asked another (its verdicts led elsewhere) or had no more.
        `tentative`: a question it may not have asked (whether a commit was skipped): None and nothing more."""
        index = len(self.result.steps)
        if self.replay is None or index >= len(self.replay.steps):
            return None
        step = self.replay.steps[index]
        if (step.kind, step.base, step.head) != (kind, base, head) and tentative:
            return None
        if kind == ENDPOINTS and "labels" not in self.replay.state:  # stopped before its endpoints were read
            self.replay = None
            return None
        if (step.kind, step.base, step.head) != (kind, base, head):
            said = (f"resumed from {self.replay.source} up to step {index}, where that search asked another "
                    "question; measured from there.")
            self.result.notes.append(said)
            self.progress(said)  # while it runs, not only in the answer
            self.replay = None
            return None
        self.result.steps.append(step)
        self.reused += 1
        self.progress(f"step {index + 1} ({kind}): {head[:7] if self.line.unit == 'commit' else head} against "
                      f"{base[:7] if self.line.unit == 'commit' and base else base or '-'}: {step.verdict} (from "
                      f"{self.replay.source}, measured in {fmt_duration(step.seconds)})")
        self.on_step(self.result)
        return step

    def _keep_state(self) -> None:
        """What the endpoints decided, kept with the answer (and its --json) for a search that resumes this one."""
        self.result.state = {"labels": list(self.labels), "memory": sorted(self.memory), "floor": self.floor,
                             "select": self.select, "undecided": list(self.result.undecided),
                             "notes": list(self.result.notes)}
        self.on_step(self.result)

    def _restore(self, step: Step) -> bool:
        """`_endpoints` for endpoints an earlier search measured: its rows under test, floor, selection, undecided
        rows and notes. False where it found nothing to search."""
        state = self.replay.state if self.replay is not None else {}
        if "labels" not in state:
            raise UsageError(f"--resume {self.replay.source if self.replay else ''}: it holds its endpoints but not "
                             "what they decided")
        self.labels, self.memory = tuple(state["labels"]), frozenset(state.get("memory") or ())
        self.floor, self.select = float(state.get("floor") or 0.0), state.get("select")
        self.result.undecided = list(state.get("undecided") or ())
        self.result.notes.extend(n for n in state.get("notes") or ()  # the tree as the resuming run found it, only
                                 if n not in self.result.notes and not n.startswith(DIRTY_TREE))
        self.result.state = dict(state)
        if not self.labels:
            return False
        self.result.rows = step.rows
        self.progress("rows under test: " + "; ".join(r.text() for r in self.result.rows))
        return True


def _shown(key: str, value: object) -> str:
    """A setting as a person typed it: its option, rows as impl[case], lists comma-separated ("no -k": none)."""
    if key == "paired":  # the option is its opposite
        return "no --separate-processes" if value else "--separate-processes"
    if key == "config" and value:  # a path, where an older sdpa-bench kept one
        return f"a --config holding {value}" if str(value).startswith("sha256:") else f"--config {value!r}"
    flag = {"select": "-k", "rows": "--from rows"}.get(key, "--" + key.replace("_", "-"))
    if isinstance(value, (list, tuple)):
        text = ", ".join(f"{v[0]}[{v[1]}]" if isinstance(v, (list, tuple)) and len(v) == 2 else str(v) for v in value)
    else:
        text = repr(value) if isinstance(value, str) and value else str(value) if value not in (None, "") else ""
    return f"{flag} {text}" if text else f"no {flag}"
