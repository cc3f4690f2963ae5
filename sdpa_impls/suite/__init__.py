"""The benchmark suites that ship in the package, so that they run from any folder with any installed sdpa-bench.

    test_sdpa.py  the pytest-benchmark suite: one benchmark per (implementation, case) of a preset; its options,
                  parametrization and timer come from its pytest plug-in, the module sdpa_bench_pytest beside this
                  package (entry point `sdpa_bench` of the group pytest11), which acts on the suite's tests alone
    session.py    what the plug-in checks once the suite is collected (pytest-benchmark's version, CUDA), and its
                  warning where a tracing tool (coverage, a profiler) was at work
    asv_suite.py  the asv suite: one class per mode, measured in one process per mode
    asv_machine   `python -m sdpa_impls.suite.asv_machine`: registers this machine with asv, its GPU in the name

    pytest --pyargs sdpa_impls.suite.test_sdpa --benchmark-only --sdpa-preset smoke --sdpa-impl mine

`sdpa-bench continuous` runs test_sdpa on each side of a comparison; sdpa-bench's own repository collects it through
tests/test_benchmarks.py, and its asv configuration reads asv_suite.py through benchmarks/bench_sdpa.py; a plug-in
that `sdpa-bench quickstart` wrote imports asv_suite's classes in its own benchmarks/bench_<name>.py.
"""
