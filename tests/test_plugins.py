"""Third-party implementations join through the `sdpa_impls` entry-point group of a really installed package."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from plugin_env import build_plugin_env  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def plugin_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_plugin_env(tmp_path_factory.mktemp("plugins"))


def run_py(python: Path, code: str) -> str:
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_installed_plugins_appear_in_names(plugin_python: Path) -> None:
    out = run_py(plugin_python, "import json, sdpa_impls; print(json.dumps(sdpa_impls.names()))")
    names = json.loads(out)
    assert names[:3] == ["naive", "chunked", "fused"]
    assert {"test_perturbed", "test_tunable", "test_broken"} <= set(names)


def test_plugins_run_and_a_broken_one_explains_itself(plugin_python: Path) -> None:
    code = (
        "import json, torch, sdpa_impls\n"
        "q = torch.randn(1, 2, 8, 16)\n"
        "out = sdpa_impls.get('test_tunable')(q, q, q)\n"
        "print(json.dumps({'shape': list(out.shape),\n"
        "                  'broken': sdpa_impls.get('test_broken').unsupported_reasons(q, q, q)}))\n"
    )
    result = json.loads(run_py(plugin_python, code))
    assert result["shape"] == [1, 2, 8, 16]
    assert result["broken"] and "plug-in failed to load" in result["broken"][0]
    assert "sdpa_test_plugins.missing" in result["broken"][0]


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
    benchmarks = json.loads(out.read_text())["benchmarks"]
    timed = {b["extra_info"]["impl"] for b in benchmarks}
    assert timed == {"naive"}, "only the correct implementation may get a time"
