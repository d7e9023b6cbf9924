"""The benchmarks' figures mean what the docs say: a baseline in its best form (the fewest
syscalls for the same bytes), and medians of equal rounds on every side (issue 43: a baseline
of one ``os.write`` per entry, and a reader bench that took the best round and gave its
baseline fewer rounds, both went unnoticed)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dledger.perf.store_bench import Sizes, case_batch_append_1k
from tests.conftest import REPO


def _write_syscalls() -> int:
    """This thread's write-family syscalls so far (``syscw`` of /proc/thread-self/io)."""
    for line in Path("/proc/thread-self/io").read_text().splitlines():
        if line.startswith("syscw:"):
            return int(line.split()[1])
    raise AssertionError("no syscw in /proc/thread-self/io")


def test_batch_append_1k_baseline_writes_its_bytes_in_the_fewest_syscalls(tmp_path: Path) -> None:
    entries = 5000
    case = case_batch_append_1k(tmp_path, Sizes(entries, 1, 1, 1, 1, 1, 1))
    try:
        case.fresh()
        before = _write_syscalls()
        written = case.baseline()
        calls = _write_syscalls() - before
        # One writev per IOV_MAX entries (1,072 bytes each), not one write per entry.
        assert written == entries * (48 + 1024)
        assert 0 < calls <= math.ceil(entries / os.sysconf("SC_IOV_MAX")), calls
        assert os.path.getsize(tmp_path / "raw.bin") == written
    finally:
        for done in case.cleanup:
            done()


@pytest.mark.timeout(300)
def test_reader_bench_reports_the_median_of_equal_rounds_on_every_side(tmp_path: Path) -> None:
    # The arrow group (read_table beside pq.read_table): the Spark sides share the same _run.
    rounds, rows = 3, 20_000
    out = tmp_path / "bench.json"
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "bench/test_bench_reader.py", "-k", "read_table", "-p", "no:cacheprovider",
         "--benchmark-only", f"--benchmark-json={out}", "-s"],
        cwd=REPO,
        env=dict(os.environ, DLEDGER_BENCH_ROWS=str(rows), DLEDGER_BENCH_ROUNDS=str(rounds)),
        capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:]
    benches = {b["name"]: b for b in json.loads(out.read_text())["benchmarks"]}
    assert set(benches) == {"test_read_table", "test_read_table_parquet"}
    for name, b in benches.items():
        st = b["stats"]
        assert st["rounds"] == rounds, (name, st["rounds"])
        assert b["extra_info"]["rows_per_s"] == round(rows / st["median"]), name
        assert b["extra_info"]["rows_per_s_range"] == [round(rows / st["max"]), round(rows / st["min"])], name
    assert f"median of {rounds} rounds after 1 warm-up" in res.stdout
