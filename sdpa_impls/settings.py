"""sdpa-bench's settings in the pyproject.toml of the project a command runs in (the first one from the working
folder upwards): a table per command of defaults for its options, and the gate's thresholds (gate.config).

    [tool.sdpa_bench.run]          # `sdpa-bench run`: a key is an option's name, `-` or `_` alike
    impl = ["mine", "torch_sdpa"]
    preset = "smoke"
    [tool.sdpa_bench.continuous]   # `sdpa-bench continuous`
    adaptive_budget = 75
    [tool.sdpa_bench.gate]         # thresholds, not options: docs/reference/gate-config.md

An option given on the command line wins over its default here; a relative path in a table (PATH_OPTIONS) is from
the pyproject.toml's folder. Unknown tables, options and bad values are a UsageError naming the file, the table and
the key; a value refused later, by the command (an unknown preset), is named by the command line's error with the
file, the table and the keys it set.

    find_pyproject(start)            -> Path | None
    apply(top, parser, argv, args, command, commands, start) -> "FILE [TABLE]: keys" or ""  # the defaults, on `args`
    source_of(args), from_table(args, dest)                                                 # what apply set, after it
"""
from __future__ import annotations

import argparse
import tomllib
from collections.abc import Collection
from pathlib import Path

from .errors import UsageError

SECTION = ("tool", "sdpa_bench")
NOT_OPTIONS = {"gate"}  # [tool.sdpa_bench.gate] holds the gate's thresholds (gate.config), not the command's options
SOURCE_ATTR = "_sdpa_bench_settings"  # on the parsed args: "FILE [TABLE]: keys" of what the table set ("" for none)
FROM_TABLE_ATTR = "_sdpa_bench_from_table"  # on the parsed args: the dests the table set


def source_of(args: argparse.Namespace) -> str:
    """Where `apply` took defaults of `args` from, with their keys: "FILE [tool.sdpa_bench.COMMAND]: a, b", or ""."""
    return getattr(args, SOURCE_ATTR, "")


def note(source: str) -> str:
    """What a usage error ends with when the project's table set some of the command's options (source_of): a value
    it set may be what the error is about."""
    return f" (defaults in effect from {source})" if source else ""


def from_table(args: argparse.Namespace, dest: str) -> bool:
    """Whether the option kept in `dest` has its value from the project's table, not from the command line."""
    return dest in getattr(args, FROM_TABLE_ATTR, ())


def find_pyproject(start: str | Path | None = None) -> Path | None:
    """The first pyproject.toml in `start` (default: the working folder) or a folder above it."""
    here = Path(start or Path.cwd()).resolve()
    return next((f / "pyproject.toml" for f in (here, *here.parents) if (f / "pyproject.toml").is_file()), None)


def read_toml(path: Path) -> dict:
    """A TOML file's contents; UsageError (exit 2) naming the file when it cannot be read or parsed."""
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:  # tomllib decodes the bytes itself
        raise UsageError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}), as TOML must be") from None
    except tomllib.TOMLDecodeError as exc:
        with path.open("rb") as fh:  # an editor's byte order mark (Windows Notepad's)
            if fh.read(3) == b"\xef\xbb\xbf":
                raise UsageError(f"{path}: starts with a byte order mark (EF BB BF), which Python's TOML reader "
                                 "(tomllib) does not take: save it as UTF-8 without one") from None
        raise UsageError(f"{path}: not valid TOML ({exc})") from None


def section(doc: dict, *keys: str, path: str | Path = "pyproject.toml") -> object:
    """doc[tool][sdpa_bench][keys...], or None where any level is missing. A table spelled as the command is,
    [tool.sdpa-bench], would be read by nothing: UsageError naming `path`."""
    tools = doc.get("tool") if isinstance(doc, dict) else None
    if isinstance(tools, dict) and "sdpa-bench" in tools:  # beside [tool.sdpa_bench] too: its keys would be lost
        raise UsageError(f"{path}: [tool.sdpa-bench] is not read: the table is [tool.sdpa_bench], with an underscore")
    for key in (*SECTION, *keys):
        doc = doc.get(key) if isinstance(doc, dict) else None
    return doc


# options no table may set: each says what this one run does to what is already there (the results in its folder,
# the cached environments), never a default: `prune = true` made every listing of `envs` remove environments
ONE_RUN_ONLY = frozenset({"overwrite", "resume", "prune"})
OPPOSITE_ATTR = "sdpa_bench_opposite_of"  # on an option add_opposites made: the flag it undoes


def add_opposites(parser: argparse.ArgumentParser) -> None:
    """Beside each flag a table may set (--no-memory, --separate-processes), its opposite (--memory,
    --no-separate-processes), in the same group of the help: the command line wins over the table for a flag's "off"
    too, not only for options with a value. Only on the command line: a table sets the flag itself, true or false."""
    for group in parser._action_groups:
        for action in list(group._group_actions):
            flag = next((f for f in action.option_strings if f.startswith("--")), None)
            if (flag is None or not isinstance(action, argparse._StoreConstAction)
                    or getattr(action, OPPOSITE_ATTR, None) or flag[2:].replace("-", "_") in ONE_RUN_ONLY):
                continue
            opposite = f"--{flag.removeprefix('--no-')}" if flag.startswith("--no-") else f"--no-{flag[2:]}"
            off = action.default if action.default is not None else not action.const  # None: not given (see --resume)
            added = group.add_argument(opposite, dest=action.dest, action="store_const", const=off,
                                       default=action.default, help=f"not {flag}, where a [tool.sdpa_bench] table "
                                                                    "sets it")
            setattr(added, OPPOSITE_ATTR, flag)
            for listed in (group._group_actions, parser._actions):  # beside its flag, in the help and the usage
                listed.remove(added)
                listed.insert(listed.index(action) + 1, added)


# long options whose value is a file or folder (FILE or DIR in the help): a relative one in a table is from the
# folder of its pyproject.toml, as the table is written there, whatever folder the command runs in. Not --shard
# (I/N), not an environment's SPEC (a shell line for pip, its paths among requirements)
PATH_OPTIONS = frozenset({"out", "config", "json", "markdown", "env_cache", "keep_runs", "from", "dest"})


def _from_folder(folder: Path, value: str | Path) -> str | Path:
    """`value` (a path as the option parsed it, str or Path) relative to `folder`; an absolute one as it is; one from
    a home folder (`~`) expanded, as a shell expands it on the command line (no command does it after: `out =
    "~/x"` made a folder named `~`)."""
    if str(value).startswith("~"):
        return type(value)(Path(value).expanduser())
    if Path(value).is_absolute():
        return value
    return type(value)(folder / value)


# what an option without a type, or with one of these, takes: a TOML string only, never a number or a boolean
TEXT_TYPES = (None, str, Path)


def _value(action: argparse.Action, value: object, where: str) -> object:
    """`value` from TOML as the option would have parsed it; UsageError naming `where` otherwise."""
    if action.nargs == 0:  # a flag: true sets it
        if not isinstance(value, bool):
            raise UsageError(f"{where}: should be true or false, got {value!r}")
        return action.const if value else action.default
    if isinstance(value, str) and not value.strip() or value == []:  # never "not given": that is leaving it out
        raise UsageError(f"{where}: is empty; give a value, or leave the key out")
    if isinstance(value, bool):  # `seed = true`: a flag's value given to an option that takes one
        raise UsageError(f"{where}: takes a value, not {str(value).lower()}")
    if isinstance(action, argparse._AppendAction):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise UsageError(f"{where}: should be a list of strings, got {value!r}")
        return [_value(argparse.Action([], action.dest, type=action.type, choices=action.choices), v, where)
                for v in value]
    if action.type in TEXT_TYPES and not isinstance(value, str):  # `markdown = 5`: a slip, not a file named 5
        raise UsageError(f"{where}: should be a string, got {value!r}")
    if action.type in (int, float) and (isinstance(value, bool) or not isinstance(value, (int, float))
                                        or (action.type is int and not isinstance(value, int))):
        raise UsageError(f"{where}: should be a{'n integer' if action.type is int else ' number'}, got {value!r}")
    if not isinstance(value, (str, int, float)):
        raise UsageError(f"{where}: should be a string, got {value!r}")
    try:
        parsed = action.type(value if action.type in (int, float) else str(value)) if callable(action.type) else value
    except (TypeError, ValueError, argparse.ArgumentTypeError) as exc:
        raise UsageError(f"{where}: {exc}") from None
    if action.choices is not None and parsed not in action.choices:
        raise UsageError(f"{where}: {parsed!r} is not one of {', '.join(map(str, action.choices))}")
    return parsed


def given(top: argparse.ArgumentParser, parser: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """The options of `parser` (a command's, under `top`) that `argv` sets, whatever their values: `argv` is
    parsed again with every default replaced by a marker."""
    unset = object()
    saved = {a: a.default for a in parser._actions if a.option_strings and a.dest != "help"}
    for action in saved:
        action.default = None if isinstance(action, argparse._AppendAction) else unset  # append needs a list or None
    try:
        again = top.parse_args(argv)
    finally:
        for action, default in saved.items():
            action.default = default
    return {a.dest for a in saved if getattr(again, a.dest) is not (None if isinstance(a, argparse._AppendAction)
                                                                     else unset)}


def apply(top: argparse.ArgumentParser, parser: argparse.ArgumentParser, argv: list[str], args: argparse.Namespace,
          command: str, commands: Collection[str], start: str | Path | None = None) -> str:
    """Fill the options of `args` (`argv` parsed by `top`, whose command `command` has the parser `parser`) that
    the command line does not set from [tool.sdpa_bench.COMMAND] of the project's pyproject.toml; returns where
    they came from and their keys ("" when nothing was set), for an error a value meets later to name its source.
    A table that is none of `commands` is a UsageError."""
    path = find_pyproject(start)
    if path is None:
        return ""
    tables = section(read_toml(path), path=path)
    if tables is None:
        return ""
    if not isinstance(tables, dict) or not all(isinstance(t, dict) for t in tables.values()):
        raise UsageError(f"{path}: [tool.sdpa_bench] holds tables only, one per command ([tool.sdpa_bench.run], "
                         "...) and [tool.sdpa_bench.gate]")
    unknown = sorted(set(tables) - set(commands) - NOT_OPTIONS)
    if unknown:
        raise UsageError(f"{path}: [tool.sdpa_bench.{unknown[0]}] names no command; tables: "
                         f"{', '.join(sorted({*commands} - NOT_OPTIONS))} (options) and gate (thresholds)")
    table = tables.get(command)
    if command in NOT_OPTIONS or not table:
        return ""
    where = f"{path} [tool.sdpa_bench.{command}]"
    # a key is a long option's name (--budget: budget), never argparse's name for where it is kept (budget_s):
    # --no-memory keeps False in `memory`, so `memory = true` would switch memory off
    options = {flag[2:].replace("-", "_"): a for a in parser._actions
               if a.dest != "help" and not getattr(a, OPPOSITE_ATTR, None)  # a table sets the flag itself, or not
               for flag in a.option_strings if flag.startswith("--")}
    on_command_line = given(top, parser, argv)
    used = []
    spelled: dict[str, str] = {}
    for key, value in table.items():
        action = options.get(key.replace("-", "_"))
        if action is None:
            raise UsageError(f"{where}: {key!r} is not an option of `sdpa-bench {command}`; the options a table "
                             "may set: " + ", ".join(sorted(k.replace("_", "-") for k in options
                                                            if k not in ONE_RUN_ONLY)))
        if spelled.setdefault(action.dest, key) != key:
            raise UsageError(f"{where}: {spelled[action.dest]!r} and {key!r} set the same option: keep one")
        if key.replace("-", "_") in ONE_RUN_ONLY:
            raise UsageError(f"{where}: {key!r} decides what one run does to the folder it is given, not a default: "
                             f"give --{key.replace('_', '-')} on the command line")
        parsed = _value(action, value, f"{where}: {key}")
        if key.replace("-", "_") in PATH_OPTIONS:
            parsed = _from_folder(path.parent, parsed)
        if action.dest not in on_command_line:
            setattr(args, action.dest, parsed)
            used.append((key, action.dest))
    source = f"{where}: {', '.join(key for key, _ in used)}" if used else ""
    setattr(args, SOURCE_ATTR, source)
    setattr(args, FROM_TABLE_ATTR, frozenset(dest for _, dest in used))
    return source
