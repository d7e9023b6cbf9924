"""Streaming lag: from a message's store time to the micro-batch that hands it to the query, with
``spark.readStream.format("rocketmq")`` on a 1 s processing-time trigger over a store a writer in
this process fills at a steady rate.

Run:

    PYTHONPATH=. .venv/bin/python -m pytest bench/test_bench_rocketmq_stream_lag.py --benchmark-only -s

The writer puts ``RATE`` messages of 100 bytes a second (in puts of 100, over 8 queues) for
``SECONDS``; each micro-batch records, per row, the wall clock when ``foreachBatch`` ran minus the
row's store timestamp. Printed: p50, p90 and max over every row, beside the trigger interval (the
wait a message can spend before the next trigger even with a free source).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from pyspark.sql import DataFrame, SparkSession
from pytest_benchmark.fixture import BenchmarkFixture

from bench.spark_session import local_spark
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.message_store import MessageStore
from dledger.spark import register

RATE = int(os.environ.get("DLEDGER_BENCH_RATE", "5000"))
SECONDS = int(os.environ.get("DLEDGER_BENCH_SECONDS", "30"))
TRIGGER_S = 1.0


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

    def collect(batch: DataFrame, _batch_id: int) -> None:
        now = time.time() * 1000
        ts = np.array([r[0] for r in batch.selectExpr("unix_millis(store_timestamp)").collect()], dtype=np.float64)
        if len(ts):
            lags.append(now - ts)

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
            time.sleep(3)  # the first (empty) micro-batches
            writer.start()
            writer.join()
            time.sleep(3 * TRIGGER_S)
        finally:
            stop.set()
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
    assert len(all_lags) == written[0]  # every message once
