"""Store figures beside their baselines (pytest-benchmark; one group per figure).

    pytest bench/test_bench_store.py --benchmark-group-by=group --benchmark-columns=median,ops

Each group holds ours and the baseline doing the same work in the same run; compare medians.
Set DLEDGER_BENCH_FULL=1 for the full sizes (1 GiB recovery, millions of entries); the default
is the quick sizes of `dledger bench store --quick`. The same workloads back that command.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from dledger.perf import store_bench as sb

SIZES = sb.Sizes.for_mode(quick=os.environ.get("DLEDGER_BENCH_FULL") != "1")


@pytest.fixture(scope="module")
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="dledger-bench-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module", params=sb.CASES, ids=lambda make: make.__name__.removeprefix("case_"))
def case(request: pytest.FixtureRequest, root: Path) -> Iterator[sb.Case]:
    c = request.param(root, SIZES)
    yield c
    for cleanup in c.cleanup:
        cleanup()


@pytest.mark.parametrize("side", ["ours", "baseline"])
def test_store_figure(benchmark, case: sb.Case, side: str) -> None:
    fn = case.ours if side == "ours" else case.baseline
    benchmark.group = case.name
    benchmark.name = f"{case.name}[{side}: {case.name if side == 'ours' else case.baseline_name}]"
    units = benchmark.pedantic(fn, setup=case.fresh, rounds=SIZES.repeats, iterations=1, warmup_rounds=0)
    benchmark.extra_info["units"] = units
    benchmark.extra_info["unit"] = case.unit
    assert units > 0
