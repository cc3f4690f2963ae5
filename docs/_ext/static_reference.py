"""The reference pages' generated parts, written into the pages as Markdown so they read the same on a repository
browser as on the site: every command's `--help` from the parsers the program builds (docs/reference/cli.md), and
the public API's signatures and docstrings (docs/reference/api.md).

Each generated part sits between `<!-- generated: NAME -->` and `<!-- end of generated: NAME -->`. The site's build
(as a Sphinx extension) and tests/test_docs.py fail when a part differs from what the code generates now;

    python docs/_ext/static_reference.py        # rewrites the parts from the code
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import re
import sys
from pathlib import Path

REFERENCE = Path(__file__).resolve().parents[1] / "reference"
WIDTH = 100  # columns of the generated --help text
API_MODULES = ("sdpa_impls.protocol", "sdpa_impls.support", "sdpa_impls.registry", "sdpa_impls.testing")


def _parser(prog: str, description: str) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog=prog, description=description,
                                   formatter_class=lambda prog: argparse.HelpFormatter(prog, width=WIDTH))


def _fenced(text: str, lang: str = "text") -> list[str]:
    return [f"```{lang}", *text.rstrip().splitlines(), "```", ""]


def _lead(module: object) -> str:
    """A module docstring's first paragraph, on one line."""
    return (inspect.getdoc(module) or "").split("\n\n")[0].replace("\n", " ").strip()


def parsers() -> dict[str, tuple[argparse.ArgumentParser, str]]:
    """The program's parser and every command's, as `sdpa_impls.cli.main` builds them, each with its lead."""
    from sdpa_impls.cli import COMMANDS
    from sdpa_impls.settings import add_opposites

    top = _parser("sdpa-bench", "Benchmark scaled dot-product attention.")
    top.add_argument("--version", action="version", version="sdpa-bench VERSION")  # as main() adds it
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    out = {"": (top, "")}
    for name, (module_name, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text)
        module = importlib.import_module(module_name)
        parser = _parser(f"sdpa-bench {name}", help_text)
        module.add_arguments(parser)
        add_opposites(parser)
        out[name] = (parser, _lead(module))
    return out


def cli() -> str:
    """The program's and every command's `--help`, with the first paragraph of the command module's docstring."""
    lines = []
    for name, (parser, lead) in parsers().items():
        lines += [f"### `sdpa-bench {name}`" if name else "### The program", "", *([lead, ""] if lead else []),
                  *_fenced(parser.format_help())]
    return "\n".join(lines).rstrip() + "\n"


def _words(text: str) -> str:
    return " ".join(text.split())


def cli_missing(generated: str) -> list[str]:
    """What the command line has that `generated` lacks: an option string or an option's help text (compared
    word by word: Python versions wrap and lay out --help differently)."""
    words, missing = _words(generated), []
    for name, (parser, _) in parsers().items():
        for action in parser._actions:
            for piece in [*action.option_strings, action.help or ""]:
                if "%(" not in piece and _words(piece) not in words:
                    missing.append(f"sdpa-bench {name}: {piece}")
    return missing


def _public(module: object) -> list[tuple[str, object]]:
    """The module's own public classes and functions, in the order of its source."""
    names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
    members = [(n, getattr(module, n)) for n in names if inspect.isclass(getattr(module, n))
               or inspect.isfunction(getattr(module, n))]
    own = [(n, m) for n, m in members if getattr(m, "__module__", "") == module.__name__]
    return sorted(own, key=lambda nm: inspect.getsourcelines(nm[1])[1])


def _signature(obj: object) -> str:
    """The signature as written in the source: annotations without the quotes that postponed evaluation gives them."""
    try:
        text = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"
    return re.sub(r"(: |-> )'([^']*)'", r"\1\2", text)


def _doc(obj: object) -> list[str]:
    doc = inspect.getdoc(obj)
    return [*doc.splitlines(), ""] if doc else []


def api() -> str:
    """Each API module's docstring, then its public classes (with their documented public methods and
    properties) and functions: signature and docstring."""
    lines: list[str] = []
    for module_name in API_MODULES:
        module = importlib.import_module(module_name)
        lines += [f"### `{module_name}`", "", *_fenced(inspect.getdoc(module) or "")]
        for name, obj in _public(module):
            if inspect.isclass(obj):
                lines += [f"#### class `{name}`", "", *_doc(obj)]
                if dataclasses.is_dataclass(obj):
                    lines += ["Fields: " + ", ".join(f"`{f.name}`" for f in dataclasses.fields(obj)) + ".", ""]
                for attr, member in vars(obj).items():
                    if attr.startswith("_") or not (inspect.isfunction(member) or isinstance(member, property)):
                        continue
                    target = member.fget if isinstance(member, property) else member
                    if not inspect.getdoc(target):
                        continue
                    head = f"{name}.{attr}" + ("" if isinstance(member, property) else _signature(member))
                    lines += [f"- `{head}`" + (" (property)" if isinstance(member, property) else "") + ": "
                              + " ".join(_doc(target)).strip()]
                lines.append("")
            else:
                lines += [f"#### `{name}{_signature(obj)}`", "", *_doc(obj)]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).rstrip() + "\n"


PARTS = {"cli": (REFERENCE / "cli.md", cli), "api": (REFERENCE / "api.md", api)}


def _span(text: str, name: str) -> tuple[int, int]:
    start, end = f"<!-- generated: {name} -->\n", f"<!-- end of generated: {name} -->"
    i, j = text.index(start) + len(start), text.index(end)
    return i, j


def stale() -> list[str]:
    """The generated parts whose page differs from what the code generates now: the API exactly, the command line
    by its options and their help texts."""
    out = []
    for name, (page, make) in PARTS.items():
        text = page.read_text(encoding="utf-8")
        i, j = _span(text, name)
        differs = cli_missing(text[i:j])[:3] if name == "cli" else text[i:j].strip() != make().strip()
        if differs:
            out.append(f"{page.name} ({name}{': ' + '; '.join(differs) if isinstance(differs, list) else ''})")
    return out


def write() -> None:
    for name, (page, make) in PARTS.items():
        text = page.read_text(encoding="utf-8")
        i, j = _span(text, name)
        page.write_text(text[:i] + "\n" + make() + "\n" + text[j:], encoding="utf-8")


def setup(app: object) -> dict[str, object]:
    """Sphinx: the build fails (-W) when a generated part is stale."""
    from sphinx.util import logging

    def check(_app: object) -> None:
        for part in stale():
            logging.getLogger(__name__).warning(f"generated part {part} is stale: run python "
                                                "docs/_ext/static_reference.py")

    app.connect("builder-inited", check)  # type: ignore[attr-defined]
    return {"parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    sys.path.insert(0, str(REFERENCE.parents[1]))
    write()
    print("rewrote " + ", ".join(str(page) for page, _ in PARTS.values()))
