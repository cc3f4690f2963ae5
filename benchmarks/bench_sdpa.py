"""sdpa-bench's own asv suite: the one that ships in the package (sdpa_impls/suite/asv_suite.py), read from this
tree's file rather than imported from the package asv installed at the measured commit, so every commit of the
history (older ones have an older suite, or none) is measured by today's suite, as asv intends. The benchmarks'
names (bench_sdpa.Forward.track_time_sdpa, ...) and versions are those of the classes defined there."""
import importlib.util
import sys
from pathlib import Path

_FILE = Path(__file__).resolve().parents[1] / "sdpa_impls" / "suite" / "asv_suite.py"
if importlib.util.find_spec("sdpa_impls") is None:  # an existing environment without the package; asv drops PYTHONPATH
    raise ImportError(f"sdpa-bench is not installed in {sys.executable}: asv measures the package installed in its "
                      "environment, so with --environment existing:PYTHON install this tree there first "
                      "(pip install -e . or pip install .)")
_spec = importlib.util.spec_from_file_location(f"{__package__ or 'benchmarks'}._asv_suite", _FILE)
_suite = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _suite  # asv's forked children and pickles find it by name
_spec.loader.exec_module(_suite)
_suite.keep_legacy_series()  # this repository's stored history has the series of times measured before the batch
globals().update({name: value for name, value in vars(_suite).items() if not name.startswith("__")})
