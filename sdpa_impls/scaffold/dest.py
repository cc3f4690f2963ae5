"""What in a quickstart's destination folder stops it before it writes anything: what is at the paths it writes (a
file where a folder goes, a broken link or a fifo where a file goes) and modules there that shadow the plug-in's.

    kind(path)                  -> str | None   # what non-folder, non-regular thing is at `path` ("a fifo"), if any
    imported(plan)              -> [name]       # the top-level modules the plug-in's files import, its own first
    shadowing(dest, plan)       -> str          # why a module there would be found instead of one of those ("": none)
"""
from __future__ import annotations

import ast
import os
import stat
import sys
import tomllib
from importlib.machinery import all_suffixes
from pathlib import Path

ENTRY_POINTS = "sdpa_impls"  # the group the plug-in's pyproject.toml declares its implementation in
# where `import` looks first when the plug-in's commands run: `python -m pytest` and asv put the plug-in's folder on
# the path, and pytest (its default import mode) the test file's folder
SEARCHED = ("", "tests")


def kind(path: Path) -> str | None:
    """What is at `path` when it is neither a folder nor a regular file (nor a link to one): "a broken symbolic
    link" (writing follows it, to wherever it points), "a fifo", "a socket", "a device"; None otherwise."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:  # nothing there (or a parent that is no folder: said of the parent)
        return None
    if stat.S_ISLNK(mode):
        if not path.exists():
            return "a broken symbolic link"
        mode = os.stat(path).st_mode
    if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
        return None
    return "a fifo" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"


def imported(plan: dict[str, str]) -> list[str]:
    """The top-level modules the plug-in needs: the modules of its entry points (its package), then those its .py
    files import that are not Python's own (sdpa_impls, torch, pytest)."""
    project = tomllib.loads(plan.get("pyproject.toml", ""))
    points = project.get("project", {}).get("entry-points", {}).get(ENTRY_POINTS, {})
    found = [value.split(":")[0].split(".")[0].strip() for value in points.values()]
    for rel, text in plan.items():
        if not rel.endswith(".py"):
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                found += [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                found.append(node.module.split(".")[0])
    return [name for name in dict.fromkeys(found) if name not in sys.stdlib_module_names]


def shadowing(dest: Path, plan: dict[str, str]) -> str:
    """Why `dest` cannot hold the plug-in of `plan`: a module or package there (or in its tests/) of a name the
    plug-in imports, which its own test (`python -m pytest`) and asv would import instead ("": none)."""
    for name in imported(plan):
        for folder in SEARCHED:
            where = dest / folder if folder else dest
            package = where / name
            # a folder is a package only with an __init__: one without is a namespace portion, which a regular
            # package later on the path (the installed plug-in, torch) wins over
            found = [package] if any((package / f"__init__{suffix}").is_file() for suffix in all_suffixes()) else []
            found += [p for p in (where / f"{name}{suffix}" for suffix in all_suffixes()) if os.path.lexists(p)]
            if found:
                rel = found[0].relative_to(dest).as_posix() + ("/" if found[0] == package else "")
                who = ("pytest puts tests/ first on the path to run the plug-in's test" if folder else
                       "`python -m pytest` and asv, run there, put that folder first on the path")
                return (f"--dest {dest}: {rel} is there, a module named {name}, which the plug-in imports: {who}, "
                        "and would import it instead; move it away or give --dest another folder")
    return ""
