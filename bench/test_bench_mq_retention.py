"""Dispatch's longest stall while retention deletes the files of many queues, beside the
retention call's own time (how long dispatch stalled when retention held its lock across
every queue, as it did before it took the lock queue by queue).

    pytest bench/test_bench_mq_retention.py -p no:cacheprovider -s

A store of QUEUES topics, one queue each, whose first consume-queue file points only into the
commit-log files a forced retention deletes (10, RocketMQ's cap a call). While
``delete_expired`` runs, a thread takes and drops the dispatch lock every 0.5 ms, as each
dispatch round does; ``extra_info['longest_dispatch_wait_s']`` is its longest wait, beside
``retention_s``. Both commit-log modes.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.message_store import MessageStore

QUEUES = int(os.environ.get("DLEDGER_BENCH_RETENTION_QUEUES", 2000))
ROUNDS = 6  # puts of 10 messages a queue; a 20-unit consume-queue file holds two of them


@pytest.mark.parametrize("mode", ["classic", "dledger"])
def test_dispatch_stall_during_retention(benchmark: Any, tmp_path: Path, mode: str) -> None:
    cfg = MessageStoreConfig(
        mapped_file_size_commit_log=1 << 20,
        mapped_file_size_consume_queue=20 * 20,
        enable_dledger_commit_log=mode == "dledger",
    )
    store = MessageStore(tmp_path / "store", cfg)
    try:
        for _ in range(ROUNDS):
            for q in range(QUEUES):
                assert store.put_batch(f"T{q}", [b"x" * 100] * 10).ok
        store.wait_dispatched()
        lock = store.reput._lock
        worst = [0.0]
        done = threading.Event()

        def dispatch_like() -> None:
            while not done.is_set():
                t = time.perf_counter()
                with lock:
                    pass
                worst[0] = max(worst[0], time.perf_counter() - t)
                time.sleep(0.0005)

        def retention() -> int:
            return store.delete_expired(used_ratio=0.1, force=True)

        th = threading.Thread(target=dispatch_like)
        th.start()
        try:
            started = time.perf_counter()
            deleted = benchmark.pedantic(retention, rounds=1, iterations=1)
            took = time.perf_counter() - started
        finally:
            done.set()
            th.join()
        assert deleted == 10 and store.min_offset_in_queue("T0", 0) > 0
        benchmark.extra_info.update(
            queues=QUEUES, retention_s=round(took, 3), longest_dispatch_wait_s=round(worst[0], 4)
        )
        print(f"\n{mode}: retention {took:.3f} s, dispatch's longest wait {worst[0] * 1000:.1f} ms")
    finally:
        store.close()
