"""Third-party implementations join through the `sdpa_impls` entry-point group of a really installed package."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from plugin_env import build_plugin_env

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def plugin_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_plugin_env(tmp_path_factory.mktemp("plugins"))


def run_py(python: Path, code: str) -> str:
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


ORIGIN_CODE = ("import importlib.util, json, sys\n"
               "mods = sys.argv[1:]\n"
               "print(json.dumps({m: (importlib.util.find_spec(m) or None) and importlib.util.find_spec(m).origin "
               "for m in mods}))\n")


def origins(python: Path | str, modules: list[str]) -> dict[str, str | None]:
    """Where `python` imports each module from (None: not importable there)."""
    done = subprocess.run([str(python), "-c", ORIGIN_CODE, *modules], capture_output=True, text=True, cwd=REPO,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_plugin_environment_imports_from_the_test_environment(plugin_python: Path) -> None:
    """The interpreter that the plug-in, gate and asv tests start must import torch, sdpa_impls and the test tools
    from the environment the tests run in, never from whatever the machine's base python3 happens to have (or lack)."""
    modules = ["torch", "sdpa_impls", "pytest", "pytest_benchmark", "numpy", "asv"]
    here = origins(sys.executable, modules)
    there = origins(plugin_python, modules)
    wrong = [f"{m}: imported from {there[m]!r}, but the tests use {here[m]!r}" for m in modules if there[m] != here[m]]
    assert not wrong, f"the plug-in environment does not see the test environment ({sys.prefix}):\n" + "\n".join(wrong)
    assert here["torch"] and here["sdpa_impls"], "the test environment itself must have torch and sdpa_impls"


def test_installed_plugins_appear_in_names(plugin_python: Path) -> None:
    out = run_py(plugin_python, "import json, sdpa_impls; print(json.dumps(sdpa_impls.names()))")
    names = json.loads(out)
    assert names[:3] == ["naive", "chunked", "fused"]
    assert {"test_perturbed", "test_tunable", "test_broken", "test_exits"} <= set(names)


def test_a_plugin_named_as_a_built_in_is_left_out_and_said(plugin_python: Path) -> None:
    """An entry point named `fused`: `--impl fused` measures the built-in, which `list` says (it was silent)."""
    out = run_py(plugin_python, "import json, sdpa_impls; from sdpa_impls.registry import shadowed\n"
                                "print(json.dumps([type(sdpa_impls.get('fused')).__module__, shadowed()]))")
    assert json.loads(out) == ["sdpa_impls.impls.fused", ["fused = sdpa_test_plugins:Perturbed"]], out
    listed = subprocess.run([str(plugin_python), "-m", "sdpa_impls", "list", "--device", "cpu"], capture_output=True,
                            text=True, timeout=300)
    assert listed.returncode == 0 and ("note: the plug-in entry point fused = sdpa_test_plugins:Perturbed is not "
                                       "loaded: fused is a built-in implementation") in listed.stdout, listed.stdout


def test_plugins_run_and_a_broken_one_explains_itself(plugin_python: Path) -> None:
    code = (
        "import json, torch, sdpa_impls\n"
        "q = torch.randn(1, 2, 8, 16)\n"
        "out = sdpa_impls.get('test_tunable')(q, q, q)\n"
        "print(json.dumps({'shape': list(out.shape),\n"
        "                  'broken': sdpa_impls.get('test_broken').unsupported_reasons(q, q, q),\n"
        "                  'exits': sdpa_impls.get('test_exits').unsupported_reasons(q, q, q)}))\n"
    )
    result = json.loads(run_py(plugin_python, code))
    assert result["shape"] == [1, 2, 8, 16]
    assert result["broken"] and "plug-in failed to load" in result["broken"][0]
    assert "sdpa_test_plugins.missing" in result["broken"][0]
    assert result["exits"] == ["plug-in failed to load: SystemExit: 0"], result["exits"]  # sys.exit(0) at its import


def test_a_plugin_that_also_uses_register_loads_as_itself(plugin_python: Path) -> None:
    """A class copied from a built-in keeps its `@register`: the entry point finds it registered and keeps that
    instance; a module that registers another class under the entry point's name gets a reason saying so."""
    code = (
        "import json, torch, sdpa_impls\n"
        "from sdpa_test_plugins.registered import Registered\n"
        "q = torch.randn(1, 2, 8, 16)\n"
        "impl = sdpa_impls.get('test_registered')\n"
        "print(json.dumps({'same': type(impl) is Registered, 'names': sdpa_impls.names(),\n"
        "                  'close': bool(torch.allclose(impl(q, q, q), sdpa_impls.get('naive')(q, q, q))),\n"
        "                  'impostor': sdpa_impls.get('test_impostor').unsupported_reasons(q, q, q)}))\n"
    )
    result = json.loads(run_py(plugin_python, code))
    assert result["same"] and result["close"] and result["names"].count("test_registered") == 1
    assert len(result["impostor"]) == 1 and "plug-in failed to load" in result["impostor"][0]
    assert "another implementation is registered under 'test_impostor'" in result["impostor"][0]
    assert "sdpa_test_plugins.registered.Squatter" in result["impostor"][0]


def test_plugins_are_not_installed_in_the_main_environment() -> None:
    import sdpa_impls
    assert "test_perturbed" not in sdpa_impls.names()


def test_wrong_implementation_fails_instead_of_getting_a_time(plugin_python: Path, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [str(plugin_python), "-m", "pytest", str(REPO / "tests" / "test_benchmarks.py"), "-p", "no:cacheprovider",
         "-q", "--benchmark-only", "--sdpa-preset", "smoke", "--sdpa-impl", "test_perturbed",
         "--sdpa-impl", "naive", f"--benchmark-json={out}", "--benchmark-max-time=0.05"],
        capture_output=True, text=True, cwd=REPO, timeout=600)
    assert done.returncode == 1, done.stdout[-3000:]
    assert "WrongResult" in done.stdout and "test_perturbed" in done.stdout
    said = done.stdout + done.stderr  # a point that failed before timing used the fixture: no "was not used" warning
    assert "was not used at all in this test" not in said, said[-3000:]
    benchmarks = json.loads(out.read_text())["benchmarks"]
    timed = {b["extra_info"]["impl"] for b in benchmarks}
    assert timed == {"naive"}, "only the correct implementation may get a time"


def test_the_asv_suite_fails_a_named_plugin_that_does_not_load_and_a_bad_setting(plugin_python: Path) -> None:
    """As `run --impl` and pytest's --sdpa-impl do: a plug-in named in SDPA_BENCH_IMPLS that fails to load stops the
    suite (its cells were recorded as skipped, and asv exited 0 with a history of a kernel that never ran); unnamed,
    its points skip saying why. An unknown name says which interpreter lacks it; a bad SDPA_BENCH_CPU_EXP is refused
    at import, before anything is measured (it was ignored); an empty name between commas is a typo, refused."""
    code = ("import json, os, sys\n"
            "from sdpa_impls.suite import asv_suite\n"
            "said = {}\n"
            "for value in ('test_broken,naive', 'naive,nope', '', 'naive,,torch_sdpa'):\n"
            "    os.environ['SDPA_BENCH_IMPLS'] = value\n"
            "    try:\n"
            "        said[value] = asv_suite.impl_names()\n"
            "    except Exception as exc:\n"
            "        said[value] = f'{type(exc).__name__}: {exc}'\n"
            "print(json.dumps(said))\n")
    said = json.loads(run_py(plugin_python, code))
    assert said["test_broken,naive"].startswith("PluginLoadError: plug-in 'test_broken' failed to load"), said
    assert said["naive,nope"].startswith("ValueError: SDPA_BENCH_IMPLS='naive,nope': unknown implementation 'nope' "
                                         f"in {plugin_python}"), said
    assert "test_broken" in said[""], said  # every implementation: the broken one's points skip with the reason
    assert said["naive,,torch_sdpa"] == "ValueError: SDPA_BENCH_IMPLS='naive,,torch_sdpa': an empty name between commas"
    done = subprocess.run([str(plugin_python), "-c", "import sdpa_impls.suite.asv_suite"], capture_output=True,
                          text=True, cwd=REPO, timeout=300, env=os.environ | {"SDPA_BENCH_CPU_EXP": "exp10"})
    assert done.returncode != 0 and "SDPA_BENCH_CPU_EXP should be exp or exp2 (or unset), got 'exp10'" in done.stderr
    suite = subprocess.run([str(plugin_python), "-m", "pytest", "-p", "no:cacheprovider", "--pyargs",
                            "sdpa_impls.suite.test_sdpa", "--benchmark-only", "--sdpa-preset", "smoke", "--sdpa-impl",
                            "fused"], capture_output=True, text=True, cwd=REPO, timeout=300,
                           env=os.environ | {"SDPA_BENCH_CPU_EXP": "exp10"})
    assert suite.returncode == 4 and "SDPA_BENCH_CPU_EXP should be exp or exp2" in suite.stdout + suite.stderr, (
        suite.stdout[-2000:] + suite.stderr[-2000:])  # pytest's usage error; it was 10 passed, the value ignored
