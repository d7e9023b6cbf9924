"""Benchmark workloads shared by ``dledger bench`` and the pytest-benchmark suite in ``bench/``."""
