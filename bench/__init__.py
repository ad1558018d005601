"""The benchmarks (`make bench`; figures in docs/PERFORMANCE.md). Each is a module of this package,
run from the repo root as ``python -m bench.<name>``: it imports gpufleet as installed
(``pip install -e .``), its sibling benchmarks as ``bench.<name>`` and the test harness it shares
with the tests as ``tests.<...>`` (the live Airflow: ``tests.live.airflow_live``), all without
touching ``sys.path``."""
