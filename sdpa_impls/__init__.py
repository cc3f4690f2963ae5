"""sdpa_impls: interchangeable scaled dot-product attention implementations behind one protocol."""
from __future__ import annotations

from . import impls  # noqa: F401  (registers the built-ins)
from .protocol import (Implementation, SDPAImplementation, SDPAInputs, Support, Unsupported, empty_attention, validate,
                       with_op)
from .reference import max_abs_error, reference, tolerance
from .registry import ENTRY_POINT_GROUP, BrokenPlugin, PluginLoadError, get, loaded, names, register, shadowed

__version__ = "0.1.0"

__all__ = [
    "ENTRY_POINT_GROUP", "BrokenPlugin", "Implementation", "PluginLoadError", "SDPAImplementation", "SDPAInputs",
    "Support", "Unsupported", "empty_attention", "get", "loaded", "max_abs_error", "names", "reference", "register",
    "shadowed", "tolerance", "validate", "with_op",
]
