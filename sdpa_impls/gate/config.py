"""Gate thresholds from TOML (`[tool.sdpa_bench.gate]` in pyproject.toml, or a file given with --config), over the
package's defaults (defaults.toml beside this module), key by key.

    load_config(path=None, start=Path.cwd()) -> GateConfig
    GateConfig.thresholds(impl, case_id) -> Thresholds     # defaults, then every matching override in order

Keys (all optional): time = "median:15%" | "off", alpha = 0.01, memory = "peak:1%" | "off",
correctness = true, allow_missing = false, allow_different_machines = false, time_reference = "" (an
implementation, e.g. "torch_sdpa": time-vs-baseline compares times in units of its time on the same case),
continuous_time = "median:3%" (`sdpa-bench continuous`: the smallest slowdown it reports, both sides measured in
one interleaved run), continuous_time_cuda = "median:1%" (the same for CUDA points' device times),
continuous_host = "median:10%" (the same for the host overhead of host-bound CUDA points),
cpu_targets = false (true adds the in-run rules of the CPU performance targets, gate.targets),
ratios = ["peak_memory: chunked / naive <= 0.5 when lq >= 2048", ...], and
[[...override]] tables with `impl` / `case` fnmatch patterns plus any of time, alpha, memory,
correctness, allow_missing. An unknown key or a bad value raises GateInputError naming the file.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import GateInputError, UsageError
from ..settings import find_pyproject, read_toml, section
from .rules import MemoryRule, RatioRule, TimeRule
from .targets import ci_rules

DEFAULTS = {"time": "median:15%", "alpha": 0.01, "memory": "peak:1%", "correctness": True, "allow_missing": False}
TYPES = {"time": str, "alpha": float, "memory": str, "correctness": bool, "allow_missing": bool,
         "allow_different_machines": bool, "time_reference": str, "cpu_targets": bool, "continuous_time": str,
         "continuous_time_cuda": str, "continuous_host": str}
CONTINUOUS_TIME = "median:3%"  # defaults.toml's, where a table was built without it
CONTINUOUS_TIME_CUDA = "median:1%"
CONTINUOUS_HOST = "median:10%"
OVERRIDABLE = tuple(DEFAULTS)


@dataclass(frozen=True)
class Thresholds:
    """The rules that apply to one benchmark; None means the rule is switched off ("off")."""

    time: TimeRule | None
    memory: MemoryRule | None
    correctness: bool
    allow_missing: bool


@dataclass(frozen=True)
class Override:
    impl: str = "*"
    case: str = "*"
    values: dict = field(default_factory=dict, compare=False)

    def matches(self, impl: str, case_id: str) -> bool:
        return fnmatch.fnmatchcase(impl, self.impl) and fnmatch.fnmatchcase(case_id, self.case)


@dataclass(frozen=True)
class GateConfig:
    settings: dict = field(default_factory=lambda: dict(DEFAULTS), compare=False)
    allow_different_machines: bool = False
    time_reference: str = ""  # an implementation: compare times in units of its time on the same case and run
    ratios: tuple[RatioRule, ...] = ()
    overrides: tuple[Override, ...] = ()
    source: str = "built-in defaults"
    continuous_time: str = CONTINUOUS_TIME  # `sdpa-bench continuous`: base and head measured side by side
    continuous_host: str = CONTINUOUS_HOST  # `sdpa-bench continuous` on CUDA: the smallest host-overhead growth
    continuous_time_cuda: str = CONTINUOUS_TIME_CUDA  # `continuous_time` for CUDA points (device times)
    # `sdpa-bench continuous`: divide CPU samples by the speed probe measured next to them (bench.probe); not a
    # setting of the file: off where the sides' environments differ, since the probe's own speed may differ too
    speed_probe: bool = field(default=True, compare=False)

    def host_rule(self) -> TimeRule:
        """The host-overhead rule of `sdpa-bench continuous` (its factor)."""
        return TimeRule.parse(self.continuous_host, self.alpha)

    def continuous_rule(self, device: str = "cpu") -> TimeRule:
        """The time rule of `sdpa-bench continuous` on `device` (its factor; alpha is the false discovery rate): CUDA
        points are device times, steadier than a shared CPU's, and have their own floor."""
        spec = self.continuous_time_cuda if device.startswith("cuda") else self.continuous_time
        return TimeRule.parse(spec, self.alpha)

    def thresholds(self, impl: str, case_id: str) -> Thresholds:
        s = dict(self.settings)
        for o in self.overrides:
            if o.matches(impl, case_id):
                s.update(o.values)
        return _thresholds(s)

    def idle_note(self, keys) -> list[str]:
        """The verdict's note naming the overrides that match none of the (impl, case) `keys` (none: []): a
        misspelt pattern sets nothing, unsaid."""
        idle = [f"override #{i + 1} (impl {o.impl!r}, case {o.case!r})" for i, o in enumerate(self.overrides)
                if not any(o.matches(impl, case) for impl, case in keys)]
        return [f"{'; '.join(idle)} matched no benchmark of these runs: check its patterns."] if idle else []

    @property
    def alpha(self) -> float:
        return float(self.settings["alpha"])

    def gate_only(self) -> list[str]:
        """The sizes set here that `continuous` does not apply: `time`, `memory` (beside "off") and an override's
        `alpha` are the gate's; continuous judges every row by `continuous_time` at the one false discovery rate
        `alpha`, and any growth of peak memory."""
        out = [f'{k} = "{self.settings[k]}"' for k in ("time", "memory")
               if self.settings[k] not in ("off", DEFAULTS[k])]
        for o in self.overrides:
            out += [f"{k} = {v!r} (override impl {o.impl!r}, case {o.case!r})" for k, v in o.values.items()
                    if k in ("time", "memory", "alpha") and v != "off"]
        return out


def _thresholds(s: dict) -> Thresholds:
    time = None if s["time"] == "off" else TimeRule.parse(s["time"], float(s["alpha"]))
    memory = None if s["memory"] == "off" else MemoryRule.parse(s["memory"])
    return Thresholds(time, memory, bool(s["correctness"]), bool(s["allow_missing"]))


def _typed(key: str, value: object, where: str) -> object:
    want = TYPES[key]
    ok = isinstance(value, want) and not (want is not bool and isinstance(value, bool))
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        ok, value = True, float(value)
    if not ok:
        raise GateInputError(f"{where}: {key} should be a {want.__name__}, got {value!r}")
    return value


def config_from_dict(table: dict, source: str) -> GateConfig:
    """Validate one gate table (the contents of [tool.sdpa_bench.gate]); GateInputError naming `source` otherwise."""
    if not isinstance(table, dict):
        raise GateInputError(f"{source}: the gate config should be a table of keys, got {table!r}")
    known = set(TYPES) | {"ratios", "override"}
    unknown = sorted(set(table) - known)
    if unknown:
        raise GateInputError(f"{source}: unknown gate config key {unknown[0]!r}; known keys: {', '.join(sorted(known))}")
    settings = dict(DEFAULTS)
    for key in OVERRIDABLE:
        if key in table:
            settings[key] = _typed(key, table[key], source)
    different = bool(_typed("allow_different_machines", table.get("allow_different_machines", False), source))
    ratios_in = table.get("ratios", [])
    if not isinstance(ratios_in, list):
        raise GateInputError(f"{source}: ratios should be a list of rule strings")
    overrides_in = table.get("override", [])
    if not isinstance(overrides_in, list) or not all(isinstance(o, dict) for o in overrides_in):
        raise GateInputError(f"{source}: override should be an array of tables ([[tool.sdpa_bench.gate.override]])")
    overrides = []
    for i, o in enumerate(overrides_in):
        where = f"{source}: override #{i + 1}"
        bad = sorted(set(o) - set(OVERRIDABLE) - {"impl", "case"})
        if bad:
            raise GateInputError(f"{where}: unknown key {bad[0]!r}; known: impl, case, {', '.join(OVERRIDABLE)}")
        pats = {k: o.get(k, "*") for k in ("impl", "case")}
        if not all(isinstance(v, str) for v in pats.values()):
            raise GateInputError(f"{where}: impl and case should be fnmatch pattern strings")
        values = {k: _typed(k, o[k], where) for k in OVERRIDABLE if k in o}
        overrides.append(Override(pats["impl"], pats["case"], values))
    try:
        ratios = tuple(RatioRule.parse(r) for r in ratios_in)
        if _typed("cpu_targets", table.get("cpu_targets", False), source):
            ratios += ci_rules()
        _thresholds(settings)
    except ValueError as exc:
        raise GateInputError(f"{source}: {exc}") from None
    for i, o in enumerate(overrides):  # named by its place: the key it sets may be set nowhere else
        try:
            _thresholds(settings | o.values)
        except ValueError as exc:
            raise GateInputError(f"{source}: override #{i + 1}: {exc}") from None
    reference = str(_typed("time_reference", table.get("time_reference", ""), source))
    if reference and not reference.strip():  # "" switches the reference off; a name deleted leaves a space behind
        raise GateInputError(f"{source}: time_reference: {reference!r} is blank: name an implementation, or write "
                             "\"\" to judge times as measured")
    reference = reference.strip()
    rules = {}
    for key, default in (("continuous_time", CONTINUOUS_TIME), ("continuous_host", CONTINUOUS_HOST),
                         ("continuous_time_cuda", CONTINUOUS_TIME_CUDA)):
        rules[key] = str(_typed(key, table.get(key, default), source))
        if rules[key].strip() == "off":  # the rule's own message offers 'off', which only the gate's time takes
            raise GateInputError(f"{source}: {key}: 'off' is not taken here (time = \"off\" switches time off in "
                                 f"`continuous` too); give a size such as {default!r}, the default")
        try:
            TimeRule.parse(rules[key], float(settings["alpha"]))
        except ValueError as exc:
            raise GateInputError(f"{source}: {key}: {exc}") from None
    return GateConfig(settings, different, reference, ratios, tuple(overrides), source, rules["continuous_time"],
                      rules["continuous_host"], rules["continuous_time_cuda"])


DEFAULTS_FILE = Path(__file__).with_name("defaults.toml")
DEFAULTS_SOURCE = "sdpa-bench's defaults"


def _read_toml(path: Path) -> dict:
    try:
        return read_toml(path)
    except UsageError as exc:
        raise GateInputError(str(exc)) from None


def _layered(table: object, source: str) -> GateConfig:
    """`table`'s keys over the package's defaults (defaults.toml): a key set replaces the default's, whole."""
    if not isinstance(table, dict):
        raise GateInputError(f"{source}: the gate config should be a table of keys, got {table!r}")
    return config_from_dict(_read_toml(DEFAULTS_FILE) | table, f"{source}, over {DEFAULTS_SOURCE}")


def load_config(path: str | Path | None = None, start: str | Path | None = None) -> GateConfig:
    """The gate config: `path` (its [tool.sdpa_bench.gate] section, or its top level when it has no [tool],
    [project] or [build-system]: such a file is a pyproject.toml),
    else the [tool.sdpa_bench.gate] of the first pyproject.toml from `start` (default: the working directory)
    upwards; either over the package's defaults (defaults.toml), key by key; the defaults alone without either."""
    if path is not None:
        path = Path(path)
        doc = _read_toml(path)
        top = sorted(set(doc) & (set(TYPES) | {"ratios", "override"}))
        if "tool" in doc and top:  # a file with [tool] is read from its gate table alone
            raise GateInputError(f"{path}: {', '.join(top)} at the top level would not be read: a file with a [tool] "
                                 "table is read from [tool.sdpa_bench.gate]; move them there, or leave [tool] out")
        if "tool" in doc or {"project", "build-system"} & set(doc):  # a pyproject.toml: its gate table, or none
            table = section(doc, "gate", path=path)
            if table is None:
                raise GateInputError(f"{path}: has no [tool.sdpa_bench.gate] section (a file with [project] or "
                                     "[build-system] is read as a pyproject.toml; top-level keys, from a file without)")
            return _layered(table, f"{path} [tool.sdpa_bench.gate]")
        return _layered(doc, str(path))
    candidate = find_pyproject(start)
    table = section(_read_toml(candidate), "gate", path=candidate) if candidate is not None else None
    if table is not None:
        return _layered(table, f"{candidate} [tool.sdpa_bench.gate]")
    return config_from_dict(_read_toml(DEFAULTS_FILE), f"{DEFAULTS_SOURCE} ({DEFAULTS_FILE.name})")
