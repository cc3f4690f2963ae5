"""asv end to end: the suite under real asv, and a three-commit smoke history (the first measured by the suite of old)
published and rendered in headless Chromium."""
from __future__ import annotations

import ast
import base64
import contextlib
import fcntl
import functools
import http.server
import itertools
import json
import math
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

asv_results = pytest.importorskip("asv.results", reason="asv is not installed (pip install -e .[asv])")
asv_util = pytest.importorskip("asv.util")

from plugin_env import build_plugin_env

ROOT = Path(__file__).resolve().parents[1]
MEASURE_LOCK = Path("/tmp/sdpa-measure.lock")  # measurements on a shared machine take turns
LOCK_WAIT_S = 1800  # the longest wait for it before the test fails
BRANCH = "asv-history"
IMPLS = ("naive", "xformers", "torch_sdpa")  # xformers never runs on CPU: its cells must be skipped, not failed
HISTORY_ENV = "virtualenv"  # asv's environment of the history (the matrix's pinned torch), by its name's start
# a second environment for the same commits, as a user with another torch adds one (docs/explanation/asv-design.md):
# asv records an `existing:` interpreter under its path, so its results are a series of their own
SECOND_PYTHON = sys.executable
SCREENSHOT_ENV = "SDPA_ASV_SCREENSHOT"  # where to copy the graph screenshot (docs/asv-site.png)
APT_PACKAGES = ("chromium", "libjs-jquery", "libjs-jquery-flot", "libjs-bootstrap", "libjs-jquery-stupidtable",
                "node-blueimp-md5")
START_TIMEOUT_S = 120  # the first DevTools reply of a freshly started Chromium
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--window-size=1280,860")
# asv 0.6's index.html takes jQuery, flot, bootstrap, stupidtable and md5 from CDNs, which a machine without
# internet cannot reach; the test server substitutes Debian's packaged copies (flot's orderBars, for bar
# charts of parameters, has no Debian package: an empty stand-in; the line graphs tested here do not use it).
# Files named as on the CDN in $SDPA_ASV_VENDOR_DIR (e.g. unpacked with `npm pack`) take precedence.
VENDOR_DIR_ENV = "SDPA_ASV_VENDOR_DIR"
DEBIAN_JS = Path("/usr/share/javascript")
VENDOR = {"jquery.min.js": "jquery/jquery.min.js", "jquery.flot.min.js": "jquery-flot/jquery.flot.min.js",
          "jquery.flot.time.min.js": "jquery-flot/jquery.flot.time.min.js",
          "jquery.flot.selection.min.js": "jquery-flot/jquery.flot.selection.min.js",
          "jquery.flot.categories.min.js": "jquery-flot/jquery.flot.categories.min.js",
          "jquery.flot.orderBars.js": None, "stupidtable.min.js": "jquery-stupidtable/stupidtable.min.js",
          "md5.min.js": "blueimp-md5/md5.min.js", "bootstrap.min.js": "bootstrap/js/bootstrap.min.js",
          "bootstrap.min.css": "bootstrap/css/bootstrap.min.css"}
CDN_URL = re.compile(r'"https://[^"]+/([^/"]+)"')
SRI_ATTRS = re.compile(r'\s(integrity|crossorigin|referrerpolicy)="[^"]*"')


def run(cmd: list[str], *, env: dict[str, str] | None = None, cwd: Path = ROOT, timeout: float = 900,
        codes: tuple[int, ...] = (0,)) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode in codes, f"{' '.join(map(str, cmd))} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def take_lock(lock, deadline: float) -> None:
    """The measurement lock, waiting for whoever holds it until `deadline`; then the test fails saying why (a blocking
    flock would wait forever on a parent that holds it: `flock /tmp/sdpa-measure.lock tox -e py`)."""
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                pytest.fail(f"{MEASURE_LOCK} stayed held for {LOCK_WAIT_S} s: another measurement holds it, or this test "
                            f"run was started under `flock {MEASURE_LOCK}` (start it outside: the test takes the lock "
                            "itself, only around asv run)")
            time.sleep(1)


def asv(*args: str, env: dict[str, str], cwd: Path, measure: bool = False, codes: tuple[int, ...] = (0,)) -> str:
    """`python -m asv ...`; with `measure`, holding the machine's measurement lock (one measurement at a time)."""
    cmd = [sys.executable, "-m", "asv", *args]
    if not measure:
        return run(cmd, env=env, cwd=cwd, codes=codes)
    with open(MEASURE_LOCK, "a") as lock:
        waited = time.monotonic()
        take_lock(lock, waited + LOCK_WAIT_S)
        started = time.monotonic()
        try:
            return run(cmd, env=env, cwd=cwd, codes=codes)
        finally:
            print(f"asv {args[0]}: {time.monotonic() - started:.0f} s after {started - waited:.0f} s for the lock")


def asv_env(home: Path, impls: tuple[str, ...]) -> dict[str, str]:
    return {**os.environ, "HOME": str(home), "SDPA_BENCH_PRESET": "smoke", "SDPA_BENCH_IMPLS": ",".join(impls)}


def write_config(tmp: Path, repo: Path, branch: str, benchmark_dir: Path = ROOT / "benchmarks") -> Path:
    """The repository's asv.conf.json, with the project repo, suite, results, html and environments moved into tmp."""
    conf = asv_util.load_json(str(ROOT / "asv.conf.json"), js_comments=True)
    conf.update(repo=str(repo), branches=[branch], benchmark_dir=str(benchmark_dir),
                env_dir=str(tmp / "env"), results_dir=str(tmp / "results"), html_dir=str(tmp / "html"))
    path = tmp / f"asv-{benchmark_dir.parent.name}.conf.json"
    path.write_text(json.dumps(conf, indent=1))
    return path


def results_of(results_dir: Path, machine: str, benchmark: str, env: str) -> Iterator[tuple[object, list, list]]:
    """asv's result files of one machine that hold `benchmark` (a commit measured by another suite has none), from
    the environments whose name starts with `env`; with each, the benchmark's parameters and its (impl, case) keys."""
    for res in asv_results.iter_results_for_machine(str(results_dir), machine):
        if benchmark in res.get_all_result_keys() and res.env_name.startswith(env):
            params = res.get_result_params(benchmark)  # asv stores each parameter value as its repr()
            yield res, params, [tuple(ast.literal_eval(p) for p in combo) for combo in itertools.product(*params)]


def values(results_dir: Path, machine: str, benchmark: str,
           env: str = "") -> dict[str, dict[tuple[str, ...], float | None]]:
    """{commit: {(impl, case): value}} from asv's own result files (NaN: skipped, None: failed)."""
    return {res.commit_hash: dict(zip(keys, res.get_result_value(benchmark, params)))
            for res, params, keys in results_of(results_dir, machine, benchmark, env)}


def stats_of(results_dir: Path, machine: str, benchmark: str,
             env: str = "") -> dict[str, dict[tuple[str, ...], dict | None]]:
    """{commit: {(impl, case): asv's statistics of the samples}} (None: skipped or failed)."""
    return {res.commit_hash: dict(zip(keys, res.get_result_stats(benchmark, params)))
            for res, params, keys in results_of(results_dir, machine, benchmark, env)}


def clone(tmp: Path) -> Path:
    """This repository's HEAD cloned into tmp/repo, on branch BRANCH (even when HEAD here is detached)."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp / "repo"
    run(["git", "clone", "--quiet", str(ROOT), str(repo)])
    run(["git", "-C", str(repo), "checkout", "--quiet", "-B", BRANCH])
    return repo


def per_process_suite(tmp: Path) -> Path | None:
    """The asv suite as it was when asv ran every benchmark cell in a process of its own (`time_sdpa` timed by asv),
    from this repository's history, in tmp/per-process/benchmarks; None where the history does not reach it."""
    done = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%H", "-S", "class PerCallClock", "--",
                           "benchmarks/bench_sdpa.py"], capture_output=True, text=True, timeout=60)
    commit = done.stdout.strip()
    if done.returncode != 0 or not commit:
        return None
    suite = tmp / "per-process" / "benchmarks"
    suite.mkdir(parents=True)
    for name in ("__init__.py", "bench_sdpa.py"):
        for rev in (commit, f"{commit}^"):  # the commit that removed it, or the one that added it
            text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:benchmarks/{name}"], capture_output=True,
                                  text=True, timeout=60).stdout
            if name != "bench_sdpa.py" or "class PerCallClock" in text:
                break
        (suite / name).write_text(text)
    return suite if "class PerCallClock" in (suite / "bench_sdpa.py").read_text() else None


def interpreter_starts(log: Path) -> list[str]:
    """What each interpreter that imported the suite was started for (discover, run_server, setup_cache)."""
    return [line.split()[1] for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Three commits of this repository: HEAD measured by the suite of old (a process per benchmark cell, `naive` on
    the forward cases only), and two empty commits on top measured by today's suite, with the smoke preset."""
    tmp = tmp_path_factory.mktemp("asv-history")
    repo = clone(tmp)
    for n in (1, 2):
        run(["git", "-C", str(repo), "-c", "user.name=sdpa-bench test", "-c", "user.email=test@localhost", "commit",
             "--quiet", "--allow-empty", "-m", f"point {n + 1} of the test history"])
    config = write_config(tmp, repo, BRANCH)
    starts = tmp / "interpreter-starts.log"
    env = asv_env(tmp, IMPLS) | {"SDPA_BENCH_ASV_STARTS": str(starts)}
    machine = run([sys.executable, "-m", "sdpa_impls.suite.asv_machine"], env=env).strip().splitlines()[-1]
    clock = time.monotonic()
    # the environment and torch, before taking the measurement lock; asv 0.6.6's `setup` exits 1 on success
    asv("setup", "--config", str(config), env=env, cwd=tmp, codes=(0, 1))
    assert list((tmp / "env").glob("*/bin/python")), "asv setup created no environment"
    setup_s = time.monotonic() - clock
    old_suite = per_process_suite(tmp)
    if old_suite is not None:  # the history the site must keep showing
        asv("run", "--config", str(write_config(tmp, repo, BRANCH, old_suite)), "--quick", "--bench",
            r"^bench_sdpa\.Forward\.", f"{BRANCH}~2^!", env=asv_env(tmp, ("naive",)), cwd=tmp, measure=True)
    out = asv("run", "--config", str(config), "--show-stderr", f"{BRANCH}~2..{BRANCH}", env=env, cwd=tmp,
              measure=True)
    commits = run(["git", "-C", str(repo), "rev-list", "--max-count=3", BRANCH]).split()[::-1]
    clock = time.monotonic()
    for commit in commits[1:]:  # the same two commits in a second environment: this interpreter, as it is
        asv("run", "--config", str(config), "--quick", "--environment", f"existing:{SECOND_PYTHON}",
            "--set-commit-hash", commit, "--bench", r"^bench_sdpa\.Forward\.", env=asv_env(tmp, ("naive",)), cwd=tmp,
            measure=True)
    second_s = time.monotonic() - clock
    clock = time.monotonic()
    asv("publish", "--config", str(config), env=env, cwd=tmp)
    print(f"asv setup: {setup_s:.0f} s, second environment: {second_s:.0f} s, "
          f"asv publish: {time.monotonic() - clock:.0f} s")
    return {"tmp": tmp, "machine": machine, "run_output": out, "html": tmp / "html", "commits": commits,
            "old_suite": old_suite is not None, "starts": interpreter_starts(starts)}


def graph_points(html: Path, benchmark: str, commit: str, params: tuple[str, ...]) -> list[float | None]:
    """The values the published site plots for one cell of a benchmark at one commit, over every graph (one per
    environment and branch) that has it: [] where no graph holds the commit."""
    index = json.loads((html / "index.json").read_text())
    revision = {h: int(r) for r, h in index["revision_to_hash"].items()}[commit]
    combos = [tuple(ast.literal_eval(p) for p in combo) for combo in itertools.product(*index["benchmarks"][benchmark]["params"])]
    out = []
    for path in (html / "graphs").rglob(f"{benchmark}.json"):
        if path.parent.name == "summary":  # one number per commit over all cells
            continue
        for rev, values in json.loads(path.read_text()):
            if rev == revision:
                out.append(values[combos.index(params)])
    return out


def test_history_has_times_memory_statistics_and_visible_skips(history: dict) -> None:
    import torch

    machine, results = history["machine"], history["tmp"] / "results"
    gpu = json.loads((results / machine / "machine.json").read_text())["gpu"]
    if torch.cuda.is_available():  # the GPU model is in the machine's name and its `gpu` field
        model = torch.cuda.get_device_name()
        assert machine.endswith(re.sub(r"[^A-Za-z0-9._-]+", "-", model)) and gpu.startswith(model)
    else:
        assert machine.endswith("-cpu") and gpu == "none"
    new_commits = set(history["commits"][1:])
    skipped_cells = 0
    for mode in ("Forward", "ForwardBackward"):
        times = values(results, machine, f"bench_sdpa.{mode}.track_time_sdpa", HISTORY_ENV)
        memory = values(results, machine, f"bench_sdpa.{mode}.track_peak_memory", HISTORY_ENV)
        stats = stats_of(results, machine, f"bench_sdpa.{mode}.track_time_sdpa", HISTORY_ENV)
        assert new_commits <= times.keys() and new_commits <= memory.keys()
        for commit in new_commits:
            for (impl, case), seconds in times[commit].items():
                if impl == "xformers":  # skipped, with its reason shown by --show-stderr
                    assert seconds is not None and math.isnan(seconds)
                    assert math.isnan(memory[commit][(impl, case)])
                    skipped_cells += 2
                else:  # a time with the statistics of its samples, and a memory
                    assert seconds is not None and 0 < seconds < 10, (impl, case, seconds)
                    s = stats[commit][(impl, case)]
                    assert s["q_25"] <= seconds <= s["q_75"] and s["repeat"] >= 5 and s["number"] >= 1, s
                    assert memory[commit][(impl, case)] > 0, (impl, case)
            # naive materializes the (B, H, L, L) fp32 scores; the measured peak must count at least those bytes
            if mode == "Forward":
                assert memory[commit][("naive", "L128-E64-fp32-fwd")] >= 1 * 8 * 128 * 128 * 4
    reasons = re.findall(r"For parameters: 'xformers', '[^']+'\s+asv: skipped: Unsupported\('xformers cannot run this "
                         r"case: xformers is not installed", history["run_output"])
    assert len(reasons) == skipped_cells, (len(reasons), skipped_cells)  # every skipped cell, with its reason


def test_one_interpreter_per_mode_not_per_cell(history: dict) -> None:
    """asv's forkserver imports the suite once per commit and forks each cell; each mode is measured in one
    setup_cache process, and a mode without cases (smoke's backward-only) in none. Counted from the line each
    interpreter importing the suite writes (SDPA_BENCH_ASV_STARTS)."""
    starts = history["starts"]
    commits, modes = 2, 2
    assert starts.count("discover") == 1, starts
    assert starts.count("run_server") == commits, starts
    assert starts.count("setup_cache") == commits * modes, starts
    assert len(starts) == 1 + commits * (1 + modes), starts
    new_commits = set(history["commits"][1:])
    cells = sum(len(cells) for b in ("Forward", "Backward", "ForwardBackward") for t in ("track_time_sdpa", "track_peak_memory")
                for commit, cells in values(history["tmp"] / "results", history["machine"], f"bench_sdpa.{b}.{t}",
                                              HISTORY_ENV).items()
                if commit in new_commits)
    assert cells == commits * 2 * 3 * (4 + 1 + 1)  # (naive, xformers, torch_sdpa) x (4 fwd, 1 bwd placeholder, 1 fwd+bwd)
    assert len(starts) < cells / 6  # a process per cell would have started one interpreter per cell


def test_site_keeps_the_history_measured_a_process_per_cell(history: dict) -> None:
    """The first commit was measured by the suite of old (`time_sdpa` timed by asv); the site still plots it, and its
    peak memory is on the same graph as today's."""
    if not history["old_suite"]:
        pytest.skip("this checkout's history has no suite of old (a shallow clone?)")
    html, (old, new, newest) = history["html"], history["commits"]
    cell = ("naive", "L128-E64-fp32-fwd")
    old_time = graph_points(html, "bench_sdpa.Forward.time_sdpa", old, cell)
    assert old_time and all(t is not None and 0 < t < 10 for t in old_time), old_time
    memory = [graph_points(html, "bench_sdpa.Forward.track_peak_memory", c, cell) for c in (old, new, newest)]
    assert all(m and all(v is not None and v >= 8 * 128 * 128 * 4 for v in m) for m in memory), memory
    times = [graph_points(html, "bench_sdpa.Forward.track_time_sdpa", c, cell) for c in (new, newest)]
    assert all(t and all(v is not None and v > 0 for v in t) for t in times), times


def test_wrong_result_fails_and_extra_bytes_are_counted(tmp_path: Path) -> None:
    """Under real asv, a wrong implementation gets no number, and bytes held at the peak appear in the memory."""
    python = build_plugin_env(tmp_path)
    repo = clone(tmp_path)
    config = write_config(tmp_path, repo, BRANCH)
    env = asv_env(tmp_path, ("naive", "test_perturbed", "test_tunable")) | {"SDPA_TUNABLE_EXTRA_BYTES": str(8 << 20)}
    commit = run(["git", "-C", str(repo), "rev-parse", "HEAD"]).strip()
    run([str(python), "-m", "sdpa_impls.suite.asv_machine"], env=env)
    out = asv("run", "--config", str(config), "--quick", "--show-stderr", "--environment", f"existing:{python}",
              "--set-commit-hash", commit, "--bench", r"^bench_sdpa\.Forward\.", env=env, cwd=tmp_path,
              measure=True, codes=(2,))  # 2: a benchmark failed
    assert "WrongResult: test_perturbed: max |error| of out vs fp64" in out
    machine = next(p.name for p in (tmp_path / "results").iterdir() if p.is_dir())
    times = values(tmp_path / "results", machine, "bench_sdpa.Forward.track_time_sdpa")[commit]
    memory = values(tmp_path / "results", machine, "bench_sdpa.Forward.track_peak_memory")[commit]
    for (impl, case), seconds in times.items():
        assert (seconds is None) == (impl == "test_perturbed"), (impl, case, seconds)
    case = ("L128-E64-fp32-fwd",)
    assert memory[("test_tunable", *case)] >= memory[("naive", *case)] + (8 << 20)


def test_a_second_environment_is_a_second_series_for_the_same_commits(history: dict, tmp_path: Path) -> None:
    """The two new commits measured in asv's virtualenv (the matrix's torch) and again by an `existing:` interpreter:
    two series of the same commits in the published graphs, and two lines in the browser, labelled by environment."""
    html, new = history["html"], history["commits"][1:]
    cell = ("naive", "L128-E64-fp32-fwd")
    for commit in new:  # a value per environment at each commit
        times = graph_points(html, "bench_sdpa.Forward.track_time_sdpa", commit, cell)
        assert len(times) == 2 and all(t is not None and 0 < t < 10 for t in times), (commit, times)
    pythons = json.loads((html / "index.json").read_text())["params"]["python"]
    assert SECOND_PYTHON in pythons and len(pythons) == 2, pythons
    index = json.loads((html / "index.json").read_text())
    revisions = sorted(int(r) for r, h in index["revision_to_hash"].items() if h in new)
    query = "&".join(f"p-{name}={urllib.parse.quote(repr(value))}" for name, value in zip(("impl", "case"), cell))
    with serve(html) as url:
        browser = Chromium(chromium_binary(), tmp_path / "profile")
        try:
            target = browser.call("Target.createTarget", url="about:blank")["targetId"]
            page = browser.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
            for domain in ("Page", "Runtime", "Log"):
                browser.call(f"{domain}.enable", page)
            browser.call("Page.navigate", page, url=f"{url}#bench_sdpa.Forward.track_time_sdpa?{query}")
            series = browser.wait_for(page, "(() => { const p = $('#main-graph').data('plot');"
                                            " const s = p ? p.getData() : []; return s.length >= 2 &&"
                                            " s.map(x => [String(x.label), x.data.map(d => d[0])]); })()")
            assert browser.errors() == [], browser.errors()
        finally:
            browser.close()
    assert len(series) == 2, series  # one line per environment for the one cell
    assert all(sorted(revs) == revisions for _, revs in series), (series, revisions)
    labels = sorted(label for label, _ in series)
    assert any(f"python-{SECOND_PYTHON}" in label for label in labels), labels
    assert any("torch-" in label and SECOND_PYTHON not in label for label in labels), labels


def chromium_binary() -> str:
    """Chromium and Debian's copies of the site's libraries, installed with apt when missing and allowed."""
    missing = [p for p in ("jquery", "jquery-flot", "bootstrap", "jquery-stupidtable", "blueimp-md5")
               if not (DEBIAN_JS / p).is_dir()]
    if not shutil.which("chromium") or missing:
        if os.geteuid() != 0 or not shutil.which("apt-get"):
            pytest.skip(f"needs `apt-get install -y {' '.join(APT_PACKAGES)}` (not root or no apt-get here)")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "--no-install-recommends", *APT_PACKAGES]
        if subprocess.run(install, env=env, capture_output=True, timeout=900).returncode != 0:
            subprocess.run(["apt-get", "update"], env=env, capture_output=True, timeout=300)
            done = subprocess.run(install, env=env, capture_output=True, text=True, timeout=900)
            if done.returncode != 0:
                pytest.skip(f"apt-get install {' '.join(APT_PACKAGES)} failed: {done.stderr[-500:]}")
    return shutil.which("chromium") or pytest.skip("chromium is not on PATH after installing it")


class SiteHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the published site; index.html takes its third-party libraries from /_vendor/ instead of CDNs."""

    def do_GET(self) -> None:
        path = self.path.split("?")[0].split("#")[0]
        if path in ("/", "/index.html"):
            html = (Path(self.directory) / "index.html").read_text()
            return self.reply(SRI_ATTRS.sub("", CDN_URL.sub(lambda m: f'"_vendor/{m.group(1)}"', html)).encode(),
                              "text/html")
        if path.startswith("/_vendor/"):
            cdn_name = path.rsplit("/", 1)[1]
            exact = Path(os.environ.get(VENDOR_DIR_ENV, "/nonexistent")) / cdn_name
            name = re.sub(r"-\d+(\.\d+)+", "", cdn_name)  # jquery-3.3.1.min.js -> jquery.min.js
            if exact.is_file():
                return self.reply(exact.read_bytes(), "text/css" if name.endswith(".css") else "text/javascript")
            if name not in VENDOR:
                return self.send_error(404, f"no local copy of {name}")
            body = (DEBIAN_JS / VENDOR[name]).read_bytes() if VENDOR[name] else b""
            return self.reply(body, "text/css" if name.endswith(".css") else "text/javascript")
        return super().do_GET()

    def reply(self, body: bytes, ctype: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def serve(directory: Path, lifetime_s: float = 300) -> Iterator[str]:
    """The site on an ephemeral localhost port; stops on exit, or by itself after `lifetime_s`."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(SiteHandler, directory=str(directory)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    timer = threading.Timer(lifetime_s, server.shutdown)
    timer.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/index.html"
    finally:
        timer.cancel()
        server.shutdown()
        server.server_close()


class Chromium:
    """Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe): no driver, no port."""

    def __init__(self, binary: str, profile: Path) -> None:
        high = lambda fd: (fcntl.fcntl(fd, fcntl.F_DUPFD, 10), os.close(fd))[0]  # noqa: E731  (clear of 3 and 4)
        cmd_r, self._cmd_w = map(high, os.pipe())
        self._out_r, out_w = map(high, os.pipe())
        # Chromium reads commands on fd 3 and writes replies and events on fd 4, each message ending in NUL;
        # bash (unlike dash) moves descriptors above 9
        shell = f'exec "$0" "$@" 3<&{cmd_r} 4>&{out_w} {cmd_r}<&- {out_w}>&-'
        profile.mkdir(parents=True, exist_ok=True)
        self.log = profile.parent / "chromium.log"  # its own messages, quoted when it does not answer
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([shutil.which("bash") or "bash", "-c", shell, binary, *CHROMIUM_FLAGS,
                                          f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank"],
                                         pass_fds=(cmd_r, out_w), stdout=log, stderr=subprocess.STDOUT)
        os.close(cmd_r)
        os.close(out_w)
        self.inbox: queue.Queue[dict | None] = queue.Queue()
        self.events: list[dict] = []
        self._ids = itertools.count(1)
        threading.Thread(target=self._read, daemon=True).start()
        # A cold start on a loaded machine (profile, font cache) has taken over 30 s: the first command waits longer
        try:
            self.call("Browser.getVersion", timeout=START_TIMEOUT_S)
        except BaseException:
            self.proc.kill()
            self.proc.wait(timeout=10)
            os.close(self._cmd_w)
            raise

    def _read(self) -> None:
        pending = b""
        with os.fdopen(self._out_r, "rb", buffering=0) as pipe:
            while chunk := pipe.read(1 << 16):
                *messages, pending = (pending + chunk).split(b"\0")
                for message in messages:
                    self.inbox.put(json.loads(message))
        self.inbox.put(None)

    def call(self, method: str, session: str | None = None, timeout: float = 30, **params: object) -> dict:
        """Send one command and return its result; events that arrive meanwhile go to `events`."""
        ident = next(self._ids)
        message = {"id": ident, "method": method, "params": params} | ({"sessionId": session} if session else {})
        os.write(self._cmd_w, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            try:
                item = self.inbox.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                state = "running" if self.proc.poll() is None else f"exited {self.proc.returncode}"
                tail = self.log.read_text(errors="replace")[-1500:]
                raise AssertionError(f"Chromium ({state}) did not answer {method} within {timeout} s; "
                                     f"its last output:\n{tail}") from None
            if item is None:
                raise RuntimeError(f"Chromium closed its DevTools pipe during {method}")
            if item.get("id") != ident:
                self.events.append(item)
            elif "error" in item:
                raise RuntimeError(f"{method}: {item['error']}")
            else:
                return item.get("result", {})

    def wait_for(self, session: str, expression: str, timeout: float = 60) -> object:
        """Poll a JavaScript expression until it is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            reply = self.call("Runtime.evaluate", session, expression=expression, returnByValue=True)
            value = reply.get("result", {}).get("value")
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"the page never satisfied {expression!r} within {timeout} s")
            time.sleep(0.25)

    def errors(self) -> list[str]:
        """Uncaught exceptions, console.error calls and error log entries (e.g. failed loads) seen so far."""
        out = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                out.append(details.get("exception", {}).get("description") or details.get("text", ""))
            elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
                out.append(" ".join(str(a.get("value", a.get("description"))) for a in params.get("args", [])))
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                out.append(f"{params['entry'].get('url', '')}: {params['entry']['text']}")
        return out

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.call("Browser.close", timeout=10)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        os.close(self._cmd_w)


def test_site_renders_benchmark_list_and_graph_without_js_errors(history: dict, tmp_path: Path) -> None:
    binary = chromium_binary()
    with serve(history["html"]) as url:
        browser = Chromium(binary, tmp_path / "profile")
        try:
            target = browser.call("Target.createTarget", url="about:blank")["targetId"]
            page = browser.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
            for domain in ("Page", "Runtime", "Log"):
                browser.call(f"{domain}.enable", page)
            browser.call("Page.navigate", page, url=f"{url}#/summarylist")
            listed = browser.wait_for(page, "Array.from(document.querySelectorAll('#summarylist-body a'))"
                                            ".map(a => a.getAttribute('href')).filter(h => h.startsWith('#bench'))")
            for name in ("Forward.track_time_sdpa", "Forward.track_peak_memory", "ForwardBackward.track_time_sdpa",
                         "Forward.time_sdpa"):
                assert any(name in href for href in listed), (name, listed)
            browser.call("Page.navigate", page, url=f"{url}#bench_sdpa.Forward.track_time_sdpa")
            points = browser.wait_for(page, "(() => { const p = $('#main-graph').data('plot'); if (!p) return 0;"
                                            " return p.getData().reduce((n, s) => n + s.data.length, 0); })()")
            assert points >= 2  # at least one series with both commits
            size = browser.wait_for(page, "(() => { const c = document.querySelector('#main-graph canvas');"
                                          " return c && c.width > 300 && c.height > 100 && [c.width, c.height]; })()")
            time.sleep(1)  # let late handlers run
            png = base64.b64decode(browser.call("Page.captureScreenshot", page, format="png")["data"])
            machine = history["machine"]
            gpu = json.loads((history["tmp"] / "results" / machine / "machine.json").read_text())["gpu"]
            tooltip = browser.wait_for(page, f"(() => {{ const b = $('#graphdisplay-navigation .btn').filter("
                                             f"(i, e) => e.textContent.trim() === {json.dumps(machine)});"
                                             " b.tooltip('show'); const t = $('.tooltip-inner').text();"
                                             " b.tooltip('hide'); return t; })()")
            assert f"gpu: {gpu}" in tooltip, tooltip  # the machine's GPU is on the site
            assert browser.call("Runtime.evaluate", page, expression="location.pathname")["result"]["value"] \
                == "/index.html"  # asv's js_load_failure() would have moved to error.html
            assert browser.errors() == [], browser.errors()
        finally:
            browser.close()
    assert png.startswith(b"\x89PNG") and size
    (tmp_path / "asv-site.png").write_bytes(png)
    if os.environ.get(SCREENSHOT_ENV):
        Path(os.environ[SCREENSHOT_ENV]).write_bytes(png)
