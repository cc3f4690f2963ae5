"""The benchmark suite that ships in the package (sdpa_impls/suite/test_sdpa.py), collected here with this
repository's test session: `pytest tests/test_benchmarks.py --benchmark-only` times it, plain `pytest` runs each
benchmark once (conftest.py). From any other folder: `pytest --pyargs sdpa_impls.suite.test_sdpa`."""
from sdpa_impls.suite.test_sdpa import run_ceilings, test_sdpa  # noqa: F401
