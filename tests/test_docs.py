"""The docs hold together without building the site: links and anchors resolve, the CI example runs real commands,
records say where they come from, and every path the code cites exists. (`tox -e docs` builds the site itself.)"""
from __future__ import annotations

import argparse
import configparser
import importlib
import re
import shlex
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from sdpa_impls.bench.result import Result
from sdpa_impls import settings
from sdpa_impls.cli import COMMANDS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "docs" / "_ext"))
import static_reference  # noqa: E402  (docs/_ext: the reference pages' generated parts)

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
RAW = DOCS / "records" / "data"
# what a reader reads: the README and every page of the site (raw data under records/data is linked, not checked)
PAGES = [ROOT / "README.md"] + sorted(p for p in DOCS.rglob("*.md") if RAW not in p.parents and "_build" not in p.parts)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


def slug(heading: str) -> str:
    """A heading's anchor as GitHub and MyST (myst_heading_anchors) write it."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"\s", "-", re.sub(r"[^\w\- ]", "", text))


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans are not links
    return [a or b for a, b in LINK.findall(text)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):  # http(s), mailto: the site's build does not fetch them
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_every_docs_path_the_repository_names_exists() -> None:
    """Code comments, tools and configs cite pages as `docs/...`: a moved page must take its citations along."""
    cited = re.compile(r"(?<![\w./])docs/[\w./*-]*\w")
    missing = []
    for path in [*ROOT.glob("*.toml"), *ROOT.glob("*.ini"), *ROOT.glob("*.json"), *ROOT.joinpath("sdpa_impls").rglob("*.py"),
                 *ROOT.joinpath("tools").glob("*"), *ROOT.joinpath("tests").rglob("*.py"),
                 *ROOT.joinpath("benchmarks").glob("*.py"), ROOT / ".ci" / "run"]:
        if not path.is_file() or (path.suffix not in {".py", ".toml", ".ini", ".json", ".sh"} and path.name != "run"):
            continue
        for ref in cited.findall(path.read_text(encoding="utf-8", errors="replace")):
            exists = any(ROOT.glob(ref)) if "*" in ref else (ROOT / ref).exists()
            if not exists and not ref.startswith("docs/targets"):  # an output folder in an example command
                missing.append(f"{path.relative_to(ROOT)}: {ref}")
    assert not missing, missing


def test_readme_is_a_landing_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 150
    two = readme[readme.index("## The two commands"):]
    two = two[:two.index("\n## ", 1)]
    assert "python3 -m pip install tox && tox -e sweep" in two and "python3 -m pip install tox && tox -e py" in two
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "python3 -m pip install tox && tox -e py\n" in ci and "\ntox -e docs\n" in ci
    add = readme[readme.index("## Add your kernel"):]
    assert len(add[:add.index("\n## ", 1)].splitlines()) <= 20


RECORD_FIELDS = ("date", "commit", "machine", "command", "raw data")


@pytest.mark.parametrize("record", sorted((DOCS / "records").glob("2*.md")), ids=lambda p: p.name)
def test_records_are_dated_and_say_where_they_come_from(record: Path) -> None:
    assert re.fullmatch(r"\d{4}-\d\d-\d\d-[a-z0-9]+(-[a-z0-9]+)*\.md", record.name)
    head = record.read_text(encoding="utf-8").split("\n\n", 2)[1]
    assert [line.split("|")[1].strip() for line in head.splitlines()[2:2 + len(RECORD_FIELDS)]] == list(RECORD_FIELDS)
    assert record.name in (DOCS / "records" / "index.md").read_text(encoding="utf-8")


def test_results_reference_names_every_field_of_a_point() -> None:
    page = (DOCS / "reference" / "results.md").read_text(encoding="utf-8")
    table = page[page.index("## The fields of one point"):]
    missing = [f for f in Result.__dataclass_fields__ if f"`{f}`" not in table]
    assert not missing, f"docs/reference/results.md does not describe {missing}"


def test_every_guide_and_reference_page_is_on_the_map() -> None:
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    pages = [p.relative_to(DOCS).with_suffix("").as_posix() for kind in ("guide", "reference", "explanation")
             for p in (DOCS / kind).glob("*.md")]
    assert pages and not [p for p in pages if f"{p}.md" not in index or f"\n{p}\n" not in index]


# --- the GitHub Actions workflows of the gate guide are the ones quickstart writes, and run real commands ---

TEMPLATE_WORKFLOWS = sorted((ROOT / "sdpa_impls" / "scaffold" / "template" / "github" / "workflows").glob("*.yml.tmpl"))


def gate_workflows() -> list[dict]:
    page = (DOCS / "guide" / "gate-your-ci.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```yaml\n(.*?)^```", page, re.S | re.M)
    assert sorted(blocks) == sorted(p.read_text(encoding="utf-8") for p in TEMPLATE_WORKFLOWS), \
        "the gate guide shows the workflows sdpa_impls/scaffold/template/github/workflows holds, as they are"
    return [yaml.safe_load(block) for block in blocks]


def command_parser(name: str) -> argparse.ArgumentParser:
    """`sdpa-bench NAME`'s parser, built as the program builds it; a usage error raises instead of exiting."""
    class Strict(argparse.ArgumentParser):
        def error(self, message: str) -> None:  # type: ignore[override]
            raise ValueError(f"sdpa-bench {name}: {message}")

    parser = Strict(prog=f"sdpa-bench {name}")
    importlib.import_module(COMMANDS[name][0]).add_arguments(parser)
    settings.add_opposites(parser)
    return parser


SHELL = {"test", "echo"}  # the workflows' own small shell steps


def check_command(line: str) -> None:
    words = shlex.split(re.sub(r"\$\{\{[^}]*\}\}", "X", line))
    if words[:1] == ["sdpa-bench"]:
        assert words[1] in COMMANDS, line
        command_parser(words[1]).parse_args(words[2:])
    elif words[:1] == ["tox"]:
        envs = {s.removeprefix("testenv:") for s in read_tox().sections()} | {"py"}
        assert words[1] == "-e" and words[2] in envs, line
    elif words[:4] == ["python", "-m", "pip", "install"]:
        extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
        for word in words[4:]:
            if word.startswith("-e"):
                continue
            if word.startswith(".["):
                assert set(word[2:-1].split(",")) <= set(extras), word
            elif word.startswith("sdpa-bench["):
                assert set(word[len("sdpa-bench["):word.index("]")].split(",")) <= set(extras), word
            elif word == "-c":
                continue
            elif word.endswith(".txt"):
                assert (ROOT / word).exists(), word
    elif words[:1] == ["gh"]:
        assert words[1:3] == ["pr", "comment"] and "--body-file" in words, line
    elif words[:1] and (words[0] in SHELL or re.fullmatch(r"[a-z_]+=.*", words[0])):
        pass
    else:
        raise AssertionError(f"the workflow runs a command this test does not know: {line}")


def read_tox() -> configparser.ConfigParser:
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    return tox


def test_the_ci_workflows_run_real_commands() -> None:
    workflows = gate_workflows()
    written: set[str] = set()
    posted: list[str] = []
    for workflow in workflows:
        trigger = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
        assert {"pull_request", "workflow_run"} & set(trigger)
        for job in workflow["jobs"].values():
            steps = job["steps"]
            runs = [line for s in steps if "run" in s for line in s["run"].splitlines() if line.strip()]
            if any(r.startswith("sdpa-bench continuous") for r in runs):
                checkout = [s for s in steps if str(s.get("uses", "")).startswith("actions/checkout")]
                assert checkout and checkout[0]["with"]["fetch-depth"] == 0, "continuous needs the full history"
                assert "pull_request" in trigger and workflow.get("permissions") == {"contents": "read"}
            for line in runs:
                check_command(line)
                words = shlex.split(re.sub(r"\$\{\{[^}]*\}\}", "X", line))
                written |= {Path(words[i + 1]).name for i, w in enumerate(words[:-1]) if w == "--markdown"}
                posted += [Path(words[i + 1]).name for i, w in enumerate(words[:-1]) if w == "--body-file"]
    assert posted and set(posted) <= written, "the comment posts the verdict the gate wrote"


def test_the_check_refuses_an_option_the_program_does_not_take() -> None:
    with pytest.raises(ValueError, match="unrecognized arguments"):
        check_command("sdpa-bench continuous origin/main --no-such-option")
    with pytest.raises(AssertionError):
        check_command("tox -e no-such-env")


# --- every `sdpa-bench` command a reader copies from the README or a guide parses with the program's own parser ---

def copied_commands(page: Path) -> list[str]:
    """Command lines of the page's code: fenced blocks and indented ones, continuation lines joined."""
    lines, fence = [], None
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fence = None if fence is not None else line[3:].strip()
        elif fence in ("bash", "console", "sh", ""):
            lines.append(line)
        elif fence is None and line.startswith("    "):
            lines.append(line[4:])
    code = "\n".join(lines)
    code = code.replace("\\\n", " ")
    out = []
    for line in code.splitlines():
        if not re.match(r"\s*([A-Z_][A-Z0-9_]*=\S*\s+)*(flock \S+ )?sdpa-bench ", line):
            continue
        words = shlex.split(line, comments=True)
        while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):  # VAR=value before the command
            words = words[1:]
        if words[:1] == ["flock"]:
            words = words[2:]
        if words[:1] == ["sdpa-bench"] and "..." not in words and not any("[" in w for w in words[1:]):
            out.append(shlex.join(words))
    return out


GUIDES = [ROOT / "README.md", *sorted((DOCS / "guide").glob("*.md"))]


@pytest.mark.parametrize("page", GUIDES, ids=lambda p: str(p.relative_to(ROOT)))
def test_commands_a_reader_copies_parse(page: Path) -> None:
    commands = copied_commands(page)
    bad = []
    for line in commands:
        try:
            check_command(line)
        except (ValueError, AssertionError) as exc:
            bad.append(f"{line}: {exc}")
    assert not bad, bad


def test_the_generated_reference_is_current() -> None:
    """docs/reference/cli.md and api.md hold the options and the API as text (they read on a repository browser
    too): they must say what the code says now (`python docs/_ext/static_reference.py` rewrites them)."""
    assert not static_reference.stale()
    assert not static_reference.cli_missing("")[:0] and static_reference.cli_missing("nothing")  # the check can fail


def test_every_documented_api_name_is_importable_from_the_package() -> None:
    """api.md: every name it shows from the protocol and the registry is importable from `sdpa_impls` itself."""
    import importlib

    import sdpa_impls

    shown = [name for module in ("sdpa_impls.protocol", "sdpa_impls.registry")
             for name, _ in static_reference._public(importlib.import_module(module))]
    assert "loaded" in shown and "with_op" in shown
    assert [name for name in shown if name not in sdpa_impls.__all__ or not hasattr(sdpa_impls, name)] == []
