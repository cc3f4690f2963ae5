"""The torch releases the suite declares: an implementation that uses something newer than the running torch says
"needs torch ≥ X (this is Y)" instead of failing, and the declared floor is the one these gates are written against.

`SDPA_BENCH_OTHER_TORCH=/path/to/python` (an interpreter with another torch and this package's dependencies) also
runs the smoke preset and `sdpa-bench list` there, from this tree."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch

import sdpa_impls
from sdpa_impls.impls.flex import FLEX
from sdpa_impls.impls.torch_sdpa import EMPTY_GQA
from sdpa_impls.torchver import COMPILATION, needs_torch, release

ROOT = Path(__file__).resolve().parents[1]
OTHER_TORCH_ENV = "SDPA_BENCH_OTHER_TORCH"


def declared_floor() -> str:
    """The lowest torch pyproject.toml's dependencies admit (its `torch>=X`)."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    floors = [m.group(1) for d in deps if (m := re.fullmatch(r"torch\s*>=\s*([\d.]+)", d.split(";")[0].strip()))]
    assert len(floors) == 1, deps
    return floors[0]


@pytest.mark.parametrize("text,numbers", [("2.5.1+cu124", (2, 5, 1)), ("2.6", (2, 6, 0)), ("2.13.0+cpu", (2, 13, 0)),
                                          ("2.7.0.dev20250110+cpu", (2, 7, 0)), ("2.7.0a0+git1234abc", (2, 7, 0)),
                                          (" 2.10.1 ", (2, 10, 1))])
def test_release_reads_every_form_torch_writes(text: str, numbers: tuple) -> None:
    assert release(text) == numbers


@pytest.mark.parametrize("text", ["", "torch", "v2.5", "2", "latest"])
def test_a_string_that_is_no_version_is_one_clear_error(text: str) -> None:
    with pytest.raises(ValueError, match=r"not a torch version: .*expected MAJOR\.MINOR\[\.PATCH\]"):
        release(text)


def test_needs_torch_names_the_feature_the_minimum_and_the_running_release() -> None:
    assert needs_torch("2.7", "set_stance", running="2.5.1+cu124") == [
        "set_stance needs torch ≥ 2.7 (this is 2.5.1+cu124)"]
    assert needs_torch("2.7", "set_stance", running="2.7.0") == []
    assert needs_torch("2.7", "set_stance", running="2.10.0") == []  # 10 > 7 as numbers, not as text
    assert needs_torch("2.7.1", "x", running="2.7.0") == ["x needs torch ≥ 2.7.1 (this is 2.7.0)"]
    assert needs_torch("2.7", "x", running="2.7.0.dev20250110") == []  # a nightly of the release counts as it
    assert needs_torch("99.0", "x") == [f"x needs torch ≥ 99.0 (this is {torch.__version__})"]  # the running torch


def test_every_gate_is_above_the_declared_floor() -> None:
    """A gate at or below the floor would be dead code; the floor itself runs every eager implementation."""
    floor = release(declared_floor())
    for minimum in (COMPILATION[0], FLEX, EMPTY_GQA):
        assert release(minimum) > floor, (minimum, declared_floor())
    assert release(torch.__version__) >= floor


def test_the_compiled_implementations_say_what_they_need_on_an_older_torch() -> None:
    """What flex and compiled answer on a torch before their release (the same helper, told an older torch); on this
    torch, the gate's answer and nothing else, or no gate at all. An empty call compiles nothing: answered."""
    q, no_keys = torch.randn(1, 2, 16, 8), torch.randn(1, 2, 0, 8)
    old = needs_torch(*COMPILATION, running="2.5.1")
    assert old == ["torch.compile with dynamo's recompile_limit and set_stance needs torch ≥ 2.7 (this is 2.5.1)"]
    assert needs_torch(FLEX, "flex_attention compiled for this suite", running="2.8.0") == [
        "flex_attention compiled for this suite needs torch ≥ 2.9 (this is 2.8.0)"]
    for name, gate in (("flex", needs_torch(FLEX, "flex_attention compiled for this suite")),
                       ("compiled", needs_torch(*COMPILATION))):
        impl = sdpa_impls.get(name)
        reasons = impl.unsupported_reasons(q, q, q)
        assert reasons == gate if gate else not any("needs torch" in r for r in reasons), (name, reasons)
        assert impl.unsupported_reasons(q, no_keys, no_keys) == [] and (impl(q, no_keys, no_keys) == 0).all()


def test_no_key_value_heads_under_gqa_answers_zeros_where_torch_can() -> None:
    q, kv = torch.randn(1, 2, 4, 8), torch.randn(1, 0, 5, 8)
    assert needs_torch(EMPTY_GQA, "enable_gqa with no key/value heads", running="2.11.0") == [
        "enable_gqa with no key/value heads needs torch ≥ 2.12 (this is 2.11.0)"]
    for name in ("torch_sdpa", "torch_sdpa_math"):
        impl = sdpa_impls.get(name)
        reasons = impl.unsupported_reasons(q, kv, kv, enable_gqa=True)
        if needs_torch(EMPTY_GQA, "x"):
            assert reasons == [f"enable_gqa with no key/value heads needs torch ≥ {EMPTY_GQA} (this is "
                               f"{torch.__version__})"]
        else:
            assert reasons == [] and (impl(q, kv, kv, enable_gqa=True) == 0).all()


@pytest.fixture(scope="module")
def other_torch() -> tuple[str, str]:
    python = os.environ.get(OTHER_TORCH_ENV)
    if not python:
        pytest.skip(f"set {OTHER_TORCH_ENV} to an interpreter with another torch release")
    done = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"{python} cannot import torch: {done.stderr[-1000:]}"
    return python, done.stdout.strip()


def run_here(python: str, *args: str, timeout: float) -> subprocess.CompletedProcess:
    """`python -m sdpa_impls ARGS` with this tree's package first on the path."""
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    return subprocess.run([python, "-m", "sdpa_impls", *args], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=timeout)


def test_smoke_preset_and_list_run_on_the_other_torch(other_torch: tuple[str, str], tmp_path: Path) -> None:
    python, version = other_torch
    assert release(version) >= release(declared_floor()), f"{version} is below the declared floor"
    listed = run_here(python, "list", timeout=600)
    assert listed.returncode == 0 and "Traceback" not in listed.stdout + listed.stderr, listed.stderr[-3000:]
    done = run_here(python, "run", "--preset", "smoke", "--out", str(tmp_path), timeout=1800)
    assert done.returncode == 0 and "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]
    points = json.loads((tmp_path / "results.json").read_text())["results"]
    assert not [p for p in points if p["status"] == "failed"], [p["reason"] for p in points if p["status"] == "failed"]
    assert any(p["status"] == "ok" and p["impl"] == "naive" for p in points)
    for impl, minimum in (("flex", FLEX), ("compiled", COMPILATION[0])):
        gated = [p for p in points if p["impl"] == impl]
        if needs_torch(minimum, impl, running=version):
            assert gated and all(p["status"] == "skipped" and f"needs torch ≥ {minimum} (this is {version})"
                                 in p["reason"] for p in gated), gated
