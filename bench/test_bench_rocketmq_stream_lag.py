"""Streaming lag: from a message's store time to the micro-batch that hands it to the query, with
``spark.readStream.format("rocketmq")`` on a 1 s processing-time trigger over a store a writer in
this process fills at a steady rate.

Run:

    PYTHONPATH=. .venv/bin/python -m pytest bench/test_bench_rocketmq_stream_lag.py --benchmark-only -s

The writer puts ``RATE`` messages of 100 bytes a second (in puts of 100, over 8 queues) for
``SECONDS``; each micro-batch records, per row, the wall clock when ``foreachBatch`` ran minus the
row's store timestamp. Printed: p50, p90 and max over every row, beside the trigger interval (the
wait a message can spend before the next trigger even with a free source).

The writer starts only once the query has run its first micro-batch (``startingOffsets`` latest
is resolved there: puts before it are rightly not the stream's), and the query is stopped only
once it has handed over every message written (at most ``CATCH_UP_S``). Stopping it 3 s after the
last put, as this bench did, stopped a loaded query (7-16 s behind) in the middle of a batch: the
messages still ahead were missing, or Spark's stream thread died of a ``StackOverflowError``
(docs/spark.md, "Streaming lag").
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery
from pytest_benchmark.fixture import BenchmarkFixture

from bench.spark_session import local_spark
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.message_store import MessageStore
from dledger.spark import register

RATE = int(os.environ.get("DLEDGER_BENCH_RATE", "5000"))
SECONDS = int(os.environ.get("DLEDGER_BENCH_SECONDS", "30"))
TRIGGER_S = 1.0
START_S = 300.0  # the first micro-batch, at most
CATCH_UP_S = 300.0  # after the last put, at most


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    with local_spark("dledger-bench-lag", spark_sql_shuffle_partitions="2") as session:
        register(session)
        yield session


def test_stream_lag(benchmark: BenchmarkFixture, spark: SparkSession, tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = MessageStore(root, MessageStoreConfig())
    body = bytes(100)
    for q in range(8):  # the queues exist before the stream starts
        assert store.put_batch("Lag", [body], queue_id=q).ok
    assert store.wait_dispatched()
    lags: list[np.ndarray] = []
    stop = threading.Event()
    written = [0]

    def write() -> None:
        step = 100
        interval = step / RATE
        k = 0
        nxt = time.monotonic()
        end = nxt + SECONDS
        while not stop.is_set() and time.monotonic() < end:
            assert store.put_batch("Lag", [body] * step, queue_id=k % 8).ok
            written[0] += step
            k += 1
            nxt += interval
            time.sleep(max(0.0, nxt - time.monotonic()))

    seen: dict[int, list[int]] = {}  # queue id -> queue offsets, in the order handed over
    batches = [0]

    def collect(batch: DataFrame, _batch_id: int) -> None:
        now = time.time() * 1000
        rows = batch.selectExpr("unix_millis(store_timestamp)", "queue_id", "queue_offset").collect()
        ts = np.array([r[0] for r in rows], dtype=np.float64)
        for r in rows:
            seen.setdefault(r[1], []).append(r[2])
        if len(ts):
            lags.append(now - ts)
        batches[0] += 1

    def wait_for(done: Any, seconds: float, what: str, query: StreamingQuery) -> None:
        deadline = time.monotonic() + seconds
        while not done():
            if query.exception() is not None:
                raise AssertionError(f"the query failed while waiting for {what}: {query.exception()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {seconds:.0f} s")
            time.sleep(0.1)

    def run() -> None:
        query = (
            spark.readStream.format("rocketmq")
            .option("topics", "Lag")
            .option("startingOffsets", "latest")
            .load(str(root))
            .writeStream.foreachBatch(collect)
            .trigger(processingTime=f"{int(TRIGGER_S * 1000)} milliseconds")
            .start()
        )
        writer = threading.Thread(target=write)
        try:
            wait_for(lambda: batches[0] > 0, START_S, "the first micro-batch", query)
            writer.start()
            writer.join()
            wait_for(lambda: sum(map(len, seen.values())) >= written[0], CATCH_UP_S, "every message", query)
            time.sleep(2 * TRIGGER_S)  # nothing more should come
        finally:
            stop.set()
            if writer.is_alive():  # not started when the first micro-batch never came
                writer.join()
            query.stop()

    try:
        benchmark.pedantic(run, rounds=1, iterations=1)
    finally:
        store.close()
    all_lags = np.concatenate(lags)
    p50, p90 = np.percentile(all_lags, [50, 90])
    benchmark.extra_info.update(rows=len(all_lags), lag_p50_ms=round(p50), lag_p90_ms=round(p90))
    print(
        f"\nstreaming lag, {RATE} msgs/s for {SECONDS} s, {TRIGGER_S:.0f} s trigger: {len(all_lags)} rows, "
        f"p50 {p50:.0f} ms, p90 {p90:.0f} ms, max {all_lags.max():.0f} ms (trigger interval {TRIGGER_S * 1000:.0f} ms)"
    )
    assert len(all_lags) == written[0]  # every message once ...
    for qid, offsets in seen.items():  # ... in queue order (offset 0, the queue's first, came before)
        assert offsets == list(range(1, 1 + len(offsets))), qid
