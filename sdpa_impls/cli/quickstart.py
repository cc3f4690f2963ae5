"""`quickstart`: write a working plug-in into a folder, as `asv quickstart` writes a benchmark suite: a package
whose entry point declares an implementation, its test against float64, a CI workflow that gates its pull
requests with `sdpa-bench continuous`, and an asv configuration for its history (sdpa_impls.scaffold)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import scaffold
from ..scaffold import asv


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", help="the implementation's name, also its package's (default: the folder's name)")
    p.add_argument("--dest", type=Path, default=Path("."), metavar="DIR",
                   help="the folder to write into, made if missing (default: the current one)")


def run(args: argparse.Namespace) -> int:
    dest = args.dest.resolve()
    given = args.name or dest.name
    names = scaffold.names_for(given)
    install, note = scaffold.requirement()
    import torch

    release, torch_note = asv.torch_pin(torch.__version__)
    own_branch, place = asv.branch(dest), asv.repo_place(dest)  # dest, or the folder it will be made in
    guessed = asv.detached(dest)
    if guessed:
        own_branch = guessed[0]
    sdpa, asv_note = asv.sdpa_requirement()
    plan = scaffold.files(names, install, asv.replacements(release, own_branch, sdpa, place), own_branch)
    written = scaffold.write(dest, plan)
    print(f"wrote the plug-in {names.package} into {dest}:")
    for path in written:
        print(f"  {path.relative_to(dest)}")
    renamed = scaffold.renaming(given, names)
    detached = "" if guessed is None else (f"HEAD is detached in {asv.top(dest)}: asv.conf.json follows the branch "
                                           f"{guessed[0]!r} ({guessed[1]}), and the README's gate compares against "
                                           "it; edit both if your main branch is another")
    for text in (renamed, note, torch_note, asv_note, detached):
        if text:
            print(f"note: {text}", file=sys.stderr)
    outer = asv.enclosing(dest)
    if outer is not None:  # a git init here would nest a repository in it
        print(f"note: {dest} is inside the git repository {outer}: asv.conf.json measures it there (repo_subdir "
              f"{place[1]}), but `sdpa-bench continuous` and `bisect` compare revisions of a repository whose root "
              "holds the package, and GitHub runs workflows only from the root's .github/workflows, so move it to a "
              "repository of its own (or to the root) to use them", file=sys.stderr)
    start = ("git add -A ." if outer else "git add -A" if own_branch  # `.`: none of the outer repository's changes
             else f"git init -q -b {asv.TEMPLATE_BRANCH} && git add -A")
    print(f"""
next, in {dest}:
  python -m pip install --no-deps -e .   # beside this sdpa-bench and your torch
  sdpa-bench list                        # {names.package} is listed, with what it runs here
  python -m pytest                       # {names.package} against float64 on the smoke cases
  {start} && git commit -qm "{names.package}"{"" if outer else "   # then: sdpa-bench continuous HEAD, after a change"}
  MACHINE="$(python -m sdpa_impls.suite.asv_machine)"   # this machine's asv entry, named with its GPU
  SDPA_BENCH_PRESET=quick asv run --machine "$MACHINE"  # the tip of the branch; a range (HEAD~5..HEAD, from 6 commits on): its history""")
    return 0
