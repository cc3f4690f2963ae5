"""What quickstart takes from the machine and the user beyond the template's text: asv.conf.json's branch, torch
release and sdpa-bench requirement (sdpa_impls.scaffold.asv), and the names a --name becomes; real git, the real
template."""
from __future__ import annotations

import json
import os
import runpy
import shlex
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from sdpa_impls import scaffold
from sdpa_impls.scaffold import asv


def git(where: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, check=True).stdout


def test_the_branch_is_the_plugin_repositorys_own_or_none(tmp_path: Path) -> None:
    repo = tmp_path / "outer"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "trunk")
    assert asv.branch(repo) == "trunk"  # unborn: git init named it before any commit
    (repo / "plug").mkdir()
    assert asv.branch(repo / "plug") == "trunk"  # a folder inside the repository: the branch checked out there
    assert asv.branch(repo / "new" / "plug") == "trunk"  # not made yet: quickstart makes it there
    assert asv.branch(tmp_path) is None  # no repository
    git(repo, "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-q", "--allow-empty", "-m", "one")
    git(repo, "checkout", "-q", "--detach")
    assert asv.branch(repo) is None  # detached: nothing for asv to follow; quickstart takes this one instead
    assert asv.detached(repo) == ("trunk", "the one branch at HEAD") and asv.detached(tmp_path) is None
    git(repo, "branch", "other")  # two branches at HEAD: origin's default, else the template's
    assert asv.detached(repo)[0] == asv.TEMPLATE_BRANCH
    git(repo, "checkout", "-q", "trunk")
    git(tmp_path, "clone", "-q", str(repo), "ci")  # a CI checkout: origin/HEAD names the default branch
    git(tmp_path / "ci", "checkout", "-q", "--detach")
    git(tmp_path / "ci", "branch", "pr")
    git(tmp_path / "ci", "branch", "pr2")
    assert asv.detached(tmp_path / "ci") == ("trunk", "origin/trunk, origin's default branch")


@pytest.mark.parametrize("version, pin, noted", [
    ("2.13.0+cpu", "2.13.0", False), ("2.11.0+cu130", "2.11.0", False), ("2.14.1", "2.14.1", False),
    ("2.6.0a0+ecf3bae40a.nv25.01", asv.TEMPLATE_TORCH, True), ("2.10.0.dev20251101+cu128", asv.TEMPLATE_TORCH, True),
])
def test_torch_is_pinned_to_a_release_pip_can_find(version: str, pin: str, noted: bool) -> None:
    got, note = asv.torch_pin(version)
    assert got == pin and bool(note) == noted and (not noted or version in note)


def test_the_template_takes_every_replacement_and_stays_json(tmp_path: Path) -> None:
    requirement = "sdpa-bench @ file:///opt/my wheels/sdpa_bench-0.1.0-py3-none-any.whl"  # a space, quoted for asv
    plan = scaffold.files(scaffold.names_for("toy"), "sdpa-bench[test]>=0.1",
                          asv.replacements("2.11.0", "trunk", requirement), "trunk")
    text = plan["asv.conf.json"]
    conf = json.loads("\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//")))
    assert conf["project"] == "toy" and conf["branches"] == ["trunk"] and conf["matrix"]["req"]["torch"] == ["2.11.0"]
    assert shlex.split(conf["install_command"][1])[-1] == requirement  # one argument to pip, as asv splits it
    gate = next(line for line in plan["README.md"].splitlines() if "sdpa-bench continuous" in line)
    assert gate.split("#")[0].split() == ["sdpa-bench", "continuous", "trunk"] and "against trunk," in gate, gate
    assert "toy,torch_sdpa" in plan["benchmarks/bench_toy.py"] and ".asv/" in plan[".gitignore"].splitlines()
    with pytest.raises(RuntimeError, match="has no"):
        scaffold.files(scaffold.names_for("toy"), "x", {'"no such text"': "y"})


def test_sdpa_bench_is_installed_from_where_this_one_came_from(tmp_path: Path) -> None:
    """The requirement names this install's origin (its PEP 610 record, read by this interpreter outside the tree,
    where no egg-info of the source folder stands in for it); where that is a file that is gone (tox's editable
    install, as in this project's CI, records a temporary wheel it then deletes), a note says asv cannot use it."""
    code = ("import json; from importlib import metadata; from sdpa_impls.scaffold import asv\n"
            "print(json.dumps([metadata.distribution('sdpa-bench').read_text('direct_url.json'), "
            "*asv.sdpa_requirement()]))")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    recorded, requirement, note = json.loads(done.stdout)
    if recorded:  # this test environment's own install: a folder, an archive or a git address
        url = json.loads(recorded)["url"]
        assert requirement.startswith("sdpa-bench @ ") and url.split("://")[-1] in requirement
        gone = urlparse(url).scheme == "file" and not Path(unquote(urlparse(url).path)).exists()
        assert ("which is no longer there: asv's own environments cannot install it" in note) == gone, (url, note)
    else:
        assert (requirement, note) == (f"sdpa-bench=={scaffold_version()}", "")


def scaffold_version() -> str:
    import sdpa_impls

    return sdpa_impls.__version__


def test_a_name_that_is_normalized_says_what_it_became(tmp_path: Path, capsys) -> None:
    from sdpa_impls.cli import main

    assert main(["quickstart", "--name", "My Attn", "--dest", str(tmp_path / "a")]) == 0
    err = capsys.readouterr().err
    assert ("note: 'My Attn' is not a Python name: the implementation and its package are my_attn, the distribution "
            "my-attn") in err
    assert main(["quickstart", "--name", "mine", "--dest", str(tmp_path / "b")]) == 0
    assert "is not a Python name" not in capsys.readouterr().err  # a name used as given is not remarked on


def test_the_template_copied_by_hand_installs_sdpa_bench_from_no_index() -> None:
    """The guide tells a repository quickstart did not write to copy the template: its install of sdpa-bench must
    name a place to fill in, never a bare name that pip would fetch from whichever index serves it."""
    text = (scaffold.TEMPLATE / "asv.conf.json.tmpl").read_text(encoding="utf-8")
    conf = json.loads("\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//")))
    install = shlex.split(conf["install_command"][-1])
    assert install[-1] == asv.TEMPLATE_SDPA and install[-1].startswith("git+https://HOST/OWNER/"), install
    assert not any(word.startswith("sdpa-bench") for word in install), install


def test_a_plugin_in_a_subfolder_of_a_repository_is_told_it_must_be_at_a_root(tmp_path: Path) -> None:
    """quickstart into a subfolder of a repository does not suggest a nested `git init`, and says why; its
    asv.conf.json names the repository's top and the subfolder, which real asv finds and measures (this Python, the
    smoke preset's forward cases of naive); continuous run there names the root it read and why the package must sit
    there."""
    import contextlib
    import io
    import os

    from sdpa_impls.cli import main

    outer = tmp_path / "mono"
    outer.mkdir()
    git(outer, "init", "-q", "-b", "trunk")
    assert asv.enclosing(outer) is None and asv.enclosing(tmp_path) is None
    sub = outer / "kernels" / "mine"
    sub.mkdir(parents=True)
    assert asv.enclosing(sub) == outer.resolve()
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert main(["quickstart", "--name", "mono_kernel", "--dest", str(sub)]) == 0
    assert f"{sub} is inside the git repository {outer.resolve()}" in err.getvalue()
    assert "git init" not in out.getvalue() and "continuous" not in out.getvalue(), out.getvalue()
    assert asv.repo_place(sub) == ("../..", "kernels/mine") and asv.repo_place(outer) == (".", "")
    git(outer, "add", "-A")
    git(outer, "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-qm", "mono")
    conf = json.loads("\n".join(line for line in (sub / "asv.conf.json").read_text().splitlines()
                                if not line.lstrip().startswith("//")))
    assert (conf["repo"], conf["repo_subdir"], conf["branches"]) == ("../..", "kernels/mine", ["trunk"]), conf
    env = {**os.environ, "HOME": str(tmp_path), "SDPA_BENCH_PRESET": "smoke", "SDPA_BENCH_IMPLS": "naive"}
    for args in (["machine", "--yes"], ["run", "--python=same", "--quick", "--set-commit-hash", "trunk", "--bench",
                                        r"^bench_mono_kernel\.Forward\.track_peak_memory"]):
        done = subprocess.run([sys.executable, "-m", "asv", *args], cwd=sub, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    head = git(outer, "rev-parse", "HEAD").strip()
    assert list((sub / ".asv" / "results").glob(f"*/{head[:8]}-*.json")), done.stdout[-3000:]  # the top's commit
    here = Path.cwd()
    os.chdir(sub)
    try:
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = main(["continuous", "HEAD", "--preset", "smoke"])
    finally:
        os.chdir(here)
    assert code == 2 and f"{outer.resolve()} has no pyproject.toml (the repository's root;" in err.getvalue()
    assert "so the package must sit at its root" in err.getvalue(), err.getvalue()


def test_the_plugins_suite_without_sdpa_bench_says_so_in_its_error(tmp_path: Path) -> None:
    """asv imports the benchmark file in an environment without sdpa-bench (an `existing:` one): the error names
    what is missing and where, not a bare ModuleNotFoundError. Run with -I -S: no site-packages, so no sdpa_impls."""
    plan = scaffold.files(scaffold.names_for("toy"), "x")
    bench = tmp_path / "bench_toy.py"
    bench.write_text(plan["benchmarks/bench_toy.py"], encoding="utf-8")
    done = subprocess.run([sys.executable, "-I", "-S", str(bench)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1 and last.startswith(f"ImportError: sdpa-bench is not installed in {sys.executable}:"), \
        done.stderr
    assert "--environment existing:PYTHON" in last and "ModuleNotFoundError" not in done.stderr, done.stderr


@pytest.mark.parametrize("value", [None, "", " ", ",,", "naive"])
def test_the_plugins_suite_measures_the_plugin_unless_impls_name_others(value: str | None, tmp_path: Path,
                                                                        monkeypatch) -> None:
    """SDPA_BENCH_IMPLS unset or empty (a CI template's "") is the plug-in and torch_sdpa, never every
    implementation; a name given is kept. The real template file, executed; the suite reads the variable."""
    from sdpa_impls.suite import asv_suite

    plan = scaffold.files(scaffold.names_for("toy"), "x")
    bench = tmp_path / "bench_toy.py"
    bench.write_text(plan["benchmarks/bench_toy.py"], encoding="utf-8")
    if value is None:
        monkeypatch.delenv("SDPA_BENCH_IMPLS", raising=False)
    else:
        monkeypatch.setenv("SDPA_BENCH_IMPLS", value)
    runpy.run_path(str(bench))
    assert os.environ["SDPA_BENCH_IMPLS"] == ("naive" if value == "naive" else "toy,torch_sdpa")
    if value == "naive":
        assert asv_suite.impl_names() == ["naive"]


def test_quickstart_on_a_detached_head_follows_the_branch_there_and_says_so(tmp_path: Path, capsys) -> None:
    from sdpa_impls.cli import main

    git(tmp_path, "init", "-q", "-b", "trunk")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-q", "--allow-empty", "-m", "one")
    git(tmp_path, "checkout", "-q", "--detach")  # as a CI checkout is
    assert main(["quickstart", "--name", "det", "--dest", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "asv.conf.json follows the branch 'trunk' (the one branch at HEAD)" in err, err
    assert '"branches": ["trunk"]' in (tmp_path / "asv.conf.json").read_text() and "git init" not in out, out


def test_quickstart_in_a_locale_that_cannot_read_utf8_writes_the_branch_git_names(tmp_path: Path) -> None:
    """git prints a branch name in UTF-8 whatever the locale: read in the locale's encoding (ASCII under LC_ALL=C
    without Python's UTF-8 mode) it had ended quickstart with an error it did not foresee; and its path, which that
    locale cannot decode, printed to a UTF-8 stdout (PYTHONIOENCODING=utf-8, as under tox) likewise."""
    repo = tmp_path / "plug é"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "zweig-ä")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-q", "--allow-empty", "-m", "one")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LC_") and k not in ("LANG", "PYTHONUTF8")}
    for detach in (False, True):  # on the branch, and a CI checkout's detached HEAD at it
        dest = repo / f"p{int(detach)}"
        if detach:
            git(repo, "checkout", "-q", "--detach")
        done = subprocess.run([sys.executable, "-m", "sdpa_impls", "quickstart", "--name", "loc", "--dest",
                               os.fsencode(dest)], capture_output=True, timeout=300,
                              env=env | {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0",
                                         "PYTHONIOENCODING": "utf-8"})  # as tox sets it: the path printed whole
        assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
        assert os.fsencode(dest) in done.stdout, done.stdout
        text = (dest / "asv.conf.json").read_text(encoding="utf-8")
        conf = json.loads("\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//")))
        assert conf["branches"] == ["zweig-ä"] and conf["repo_subdir"] == f"p{int(detach)}", conf


def test_a_branch_name_that_is_not_utf8_is_no_name_for_asv_conf() -> None:
    """Decoded with U+FFFD for its bytes it would name, in asv.conf.json, a branch that does not exist."""
    from sdpa_impls import gitio

    assert gitio.ref_name(os.fsdecode("zweig-ä".encode())) == "zweig-ä"
    assert gitio.ref_name(os.fsdecode(b"zweig-\xe4")) is None and "\ufffd" in gitio.utf8(os.fsdecode(b"zweig-\xe4"))
