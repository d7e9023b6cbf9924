"""CRC-32 throughput: dledger._ext.crc vs zlib.crc32 on the same bytes, same run.

Run: .venv/bin/python -m pytest bench/test_bench_crc.py -p no:cacheprovider \
         --benchmark-group-by=group --benchmark-columns=median,min,max
Each group holds zlib, our auto-selected path, every other hardware path this CPU runs
(e.g. "pclmul" beside "vpclmul") and the portable "table" fallback. Whole buffers (64 KiB,
1 MiB) go through ``crc32``; records (244 B: a 100 B message's record, 1100 B: a 1 KiB
one's) go 4096 at a time through ``crc32_many``, as the store's kernels take them, with
zlib looping over the same slices.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from dledger._ext import crc

SIZES = {"64KiB": 64 * 1024, "1MiB": 1024 * 1024}
RECORDS = {"244B": 244, "1100B": 1100}
COUNT = 4096


SIDES = [
    "zlib",
    "dledger-auto",
    *(f"dledger-{p}" for p in crc.implementations() if p not in (crc.implementation(), "table")),
    "dledger-table",
]


@pytest.fixture(params=SIDES)
def side(request: pytest.FixtureRequest) -> Iterator[str]:
    name = request.param.removeprefix("dledger-")
    if name != "zlib":
        crc._force_impl(name)
    try:
        yield request.param
    finally:
        crc._force_impl("auto")


def _data(size: int) -> bytes:
    return np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()


@pytest.mark.parametrize("label", list(SIZES))
def test_crc32(benchmark: BenchmarkFixture, label: str, side: str) -> None:
    buf = _data(SIZES[label])
    func: Callable[[bytes], int] = zlib.crc32 if side == "zlib" else crc.crc32
    benchmark.group = f"crc32-{label}"
    benchmark.extra_info["implementation"] = "zlib" if side == "zlib" else crc.implementation()
    benchmark.extra_info["bytes"] = len(buf)
    assert benchmark(func, buf) == zlib.crc32(buf)


@pytest.mark.parametrize("label", list(RECORDS))
def test_crc32_records(benchmark: BenchmarkFixture, label: str, side: str) -> None:
    size = RECORDS[label]
    buf = _data(size * COUNT)
    offsets = np.arange(COUNT, dtype=np.int64) * size
    lengths = np.full(COUNT, size, dtype=np.int64)
    view = memoryview(buf)
    slices = [view[o : o + size] for o in range(0, size * COUNT, size)]
    benchmark.group = f"crc32 of {COUNT} records of {label}"
    benchmark.extra_info["implementation"] = "zlib" if side == "zlib" else crc.implementation()
    benchmark.extra_info["bytes"] = len(buf)
    if side == "zlib":
        got = benchmark(lambda: [zlib.crc32(s) for s in slices])
        assert got[-1] == zlib.crc32(slices[-1])
    else:
        out = benchmark(crc.crc32_many, buf, offsets, lengths)
        assert int(out[-1]) == zlib.crc32(slices[-1])
