"""The ``rocketmq-jvm`` Spark format (a DataSource V2 in the JVM, ``spark-jvm/``) on a real local
SparkSession: the Java-written classic fixture reads exactly as its expected listing, with the
Python ``rocketmq`` format's columns; pruned columns and pushed filters give the rows Spark's own
filtering gives; a truncated or damaged file stops where the Python format stops; options only
the Python format has are refused by name."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from dledger.rocketmq import read_messages
from dledger.spark import jvm_available, register
from dledger.spark.rocketmq_source import SPARK_TYPES
from tests.rocketmq.test_arrow_reader import FIXTURES_MQ, expected, line_of, split_expected
from tests.test_spark import spark  # noqa: F401  (the session fixture, started with the jar)
from tests.test_spark_rocketmq import rows_of

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

CLASSIC = FIXTURES_MQ / "classic-3topics"
FORMAT = "rocketmq-jvm"


@pytest.fixture
def jvm(spark: SparkSession) -> SparkSession:  # noqa: F811
    assert jvm_available(spark), "the session was started without the rocketmq-jvm jar (see tests/test_spark.py)"
    return spark


def _by_offset(lines: list[tuple[str, dict[str, str]]]) -> list[tuple[str, dict[str, str]]]:
    return sorted(lines, key=lambda lp: int(lp[0].split("\t", 1)[0]))


def test_classic_fixture_reads_as_java_listed(jvm: SparkSession) -> None:
    register(jvm)  # the Python format, for its schema
    df = jvm.read.format(FORMAT).load(str(CLASSIC))
    assert df.schema == jvm.read.format("rocketmq").load(str(CLASSIC)).schema
    assert [(f.name, f.dataType) for f in df.schema.fields] == list(SPARK_TYPES.items())
    files = list((CLASSIC / "commitlog").glob("*"))
    assert df.rdd.getNumPartitions() == len(files) > 5  # one partition per commit-log file
    got = _by_offset([line_of(r) for r in rows_of(df)])
    assert got == [split_expected(line) for line in expected(CLASSIC.name, "messages.tsv")]
    assert df.count() == len(got)


def test_files_cut_into_pieces_read_every_record_once(jvm: SparkSession) -> None:
    """``maxPartitionBytes`` cuts each commit-log file at record starts: the pieces together are
    the Java listing, each record once."""
    df = jvm.read.format(FORMAT).option("maxPartitionBytes", "1000").load(str(CLASSIC))
    assert df.rdd.getNumPartitions() > 2 * len(list((CLASSIC / "commitlog").glob("*")))
    got = _by_offset([line_of(r) for r in rows_of(df)])
    assert got == [split_expected(line) for line in expected(CLASSIC.name, "messages.tsv")]


def _rows(df: DataFrame) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.collect())


@pytest.mark.parametrize(
    "where",
    [
        "topic = 'TopicA'",
        "topic IN ('TopicB', 'TopicC_longer.name-01') AND queue_id = 1",
        "queue_id < 2 AND queue_offset BETWEEN 3 AND 40",
        "queue_id >= 1 AND queue_id <= 2 AND topic <> 'TopicA'",
        "queue_offset > 5 AND queue_offset < 3",
        "length(body) > 1000 AND tags IS NOT NULL",
    ],
)
def test_pruned_columns_and_pushed_filters_give_sparks_rows(jvm: SparkSession, where: str) -> None:
    """The same query over the JVM format (pushed down) and over the rows collected whole and
    filtered by Spark itself (a DataFrame made from them, nothing pushed)."""
    cols = ["topic", "queue_id", "queue_offset", "store_timestamp", "tags", "body"]
    everything = jvm.read.format(FORMAT).load(str(CLASSIC)).select(*cols)
    plain = jvm.createDataFrame(everything.collect(), everything.schema)
    query = f"SELECT topic, queue_id, queue_offset, length(body) AS n FROM t WHERE {where}"
    everything.createOrReplaceTempView("t")
    pushed = jvm.sql(query)
    plain.createOrReplaceTempView("t")
    assert _rows(pushed) == _rows(jvm.sql(query))


def test_store_timestamp_filter_is_exact_at_its_edges(jvm: SparkSession) -> None:
    df = jvm.read.format(FORMAT).load(str(CLASSIC))
    stamps = sorted({int(r[0]) for r in df.selectExpr("unix_millis(store_timestamp)").collect()})
    lo, hi = stamps[len(stamps) // 4], stamps[len(stamps) // 2]
    q = df.where(f"store_timestamp >= timestamp_millis({lo}) AND store_timestamp <= timestamp_millis({hi})")
    plan = q._jdf.queryExecution().executedPlan().toString()
    assert "pushed" in plan and "store_timestamp" in plan  # applied in the walk, not by Spark
    got = sorted(r[0] for r in q.selectExpr("commit_log_offset").collect())
    table = read_messages(CLASSIC, columns=["commit_log_offset", "store_timestamp"]).to_pylist()
    want = sorted(
        r["commit_log_offset"] for r in table if lo <= int(r["store_timestamp"].timestamp() * 1000 + 0.5) <= hi
    )
    assert got == want and 0 < len(got) < len(table)


def test_count_and_aggregate_read_no_column(jvm: SparkSession) -> None:
    df = jvm.read.format(FORMAT).load(str(CLASSIC))
    lines = expected(CLASSIC.name, "messages.tsv")
    assert df.count() == len(lines)
    agg = df.where("queue_id < 2").groupBy("topic").agg({"body": "count"}).collect()
    want: dict[str, int] = {}
    for line in lines:
        cols = line.split("\t")
        if int(cols[3]) < 2:
            want[cols[2]] = want.get(cols[2], 0) + 1
    assert {r[0]: r[1] for r in agg} == {k: v for k, v in want.items()}


def test_columns_option_and_a_given_schema(jvm: SparkSession) -> None:
    cols = ["msg_id", "tags", "properties", "queue_id"]
    df = jvm.read.format(FORMAT).option("columns", ",".join(cols)).load(str(CLASSIC))
    assert df.columns == cols
    want = read_messages(CLASSIC, columns=cols).to_pylist()
    got = [{**r.asDict(), "properties": sorted(r["properties"].items())} for r in df.collect()]
    key = lambda r: r["msg_id"]  # noqa: E731
    assert sorted(got, key=key) == sorted(({**w, "properties": sorted(w["properties"])} for w in want), key=key)
    given = jvm.read.format(FORMAT).schema("topic STRING, size INT").load(str(CLASSIC))
    assert given.columns == ["topic", "size"] and given.count() == len(want)
    with pytest.raises(Exception, match="unknown column"):
        jvm.read.format(FORMAT).option("columns", "topic,nope").load(str(CLASSIC)).collect()


@pytest.mark.parametrize(
    ("option", "value"),
    [("topics", "TopicA"), ("startingOffsets", "earliest"), ("decompress", "true"), ("minPartitions", "2")],
)
def test_options_of_the_python_format_are_refused_by_name(jvm: SparkSession, option: str, value: str) -> None:
    with pytest.raises(Exception, match=f"option {option}|{option}=true.*use format 'rocketmq'"):
        jvm.read.format(FORMAT).option(option, value).load(str(CLASSIC)).collect()


def test_a_dledger_store_or_no_store_is_refused(jvm: SparkSession) -> None:
    with pytest.raises(Exception, match=r"DLedger-mode store.*use format 'rocketmq'"):
        jvm.read.format(FORMAT).load(str(FIXTURES_MQ / "dledger-1node")).collect()
    with pytest.raises(Exception, match="not a RocketMQ message store"):
        jvm.read.format(FORMAT).load(str(FIXTURES_MQ)).collect()


def _damage_copy(tmp_path: Path, damage: Callable[[list[Path]], None]) -> Path:
    root = tmp_path / "store"
    shutil.copytree(CLASSIC, root)
    damage(sorted((root / "commitlog").iterdir()))
    return root


def _record_starts(path: Path) -> list[int]:
    """The record starts of one commit-log file, from its size fields."""
    data = path.read_bytes()
    out, at = [], 0
    while at + 8 <= len(data) and int.from_bytes(data[at + 4 : at + 8], "big") == 0xDAA320A7:
        out.append(at)
        at += int.from_bytes(data[at : at + 4], "big")
    return out


def _torn_last_record(files: list[Path]) -> None:
    """The last record half written: its second half zeros (the file keeps its size)."""
    last = files[-1]
    at = _record_starts(last)[-1]
    size = int.from_bytes(last.read_bytes()[at : at + 4], "big")
    with open(last, "r+b") as fh:
        fh.seek(at + size // 2)
        fh.write(bytes(size - size // 2))


def _bad_magic_mid_file(files: list[Path]) -> None:
    victim = files[len(files) // 2]
    starts = _record_starts(victim)
    with open(victim, "r+b") as fh:
        fh.seek(starts[len(starts) // 2] + 4)
        fh.write(b"\x00\x00\x00\x01")


@pytest.mark.parametrize("damage", [_torn_last_record, _bad_magic_mid_file])
def test_a_damaged_file_stops_where_the_python_format_stops(
    jvm: SparkSession, tmp_path: Path, damage: Callable[[list[Path]], None]
) -> None:
    root = _damage_copy(tmp_path, damage)
    got = sorted(r[0] for r in jvm.read.format(FORMAT).load(str(root)).select("commit_log_offset").collect())
    want = read_messages(root, columns=["commit_log_offset"]).column("commit_log_offset").to_pylist()
    everything = [int(line.split("\t", 1)[0]) for line in expected(CLASSIC.name, "messages.tsv")]
    assert got == sorted(want) and 0 < len(got) < len(everything)


def test_a_file_of_another_size_is_refused_as_by_the_python_format(jvm: SparkSession, tmp_path: Path) -> None:
    """A commit-log file cut short: MappedFileQueue.load refuses the store, and so do both formats."""

    def cut(files: list[Path]) -> None:
        with open(files[-1], "r+b") as fh:
            fh.truncate(476)

    root = _damage_copy(tmp_path, cut)
    register(jvm)
    for fmt in ("rocketmq", FORMAT):
        with pytest.raises(Exception, match="mixed sizes"):
            jvm.read.format(fmt).load(str(root)).count()
