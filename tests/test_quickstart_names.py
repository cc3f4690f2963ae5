"""The names `sdpa-bench quickstart --name` refuses, and what it says of a name it changed: the real command, in
process, writing the real template (a name of two words: tests/test_scaffold_asv.py; the refusals that pip and the
import system decide: tests/test_bad_inputs.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from sdpa_impls import scaffold
from sdpa_impls.cli import main


def written_at_the_top() -> list[str]:
    """The names an import finds in a plug-in's folder among what the template writes there: its folders and .py
    modules (benchmarks/, asv's suite, which `import benchmarks` run there found instead of the package)."""
    plan = scaffold.files(scaffold.TEMPLATE_NAMES, "sdpa-bench")
    tops = {rel.split("/")[0] if "/" in rel else rel.removesuffix(".py") if rel.endswith(".py") else "" for rel in plan}
    return sorted(name for name in tops if name.isidentifier())


@pytest.mark.parametrize("name", [*written_at_the_top(), "Benchmarks"])
def test_a_name_the_template_writes_at_the_plugins_top_is_refused(name: str, tmp_path: Path, capsys) -> None:
    """`--name benchmarks` wrote a plug-in whose own test failed to load it (`import benchmarks`, run in its folder,
    found asv's suite there, which has no class Benchmarks); tests/ and src/ are folders there as well."""
    assert {"benchmarks", "src", "tests"} <= set(written_at_the_top())
    assert main(["quickstart", "--name", name, "--dest", str(tmp_path / "plugin")]) == 2
    err = capsys.readouterr().err
    lowered = name.lower()
    assert f"'{lowered}' is the name of {lowered}/, which quickstart writes at the plug-in's top" in err, err
    assert "give --name another" in err and len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name, said", [
    ("class", "'class' is a Python keyword"), ("import", "'import' is a Python keyword"),
    ("Class", "'Class' (as 'class') is a Python keyword"),
    ("none", "'none' would name the plug-in's class None, a Python keyword"),  # wrote `class None(...)`: no import
    ("TRUE", "'TRUE' would name the plug-in's class True, a Python keyword"),
])
def test_a_python_keyword_is_refused_as_one(name: str, said: str, tmp_path: Path, capsys) -> None:
    """A keyword was refused as if it were not letters ("give --name a name of letters, digits and _")."""
    assert main(["quickstart", "--name", name, "--dest", str(tmp_path / "plugin")]) == 2
    err = capsys.readouterr().err
    assert said in err and "letters" not in err and len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name, package, note", [
    ("Kern", "kern", "'Kern' is lower-cased: the implementation and its package are kern, the distribution kern"),
    ("_Mine_", "mine", "'_Mine_' is lower-cased and stripped of its leading and trailing _: the implementation and "
                       "its package are mine, the distribution mine"),
    ("_mine", "mine", "'_mine' is stripped of its leading and trailing _: the implementation and its package are "
                      "mine, the distribution mine"),
    ("\u0130", "i", "'\u0130' is made a package name: the implementation and its package are i, the distribution i"),
])
def test_a_changed_name_says_how_it_changed(name: str, package: str, note: str, tmp_path: Path, capsys) -> None:
    """`--name Kern` said "'Kern' is not a Python name", which it is: it was only lower-cased (a name that is none,
    "My Attn", is still said to be none: tests/test_scaffold_asv.py)."""
    assert main(["quickstart", "--name", name, "--dest", str(tmp_path / "plugin")]) == 0
    err = capsys.readouterr().err
    assert f"note: {note}" in err and "is not a Python name" not in err, err
    assert (tmp_path / "plugin" / "src" / package / "__init__.py").is_file()


@pytest.mark.parametrize("blocking", ["tests", "src", ".github"])
def test_a_file_where_quickstart_writes_a_folder_is_refused_before_any_file(blocking: str, tmp_path: Path,
                                                                           capsys) -> None:
    """A file named like one of its folders was found only when the write reached it: files written before it, and
    a second quickstart then refused them as taken."""
    (tmp_path / blocking).write_text("notes\n")
    assert main(["quickstart", "--name", "flatq", "--dest", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{blocking} (a file, where quickstart writes a folder)" in err and len(err.strip().splitlines()) == 1, err
    assert [p.name for p in tmp_path.iterdir()] == [blocking]
