"""The asv suite reports what one batch measured: `sdpa-bench run`'s samples (asv summarizes them as a time_
benchmark's), its peak memory, its skips with their reasons and its wrong points as failures; the series of old keep
their versions, and importing the suite leaves CUDA alone."""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

suite = pytest.importorskip("benchmarks.bench_sdpa", reason="run from the repository root")
statistics = pytest.importorskip("asv_runner.statistics", reason="asv is not installed (pip install -e .[asv])")
discovery = pytest.importorskip("asv_runner.discovery")

from sdpa_impls.bench.batch import measure_batch  # noqa: E402  (after the skips)
from sdpa_impls.bench.check import WrongResult  # noqa: E402
from sdpa_impls.bench.grid import Case  # noqa: E402
from sdpa_impls.bench.measure import Options  # noqa: E402
from held import CRASHES_MODULE  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CASE = Case(lq=128, lk=128, e=64)
FAST = Options(budget_s=0.05, min_reps=5, max_reps=20)
# asv derives a benchmark's version from its code, setup and setup_cache; results of another version leave the graph
TRACK_TIME_VERSIONS = {
    "Forward": "7c04b4dc0b0895be53614ca1bac5993eac037f82824c21258243ce3dd46e2754",
    "ForwardBackward": "1cccd86e2b16964b4021dbc22c192d3c986a962a22cfb95d9ee398721f3fbeb6",
}


@pytest.fixture(scope="module")
def batch() -> dict:
    return measure_batch([CASE], ["naive", "xformers"], "cpu", FAST)


def test_track_time_reports_the_batchs_samples_and_asv_takes_their_median(batch: dict) -> None:
    result = batch[("naive", CASE.id)]
    bench = suite.Forward()
    bench.setup(batch, "naive", CASE.id)
    reported = bench.track_time_sdpa(batch, "naive", CASE.id)
    assert reported == {"samples": list(result.samples), "number": result.calls_per_sample}
    assert len(result.samples) >= FAST.min_reps and result.calls_per_sample >= 1
    median, stats = statistics.compute_stats(reported["samples"], reported["number"])
    assert median == pytest.approx(result.median_s, rel=1e-12)  # asv's value is sdpa-bench's median
    assert stats["repeat"] == len(result.samples) and stats["number"] == result.calls_per_sample
    assert bench.track_peak_memory(batch, "naive", CASE.id) == result.peak_memory_bytes >= 8 * 128 * 128 * 4


def test_a_point_that_cannot_run_is_skipped_with_its_reasons_and_a_wrong_one_fails(batch: dict) -> None:
    bench = suite.Forward()
    with pytest.raises(NotImplementedError, match=r"xformers cannot run this case: .*device=cpu \(supported: cuda\)"):
        bench.setup(batch, "xformers", CASE.id)
    ok = batch[("naive", CASE.id)]
    wrong = {("naive", CASE.id): replace(ok, status="wrong", reason="naive: max |error| of out vs fp64 0.5 > 0.01")}
    with pytest.raises(WrongResult, match=r"max \|error\| of out vs fp64 0\.5"):
        bench.setup(wrong, "naive", CASE.id)
    failed = {("naive", CASE.id): replace(ok, status="failed", reason="out of memory: CUDA out of memory")}
    with pytest.raises(RuntimeError, match="out of memory") as caught:
        bench.setup(failed, "naive", CASE.id)
    assert not isinstance(caught.value, NotImplementedError)  # a failure, not a skip
    with pytest.raises(ValueError, match="was not measured"):
        bench.setup(batch, "torch_sdpa", CASE.id)
    with pytest.raises(NotImplementedError, match="has no bwd cases"):
        suite.Backward().setup("naive", suite.no_cases_id("bwd"))  # no setup_cache, so no points passed


def test_each_mode_is_measured_once_and_the_series_of_old_keep_their_versions() -> None:
    """One setup_cache (one process) per mode that has cases; none for a mode without (smoke has no backward-only
    case). The versions are what keeps each stored series on its graph."""
    found = {b.name: b for b in discovery.disc_benchmarks(str(ROOT / "benchmarks"))}
    keys = set()
    for cls in (suite.Forward, suite.Backward, suite.ForwardBackward):
        name = f"bench_sdpa.{cls.__name__}"
        time, memory, old = found[f"{name}.track_time_sdpa"], found[f"{name}.track_peak_memory"], found[f"{name}.time_sdpa"]
        assert time.unit == "seconds" and memory.unit == "bytes"
        assert time.setup_cache_key == memory.setup_cache_key == old.setup_cache_key
        assert (time.setup_cache_key is not None) == bool(suite.cases_of(cls.mode)), cls.__name__
        keys.add(time.setup_cache_key)
        if cls is not suite.Backward:  # the versions of the time series stored since the batch measurement landed
            assert time.version == TRACK_TIME_VERSIONS[cls.__name__], "a changed track_time_sdpa starts a new series"
        # what asv derived from the code of the suite that timed each cell in its own process
        assert memory.version == "97282593293c845ab71ba62e41f6b1d2c836213841f1aa8b3d6b7224d540c182"
        assert old.version == "aa12a47c9efaed7179708b37acfdf4f9f3305a1db944a8174459dfac75a150f2"
        assert old.rounds == 1
        for index in range(len(list(itertools.product(*cls.params)))):  # every cell skipped before its setup runs
            old.set_param_idx(index)
            assert old.do_setup() is True
    assert keys == {found["bench_sdpa.Forward.track_time_sdpa"].setup_cache_key,
                    found["bench_sdpa.ForwardBackward.track_time_sdpa"].setup_cache_key, None} and len(keys) == 3


def test_importing_the_suite_does_not_initialize_cuda() -> None:
    """asv's forkserver forks every cell from the process that imported the suite: a CUDA context there would make
    CUDA unusable in the children."""
    probe = "import benchmarks.bench_sdpa, torch; print(torch.cuda.is_initialized())"
    env = {k: v for k, v in os.environ.items() if k != "PYTORCH_NVML_BASED_CUDA_CHECK"} | {"SDPA_BENCH_PRESET": "smoke"}
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "False"


def test_a_dependency_missing_is_named_not_hidden_by_the_fallbacks_for_older_commits() -> None:
    """The suite falls back to older commits' modules where sdpa_impls lacks one; a missing dependency (numpy here)
    must surface as itself, not as a module of the old layout that no current install has."""
    probe = "import sys; sys.modules['numpy'] = None; import benchmarks.bench_sdpa"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=os.environ | {"SDPA_BENCH_PRESET": "smoke"},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError") and "numpy" in last and "sdpa_impls.grid" not in done.stderr, last


DRIVE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import crashmod
from sdpa_impls.bench.batch import measure_isolated
from sdpa_impls.bench.grid import preset
from sdpa_impls.bench.measure import Options
from sdpa_impls.impls.naive import Naive
from sdpa_impls.registry import register
cases = [c for c in preset("smoke") if c.mode == "fwd"][:3]
if sys.argv[2] != "crashes":  # registered here only: a child importing Naive's module does not register it
    register(type("Here", (Naive,), {"name": sys.argv[2], "__module__": "sdpa_impls.impls.naive"}))
batch = measure_isolated(cases, [sys.argv[2], "naive"], "cpu", Options(budget_s=0.05, min_reps=5, max_reps=20))
print(json.dumps({f"{i} {c}": [r.status, r.reason] for (i, c), r in batch.items()}))
"""


def test_a_point_that_crashes_fails_alone_and_the_batch_goes_on(tmp_path: Path) -> None:
    """asv's setup_cache measures a mode's batch in a child interpreter: a segfault inside one point fails that point
    with how the child ended and where (its innermost Python frames); a new child measures every point after it."""
    (tmp_path / "crashmod.py").write_text(CRASHES_MODULE)
    (tmp_path / "drive.py").write_text(DRIVE)
    proc = subprocess.run([sys.executable, str(tmp_path / "drive.py"), str(tmp_path), "crashes"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    points = json.loads(proc.stdout)
    crashed = points.pop("crashes L128-E64-bf16-causal-fwd")
    assert crashed[0] == "failed" and "ended inside this point (killed by SIGSEGV)" in crashed[1]
    assert 'crashmod.py", line 15 in forward' in crashed[1], crashed[1]  # where, which asv shows for the cell
    assert len(points) == 5 and all(status == "ok" for status, _ in points.values()), points
    # one registered at run time, which a child cannot register by an import: measured here, as before
    proc = subprocess.run([sys.executable, str(tmp_path / "drive.py"), str(tmp_path), "here"], capture_output=True,
                          text=True, timeout=120)
    points = json.loads(proc.stdout)
    assert len(points) == 6 and all(status == "ok" for status, _ in points.values()), points
