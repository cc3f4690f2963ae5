"""sdpa_impls: interchangeable scaled dot-product attention implementations behind one protocol.

The names below are imported on first use, so importing the package (as pytest does when it loads the suite's
plug-in, sdpa_impls.suite.plugin, in every session of an environment that has sdpa-bench) costs nothing until
one of them is asked for; the built-in implementations register when the catalogue is first read.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS = {
    "Implementation": "protocol", "SDPAImplementation": "protocol", "SDPAInputs": "protocol", "Support": "protocol",
    "Unsupported": "protocol", "empty_attention": "protocol", "validate": "protocol",
    "max_abs_error": "reference", "reference": "reference", "tolerance": "reference",
    "ENTRY_POINT_GROUP": "registry", "get": "registry", "names": "registry", "register": "registry",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from .protocol import (Implementation, SDPAImplementation, SDPAInputs, Support, Unsupported, empty_attention,
                           validate)
    from .reference import max_abs_error, reference, tolerance
    from .registry import ENTRY_POINT_GROUP, get, names, register


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sdpa_impls' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
