"""`run --shard auto`: the shard from torchrun or a SLURM array, one folder per process, merged like any shards."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sdpa_impls.bench.grid import preset
from sdpa_impls.cli.shards import auto_shard, parse_shard
from sdpa_impls.errors import UsageError

FAST = ["--device", "cpu", "--impl", "naive,fused", "--budget", "0.005", "--min-reps", "2", "--warmup", "1",
        "--no-memory", "--no-plots"]


def test_the_shard_comes_from_torchrun_or_a_slurm_array() -> None:
    assert auto_shard({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "3"}) == (4, 8, 3)
    assert auto_shard({"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "4"}) \
        == (1, 4, None)  # `sbatch --array=1-4`
    assert auto_shard({"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "4"}) == (4, 4, None)  # --array=0-3
    assert auto_shard({"SLURM_ARRAY_TASK_ID": "8", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_STEP": "4",
                       "SLURM_ARRAY_TASK_COUNT": "4"}) == (3, 4, None)  # --array=0-12:4
    with pytest.raises(UsageError, match="neither is set: give --shard I/N"):
        auto_shard({})
    with pytest.raises(UsageError, match=r"--shard auto: RANK=5, WORLD_SIZE=2 is no shard of 1 to 2"):
        auto_shard({"RANK": "5", "WORLD_SIZE": "2"})  # named as the launcher set it, not as a shard never typed
    with pytest.raises(UsageError, match="not a whole number: RANK="):
        auto_shard({"RANK": "x", "WORLD_SIZE": "2"})


def points(directory: Path) -> dict[tuple[str, str], str]:
    return {(r["case"]["id"], r["impl"]): r["status"]
            for r in json.loads((directory / "results.json").read_text())["results"]}


@pytest.mark.skipif(shutil.which("torchrun", path=str(Path(sys.executable).parent)) is None,
                    reason="torchrun is not installed beside this python")
def test_torchrun_with_two_processes_then_merge_gives_the_unsharded_points(tmp_path: Path) -> None:
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    proc = subprocess.run([torchrun, "--standalone", "--nproc-per-node", "2", "-m", "sdpa_impls", "run",
                           "--shard", "auto", "--preset", "smoke", "--out", str(tmp_path / "shards"), *FAST],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    shards = sorted((tmp_path / "shards").iterdir())
    assert [d.name for d in shards] == ["shard-1of2", "shard-2of2"]
    metas = [json.loads((d / "results.json").read_text())["meta"] for d in shards]
    assert [m["shard"] for m in metas] == ["1/2", "2/2"]
    merged = subprocess.run([sys.executable, "-m", "sdpa_impls", "merge", str(tmp_path / "merged"), *map(str, shards),
                             "--no-plots"], capture_output=True, text=True, timeout=300)
    assert merged.returncode == 0, merged.stderr
    whole = subprocess.run([sys.executable, "-m", "sdpa_impls", "run", "--preset", "smoke",
                            "--out", str(tmp_path / "whole"), *FAST], capture_output=True, text=True, timeout=600)
    assert whole.returncode == 0, whole.stderr[-3000:]
    got, want = points(tmp_path / "merged"), points(tmp_path / "whole")
    assert got == want and len(got) == 2 * len(preset("smoke"))


@pytest.mark.parametrize("text", [" 1/2", "1/2 ", "1_0/2_0", "\uff11/2", "1/\u0662", "+1/2", "1 / 2", ""])
def test_a_shard_is_ascii_digits_alone(text):
    """int() takes spaces, underscores, signs and other scripts' digits; a shard taking them named its folder so."""
    with pytest.raises(UsageError, match="must look like I/N"):
        parse_shard(text)
    assert parse_shard("2/12") == (2, 12)
