"""Which shard of a sweep this `run` measures: `--shard I/N`, or `--shard auto` from the launcher's environment."""
from __future__ import annotations

import re

from ..errors import UsageError


SHARD_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN",
                   "SLURM_ARRAY_TASK_STEP", "SLURM_ARRAY_TASK_COUNT")  # what --shard auto reads


def parse_shard(text: str) -> tuple[int, int]:
    """'I/N' with 1 <= I <= N -> (I, N); UsageError otherwise. ASCII digits alone: int() would also take spaces,
    underscores and other scripts' digits, which then name the sweep's folder."""
    found = re.fullmatch(r"([0-9]+)/([0-9]+)", text)
    if found is None:
        raise UsageError(f"--shard {text!r} must look like I/N, e.g. 1/4 (shard 1 of 4)")
    i, n = int(found[1]), int(found[2])
    if n < 1 or not 1 <= i <= n:
        raise UsageError(f"--shard {text!r}: need 1 <= I <= N (shards are numbered 1 to N)")
    return i, n


def auto_shard(env: dict[str, str]) -> tuple[int, int, int | None]:
    """(I, N, local rank or None) of this process from its launcher: torchrun (RANK, WORLD_SIZE, LOCAL_RANK) or a
    SLURM job array (SLURM_ARRAY_TASK_ID counted from SLURM_ARRAY_TASK_MIN in steps of SLURM_ARRAY_TASK_STEP,
    SLURM_ARRAY_TASK_COUNT). UsageError naming the variables where they give no shard of 1..N."""
    try:
        if "RANK" in env and "WORLD_SIZE" in env:
            local = env.get("LOCAL_RANK")
            index, count = int(env["RANK"]) + 1, int(env["WORLD_SIZE"])
            names, local_rank = ("RANK", "WORLD_SIZE"), int(local) if local is not None else None
        elif "SLURM_ARRAY_TASK_ID" in env and "SLURM_ARRAY_TASK_COUNT" in env:
            first, step = int(env.get("SLURM_ARRAY_TASK_MIN", "0")), int(env.get("SLURM_ARRAY_TASK_STEP", "1"))
            offset = int(env["SLURM_ARRAY_TASK_ID"]) - first
            index = offset // step + 1 if step > 0 and offset % step == 0 else 0
            count, local_rank = int(env["SLURM_ARRAY_TASK_COUNT"]), None
            names = ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_STEP", "SLURM_ARRAY_TASK_COUNT")
        else:
            names = ()
    except ValueError:
        bad = ", ".join(f"{n}={v!r}" for n, v in env.items()
                        if n in SHARD_VARIABLES and not v.strip().lstrip("-").isdigit())
        raise UsageError(f"--shard auto: the launcher's environment is not a whole number: {bad}") from None
    if names:
        if not 1 <= index <= count:
            shown = ", ".join(f"{n}={env[n]}" for n in names if n in env)
            raise UsageError(f"--shard auto: {shown} is no shard of 1 to {count}")
        return index, count, local_rank
    raise UsageError("--shard auto takes its shard from torchrun (RANK, WORLD_SIZE) or a SLURM job array "
                     "(SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_COUNT); neither is set: give --shard I/N")
