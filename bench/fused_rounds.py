"""``read_messages`` of every column, fused pass against the per-column kernels, alternating
rounds, with ``pyarrow.parquet.read_table`` of the same rows as the same-run baseline.

    DLEDGER_BENCH_ROWS=2000000 PYTHONPATH=. .venv/bin/python bench/fused_rounds.py

Prints rows/s per round and the median [slowest-fastest] of each (``DLEDGER_BENCH_ROUNDS``, 5).
The store is the one of ``test_bench_rocketmq_reader.py``: 100-byte bodies over 8 queues.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq

from dledger.rocketmq import iter_message_batches, read_messages
from dledger.rocketmq.store import arrow_reader
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.message_store import MessageStore

ROWS = int(os.environ.get("DLEDGER_BENCH_ROWS", "2000000"))
ROUNDS = int(os.environ.get("DLEDGER_BENCH_ROUNDS", "5"))


def make_store(root: Path) -> None:
    body = bytes(range(100))
    with MessageStore(root, MessageStoreConfig()) as s:
        for done in range(0, ROWS, 4096):
            n = min(4096, ROWS - done)
            assert s.put_batch("BenchTopic", [body] * n, queue_id=(done // 4096) % 8, tags="bench").ok
        assert s.wait_dispatched(600)


def make_parquet(store: Path, out: Path) -> None:
    out.mkdir()
    writer = None
    for batch in iter_message_batches(store):
        if writer is None:
            writer = pq.ParquetWriter(out / "part-0000.parquet", batch.schema)
        writer.write_batch(batch, row_group_size=1 << 17)
    assert writer is not None
    writer.close()


def timed(fn: Callable[[], int]) -> tuple[float, float]:
    """Rows/s of one call by the wall clock and by this process's CPU time (on a shared
    machine the CPU figure moves less with the load)."""
    t, c = time.perf_counter(), time.process_time()
    assert fn() == ROWS
    return ROWS / (time.perf_counter() - t), ROWS / (time.process_time() - c)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store, parquet = Path(tmp) / "store", Path(tmp) / "parquet"
        make_store(store)
        make_parquet(store, parquet)
        fused_from = arrow_reader.FUSED_FROM

        def per_column() -> int:
            arrow_reader.FUSED_FROM = 99  # every read takes the per-column kernels
            try:
                return read_messages(store).num_rows
            finally:
                arrow_reader.FUSED_FROM = fused_from

        runs: dict[str, Callable[[], int]] = {
            "per-column": per_column,
            "fused": lambda: read_messages(store).num_rows,
            "parquet read_table": lambda: pq.read_table(parquet).num_rows,
        }
        for fn in runs.values():
            fn()  # warm-up: page cache, allocator
        wall: dict[str, list[float]] = {k: [] for k in runs}
        cpu: dict[str, list[float]] = {k: [] for k in runs}
        for r in range(ROUNDS):
            for name, fn in runs.items():
                w, c = timed(fn)
                wall[name].append(w)
                cpu[name].append(c)
            print(f"round {r}: " + ", ".join(f"{k} {v[-1] / 1e6:.2f} M/s" for k, v in wall.items()), flush=True)
        print(f"{ROWS} rows, {ROUNDS} rounds, load {os.getloadavg()}")
        for label, got in ("wall", wall), ("cpu", cpu):
            for name, v in got.items():
                med, lo, hi = statistics.median(v) / 1e6, min(v) / 1e6, max(v) / 1e6
                print(f"{label} {name}: {med:.2f} M rows/s [{lo:.2f}-{hi:.2f}]")


if __name__ == "__main__":
    main()
