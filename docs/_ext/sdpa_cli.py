"""The `sdpa-cli` directive: the command-line reference, generated at build time from the real argparse parsers.

Each command of `sdpa_impls.cli.COMMANDS` gets its section: its one-line help, the first paragraph of its module's
docstring, and the `--help` text of the parser its module builds (`add_arguments`), so the options exist only in
the code. Exit statuses are not options; the page states them beside the generated text.
"""
from __future__ import annotations

import argparse
import importlib
import inspect

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

WIDTH = 100  # columns of the generated --help text


def command_parser(name: str) -> argparse.ArgumentParser:
    """The parser `sdpa-bench NAME` parses with, built as `sdpa_impls.cli.main` builds it."""
    from sdpa_impls.cli import COMMANDS

    module_name, help_text = COMMANDS[name]
    parser = argparse.ArgumentParser(prog=f"sdpa-bench {name}", description=help_text,
                                     formatter_class=lambda prog: argparse.HelpFormatter(prog, width=WIDTH))
    importlib.import_module(module_name).add_arguments(parser)
    return parser


def top_parser() -> argparse.ArgumentParser:
    from sdpa_impls.cli import COMMANDS

    parser = argparse.ArgumentParser(prog="sdpa-bench", description="Benchmark scaled dot-product attention.",
                                     formatter_class=lambda prog: argparse.HelpFormatter(prog, width=WIDTH))
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text)
    return parser


def _doc_lead(module_name: str) -> str:
    """The module docstring's first paragraph: what the command is for, in the code's own words."""
    doc = inspect.getdoc(importlib.import_module(module_name)) or ""
    return doc.split("\n\n")[0].replace("\n", " ").strip()


def _literal(text: str) -> list[str]:
    return ["::", ""] + ["    " + line for line in text.rstrip().splitlines()] + [""]


def reference_rst() -> list[str]:
    """The whole generated reference as reStructuredText lines."""
    from sdpa_impls.cli import COMMANDS

    lines = ["The program", "-----------", ""] + _literal(top_parser().format_help())
    for name, (module_name, _) in COMMANDS.items():
        title = f"sdpa-bench {name}"
        lines += [title, "-" * len(title), ""]
        lead = _doc_lead(module_name)
        if lead:
            lines += ["*" + lead.replace("*", r"\*") + "*", ""]
        lines += _literal(command_parser(name).format_help())
    return lines


class SdpaCliDirective(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        container = nodes.section()
        container.document = self.state.document
        nested_parse_with_titles(self.state, StringList(reference_rst(), source="sdpa_impls.cli"), container)
        return container.children


def setup(app: Sphinx) -> dict[str, object]:
    app.add_directive("sdpa-cli", SdpaCliDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
