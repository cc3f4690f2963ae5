"""The benchmark suite that ships in the package, so that it runs from any folder with any installed sdpa-bench.

    plugin.py     the pytest plug-in (entry point `sdpa_bench` of the group pytest11): --sdpa-preset, --sdpa-impl,
                  --sdpa-device, the suite's parametrization and timer; it acts on the suite's tests alone
    test_sdpa.py  the pytest-benchmark suite: one benchmark per (implementation, case) of a preset

    pytest --pyargs sdpa_impls.suite.test_sdpa --benchmark-only --sdpa-preset smoke --sdpa-impl mine

`sdpa-bench continuous` runs it on each side of a comparison; sdpa-bench's own repository collects it through
tests/test_benchmarks.py.
"""
