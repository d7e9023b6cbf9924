"""``df.write.format("rocketmq")`` and ``df.writeStream.format("rocketmq")``: rows produced to a
running message-store group through the batch client.

Rows need ``body`` (binary or string); ``topic``, ``queue_id``, ``tags``, ``keys`` (a string,
space-separated as RocketMQ's KEYS, or an array of strings) and ``properties``
(map<string,string>) are optional. Options: ``peers`` (required, ``"n0-host:port;..."``),
``topic`` (for rows without one), ``group`` (the DLedger group) and ``batchSize`` (messages
per request, at most). Each task sends its rows in chunks of consecutive rows of one topic
and queue, one batched request per chunk (the client splits what one request cannot hold);
a row without ``queue_id`` goes to the queue the producer picks for its chunk. A chunk the
group refuses fails the task with RocketMQ's status name (MESSAGE_ILLEGAL,
SERVICE_NOT_AVAILABLE, ...) and why. Delivery is at least once: a retried task, or a
restarted stream, sends its rows again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from dledger.errors import DLedgerError
from dledger.rocketmq.client.producer import Producer
from dledger.rocketmq.store.message import Message
from dledger.spark.options import error, int_option, known_options

log = logging.getLogger(__name__)

# The most messages one request carries (the client splits bigger batches in order anyway).
DEFAULT_BATCH = 1024
# Spark hands a streaming sink its checkpointLocation among the options.
_OPTIONS = {k.lower(): k for k in ("peers", "topic", "group", "batchSize", "path", "checkpointLocation")}
_COLUMNS = ("body", "topic", "queue_id", "tags", "keys", "properties")


class SendFailed(RuntimeError):
    """A chunk the group refused: the message names RocketMQ's status."""


@dataclass
class SinkCommit(WriterCommitMessage):
    sent: int


@dataclass(frozen=True, slots=True)
class SinkOptions:
    peers: str
    topic: str | None
    group: str | None
    batch_size: int

    @classmethod
    def parse(cls, options: Mapping[str, str], schema: StructType) -> SinkOptions:
        given = known_options(options, _OPTIONS, "the rocketmq sink", ("path", "checkpointLocation"))
        if not given.get("peers"):
            raise error('the rocketmq sink needs option peers ("n0-host:port;n1-host:port;...")')
        names = set(schema.names)
        if "body" not in names:
            raise error(f"the rocketmq sink needs a body column; got {', '.join(schema.names)}")
        extra = sorted(names - set(_COLUMNS))
        if extra:
            raise error(f"columns {', '.join(extra)} are not message fields; the sink takes {', '.join(_COLUMNS)}")
        if "topic" not in names and not given.get("topic"):
            raise error("no topic: give option topic or a topic column")
        return cls(
            peers=str(given["peers"]),
            topic=given.get("topic") or None,
            group=given.get("group") or None,
            batch_size=int_option("batchSize", given.get("batchsize"), 1) or DEFAULT_BATCH,
        )


def _keys(value: Any) -> list[str] | str | None:
    if value is None or isinstance(value, str):
        return value
    return [str(k) for k in value]


def _messages(batch: pa.RecordBatch, default_topic: str | None) -> Iterator[tuple[str, int | None, list[Message]]]:
    """Consecutive rows of one topic and queue as ``(topic, queue id or None, messages)``."""
    cols = {name: batch.column(name).to_pylist() for name in batch.schema.names}
    n = batch.num_rows
    bodies = cols["body"]
    topics = cols.get("topic") or [None] * n
    queues = cols.get("queue_id") or [None] * n
    tags = cols.get("tags") or [None] * n
    keys = cols.get("keys") or [None] * n
    props = cols.get("properties") or [None] * n
    run: list[Message] = []
    run_key: tuple[str, int | None] | None = None
    for i in range(n):
        topic = topics[i] or default_topic
        if topic is None:
            raise SendFailed(f"row {i} has no topic and the sink has no topic option")
        body = bodies[i]
        if body is None:
            raise SendFailed(f"row {i} of topic {topic} has a null body")
        key = (topic, queues[i])
        if key != run_key and run:
            assert run_key is not None
            yield run_key[0], run_key[1], run
            run = []
        run_key = key
        p = props[i]
        run.append(
            Message(
                topic,
                body.encode() if isinstance(body, str) else bytes(body),
                tags=tags[i],
                keys=_keys(keys[i]),
                properties=dict(p) if p else {},
            )
        )
    if run:
        assert run_key is not None
        yield run_key[0], run_key[1], run


def send_rows(producer: Producer, batches: Iterator[pa.RecordBatch], opts: SinkOptions) -> int:
    """Send every row of ``batches``; returns how many were sent, raises SendFailed."""
    sent = 0
    for batch in batches:
        for topic, queue_id, msgs in _messages(batch, opts.topic):
            for at in range(0, len(msgs), opts.batch_size):
                chunk = msgs[at : at + opts.batch_size]
                try:
                    results = producer.send_batch(chunk, queue_id)
                except DLedgerError as exc:
                    raise SendFailed(f"{topic}/{queue_id}: {len(chunk)} messages not sent: {exc}") from exc
                if not results.ok:
                    failed = [r for r in results if not r.ok]
                    first = failed[0]
                    raise SendFailed(
                        f"{topic}/{queue_id}: {len(failed)} of {len(chunk)} messages not sent: "
                        f"{first.status}{': ' + first.reason if first.reason else ''}"
                    )
                sent += len(chunk)
    return sent


class _Writer:
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.opts = SinkOptions.parse(options, schema)

    def _write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        with Producer(self.opts.peers, self.opts.group) as producer:
            return SinkCommit(send_rows(producer, iterator, self.opts))


class MessageWriter(_Writer, DataSourceArrowWriter):
    """The batch sink: each task produces its partition's rows."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        return self._write(iterator)

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        log.info("rocketmq sink: %d messages sent", sum(getattr(m, "sent", 0) for m in messages))


class MessageStreamWriter(_Writer, DataSourceStreamArrowWriter):
    """The streaming sink: each micro-batch's tasks produce their rows."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        return self._write(iterator)

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        log.info(
            "rocketmq sink: micro-batch %d, %d messages sent", batchId, sum(getattr(m, "sent", 0) for m in messages)
        )

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("rocketmq sink: micro-batch %d failed; what its tasks sent stays sent", batchId)
