"""The PySpark data source, on a real local SparkSession (Java 17 and pyspark >= 4).

Nothing here skips: without Java or pyspark the session fixture fails, and so do the tests.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from dledger.config import DLedgerConfig
from dledger.errors import DLedgerError
from dledger.reader import plan_read, read_table
from dledger.spark import DLedgerDataSource, jvm_jar, register
from dledger.store.file import MmapFileStore
from tests.conftest import REPO, java_fixtures
from tests.test_reader import body_of, corrupt, expected_rows, make_store, node_dir_of

pytestmark = pytest.mark.spark

PUSHDOWN = "spark.sql.python.filterPushdown.enabled"


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # Spark's Python workers must import dledger from this checkout.
    paths = [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    builder = SparkSession.builder
    try:
        # The rocketmq-jvm format's jar (tests/test_spark_rocketmq_jvm.py): on the first
        # session of the process, whose JVM it joins; without javac those tests fail, not these.
        builder = builder.config("spark.jars", jvm_jar())
    except DLedgerError:
        pass
    session = (
        builder.master("local[2]")
        .appName("dledger-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(DLedgerDataSource)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def pushdown(spark: SparkSession) -> Iterator[SparkSession]:
    register(spark)  # also turns the pushdown setting on
    try:
        yield spark
    finally:
        spark.conf.set(PUSHDOWN, "false")


@pytest.fixture
def cfg() -> DLedgerConfig:
    return DLedgerConfig(mapped_file_size_for_entry_data=4096, mapped_file_size_for_entry_index=640)


def test_fixture_through_spark_is_expected(spark: SparkSession) -> None:
    fixture = java_fixtures()[0]
    expected = (fixture / "expected.txt").read_text().splitlines()[1:]
    df = spark.read.format("dledger").load(str(node_dir_of(fixture)))
    assert [f.name for f in df.schema.fields] == ["index", "term", "pos", "magic", "body_crc", "body"]
    rows = (
        df.selectExpr("index", "term", "pos", "length(body) AS n", "substr(sha2(body, 256), 1, 16) AS h")
        .orderBy("index")
        .collect()
    )
    assert [f"{r['index']} {r.term} {r.pos} {r.n} {r.h}" for r in rows] == expected
    # Bodies come through as bytes, byte for byte.
    first = df.where("index = 0").select("body").collect()[0].body
    assert hashlib.sha256(first).hexdigest()[:16] == expected[0].split()[4]


def test_multi_segment_store_count_sums_partitions(spark: SparkSession, tmp_path: Path, cfg: DLedgerConfig) -> None:
    node = tmp_path / "dledger-n0"
    make_store(node, cfg, 1500, committed=1399)
    df = spark.read.format("dledger").option("batchSize", "100").load(str(node))
    n, s_index, s_len = expected_rows(0, 1399)
    got = df.selectExpr("count(*) AS c", "sum(index) AS s", "sum(length(body)) AS l", "max(term) AS t").collect()[0]
    assert (got.c, got.s, got.l, got.t) == (n, s_index, s_len, 3)
    # One partition per data file holding committed entries.
    assert df.rdd.getNumPartitions() == len(plan_read(node).segments) > 20
    everything = spark.read.format("dledger").option("committedOnly", "false").load(str(node))
    assert everything.count() == 1500
    ranged = spark.read.format("dledger").options(startIndex="100", endIndex="199").load(str(node))
    assert sorted(r["index"] for r in ranged.select("index").collect()) == list(range(100, 200))
    # maxPartitionBytes splits a data file into several partitions.
    whole = spark.read.format("dledger").option("endIndex", "299").load(str(node))
    split = spark.read.format("dledger").options(maxPartitionBytes="1024", endIndex="299").load(str(node))
    assert split.rdd.getNumPartitions() > 2 * whole.rdd.getNumPartitions()
    assert sorted(r["index"] for r in split.select("index").collect()) == list(range(300))


def test_several_nodes_and_user_schema(spark: SparkSession, tmp_path: Path, cfg: DLedgerConfig) -> None:
    make_store(tmp_path / "dledger-n0", cfg, 300, committed=299)
    make_store(tmp_path / "dledger-n1", cfg, 300, committed=149)
    df = spark.read.format("dledger").load(str(tmp_path))
    assert df.columns[-1] == "node"
    counts = {r.node: r["count"] for r in df.groupBy("node").count().collect()}
    assert counts == {"n0": 300, "n1": 150}
    # load() with a list of node directories is the same read.
    listed = spark.read.format("dledger").load([str(tmp_path / "dledger-n1"), str(tmp_path / "dledger-n0")])
    assert listed.count() == 450 and listed.columns[-1] == "node"
    # A user-given schema picks columns.
    narrow = spark.read.format("dledger").schema("index long not null, body binary").load(str(tmp_path / "dledger-n1"))
    rows = narrow.orderBy("index").collect()
    assert [r["index"] for r in rows] == list(range(150)) and rows[7].body == body_of(7)


def test_index_filter_reads_only_partitions_that_hold_them(
    pushdown: SparkSession, tmp_path: Path, cfg: DLedgerConfig
) -> None:
    spark = pushdown
    node = tmp_path / "dledger-n0"
    make_store(node, cfg, 2000, committed=1999)
    all_parts = len(plan_read(node).segments)
    a, b = 700, 820
    holding = plan_read(node, a, b).segments
    assert 1 < len(holding) < all_parts // 5
    df = spark.read.format("dledger").load(str(node)).where(f"index BETWEEN {a} AND {b}")
    assert df.rdd.getNumPartitions() == len(holding)
    assert sorted(r["index"] for r in df.select("index").collect()) == list(range(a, b + 1))
    # term filters prune too (terms never decrease along the log), and stay exact.
    terms = read_table(node, columns=["index", "term"])
    want = [i for i, t in zip(terms["index"].to_pylist(), terms["term"].to_pylist(), strict=True) if t == 2]
    by_term = spark.read.format("dledger").load(str(node)).where("term = 2 AND index > 10")
    assert by_term.rdd.getNumPartitions() < all_parts // 2
    assert sorted(r["index"] for r in by_term.select("index").collect()) == want
    # Filters Spark cannot push (an OR) still give the right rows, from every partition.
    either = spark.read.format("dledger").load(str(node)).where("index < 3 OR index > 1996")
    assert either.rdd.getNumPartitions() == all_parts
    assert sorted(r["index"] for r in either.select("index").collect()) == [0, 1, 2, 1997, 1998, 1999]
    # An impossible range plans nothing.
    assert spark.read.format("dledger").load(str(node)).where("index > 5 AND index < 3").count() == 0


def test_without_pushdown_setting_the_source_still_works(
    spark: SparkSession, tmp_path: Path, cfg: DLedgerConfig
) -> None:
    assert spark.conf.get(PUSHDOWN) == "false"
    node = tmp_path / "dledger-n0"
    make_store(node, cfg, 500, committed=499)
    df = spark.read.format("dledger").load(str(node)).where("index BETWEEN 100 AND 109")
    assert df.count() == 10


def test_clear_errors(spark: SparkSession, tmp_path: Path, cfg: DLedgerConfig) -> None:
    node = tmp_path / "dledger-n0"
    make_store(node, cfg, 20, committed=19)
    with pytest.raises(Exception, match="no such file or directory"):
        spark.read.format("dledger").load(str(tmp_path / "missing")).count()
    (tmp_path / "empty").mkdir()
    with pytest.raises(Exception, match="is not a dledger store"):
        spark.read.format("dledger").load(str(tmp_path / "empty")).count()
    with pytest.raises(Exception, match=r"unknown option.*startindexx"):
        spark.read.format("dledger").option("startIndexx", "3").load(str(node)).count()
    with pytest.raises(Exception, match="unknown mode 'PERMISSIVE'"):
        spark.read.format("dledger").option("mode", "PERMISSIVE").load(str(node)).count()
    with pytest.raises(Exception, match="batchSize=0 must be >= 1"):
        spark.read.format("dledger").option("batchSize", "0").load(str(node)).count()


def test_corrupt_entry_failfast_and_dropmalformed(spark: SparkSession, tmp_path: Path, cfg: DLedgerConfig) -> None:
    node = tmp_path / "dledger-n0"
    make_store(node, cfg, 600, committed=599)
    victim = 345
    seg = next(s for s in plan_read(node).segments if s.first_index <= victim <= s.last_index)
    rel = read_table(node, columns=["pos"])["pos"][victim].as_py() - seg.file_from_offset
    corrupt(seg.data_file, rel + 48 + 1, b"\x00")
    df = spark.read.format("dledger").load(str(node))
    with pytest.raises(Exception) as exc:
        df.count()
    text = str(exc.value)
    assert seg.data_file in text and f"offset {rel}" in text and f"entry {victim}" in text
    bad = tmp_path / "bad"
    dropped = spark.read.format("dledger").options(mode="DROPMALFORMED", badRecordsPath=str(bad)).load(str(node))
    assert sorted(r["index"] for r in dropped.select("index").collect()) == [i for i in range(600) if i != victim]
    records = [json.loads(line) for p in sorted(bad.glob("*.json")) for line in p.read_text().splitlines()]
    assert [(r["index"], r["offset"], r["file"], r["count"], r["reason"]) for r in records] == [
        (victim, rel, seg.data_file, 1, "crc mismatch")
    ]


def test_stream_picks_up_new_commits_and_never_uncommitted(
    spark: SparkSession, tmp_path: Path, cfg: DLedgerConfig
) -> None:
    node = tmp_path / "dledger-n0"
    store = MmapFileStore(node, cfg, start_services=False)
    try:
        store.append_batch([body_of(i) for i in range(50)], 1)
        store.update_committed_index(1, 39)
        store.checkpoint()
        stream = spark.readStream.format("dledger").load(str(node))
        query = (
            stream.selectExpr("index", "term", "body")
            .writeStream.format("memory")
            .queryName("dl_stream")
            .outputMode("append")
            .start()
        )
        try:
            query.processAllAvailable()
            assert sorted(r["index"] for r in spark.sql("SELECT index FROM dl_stream").collect()) == list(range(40))
            # Appended and partly committed between micro-batches.
            store.append_batch([body_of(i) for i in range(50, 130)], 2)
            store.update_committed_index(2, 111)
            store.checkpoint()
            query.processAllAvailable()
            rows = spark.sql("SELECT index, term, body FROM dl_stream").collect()
            assert sorted(r["index"] for r in rows) == list(range(112))  # nothing past the committed index
            assert all(r.body == body_of(r["index"]) for r in rows)
            assert sum(p["numInputRows"] for p in query.recentProgress) == 112
            assert len([p for p in query.recentProgress if p["numInputRows"]]) >= 2
        finally:
            query.stop()
    finally:
        store.close()


def test_stream_restart_resumes_from_checkpoint(spark: SparkSession, tmp_path: Path, cfg: DLedgerConfig) -> None:
    node = tmp_path / "dledger-n0"
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    store = MmapFileStore(node, cfg, start_services=False)

    def run_once() -> None:
        q = (
            spark.readStream.format("dledger")
            .option("maxEntriesPerTrigger", "70")
            .load(str(node))
            .select("index", "body")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(120)
        assert q.exception() is None

    try:
        store.append_batch([body_of(i) for i in range(100)], 1)
        store.update_committed_index(1, 89)
        store.checkpoint()
        run_once()
        store.append_batch([body_of(i) for i in range(100, 200)], 2)
        store.update_committed_index(2, 180)
        store.checkpoint()
        run_once()
        run_once()  # nothing new: reads nothing
    finally:
        store.close()
    rows = spark.read.parquet(str(out)).collect()
    assert sorted(r["index"] for r in rows) == list(range(181))  # each entry exactly once
    assert all(r.body == body_of(r["index"]) for r in rows)


# A user's script: a plain local session, then register(); no PYSPARK_PYTHON.
WORKERS_SCRIPT = """
import sys
from pyspark.sql import SparkSession
from dledger.spark import register
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false").getOrCreate())
spark.sparkContext.setLogLevel("OFF")
register(spark)
print("rows", spark.read.format("dledger").load(sys.argv[1]).count())
spark.stop()
"""


@pytest.mark.timeout(300)
def test_register_points_local_workers_at_this_python(tmp_path: Path) -> None:
    # The python3 first on PATH is not the one with dledger and pyarrow (a virtualenv run by
    # its path, not activated): workers started with it fail.
    decoy = tmp_path / "bin"
    decoy.mkdir()
    (decoy / "python3").write_text("#!/bin/sh\necho 'the python3 on PATH ran' >&2\nexit 1\n")
    (decoy / "python3").chmod(0o755)
    node = tmp_path / "dledger-n0"
    with MmapFileStore(node, start_services=False) as store:
        store.append_batch([b"a", b"b", b"c", b"d", b"e"], 0)
        store.update_committed_index(0, store.ledger_end_index)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["PATH"] = os.pathsep.join([str(decoy), env.get("PATH", "")])
    res = subprocess.run(
        [sys.executable, "-c", WORKERS_SCRIPT, str(node)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert res.returncode == 0 and "rows 5" in res.stdout, res.stderr[-3000:]
