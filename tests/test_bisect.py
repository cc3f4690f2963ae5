"""`sdpa-bench bisect` on real planted histories: a plug-in written by `quickstart` in a new git repository, three
commits after GOOD (a pyproject.toml that does not parse, its fix, the toy kernel made three times slower); and three releases of a toy kernel library, the second one slower, as wheels pip finds without an index.
Every step is a real `continuous` comparison (real git, pip, pytest-benchmark and torch), restricted to one case.
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sdpa_impls.cli import bisect as bisect_cli, main
from sdpa_impls.continuous.bisect import search
from sdpa_impls.continuous.bisect_answer import CONFIRM, ENDPOINTS, SEARCH, UNDECIDED, Query, Search, comparison_budget
from sdpa_impls.continuous.bisect_render import as_dict, render
from sdpa_impls.continuous.bisect_replay import Replay
from sdpa_impls.continuous.comparison import Plan
from sdpa_impls.continuous.project import NONE, Project
from sdpa_impls.continuous.lines import between, commits
from sdpa_impls.continuous.revisions import describe, first_parents
from sdpa_impls.fmt import fmt_duration
from sdpa_impls.continuous.steps import (DIFFERENT, SAME, SKIPPED, UNKNOWN, RowStep, Step, rows_from_verdict, rows_outside,
                                         selection_of, unexplained)
from sdpa_impls.bench.grid import PRESETS
from sdpa_impls.errors import UsageError
from test_as_a_tool import PLUGIN, SLOWER
from test_continuous import command, commit, git

# one case, two runs a side, no adaptive rounds: a three-times slower kernel needs no more
FAST = ["--preset", "smoke", "-k", "L128-E64-fp32-fwd", "--max-time", "0.05", "--rounds", "2",
        "--adaptive-budget", "0"]
STEADY = [*FAST[:-1], "60"]  # where nothing changed: more rounds for a row two runs a side could not decide


def bisect(repo: Path, *args: str) -> tuple[int, str, str]:
    """`sdpa-bench bisect ARGS` in this process, from `repo` (its subprocesses use this interpreter)."""
    return command(repo, "bisect", *args)


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The plug-in's repository and its commits by name: good, broken, fixed, slow."""
    root = tmp_path_factory.mktemp("bisect")
    repo = root / "toy"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["quickstart", "--name", PLUGIN, "--dest", str(repo)]) == 0
    git(repo, "init", "-q", "-b", "main")
    out = {"repo": repo, "good": commit(repo, "toy attention from quickstart")}
    meta = repo / "pyproject.toml"
    meta.write_text(meta.read_text() + 'continuous_time = "median:25%"\n')  # a CI machine is shared with other jobs
    git(repo, "commit", "-q", "--amend", "-a", "--no-edit")
    out["good"] = git(repo, "rev-parse", "HEAD")
    declared = meta.read_text()
    meta.write_text(declared + "\nthis line is not TOML [\n")
    out["broken"] = commit(repo, "pyproject.toml that does not parse")
    meta.write_text(declared)
    out["fixed"] = commit(repo, "pyproject.toml fixed")
    kernel = repo / "src" / PLUGIN / "__init__.py"
    kernel.write_text(kernel.read_text().replace(SLOWER[0], SLOWER[1]))
    out["slow"] = commit(repo, "toy attention: the attention three times")
    return out


def test_the_planted_culprit_is_found_and_the_broken_commit_skipped(history: dict, tmp_path: Path) -> None:
    answer = tmp_path / "answer.json"
    # extra rounds where a step is undecided (at most 30 s), as a user's search has them: two runs a side once left
    # the confirming step of a ×3 change UNKNOWN on a 2-vCPU EPYC (its interval 1.9–4.9, one run left out 1.4)
    code, out, err = bisect(history["repo"], history["good"], "HEAD", *FAST[:-1], "30", "--json", str(answer),
                            "--markdown", str(tmp_path / "answer.md"))
    assert code == 1 and "Traceback" not in err, out + err
    found = json.loads(answer.read_text())
    assert code == 1 and found["answer"] == "culprit", out + err
    assert found["culprit"].startswith(history["slow"][:7]) and found["culprit"].endswith("three times"), out
    assert (found["culprit_id"], found["good_id"]) == (history["slow"], history["good"])  # full hashes, for scripts
    assert found["commit_ids"][-1] == found["bad_id"] == history["slow"]
    assert found["files"] == [f"M src/{PLUGIN}/__init__.py"]
    # the commit whose pyproject.toml does not parse was tried first (the middle of three), skipped, never blamed
    skipped = {name.split()[0]: why for name, why in found["skipped"].items()}
    assert list(skipped) == [history["broken"][:7]] and "pyproject.toml" in skipped[history["broken"][:7]], out
    kinds = [s["kind"] for s in found["steps"]]
    assert kinds[0] == "endpoints" and kinds[-1] == "confirm" and "skip" in kinds, kinds
    assert found["steps"][-1]["verdict"] == "DIFFERENT" and found["steps"][-1]["base"].startswith(
        history["fixed"][:7])  # confirmed against its parent
    assert found["comparisons"] <= comparison_budget(len(found["commits"])), found["comparisons"]
    assert [r["label"] for r in found["rows"]] == [f"{PLUGIN}[L128-E64-fp32-fwd]"]  # torch_sdpa is the yardstick
    assert "CULPRIT" in out and "## sdpa-bench bisect: CULPRIT `" in (tmp_path / "answer.md").read_text()


def test_an_interrupted_search_keeps_its_steps_and_resumes_from_them(history: dict, tmp_path: Path) -> None:
    """SIGTERM (a CI job's time limit; Ctrl-C is the same with exit 130) during a search: exit 143, every finished
    step already in --json (answer "interrupted"), and the last line says how to go on. --resume takes those steps
    as they were and measures only the rest, to the same culprit; a finished answer given to --resume measures
    nothing; a search measured otherwise is refused."""
    saved = tmp_path / "steps.json"
    proc = subprocess.Popen([sys.executable, "-m", "sdpa_impls", "bisect", history["good"], "HEAD", *FAST, "--json",
                             str(saved)], cwd=history["repo"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:  # the endpoints and the skipped commit are done
        with contextlib.suppress(OSError, ValueError):
            if len(json.loads(saved.read_text())["steps"]) >= 2:
                break
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    stopped = json.loads(saved.read_text())
    assert proc.returncode == 128 + signal.SIGTERM and "Traceback" not in err, err[-3000:]
    assert stopped["answer"] == "interrupted" and stopped["exit_code"] is None, stopped["answer"]
    done = [s["kind"] for s in stopped["steps"]]
    assert done[:2] == ["endpoints", "skip"] and "confirm" not in done, done
    head = git(history["repo"], "rev-parse", "HEAD")  # HEAD as the search read it: a CI job run again on a later
    command = shlex.join(["sdpa-bench", "bisect", history["good"], head, *FAST, "--json", str(saved), "--resume",
                          str(saved)])  # push, or a pull, moves HEAD, and the steps would be refused
    assert err.strip().splitlines()[-1].endswith(f"continue with: {command}"), err[-1000:]
    resumed = tmp_path / "resumed.json"
    code, out, err = bisect(history["repo"], history["good"], "HEAD", *FAST, "--json", str(resumed), "--resume",
                            str(saved))
    found = json.loads(resumed.read_text())
    assert code == 1 and found["culprit_id"] == history["slow"], out + err
    assert found["steps"][:len(done)] == stopped["steps"], err  # taken as they were measured
    assert f"step 1 (endpoints): {history['slow'][:7]} against {history['good'][:7]}: DIFFERENT (from {saved}" in err
    measured = [line for line in err.splitlines() if ": measuring" in line]
    assert len(measured) == len(found["steps"]) - len(done) > 0, err  # only what the interrupted search had not
    code, out, err = bisect(history["repo"], history["good"], "HEAD", *FAST, "--resume", str(resumed))
    assert code == 1 and "CULPRIT" in out and ": measuring" not in err, out + err  # a finished answer, replayed
    took = sum(step["seconds"] for step in found["steps"])  # the steps' own time, reused: not this run's 0 s
    assert took > 1 and out.splitlines()[0].endswith((f", {fmt_duration(took)}", f", {fmt_duration(took + 1)}")), out
    code, _, err = bisect(history["repo"], history["good"], "HEAD", *FAST, "--rounds", "3", "--resume", str(resumed))
    assert code == 2 and "that search was measured otherwise (--rounds 2 there, --rounds 3 here)" in err, err
    code, _, err = bisect(history["repo"], history["good"], "HEAD", *FAST, "--separate-processes", "--resume",
                          str(resumed))  # named by the option typed, not by the setting's own name
    assert code == 2 and "(no --separate-processes there, --separate-processes here)" in err, err
    gate = tmp_path / "gate.toml"  # a --config is its contents: another file's, or the file edited, is refused
    gate.write_text('continuous_time = "median:25%"\n')
    code, _, err = bisect(history["repo"], history["good"], "HEAD", *FAST, "--config", str(gate), "--resume",
                          str(resumed))
    assert code == 2 and "(no --config there, a --config holding sha256:" in err, err
    edits = {"config": lambda d: d["resume"]["settings"].update(config="sha256:0000000000000000"),
             "verdict": lambda d: d["steps"][-1].update(verdict="BANANA"),  # hand-edited: never steers a search
             "rows": lambda d: d["steps"][0]["rows"][0].update(verdict="SAME"),  # the step's DIFFERENT, contradicted
             # SAME throughout, with the row's interval wholly above the floor: a verdict its numbers do not give
             "interval": lambda d: (d["steps"][0]["rows"][0].update(verdict="SAME"),
                                    d["steps"][0].update(verdict="SAME")),
             "floor": lambda d: d["resume"]["state"].update(floor=d["resume"]["state"]["floor"] * 1.5)}
    for name, edit in edits.items():
        doc = json.loads(resumed.read_text())
        edit(doc)
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
        config = ["--config", str(gate)] if name == "config" else []
        code, _, err = bisect(history["repo"], history["good"], "HEAD", *FAST, *config, "--resume",
                              str(tmp_path / f"{name}.json"))
        said = ("a --config holding sha256:0000000000000000 there, a --config holding sha256:" if name == "config"
                else "but the search's floor is ×" if name == "floor" else "a step cannot be read (ValueError: step ")
        assert code == 2 and said in err and err.count("\n") == 1, (name, err)
    code, _, err = bisect(history["repo"], history["good"], "HEAD", *FAST, "--resume", str(resumed), "--markdown",
                          str(resumed))
    assert code == 2 and f"--markdown {resumed}: is also --resume, which writing it would destroy" in err, err
    assert json.loads(resumed.read_text())["culprit_id"] == history["slow"]
    stale = tmp_path / "stale.md"  # an earlier answer, of another search: gone once this one gives none (exit 2)
    stale.write_text("## sdpa-bench bisect: CULPRIT `abc1234`\n")
    code, _, err = bisect(history["repo"], history["good"], "HEAD", "-k", "L128 and", "--json", str(saved),
                          "--markdown", str(stale))
    assert code == 2 and not stale.exists() and not saved.exists(), err


def test_an_answer_that_could_not_tell_is_undecided_not_no_regression() -> None:
    """No row slower at the endpoints but one undecided: exit 4, said as such, never "no regression" (exit 0)."""
    row = "toy_attention[L128-E64-fp32-fwd]"
    search = Search("aaaaaaa good", "bbbbbbb bad", ["bbbbbbb bad"], answer=UNDECIDED, undecided=[row])
    assert search.exit_code == 4
    text = render(search)
    assert text.startswith("sdpa-bench bisect: UNDECIDED: GOOD and BAD could not be told apart on 1 row(s), which "
                           "may be slower or not; no other row is slower"), text  # not "none is slower": unjudged
    assert ("no benchmark was slower at BAD than at GOOD by more than the gate's floor, but the undecided ones could "
            "not be judged; nothing was searched.") in text, text
    assert "NO REGRESSION" not in text and "4: undecided" in text
    search.steps = [Step(ENDPOINTS, "aaaaaaa good", "bbbbbbb bad", UNKNOWN, 1.1),
                    Step("skip", "", "ccccccc x", SKIPPED, 1.1, seconds=29.0)]  # measured, then answered wrong
    assert "1 commit(s), 1 comparison(s) and 1 for skipped commit(s), " in render(search)  # it ran: counted, apart


def test_a_markdown_answer_over_many_rows_fits_in_one_comment() -> None:
    """--markdown is "for an issue or a pull request": a search over 1,500 slower rows (everything slower at BAD)
    wrote a body GitHub refuses. It is cut at a line, the answer first, with how much was left out."""
    from sdpa_impls.continuous.bisect_answer import INCONCLUSIVE
    from sdpa_impls.continuous.steps import RowStep
    from sdpa_impls.fmt import fit_comment

    rows = [RowStep(f"toy_attention[L{n}-E64-fp32-fwd]", 1.2, (1.15, 1.25), DIFFERENT) for n in range(1500)]
    found = Search("aaaaaaa good", "bbbbbbb bad", ["bbbbbbb bad"], answer="culprit", culprit="bbbbbbb bad", rows=rows,
                   steps=[Step(CONFIRM, "aaaaaaa good", "bbbbbbb bad", DIFFERENT, 1.03, rows=tuple(rows))],
                   files=["attention.py"])
    text, md = render(found), render(found, markdown=True)
    assert len(text.encode()) > 65536 and text.count("toy_attention[") == 2 * 1500  # under test, at the culprit
    assert len(md.encode()) <= 65536 and md.startswith("## sdpa-bench bisect: CULPRIT `bbbbbbb bad`"), md[:200]
    assert md.count("- 1500 rows, listed in --json and in the command's own output") == 2, md
    assert "- files changed: `attention.py`" in md and "toy_attention[" not in md
    left = Search("aaaaaaa good", "eeeeeee bad", ["ccccccc x", "ddddddd y", "eeeeeee bad"], answer=INCONCLUSIVE,
                  among=["ccccccc x", "ddddddd y", "eeeeeee bad"], rows=rows)  # the commits left, after the rows
    assert all(f"- `{c}`" in render(left, markdown=True) for c in left.among)
    cut = fit_comment(lambda fold: "## title\n" + "| row \u2028 |\n" * (20000 if fold else 30000))
    assert len(cut.encode()) <= 65536 and cut.startswith("## title\n| row \u2028 |\n")  # one line, as counted
    assert "more line(s) left out to fit one PR comment (65,536 bytes): the whole verdict is in --json" in cut


def test_commit_subjects_in_the_markdown_notes_are_code_spans() -> None:
    """A note names commits as the search does (`abc1234 subject`); a subject is anyone's text, so in Markdown it is
    a code span there too, as in the headline: never a mention, emphasis, link or HTML. The plain text is as said."""
    good, merge = "aaaaaaa good", "bbbbbbb Merge @octocat **bold** <img src=x> [l](https://x.example)"
    notes = [f"{merge} is a merge: the commits of the branch it brought in were one step of this search",
             f"the search ended at {merge}, but its parent {good} was not measured"]
    found = Search(good, merge, [merge], answer="culprit", culprit=merge, ids={good: "a" * 40, merge: "b" * 40},
                   notes=notes, steps=[Step(CONFIRM, good, merge, DIFFERENT, 1.03)])
    md = render(found, markdown=True)
    said = md.split("Notes:")[1]
    assert f"- `{merge}` is a merge" in said and f"its parent `{good}` was not" in said, said
    bare = re.sub(r"(`+).*?\1", "", said)  # what is left outside the code spans
    assert not any(t in bare for t in ("@octocat", "**", "<img", "](")), bare
    assert all(n in render(found) for n in notes)  # the plain text names them as written


def test_a_real_merge_subject_in_the_markdown_is_only_ever_code(tmp_path: Path) -> None:
    """A repository's own subjects (a mention, emphasis, HTML, a link, backticks) as the search names them, in the
    headline, the culprit's lines and the note on searching inside its merge: in Markdown, only inside code spans."""
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "a").write_text("a")
    good = commit(repo, "good `tick` @octocat")
    git(repo, "checkout", "-q", "-b", "side")
    (repo / "s").write_text("s")
    commit(repo, "side **bold**")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "Merge @octocat **bold** <img src=x> [l](https://x.example)", "side")
    merge = git(repo, "rev-parse", "HEAD")
    line = commits(Project("plugin", repo), good, merge, None)
    ids = {line.name(p): p for p in line.points}
    named = line.name(merge)
    found = Search(line.name(good), named, [named], answer="culprit", culprit=named, ids=ids,
                   steps=[Step(CONFIRM, line.name(good), named, DIFFERENT, 1.03)])
    found.notes += line.ended_at(found)
    assert found.notes and named in found.notes[0], found.notes
    md = render(found, markdown=True)
    bare = re.sub(r"(`+).*?\1", "", md)  # what is left outside the code spans
    assert not any(t in bare for t in ("@octocat", "**", "<img", "](", "tick")), bare


def test_a_saved_step_is_checked_at_the_factor_it_was_judged_at() -> None:
    """A step's floor is judged through its rule's text (six digits of the percent): a row SAME at that factor, just
    above the exact floor, is the search's own step, not a file edited by hand; one above the factor is refused."""
    from sdpa_impls.continuous.bisect_replay import step_of

    floor = (1.2345) ** 0.5  # 1.11108055..., judged as median:11.1081%
    def saved(high: float) -> dict:
        row = {"label": "naive[L128-E64-fp32-fwd]", "ratio": 1.05, "interval": [1.0, high], "verdict": "SAME"}
        return {"kind": SEARCH, "base": "aaaaaaa a", "head": "bbbbbbb b", "verdict": "SAME", "floor": floor,
                "rows": [row]}
    assert step_of(saved(1.1110808)).verdict == "SAME"  # above the exact floor, at or below the factor used
    with pytest.raises(ValueError, match="which its interval .* does not give at its floor"):
        step_of(saved(1.1111))


def test_a_saved_floor_its_endpoints_do_not_give_is_refused(tmp_path: Path) -> None:
    """The search's floor is what its endpoints' rows give (√ of their smallest low end): a saved state whose floor
    was edited, with its later steps' floors to match (or none yet), is refused, by one line naming the step; the
    file as the search wrote it resumes."""
    from sdpa_impls.continuous.bisect_replay import load_replay, settings_of

    query, plan, label = Query("a" * 40, "b" * 40), Plan(preset="smoke"), "naive[L128-E64-fp32-fwd]"
    def saved(floor: float, searched: bool) -> Path:
        row = {"label": label, "ratio": 1.5, "interval": [1.44, 1.6], "verdict": "DIFFERENT"}
        ends = {"kind": ENDPOINTS, "base": "aaaaaaa good", "head": "bbbbbbb bad", "verdict": "DIFFERENT",
                "floor": 1.03, "rows": [row]}
        step = {"kind": SEARCH, "base": "aaaaaaa good", "head": "ccccccc mid", "verdict": "DIFFERENT", "floor": floor,
                "rows": [row]}
        doc = {"answer": "interrupted", "steps": [ends, step] if searched else [ends],
               "resume": {"format": 1, "settings": settings_of(query, plan),
                          "state": {"labels": [label], "memory": [], "floor": floor, "select": None}}}
        path = tmp_path / f"{floor}-{searched}.json"
        path.write_text(json.dumps(doc))
        return path
    for searched in (False, True):
        assert load_replay(saved(1.2, searched), query, plan).state["floor"] == 1.2  # √1.44, as the search wrote it
        with pytest.raises(UsageError, match=r"step 'endpoints' of bbbbbbb bad: its rows give the search's floor "
                                             r"×1\.200000 .*, but the search's floor is ×1\.3 ") as raised:
            load_replay(saved(1.3, searched), query, plan)
        assert "\n" not in str(raised.value)


def test_an_answer_that_cannot_be_printed_leaves_no_markdown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`bisect --markdown F --json J > /dev/full`: exit 2, and no F for a CI step to post; J, the search's record that
    --resume reads, is kept (a search's finished steps are never lost)."""
    found = Search("aaaaaaa good", "bbbbbbb bad", ["bbbbbbb bad"],
                   ids={"aaaaaaa good": "a" * 40, "bbbbbbb bad": "b" * 40})
    monkeypatch.setattr(bisect_cli, "search", lambda *args, **kwargs: found)
    monkeypatch.setattr(bisect_cli, "find", lambda *args, **kwargs: None)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SDPA_BENCH_ENV_CACHE", str(tmp_path / "cache"))
    md, js = tmp_path / "b.md", tmp_path / "b.json"
    full, err = open("/dev/full", "w"), io.StringIO()  # noqa: SIM115 (closed below, its unwritten answer dropped)
    try:
        with monkeypatch.context() as m, contextlib.redirect_stderr(err):
            m.setattr("sys.stdout", full)
            code = main(["bisect", "v1", "v2", "--markdown", str(md), "--json", str(js)])
    finally:
        with contextlib.suppress(OSError):
            full.close()
    assert code == 2 and "cannot write to standard output" in err.getvalue(), err.getvalue()
    assert not md.exists() and json.loads(js.read_text())["answer"] == found.answer


def test_a_single_candidate_left_unconfirmed_is_named_plainly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    """The search ends at 1.1, whose parent is GOOD: its search step read DIFFERENT, the re-test of the same pair
    UNKNOWN (seen by a review). The answer names the one release left and both readings, never "one of 1". The steps
    are an earlier search's, replayed: nothing is measured (pip has no index, so a measurement would fail)."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.chdir(tmp_path)
    row = "toykernel[L128-E64-fp32-fwd]"

    def step(kind: str, base: str, head: str, verdict: str, ratio: float, low: float, high: float) -> Step:
        return Step(kind, f"toykernel=={base}", f"toykernel=={head}", verdict, 1.14,
                    (RowStep(row, ratio, (low, high), verdict),))

    steps = [step(ENDPOINTS, "1.0", "1.2", DIFFERENT, 1.35, 1.30, 1.40),
             step(SEARCH, "1.0", "1.1", DIFFERENT, 1.351, 1.283, 1.379),
             step(CONFIRM, "1.0", "1.1", UNKNOWN, 1.12, 1.02, 1.25)]
    replay = Replay("earlier.json", steps, {"labels": [row], "floor": 1.14, "select": "L128-E64-fp32-fwd"}, "1.0",
                    "1.2", ["1.1", "1.2"])
    query = Query("1.0", "1.2", ("toykernel",), package="toykernel", versions=("1.0", "1.1", "1.2"))
    found = search(query, Plan(preset="smoke"), Project(NONE, None), lambda text: None, replay)
    assert (found.answer, found.among, found.exit_code, found.steps) == ("inconclusive", ["toykernel==1.1"], 3, steps)
    text = render(found)
    assert text.startswith("sdpa-bench bisect: INCONCLUSIVE: toykernel==1.1 is the only release left, not confirmed "
                           "against its parent"), text
    assert "one of 1" not in text and "is one of" not in text, text
    assert ("against its parent it was UNKNOWN, not DIFFERENT; step 2 (search), the same pair, read DIFFERENT: not "
            "confirmed") in text, text


def test_a_culprit_is_said_to_explain_part_only_where_its_own_search_step_agrees() -> None:
    """The culprit against its parent clearly below BAD against GOOD is not enough: two steps' intervals can be
    apart by the machine's drift between them (seen: ×2.434 against ×2.853 for the only change in the range, whose
    search step read ×2.925). The culprit against GOOD must be below BAD too; SAME rows and memory are as before."""
    row = "toy[L128-E64-fp32-fwd]"

    def timed(ratio: float, low: float, high: float, verdict: str = DIFFERENT) -> dict[str, RowStep]:
        return {row: RowStep(row, ratio, (low, high), verdict)}

    endpoints, confirmed = timed(2.853, 2.736, 2.969), timed(2.434, 2.137, 2.614)
    assert unexplained(tuple(confirmed.values()), endpoints, timed(2.925, 2.515, 3.078)) == []
    assert unexplained(tuple(confirmed.values()), endpoints, {}) == []  # the culprit is BAD: nothing came later
    later = unexplained(tuple(confirmed.values()), endpoints, timed(2.45, 2.30, 2.60))
    assert len(later) == 1 and "a later change in the range adds to it" in later[0], later
    same = unexplained(tuple(timed(1.01, 0.98, 1.03, SAME).values()), endpoints, {})
    assert len(same) == 1 and "is not slower at the culprit" in same[0]
    memory = {row: RowStep(row, 1.2, None, DIFFERENT, memory="1.0 M → 1.2 M")}
    assert "peak memory" in unexplained(tuple(memory.values()), {row: RowStep(row, 1.5, None, DIFFERENT,
                                                                             memory="1.0 M → 1.5 M")}, {})[0]


def test_a_row_searched_by_memory_says_its_time_is_not_searched() -> None:
    """A row both bigger and slower between GOOD and BAD is searched by its exact peak memory alone: the answer said
    nothing of its time, and a slowdown from another commit went unnamed."""
    from sdpa_impls.continuous.steps import memory_notes
    from sdpa_impls.continuous.verdict import NOT_SLOWER, SLOWER, Row
    both = Row("toy", "L128-E64-fp32-fwd", (), (), ratio=5.04, decision=SLOWER)
    bigger = Row("toy", "L96-E32-fp32-fwd+bwd", (), (), ratio=1.01, decision=NOT_SLOWER)
    notes = memory_notes([both, bigger])
    assert notes[0].startswith("2 row(s) searched by peak memory") and len(notes) == 2, notes
    assert notes[1].startswith("toy[L128-E64-fp32-fwd] was also slower between GOOD and BAD (×5.040), but is "
                               "searched by its peak memory alone") and "-k '[toy-L128-E64-fp32-fwd]'" in notes[1]
    assert "from GOOD to that commit's parent" in notes[1]  # not only from it to BAD, empty where it is BAD
    assert memory_notes([]) == []


def test_endpoints_where_one_side_measured_none_of_the_rows_name_that_side() -> None:
    """Every judged row on one side only (the time reference on both): GOOD failed or skipped them (only BAD has
    them), or BAD did (only GOOD has them); a row whose test raised at BAD names BAD with its error."""
    from sdpa_impls.continuous.comparison import Comparison
    from sdpa_impls.continuous.steps import endpoint_failures
    from sdpa_impls.continuous.verdict import Row, SideBySide
    from sdpa_impls.gate.points import Point

    def point(impl: str) -> Point:
        return Point(impl, "c", 1e-3, (1e-3,) * 5, 1000, 0.0, 1e-3, name=f"x::test_sdpa[{impl}-c]")

    def failures(*rows: Row) -> tuple[str, list[str]]:
        both = Row("torch_sdpa", "c", (point("torch_sdpa"),), (point("torch_sdpa"),))
        report = SideBySide((both, *rows), (), (), (), 1.25, 0.05)
        return endpoint_failures(Comparison(report, "b", "h", "", (), (), {}), "g1 good", "b2 bad", "torch_sdpa")

    error, notes = failures(Row("mine", "c", (point("mine"),), ()))
    assert error.endswith("BAD b2 bad: measured none of the 1 benchmark(s) GOOD measured (first, mine[c]): it "
                          "failed or skipped them there") and notes[0].startswith("measured at GOOD only (1"), notes
    error, _ = failures(Row("mine", "c", (), (point("mine"),)))
    assert "GOOD g1 good: measured none of the 1 benchmark(s) BAD measured (first, mine[c])" in error, error
    error, notes = failures(Row("mine", "c", (point("mine"),), (), head_failed="RuntimeError: kernel crashed"))
    assert error.endswith("BAD b2 bad: mine[c]: RuntimeError: kernel crashed") and len(notes) == 1, (error, notes)
    assert failures(Row("mine", "c", (point("mine"),), (point("mine"),))) == ("", [])


def test_a_range_with_nothing_planted_is_no_regression(history: dict, tmp_path: Path) -> None:
    """GOOD against a commit with no change to the kernel: two runs a side alone left the row undecided on a busy
    machine (an honest answer, but not this test's), so its endpoints get the adaptive rounds a CI run has."""
    answer = tmp_path / "answer.json"
    readme = history["repo"] / "README.md"  # an uncommitted edit: searched by nobody, and said so
    text = readme.read_text()
    readme.write_text(text + "\nan edit not yet committed\n")
    try:
        code, out, err = bisect(history["repo"], history["good"], history["fixed"], *STEADY, "--json", str(answer))
    finally:
        readme.write_text(text)
    found = json.loads(answer.read_text())
    assert code == 0 and found["answer"] == "no regression" and not found["rows"], out + err
    assert [s["kind"] for s in found["steps"]] == ["endpoints"]  # nothing is searched
    assert "NO REGRESSION" in out
    assert "warning: the working tree has uncommitted changes (README.md)" in err
    assert any("which bisect does not measure" in note for note in found["notes"]), found["notes"]
    again = answer.with_name("again.json")  # resumed with the edit gone: that run's warning is not this one's note
    code, out, err = bisect(history["repo"], history["good"], history["fixed"], *STEADY, "--json", str(again),
                            "--resume", str(answer))
    resumed = json.loads(again.read_text())
    assert code == 0 and resumed["answer"] == "no regression" and "uncommitted" not in err, out + err
    assert not any("uncommitted" in note for note in resumed["notes"]) and "uncommitted" not in out, resumed["notes"]


@pytest.mark.parametrize("args, message", [
    (["no-such-rev"], "'no-such-rev' is not a revision of"),
    (["{slow}", "{good}"], "is not an ancestor of BAD ({good7} toy attention from quickstart): BAD is GOOD's ancestor, "
                           "swap them"),
    (["{good}", "{good}"], "GOOD and BAD are the same commit"),
    (["", "{slow}"], "GOOD is an empty revision name"),
    (["{good}", "{fixed}", "-k", "no_such_case"], "no benchmark of its suite is selected"),
    (["{good}", "--from", "missing.json"], "--from missing.json: cannot be read"),
    (["{good}", ""], "BAD is an empty revision name"),  # an unset variable in CI, never HEAD by default
    (["{good}", "{fixed}", "--json", "{repo}/pyproject.toml/answer.json"], "pyproject.toml is a file, not a folder)"),
    (["--package", "torch", "2.13.0", "2.14.1", "--versions", "2.14.0", "--pre"], "--versions names them"),
    (["--package", "six", "1.14.0", "1.17.0", "--versions", " , "], "--versions ' , ': names no release"),
    (["--package", "six", "1.14.0", "1.17.0", "--versions", "1.15.0,,1.16.0"], "an empty name between commas"),
    (["--package", "six", "1.14.0", "1.17.0", "--versions", "1.15.0,1.99.0"],  # was left out, unsaid
     "--versions: 1.99.0 not from GOOD 1.14.0 to BAD 1.17.0"),
    (["{good}", "{fixed}", "-k", "L128 and"], "-k 'L128 and' is no pytest -k expression: expected"),
    (["{good}", "{fixed}", "--impl", "nosuch"], "nothing can be searched: GOOD {good7}"),  # named as the user does
    (["{good}", "{fixed}", "--max-time", "-1"], "--max-time should be more than 0 seconds"),
    (["{good}", "{slow}", *FAST[:2], "-k", "torch_sdpa and L128-E64-fp32-fwd", *FAST[4:]],  # judged by nobody
     "only torch_sdpa was measured, the time reference"),
])
def test_unusable_input_is_one_message_and_exit_2(history: dict, args: list[str], message: str) -> None:
    filled = [a.format(**history) for a in args]
    message = message.format(good7=history["good"][:7])
    fast = [] if "-k" in filled else ["--preset", "smoke", "--rounds", "2"]
    code, out, err = bisect(history["repo"], *filled, *fast)
    assert code == 2 and message in err and "Traceback" not in err, out + err
    assert len([line for line in err.splitlines() if "error:" in line]) == 1, err


def test_a_json_path_that_is_no_file_is_refused_and_left_as_it_was(history: dict, tmp_path: Path) -> None:
    """The search so far replaces --json after every step (a new file renamed over it): over /dev/stdout, a link to
    a descriptor, that replaced the link (as root, the system's). Such a path is refused first, and kept."""
    pipe = tmp_path / "answer"
    os.mkfifo(pipe)
    code, out, err = bisect(history["repo"], history["good"], history["fixed"], "--json", str(pipe), "--max-time",
                            "-1")
    assert code == 2 and f"--json {pipe}: not a file (the search so far replaces it" in err and pipe.is_fifo(), err


def wheels(root: Path, slow_from: str, versions: list[str]) -> Path:
    """Wheels of a toy kernel library `toykernel` (a plug-in written by quickstart) at `versions`, its kernel three
    times slower from `slow_from` on and holding 1 MiB more while it runs, in a folder pip finds them in (no
    index)."""
    source, dist = root / "toykernel", root / "wheels"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["quickstart", "--name", "toykernel", "--dest", str(source)]) == 0
    meta, kernel = source / "pyproject.toml", source / "src" / "toykernel" / "__init__.py"
    declared, fast = meta.read_text(), kernel.read_text()
    for version in versions:
        meta.write_text(declared.replace('version = "0.1.0"', f'version = "{version}"', 1))
        slow = tuple(int(x) for x in version.split(".")) >= tuple(int(x) for x in slow_from.split("."))
        bigger = SLOWER[1].replace("        for _ in range(2):\n",
                                   "        scratch = torch.ones(1 << 18)  # noqa: F841 (held during the call)\n"
                                   "        for _ in range(2):\n", 1)
        kernel.write_text(fast.replace(SLOWER[0], bigger) if slow else fast)
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-index",
                        "--no-build-isolation", "-w", str(dist), str(source)], check=True, timeout=300,
                       capture_output=True)
    return dist


def test_the_release_that_made_a_library_slower_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dist = wheels(tmp_path, "1.1", ["1.0", "1.1", "1.2"])
    monkeypatch.setenv("PIP_FIND_LINKS", str(dist))  # pip's own configuration: `pip index versions` lists these
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    away = tmp_path / "away"  # no repository: the same sdpa-bench on both sides, only the release differs
    away.mkdir()
    answer = tmp_path / "answer.json"
    # peak memory is exact: one run a side decides it
    code, out, err = bisect(away, "--package", "toykernel", "1.0", "1.2", "--impl", "toykernel", *FAST, "--rounds",
                            "1", "--env-cache", str(tmp_path / "envs"), "--json", str(answer))
    assert code == 1 and "Traceback" not in err, out + err
    found = json.loads(answer.read_text())
    assert found["commits"] == ["toykernel==1.1", "toykernel==1.2"] and found["culprit"] == "toykernel==1.1", out
    assert found["files"] == ["toykernel 1.0 → 1.1"] and found["steps"][-1]["base"] == "toykernel==1.0"
    assert [s["kind"] for s in found["steps"]] == ["endpoints", "search", "confirm"], found["steps"]
    # 1 MiB more at the peak is exact: the row is searched by its memory, not its time
    row = found["steps"][-1]["rows"][0]
    assert row["memory"].endswith("(+1048576 B)") and row["verdict"] == "DIFFERENT", row
    # a release the index does not offer is named before either side's environment is built (one side's download
    # of a CUDA torch is several GB before pip says it cannot find the other)
    envs = tmp_path / "envs-refused"
    code, out, err = bisect(away, "--package", "toykernel", "1.0", "1.3", "--impl", "toykernel", *FAST,
                            "--env-cache", str(envs))
    assert code == 2 and "toykernel 1.3: not a release the package index offers (3 releases, 1.0 to 1.2: pip " \
        "index versions toykernel)" in err, out + err
    assert not envs.exists() or not any(envs.iterdir()), sorted(envs.iterdir())


def test_the_rows_of_a_failed_gate_are_what_is_searched(tmp_path: Path) -> None:
    """--from takes the rows a `continuous --json` verdict decided slower, and measures them with the time reference
    on their cases, whatever else the verdict holds."""
    verdict = tmp_path / "verdict.json"
    verdict.write_text(json.dumps({"rows": [
        {"impl": "fused", "case": "L1024-E64-fp32-fwd", "decision": "slower"},
        {"impl": "naive", "case": "L1024-E64-fp32-fwd", "decision": "undecided"},
        {"impl": "chunked", "case": "L128-E64-bf16-causal-fwd", "decision": "slower"},
        {"impl": "torch_sdpa", "case": "L1024-E64-fp32-fwd", "decision": None},
        {"impl": "naive", "case": "L128-E64-fp32-fwd", "decision": "not slower",  # bigger: searched by its memory
         "checks": [{"kind": "memory", "subject": "x", "status": "FAIL", "message": "+4 MiB"}]}]}))
    rows = rows_from_verdict(str(verdict))
    assert rows == (("fused", "L1024-E64-fp32-fwd"), ("chunked", "L128-E64-bf16-causal-fwd"),
                    ("naive", "L128-E64-fp32-fwd"))
    assert selection_of(rows, None, "torch_sdpa") == (
        "[fused-L1024-E64-fp32-fwd] or [chunked-L128-E64-bf16-causal-fwd] or [naive-L128-E64-fp32-fwd] or "
        "[torch_sdpa-L1024-E64-fp32-fwd] or [torch_sdpa-L128-E64-bf16-causal-fwd] or [torch_sdpa-L128-E64-fp32-fwd]")
    verdict.write_text(json.dumps({"rows": ["fused", "L1024-E64-fp32-fwd"]}))
    with pytest.raises(UsageError, match="not a verdict of `sdpa-bench continuous --json`"):
        rows_from_verdict(str(verdict))
    verdict.write_text(json.dumps({"rows": [{"impl": "fused", "case": "x", "decision": "not slower"}]}))
    with pytest.raises(UsageError, match="no benchmark in it was slower or bigger") as refused:
        rows_from_verdict(str(verdict))
    assert "wrong result" not in str(refused.value)
    verdict.write_text(json.dumps({"rows": [{"impl": "fused", "case": "x", "decision": None, "checks": [
        {"kind": "correctness", "subject": "x", "status": "FAIL", "message": "wrong, so not timed"}]}]}))
    with pytest.raises(UsageError, match="1 gave a wrong result, which bisect does not search: `git bisect run`"):
        rows_from_verdict(str(verdict))
    # a bisect's own answer has rows too, with no decision: named for what it is, not "nothing slower"
    answer = Search("aaaaaaa good", "bbbbbbb bad", ["bbbbbbb bad"], answer="culprit", culprit="bbbbbbb bad",
                    rows=(RowStep("fused[L1024-E64-fp32-fwd]", 1.5, (1.4, 1.6), DIFFERENT),))
    verdict.write_text(json.dumps(as_dict(answer)))
    with pytest.raises(UsageError, match=r"is the answer of `sdpa-bench bisect --json`; --from takes a verdict of "
                                         r"`sdpa-bench continuous --json`"):
        rows_from_verdict(str(verdict))


def test_a_verdict_of_another_preset_is_named_before_anything_is_measured() -> None:
    """A `continuous --json` verdict does not name its preset: --from rows whose cases this search's preset lacks were
    refused only after the endpoints, as "no benchmark of its suite is selected", or left out without a word."""
    rows = (("naive", "L128-E64-fp32-fwd"), ("naive", "L96-E32-fp32-fwd+bwd"))
    assert rows_outside(rows, "smoke", "v.json") == []
    with pytest.raises(UsageError) as refused:
        rows_outside(rows, "quick", "v.json")
    assert str(refused.value).startswith(
        "--from v.json: none of its rows' cases is in the preset quick this search runs (e.g. L128-E64-fp32-fwd): give "
        "the preset that verdict was measured with (--preset smoke") and str(refused.value).endswith("holds them all)")
    unknown = (("naive", "L7-E3-fp32-fwd"),)  # in no preset of this sdpa-bench: a revision's own, maybe
    assert rows_outside(unknown, "quick", "v.json") == ["naive[L7-E3-fp32-fwd]"]
    quick = PRESETS["quick"][0].id
    assert rows_outside((*rows, ("naive", quick)), "quick", "v.json") == [f"naive[{r}]" for _, r in rows]


def test_a_verdict_of_other_implementations_is_refused_not_answered(history: dict, tmp_path: Path) -> None:
    """--from a verdict whose slower rows this project does not measure (another repository's, an implementation
    since renamed): only the time reference would run, and "no regression" would be an answer about nothing."""
    verdict = tmp_path / "verdict.json"
    verdict.write_text(json.dumps({"rows": [{"impl": "mine", "case": "L128-E64-fp32-fwd", "decision": "slower"}]}))
    fast = [a for a in FAST if a not in ("-k", "L128-E64-fp32-fwd")]
    code, out, err = bisect(history["repo"], history["good"], "HEAD", *fast, "--from", str(verdict))
    assert code == 2 and "Traceback" not in err and "NO REGRESSION" not in out, out + err
    assert ("--from: none of its slower rows was measured here: mine is not among this search's implementations "
            "(only torch_sdpa ran)") in err, err


def test_a_local_build_is_the_release_it_builds() -> None:
    """An index of local builds (a CPU or CUDA index: 2.13.0+cpu) or with nightlies offers each release once, by its
    public version, between GOOD and BAD."""
    offered = ["2.12.0+cpu", "2.13.0", "2.13.0+cpu", "2.14.0+cpu", "2.15.0.dev20261101+cu126", "2.15.0+cpu", "2.16.0"]
    assert between(offered, "2.13.0", "2.15.0") == ["2.13.0", "2.14.0", "2.15.0.dev20261101", "2.15.0"]
    assert between(offered, "2.12.0+cpu", "2.14.0+cpu") == ["2.12.0+cpu", "2.13.0", "2.14.0+cpu"]
    with pytest.raises(UsageError, match="is not older than BAD 2.13.0: the same release: name two"):
        between(offered, "2.13.0+cpu", "2.13.0")
    with pytest.raises(UsageError, match="is not older than BAD 2.13.0: swap them"):
        between(offered, "2.14.0", "2.13.0")


def test_a_good_merged_in_from_a_side_branch_starts_the_line_at_its_merge(tmp_path: Path) -> None:
    """main: A, B, then the merge of a side branch (A, GOOD), then C. B lacks GOOD's code, so it is not between GOOD
    and C: the search tests the merge and C only."""
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "a").write_text("a")
    a = commit(repo, "A")
    (repo / "b").write_text("b")
    b = commit(repo, "B")
    git(repo, "checkout", "-q", "-b", "side", a)
    (repo / "s").write_text("s")
    good = commit(repo, "GOOD")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    merge = git(repo, "rev-parse", "HEAD")
    (repo / "c").write_text("c")
    c = commit(repo, "C")
    assert first_parents(repo, good, c) == [merge, c]
    assert first_parents(repo, a, c) == [git(repo, "rev-parse", "main~2"), merge, c]  # on the line: as before
    with pytest.raises(UsageError, match="they are on diverged branches; name as GOOD a commit both descend from"):
        first_parents(repo, b, good)  # swapping them would not help
    # a search that ends at the merge names the branch inside it to search next: from where it began to its tip
    line = commits(Project("plugin", repo), a, c, None)
    at = {describe(repo, x): x for x in (merge, c)}
    ended = Search(describe(repo, a), describe(repo, c), list(at), culprit=describe(repo, merge), ids=at)
    assert line.ended_at(ended) == [f"{describe(repo, merge)} is a merge: the commits of the branch it brought in were "
                                    f"one step of this search; to search among them: sdpa-bench bisect {a[:12]} "
                                    f"{good[:12]}"]
    left = dataclasses.replace(ended, culprit=None, among=[describe(repo, merge)])  # INCONCLUSIVE at it: the same
    assert line.ended_at(left) == line.ended_at(ended)
    # with the search's options (a preset, -k, rounds): the search inside measures as this one did
    argv = ("bisect", a, c, "--preset", "smoke", "-k", "L128 and fwd", "--rounds=2", "--separate-processes",
            "--json", "s.json", "--markdown=s.md", "--resume", "s.json")
    options = bisect_cli._options(argv)
    assert options == ["--preset", "smoke", "-k", "L128 and fwd", "--rounds=2", "--separate-processes"], options
    assert bisect_cli._options(("bisect", "-kfwd", a, c, "--resume=s.json")) == ["-kfwd"]  # -k's value glued to it
    assert bisect_cli._without_resume(("bisect", "-kfwd", a, "--resume", "s.json", c)) == ["bisect", "-kfwd", a, c]
    searched = commits(Project("plugin", repo), a, c, None, options).ended_at(ended)
    assert searched[0].endswith(f"to search among them: sdpa-bench bisect {a[:12]} {good[:12]} --preset smoke -k "
                                "'L128 and fwd' --rounds=2 --separate-processes"), searched
    assert line.ended_at(dataclasses.replace(ended, culprit=describe(repo, c))) == []  # one parent: nothing inside
    git(repo, "checkout", "-q", "--orphan", "other")  # a history of its own, merged in: no branch point to name
    (repo / "o").write_text("o")
    commit(repo, "unrelated")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "--allow-unrelated-histories", "-m", "merge other", "other")
    joined = git(repo, "rev-parse", "HEAD")
    assert line.ended_at(dataclasses.replace(ended, culprit=describe(repo, joined), ids={describe(repo, joined): joined})
                         ) == []  # the answer stands; nothing to add


def test_a_culprit_whose_parent_does_not_install_is_left_unconfirmed(history: dict, tmp_path: Path) -> None:
    """GOOD comes in from a side branch; the merge that brings it in, also the slower commit, is the line's only
    commit, and its first parent (off the line) has a pyproject.toml that does not parse. The confirmation cannot
    measure that parent: the answer names the merge as the only commit left and says why, exit 3 (it was exit 2, as
    if the input were unusable)."""
    repo = tmp_path / "toy"
    subprocess.run(["git", "clone", "-q", str(history["repo"]), str(repo)], check=True)
    git(repo, "checkout", "-q", "-b", "line", history["broken"])
    git(repo, "checkout", "-q", "-b", "side", history["good"])
    (repo / "README.md").write_text((repo / "README.md").read_text() + "\nA side branch's note.\n")
    good = commit(repo, "GOOD on a side branch")
    git(repo, "checkout", "-q", "line")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge side, the attention three times", "side")
    (repo / "pyproject.toml").write_text(git(repo, "show", f"{history['good']}:pyproject.toml") + "\n")
    kernel = repo / "src" / PLUGIN / "__init__.py"
    kernel.write_text(kernel.read_text().replace(SLOWER[0], SLOWER[1]))
    git(repo, "commit", "-q", "--amend", "-a", "--no-edit")
    merge = git(repo, "rev-parse", "HEAD")
    code, out, err = bisect(repo, good, "HEAD", *FAST, "--json", str(tmp_path / "answer.json"))
    found = json.loads((tmp_path / "answer.json").read_text())
    assert code == 3 and found["answer"] == "inconclusive" and "Traceback" not in err, out + err
    assert found["among_ids"] == [merge] and "is the only commit left, not confirmed against its parent" in out, out
    parent = next(name for name in found["skipped"] if name.startswith(history["broken"][:7]))
    assert "pyproject.toml" in found["skipped"][parent], found["skipped"]
    assert any(f"its parent {parent} could not be measured" in n for n in found["notes"]), found["notes"]


def test_a_kernel_that_raises_is_skipped_in_the_range_and_no_answer_at_an_end(history: dict, tmp_path: Path) -> None:
    """After GOOD: the slower kernel, then a commit whose kernel raises (it installs and imports), its fix, a README
    edit. The raising commit is skipped with the kernel's error, not read as "too noisy to tell", and the culprit is
    found past it; as GOOD or as BAD it is no answer (exit 2 naming it), where "no regression" hid it."""
    repo = tmp_path / "toy"
    subprocess.run(["git", "clone", "-q", str(history["repo"]), str(repo)], check=True)
    git(repo, "checkout", "-q", "-b", "line", history["slow"])
    kernel = repo / "src" / PLUGIN / "__init__.py"
    working = kernel.read_text()
    kernel.write_text(working.replace(SLOWER[1], SLOWER[1] + "        raise RuntimeError('kernel crashed')\n"))
    raises = commit(repo, "the kernel raises")
    kernel.write_text(working)
    commit(repo, "the kernel fixed")
    (repo / "README.md").write_text((repo / "README.md").read_text() + "\nA note.\n")
    commit(repo, "README")
    code, out, err = bisect(repo, history["fixed"], "HEAD", *FAST, "--json", str(tmp_path / "answer.json"))
    found = json.loads((tmp_path / "answer.json").read_text())
    assert code == 1 and found["culprit_id"] == history["slow"], out + err
    skipped = {name.split()[0]: why for name, why in found["skipped"].items()}
    assert list(skipped) == [raises[:7]] and "RuntimeError: kernel crashed" in skipped[raises[:7]], found["skipped"]
    for good, bad, said in ((history["fixed"], raises, f"BAD {raises[:7]} the kernel raises: {PLUGIN}[L128-E64-"),
                            (raises, "HEAD", f"GOOD {raises[:7]} the kernel raises: measured none of the 1")):
        code, out, err = bisect(repo, good, bad, *FAST)
        assert code == 2 and f"GOOD and BAD cannot be compared, so nothing can be searched: {said}" in err, out + err
