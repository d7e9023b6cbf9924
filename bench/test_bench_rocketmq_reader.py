"""Reading a message store's messages: ``read_messages`` rows/s, and Spark's ``rocketmq`` format
against Spark's own Parquet reader on the same rows, in the same run.

Run (N messages of 100-byte bodies over 8 queues of one topic; the issue's full run is 10 million):

    DLEDGER_BENCH_ROWS=10000000 PYTHONPATH=. .venv/bin/python -m pytest bench/test_bench_rocketmq_reader.py \
        --benchmark-only -s

Default N is 1 million. Groups:

- ``mq-arrow-<N>``: ``read_messages`` walking the commit log, through the 8 consume queues, and
  with 4 columns, and ``message_batch_reader``'s batches taken one by one (every column);
  baseline: ``pyarrow.parquet.read_table`` of the same rows (every column) from a Parquet copy
  in the page cache;
- ``mq-spark-count-<N>`` and ``mq-spark-agg-<N>``: ``count()`` and a filter + aggregate over
  ``topic``, ``queue_id``, ``store_timestamp`` and ``length(body)``, through the ``rocketmq``
  format (all 19 columns: Python data sources get no column pruning from Spark; and with the
  ``columns`` option naming the query's columns: ``queue_id`` for the count, the four for the
  aggregate; and the same with ``minPartitions=2``: fewer commit-log files than 2 cut into 2
  pieces), through the ``rocketmq-jvm`` format (a DataSource V2 in the JVM: Spark prunes its
  columns itself) and through Spark's Parquet reader on the same rows. The count group also
  has ``python source floor`` (``bench/spark_floor.py``: a Python data source yielding one
  prebuilt batch over and over in two partitions), what the Python data source path costs alone.

The module prints rows/s, median of ``DLEDGER_BENCH_ROUNDS`` rounds (3) with the slowest and
fastest round, and the ratios at the end (targets: read_messages >= 10 M rows/s, Spark >= 0.7x
Parquet).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession
from pytest_benchmark.fixture import BenchmarkFixture

from bench.spark_floor import ConstantBatchSource
from bench.spark_session import local_spark
from dledger.rocketmq import iter_message_batches, read_messages
from dledger.rocketmq.store.arrow_reader import message_batch_reader
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.message_store import MessageStore
from dledger.spark import jvm_jar, register

ROWS = int(os.environ.get("DLEDGER_BENCH_ROWS", "1000000"))
ROUNDS = int(os.environ.get("DLEDGER_BENCH_ROUNDS", "3"))
BODY = 100
QUEUES = 8
TOPIC = "BenchTopic"
# Messages per put: each batch goes to the next queue.
CHUNK = 4096
# The columns each Spark query reads, for the ``columns`` option.
COUNT_COLUMNS = "queue_id"
AGG_COLUMNS = "topic,queue_id,store_timestamp,body"
AGG = (
    "SELECT topic, queue_id, count(*) AS n, max(store_timestamp) AS last, sum(length(body)) AS bytes "
    "FROM t WHERE queue_id < 6 GROUP BY topic, queue_id"
)

# name -> rows/s: (median, slowest round, fastest round).
RESULTS: dict[str, tuple[float, float, float]] = {}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bench-mq-reader") / "store"
    cfg = MessageStoreConfig()  # 1 GiB commit-log files: a walk's partitions are files
    body = bytes(range(BODY))
    chunk = CHUNK
    with MessageStore(root, cfg) as s:
        done = 0
        while done < ROWS:
            n = min(chunk, ROWS - done)
            assert s.put_batch(TOPIC, [body] * n, queue_id=(done // chunk) % QUEUES, tags="bench").ok
            done += n
        assert s.wait_dispatched(600)
    return root


@pytest.fixture(scope="module")
def parquet_dir(store: Path) -> Path:
    out = store.parent / "parquet"
    out.mkdir()
    # Written batch by batch (a table of every column of 10 M messages is ~3 GB), in files of
    # about 1 M rows, as Spark would write them.
    writer: pq.ParquetWriter | None = None
    rows = files = 0
    for batch in iter_message_batches(store):
        if writer is None or rows >= 1_000_000:
            if writer is not None:
                writer.close()
            writer = pq.ParquetWriter(out / f"part-{files:04d}.parquet", batch.schema)
            files += 1
            rows = 0
        writer.write_batch(batch, row_group_size=1 << 17)
        rows += batch.num_rows
    assert writer is not None
    writer.close()
    assert pq.ParquetDataset(out).read(columns=["queue_id"]).num_rows == ROWS
    return out


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    with local_spark(
        "dledger-bench-mq", spark_driver_memory="2g", spark_sql_shuffle_partitions="2", spark_jars=jvm_jar()
    ) as session:
        register(session)
        session.dataSource.register(ConstantBatchSource)
        yield session


def _run(benchmark: BenchmarkFixture, name: str, group: str, fn: Any) -> None:
    benchmark.group = group
    benchmark.extra_info["rows"] = ROWS
    benchmark.pedantic(fn, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    stats = benchmark.stats.stats
    RESULTS[name] = (ROWS / stats.median, ROWS / stats.max, ROWS / stats.min)
    benchmark.extra_info["rows_per_s_median"] = round(RESULTS[name][0])


@pytest.mark.parametrize("how", ["walk", "queues", "4-columns", "batch reader"])
def test_read_messages(benchmark: BenchmarkFixture, store: Path, how: str) -> None:
    kwargs: dict[str, Any] = {
        "walk": {},
        "queues": {"topics": [TOPIC]},
        "4-columns": {"columns": ["topic", "queue_id", "store_timestamp", "body"]},
        "batch reader": {},
    }[how]

    def read() -> int:
        if how == "batch reader":  # every column, batches taken and dropped one by one
            return sum(b.num_rows for b in message_batch_reader(store))
        # The table is dropped inside the round: pytest-benchmark keeps a round's return value
        # until the next round has made its own, so returning it held two tables at once.
        return read_messages(store, **kwargs).num_rows

    assert read() == ROWS
    _run(benchmark, f"read_messages {how}", f"mq-arrow-{ROWS}", read)


def test_parquet_read_table(benchmark: BenchmarkFixture, parquet_dir: Path) -> None:
    _run(benchmark, "pyarrow parquet", f"mq-arrow-{ROWS}", lambda: pq.read_table(parquet_dir).num_rows)


def _frame(spark: SparkSession, store: Path, parquet_dir: Path, source: str, columns: str) -> DataFrame:
    if source == "parquet":
        return spark.read.parquet(str(parquet_dir))
    if source == "python source floor":
        return spark.read.format("constant-batches").options(rows=str(ROWS), partitions="2").load()
    if source == "rocketmq-jvm":
        return spark.read.format("rocketmq-jvm").load(str(store))
    reader = spark.read.format("rocketmq")
    if source.startswith("rocketmq columns"):
        reader = reader.option("columns", columns)
    if source.endswith("minPartitions 2"):
        reader = reader.option("minPartitions", "2")  # a one-file log cut in two, for the two cores
    return reader.load(str(store))


SOURCES = ["rocketmq", "rocketmq columns", "rocketmq columns minPartitions 2", "rocketmq-jvm", "parquet"]


@pytest.mark.parametrize("source", [*SOURCES[:-1], "python source floor", SOURCES[-1]])
def test_spark_count(
    benchmark: BenchmarkFixture, spark: SparkSession, store: Path, parquet_dir: Path, source: str
) -> None:
    df = _frame(spark, store, parquet_dir, source, COUNT_COLUMNS)
    assert df.count() == ROWS
    _run(benchmark, f"spark count, {source}", f"mq-spark-count-{ROWS}", df.count)


@pytest.mark.parametrize("source", SOURCES)
def test_spark_filter_aggregate(
    benchmark: BenchmarkFixture, spark: SparkSession, store: Path, parquet_dir: Path, source: str
) -> None:
    _frame(spark, store, parquet_dir, source, AGG_COLUMNS).createOrReplaceTempView("t")
    got = spark.sql(AGG).collect()
    chunks = [min(CHUNK, ROWS - at) for at in range(0, ROWS, CHUNK)]
    assert sum(r.n for r in got) == sum(n for k, n in enumerate(chunks) if k % QUEUES < 6)
    _run(benchmark, f"spark agg, {source}", f"mq-spark-agg-{ROWS}", lambda: spark.sql(AGG).collect())


@pytest.fixture(scope="module", autouse=True)
def summary() -> Iterator[None]:
    yield
    if not RESULTS:
        return
    lines = [f"message reader benchmark, {ROWS} messages of {BODY}-byte bodies over {QUEUES} queues, rows/s (median):"]
    lines += [
        f"  {name:34s} {med / 1e6:8.2f} M [{lo / 1e6:.2f}-{hi / 1e6:.2f} M]" for name, (med, lo, hi) in RESULTS.items()
    ]
    for q in ("count", "agg"):
        base = RESULTS.get(f"spark {q}, parquet")
        for src in [*SOURCES[:-1], "python source floor"]:
            ours = RESULTS.get(f"spark {q}, {src}")
            if base and ours:
                lines.append(f"  spark {q}: {src} / parquet = {ours[0] / base[0]:.2f}x (target >= 0.7x)")
    print("\n" + "\n".join(lines))
