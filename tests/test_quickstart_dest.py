"""What in `sdpa-bench quickstart --dest DIR` stops it before it writes anything: a broken link or a fifo where it
writes a file or a folder, and a module there that the plug-in's own test would import instead of the plug-in or of
what it imports (a file where it writes a folder: tests/test_quickstart_names.py). The real command, in process,
writing the real template."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from sdpa_impls import scaffold
from sdpa_impls.cli import main


def refused(dest: Path, capsys) -> str:
    """quickstart's one line of refusal into `dest`; asserts the exit code and that nothing was written."""
    before = sorted(p.name for p in dest.iterdir())
    assert main(["quickstart", "--name", "flatq", "--dest", str(dest)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in dest.iterdir()) == before, err
    return err


@pytest.mark.parametrize("at", ["README.md", "tests/test_flatq.py", "src/flatq/__init__.py"])
def test_a_broken_link_where_quickstart_writes_a_file_is_refused(at: str, tmp_path: Path, capsys) -> None:
    """A broken symbolic link is no file to os.path.exists, and the write followed it: the plug-in's file was
    written wherever the link pointed, outside the folder, and quickstart said it wrote it there."""
    dest, outside = tmp_path / "plugin", tmp_path / "outside"
    (dest / at).parent.mkdir(parents=True, exist_ok=True)
    outside.mkdir()
    (dest / at).symlink_to(outside / "target")
    err = refused(dest, capsys)
    assert f"{at} (a broken symbolic link)" in err and "overwrites nothing" in err, err
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("at, said", [
    ("README.md", "README.md (a fifo)"), ("tests", "tests (a fifo, where quickstart writes a folder)"),
    (".github", ".github (a broken symbolic link, where quickstart writes a folder)")])
def test_a_fifo_or_broken_link_in_the_way_is_refused_before_any_file(at: str, said: str, tmp_path: Path,
                                                                   capsys) -> None:
    """A fifo where a folder goes failed only when the write reached it (mkdir: File exists), after other files;
    one where a file goes was refused as if it were a file."""
    if "link" in said:
        (tmp_path / at).symlink_to(tmp_path / "nowhere")
    else:
        os.mkfifo(tmp_path / at)
    err = refused(tmp_path, capsys)
    assert said in err, err


def test_the_modules_the_plugin_imports_are_its_package_and_what_its_files_import() -> None:
    from sdpa_impls.scaffold.dest import imported

    plan = scaffold.files(scaffold.names_for("flatq"), "sdpa-bench")
    assert imported(plan)[0] == "flatq" and sorted(imported(plan)[1:]) == ["pytest", "sdpa_impls", "torch"]


@pytest.mark.parametrize("at", ["flatq.py", "flatq/__init__.py", "tests/flatq.py", "tests/flatq/__init__.py",
                                "torch.py", "sdpa_impls/__init__.py", "tests/pytest.py"])
def test_a_module_that_would_shadow_one_the_plugin_imports_is_refused(at: str, tmp_path: Path, capsys) -> None:
    """`flatq.py` in the folder was imported by the plug-in's own test (`python -m pytest` puts the folder first on
    the path; pytest, tests/): a PluginLoadError in a plug-in just written."""
    if at.endswith("/"):
        (tmp_path / at).mkdir(parents=True)
    else:
        (tmp_path / at).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / at).write_text("x = 1\n")
    err = refused(tmp_path, capsys)
    package = at.endswith("__init__.py")
    name = Path(at).parent.name if package else Path(at).name.removesuffix(".py")
    shown = at.removesuffix("__init__.py") if package else at
    assert f"{shown} is there, a module named {name}" in err, err
    assert "would import it instead" in err and "give --dest another folder" in err, err


@pytest.mark.parametrize("at", ["flatq", "tests/flatq", "torch"])
def test_a_folder_without_init_of_such_a_name_is_no_reason(at: str, tmp_path: Path) -> None:
    """A folder without __init__.py (data, notes) is a namespace portion: the installed package, a regular one later
    on the path, is imported over it, so quickstart writes beside it."""
    (tmp_path / at).mkdir(parents=True)
    (tmp_path / at / "notes.txt").write_text("data\n")
    assert main(["quickstart", "--name", "flatq", "--dest", str(tmp_path)]) == 0
    assert (tmp_path / "src" / "flatq" / "__init__.py").is_file()
