"""``spark.read.format("rocketmq")``: a RocketMQ message store on disk as a table of messages.

Shaped like Spark's Kafka source. With ``topics`` (comma-separated) the read goes through the
consume queues, one partition per (topic, queue); without, it walks the commit log: a classic
log one partition per file, or pieces of about ``maxPartitionBytes`` cut at record starts, each
read by mapping its file alone; a DLedger log one partition per file. Filters on ``topic``,
``queue_id``, ``queue_offset`` and ``store_timestamp`` are pushed down
(``dledger.spark.register`` turns Spark's pushdown on): on a queue read they narrow the queues
and each queue's offset range (a store-time bound by a binary search on the queue), on a walk
they drop rows before Spark sees them; either way the result is exact. Batches come from
:mod:`dledger.rocketmq.store.arrow_reader` (no row tuples).

Options (case-insensitive): ``topics``, ``queues`` (queue ids, comma-separated),
``startingOffsets`` / ``endingOffsets`` (``earliest``, ``latest`` or JSON ``{"TopicA": {"0": 10,
"1": -2}}``, -2 earliest, -1 latest; end exclusive), ``startingTimestamp`` (ms since the epoch:
each queue starts at its first message stored at or after it), ``committedOnly`` (default true),
``decompress`` (inflate COMPRESSED_FLAG bodies), ``batchSize``, ``columns`` (comma-separated:
the table has only these columns, and only these are computed; Python data sources get no column
pruning from Spark, so this, or a schema given with ``.schema(...)``, is how a read skips the
columns it does not need) and, for ``spark.readStream``, ``maxOffsetsPerTrigger``;
``maxPartitionBytes`` and ``minPartitions`` (Kafka's name: a walk of fewer commit-log files cut
into this many pieces of about equal bytes, so that a log of one file is not read by one core;
default 1) for a walk. The streaming offset is ``{topic: {queue id: next offset}}``;
new queues (and, without ``topics``, new topics) are read from their earliest offset.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    EqualNullSafe,
    EqualTo,
    Filter,
    In,
    InputPartition,
    IsNotNull,
)
from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from dledger.rocketmq.store.arrow_reader import (
    COLUMNS,
    NULLABLE,
    TYPES,
    LogFile,
    LogRange,
    QueueFiles,
    QueueRange,
    ReadArgs,
    RowFilter,
    log_file_of,
    log_ranges,
    offset_for_timestamp,
    open_store,
    queue_bounds,
    queue_files_of,
    queue_ranges,
    read_log_file,
    read_queue_files,
    read_range,
    split_log_range,
    topics_of,
)
from dledger.spark.options import (
    SupportsTriggerAvailableNow,
    bool_option,
    bounds,
    called_for_pushdown,
    columns_of,
    default_read_limit,
    error,
    int_option,
    known_options,
    read_budget,
)

log = logging.getLogger(__name__)

SPARK_BATCH_ROWS = 8192
# A walk's partitions: 0 keeps one per commit-log file. Cutting 10 M messages into 128 MB pieces
# (19 tasks) ran slower on 2 cores than 3 whole files (docs/spark.md); the option is for more cores.
MAX_PARTITION_BYTES = 0
# A walk of fewer files than this is cut into this many pieces. Not the cores by default: on the
# shared 2-core machine 2 pieces of a one-file log were not measurably faster (docs/spark.md).
MIN_PARTITIONS = 1

SPARK_TYPES: dict[str, DataType] = {
    "topic": StringType(),
    "queue_id": IntegerType(),
    "queue_offset": LongType(),
    "commit_log_offset": LongType(),
    "size": IntegerType(),
    "msg_id": StringType(),
    "tags": StringType(),
    "keys": StringType(),
    "properties": MapType(StringType(), StringType(), valueContainsNull=False),
    "body": BinaryType(),
    "body_crc": IntegerType(),
    "flag": IntegerType(),
    "sys_flag": IntegerType(),
    "born_timestamp": TimestampType(),
    "store_timestamp": TimestampType(),
    "born_host": StringType(),
    "store_host": StringType(),
    "reconsume_times": IntegerType(),
    "prepared_transaction_offset": LongType(),
}
# Spark reads TimestampType from Arrow as microseconds with a time zone.
_SPARK_TIMESTAMP = pa.timestamp("us", tz="UTC")

_OPTIONS = {
    k.lower(): k
    for k in (
        "path",
        "topics",
        "queues",
        "startingOffsets",
        "endingOffsets",
        "startingTimestamp",
        "committedOnly",
        "decompress",
        "batchSize",
        "maxOffsetsPerTrigger",
        "columns",
        "maxPartitionBytes",
        "minPartitions",
    )
}

Offsets = dict[str, dict[str, int]]


def spark_schema(columns: Iterable[str] = COLUMNS) -> StructType:
    return StructType([StructField(c, SPARK_TYPES[c], nullable=c in NULLABLE) for c in columns])


def _offsets_option(name: str, raw: str | None) -> int | dict[str, dict[str, int]] | None:
    if raw is None or raw.strip() == "":
        return None
    text = raw.strip()
    if text.lower() == "earliest":
        return -2
    if text.lower() == "latest":
        return -1
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise error(f'option {name}: earliest, latest or JSON like {{"TopicA": {{"0": 10}}}}, not {raw!r}') from exc
    if not isinstance(parsed, dict) or not all(isinstance(v, dict) for v in parsed.values()):
        raise error(f"option {name}: JSON must map topics to {{queue id: offset}}, not {raw!r}")
    out: dict[str, dict[str, int]] = {}
    for topic, queues in parsed.items():
        out[str(topic)] = {}
        for qid, off in queues.items():
            if not isinstance(off, int) or isinstance(off, bool) or off < -2:
                raise error(f"option {name}: offset of {topic}/{qid} must be an integer >= -2, not {off!r}")
            out[str(topic)][str(int(qid))] = off
    return out


def _columns_option(raw: str | None) -> tuple[str, ...]:
    columns = tuple(dict.fromkeys(c.strip() for c in str(raw or "").split(",") if c.strip())) or COLUMNS
    unknown = [c for c in columns if c not in SPARK_TYPES]
    if unknown:
        raise error(f"option columns: unknown column(s) {', '.join(unknown)}; columns are {', '.join(COLUMNS)}")
    return columns


@dataclass(frozen=True, slots=True)
class MessageOptions:
    """The ``rocketmq`` format's options, parsed and checked once when the source is made."""

    path: str
    topics: tuple[str, ...] | None = None
    queues: tuple[int, ...] | None = None
    starting: int | dict[str, dict[str, int]] | None = None
    ending: int | dict[str, dict[str, int]] | None = None
    starting_timestamp: int | None = None
    committed_only: bool = True
    decompress: bool = False
    batch_size: int = SPARK_BATCH_ROWS
    max_offsets_per_trigger: int | None = None
    columns: tuple[str, ...] = COLUMNS
    max_partition_bytes: int = MAX_PARTITION_BYTES
    min_partitions: int = MIN_PARTITIONS

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> MessageOptions:
        given = known_options(options, _OPTIONS, "format rocketmq", ("path",))
        path = given.get("path")
        if not path:
            raise error("no path: use spark.read.format('rocketmq').load('<store root directory>')")
        topics = tuple(t.strip() for t in str(given.get("topics") or "").split(",") if t.strip()) or None
        try:
            queues = tuple(int(q) for q in str(given.get("queues") or "").split(",") if q.strip()) or None
        except ValueError as exc:
            raise error(f"option queues={given['queues']!r}: queue ids, comma-separated") from exc
        batch = int_option("batchSize", given.get("batchsize"), 1)
        return cls(
            path=str(path),
            topics=topics,
            queues=queues,
            starting=_offsets_option("startingOffsets", given.get("startingoffsets")),
            ending=_offsets_option("endingOffsets", given.get("endingoffsets")),
            starting_timestamp=int_option("startingTimestamp", given.get("startingtimestamp"), 0),
            committed_only=bool_option("committedOnly", given.get("committedonly"), True),
            decompress=bool_option("decompress", given.get("decompress"), False),
            batch_size=SPARK_BATCH_ROWS if batch is None else batch,
            max_offsets_per_trigger=int_option("maxOffsetsPerTrigger", given.get("maxoffsetspertrigger"), 1),
            columns=_columns_option(given.get("columns")),
            max_partition_bytes=int_option("maxPartitionBytes", given.get("maxpartitionbytes"), 0)
            or MAX_PARTITION_BYTES,
            min_partitions=int_option("minPartitions", given.get("minpartitions"), 1) or MIN_PARTITIONS,
        )

    @property
    def by_queue(self) -> bool:
        return self.topics is not None or self.queues is not None


class MessagePartition(InputPartition):
    """One Spark partition: a queue range or a commit-log file range, and the rows it keeps."""

    def __init__(
        self, rng: QueueRange | LogRange, rows: RowFilter | None = None, file: LogFile | QueueFiles | None = None
    ) -> None:
        super().__init__(rng)
        self.rng = rng
        self.rows = rows or RowFilter()
        self.file = file

    def __repr__(self) -> str:
        return f"MessagePartition({self.rng})"


def _spark_arrow(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark reads ``schema`` from (its checks compare nullability too)."""
    fields = []
    for f in schema.fields:
        typ = TYPES[f.name]
        if pa.types.is_timestamp(typ):
            typ = _SPARK_TIMESTAMP
        elif pa.types.is_map(typ):
            typ = pa.map_(pa.string(), pa.field("value", pa.string(), nullable=False))
        fields.append(pa.field(f.name, typ, nullable=f.nullable))
    return pa.schema(fields)


def _to_millis(value: Any) -> int | None:
    """A pushed-down literal of store_timestamp as ms since the epoch (Spark hands timestamps
    over as naive local datetimes)."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.astimezone()  # local, as Spark converted it
        return int(value.astimezone(timezone.utc).timestamp() * 1000)
    return None


class RocketMQDataSource(DataSource):
    """``spark.dataSource.register(RocketMQDataSource)``, then ``spark.read.format("rocketmq")``."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.options = options

    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    def schema(self) -> StructType:
        # Python data sources get no column pruning from Spark (pyspark 4.3): the ``columns``
        # option (or a user-given schema) is how a read asks for fewer columns.
        raw = {str(k).lower(): v for k, v in self.options.items()}.get("columns")
        return spark_schema(_columns_option(raw))

    def _read_options(self) -> MessageOptions:
        opts = MessageOptions.parse(self.options)
        root = Path(opts.path)
        if not root.is_dir():
            raise error(f"{root}: no such file or directory")
        if not ((root / "commitlog").is_dir() or any((p / "data").is_dir() for p in root.glob("dledger-*"))):
            raise error(f"{root} is not a RocketMQ message store (no commitlog/ or dledger-<id>/)")
        return opts

    def reader(self, schema: StructType) -> DataSourceReader:
        cls = MessagePushdownReader if called_for_pushdown() else MessageReader
        return cls(self._read_options(), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return MessageStreamReader(self._read_options(), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from dledger.spark.rocketmq_sink import MessageWriter

        return MessageWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from dledger.spark.rocketmq_sink import MessageStreamWriter

        return MessageStreamWriter(self.options, schema)


class _ReadMixin:
    opts: MessageOptions
    args: ReadArgs
    arrow: pa.Schema

    def _setup(self, opts: MessageOptions, schema: StructType) -> None:
        self.opts = opts
        self.args = ReadArgs(
            columns_of(schema, SPARK_TYPES, "rocketmq"), opts.batch_size, opts.decompress, opts.committed_only
        )
        self.arrow = _spark_arrow(schema)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        rng = getattr(partition, "rng", None)
        if rng is None:  # Spark's placeholder partition of an empty read
            return
        args = replace(self.args, rows=getattr(partition, "rows", RowFilter()))
        file = getattr(partition, "file", None)
        if isinstance(file, LogFile) and isinstance(rng, LogRange):
            yield from self._spark_batches(read_log_file(file, rng, args))
            return
        if isinstance(file, QueueFiles) and isinstance(rng, QueueRange):
            yield from self._spark_batches(read_queue_files(file, rng, args))
            return
        with open_store(self.opts.path) as store:
            yield from self._spark_batches(read_range(store, rng, args))

    def _spark_batches(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """``batches`` in Spark's Arrow types; a batch that has them already (no timestamp or
        map column) goes as it is, without a cast (which costs a pyarrow.compute call per
        batch and, once per worker, its import)."""
        for batch in batches:
            yield batch if batch.schema.equals(self.arrow) else batch.cast(self.arrow)


class MessageReader(_ReadMixin, DataSourceReader):
    """Batch reader: queue ranges or commit-log files as partitions, Arrow batches from each."""

    def __init__(self, opts: MessageOptions, schema: StructType) -> None:
        self._setup(opts, schema)
        self.topics: set[str] | None = set(opts.topics) if opts.topics else None
        self.queue_ids: set[int] | None = set(opts.queues) if opts.queues else None
        self.offset_min: int | None = None
        self.offset_max: int | None = None
        self.ts_min: int | None = None
        self.ts_max: int | None = None
        self.empty = False

    def _queue_partitions(self) -> list[InputPartition]:
        opts = self.opts
        out: list[InputPartition] = []
        with open_store(opts.path) as store:
            topics = sorted(self.topics) if self.topics is not None else None
            for rng in queue_ranges(store, topics, self.queue_ids, opts.starting, opts.ending):
                lo, hi = rng.start, rng.end
                if opts.starting_timestamp is not None:
                    lo = max(lo, offset_for_timestamp(store, rng.topic, rng.queue_id, opts.starting_timestamp))
                if self.offset_min is not None:
                    lo = max(lo, self.offset_min)
                if self.offset_max is not None:
                    hi = min(hi, self.offset_max + 1)
                if self.ts_min is not None:
                    lo = max(lo, offset_for_timestamp(store, rng.topic, rng.queue_id, self.ts_min))
                if self.ts_max is not None:
                    hi = min(hi, offset_for_timestamp(store, rng.topic, rng.queue_id, self.ts_max + 1))
                if lo < hi:
                    piece = QueueRange(rng.topic, rng.queue_id, lo, hi)
                    out.append(MessagePartition(piece, file=queue_files_of(store, piece)))
        return out

    def partitions(self) -> list[InputPartition]:
        if self.empty:
            return []
        if self.opts.by_queue or self.topics is not None or self.queue_ids is not None:
            return self._queue_partitions()
        if self.opts.starting_timestamp is not None:
            raise error("startingTimestamp needs topics (it is searched for in each consume queue)")
        start = self.opts.starting if isinstance(self.opts.starting, int) and self.opts.starting >= 0 else None
        end = self.opts.ending if isinstance(self.opts.ending, int) and self.opts.ending >= 0 else None
        rows = RowFilter(offset_min=self.offset_min, offset_max=self.offset_max, ts_min=self.ts_min, ts_max=self.ts_max)
        with open_store(self.opts.path) as store:
            ranges = log_ranges(store, start, end, self.opts.committed_only)
            piece = self.opts.max_partition_bytes or _piece_bytes(ranges, self.opts.min_partitions)
            return [
                MessagePartition(part, rows, log_file_of(store, part))
                for r in ranges
                for part in split_log_range(store, r, piece)
            ]


def _piece_bytes(ranges: list[LogRange], min_partitions: int) -> int:
    """The piece size that cuts ``ranges`` (one per file) into about ``min_partitions`` pieces,
    or 0 (one per file) when there are that many files already."""
    if len(ranges) >= min_partitions:
        return 0
    total = sum(r.end - r.start for r in ranges)
    return max(1, -(-total // min_partitions))


class MessagePushdownReader(MessageReader):
    """The batch reader plus filter pushdown on ``topic``, ``queue_id``, ``queue_offset`` and
    ``store_timestamp``. Comparisons and IN lists it can apply exactly are absorbed; a topic or
    queue filter turns a walk into a queue read only when the read was by queue already (a walk
    also gives records no queue holds), and stays with Spark otherwise."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        return [f for f in filters if not self._absorb(f)]

    def _narrow(self, low: str, high: str, lo: int | None, hi: int | None) -> None:
        """Intersect the range kept in attributes ``low``/``high`` with ``[lo, hi]``."""
        cur_lo, cur_hi = getattr(self, low), getattr(self, high)
        if lo is not None:
            cur_lo = lo if cur_lo is None else max(cur_lo, lo)
        if hi is not None:
            cur_hi = hi if cur_hi is None else min(cur_hi, hi)
        setattr(self, low, cur_lo)
        setattr(self, high, cur_hi)
        if cur_lo is not None and cur_hi is not None and cur_lo > cur_hi:
            self.empty = True

    def _absorb_set(self, column: str, values: list[Any]) -> bool:
        """A topic or queue-id set narrows a queue read (a walk leaves it to Spark)."""
        kind = str if column == "topic" else int
        if column not in ("topic", "queue_id") or not self.opts.by_queue:
            return False
        if not all(isinstance(v, kind) and not isinstance(v, bool) for v in values):
            return False
        attr = "topics" if column == "topic" else "queue_ids"
        have = getattr(self, attr)
        wanted = set(values) if have is None else have & set(values)
        setattr(self, attr, wanted)
        self.empty = self.empty or not wanted
        return True

    def _absorb(self, f: Filter) -> bool:
        attr = getattr(f, "attribute", None)
        if attr not in (("topic",), ("queue_id",), ("queue_offset",), ("store_timestamp",)):
            return False
        column = attr[0]
        if isinstance(f, IsNotNull):
            return True
        value: Any = getattr(f, "value", None)
        if isinstance(f, In):
            return self._absorb_set(column, list(value or ()))
        if isinstance(f, EqualTo | EqualNullSafe) and column in ("topic", "queue_id"):
            return self._absorb_set(column, [value])
        if column == "queue_offset":
            if not isinstance(value, int) or isinstance(value, bool):
                return False
            lo_hi = bounds(f, value)
            if lo_hi is None:
                return False
            self._narrow("offset_min", "offset_max", *lo_hi)
            return True
        if column == "store_timestamp":
            ms = _to_millis(value)
            if ms is None or value.microsecond % 1000:
                return False  # not a whole millisecond: Spark keeps the exact test
            lo_hi = bounds(f, ms)
            if lo_hi is None:
                return False
            self._narrow("ts_min", "ts_max", *lo_hi)
            return True
        return False


class MessageStreamReader(_ReadMixin, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Streaming reader over consume queues. The offset is ``{topic: {queue id: next offset}}``;
    a micro-batch reads each queue from the previous offset to what is readable now (committed
    and dispatched), at most ``maxOffsetsPerTrigger`` messages in all."""

    def __init__(self, opts: MessageOptions, schema: StructType) -> None:
        self._setup(opts, schema)
        self._target: Offsets | None = None
        # Each queue's files as the last look at the store found them: a micro-batch's
        # partitions map those alone instead of opening the store (ends never pass that look).
        self._files: dict[tuple[str, int], QueueFiles] = {}
        self._earliests: dict[tuple[str, int], int] = {}

    def _queues(self, store: Any) -> Iterator[tuple[str, int]]:
        wanted = set(self.opts.queues) if self.opts.queues else None
        for topic in topics_of(store, self.opts.topics):
            for qid in store.consume_queues.queue_ids(topic):
                if wanted is None or qid in wanted:
                    yield topic, qid

    def _latest(self) -> Offsets:
        out: Offsets = {}
        with open_store(self.opts.path) as store:
            for topic, qid in self._queues(store):
                earliest, end = queue_bounds(store, topic, qid)
                self._earliests[(topic, qid)] = earliest
                out.setdefault(topic, {})[str(qid)] = end
                files = queue_files_of(store, QueueRange(topic, qid, end, end))
                if files is not None:
                    self._files[(topic, qid)] = files
        return out

    def initialOffset(self) -> Offsets:
        opts = self.opts
        out: Offsets = {}
        with open_store(opts.path) as store:
            ranges = queue_ranges(store, opts.topics, opts.queues, opts.starting if opts.starting is not None else -2)
            for rng in ranges:
                start = rng.start
                if opts.starting_timestamp is not None:
                    start = max(start, offset_for_timestamp(store, rng.topic, rng.queue_id, opts.starting_timestamp))
                out.setdefault(rng.topic, {})[str(rng.queue_id)] = start
        return out

    def latestOffset(self, start: Offsets | None = None, limit: Any = None) -> Offsets:
        latest = self._target if self._target is not None else self._latest()
        start = start or {}
        budget = read_budget(limit)
        out: Offsets = {}
        for topic in sorted(set(latest) | set(start)):
            have, now = start.get(topic, {}), latest.get(topic, {})
            for qid in sorted(set(have) | set(now), key=int):
                begin = int(have.get(qid, -1))
                end = int(now.get(qid, begin))
                if begin < 0:  # a queue that appeared since: from its earliest
                    begin = self._earliest(topic, int(qid))
                end = max(begin, end)
                if budget is not None:
                    end = min(end, begin + budget)
                    budget -= end - begin
                out.setdefault(topic, {})[qid] = end
        return out

    def _earliest(self, topic: str, qid: int) -> int:
        # As the last look at the store found it (latestOffset looks first, so a queue new
        # since is fresh): opening the store once per new queue cost ~90 ms each.
        if (topic, qid) in self._earliests:
            return self._earliests[(topic, qid)]
        with open_store(self.opts.path) as store:
            return queue_bounds(store, topic, qid)[0]

    def getDefaultReadLimit(self) -> Any:
        return default_read_limit(self.opts.max_offsets_per_trigger) or super().getDefaultReadLimit()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def partitions(self, start: Offsets, end: Offsets) -> list[InputPartition]:
        out: list[InputPartition] = []
        if any((topic, int(qid)) not in self._files for topic, queues in end.items() for qid in queues):
            # A batch replayed after a restart (or a queue new since the last look): one look
            # at the store here, so that no partition opens the whole store itself. The files
            # found now reach at least as far as ``end``, which an earlier look planned.
            self._latest()
        for topic, queues in sorted(end.items()):
            for qid, stop in sorted(queues.items(), key=lambda kv: int(kv[0])):
                begin = start.get(topic, {}).get(qid)
                if begin is None:
                    begin = self._earliest(topic, int(qid))
                if int(begin) < int(stop):
                    rng = QueueRange(topic, int(qid), int(begin), int(stop))
                    out.append(MessagePartition(rng, file=self._files.get((topic, int(qid)))))
        return out

    def commit(self, end: Offsets) -> None:
        pass
