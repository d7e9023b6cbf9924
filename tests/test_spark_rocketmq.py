"""The ``rocketmq`` Spark format on a real local SparkSession: the Java-written fixtures read as
their expected listings, pushdown prunes queues and stays exact, Kafka-style offsets; a stream
over a store a live group is writing sees every message once, in queue order, and resumes from
its checkpoint; the sink produces to a running group and fails with RocketMQ's status names."""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from dledger.rocketmq import read_messages
from dledger.rocketmq.client.producer import Producer
from dledger.rocketmq.store.message import Message
from dledger.spark import register
from dledger.testing import FAST, TestCluster
from tests.rocketmq.test_arrow_reader import FIXTURES_MQ, NAMES, expected, line_of, split_expected
from tests.test_spark import spark  # noqa: F401  (the session fixture)

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

PUSHDOWN = "spark.sql.python.filterPushdown.enabled"
# Store times as ms since the epoch, whatever the session's time zone.
ROWS = [
    "*",
    "unix_millis(born_timestamp) AS born_ms",
    "unix_millis(store_timestamp) AS store_ms",
]


@pytest.fixture
def rmq(spark: SparkSession) -> Iterator[SparkSession]:  # noqa: F811
    register(spark)  # both formats, and pushdown on
    try:
        yield spark
    finally:
        spark.conf.set(PUSHDOWN, "false")


def rows_of(df: DataFrame) -> list[dict[str, Any]]:
    out = []
    for r in df.selectExpr(*ROWS).collect():
        d = r.asDict()
        d["born_timestamp"], d["store_timestamp"] = d.pop("born_ms"), d.pop("store_ms")
        out.append(d)
    return out


@pytest.mark.parametrize("name", NAMES)
def test_fixture_walk_and_queues_read_as_java_listed(rmq: SparkSession, name: str) -> None:
    root = str(FIXTURES_MQ / name)
    df = rmq.read.format("rocketmq").load(root)
    files = list((FIXTURES_MQ / name).glob("commitlog/*")) or list((FIXTURES_MQ / name).glob("dledger-n0/data/*"))
    assert df.rdd.getNumPartitions() == len(files) > 5  # one partition per commit-log file
    got = sorted((line_of(r) for r in rows_of(df)), key=lambda lp: int(lp[0].split("\t", 1)[0]))
    assert got == [split_expected(line) for line in expected(name, "messages.tsv")]
    # By topic: one partition per queue, rows as consumequeue.tsv lists the units.
    units = [line.split("\t") for line in expected(name, "consumequeue.tsv")]
    topics = ["TopicA", "TopicB", "TopicC_longer.name-01"]
    by_queue = rmq.read.format("rocketmq").option("topics", ",".join(topics)).load(root)
    queues = {(u[0], u[1]) for u in units if u[0] in topics}
    assert by_queue.rdd.getNumPartitions() == len(queues)
    rows = by_queue.select("topic", "queue_id", "queue_offset", "commit_log_offset", "size").collect()
    assert sorted(tuple(r) for r in rows) == sorted(
        (u[0], int(u[1]), int(u[2]), int(u[3]), int(u[4])) for u in units if u[0] in topics
    )


@pytest.mark.parametrize("cut", ["maxPartitionBytes", "minPartitions"])
@pytest.mark.parametrize("name", NAMES)
def test_walk_in_pieces_reads_every_record_once(rmq: SparkSession, name: str, cut: str) -> None:
    """``maxPartitionBytes``, or ``minPartitions`` above the number of files, cuts a classic
    commit-log file into partitions at record starts: the rows are still the Java listing, each
    record once. A DLedger log keeps one per file."""
    root = str(FIXTURES_MQ / name)
    files = list((FIXTURES_MQ / name).glob("commitlog/*")) or list((FIXTURES_MQ / name).glob("dledger-n0/data/*"))
    value = "1000" if cut == "maxPartitionBytes" else str(4 * len(files))
    df = rmq.read.format("rocketmq").option(cut, value).load(root)
    if name.startswith("classic"):
        assert df.rdd.getNumPartitions() > 2 * len(files)
    else:
        assert df.rdd.getNumPartitions() == len(files)
    got = sorted((line_of(r) for r in rows_of(df)), key=lambda lp: int(lp[0].split("\t", 1)[0]))
    assert got == [split_expected(line) for line in expected(name, "messages.tsv")]


@pytest.mark.parametrize("name", NAMES)
def test_columns_option_reads_only_those_columns(rmq: SparkSession, name: str) -> None:
    root = FIXTURES_MQ / name
    cols = ["msg_id", "tags", "properties", "queue_id"]
    df = rmq.read.format("rocketmq").option("columns", ",".join(cols)).option("topics", "TopicA").load(str(root))
    assert df.columns == cols
    want = read_messages(root, topics="TopicA", columns=cols).to_pylist()
    assert [{**r.asDict(), "properties": sorted(r["properties"].items())} for r in df.collect()] == [
        {**w, "properties": sorted(w["properties"])} for w in want
    ]
    with pytest.raises(Exception, match="unknown column"):
        rmq.read.format("rocketmq").option("columns", "topic,nope").load(str(root)).collect()


def test_pushdown_prunes_queues_and_offsets_exactly(rmq: SparkSession) -> None:
    root = str(FIXTURES_MQ / "classic-3topics")
    table = read_messages(root, topics=["TopicA", "TopicB"], columns=["topic", "queue_id", "queue_offset"])
    everything = [tuple(r.values()) for r in table.to_pylist()]
    base = rmq.read.format("rocketmq").option("topics", "TopicA,TopicB").load(root)
    q = base.where("topic = 'TopicA' AND queue_id IN (1, 2) AND queue_offset BETWEEN 3 AND 7")
    assert q.rdd.getNumPartitions() == 2
    want = sorted(r for r in everything if r[0] == "TopicA" and r[1] in (1, 2) and 3 <= r[2] <= 7)
    assert sorted(tuple(r) for r in q.select("topic", "queue_id", "queue_offset").collect()) == want
    # A store-time range becomes a queue-offset range per queue (binary search), exact at the edges.
    stamps = read_messages(root, topics="TopicB", columns=["queue_id", "queue_offset", "store_timestamp"])
    ms = [(r["queue_id"], r["queue_offset"], int(r["store_timestamp"].timestamp() * 1000)) for r in stamps.to_pylist()]
    lo, hi = sorted(t for _, _, t in ms)[len(ms) // 4], sorted(t for _, _, t in ms)[len(ms) // 2]
    timed = base.where(f"topic = 'TopicB' AND unix_millis(store_timestamp) >= {lo}").where(
        f"store_timestamp <= timestamp_millis({hi})"
    )
    got = sorted((r.queue_id, r.queue_offset) for r in timed.select("queue_id", "queue_offset").collect())
    assert got == sorted((q_, o) for q_, o, t in ms if lo <= t <= hi)
    # A walk keeps records no queue holds: a topic filter there drops rows, it does not switch to the queues.
    walk = rmq.read.format("rocketmq").load(root).where("topic = 'TopicC_longer.name-01'")
    walked = walk.select("sys_flag").collect()
    queued = read_messages(root, topics="TopicC_longer.name-01", columns=["sys_flag"])
    assert len(walked) == queued.num_rows + 3  # 2 PREPARED and 1 ROLLBACK records have no unit
    # Nothing can match: nothing is planned.
    assert base.where("queue_offset > 5 AND queue_offset < 3").rdd.getNumPartitions() <= 1
    assert base.where("queue_offset > 5 AND queue_offset < 3").count() == 0


def test_starting_and_ending_offsets_and_timestamp(rmq: SparkSession) -> None:
    root = str(FIXTURES_MQ / "dledger-1node")
    units = [line.split("\t") for line in expected("dledger-1node", "consumequeue.tsv")]
    total = {q: sum(1 for u in units if u[0] == "TopicA" and int(u[1]) == q) for q in range(4)}
    df = (
        rmq.read.format("rocketmq")
        .option("topics", "TopicA")
        .option("startingOffsets", '{"TopicA": {"0": 5, "1": -1, "2": -2}}')
        .option("endingOffsets", '{"TopicA": {"0": 9, "3": 2}}')
        .load(root)
    )
    counts = {r.queue_id: r["count"] for r in df.groupBy("queue_id").count().collect()}
    assert counts == {0: 4, 2: total[2], 3: 2}
    offsets0 = sorted(r.queue_offset for r in df.where("queue_id = 0").select("queue_offset").collect())
    assert offsets0 == [5, 6, 7, 8]
    # startingTimestamp: each queue from its first message stored at or after it.
    stamps = read_messages(root, topics="TopicA", queues=[1], columns=["store_timestamp"])
    ts = [int(v.timestamp() * 1000) for v in stamps.column("store_timestamp").to_pylist()]
    cut = ts[len(ts) // 2]
    later = rmq.read.format("rocketmq").options(topics="TopicA", queues="1", startingTimestamp=str(cut)).load(root)
    assert later.count() == sum(1 for t in ts if t >= cut)
    with pytest.raises(Exception, match="unknown option"):
        rmq.read.format("rocketmq").option("startingOffset", "earliest").load(root).count()
    with pytest.raises(Exception, match="not a RocketMQ message store"):
        rmq.read.format("rocketmq").load(str(FIXTURES_MQ)).count()


def test_decompress_option(rmq: SparkSession) -> None:
    root = str(FIXTURES_MQ / "classic-3topics")
    raw = rmq.read.format("rocketmq").load(root).where("sys_flag & 1 = 1")
    inflated = rmq.read.format("rocketmq").option("decompress", "true").load(root).where("sys_flag & 1 = 1")
    want = read_messages(root, columns=["commit_log_offset", "body"], decompress=True).to_pylist()
    by_off = {r["commit_log_offset"]: r["body"] for r in want}
    rows = inflated.select("commit_log_offset", "body").collect()
    assert len(rows) == raw.count() > 5
    assert all(bytes(r.body) == by_off[r.commit_log_offset] for r in rows)
    stored = {r.commit_log_offset: bytes(r.body) for r in raw.select("commit_log_offset", "body").collect()}
    assert all(bytes(r.body) == zlib.decompress(stored[r.commit_log_offset]) for r in rows)


# -- a live group --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestCluster]:
    cluster = TestCluster(
        tmp_path_factory.mktemp("rmq-spark"),
        size=1,
        member_dirs=True,
        proxied=False,
        extra=[
            *FAST,
            "--message-store",
            "--default-topic-queue-nums",
            "4",
            "--mapped-file-size-for-entry-data",
            str(1 << 20),
        ],
    )
    with cluster.running() as c:
        yield c


def produce(
    peers: str, topic: str, n: int, queues: tuple[int, ...], tag: str, stop: threading.Event | None = None
) -> None:
    with Producer(peers) as p:
        for k in range(0, n, 10):
            for q in queues:
                rs = p.send_batch([Message(topic, f"{tag}-{q}-{k + i}".encode()) for i in range(10)], q)
                assert rs.ok, rs[0].reason
            if stop is not None and stop.is_set():
                return


def wait_readable(root: Path, topic: str, n: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if read_messages(root, topics=topic, columns=["queue_id"]).num_rows >= n:
                return
        except FileNotFoundError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{topic}: fewer than {n} messages readable after {timeout} s")


def in_queue_order_once(rows: list[Any]) -> dict[int, list[int]]:
    """Each queue's offsets as the stream delivered them; they must run 0, 1, 2, ... once."""
    per: dict[int, list[int]] = {}
    for r in rows:
        per.setdefault(r.queue_id, []).append(r.queue_offset)
    for offs in per.values():
        assert offs == list(range(len(offs)))
    return per


def test_stream_over_a_store_being_written(rmq: SparkSession, group: TestCluster, tmp_path: Path) -> None:
    root = group.store_dir("n0")
    produce(group.peers, "Live", 20, (0, 1), "pre")  # the queues exist before the stream starts
    wait_readable(root, "Live", 40)
    seen: list[Any] = []

    def collect(batch: DataFrame, _batch_id: int) -> None:
        # Rows in the order each partition gave them (one partition per queue).
        seen.extend(batch.select("queue_id", "queue_offset", "body").collect())

    query = (
        rmq.readStream.format("rocketmq")
        .options(topics="Live", maxOffsetsPerTrigger="150")
        .load(str(root))
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 120
        while len(seen) < 40 and time.monotonic() < deadline:  # the stream is under way ...
            time.sleep(0.2)
        assert len(seen) == 40
        produce(group.peers, "Live", 400, (0, 1, 2), "live")  # ... when queue 2 appears
        wait_readable(root, "Live", 40 + 1200)
        deadline = time.monotonic() + 240
        while len(seen) < 1240 and time.monotonic() < deadline:
            time.sleep(0.5)
            assert query.exception() is None
    finally:
        query.stop()
    per = in_queue_order_once(seen)
    assert {q: len(v) for q, v in per.items()} == {0: 420, 1: 420, 2: 400}
    assert all(r.body.decode().split("-")[1] == str(r.queue_id) for r in seen)
    # maxOffsetsPerTrigger held every micro-batch to 150 messages at most.
    assert all(p["numInputRows"] <= 150 for p in query.recentProgress)


def test_stream_restarts_from_its_checkpoint(rmq: SparkSession, group: TestCluster, tmp_path: Path) -> None:
    root = group.store_dir("n0")
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    def run_once() -> None:
        q = (
            rmq.readStream.format("rocketmq")
            .options(topics="Resume")
            .load(str(root))
            .select("queue_id", "queue_offset", "body")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(300)
        assert q.exception() is None

    produce(group.peers, "Resume", 50, (0,), "a")
    wait_readable(root, "Resume", 50)
    run_once()
    produce(group.peers, "Resume", 30, (0, 3), "b")
    wait_readable(root, "Resume", 110)
    run_once()
    run_once()  # nothing new: reads nothing
    rows = sorted(rmq.read.parquet(str(out)).collect(), key=lambda r: (r.queue_id, r.queue_offset))
    per: dict[int, list[int]] = {}
    for r in rows:
        per.setdefault(r.queue_id, []).append(r.queue_offset)
    assert per == {0: list(range(80)), 3: list(range(30))}


def test_sink_batch_and_stream(rmq: SparkSession, group: TestCluster) -> None:
    root = group.store_dir("n0")
    rows = [(f"sink-{i}".encode(), i % 2, f"t{i % 3}", f"k{i}", {"p": str(i)}) for i in range(300)]
    df = rmq.createDataFrame(rows, "body binary, queue_id int, tags string, keys string, properties map<string,string>")
    df.repartition(3).write.format("rocketmq").mode("append").option("peers", group.peers).option(
        "topic", "SinkT"
    ).save()
    wait_readable(root, "SinkT", 300)
    got = read_messages(root, topics="SinkT").to_pylist()
    assert len(got) == 300
    by_body = {r["body"]: r for r in got}
    for body, qid, tags, keys, props in rows:
        r = by_body[body]
        assert (r["queue_id"], r["tags"], r["keys"], dict(r["properties"])["p"]) == (qid, tags, keys, props["p"])
    # A refused message fails the task with RocketMQ's status name.
    bad = rmq.createDataFrame([(b"",)], "body binary")
    with pytest.raises(Exception, match="MESSAGE_ILLEGAL"):
        bad.write.format("rocketmq").mode("append").option("peers", group.peers).option("topic", "SinkT").save()
    # Streaming: a fixture's topic copied into the group, message by message.
    fixture = str(FIXTURES_MQ / "classic-3topics")
    q = (
        rmq.readStream.format("rocketmq")
        .options(topics="TopicA", queues="0")
        .load(fixture)
        .where("length(body) > 0")  # RocketMQ's client refuses empty bodies; the fixture has some
        .selectExpr("topic", "body", "tags")
        .writeStream.format("rocketmq")
        .option("peers", group.peers)
        .option("checkpointLocation", str(group.root / "sink-ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(300)
    assert q.exception() is None
    want = [
        b for b in read_messages(fixture, topics="TopicA", queues=[0], columns=["body"]).column("body").to_pylist() if b
    ]
    wait_readable(root, "TopicA", len(want))
    copied = read_messages(root, topics="TopicA", columns=["body"]).column("body").to_pylist()
    assert sorted(copied) == sorted(want)
