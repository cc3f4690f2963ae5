"""What a results file (results.json) must hold, checked as it is read: every field of every result and of the
sweep's `meta` of the type and range a sweep writes, so that a file edited by hand or cut short is refused naming
the field, not failed on later in a table, a plot or a sum.

    result_from(d, i) -> Result     check_meta(meta)     options(meta) -> Options     option_problem(opts, named)
"""
from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable

from ..bench.grid import Case
from ..bench.measure import Options
from ..bench.result import STATUSES, Result

RESULT_FIELDS = {f.name for f in dataclasses.fields(Result)}
REQUIRED_META = ("preset", "device", "impls", "case_ids", "options", "machine")
# what each of them, and the optional lists, must be: a file edited by hand fails here, naming the field
META_TYPES = {"preset": str, "device": str, "impls": list, "case_ids": list, "options": dict, "machine": dict,
              "sessions": list, "merged_from": list, "seed": int, "ceilings": dict, "ceiling_samples": dict,
              "ceiling_spread": dict}


def result_from(d: object, i: int) -> Result:
    """Result.from_dict of results[i], tolerating fields written by a newer or older version of Result; TypeError
    naming the field where a value has the wrong type (it would fail later, in a table or a sum, far from here)."""
    if not isinstance(d, dict) or not isinstance(d.get("case"), dict):
        raise TypeError(f"results[{i}] should be an object with a \"case\" object")
    for cls, values, where in ((Result, d, f"results[{i}]"), (Case, d["case"], f"results[{i}].case")):
        for f in dataclasses.fields(cls):
            if f.name in values and not _TYPE_CHECKS.get(str(f.type), lambda v: True)(values[f.name]):
                raise TypeError(f"{where}.{f.name} should be {f.type}, got {values[f.name]!r}")
    for name in MEASURES:  # a time, a rate or a size: never negative, never infinite
        values = d.get(name) if isinstance(d.get(name), list) else [d.get(name)]
        if not all(v is None or 0 <= v < math.inf for v in values):
            raise ValueError(f"results[{i}].{name} should be finite and >= 0, got {d[name]!r}")
    error = d.get("max_error")  # NaN or inf where the answer held them (a wrong point), never below 0
    if _number(error) and error < 0:
        raise ValueError(f"results[{i}].max_error should be >= 0 (NaN where the answer held NaN), got {error!r}")
    if d.get("status") not in STATUSES:
        raise ValueError(f"results[{i}].status should be one of {', '.join(STATUSES)}, got {d.get('status')!r}")
    return Result.from_dict({k: v for k, v in d.items() if k in RESULT_FIELDS})


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


MEASURES = ("median_s", "iqr_s", "samples", "tflops", "gbps", "peak_memory_bytes", "device_time_s", "device_iqr_s",
            "device_samples", "error_tolerance")


def _session(x: object) -> bool:
    """A start or resume of `run` as the report reads it: where its points begin, the code and the time."""
    return (isinstance(x, dict) and isinstance(x.get("first_point"), int) and not isinstance(x["first_point"], bool)
            and x["first_point"] >= 1 and isinstance(x.get("source"), str) and isinstance(x.get("started"), str))


def _shard(x: object) -> bool:
    return isinstance(x, dict) and all(map(_session, x.get("sessions") or ()))


_META_ENTRIES = {"ceilings": lambda x: _number(x) and x >= 0, "ceiling_spread": lambda x: isinstance(x, dict),
                 "ceiling_samples": lambda x: isinstance(x, list) and all(map(_number, x)),
                 "sessions": _session, "merged_from": _shard}
DEVICE = re.compile(r"cpu|cuda(:\d+)?")  # what `run --device` records
SHARD = re.compile(r"[1-9]\d{0,8}/[1-9]\d{0,8}")  # what `run --shard I/N` records


def _check_meta_values(meta: dict) -> None:
    """TypeError naming an entry of `meta` that a table, a plot or a sum would fail on, far from here."""
    for key, fits in _META_ENTRIES.items():
        table = meta.get(key) or {}
        for name, value in table.items() if isinstance(table, dict) else enumerate(table):
            if not fits(value):
                raise TypeError(f"meta.{key}[{name!r}] is not what a sweep writes there: {str(value)[:60]!r}")
    if not (meta.get("wall_s") is None or _number(meta["wall_s"])):
        raise TypeError(f"meta.wall_s should be a number of seconds, got {meta['wall_s']!r}")
    for key in ("threads", "cpus"):  # the tables count busy CPUs against them
        value = meta["machine"].get(key)
        if not (value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1)):
            raise TypeError(f"meta.machine.{key} should be a whole number of CPUs, got {value!r}")
    timeout = meta.get("point_timeout")  # run --point-timeout, kept for the resumes
    if not (timeout is None or (_number(timeout) and 0 <= timeout < math.inf)):
        raise TypeError(f"meta.point_timeout should be a number of seconds (0: no limit), got {timeout!r}")
    shard = meta.get("shard")  # "I/N" (run --shard): merge counts the shards by its N
    if not (shard is None or isinstance(shard, str) and SHARD.fullmatch(shard)
            and 1 <= int(shard.split("/")[0]) <= int(shard.split("/")[1])):
        raise ValueError(f"meta.shard should be I/N with 1 <= I <= N (run --shard), or null; got {shard!r}")
    if not DEVICE.fullmatch(meta["device"]):
        raise ValueError(f"meta.device should be cpu or cuda (cuda:N), got {meta['device']!r}")


_TYPE_CHECKS = {  # a field's annotation -> whether a JSON value fits it
    "str": lambda v: isinstance(v, str), "str | None": lambda v: v is None or isinstance(v, str),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool), "bool": lambda v: isinstance(v, bool),
    "int | None": lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)),
    "float": _number, "float | None": lambda v: v is None or _number(v),
    "dict | None": lambda v: v is None or isinstance(v, dict),
    "tuple[float, ...]": lambda v: isinstance(v, list) and all(map(_number, v)),
    "tuple[str, ...]": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
}


def check_meta(meta: dict) -> None:
    """KeyError, TypeError or ValueError naming what in a results file's `meta` no sweep writes."""
    missing = [k for k in REQUIRED_META if k not in meta]
    if missing:
        raise KeyError(", ".join(missing))
    for key, kind in META_TYPES.items():
        if key in meta and not isinstance(meta[key], kind):
            raise TypeError(f"meta.{key} should be {'an' if kind is int else 'a'} {kind.__name__}, not "
                            f"{type(meta[key]).__name__}")
    if not all(isinstance(x, str) for x in [*meta["impls"], *meta["case_ids"]]):
        raise TypeError("meta.impls and meta.case_ids should hold names")
    _check_meta_values(meta)
    options(meta)


def options(meta: dict) -> Options:
    """The timing options a sweep was started with (fields this version does not know are ignored); TypeError or
    ValueError naming a value edited into one that no sweep could have been started with."""
    saved = meta.get("options") or {}
    for f in dataclasses.fields(Options):
        if f.name in saved and not _TYPE_CHECKS[str(f.type)](saved[f.name]):
            raise TypeError(f"meta.options.{f.name} should be {f.type}, got {saved[f.name]!r}")
    opts = Options(**{f.name: saved[f.name] for f in dataclasses.fields(Options) if f.name in saved})
    problem = option_problem(opts, lambda name: f"meta.options.{name}")
    if problem:
        raise ValueError(problem)
    return opts


def option_problem(opts: Options, named: Callable[[str], str]) -> str | None:
    """What makes `opts` unusable, each field called `named(field)` (a command-line flag, or where a file holds
    it), or None."""
    for name, least in (("min_reps", 1), ("max_reps", 1), ("warmup", 0)):
        if getattr(opts, name) < least:
            return f"{named(name)} must be >= {least}; got {getattr(opts, name)}"
    for name in ("min_sample_s", "budget_s"):
        if not 0 <= getattr(opts, name) < math.inf:
            return f"{named(name)} must be >= 0 seconds and finite; got {getattr(opts, name)}"
    if opts.min_reps > opts.max_reps:
        return f"{named('min_reps')} {opts.min_reps} exceeds {named('max_reps')} {opts.max_reps}"
    return None
