"""The working tree as `sdpa-bench continuous` builds it (HEAD's side, and both sides of an environment comparison):
the files as they are now, over a worktree of HEAD, so that a version asked of git builds as it does in the user's
own tree."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sdpa_impls.continuous.revisions import (checkout, checkout_working_tree, new_workdir, remove_workdir,
                                             tree_name)
from sdpa_impls.errors import UsageError
from test_continuous import commit, git

PYPROJECT = """[build-system]
requires = ["setuptools>=64", "setuptools-scm>=8"]
build-backend = "setuptools.build_meta"

[project]
name = "scmkern"
dynamic = ["version"]

[tool.setuptools_scm]
"""


def scm_repo(root: Path) -> str:
    """A package whose version comes from git (setuptools-scm), one commit: its hash."""
    (root / "scmkern").mkdir(parents=True)
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "scmkern" / "__init__.py").write_text("WHAT = 'committed'\n")
    (root / "scmkern" / "gone.py").write_text("")
    (root / "scmkern" / "link.py").symlink_to("gone.py")
    (root / "scmkern" / "data").mkdir()
    (root / "scmkern" / "data" / "table.txt").write_text("1\n")
    git(root, "init", "-q", "-b", "main")
    return commit(root, "scmkern")


def test_a_version_from_git_builds_from_the_working_tree_with_its_changes(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    head = scm_repo(root)
    (root / "scmkern" / "__init__.py").write_text("WHAT = 'edited'\n")  # uncommitted
    (root / "scmkern" / "new.py").write_text("")  # untracked
    (root / "scmkern" / "gone.py").unlink()  # deleted
    (root / "scmkern" / "link.py").unlink()
    (root / "scmkern" / "link.py").write_text("NOW = 'a file'\n")  # a link at HEAD, a file now
    shutil.rmtree(root / "scmkern" / "data")
    (root / "scmkern" / "data").write_text("2\n")  # a folder at HEAD, a file now
    (root / ".gitignore").write_text("build/\n")
    (root / "build").mkdir()
    (root / "build" / "junk.py").write_text("")  # ignored: stays behind
    work = new_workdir()
    try:
        tree = work / "head" / "tree"
        checkout_working_tree(root, tree)
        files = sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*") if ".git" not in p.parts
                       and not p.is_dir())
        assert files == [".gitignore", "pyproject.toml", "scmkern/__init__.py", "scmkern/data", "scmkern/link.py",
                         "scmkern/new.py"]
        assert (tree / "scmkern" / "data").read_text() == "2\n"
        assert not (tree / "scmkern" / "link.py").is_symlink()
        assert (tree / "scmkern" / "link.py").read_text() == "NOW = 'a file'\n"
        # the build pip runs for a side (no build isolation: the build's requirements are this environment's)
        built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                                "--no-index", "-q", "-w", str(tmp_path / "wheel"), str(tree)],
                               capture_output=True, text=True, env=os.environ | {"PIP_NO_INDEX": "1"})
        assert built.returncode == 0, built.stderr[-2000:]
        (wheel,) = (tmp_path / "wheel").glob("scmkern-*.whl")
        assert f"+g{head[:7]}" in wheel.name  # HEAD's commit, and a date for the uncommitted changes, as in root
        with zipfile.ZipFile(wheel) as archive:
            assert archive.read("scmkern/__init__.py") == b"WHAT = 'edited'\n"
        assert "with uncommitted changes to 7 files" in tree_name(root)
        assert str(tree) in git(root, "worktree", "list")
    finally:
        remove_workdir(root, work)
    assert str(tree) not in git(root, "worktree", "list") and not work.exists()
    assert (root / "scmkern" / "link.py").read_text() == "NOW = 'a file'\n"  # the user's tree untouched


def test_a_repository_without_a_commit_is_copied(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("X = 1\n")
    git(root, "init", "-q", "-b", "main")
    copy = tmp_path / "copy"
    checkout_working_tree(root, copy)
    assert (copy / "pkg" / "__init__.py").read_text() == "X = 1\n" and not (copy / ".git").exists()


def test_each_side_has_the_submodule_files_its_commit_records(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    git(lib, "init", "-q", "-b", "main")
    (lib / "lib.py").write_text("V = 1\n")
    (lib / "impl.py").write_text("")
    (lib / ".gitattributes").write_text("impl.py export-ignore\n")  # left out of an archive, not of a checkout
    first = commit(lib, "one")
    (lib / "lib.py").write_text("V = 2\n")
    commit(lib, "two")
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    git(root, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib), "sub")
    git(root / "sub", "checkout", "-q", first)
    old = commit(root, "sub at one")
    git(root / "sub", "checkout", "-q", "main")
    new = commit(root, "sub at two")
    (root / "sub" / "lib.py").write_text("V = 3\n")  # uncommitted, in the submodule
    git(root, "update-index", "--cacheinfo", f"160000,{'ab' * 20},sub")
    git(root, "commit", "-q", "-m", "sub at a commit its clone lacks")
    lost = git(root, "rev-parse", "HEAD")
    git(root, "reset", "-q", "--soft", new)
    bare = tmp_path / "bare"  # a clone whose submodule was never checked out
    git(tmp_path, "clone", "-q", str(root), str(bare))
    work = new_workdir()
    try:
        for name, commit_ in (("old", old), ("new", new)):
            checkout(root, commit_, work / name / "tree")
        checkout_working_tree(root, work / "now" / "tree")
        checkout(bare, new, work / "bare" / "tree")
        said = {name: (work / name / "tree" / "sub" / "lib.py").read_text() for name in ("old", "new", "now")}
        assert said == {"old": "V = 1\n", "new": "V = 2\n", "now": "V = 3\n"}
        assert all((work / name / "tree" / "sub" / "impl.py").is_file() for name in ("old", "new", "now"))
        assert not any((work / "bare" / "tree" / "sub").iterdir())  # empty, as in that clone
        with pytest.raises(UsageError, match=rf"submodule sub at abababababab, which {lost[:7]} records, is not in "
                                             "its clone"):
            checkout(root, lost, work / "lost" / "tree")
    finally:
        remove_workdir(root, work)
        remove_workdir(bare, work)
    assert git(root, "worktree", "list").count("\n") == 0 and not work.exists()


def test_no_file_is_written_or_removed_through_a_folder_turned_into_a_link(tmp_path: Path) -> None:
    """A tracked folder replaced by a link (to one's own checkout of a vendored library, say): git still lists the
    folder's files, which now lie beyond the link; the side's tree has the link and nothing is done through it."""
    root, mine = tmp_path / "repo", tmp_path / "my lib"
    for folder in (root / "vendor", root / "a", root / "b", mine):
        folder.mkdir(parents=True)
    (root / "vendor" / "x.txt").write_text("vendored\n")
    (root / "a" / "x.txt").write_text("a\n")
    (root / "b" / "x.txt").write_text("b\n")
    (mine / "x.txt").write_text("mine\n")
    git(root, "init", "-q", "-b", "main")
    commit(root, "three folders")
    shutil.rmtree(root / "vendor")
    (root / "vendor").symlink_to(mine)  # outside the repository
    shutil.rmtree(root / "a")
    (root / "a").symlink_to(root / "b")  # into it, by an absolute path
    before = git(root, "status", "--short")
    work = new_workdir()
    try:
        tree = work / "head" / "tree"
        checkout_working_tree(root, tree)
        assert os.readlink(tree / "vendor") == str(mine) and os.readlink(tree / "a") == str(root / "b")
        assert (tree / "b" / "x.txt").read_text() == "b\n"
    finally:
        remove_workdir(root, work)
    assert (mine / "x.txt").read_text() == "mine\n" and (root / "b" / "x.txt").read_text() == "b\n"
    assert git(root, "status", "--short") == before
