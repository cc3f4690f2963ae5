"""What a bare `pip install sdpa-bench` brings is what its commands import: every module the command line's layers
import without a fallback (cli, bench, gate, continuous, and the launcher) is a declared dependency of the package,
not one that some other package of the test environment happens to bring (packaging, a dependency of pytest, was
imported by `continuous` and missing from a plain install: an "error sdpa-bench did not foresee" instead of the
message that names the test extra)."""
from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("cli", "bench", "gate", "continuous")
FALLBACKS = {"ImportError", "ModuleNotFoundError", "Exception"}


def declared() -> set[str]:
    """The import names of the base dependencies in pyproject.toml (a distribution's name, - as _)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {re.split(r"[\s<>=!~;\[]", spec, maxsplit=1)[0].lower().replace("-", "_")
            for spec in project["dependencies"]}


def unguarded_imports(path: Path) -> set[str]:
    """Top-level names of the modules `path` imports outside a try whose handler takes ImportError."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                h.type is None or {n.id for n in ast.walk(h.type) if isinstance(n, ast.Name)} & FALLBACKS
                for h in node.handlers):
            guarded.update(id(inner) for stmt in node.body for inner in ast.walk(stmt))
    names = set()
    for node in ast.walk(tree):
        if id(node) in guarded:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n not in ("__future__", "sdpa_impls")}


def test_the_command_lines_imports_are_declared_dependencies() -> None:
    files = [p for layer in LAYERS for p in (ROOT / "sdpa_impls" / layer).rglob("*.py")]
    files.append(ROOT / "sdpa_bench_cli.py")
    assert len(files) > 40
    base = declared()
    assert {"torch", "numpy"} <= base
    missing = {f"{p.relative_to(ROOT)}: {name}" for p in files for name in unguarded_imports(p) if name not in base}
    assert not missing, f"imported without a fallback but not in [project] dependencies: {sorted(missing)}"
