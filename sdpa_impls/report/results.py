"""A sweep's results file (results.json): atomic incremental writes, loading for --resume and report, merging shards."""
from __future__ import annotations

import errno
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..bench.result import Result, with_speedups
from ..errors import UsageError
from ..fmt import option_text
from .contents import check_meta, result_from
from .files import write_whole

RESULTS_FILE = "results.json"
FORMAT = "sdpa-bench-results"
# The format's version, raised whenever a point or the meta records something an older sdpa-bench did not: a file of
# an older version is read (report, compare, merge), but a sweep is resumed only by a version that writes the same.
VERSION = 2
READS = (1, 2)
OUTPUTS = (RESULTS_FILE, "results.csv", "report.md", "time-*.png", "memory-*.png", "roofline.png",
           "structures-*.png")


@dataclass
class Sweep:
    """What one `run` planned and what it has finished so far.

    `meta` holds preset, device, shard, implementations, planned case ids, options, seed, the
    machine description and its measured ceilings; `results` every finished point, in order.
    """

    meta: dict
    results: list[Result] = field(default_factory=list)
    version: int = VERSION  # of the file it was read from; a merge keeps its oldest shard's

    def done(self) -> set[tuple[str, str]]:
        """(case id, implementation) of every finished point, whatever its status."""
        return {(r.case.id, r.impl) for r in self.results}

    @property
    def planned(self) -> int:
        points = self.meta.get("planned_points")  # `targets`: each case with implementations of its own
        return points if type(points) is int else len(self.meta.get("case_ids", ())) * len(self.meta.get("impls", ()))

    @property
    def by_targets(self) -> bool:
        """Saved by `sdpa-bench targets --out`: its own plan, measured again whole, never resumed by `run`."""
        return self.meta.get("made_by") == "targets"

    @property
    def complete(self) -> bool:
        return len(self.done()) >= self.planned


def shard_dirs(meta: dict, unfinished: bool = False) -> str:
    """The folders a merged sweep came from, as its report and `run --resume` name them ("" for a sweep of one run);
    `unfinished`: those whose shard was not finished when merged (all, for a merge that did not record it)."""
    return ", ".join(str(s.get("dir")) for s in meta.get("merged_from") or ()
                     if isinstance(s, dict) and not (unfinished and s.get("complete")))


def to_text(sweep: Sweep) -> str:
    """JSON with the metadata indented and one result per line (samples included: the gate needs them), each with
    its speed-up against torch_sdpa's result of the same case, as the CSV and the report have it."""
    head = json.dumps({"format": FORMAT, "version": sweep.version, "meta": sweep.meta}, indent=1)
    rows = ",\n".join(json.dumps(r.as_dict()) for r in with_speedups(sweep.results))
    return head[:-2] + ',\n "results": [\n' + rows + "\n ]\n}\n"


def save(directory: Path, sweep: Sweep) -> Path:
    """Write DIR/results.json atomically (`write_whole`): a killed run leaves the last complete file. One that
    cannot be written (a full disk, a folder made read-only) is UsageError."""
    path = Path(directory) / RESULTS_FILE
    try:
        return write_whole(path, to_text(sweep))
    except OSError as exc:
        kept = "; it holds what was saved before" if path.is_file() else ""
        if kept and not sweep.by_targets and not sweep.meta.get("merged_from"):  # a run's: it goes on from there
            kept += f" (make room, then continue with: sdpa-bench run {option_text('--out', str(directory))} --resume)"
        raise UsageError(f"cannot save {path}: {exc.strerror or exc}{kept}") from None


def short_path(path: Path | str) -> str:
    """A path as an error names it: whole up to 120 characters, else its start and end (a name too long for the
    file system is not echoed whole)."""
    text = str(path)
    return text if len(text) <= 120 else f"{text[:60]}...{text[-40:]}"


def load(directory: Path) -> Sweep:
    """Read DIR/results.json; UsageError with one clear sentence when it is missing, unreadable or not ours."""
    path = Path(directory) / RESULTS_FILE
    try:
        os.stat(path)
    except OSError as exc:  # a name longer than the file system takes: is_file() below would raise it
        if exc.errno == errno.ENAMETOOLONG:
            raise UsageError(f"{short_path(directory)}: {exc.strerror}") from None
    if Path(directory).is_file():
        raise UsageError(f"{directory} is a file: give the --out folder of a `run`, which holds {RESULTS_FILE} "
                         "(pytest-benchmark JSON goes to `sdpa-bench gate`)")
    if path.is_dir():
        raise UsageError(f"{path} is a folder, not a results file")
    if not path.is_file():
        raise UsageError(f"{path} does not exist (is {directory} the --out folder of a `run`?)")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    except (ValueError, RecursionError) as exc:
        why = exc if isinstance(exc, ValueError) else "nested deeper than Python reads"
        raise UsageError(f"{path} is not valid JSON ({why}); it is corrupt: move it away (for `run`, or choose "
                         "another --out)") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        hint = ("; it is pytest-benchmark's JSON, which `sdpa-bench gate --baseline A --candidate B` compares"
                if isinstance(doc, dict) and isinstance(doc.get("benchmarks"), list) else "")
        raise UsageError(f"{path} is not an sdpa-bench results file (no \"format\": \"{FORMAT}\"){hint}")
    version = doc.get("version")
    if version not in READS or type(version) is not int:
        newer = isinstance(version, int) and not isinstance(version, bool) and version > VERSION
        raise UsageError(f"{path} has results format version {version!r}; this sdpa-bench reads "
                         f"{', '.join(map(str, READS))}" + ("; a newer sdpa-bench wrote it: upgrade this one to read it"
                                                            if newer else ""))
    try:
        if not isinstance(doc["results"], list):
            raise TypeError("results should be a list")
        results = [result_from(d, i) for i, d in enumerate(doc["results"])]
        if not isinstance(doc["meta"], dict):
            raise TypeError(f"meta should be an object, not {type(doc['meta']).__name__}")
        meta = dict(doc["meta"])
        check_meta(meta)
        seen = set()
        impls, cases = set(meta["impls"]), set(meta["case_ids"])
        for i, r in enumerate(results):
            if r.impl not in impls or r.case.id not in cases:  # a resume would take the sweep's own point as done
                raise ValueError(f"results[{i}] is {r.impl} on {r.case.id}, not a point of the sweep's meta.impls "
                                 "and meta.case_ids")
            if (r.case.id, r.impl) in seen:
                raise ValueError(f"{r.impl} on {r.case.id} is there twice")
            seen.add((r.case.id, r.impl))
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{path} has a malformed entry ({type(exc).__name__}: {exc}); it is corrupt") from None
    return Sweep(meta, results, version)


def not_a_sweep(directory: Path) -> str | None:
    """Why DIR/results.json is no sweep of sdpa-bench's (another tool's file, a folder), or None: one that `run
    --overwrite` may replace, whole or cut short (its first lines name the format)."""
    path = Path(directory) / RESULTS_FILE
    if path.is_dir():
        return f"{path} is a folder, not a results file"
    try:
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    if not re.search(rb'"format"\s*:\s*"' + FORMAT.encode() + rb'"', head):  # written compact or indented
        return f"{path} is not an sdpa-bench results file (no \"format\": \"{FORMAT}\")"
    return None


def prepare_dir(directory: Path) -> Path:
    """Create DIR (and parents) and prove it is writable; UsageError naming the problem otherwise."""
    directory = Path(directory)
    named = short_path(directory)
    try:  # a name longer than the file system takes raises here
        in_the_way = next((p for p in (directory, *directory.parents) if p.exists() and not p.is_dir()), None)
        dangling = next((p for p in (directory, *directory.parents) if p.is_symlink() and not p.exists()), None)
    except OSError as exc:
        raise UsageError(f"cannot write to output folder {named}: {exc.strerror or exc}") from None
    if in_the_way is not None:
        raise UsageError(f"cannot write to output folder {directory}: {in_the_way} is a file, not a folder")
    if dangling is not None:  # mkdir said "File exists"
        raise UsageError(f"cannot write to output folder {directory}: {dangling} is a symbolic link to nothing "
                         "(its target is missing, or the links loop)")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".write-test.{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"cannot write to output folder {named}: {exc.strerror or exc}") from None
    return directory


# what the shards of one sweep share (run --shard I/N with the same options): merged, the report states them once
MERGED_ALIKE = (("options", "timing options"), ("seed", "seeds"), ("impls", "implementations"),
                ("shard", "shard counts"))


def _alike(meta: dict, key: str) -> object:
    if key == "shard":  # "I/N": the N
        return str(meta.get("shard") or "1/1").rpartition("/")[2]
    if key == "impls":  # the same ones in another order measure the same points
        return ",".join(sorted(meta.get("impls") or ()))
    return meta.get(key)


def _difference(mine: object, theirs: object) -> str:
    """Two shards' differing values as said in an error: of two option tables, only the options that differ."""
    if isinstance(mine, dict) and isinstance(theirs, dict):
        keys = [k for k in dict.fromkeys([*mine, *theirs]) if mine.get(k) != theirs.get(k)]
        return "; ".join(f"{k} {mine.get(k)} against {theirs.get(k)}" for k in keys)
    return f"{mine} against {theirs}"


def _pooled_ceilings(metas: list[dict]) -> dict:
    """The merged sweep's ceilings: every shard's samples pooled where the shards ran on one machine (a shard
    samples only its own dtypes' GEMMs), else each ceiling from the first shard that measured it."""
    from ..bench.ceilings import RunCeilings
    same = all(m.get("machine") == metas[0].get("machine") for m in metas)
    samples: dict[str, list[float]] = {}
    shapes: dict[str, str] = {}
    for m in metas:
        for key, values in (m.get("ceiling_samples") or {}).items():
            if values and (same or key not in samples):
                samples.setdefault(key, []).extend(values)
                shapes.setdefault(key, ((m.get("ceiling_spread") or {}).get(key) or {}).get("shape"))
    pooled = RunCeilings(metas[0].get("device") or "cpu", tuple(samples), samples)
    pooled.shapes = {k: v for k, v in shapes.items() if v}
    return pooled.meta()


def merge(sweeps: list[tuple[Path, Sweep]], all_case_ids: list[str] | None = None) -> Sweep:
    """Join shard results of one preset into one sweep; UsageError on mixed presets or repeated points."""
    presets = {s.meta.get("preset") for _, s in sweeps}
    if len(presets) != 1:
        raise UsageError(f"cannot merge sweeps of different presets: {', '.join(sorted(map(str, presets)))}")
    devices = {s.meta.get("device") for _, s in sweeps}
    if len(devices) != 1:
        raise UsageError(f"cannot merge sweeps on different devices: {', '.join(sorted(map(str, devices)))}")
    first_dir, first_meta = sweeps[0][0], sweeps[0][1].meta
    for directory, sweep in sweeps[1:]:  # one sweep cut in shards: every shard measured as the others did
        for key, what in MERGED_ALIKE:
            mine, theirs = _alike(first_meta, key), _alike(sweep.meta, key)
            if mine != theirs:
                raise UsageError(f"cannot merge {first_dir} and {directory}: they were run with different {what} "
                                 f"({_difference(mine, theirs)}); shards of one sweep share them")
    seen: dict[tuple[str, str], Path] = {}
    results: list[Result] = []
    impls: list[str] = []
    case_ids: list[str] = []
    for directory, sweep in sweeps:
        for r in sweep.results:
            key = (r.case.id, r.impl)
            if key in seen:
                whole = list(dict.fromkeys(str(d) for d, sw in sweeps if not sw.meta.get("shard")))
                raise UsageError(f"{r.impl} on {r.case.id} is in both {seen[key]} and {directory}: " + (
                    f"{', '.join(whole)} {'is no shard' if len(whole) == 1 else 'are no shards'} (run without "
                    "--shard)" if whole else "is one shard given twice?"))
            seen[key] = directory
            results.append(r)
        impls += [i for i in sweep.meta.get("impls", []) if i not in impls]
        case_ids += [c for c in sweep.meta.get("case_ids", []) if c not in case_ids]
    if all_case_ids is not None:  # keep the preset's order; a case it no longer has (shards of an older
        order = {c: i for i, c in enumerate(all_case_ids)}  # version) stays, after the preset's, with its rows
        case_ids = sorted(case_ids, key=lambda c: order.get(c, len(order)))
    first = sweeps[0][1].meta
    meta = {k: v for k, v in first.items() if k not in ("shard", "case_ids", "impls", "sessions")}
    meta |= _pooled_ceilings([s.meta for _, s in sweeps])
    meta |= {"shard": None, "impls": impls, "case_ids": case_ids,
             "wall_s": sum(s.meta.get("wall_s") or 0.0 for _, s in sweeps),
             "merged_from": [{"dir": str(d), "shard": s.meta.get("shard"), "machine": s.meta.get("machine"),
                              "ceilings": s.meta.get("ceilings"),  # each shard's results are judged against its own
                              "ceiling_spread": s.meta.get("ceiling_spread"),
                              "sessions": s.meta.get("sessions"), "complete": s.complete}
                             for d, s in sweeps]}
    return Sweep(meta, results, min(s.version for _, s in sweeps))  # what its oldest shard recorded


def never_ran(results: list[Result]) -> dict[str, Result]:
    """The implementations with a failed point and none measured (every other point skipped), each with its first
    failed point: a plug-in whose kernel raises on every case must not leave a CI job green."""
    by_impl: dict[str, list[Result]] = {}
    for r in results:
        by_impl.setdefault(r.impl, []).append(r)
    return {name: next(r for r in rs if r.status == "failed") for name, rs in by_impl.items()
            if all(r.status in ("failed", "skipped") for r in rs) and any(r.status == "failed" for r in rs)}
