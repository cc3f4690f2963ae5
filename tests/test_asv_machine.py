"""`python -m sdpa_impls.suite.asv_machine`: a device it cannot describe is one line and exit 2; beside another entry
for the host, it says to pass --machine, and asv given it files results under the printed name."""
from __future__ import annotations

import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sdpa_impls.suite import asv_machine

# these read or write asv's machine file through asv itself, as the tox environments have it (the [asv] extra)
needs_asv = pytest.mark.skipif(importlib.util.find_spec("asv") is None,
                               reason="asv is not installed (pip install -e .[asv])")


@pytest.mark.parametrize("device, said", [
    ("tpu", "--device tpu: not a device this tool describes; available here: cpu"),
    (f"cuda:{torch.cuda.device_count()}", "no such CUDA device for this torch"),  # one past the last, on any machine
    ("cuda:x", "--device cuda:x: not a device this tool describes"),
])
def test_a_device_that_is_not_there_is_one_line_and_exit_2(device: str, said: str, capsys) -> None:
    assert asv_machine.main(["--device", device, "--dry-run"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and said in err, err
    assert err.startswith("python -m sdpa_impls.suite.asv_machine: error: ")


@needs_asv
@pytest.mark.parametrize("text", ["{not json", "[1, 2]"])
def test_a_machine_file_asv_cannot_read_is_one_line_and_exit_2(text: str, tmp_path: Path, monkeypatch,
                                                                capsys) -> None:
    """A ~/.asv-machine.json that is not JSON, or not an object of entries: one line naming it (it was asv's
    traceback, exit 1), and the file is left as it was."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".asv-machine.json").write_text(text)
    assert asv_machine.main([]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert err.startswith(f"python -m sdpa_impls.suite.asv_machine: error: cannot add this machine to {tmp_path}"), err
    assert (tmp_path / ".asv-machine.json").read_text() == text


@needs_asv
def test_results_go_under_the_printed_name_when_the_host_has_an_entry_too(tmp_path: Path, monkeypatch, capsys) -> None:
    """`asv machine --yes` made an entry named after the host; asv then files results there unless given --machine.
    The tool says so, and the guide's `asv run --machine "$(python -m sdpa_impls.suite.asv_machine)"` files them
    under the printed name (real asv and git, a one-benchmark project, this Python)."""
    env = {**os.environ, "HOME": str(tmp_path)}
    monkeypatch.setenv("HOME", str(tmp_path))
    project = tmp_path / "project"
    (project / "benchmarks").mkdir(parents=True)
    (project / "benchmarks" / "__init__.py").write_text("")
    (project / "benchmarks" / "bench_one.py").write_text("def track_one():\n    return 1\n")
    (project / "asv.conf.json").write_text(json.dumps({"version": 1, "project": "one", "repo": ".",
                                                       "branches": ["main"], "results_dir": "results",
                                                       "environment_type": "virtualenv"}))
    for args in (["init", "-q", "-b", "main"], ["add", "-A"],
                 ["-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-qm", "one"]):
        subprocess.run(["git", "-C", str(project), *args], check=True, capture_output=True, timeout=60)
    subprocess.run([sys.executable, "-m", "asv", "machine", "--yes"], env=env, cwd=project, check=True,
                   capture_output=True, timeout=120)
    assert asv_machine.main([]) == 0
    out, err = capsys.readouterr()
    name = out.strip()
    assert out == f"{name}\n" and name != platform.node(), out  # stdout: the name alone, for $(...)
    assert f"an entry named after this host, {platform.node()!r}" in err and f"`--machine {name}`" in err, err
    for machine in ([], ["--machine", name]):
        done = subprocess.run([sys.executable, "-m", "asv", "run", "--python=same", "--quick", "--set-commit-hash",
                               "main", *machine], cwd=project, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
    filed = {p.parent.name for p in (project / "results").glob("*/*-*.json")}
    assert filed == {platform.node(), name}, filed  # without --machine, the host's entry took the results


ROOT = Path(__file__).resolve().parents[1]
ASV_COMMAND = re.compile(r"\basv (run|continuous|compare)\b[^`\n]*")


def test_every_asv_command_the_guides_show_names_the_machine(tmp_path: Path, capsys) -> None:
    """The guide, the plug-in's README and quickstart's next steps: every asv run, continuous and compare with a
    range, an environment or options passes --machine, so no result lands under the host's entry."""
    from sdpa_impls.cli import main

    assert main(["quickstart", "--name", "mine", "--dest", str(tmp_path / "mine")]) == 0
    texts = {"quickstart": capsys.readouterr().out, "README": (tmp_path / "mine" / "README.md").read_text(),
             "guide": (ROOT / "docs" / "guide" / "history-with-asv.md").read_text(encoding="utf-8")}
    for where, text in texts.items():
        commands = [m.group(0) for m in ASV_COMMAND.finditer(text) if " --" in m.group(0) or "HEAD" in m.group(0)]
        assert commands, where
        assert [c for c in commands if '--machine "$MACHINE"' not in c] == [], where
        assert 'MACHINE="$(python -m sdpa_impls.suite.asv_machine)"' in text, where
