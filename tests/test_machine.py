"""What a result says about its machine, and the one definition of "the same machine"."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from sdpa_impls.bench.machine import (IDENTITY_FIELDS, ONEDNN_ISA_ENV, active_tracer, cpu_flags, cpu_model,
                                      describe_cpu, machine_differences, machine_identity, machine_info,
                                      source_revision)
from sdpa_impls.bench.timing import cuda_event_clock


def test_machine_info_records_every_version_and_the_timer() -> None:
    info = machine_info("cpu")
    for key in ("torch", "cuda", "cudnn", "xformers", "timer", "sdpa"):
        assert key in info, key
    assert info["timer"] == "time.perf_counter"
    assert machine_info("cpu", timer="x.y")["timer"] == "x.y"
    if hasattr(torch._C, "_get_sdp_priority_order"):
        assert "MATH" in info["sdpa"]["priority"]  # torch's backend order, by name
    else:  # torch before 2.6 keeps its order in its code and does not say it
        assert info["sdpa"]["priority"] is None
    assert set(machine_identity(info)) == set(IDENTITY_FIELDS)


def test_machine_info_names_the_cpus_bf16_paths_and_onednns_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether the CPU has AVX-512 BF16 and AMX, read from /proc/cpuinfo, and oneDNN's cap when one is set: what a
    bf16 speed number depends on, named wherever the CPU is."""
    flags = cpu_flags()
    features = machine_info("cpu")["cpu_features"]
    if flags:
        assert features["avx512_bf16"] == ("avx512_bf16" in flags) and features["amx_bf16"] == ("amx_bf16" in flags)
    monkeypatch.setenv(ONEDNN_ISA_ENV, "AVX2")
    text = describe_cpu(machine_info("cpu"))
    assert text.endswith(", oneDNN capped at AVX2") and "AVX-512 BF16 " in text and "AMX " in text
    assert describe_cpu({"cpu": "AMD EPYC", "cpu_features": {"avx512_bf16": True, "amx_bf16": False}}) == \
        "AMD EPYC, AVX-512 BF16 yes, AMX no"
    assert describe_cpu({"cpu": "AMD EPYC"}) == "AMD EPYC, AVX-512 BF16 unknown, AMX unknown"  # an older record


@pytest.mark.parametrize("field,values", [("cudnn", (91002, 90100)), ("xformers", ("0.0.35", "0.0.34")),
                                          ("timer", ("x.y", "x.z")), ("cuda", ("13.0", "12.8"))])
def test_another_cudnn_xformers_timer_or_cuda_is_another_machine(field: str, values: tuple) -> None:
    a = machine_info("cpu")
    b = a | {field: values[0] if a[field] != values[0] else values[1]}  # another value than this torch's own
    assert any(d.startswith(f"{field}:") for d in machine_differences(a, b))
    assert machine_differences(a, dict(a)) == []


ARM_CORE = "processor\t: {n}\nBogoMIPS\t: 243.75\nFeatures\t: fp asimd bf16\nCPU implementer\t: 0x41\n" \
           "CPU architecture: 8\nCPU variant\t: {variant}\nCPU part\t: {part}\nCPU revision\t: 1\n\n"


def test_two_arm_cpus_are_told_apart_where_linux_names_no_model() -> None:
    """Linux on Arm gives no "model name": a Neoverse-N1 (Graviton2) and a Neoverse-V1 (Graviton3) were both the
    machine's architecture, one machine to the gate's absolute-time rules and to `run --resume`."""
    n1 = "".join(ARM_CORE.format(n=n, variant="0x3", part="0xd0c") for n in range(2))
    v1 = "".join(ARM_CORE.format(n=n, variant="0x1", part="0xd40") for n in range(2))
    assert cpu_model(n1) == "Arm (implementer 0x41, part 0xd0c, variant 0x3)"
    assert cpu_model(v1) != cpu_model(n1)
    x86 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9R14\nflags\t\t: fpu avx512_bf16\n"
    assert cpu_model(x86) == "AMD EPYC 9R14"
    info = machine_info("cpu")
    other = next(text for text in (n1, v1) if cpu_model(text) != cpu_model())  # this machine may be either one
    assert machine_differences(info, {**info, "cpu": cpu_model(other)}) and info["cpu"] == cpu_model()


def test_another_driver_is_another_machine() -> None:
    gpu = {"name": "NVIDIA H100 80GB HBM3", "memory_bytes": 1, "capability": "9.0", "driver": "550.54"}
    a = machine_info("cpu") | {"gpu": gpu}
    b = a | {"gpu": gpu | {"driver": "570.10"}}
    assert machine_differences(a, b) == ["driver: 550.54 vs 570.10"]


def test_an_older_record_without_the_new_fields_is_not_taken_for_the_same_machine() -> None:
    old = {k: v for k, v in machine_info("cpu").items() if k not in ("cudnn", "timer")}
    assert {d.split(":")[0] for d in machine_differences(old, machine_info("cpu"))} == {"cudnn", "timer"}
    assert all(": not recorded vs " in d for d in machine_differences(old, machine_info("cpu")))


def _trace(frame, event, arg):  # a trace function of this module, as a debugger's or coverage's pure-Python tracer
    return None


def test_a_time_taken_under_a_tracing_tool_is_another_machines() -> None:
    """A coverage run, a debugger or a profiler slows every Python call of a point (1.1-1.3x at L 128 under
    coverage.py), and nothing recorded it: such a run compared with a plain one read as a regression. The record
    names the tool (a real sys.settrace hook and cProfile's profiler here); pytest-benchmark pauses those two
    while it times, so the suite's record (hooks=False) leaves them out."""
    import cProfile

    before, profile_before = sys.gettrace(), sys.getprofile()  # a coverage run of these tests keeps its own
    plain = machine_info("cpu")
    profiler = cProfile.Profile()
    sys.settrace(_trace)
    profiler.enable()
    try:
        traced, under = machine_info("cpu"), active_tracer()
        paused = active_tracer(hooks=False)
    finally:
        profiler.disable()
        sys.settrace(before)
        sys.setprofile(profile_before)
    # cProfile: a sys.setprofile hook up to Python 3.11, a sys.monitoring tool from 3.12, which nothing pauses
    profiled = "cProfile.Profile" if sys.version_info < (3, 12) else "sys.monitoring: cProfile"
    assert under is not None and f"{__name__}._trace" in under and profiled in under, under
    assert traced["tracer"] == under and "_trace" not in (paused or "")
    assert ("cProfile" in (paused or "")) == (sys.version_info >= (3, 12)), paused
    if before is None and profile_before is None and plain["tracer"] is None:  # and a record from before the
        assert machine_differences(plain, traced) == [f"tracer: none vs {under}"]  # field ran untraced, as most
        assert machine_differences({k: v for k, v in plain.items() if k != "tracer"}, plain) == []


def test_the_cuda_clock_is_named_by_its_import_path_in_pytest_benchmark_json() -> None:
    from pytest_benchmark.utils import NameWrapper

    assert str(NameWrapper(cuda_event_clock)) == "sdpa_impls.bench.timing.cuda_event_clock"
    assert json.dumps({"timer": cuda_event_clock}, default=str) == '{"timer": "sdpa_impls.bench.timing.cuda_event_clock"}'


def test_probe_prints_the_benchmark_timer(request: pytest.FixtureRequest) -> None:
    """Run on its own by the next test, with another --sdpa-device: the clock the suite's benchmarks read."""
    from sdpa_bench_pytest import device_of, timer_name

    print("TIMER", timer_name(request.config, device_of(request.config)))


def test_the_pytest_suite_swaps_the_timer_for_any_cuda_device_string() -> None:
    """--sdpa-device cuda:0 gets GPU time too (only the exact string `cuda` did); cpu keeps the host clock. Only the
    suite's benchmarks: the session's option itself stays as given, for any other benchmark of the session."""
    for device, timer in (("cuda:0", "sdpa_impls.bench.timing.cuda_event_clock"), ("cpu", "time.perf_counter")):
        proc = subprocess.run([sys.executable, "-m", "pytest", __file__, "-k", "probe_prints", "-s", "-q",
                               "-p", "no:cacheprovider", "--sdpa-device", device],
                              capture_output=True, text=True, timeout=120)
        assert f"TIMER {timer}" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: the clock reads CUDA events")
def test_cuda_event_clock_sums_deltas_in_float64() -> None:
    clock = type(cuda_event_clock)()
    start = clock()
    x = torch.randn(2048, 2048, device="cuda")
    for _ in range(10):
        x @ x
    mid = clock()
    assert isinstance(mid, float) and mid > start == 0.0
    clock._total_s = 3600.0  # an hour into a run: a float32 of milliseconds would resolve 250 µs here
    before = clock()
    after = clock()
    assert 0 <= after - before < 1e-4  # two back-to-back readings: microseconds apart, not 0 or 250 µs


def test_source_revision_names_the_commit_of_the_package_files_and_their_changes(tmp_path) -> None:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True,
                              text=True).stdout.strip()

    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("x = 1\n")
    assert source_revision(package).endswith("(not a git checkout)")
    git("init", "-q")
    assert source_revision(package).endswith("(not a git checkout)")  # in a repository, but not one of its files
    git("add", "pkg/__init__.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    commit = git("rev-parse", "--short=12", "HEAD")
    assert source_revision(package) == f"git {commit}"
    (tmp_path / "results.json").write_text("{}")  # a sweep saved inside the checkout, beside the package
    (tmp_path / "notes.md").write_text("x")
    git("add", "notes.md")
    assert source_revision(package) == f"git {commit}"
    (package / "__init__.py").write_text("x = 2\n")
    assert source_revision(package) == f"git {commit} + uncommitted changes"
