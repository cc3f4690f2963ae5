"""The catalogue of implementations: built-ins register with a decorator, plug-ins through entry points."""
from __future__ import annotations

from importlib.metadata import entry_points
from typing import TypeVar

from .protocol import Implementation, SDPAImplementation, SDPAInputs, Support

ENTRY_POINT_GROUP = "sdpa_impls"

_REGISTRY: dict[str, SDPAImplementation] = {}
_SHADOWED: list[str] = []  # plug-in entry points left out because a built-in has their name ("name = module:Class")
_plugins_loaded = False

T = TypeVar("T", bound=type)


def register(cls: T) -> T:
    """Class decorator: instantiate `cls` and add it to the catalogue under `cls.name`.

    In a plug-in package it is optional: the package's entry point finds the class already registered under its
    own name and keeps it (no second instance)."""
    _add(cls())
    return cls


def _add(impl: SDPAImplementation) -> None:
    if not isinstance(impl, SDPAImplementation) or not getattr(impl, "name", ""):
        raise TypeError(f"{impl!r} does not follow the sdpa_impls implementation protocol")
    if impl.name in _REGISTRY:
        raise ValueError(f"an implementation named {impl.name!r} is already registered")
    _REGISTRY[impl.name] = impl


LOAD_FAILED = "plug-in failed to load"  # how a broken plug-in's skipped points begin their reason


class BrokenPlugin(Implementation):
    """Stands in for a plug-in that failed to load, so the failure shows as a reason, not a crash."""

    support = Support()

    def __init__(self, name: str, error: str) -> None:
        self.name = name
        self.error = error

    def not_supported_reasons(self, inp: SDPAInputs) -> list[str]:
        """Never empty: the load failure, as the one reason; bad input still gets the one ValueError every
        implementation gives."""
        super().not_supported_reasons(inp)
        return [f"{LOAD_FAILED}: {self.error}"]


class PluginLoadError(ImportError):
    """A plug-in asked for by name failed to load: where a skip would hide that its kernel never ran."""


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        if ep.name in _REGISTRY and _builtin(_REGISTRY[ep.name]):
            _SHADOWED.append(f"{ep.name} = {ep.value}")  # a built-in keeps its name; `list` says so
            continue
        try:
            obj = ep.load()
            done = _REGISTRY.get(ep.name)
            if done is not None and (done is obj or type(done) is obj):
                continue  # its module registered it with @register when it was imported
            if done is not None:
                raise ValueError(f"another implementation is registered under {ep.name!r} "
                                 f"({type(done).__module__}.{type(done).__qualname__}, not {ep.value}): the entry "
                                 "point and the class registered under its name must be the same one")
            impl = obj() if isinstance(obj, type) else obj
            if getattr(impl, "name", "") != ep.name:
                raise ValueError(f"entry point {ep.name!r} loads an implementation named "
                                 f"{getattr(impl, 'name', None)!r}")
            _add(impl)
        except (Exception, SystemExit) as exc:  # a broken plug-in must not break the catalogue, nor end the
            _REGISTRY[ep.name] = BrokenPlugin(ep.name, f"{type(exc).__name__}: {exc}")  # command (sys.exit at import)


def _builtin(impl: object) -> bool:
    return type(impl).__module__.startswith(f"{__package__}.impls.")


def shadowed() -> list[str]:
    """The plug-in entry points not loaded because a built-in implementation has their name ("name = module:Class"):
    `--impl NAME` measures the built-in."""
    _load_plugins()
    return list(_SHADOWED)


def names() -> list[str]:
    """Every registered implementation, built-ins first, available on this machine or not."""
    _load_plugins()
    return list(_REGISTRY)


def get(name: str) -> SDPAImplementation:
    """The implementation registered as `name`; LookupError listing the known names otherwise."""
    _load_plugins()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise LookupError(f"unknown implementation {name!r}; known: {', '.join(_REGISTRY)}") from None


def loaded(name: str) -> SDPAImplementation:
    """`get(name)` for a name the user chose (a plug-in's own test, `--impl`): a plug-in that failed to load raises
    PluginLoadError naming why, instead of standing in with that reason, so its tests fail rather than skip."""
    impl = get(name)
    if isinstance(impl, BrokenPlugin):
        raise PluginLoadError(f"plug-in {name!r} failed to load: {impl.error}")
    return impl
