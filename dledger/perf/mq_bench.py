"""Message store benchmarks (``dledger bench mq``): each figure beside a baseline doing the same
job without the message layer, in the same run, interleaved.

- put: ``MessageStore.put_batch`` of 32 messages at a time (100 B and 1 KiB bodies, classic and
  DLedger commit log), timed until dispatch has built the consume queue and index for all of
  them; baseline: ``MmapFileStore.append_batch`` of the same encoded records in the same batches.
- dispatch: consume queues and index built from a written commit log (``ReputMessageService``);
  baseline: the kernel scan of the same log alone (the floor any dispatch pays).
``bench/test_bench_mq.py`` measures the same work (and more cases) under pytest-benchmark.
"""

from __future__ import annotations

import functools
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from dledger.config import DLedgerConfig
from dledger.perf.store_bench import BenchResult, _tmpdir, result
from dledger.rocketmq.store.batch_preparer import BatchPreparer
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.encode import encode_batch
from dledger.rocketmq.store.message_store import MessageStore
from dledger.store.file import MmapFileStore

BATCH = 32
TOPIC = "TopicA"
STORE_HOST = ("10.0.0.1", 10911)


def _config(mode: str) -> MessageStoreConfig:
    return MessageStoreConfig(
        enable_dledger_commit_log=mode == "dledger",
        mapped_file_size_commit_log=1 << 30,
        store_host=f"{STORE_HOST[0]}:{STORE_HOST[1]}",
    )


def _records(size: int) -> list[bytes]:
    """The records the store writes for one batch of ``size``-byte messages."""
    prep = BatchPreparer(_config("classic"), STORE_HOST)
    batch = prep.prepare_columns(TOPIC, [os.urandom(size)] * BATCH, tags="TagA")
    buf, starts = encode_batch(batch, np.arange(BATCH, dtype=np.int64), np.zeros(BATCH, dtype=np.int64), 1)
    return [buf[int(starts[i]) : int(starts[i + 1])] for i in range(BATCH)]


class _Fresh:
    """A new directory per run under ``root``; the previous one and what was opened in it go."""

    def __init__(self, root: Path, name: str) -> None:
        self.root, self.name, self.k = root, name, 0
        self.opened: list[MessageStore | MmapFileStore] = []

    def __call__(self) -> Path:
        self.close()
        shutil.rmtree(self.root / f"{self.name}-{self.k}", ignore_errors=True)
        self.k += 1
        return self.root / f"{self.name}-{self.k}"

    def close(self) -> None:
        for obj in self.opened:
            obj.close()
        self.opened.clear()


def _put_pair(root: Path, mode: str, size: int, n: int) -> tuple[Callable[[], int], Callable[[], int], _Fresh]:
    fresh = _Fresh(root, f"put-{mode}-{size}")
    bodies = [os.urandom(size)] * BATCH
    records = _records(size)

    def ours() -> int:
        store = MessageStore(fresh(), _config(mode))
        fresh.opened.append(store)
        t0 = time.perf_counter()
        for _ in range(n // BATCH):
            store.put_batch(TOPIC, bodies, tags="TagA")
        if not store.wait_dispatched(600):
            raise RuntimeError("dispatch did not catch up")
        return int(n / (time.perf_counter() - t0))

    def raw() -> int:
        log = MmapFileStore(fresh() / "dledger-n0", DLedgerConfig(mapped_file_size_for_entry_data=1 << 30))
        fresh.opened.append(log)
        t0 = time.perf_counter()
        for _ in range(n // BATCH):
            log.append_batch(records, 0)
        return int(n / (time.perf_counter() - t0))

    return ours, raw, fresh


def _dispatch_pair(root: Path, mode: str, n: int) -> tuple[Callable[[], int], Callable[[], int], _Fresh]:
    fresh = _Fresh(root, f"dispatch-{mode}")
    body = os.urandom(100)

    def written() -> MessageStore:
        """A store holding ``n`` messages that dispatch has not seen (its service stopped)."""
        store = MessageStore(fresh(), _config(mode))
        fresh.opened.append(store)
        store.reput.stop()
        for k in range(n // BATCH):
            store.put_batch(TOPIC, [body] * BATCH, queue_id=k % 8, keys=[f"key-{k}"] * BATCH, tags="TagA")
        return store

    def ours() -> int:
        store = written()
        t0 = time.perf_counter()
        done = store.reput.dispatch_now()
        return int(done / (time.perf_counter() - t0))

    def scan() -> int:
        store = written()
        t0 = time.perf_counter()
        done = sum(len(cols["size"]) for _buf, cols in store.iter_batches())
        return int(done / (time.perf_counter() - t0))

    return ours, scan, fresh


def run_mq_bench(quick: bool = False, repeats: int | None = None, messages: int | None = None) -> list[BenchResult]:
    n = messages or (256 * 1024 if quick else 1024 * 1024)
    rounds = repeats or (3 if quick else 5)
    results: list[BenchResult] = []
    with _tmpdir() as root:
        pairs: list[tuple[str, str, Callable[[], tuple[Callable[[], int], Callable[[], int], _Fresh]]]] = []
        for mode in ("classic", "dledger"):
            for size in (100, 1024):
                pairs.append(
                    (
                        f"put_{mode}_{size}B",
                        "append_batch, same records",
                        functools.partial(_put_pair, root, mode, size, n),
                    )
                )
        for mode in ("classic", "dledger"):
            pairs.append((f"dispatch_{mode}", "kernel scan alone", functools.partial(_dispatch_pair, root, mode, n)))
        for name, base_name, make in pairs:
            ours, base, fresh = make()
            try:
                # Interleaved, so drift on a shared machine hits both sides.
                mine, theirs = [], []
                for _ in range(rounds):
                    mine.append(ours())
                    theirs.append(base())
                results.append(result(name, "msgs/s", mine, base_name, theirs))
            finally:
                fresh.close()
    return results
