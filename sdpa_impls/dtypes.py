"""The one dtype table of the package: short names as they appear in case ids, reports and reasons."""
from __future__ import annotations

import torch

DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
SHORT: dict[torch.dtype, str] = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16",
                                 torch.float64: "fp64"}


def short_name(dtype: torch.dtype) -> str:
    """'fp32', 'bf16', ... for the dtypes we know, else torch's own name."""
    return SHORT.get(dtype, str(dtype).removeprefix("torch."))


def from_name(name: str) -> torch.dtype:
    """The torch dtype of a short name; ValueError naming the known ones otherwise."""
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"dtype {name!r} is not one of {sorted(DTYPES)}") from None
