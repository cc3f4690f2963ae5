"""Shared by tests that need another process: one holding a folder's run lock, and an implementation that crashes."""
from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path


def bf16_fault_module(name: str, imports: str, fault: str) -> str:
    """A module registering `name`: naive's answer, except on bf16 inputs (the smoke preset's second case), where it
    runs `fault` (a statement), as a broken kernel does; `imports` are the modules the fault needs. The fault is on
    line 15 of the module, where a child's Python stack finds it."""
    return f"""
import {imports}
import torch
import sdpa_impls
from sdpa_impls.protocol import Implementation
from sdpa_impls.registry import register


@register
class Faulty(Implementation):
    name = {name!r}

    def forward(self, inp):
        if inp.query.dtype == torch.bfloat16:  # the smoke preset's second case
            {fault}
        return sdpa_impls.get("naive").forward(inp)
"""


# `crashes` segfaults on bf16 inputs, as a broken compiled kernel does
CRASHES_MODULE = bf16_fault_module("crashes", "ctypes", "ctypes.string_at(0)")


@contextlib.contextmanager
def lock_held_elsewhere(folder: Path) -> Iterator[int]:
    """FOLDER's run lock (report.writer_lock.only_writer) held by another process, as a `run` or a comparison
    writing there holds it; yields that process's pid."""
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path\n"
                               "from sdpa_impls.report.writer_lock import only_writer\n"
                               "with only_writer(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(120)",
                               str(folder)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
