"""A walk of the ``rocketmq`` format with ``minPartitions=2`` (a log of one commit-log file cut
into two pieces, one per core) against the default, one partition per file, in alternating
rounds in one Spark session: ``count()`` with ``columns=queue_id`` and the bench's filter +
aggregate with its four columns (bench/test_bench_rocketmq_reader.py). Prints rows/s, median
[slowest-fastest].

    DLEDGER_BENCH_ROWS=2000000 PYTHONPATH=. .venv/bin/python bench/spark_partition_rounds.py [rounds]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import DataFrame

from bench.spark_session import local_spark
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.message_store import MessageStore
from dledger.spark import register

ROWS = int(os.environ.get("DLEDGER_BENCH_ROWS", "2000000"))
AGG = (
    "SELECT topic, queue_id, count(*) AS n, max(store_timestamp) AS last, sum(length(body)) AS bytes "
    "FROM t WHERE queue_id < 6 GROUP BY topic, queue_id"
)


def build(root: Path) -> None:
    """ROWS messages of 100-byte bodies over 8 queues, in puts of 4096 (as the bench's store)."""
    with MessageStore(root, MessageStoreConfig()) as s:
        done = 0
        while done < ROWS:
            n = min(4096, ROWS - done)
            assert s.put_batch("BenchTopic", [bytes(range(100))] * n, queue_id=(done // 4096) % 8, tags="bench").ok
            done += n
        assert s.wait_dispatched(600)


def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp, local_spark("partition-rounds", spark_driver_memory="2g") as spark:
        root = Path(tmp) / "store"
        build(root)
        register(spark)

        def frame(cols: str, split: bool) -> DataFrame:
            reader = spark.read.format("rocketmq").option("columns", cols)
            return (reader.option("minPartitions", "2") if split else reader).load(str(root))

        def agg(split: bool) -> None:
            frame("topic,queue_id,store_timestamp,body", split).createOrReplaceTempView("t")
            spark.sql(AGG).collect()

        cases: dict[str, Callable[[], object]] = {
            "count, one per file": lambda: frame("queue_id", False).count(),
            "count, minPartitions 2": lambda: frame("queue_id", True).count(),
            "agg, one per file": lambda: agg(False),
            "agg, minPartitions 2": lambda: agg(True),
        }
        times: dict[str, list[float]] = {k: [] for k in cases}
        for fn in cases.values():
            fn()  # warm-up
        for _ in range(rounds):
            for name, fn in cases.items():
                t = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t)
        print(f"{ROWS} rows, {rounds} alternating rounds, load {os.getloadavg()}")
        for name, ts in times.items():
            med, slow, fast = (ROWS / x / 1e6 for x in (statistics.median(ts), max(ts), min(ts)))
            print(f"  {name:30s} {med:6.2f} M rows/s [{slow:.2f}-{fast:.2f}]")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 7)
