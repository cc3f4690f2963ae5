"""Command line: `python -m sdpa_impls <command>` / `sdpa-bench <command>`; each command lives in its own module."""
from __future__ import annotations

import argparse
import importlib
import sys

# command -> module exposing add_arguments(parser) and run(args) -> int (exit code)
COMMANDS = {
    "gate": ("sdpa_impls.gate", "fail a change that makes attention slower, bigger or wrong"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sdpa-bench", description="Benchmark scaled dot-product attention.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    modules = {}
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        modules[name] = module
        module.add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    args = parser.parse_args(argv)
    return int(modules[args.command].run(args))


if __name__ == "__main__":
    sys.exit(main())
