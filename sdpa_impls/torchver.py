"""The running torch's release, and the one reason an implementation gives when a feature it uses is newer."""
from __future__ import annotations

import re

import torch

_RELEASE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def release(version: str) -> tuple[int, int, int]:
    """The release numbers of a torch version: "2.5.1+cu124" -> (2, 5, 1), "2.6" -> (2, 6, 0), a nightly
    "2.7.0.dev20250110+cpu" or a source build "2.7.0a0+git1234" -> (2, 7, 0). Raises ValueError for anything else."""
    match = _RELEASE.match(str(version).strip())
    if match is None:
        raise ValueError(f"not a torch version: {version!r} (expected MAJOR.MINOR[.PATCH], e.g. 2.6 or 2.5.1+cpu)")
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def needs_torch(minimum: str, feature: str, running: str | None = None) -> list[str]:
    """[] where `running` (default: the torch imported here) is release `minimum` or later; else the one reason
    "<feature> needs torch ≥ <minimum> (this is <running>)", for an implementation's `library_reasons`."""
    running = torch.__version__ if running is None else running
    if release(running) >= release(minimum):
        return []
    return [f"{feature} needs torch ≥ {minimum} (this is {running})"]


# What the suite's own compile step (sdpa_impls.compilation) takes from torch.compile: dynamo's recompile_limit, raised
# while a point compiles (2.7; cache_size_limit before it), and torch.compiler.set_stance("fail_on_recompile") around
# every later call (2.6). An implementation that compiles gives this reason (or a later one of its own) on an
# older torch.
COMPILATION = ("2.7", "torch.compile with dynamo's recompile_limit and set_stance")
