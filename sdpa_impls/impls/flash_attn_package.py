"""Which `flash_attn` package is installed: flash-attn-4 alone installs it as a namespace package holding only
`cute` (FlashAttention-4), which is not FlashAttention-2 though it imports under its name; and a way to import a
library with a module hidden from it (xformers, whose fmha imports FlashAttention-2 wherever `flash_attn` is found).
Registers no implementation."""
from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Iterator

FA4_NAMESPACE = ("flash_attn here is flash-attn-4's namespace package (FlashAttention-4, only flash_attn.cute: "
                 "flash_attn4 runs it), not FlashAttention-2 (pip install flash-attn)")


def fa4_namespace_only() -> str:
    """Where `flash_attn` is a namespace package (no __init__.py, as flash-attn-4 installs it alone), the folders it
    spans; else "" (not installed, or FlashAttention-2's regular package, with or without `cute` inside)."""
    try:
        spec = importlib.util.find_spec("flash_attn")
    except (ImportError, ValueError):  # a module in sys.modules without a spec, or a parent that fails
        return ""
    if spec is None or spec.origin is not None or not spec.submodule_search_locations:
        return ""
    return ", ".join(str(p) for p in spec.submodule_search_locations)


@contextlib.contextmanager
def hidden_module(name: str) -> Iterator[None]:
    """Inside the block `import name` fails and `importlib.util.find_spec(name)` is None (sys.modules[name] = None);
    after it, sys.modules holds what it held before (the module, or nothing)."""
    missing = object()
    before = sys.modules.get(name, missing)
    sys.modules[name] = None
    try:
        yield
    finally:
        if before is missing:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = before
