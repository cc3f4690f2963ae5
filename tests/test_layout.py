"""The package's shape stays as documented: imports flow one way (no cycle, nothing below cli/ imports it), no
module grows past ~300 lines, and README's Layout section names every folder of the package."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "sdpa_impls"
MAX_LINES = 320


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (relative and absolute, `from . import x` included)."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                    target = f"{base}.{node.module}" if node.module else base
                else:
                    target = node.module or ""
                for candidate in [target] + [f"{target}.{a.name}" for a in node.names]:
                    if candidate in modules and candidate != name:
                        edges[name].add(candidate)
            elif isinstance(node, ast.Import):
                edges[name] |= {a.name for a in node.names if a.name in modules and a.name != name}
    return edges


def test_no_import_cycle() -> None:
    edges, state, cycles = imports(), {}, []

    def visit(module: str, stack: list[str]) -> None:
        state[module] = "open"
        stack.append(module)
        for nxt in sorted(edges[module]):
            if state.get(nxt) == "open":
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[module] = "done"

    for module in sorted(edges):
        if module not in state:
            visit(module, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_nothing_below_the_command_line_imports_it() -> None:
    upward = {m: sorted(t for t in targets if t.startswith("sdpa_impls.cli"))
              for m, targets in imports().items() if not m.startswith(("sdpa_impls.cli", "sdpa_impls.__main__"))}
    assert not {m: t for m, t in upward.items() if t}, upward


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_stay_small(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)} has {lines} lines: split it by job"


def test_readme_layout_names_every_folder() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    layout = readme[readme.index("## Layout"):]
    folders = {p.parent for p in PACKAGE.rglob("__init__.py")}
    missing = [str(f.relative_to(ROOT)) for f in folders if f"{f.relative_to(ROOT)}/" not in layout
               and f.name != "_tiled"]
    assert not missing, f"README's Layout section does not name {missing}"
