"""Both sides of a comparison assembled before anything is measured: checked out (or copied), given their
environments, installed and imported, with the gate config of HEAD and a line saying what is compared.

    assemble(request, project, work, folders, progress) -> Prepared
    compares_revisions(request) -> bool     # git revisions, or two environments

What a side holds follows the project (continuous.project); its environment, what the revisions declare or what
--base-env / --head-env name (continuous.envs, continuous.envcache); the versions that differ between two
environments are notes for the verdict's header (continuous.versions).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from ..bench.grid import default_device
from ..errors import MachineError, SideError, UsageError
from ..gate.config import GateConfig, load_config
from .envcache import open_cache, prepare, size_cap
from .envkey import pinned
from .envs import Env, EnvSpec, declared, parse_spec, unmet
from .project import NONE, PLUGIN, SELF, Project, declared_impls
from .revisions import checkout, checkout_working_tree, ci_base, describe, resolve, tree_name
from .sides import Side, check_import, install
from .versions import TORCH_STACK, differences, summary, torch_differs


@dataclasses.dataclass(frozen=True)
class Request:
    """What the command line asks of the two sides (`sdpa-bench continuous`'s options of the same names)."""

    base: str | None = None
    head: str | None = None
    base_env: str | None = None
    head_env: str | None = None
    env_cache: str | None = None
    impl: tuple[str, ...] = ()
    config: str | None = None


@contextlib.contextmanager
def _as_side(side: Side) -> Iterator[None]:
    """A file of one side's tree that cannot be read (its pyproject.toml) is that side's error (errors.SideError),
    which a search over revisions skips, like a side that does not install."""
    try:
        yield
    except (SideError, MachineError):
        raise
    except UsageError as exc:
        text = str(exc).replace(f"{side.tree}{os.sep}", "") if side.tree is not None else str(exc)
        raise SideError(side.role, f"{side.role} {side.name}: {text}") from None


def _impls(request: Request, project: Project, tree: Path | None, reference: str) -> tuple[str, ...]:
    """What one side measures: --impl, else a plug-in's own implementations at that revision, else every one
    (empty); the time reference beside a chosen few."""
    chosen = list(request.impl or (declared_impls(tree) if project.kind == PLUGIN and tree is not None else ()))
    return tuple(dict.fromkeys(chosen + ([reference] if chosen and reference else [])))


def _name(root: Path, rev: str, commit: str) -> str:
    """`main (abc1234 subject)`, or just `abc1234 subject` when the revision was named by its hash."""
    described = describe(root, commit)
    return described if commit.startswith(rev) else f"{rev} ({described})"


def _environments(request: Request, sides: dict[str, Side], progress, scratch: Path
                  ) -> tuple[dict[str, Env], list[str]]:
    """Each side's environment (see the module docstring) and notes on how they were chosen."""
    here = Env(sys.executable, "this interpreter")
    # an empty SPEC is an error (parse_spec), never "no SPEC": `--head-env "$UNSET"` must not compare one environment
    specs = {role: parse_spec(text) for role, text in (("base", request.base_env), ("head", request.head_env))
             if text is not None}
    notes = []
    if not specs:
        cpu = default_device() == "cpu"
        dec = {}
        missing = {}
        for role, side in sides.items():
            if side.tree is not None:
                with _as_side(side):  # unmet: a side that requires another sdpa-bench is refused, whatever the other
                    dec[role] = declared(side.tree, cpu)
                    missing[role] = unmet(dec[role])
        if len(dec) < 2 or dec["base"] == dec["head"]:
            progress("environment: both revisions declare the same dependencies, both sides run with this interpreter")
            return {"base": here, "head": here}, []
        every = {role: set(d.requirements) | {f"{c} (constraint)" for c in d.constraints} for role, d in dec.items()}
        notes.append(f"the revisions declare different dependencies (base only: "
                     f"{', '.join(sorted(every['base'] - every['head'])) or '-'}; head only: "
                     f"{', '.join(sorted(every['head'] - every['base'])) or '-'}).")
        for role, d in dec.items():
            if missing[role]:
                specs[role] = EnvSpec(f"what {role} declares, for {'; '.join(missing[role])}",
                                      requirements=d.installable(),
                                      constraints="".join(f"{c}\n" for c in d.constraints))
            else:
                notes.append(f"{role}: this environment satisfies its declared dependencies and runs it.")
    cache = Path(request.env_cache) if request.env_cache else None
    if any(not spec.python and pinned(spec) for spec in specs.values()):  # the cache's problems are no side's:
        open_cache(cache)  # exit 2 naming the cache, not a revision (which a search would skip)
        size_cap()
    chosen = {}
    for role in ("base", "head"):
        with _as_side(sides[role]):  # an environment pip cannot build is that side's: a search skips it
            other = [spec for r, spec in specs.items() if r != role]  # not evicted by this side's build
            chosen[role] = prepare(specs[role], cache, progress, scratch, other) if role in specs else here
    for role, env in chosen.items():
        progress(f"{role}: environment {env.spec or 'of this interpreter'}: {env.how}")
    return chosen, notes


@dataclasses.dataclass(frozen=True)
class Prepared:
    """Both sides installed and imported; the notes on their environments (the versions that differ among them);
    whether times must be compared as measured (torch differs, so the time reference is no unit); the gate config
    (HEAD's, or the folder's where no revision is compared); what was compared, in a line."""

    base: Side
    head: Side
    notes: list[str]
    as_measured: bool
    config: GateConfig
    about: str


def compares_revisions(request: Request) -> bool:
    """Whether the comparison is of git revisions: BASE or HEAD named, or no environment named."""
    return bool(request.base or request.head) or (request.base_env is None and request.head_env is None)


def _about(project: Project, base: Side, head: Side) -> str:
    import sdpa_impls

    running = f"sdpa-bench {sdpa_impls.__version__} ({Path(sdpa_impls.__file__).parent})"
    if project.kind == SELF:
        return f"sdpa-bench's repository {project.root}: each side is that revision, measured with its own suite."
    if project.kind == PLUGIN:
        impls = ", ".join(dict.fromkeys(base.impls + head.impls)) or "every one"
        return (f"plug-in {project.package} ({project.root}) at each revision, installed over {running}, whose suite "
                f"measures {impls}.")
    if os.path.abspath(base.python) == os.path.abspath(head.python):  # not realpath: two venvs link one python
        return f"{running} on both sides, in the same environment ({base.python}): any difference is noise."
    return f"{running} on both sides, which differ only in their environments."


def assemble(request: Request, project: Project, work: Path, folders: tuple[str, str], progress) -> Prepared:
    """Both sides checked out (or the working tree copied) into `work/<folder>/tree`, given their environments,
    installed and imported."""
    base_dir, head_dir = (work / f for f in folders)
    root, bundled, same = project.root, project.kind != SELF, ""

    def side(role: str, folder: Path, name: str, tree: Path | None) -> Side:
        return Side(role, name, tree, folder / "site", sys.executable, bundled)

    if project.kind == NONE:  # two environments, nothing checked out
        import sdpa_impls

        name = f"sdpa-bench {sdpa_impls.__version__}"
        base, head = side("base", base_dir, name, None), side("head", head_dir, name, None)
    else:
        assert root is not None
        if request.base or compares_revisions(request):
            base_rev, why = (request.base, "") if request.base else ci_base(root)
            base_commit = resolve(root, base_rev)
            base = side("base", base_dir, _name(root, base_rev, base_commit), base_dir / "tree")
            if why:
                progress(f"base: {base.name}, chosen as {why}")
            checkout(root, base_commit, base.tree)
        else:  # an environment against another: the same code on both sides
            base = side("base", base_dir, tree_name(root), base_dir / "tree")
            checkout_working_tree(root, base.tree)
        if request.head:
            head_commit = resolve(root, request.head)
            head = side("head", head_dir, _name(root, request.head, head_commit), head_dir / "tree")
            checkout(root, head_commit, head.tree)
            if head_commit == base_commit and not (request.base_env or request.head_env):
                same = (f"base and head are one commit ({head_commit[:7]}): an A/A comparison, whose only "
                        "differences are the machine's noise")
                progress(same)
        else:
            head = side("head", head_dir, tree_name(root), head_dir / "tree")
            checkout_working_tree(root, head.tree)
    envs, notes = _environments(request, {"base": base, "head": head}, progress, work)
    notes += [f"{same}."] if same else []  # in the verdict too: a PASS of one commit against itself says nothing
    if request.config:  # the user's file, not the head's: its error is the input's, never a side's to skip
        config = load_config(request.config)
    else:
        with _as_side(head):
            config = load_config(None, start=head.tree or Path.cwd())
    if head.tree is not None:  # a temporary folder means nothing in a PR comment
        config = dataclasses.replace(config, source=config.source.replace(f"{head.tree}{os.sep}", "head's "))
    reference = config.time_reference
    impls = {}
    for s in (base, head):
        with _as_side(s):
            impls[s.role] = _impls(request, project, s.tree, reference)
    for role, other in (("head", "base"), ("base", "head")):
        # a plug-in whose entry points are gone at head, or not there yet at base (the change that adds them): that
        # side measures the time reference, not every implementation installed beside it (another plug-in's too,
        # whose errors and missing rows were then blamed on this change); without one, the other side's
        declared = [i for i in impls[other] if i != reference] if not impls[role] else []
        if declared:
            impls[role] = (reference,) if reference else impls[other]
            notes.append(f"{role} declares no implementation ({other}: {', '.join(declared)}), so {role} measured "
                         f"{', '.join(impls[role])}.")
    base, head = (dataclasses.replace(s, python=envs[s.role].python, impls=impls[s.role]) for s in (base, head))
    cpu = default_device() == "cpu"
    seen = {}
    sides = {}
    for s in (base, head):
        install(s)
        sides[s.role], seen[s.role] = check_import(s, cpu, reference, config.source)
        progress(f"{s.role}: {s.name} installed into its own folder")
    base, head = sides["base"], sides["head"]
    about = _about(project, base, head)
    if base.python != head.python:
        diff = differences(seen["base"], seen["head"])
        notes += [f"{s.role}: {envs[s.role].spec or 'this interpreter'}: {summary(seen[s.role])}." for s in (base, head)]
        notes.append("versions that differ: " + ("; ".join(diff) if diff else "none (two environments of the same "
                                                                               "versions)") + ".")
        if torch_differs(seen["base"], seen["head"]):  # the unit's code is a dependency's, which changed
            notes.append(f"times compared as measured{f', not in units of {reference}' if reference else ''}: "
                         "torch differs between the sides, so every implementation is judged, the time reference "
                         "included.")
            return Prepared(base, head, notes, True, config, about)
        if reference:
            notes.append(f"times scaled as with one environment (by the CPU speed probe, else in units of "
                         f"{reference}): torch and the libraries it calls "
                         f"({', '.join(n for n in TORCH_STACK if seen['base'].get(n))}) are the same on both sides.")
    return Prepared(base, head, notes, False, config, about)
