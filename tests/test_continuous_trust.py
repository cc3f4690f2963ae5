"""What `continuous` promises a CI, as pip, tox, uv and git promise it: every failure that is not the answer is
exit 2 with one line (never 1, never a traceback); no credential reaches any output or file; a cached environment
is reused only where pip would build the same one, is bounded, and is never trusted half-built; the working tree's
symbolic links stay links; a killed run's leftovers are swept; and what people wrote is text in a PR comment.

Real git, real pip (no index), real virtual environments layered on the test environment, real processes killed.
"""
from __future__ import annotations

import contextlib
import functools
import fcntl
import io
import json
import os
import shlex
import signal
import subprocess
import sys
import shutil
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sdpa_impls.cli import main
from sdpa_impls.continuous import envcache, envkey, envlock
from sdpa_impls.continuous.envs import INTERPRETER_NAME, EnvSpec, parse_spec, requirement_lines
from sdpa_impls.continuous.render import render
from sdpa_impls.continuous.revisions import new_workdir, snapshot_working_tree, sweep_stale
from sdpa_impls.continuous.verdict import judge
from sdpa_impls.credentials import redact
from sdpa_impls.errors import GateInputError, SideError, UsageError
from sdpa_impls.gate.config import config_from_dict
from sdpa_impls.gate.points import Point
from test_continuous import commit, continuous, git

SECRET = "s3cr3t-Pa55"
QUICK = ["--preset", "smoke", "--rounds", "1", "--max-time", "0.02", "--adaptive-budget", "0"]


@pytest.fixture()
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """pip sees no index; the environment cache is this test's own."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("SDPA_BENCH_ENV_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def plugin_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A quickstart plug-in in a git repository of two commits."""
    root = tmp_path_factory.mktemp("trust") / "toy"
    assert main(["quickstart", "--name", "toy_trust", "--dest", str(root)]) == 0
    git(root, "init", "-q", "-b", "main")
    commit(root, "toy")
    (root / "README.md").write_text("changed\n")
    commit(root, "docs")
    return root


def one_message(code: int, out: str, err: str) -> str:
    assert code == 2 and out == "" and "Traceback" not in err, (code, out, err)
    said = [line for line in err.splitlines() if not line.startswith("[")]  # progress lines start with [
    assert len(said) == 1 and said[0].startswith("sdpa-bench continuous: error: "), err
    return said[0]


def test_a_repository_git_refuses_as_another_users_is_said_in_gits_words(plugin_repo: Path, tmp_path: Path) -> None:
    """A checkout owned by another user (a container's mounted one): git refuses it ("dubious ownership", with the
    safe.directory fix), which had read "is not inside a git repository"."""
    theirs = tmp_path / "theirs"
    shutil.copytree(plugin_repo, theirs, symlinks=True)
    try:
        for folder, _, files in os.walk(theirs):
            for name in [".", *files]:
                os.chown(os.path.join(folder, name), 12345, 12345, follow_symlinks=False)
    except PermissionError:
        pytest.skip("only root can give the copy to another user here")
    if subprocess.run(["git", "-C", str(theirs), "status"], capture_output=True).returncode == 0:
        pytest.skip("git here trusts repositories of other users (safe.directory)")
    said = one_message(*continuous(theirs, "HEAD~1", *QUICK))
    assert "git refuses the repository that holds" in said and "dubious ownership" in said, said
    assert "safe.directory" in said, said


def executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_inputs_that_cannot_be_used_are_exit_2_with_one_line(plugin_repo: Path, offline: Path, tmp_path: Path) -> None:
    no_shebang = executable(tmp_path / "no-shebang", "print('not a script the kernel can run')\n")
    fake = executable(tmp_path / "fake-python", "#!/bin/sh\necho this-is-not-json\n")
    version_only = executable(tmp_path / "version-only", "#!/bin/sh\necho 3.11.7\n")  # says a version, runs nothing
    cases = [
        (["--head-env", "torch 'x"], "cannot be read as a shell line"),
        (["--head-env", "  "], "--head-env: an empty value; give one, or leave --head-env out"),
        (["--head-env", os.fsdecode(b"torch ./wh\xffeels")], "holds a byte that is not UTF-8 (at character 11)"),
        (["--head-env", str(no_shebang)], "cannot be run as a Python interpreter"),
        (["--head-env", "python9.99"], "python9.99: no such interpreter on PATH"),
        (["--head-env", "torch", "--env-cache", "/etc/hostname/cache"], "cannot be used as the environment cache"),
        (["--base-env", sys.executable, "--head-env", str(fake)], "fake-python: does not run as a Python interpreter"),
        (["--base-env", sys.executable, "--head-env", str(version_only)], "its import check printed no result"),
        (["no-such-revision"], "'no-such-revision' is not a revision"),
        ([""], "BASE is an empty revision name"),
        (["HEAD~1", "HEAD", "--round-timeout", "0.5"], "its benchmark run took more than 0.5 s (--round-timeout)"),
    ]
    for args, words in cases:
        message = one_message(*continuous(plugin_repo, *args, *QUICK))
        assert words in message, (args, message)


def test_a_revision_whose_constraints_are_not_utf8_is_one_message(plugin_repo: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    snapshot_working_tree(plugin_repo, repo)
    git(repo, "init", "-q", "-b", "main")
    (repo / "constraints-cpu.txt").write_bytes(b"torch==2.13.0 # \xff\xfe\n")
    first = commit(repo, "pins in Latin-1")
    (repo / "pyproject.toml").write_text((repo / "pyproject.toml").read_text().replace('"torch>=2.5"', '"torch>=2.4"'))
    second = commit(repo, "another declaration")
    message = one_message(*continuous(repo, first, second, *QUICK))
    assert "constraints-cpu.txt: not UTF-8 text" in message


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=st.text(max_size=24), revision=st.text(max_size=12))
@example(spec="-:", revision="-x")  # read by argparse as options: its own error, exit 2
@example(spec="~0", revision="")  # ~user of no user: pathlib raises, the SPEC is one line naming it
def test_any_spec_or_revision_is_0_1_or_2_and_never_a_traceback(plugin_repo: Path, offline: Path, spec: str,
                                                                  revision: str) -> None:
    words = spec.split()
    try:
        real = len(words) == 1 and (INTERPRETER_NAME.fullmatch(words[0]) or Path(words[0]).expanduser().exists())
    except RuntimeError:  # ~user of no user: no path at all
        real = False
    names = subprocess.run(["git", "-C", str(plugin_repo), "rev-parse", "--verify", "--quiet", revision + "^{commit}"],
                           capture_output=True).returncode == 0 if "\0" not in revision else False
    # a real interpreter, folder or revision makes a whole comparison, which the other tests run
    for args, whole in ((["--head-env", spec], real), ([revision], names)):
        if whole or "\0" in "".join(args):  # no command line carries a NUL
            continue
        code, out, err = continuous(plugin_repo, *args, *QUICK)
        assert code in (0, 1, 2) and "Traceback" not in err, (args, code, err)


def test_a_password_in_a_spec_is_in_no_byte_written(offline: Path, tmp_path: Path) -> None:
    """Two environments from a folder outside any repository, the head's SPEC naming an index with a password;
    torch==2.13.0 is satisfied already, so pip never asks it. The comparison runs to its end."""
    import torch

    away = tmp_path / "away"
    away.mkdir()
    spec = (f"--extra-index-url https://__token__:{SECRET}@127.0.0.1:9/simple?sig={SECRET} "  # and a signed URL's
            f"torch=={torch.__version__.split('+')[0]}")
    runs = tmp_path / "runs"
    code, out, err = continuous(away, "--base-env", sys.executable, f"--head-env={spec}", "--impl", "naive", *QUICK,
                                "--markdown", str(tmp_path / "v.md"), "--json", str(tmp_path / "v.json"),
                                "--keep-runs", str(runs))
    assert code in (0, 1), err
    assert "__token__:****@127.0.0.1:9/simple?sig=****" in out + err  # it is shown, masked
    written = [p for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink()]
    assert (tmp_path / "v.md").is_file() and list(offline.glob("*/" + envcache.READY)) and list(runs.iterdir())
    leaks = [str(p) for p in written if SECRET.encode() in p.read_bytes()]
    assert SECRET not in out + err and not leaks, leaks


def test_a_token_in_a_requirements_url_is_not_kept_in_the_environment(tmp_path: Path) -> None:
    """pip records a URL requirement's address, its query included (?token=...), in the installed package's
    direct_url.json: a CI job's token stayed in the cache for as long as the environment."""
    import http.server
    import zipfile

    from sdpa_impls.continuous.envbuild import build

    wheel = tmp_path / "site" / "tokpkg-1.0-py3-none-any.whl"
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w") as z:  # the least wheel pip installs
        z.writestr("tokpkg.py", "")
        z.writestr("tokpkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: tokpkg\nVersion: 1.0\n")
        z.writestr("tokpkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\n"
                                                 "Tag: py3-none-any\n")
        z.writestr("tokpkg-1.0.dist-info/RECORD", "")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(wheel.parent))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_port}/{wheel.name}?token={SECRET}"
        try:
            build(tmp_path / "env", ["--no-deps", f"tokpkg @ {url}"], what="a URL with a token")
        finally:
            server.shutdown()
    records = list((tmp_path / "env").rglob("tokpkg-1.0.dist-info/direct_url.json"))
    assert len(records) == 1 and "token=****" in records[0].read_text()  # kept, masked
    assert not [p for p in (tmp_path / "env").rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]


def test_the_cache_key_follows_what_decides_pips_result(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    spec = EnvSpec("torch", requirements=("torch",))
    key = envkey.cache_key(spec)
    assert envkey.cache_key(spec) == key
    monkeypatch.setenv("PIP_INDEX_URL", "https://download.pytorch.org/whl/cu130")
    cuda = envkey.cache_key(spec)
    assert cuda != key  # a switch of index is another environment
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nextra-index-url = https://a.example/simple\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    with_file = envkey.cache_key(spec)
    conf.write_text("[global]\nextra-index-url = https://b.example/simple\n")
    assert envkey.cache_key(spec) != with_file != cuda  # a pip.conf's contents count
    monkeypatch.setattr(envkey.sysconfig, "get_platform", lambda: "linux-aarch64")
    assert envkey.cache_key(spec) != with_file  # so does the platform
    monkeypatch.undo()
    reqs = tmp_path / "r.txt"
    reqs.write_text("torch\n")
    keyed = envkey.cache_key(EnvSpec("r", requirements=(f"--requirement={reqs}",)))
    reqs.write_text("torch\nnumpy\n")
    assert envkey.cache_key(EnvSpec("r", requirements=(f"--requirement={reqs}",))) != keyed
    nested = tmp_path / "pkg" / "src" / "build"  # a folder named build inside the package counts
    nested.mkdir(parents=True)
    (nested / "kernel.py").write_text("a = 1\n")
    local = envkey.cache_key(EnvSpec("e", requirements=("-e", str(tmp_path / "pkg"))))
    (nested / "kernel.py").write_text("a = 2\n")
    assert envkey.cache_key(EnvSpec("e", requirements=("-e", str(tmp_path / "pkg")))) != local
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"  # a file: URL is read by its contents, also as `name @ URL`
    for spec in (parse_spec(f"pkg @ file://{wheel}"), parse_spec(f"file://{wheel}")):
        wheel.write_bytes(b"one build")
        before = envkey.cache_key(spec)
        wheel.write_bytes(b"another build")
        assert envkey.pinned(spec) and envkey.cache_key(spec) != before, spec


def test_the_cache_key_follows_the_files_pips_settings_and_requirements_files_name(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """What pip reads besides the SPEC's own words changes the key: the file PIP_CONSTRAINT or a pip.conf's
    `constraint =` names (by contents), a pip.conf under $XDG_CONFIG_HOME, a --find-links folder's wheels, a -r
    file's nested -r file and local package, a ${VAR} pip expands in it, and a wheel given as file://localhost/."""
    for name in [k for k in os.environ if k.startswith(("PIP_", "XDG_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    spec = EnvSpec("torch", requirements=("torch",))

    def changes(edit) -> bool:
        before = envkey.cache_key(spec)
        edit()
        return envkey.cache_key(spec) != before

    pins = tmp_path / "constraints.txt"
    pins.write_text("torch==2.13.0\n")
    monkeypatch.setenv("PIP_CONSTRAINT", str(pins))
    assert changes(lambda: pins.write_text("torch==2.14.0\n"))
    conf = tmp_path / "xdg" / "pip" / "pip.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text(f"[install]\nconstraint = {pins}\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("PIP_CONSTRAINT")
    assert changes(lambda: pins.write_text("torch==2.13.0\n"))  # pip reads $XDG_CONFIG_HOME/pip/pip.conf
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    assert changes(lambda: (wheels / "torch-2.14.0-cp311-none-any.whl").write_bytes(b"a wheel"))
    outer, inner, pkg = tmp_path / "r.txt", tmp_path / "more" / "inner.txt", tmp_path / "pkg"
    inner.parent.mkdir()
    pkg.mkdir()
    (pkg / "setup.py").write_text("one\n")
    outer.write_text("-r more/inner.txt\n${TOY_EXTRA}\n")
    inner.write_text(f"{pkg}\n")
    spec = EnvSpec("r", requirements=("-r", str(outer)))
    monkeypatch.setenv("TOY_EXTRA", "numpy")
    assert changes(lambda: inner.write_text(f"{pkg}\nscipy\n"))  # a nested -r file, against its file's folder
    assert changes(lambda: (pkg / "setup.py").write_text("two\n"))  # a local package a -r file names
    assert changes(lambda: monkeypatch.setenv("TOY_EXTRA", "pandas"))  # pip expands ${TOY_EXTRA}
    outer.write_text("-r more/inner.txt\n--extra-index-url https://ci:${TOY_TOKEN}@h/simple\n")
    monkeypatch.setenv("TOY_TOKEN", "first-job")
    assert not changes(lambda: monkeypatch.setenv("TOY_TOKEN", "next-job"))  # a CI job's token: no rebuild each job
    spec = EnvSpec("f", requirements=("-f", str(wheels), "torch"))
    assert changes(lambda: (wheels / "torch-2.15.0-cp311-none-any.whl").write_bytes(b"a wheel"))  # -f on the SPEC
    monkeypatch.setenv("PIP_FIND_LINKS", "~nosuchuser/wheels")  # pip's to refuse, not the key's
    envkey.cache_key(spec)
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    wheel.write_bytes(b"one build")
    spec = parse_spec(f"pkg @ file://localhost{wheel}")
    assert changes(lambda: wheel.write_bytes(b"another build"))
    spec = EnvSpec("a", requirements=(f"-r{outer}",))  # an option's value written against it, as pip takes it too
    assert changes(lambda: inner.write_text(f"{pkg}\nscipy\nnumpy\n"))
    spec = EnvSpec("a", requirements=(f"-c{pins}", "torch"))
    assert changes(lambda: pins.write_text("torch==2.15.0\n"))
    spec = EnvSpec("f", requirements=(f"-f{wheels}", "torch"))
    assert changes(lambda: (wheels / "torch-2.16.0-cp311-none-any.whl").write_bytes(b"a wheel"))
    shared = tmp_path / "shared" / "src"  # a local package whose source folder is a link: read through it
    shared.mkdir(parents=True)
    (shared / "k.py").write_text("V = 2\n")
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "setup.py").write_text("")
    (tmp_path / "linked" / "src").symlink_to(shared)
    (shared / "loop").symlink_to(shared)  # a link back up: walked once
    spec = EnvSpec("e", requirements=("-e", str(tmp_path / "linked")))
    assert changes(lambda: (shared / "k.py").write_text("V = 3\n"))


def test_an_unpinned_url_or_vcs_requirement_is_built_for_the_run_only(plugin_repo: Path, offline: Path,
                                                                      tmp_path: Path) -> None:
    assert not envkey.pinned(EnvSpec("x", requirements=("pkg @ git+https://example.org/pkg@main",)))
    assert envkey.pinned(EnvSpec("x", requirements=("pkg @ git+https://example.org/pkg@" + "a" * 40,)))
    assert envkey.pinned(EnvSpec("x", requirements=("https://example.org/p-1.0-py3-none-any.whl#sha256=" + "b" * 64,)))
    assert not envkey.pinned(EnvSpec("x", requirements=("https://example.org/p-1.0-py3-none-any.whl",)))
    scratch = tmp_path / "run"
    scratch.mkdir()
    assert envkey.pinned(EnvSpec("x", requirements=("--extra-index-url", "https://example.org/simple", "torch")))
    # the same options in a -r file (the CPU index beside torch, a common requirements.txt), nested files too
    (tmp_path / "inner.txt").write_text("-i https://example.org/simple\n--extra-index-url=https://example.org/cpu\n"
                                        "-f https://example.org/wheels\ntorch==2.13.0 --hash=sha256:" + "c" * 64 + "\n")
    (tmp_path / "outer.txt").write_text("--extra-index-url https://u:p@example.org/simple\n-r inner.txt\n")
    assert envkey.pinned(EnvSpec("x", requirements=("-r", str(tmp_path / "outer.txt"))))
    (tmp_path / "inner.txt").write_text("pkg @ https://example.org/p-1.0-py3-none-any.whl\n")  # a requirement: not
    assert not envkey.pinned(EnvSpec("x", requirements=(f"-r{tmp_path / 'outer.txt'}",)))
    # file://localhost/PATH, not file:///PATH: pip 23's requirement parser takes a VCS URL with a host only
    unpinned = EnvSpec("b", requirements=("--no-deps", f"toy-trust @ git+file://localhost{plugin_repo}@main"))
    env = envcache.prepare(unpinned, None, None, scratch)  # pip clones the branch as it is now, each time
    assert "not cached" in env.how and Path(env.python).is_relative_to(scratch) and not offline.exists()


def test_the_cache_is_bounded_and_listed(offline: Path, tmp_path: Path) -> None:
    spec = EnvSpec("torch", requirements=("torch",))  # satisfied by this environment: nothing is installed
    env = envcache.prepare(spec, None)
    folder = Path(env.python).parents[1]
    assert envcache.prepare(spec, None).how.startswith("cached in ")
    listed = io.StringIO()
    with contextlib.redirect_stdout(listed):
        assert main(["envs"]) == 0
    assert folder.name in listed.getvalue() and "torch" in listed.getvalue()
    assert envcache.prune(offline, 30 * 86400.0) == []  # used just now
    gone = envcache.prune(offline, 30 * 86400.0, now=time.time() + 31 * 86400.0)
    assert [e.folder for e in gone] == [folder] and not folder.exists()
    assert not list(offline.glob("*.lock"))  # the removed entry's lock file goes with it


BUILD_AT_ONCE = """
import sys, time
from pathlib import Path
from sdpa_impls.continuous import envcache, envlock
from sdpa_impls.continuous.envs import EnvSpec
go = Path(sys.argv[1])
while not go.exists():  # both runs reach the cache together: each finds no environment, and one builds it
    time.sleep(0.01)
with envlock.in_use():
    env = envcache.prepare(EnvSpec("torch", requirements=("torch",)), None)
    print(round(time.monotonic() - go.stat().st_mtime + time.time() - time.monotonic(), 1), env.how, flush=True)
    time.sleep(float(sys.argv[2]))  # its comparison, in the environment
"""


def test_an_environment_in_use_is_kept_from_every_prune_and_shared_with_other_runs(offline: Path,
                                                                                  tmp_path: Path) -> None:
    """A comparison holds each cached environment it runs in until it ends (envlock.in_use): `envs --prune
    --older-than 0` in another process ("every one not in use now") leaves it, and another run uses it meanwhile
    without waiting; once the comparison ends, the same prune removes it. (Every run here is a process of its own,
    started alike: the test's own process has pytest's sys.path, and so another cache key.)"""
    go = tmp_path / "go"
    go.touch()
    prune = [sys.executable, "-m", "sdpa_impls", "envs", "--prune", "--older-than", "0"]
    holder = subprocess.Popen([sys.executable, "-c", BUILD_AT_ONCE, str(go), "60"], stdout=subprocess.PIPE, text=True)
    try:
        how = holder.stdout.readline().split(" ", 1)[1]
        folder = Path(how.strip().split(" into ")[-1].split("cached in ")[-1])
        assert how.startswith("built") and folder.is_dir(), how
        done = subprocess.run(prune, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and folder.is_dir(), done.stdout + done.stderr
        assert f"kept 1 in use by a run now (a comparison, or a build): {folder.name}" in done.stdout, done.stdout
        other = subprocess.run([sys.executable, "-c", BUILD_AT_ONCE, str(go), "0"], capture_output=True, text=True,
                               timeout=60)  # shared, not "building"
        assert other.returncode == 0 and other.stdout.split(" ", 1)[1].startswith(f"cached in {folder}"), other
    finally:
        holder.kill()
        holder.wait()
    done = subprocess.run(prune, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and not folder.exists() and "in use" not in done.stdout, done.stdout + done.stderr


KEY_OF = """
from sdpa_impls.continuous import envcache
from sdpa_impls.continuous.envs import EnvSpec
print(envcache.cache_key(EnvSpec("torch", requirements=("torch",))))
"""


def test_two_runs_that_need_one_new_environment_build_it_once_and_both_go_on(offline: Path, tmp_path: Path) -> None:
    """The run that did not build waits for the build, then uses the environment beside the builder, rather than
    for the builder's whole comparison (the builder holds it, shared, until it ends). The interleaving is forced:
    this test holds the key's lock shared while both runs look, so each finds no environment and fails to take the
    lock to build it; then it lets go. A run that then waited for the lock itself, exclusive, would wait out the
    builder's 60 s."""
    go = tmp_path / "go"
    key = subprocess.run([sys.executable, "-c", KEY_OF], capture_output=True, text=True, check=True).stdout.strip()
    offline.mkdir(mode=0o700, parents=True, exist_ok=True)
    runs = []
    with open(offline / f"{key}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)  # as a run using the environment would, before it exists
        runs = [subprocess.Popen([sys.executable, "-c", BUILD_AT_ONCE, str(go), "60"], stdout=subprocess.PIPE,
                                 text=True) for _ in range(2)]
        try:
            time.sleep(3)  # both started and waiting for `go`
            go.touch()
            time.sleep(3)  # both have looked, found nothing, and failed to take the lock exclusive
            assert all(run.poll() is None for run in runs)
        except BaseException:
            for run in runs:
                run.kill()
                run.wait()
            raise
    try:
        said = [run.stdout.readline().split(" ", 1) for run in runs]  # (seconds after `go`, how)
    finally:
        for run in runs:
            run.kill()
            run.wait()
    assert sorted(how.split(" ")[0] for _, how in said) == ["built", "cached"], said
    assert all(float(seconds) < 40 for seconds, _ in said), said  # not 60 s later, when the builder's run ends


def _running(pid: int) -> bool:
    """Whether `pid` runs: not gone, nor a zombie no one has reaped yet (a container's pid 1 may never reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's (prctl)")
def test_pip_is_killed_with_the_process_that_started_it(tmp_path: Path) -> None:
    """kill -9 of a run building an environment (a CI job's end kills its process group; pip's own group is not
    in it): pip goes too, rather than downloading gigabytes into the cache with no one waiting for it."""
    mark = tmp_path / "pip.pid"
    pip = [sys.executable, "-c", f"import os, time; open({str(mark)!r}, 'w').write(str(os.getpid())); time.sleep(120)"]
    run = subprocess.Popen([sys.executable, "-c", f"from sdpa_impls.continuous.envbuild import _pip; _pip({pip!r}, 'x')"])
    pid = None
    try:
        deadline = time.monotonic() + 60
        while not (mark.is_file() and mark.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        pid = int(mark.read_text())
        assert _running(pid)
        run.kill()
        run.wait()
        deadline = time.monotonic() + 10
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(pid), "pip outlived the run that started it"
    finally:
        run.kill()
        if pid is not None and _running(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_prune_removes_lock_files_left_without_an_entry_but_not_one_held(offline: Path) -> None:
    """A failed build or a removed entry leaves its key's lock file; a prune removes those, except one another run
    holds (a build that has not made its folder yet) and those of entries that stay."""
    a1, b2, c3 = "a1" * 8, "b2" * 8, "c3" * 8
    kept = offline / a1
    kept.mkdir(parents=True)
    (kept / envcache.READY).write_text(json.dumps({"spec": "pkg==1"}))
    (kept / envcache.LAST_USE).touch()
    for key in (a1, b2, c3, "notes"):
        (offline / f"{key}.lock").touch()
    held = envlock.hold(offline / f"{c3}.lock", None, wait_s=1.0)
    try:
        assert envcache.prune(offline, 30 * 86400.0) == []
        assert sorted(p.name for p in offline.glob("*.lock")) == [f"{a1}.lock", f"{c3}.lock", "notes.lock"]
    finally:
        os.close(held)
    envcache.prune(offline, 30 * 86400.0)
    assert sorted(p.name for p in offline.glob("*.lock")) == [f"{a1}.lock", "notes.lock"] and kept.is_dir()


def test_a_cache_pointed_at_a_folder_of_ones_own_lists_and_removes_nothing_of_it(offline: Path) -> None:
    """--env-cache naming a working folder: its folders are no environments, and no prune removes them, also one
    whose name is a key's but that no build made (no marker), or a link of such a name to a folder elsewhere; a
    prune of a cache folder that does not exist does not make it."""
    offline.mkdir()
    names = ("project", "results", "a1a1a1a1a1a1a1a1x", ".building-notes", "0123456789abcdef")
    for name in names:
        (offline / name).mkdir()
        (offline / name / "keep.txt").write_text("mine\n")
    (offline / "fedcba9876543210").symlink_to(offline / "project")
    old = time.time() - 365 * 86400
    for folder in offline.iterdir():
        os.utime(folder, (old, old), follow_symlinks=False)
    assert envcache.entries(offline) == []
    assert envcache.prune(offline, 0.0, max_bytes=0) == []
    assert all((offline / n / "keep.txt").is_file() for n in names)
    typo = offline.parent / "typo" / "cache"
    done = subprocess.run([sys.executable, "-m", "sdpa_impls", "envs", "--prune", "--env-cache", str(typo)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and f"{typo} does not exist" in done.stdout, done.stdout + done.stderr
    assert not typo.parent.exists()


def test_a_run_waiting_on_a_lock_file_that_a_prune_removes_locks_the_new_one(tmp_path: Path) -> None:
    """The prune holds the lock, unlinks the file and lets go; the run that waited on the old file must not come
    away holding that unlinked file while a third run locks the new one: it opens the file now at the path."""
    path = tmp_path / "k.lock"
    pruner = envlock.hold(path, None, wait_s=1.0)
    got: list[int] = []
    waiter = threading.Thread(target=lambda: got.append(envlock.hold(path, None, wait_s=30.0)))
    waiter.start()
    time.sleep(0.3)  # the waiter has opened the old file and is waiting on its lock
    path.unlink()
    os.close(pruner)
    waiter.join(30.0)
    try:
        assert got and os.fstat(got[0]).st_ino == path.stat().st_ino
        assert envlock.try_hold(path) is None  # one holder for the key, not two
    finally:
        for fd in got:
            os.close(fd)


def test_an_entry_whose_interpreter_is_gone_is_built_again_not_failed_on_every_run(offline: Path) -> None:
    """A cached environment whose bin/python went (removed by hand, or a link to a Python since uninstalled) made
    every later run exit 2 ("its install step could not start .../bin/python") until the cache was pruned."""
    spec = EnvSpec("torch", requirements=("torch",))  # satisfied by this environment: nothing is installed
    python = Path(envcache.prepare(spec, None).python)
    python.unlink()
    said: list[str] = []
    again = envcache.prepare(spec, None, said.append)
    assert again.how.startswith("built in ") and Path(again.python).exists() and again.python == str(python)
    assert any("has no interpreter any more" in line for line in said), said
    assert envcache.prepare(spec, None).how.startswith("cached in ")


def test_a_build_under_the_size_cap_spares_the_other_side_of_its_comparison(offline: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """BASE's new environment built, then the cache trimmed to its cap: HEAD's cached one, not yet held by this
    run, was the least recently used and went, to be built again a minute later (5 GB with torch)."""
    offline.mkdir()
    head, other = EnvSpec("numpy", requirements=("numpy",)), EnvSpec("packaging", requirements=("packaging",))
    old = time.time() - 86400
    for spec in (head, other):
        folder = offline / envkey.cache_key(spec)
        folder.mkdir()
        (folder / envcache.READY).write_text(json.dumps({"spec": spec.text}))
        (folder / "blob").write_bytes(b"\0" * (2 << 20))
        (folder / envcache.LAST_USE).touch()
        os.utime(folder / envcache.LAST_USE, (old, old))
    monkeypatch.setenv(envcache.MAX_SIZE_ENV, "0.000001")
    env = envcache.prepare(EnvSpec("torch", requirements=("torch",)), None, spare=[head])  # nothing to install
    assert Path(env.python).exists() and (offline / envkey.cache_key(head)).is_dir()
    assert not (offline / envkey.cache_key(other)).exists()  # the cap still holds for the rest


def test_a_size_cap_removes_the_least_recently_used_and_never_one_in_use(offline: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    offline.mkdir()
    now = time.time()

    def entry(name: str, age_s: float) -> Path:
        folder = offline / name
        folder.mkdir()
        (folder / envcache.READY).write_text(json.dumps({"spec": f"pkg=={name}"}))
        (folder / "blob").write_bytes(b"\0" * (2 << 20))
        (folder / envcache.LAST_USE).touch()
        os.utime(folder / envcache.LAST_USE, (now - age_s, now - age_s))
        return folder

    oldest, older, recent, built = (entry(k * 8, age) for k, age in (("a1", 5 * 86400), ("b2", 86400), ("c3", 60),
                                                                      ("d4", 0)))
    # 8 MiB held, 5 MB allowed: the least recently used go first until it fits; the new build and the one used a
    # minute ago (a side of the comparison running now) stay
    gone = envcache.prune(offline, 30 * 86400.0, keep=built, now=now, max_bytes=5_000_000)
    assert [e.folder for e in gone] == [oldest, older] and recent.exists() and built.exists()
    assert envcache.prune(offline, 30 * 86400.0, keep=built, now=now, max_bytes=5_000_000) == []  # fits
    assert envcache.prune(offline, 30 * 86400.0, keep=built, now=now, max_bytes=1) == []  # only ones in use left
    listed, err = io.StringIO(), io.StringIO()
    monkeypatch.setenv(envcache.MAX_SIZE_ENV, "0.001")
    with contextlib.redirect_stdout(listed):
        assert main(["envs"]) == 0
    assert "(at most 0.001 GB, $SDPA_BENCH_ENV_CACHE_MAX_GB)" in listed.getvalue()
    monkeypatch.setenv(envcache.MAX_SIZE_ENV, "lots")
    away = offline.parent / "away"  # no repository: continuous and bisect would stop on that, were the cap not first
    away.mkdir()
    monkeypatch.chdir(away)
    out = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):  # one error wherever it is read
        assert [main(["envs"]), main(["envs", "--prune"]), main(["continuous"]), main(["bisect", "HEAD~1"])] == [2] * 4
    said = err.getvalue().splitlines()
    assert [s.split(": error: ")[0] for s in said] == [f"sdpa-bench {c}" for c in ("envs", "envs", "continuous",
                                                                                    "bisect")], said
    assert all(s.endswith("$SDPA_BENCH_ENV_CACHE_MAX_GB should be a positive number of GB, at most 1e+09, got 'lots'")
               for s in said) and not out.getvalue(), said
    with pytest.raises(UsageError, match="SDPA_BENCH_ENV_CACHE_MAX_GB"):  # before a build, not after it
        envcache.prepare(EnvSpec("torch", requirements=("torch",)), None)
    assert sorted(p.name for p in offline.iterdir() if p.is_dir()) == ["c3" * 8, "d4" * 8]
    monkeypatch.delenv(envcache.MAX_SIZE_ENV)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):  # a pruning option without --prune would remove nothing
        assert main(["envs", "--older-than", "0"]) == 2
    assert "--older-than applies to --prune: give --prune too" in err.getvalue()
    assert sorted(p.name for p in offline.iterdir() if p.is_dir()) == ["c3" * 8, "d4" * 8]


def test_a_build_killed_midway_is_never_trusted(offline: Path, tmp_path: Path) -> None:
    """kill -9 of the process that builds: its staging folder is never an entry, the lock is free again, and the
    next run builds cleanly; a prune removes the remains."""
    slow = tmp_path / "slowpkg"
    slow.mkdir()
    (slow / "setup.py").write_text(textwrap.dedent(f"""
        import os, time
        from setuptools import setup
        if os.environ.get("SLOW_BUILD"):
            open({str(tmp_path / 'pip.pid')!r}, "w").write(str(os.getpid()))
            time.sleep(120)
        setup(name="slowpkg", version="1.0", py_modules=[])
    """))
    code = (f"import sys; sys.path[:0] = {sys.path!r}\n"
            "from sdpa_impls.continuous.envcache import prepare\nfrom sdpa_impls.continuous.envs import parse_spec\n"
            f"prepare(parse_spec({str(slow)!r}))\n")
    builder = subprocess.Popen([sys.executable, "-c", code], env=os.environ | {"SLOW_BUILD": "1"})
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "pip.pid").is_file() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert (tmp_path / "pip.pid").is_file(), "the build never started"
        builder.send_signal(signal.SIGKILL)
        builder.wait()
    finally:
        with contextlib.suppress(ProcessLookupError, ValueError, FileNotFoundError):  # the orphaned pip
            os.killpg(int((tmp_path / "pip.pid").read_text()), signal.SIGKILL)
    staged = [p for p in offline.iterdir() if p.name.startswith(envcache.BUILDING)]
    assert staged and not [p for p in offline.iterdir() if p.is_dir() and (p / envcache.READY).exists()]
    env = envcache.prepare(parse_spec(str(slow)), None)
    assert env.how.startswith("built in ")
    gone = envcache.prune(offline, 30 * 86400.0, now=time.time() + 7200.0)
    assert {p.folder for p in gone} == set(staged)


def test_a_lock_wait_says_what_it_waits_for_and_ends(offline: Path, tmp_path: Path) -> None:
    lock = tmp_path / "env.lock"
    holder = subprocess.Popen([sys.executable, "-c", f"import fcntl, time\nf = open({str(lock)!r}, 'w')\n"
                               "fcntl.flock(f, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(60)\n"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        said: list[str] = []
        with pytest.raises(GateInputError, match="held this environment's lock for more than 1 s"):
            envlock.hold(lock, said.append, wait_s=1.0)
        assert said and "another sdpa-bench is building this environment" in said[0]
    finally:
        holder.kill()
        holder.wait()


def test_a_planted_lock_link_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.write_text("keep me\n")
    (tmp_path / "k.lock").symlink_to(target)
    with pytest.raises(UsageError, match="cannot open the environment's lock"):
        envlock.hold(tmp_path / "k.lock", None, wait_s=0.1)
    assert target.read_text() == "keep me\n"


def test_a_cache_others_may_write_or_own_is_refused(plugin_repo: Path, tmp_path: Path) -> None:
    """Refused, and in continuous (exit 2, before either side is installed) as the cache's problem, not a
    revision's: a search over commits would skip every commit instead."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(UsageError, match="others may write to the environment cache"):
        envcache.open_cache(shared)
    code, _, err = continuous(plugin_repo, "HEAD~1", "HEAD", "--head-env", "toy-pkg==1", "--env-cache", str(shared),
                              *QUICK)
    assert code == 2 and f"sdpa-bench continuous: error: --env-cache {shared}: others may write to the environment " \
        "cache (mode 777); chmod go-w it, or use another (--env-cache DIR)\n" in err, err  # not the head's error
    if os.getuid() == 0:  # only root can give a folder away
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 65534, 65534)
        with pytest.raises(UsageError, match="belongs to another user"):
            envcache.open_cache(theirs)


def test_specs_are_read_as_tox_and_uv_read_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = Path(sys.executable).name
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"])
    assert parse_spec(name).python  # a Python named by its command is an interpreter, not a package
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "pyproject.toml").write_text("[project]\nname = 'mypkg'\n")  # a package pip installs
    monkeypatch.chdir(tmp_path)
    assert parse_spec("mypkg").requirements == ("mypkg",)  # a bare word is a name, as for pip
    assert parse_spec("./mypkg").requirements == ("./mypkg",)
    url = "https://u:p@h/mypkg-1.0.tar.gz"  # PEP 508's direct reference stays one requirement, as pip reads it
    for spec in (f"mypkg @ {url}", f"mypkg[x] @ {url} other==1", f"mypkg@ {url}", f"mypkg @{url}"):
        assert parse_spec(spec).requirements[0] == spec.split(" other")[0], spec
    assert parse_spec(f"mypkg @ {url} other==1").requirements[1:] == ("other==1",)
    text = "pkg @ https://h/p.whl#sha256=abc  # pinned\n# a comment\nother==1 \\\n  ; python_version>'3'\n"
    assert requirement_lines(text) == ("pkg @ https://h/p.whl#sha256=abc", "other==1   ; python_version>'3'")


def test_the_working_tree_copy_keeps_symlinks(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "data").mkdir(parents=True)
    (repo / "data" / "x.txt").write_text("x\n")
    (repo / "to-data").symlink_to("data")
    (repo / "outside").symlink_to("/etc/hostname")
    git(repo, "init", "-q")
    commit(repo, "links")
    copy = tmp_path / "copy"
    snapshot_working_tree(repo, copy)
    assert (copy / "to-data").is_symlink() and os.readlink(copy / "to-data") == "data"
    assert (copy / "outside").is_symlink() and os.readlink(copy / "outside") == "/etc/hostname"


def test_the_sweep_forgets_only_its_own_gone_worktrees(plugin_repo: Path, tmp_path: Path) -> None:
    """A worktree of the user's whose folder is away for a while (an unmounted disk) keeps git's record of it; a
    worktree a killed run left in its work folder, since deleted (a cleaned /tmp), is forgotten."""
    from sdpa_impls.continuous.revisions import WORKDIR_PREFIX

    users, away = tmp_path / "wt-user", tmp_path / "wt-away"
    git(plugin_repo, "worktree", "add", "--detach", str(users), "HEAD")
    users.rename(away)
    work = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))
    try:
        git(plugin_repo, "worktree", "add", "--detach", str(work / "base" / "tree"), "HEAD")
        shutil.rmtree(work)
        sweep_stale(plugin_repo)
        listed = git(plugin_repo, "worktree", "list", "--porcelain")
        assert str(users) in listed and str(work) not in listed, listed
        away.rename(users)
        assert git(users, "status", "--porcelain") == ""  # still a checkout git knows
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if away.exists():
            away.rename(users)
        git(plugin_repo, "worktree", "remove", "--force", str(users))


def test_a_stale_runs_worktree_leaves_the_repository_it_is_a_worktree_of(plugin_repo: Path, tmp_path: Path) -> None:
    """A run stopped in one repository, its folder swept by a run in another one (or by one comparing environments,
    in none): the worktree goes from its own repository's records too, not left there as prunable."""
    from sdpa_impls.continuous.revisions import OWNER, WORKDIR_PREFIX

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    work = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))
    (work / OWNER).write_text(gone.stdout)  # a process that has ended
    git(plugin_repo, "worktree", "add", "--detach", str(work / "base" / "tree"), "HEAD")
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    for root in (other, None):
        assert work in sweep_stale(root) and not work.exists()
        assert git(plugin_repo, "worktree", "list").count("\n") == 0  # the repository itself, nothing prunable
        work.mkdir()
        (work / OWNER).write_text(gone.stdout)
        git(plugin_repo, "worktree", "add", "--detach", str(work / "base" / "tree"), "HEAD")
    sweep_stale(plugin_repo)


def test_a_killed_runs_worktree_is_swept(plugin_repo: Path) -> None:
    """kill -9 of a real `sdpa-bench continuous` once its worktrees exist: they stay behind, and the next run's sweep
    removes them, its work folder and git's record of them; a live run's folder stays."""
    run = subprocess.Popen([sys.executable, "-m", "sdpa_impls", "continuous", "HEAD~1", "HEAD", *QUICK],
                           cwd=plugin_repo, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while git(plugin_repo, "worktree", "list").count("\n") < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert git(plugin_repo, "worktree", "list").count("\n") >= 1, "the run never checked its base out"
    finally:
        run.kill()
        run.wait()
    left = {Path(line.split()[0]).parents[1] for line in git(plugin_repo, "worktree", "list").splitlines()[1:]}
    assert left and all(p.is_dir() for p in left)
    mine = new_workdir()  # a live run's folder stays
    try:
        assert left <= set(sweep_stale(plugin_repo)) and not any(p.exists() for p in left) and mine.exists()
        assert git(plugin_repo, "worktree", "list").count("\n") == 0
    finally:
        mine.joinpath("owner.pid").unlink()
        mine.rmdir()


def test_a_signal_as_a_runs_checkouts_are_removed_waits_for_the_removal(plugin_repo: Path, monkeypatch) -> None:
    """SIGTERM (a CI's cancel) or Ctrl-C as a run removes its checkouts: the removal runs whole (one stopped part
    way left a worktree of git's and a folder without its owner.pid, kept a day), then the signal is handed back to
    the command's own handling of it, the handler as it was."""
    from sdpa_impls.cli.outputs import Terminated
    from sdpa_impls.continuous import revisions

    work = new_workdir()
    for side in ("base", "head"):
        revisions.checkout(plugin_repo, "HEAD", work / side / "tree")
    removing = revisions.remove_checkout

    def removed_then_signalled(root: Path, tree: Path) -> None:  # the signal lands between the two removals
        removing(root, tree)
        os.kill(os.getpid(), signal.SIGTERM)
    monkeypatch.setattr(revisions, "remove_checkout", removed_then_signalled)

    def stop(signum, frame):  # noqa: ANN001, ANN202 (as terminate_as_interrupt's)
        raise Terminated()
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        held = revisions.remove_workdir(plugin_repo, work)
    except KeyboardInterrupt:  # Terminated is one: pytest would end the session
        held = "raised part way"
    finally:
        now = signal.signal(signal.SIGTERM, previous)
    assert held == signal.SIGTERM and now is stop
    assert not work.exists() and git(plugin_repo, "worktree", "list").count("\n") == 0  # the repository alone


KILLED_AS_REMOVED = """
import os, signal, sys
from sdpa_impls.continuous import revisions
from sdpa_impls.cli import main
removing = revisions.remove_checkout
def removed_then_signalled(root, tree):  # a CI's cancel, as the first checkout is removed
    removing(root, tree)
    os.kill(os.getpid(), signal.SIGTERM)
revisions.remove_checkout = removed_then_signalled
sys.exit(main(sys.argv[1:]))
"""


def test_a_signal_as_the_checkouts_are_removed_keeps_the_judged_verdict(plugin_repo: Path, tmp_path: Path) -> None:
    """The comparison was judged when the signal came: its verdict is printed and written, the exit code is the
    signal's, and nothing is left (it said "nothing was judged", and the removal stopped part way)."""
    answer = tmp_path / "verdict.json"
    proc = subprocess.run([sys.executable, "-c", KILLED_AS_REMOVED, "continuous", "HEAD~1", "HEAD", *QUICK, "--json",
                           str(answer)], cwd=plugin_repo, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 128 + signal.SIGTERM and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        "sdpa-bench continuous: terminated (SIGTERM): after judging, as its temporary checkouts were removed (now "
        "gone): the verdict above stands"), proc.stderr[-2000:]
    assert proc.stdout.startswith("sdpa-bench continuous: ") and json.loads(answer.read_text())["rows"]
    assert git(plugin_repo, "worktree", "list").count("\n") == 0


def test_what_a_plugin_raised_is_text_in_the_comment() -> None:
    """A failure's message quotes the plug-in's exception: in the PR comment it is a code span, never a mention, link
    or image (the comment is posted with a token that can write)."""
    sneaky = "@someone **approved**, see [x](https://e.example) ![i](https://e.example/p.png)"

    def run(status: str, reason: str = "") -> list[Point]:
        return [Point("torch_sdpa", "L8-E8-fp32-fwd", 1.0, (1.0,) * 10, 100, 0.0, 1e-3),
                Point("mine", "L8-E8-fp32-fwd", 1.0 if status == "ok" else None, (1.0,) * 10 if status == "ok" else (),
                      100, 0.0, 1e-3, status=status, reason=reason)]

    report = judge([run("ok")] * 2, [run("failed", f"RuntimeError: {sneaky}")] * 2, config_from_dict({}, "test"))
    text = render(report, "main", "head", markdown=True)
    outside = "".join(part for i, part in enumerate(text.split("`")) if i % 2 == 0)  # what is not in a code span
    assert sneaky in text and "Failures:" in text, text
    assert "@someone" not in outside and "](https://" not in outside and "**approved**" not in outside, text


def test_what_people_wrote_is_text_in_the_comment() -> None:
    def run(impl: str) -> list[Point]:
        return [Point(name, "L8-E8-fp32-fwd", 1.0, (1.0,) * 10, 100, 0.0, 1e-3) for name in ("torch_sdpa", impl)]

    sneaky = "@someone ![x](https://e.example/p.png) **PASS**"
    report = judge([run("mine")] * 2, [run("mine")] * 2, config_from_dict({}, "test"))
    text = render(report, f"main ({sneaky})", "`head` | x", markdown=True, header=[f"head: --head-env {sneaky}"],
                  about=f"plug-in {sneaky}")
    outside = "".join(part for i, part in enumerate(text.split("`")) if i % 2 == 0)  # what is not in a code span
    assert "@someone" not in outside and "![x]" not in outside and "**PASS**" not in outside, text
    assert text.count(sneaky) == 3  # base name, header line, about line: each shown, as text
    assert redact(f"https://u:{SECRET}@h/x") == "https://u:****@h/x" and redact(f"git+https://{SECRET}@h/r") == \
        "git+https://****@h/r"
    assert redact(f"see https://h/p.whl?token={SECRET}&v=1#sha256=ab, then") == \
        "see https://h/p.whl?token=****&v=****#sha256=ab, then"
    assert redact(f"https://h/simple?{SECRET} https://h/p?sig=ab){SECRET}") == "https://h/simple?**** https://h/p?sig=****"
    for typed in (f"--index-url https://u:{SECRET}\\ too@h/simple", f'--index-url "https://u:{SECRET} too@h/simple"'):
        assert redact(typed).replace('"', "") == "--index-url https://u:****@h/simple", typed  # a space in it, as pip
    for quote in ("'", '"'):  # a quote is a password's character too
        assert redact(f"https://u:pa{quote}{SECRET}@h/simple") == "https://u:****@h/simple"
    for slashed in (f"{SECRET}/x", f"a/{SECRET}/b"):  # typed unencoded: pip refuses the URL after it is printed
        assert redact(f"--extra-index-url=https://u:{slashed}@h:9/simple x") == \
            "--extra-index-url=https://u:****@h:9/simple x"
    assert redact(f"https://u:{SECRET}@h/simple/p@1.0") == "https://u:****@h/simple/p@1.0"  # the first @ ends it
    for text in ("see http://localhost:8080 (ask admin@corp.com)", "https://a.org:443 and git@github.com:org/repo",
                 "git+https://h:8443/r.git@v1.2", "p @ git+https://[fd00::1]:3000/r.git@v1", "git+https://h:/r.git@v1",
                 "git+https://[::1]/r.git@v1", "file://C:/Users/me/x.whl@x"):
        assert redact(text) == text  # a port, an IPv6 host or a drive, then a revision or an address: no password
    assert redact("git+ssh://git@github.com:org/r.git@v1") == "git+ssh://****@github.com:org/r.git@v1"  # as before
    for glued in ("-i", "'-i", "-f", " --extra-index-url="):  # a short option glued to its URL, as pip takes it
        assert redact(f"{glued}https://u:{SECRET}@h/simple?t={SECRET}") == f"{glued}https://u:****@h/simple?t=****"
    for proxy in (f"--proxy u:{SECRET}@proxy:3128", f"--proxy='u:{SECRET}@proxy:3128'",  # pip's form: no scheme
                  f"--proxy http://u:{SECRET}@proxy:3128"):
        assert SECRET not in redact(proxy) and "u:****@proxy:3128" in redact(proxy), redact(proxy)
    assert redact("--proxy proxy:3128 git@h") == "--proxy proxy:3128 git@h"  # no user: nothing to mask
    quoted = f"Max retries exceeded with url: /p-1.0-py3-none-any.whl?token={SECRET} (Caused by x)"  # pip, urllib3
    assert redact(quoted) == "Max retries exceeded with url: /p-1.0-py3-none-any.whl?token=**** (Caused by x)"
    # what closes the text around a URL stays: a JSON string's escaped quote, a code span, a parenthesis
    doc = json.dumps({"spec": f'--extra-index-url "https://u:{SECRET}@h/simple?tok={SECRET}": Python'})
    assert json.loads(redact(doc)) == {"spec": '--extra-index-url "https://u:****@h/simple?tok=****": Python'}
    assert redact(f"(see `p @ https://h/p.whl?sig={SECRET}`)") == "(see `p @ https://h/p.whl?sig=****`)"
    assert redact(f"https://h/s?tok=ab\\{SECRET} x") == "https://h/s?tok=**** x"  # a backslash in a value: masked


def test_a_sigterm_stops_a_run_with_one_line_and_leaves_nothing(plugin_repo: Path, tmp_path: Path) -> None:
    """SIGTERM (a CI's time limit, a cancelled job) once the base is checked out: exit 143, one line saying so, and
    the run's work folder and git worktrees are gone (no later run needed to sweep them); a worktree of the user's
    whose folder is away meanwhile (an unmounted disk) is still git's (it was pruned with the run's own)."""
    before = set(Path(tempfile.gettempdir()).glob("sdpa-continuous-*"))
    users, away = tmp_path / "wt-user", tmp_path / "wt-away"
    git(plugin_repo, "worktree", "add", "--detach", str(users), "HEAD")
    users.rename(away)
    run = subprocess.Popen([sys.executable, "-m", "sdpa_impls", "continuous", "HEAD~1", "HEAD", *QUICK],
                           cwd=plugin_repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while git(plugin_repo, "worktree", "list").count("\n") < 3 and time.monotonic() < deadline:  # + the user's
            time.sleep(0.1)
        assert git(plugin_repo, "worktree", "list").count("\n") >= 3, "the run never checked its base out"
        run.send_signal(signal.SIGTERM)
        out, err = run.communicate(timeout=60)
    finally:
        run.kill()
        run.wait()
    assert run.returncode == 128 + signal.SIGTERM and "Traceback" not in err, (run.returncode, err[-2000:])
    said = [line for line in err.splitlines() if not line.startswith("[")]  # progress lines start with [
    assert said == ["sdpa-bench continuous: terminated (SIGTERM): nothing was judged; its temporary checkouts are "
                    "removed"], err[-2000:]
    listed = git(plugin_repo, "worktree", "list", "--porcelain")
    assert listed.count("worktree ") == 2 and f"worktree {users}\n" in listed, listed
    away.rename(users)
    git(plugin_repo, "worktree", "remove", "--force", str(users))
    assert set(Path(tempfile.gettempdir()).glob("sdpa-continuous-*")) <= before


def test_the_cache_is_listed_while_another_run_removes_an_entrys_files(tmp_path: Path) -> None:
    """`envs` and the prune after each build list the cache while another run may be removing an entry (a prune, a
    dead build's remains): a folder or file that goes as it is counted counts nothing, and the listing goes on."""
    entry = tmp_path / "0123456789abcdef"
    (entry / "lib").mkdir(parents=True)
    (entry / envcache.READY).write_text(json.dumps({"spec": "torch==2.13.0"}))
    stop = threading.Event()

    def churn() -> None:  # folders made and removed, as rmtree removes a site-packages
        while not stop.is_set():
            for i in range(40):
                (entry / "lib" / f"d{i}").mkdir(exist_ok=True)
                (entry / "lib" / f"d{i}" / "f").write_bytes(b"x" * 10)
            for i in range(40):
                shutil.rmtree(entry / "lib" / f"d{i}", ignore_errors=True)

    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    try:
        for _ in range(300):
            listed = envcache.entries(tmp_path)
            assert [e.folder for e in listed] == [entry] and listed[0].size >= len(entry.joinpath(envcache.READY)
                                                                                    .read_bytes())
    finally:
        stop.set()
        thread.join()


def test_git_in_a_locale_that_cannot_read_utf8_gives_paths_and_subjects_whole(tmp_path: Path) -> None:
    """git prints paths and subjects in UTF-8 whatever the locale; read in the locale's encoding (ASCII under
    LC_ALL=C without Python's UTF-8 mode, EUC-JP) they had ended `continuous` and `bisect` with a UnicodeDecodeError."""
    repo = tmp_path / "q é 日本"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "a.txt").write_text("a\n")
    commit(repo, "speed up 日本")
    probe = ("import sys; from pathlib import Path\n"
             "from sdpa_impls.continuous.revisions import describe, git_root\n"
             "root = git_root(Path(sys.argv[1]))\n"
             "print(describe(root, 'HEAD').split(' ', 1)[1].encode('unicode-escape').decode(), root.is_dir(), "
             "sep='|')")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LC_") and k not in ("LANG", "PYTHONUTF8")}
    done = subprocess.run([sys.executable, "-c", probe, os.fsencode(repo)], capture_output=True,
                          env=env | {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}, timeout=120)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    subject, found = done.stdout.decode().strip().split("|")
    assert subject == "speed up 日本".encode("unicode-escape").decode() and found == "True", done.stdout


def test_a_relative_xdg_cache_home_is_ignored_as_the_spec_says(tmp_path: Path, monkeypatch) -> None:
    """A relative $XDG_CACHE_HOME had put an environment cache in every folder a command ran from."""
    monkeypatch.delenv("SDPA_BENCH_ENV_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", "relcache")
    assert envcache.default_cache() == tmp_path / ".cache" / "sdpa-bench" / "envs"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert envcache.default_cache() == tmp_path / "xdg" / "sdpa-bench" / "envs"


def test_an_interpreters_path_with_a_space_left_unquoted_is_said_so(tmp_path: Path) -> None:
    """Split like a shell line, "/x/v env/bin/python" had reached pip as two requirements ("Invalid requirement")."""
    python = tmp_path / "v env" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.symlink_to(sys.executable)
    with pytest.raises(UsageError, match=r"its spaces make it 2 pip arguments; for the interpreter at that path, "
                                         r"quote it inside the value"):
        parse_spec(str(python))
    assert parse_spec(shlex.quote(str(python))).python == str(python)
    assert parse_spec("torch==2.13.0 six").requirements == ("torch==2.13.0", "six")


def test_a_side_whose_run_crashed_says_so_and_where(tmp_path: Path) -> None:
    """A kernel that aborts the process ends the side's pytest by a signal: the error says it crashed, by which
    signal and in which frame (faulthandler's), not that its suite "did not run" with faulthandler's last line (its
    list of extension modules)."""
    from sdpa_impls.continuous.outcomes import crash_said
    from sdpa_impls.continuous.sides import RoundRun, Side, _points

    crashed = subprocess.run([sys.executable, "-X", "faulthandler", "-c", "import os\ndef forward():\n    os.abort()\n"
                              "forward()"], capture_output=True, text=True)
    assert crashed.returncode == -signal.SIGABRT
    side = Side("head", "working tree", tmp_path, tmp_path / "site", sys.executable)
    run = RoundRun(tmp_path / "head.json", crashed.returncode, (), crash_said(crashed.returncode,
                                                                               crashed.stdout + crashed.stderr))
    with pytest.raises(SideError) as said:
        _points(side, run)
    assert str(said.value) == ("head working tree: its benchmark run crashed before it wrote its results, ended by "
                               "SIGABRT; Fatal Python error: Aborted; innermost frame: File \"<string>\", line 3 in "
                               "forward"), str(said.value)


def test_a_marker_of_json_that_is_not_an_object_lists_as_a_dead_build(tmp_path: Path) -> None:
    """A marker holding `null` or a list (a hand edit, another tool) had ended `envs`, `envs --prune` and the prune
    after every build with an AttributeError; it lists without a spec, as an unreadable marker does."""
    for name, text in (("0123456789abcdef", "null"), ("fedcba9876543210", '["x"]'),
                       ("00112233aabbccdd", json.dumps({"spec": "torch==2.13.0"}))):
        (tmp_path / name).mkdir()
        (tmp_path / name / envcache.READY).write_text(text)
    specs = {e.folder.name: e.spec for e in envcache.entries(tmp_path)}
    assert specs == {"0123456789abcdef": "", "fedcba9876543210": "", "00112233aabbccdd": "torch==2.13.0"}, specs
