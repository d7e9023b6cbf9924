"""CRC-32 throughput: dledger._ext.crc.crc32 vs zlib.crc32 on the same buffer, same run.

Run: PYTHONPATH=. .venv/bin/python -m pytest bench/test_bench_crc.py --benchmark-only
Each size is one benchmark group holding zlib, our auto-selected path and our
portable "table" fallback, so the report compares them side by side.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from dledger._ext import crc

SIZES = {"64KiB": 64 * 1024, "1MiB": 1024 * 1024}


@pytest.fixture(scope="module", params=list(SIZES), ids=list(SIZES))
def sized_buf(request: pytest.FixtureRequest) -> tuple[str, bytes]:
    size = SIZES[request.param]
    return request.param, np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()


@pytest.fixture(params=["zlib", "dledger-auto", "dledger-table"])
def func(request: pytest.FixtureRequest) -> Iterator[Callable[[bytes], int]]:
    if request.param == "zlib":
        yield zlib.crc32
        return
    crc._force_impl("table" if request.param == "dledger-table" else "auto")
    try:
        yield crc.crc32
    finally:
        crc._force_impl("auto")


def test_crc32(benchmark: BenchmarkFixture, sized_buf: tuple[str, bytes], func: Callable[[bytes], int]) -> None:
    label, buf = sized_buf
    benchmark.group = f"crc32-{label}"
    benchmark.extra_info["implementation"] = crc.implementation() if func is crc.crc32 else "zlib"
    benchmark.extra_info["bytes"] = len(buf)
    result = benchmark(func, buf)
    assert result == zlib.crc32(buf)
