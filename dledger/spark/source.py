"""``spark.read.format("dledger")``: a PySpark (4.x) Python data source over segment files.

Batch: one partition per data segment file (or per ``maxPartitionBytes`` of one), each
knowing its index range from the index file; ``read()`` yields Arrow record batches built by
:mod:`dledger.reader` (no row tuples). Filters on ``index`` and ``term`` prune partitions
when Spark pushes them (``spark.sql.python.filterPushdown.enabled``; :func:`register` turns
it on). Streaming: the offset is the committed index of each node; a micro-batch reads what
was committed since the previous one.

Options (case-insensitive): ``startIndex``, ``endIndex`` (inclusive), ``committedOnly``
(default true), ``batchSize`` (rows per Arrow batch), ``mode`` (``FAILFAST`` default, or
``DROPMALFORMED``), ``verifyCrc`` (default true), ``maxPartitionBytes`` (0: one partition
per data file), ``badRecordsPath`` (a directory where DROPMALFORMED records what it
dropped, one JSON line per skipped run of entries) and, for streams, ``maxEntriesPerTrigger``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    Filter,
    In,
    InputPartition,
    IsNotNull,
)
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

from dledger.reader import (
    COLUMNS,
    NODE_COLUMN,
    MalformedEntry,
    NodeSnapshot,
    Segment,
    check_mode,
    plan_read,
    read_segment,
    resolve_nodes,
)
from dledger.spark.options import (
    SupportsTriggerAvailableNow,
    bounds,
    columns_of,
    default_read_limit,
    known_options,
    read_budget,
)
from dledger.spark.options import bool_option as _bool_option
from dledger.spark.options import called_for_pushdown as _called_for_pushdown
from dledger.spark.options import error as _error
from dledger.spark.options import int_option as _int_option

log = logging.getLogger(__name__)

# Rows per Arrow batch handed to Spark. Smaller than read_table's default: the JVM turns each
# batch into rows, and batches of this size ran fastest end to end (bench/test_bench_reader.py
# compares the sizes).
SPARK_BATCH_ROWS = 8192

_SPARK_TYPES = {
    "index": LongType(),
    "term": LongType(),
    "pos": LongType(),
    "magic": IntegerType(),
    "body_crc": IntegerType(),
    "body": BinaryType(),
    NODE_COLUMN: StringType(),
}

# Spark's names, lower-cased (Spark hands options over case-insensitively).
_OPTIONS = {
    "path": "path",
    "paths": "paths",
    "startindex": "startIndex",
    "endindex": "endIndex",
    "committedonly": "committedOnly",
    "batchsize": "batchSize",
    "mode": "mode",
    "verifycrc": "verifyCrc",
    "maxpartitionbytes": "maxPartitionBytes",
    "badrecordspath": "badRecordsPath",
    "maxentriespertrigger": "maxEntriesPerTrigger",
}


@dataclass(frozen=True, slots=True)
class Options:
    """The data source options, parsed and checked once when the source is created."""

    paths: tuple[str, ...]
    start_index: int | None = None
    end_index: int | None = None
    committed_only: bool = True
    batch_size: int = SPARK_BATCH_ROWS
    mode: str = "FAILFAST"
    verify_crc: bool = True
    max_partition_bytes: int = 0
    bad_records_path: str | None = None
    max_entries_per_trigger: int | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> Options:
        given = known_options(options, _OPTIONS, "format dledger", ("path", "paths"))
        paths: list[str] = []
        if given.get("paths"):
            try:
                listed = json.loads(given["paths"])
            except ValueError:
                listed = [given["paths"]]
            paths += [str(p) for p in (listed if isinstance(listed, list) else [listed])]
        if given.get("path"):
            paths.append(str(given["path"]))
        if not paths:
            raise _error("no path: use spark.read.format('dledger').load('<node dir or store base dir>')")
        batch = _int_option("batchSize", given.get("batchsize"), 1)
        return cls(
            paths=tuple(paths),
            start_index=_int_option("startIndex", given.get("startindex"), 0),
            end_index=_int_option("endIndex", given.get("endindex"), 0),
            committed_only=_bool_option("committedOnly", given.get("committedonly"), True),
            batch_size=SPARK_BATCH_ROWS if batch is None else batch,
            mode=check_mode(given.get("mode") or "FAILFAST"),
            verify_crc=_bool_option("verifyCrc", given.get("verifycrc"), True),
            max_partition_bytes=_int_option("maxPartitionBytes", given.get("maxpartitionbytes"), 0) or 0,
            bad_records_path=given.get("badrecordspath") or None,
            max_entries_per_trigger=_int_option("maxEntriesPerTrigger", given.get("maxentriespertrigger"), 1),
        )


class DLedgerPartition(InputPartition):
    """One Spark partition: a :class:`dledger.reader.Segment` (node, data file, index range)."""

    def __init__(self, segment: Segment) -> None:
        super().__init__(segment)
        self.segment = segment

    def __repr__(self) -> str:
        s = self.segment
        return f"DLedgerPartition({s.node}:{Path(s.data_file).name} [{s.first_index}..{s.last_index}])"


def spark_schema(node_column: bool) -> StructType:
    names = list(COLUMNS) + ([NODE_COLUMN] if node_column else [])
    return StructType([StructField(n, _SPARK_TYPES[n], nullable=False) for n in names])


def _columns_of(schema: StructType, node_column: bool) -> tuple[str, ...]:
    """The columns a (possibly user-given) schema asks for; they must be ours, with our types."""
    types = {f.name: f.dataType for f in spark_schema(node_column).fields}
    return columns_of(schema, types, "dledger")


def _arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects for ``schema`` (its checks compare nullability too)."""
    arrow = {
        "index": pa.int64(),
        "term": pa.int64(),
        "pos": pa.int64(),
        "magic": pa.int32(),
        "body_crc": pa.int32(),
        "body": pa.binary(),
        NODE_COLUMN: pa.string(),
    }
    return pa.schema([pa.field(f.name, arrow[f.name], nullable=f.nullable) for f in schema.fields])


class DLedgerDataSource(DataSource):
    """``spark.dataSource.register(DLedgerDataSource)``, then ``spark.read.format("dledger")``."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.opts = Options.parse(options)
        # Fails here, at load(), with a clear message when a path is missing or not a store.
        self.nodes = [(name, str(p)) for name, p in resolve_nodes(list(self.opts.paths))]

    @classmethod
    def name(cls) -> str:
        return "dledger"

    @property
    def node_column(self) -> bool:
        return len(self.nodes) > 1

    def schema(self) -> StructType:
        return spark_schema(self.node_column)

    def reader(self, schema: StructType) -> DataSourceReader:
        cls = DLedgerPushdownReader if _called_for_pushdown() else DLedgerReader
        return cls(self.opts, self.nodes, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return DLedgerStreamReader(self.opts, self.nodes, schema)


class _ReadMixin:
    """What batch and stream readers share: the columns and the per-partition read."""

    opts: Options
    columns: tuple[str, ...]
    arrow: pa.Schema
    term_min: int | None
    term_max: int | None

    def _setup(self, opts: Options, nodes: list[tuple[str, str]], schema: StructType) -> None:
        self.opts = opts
        self.nodes = nodes
        self.columns = _columns_of(schema, len(nodes) > 1)
        self.arrow = _arrow_schema(schema)
        self.term_min = None
        self.term_max = None

    def _read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        seg = getattr(partition, "segment", None)
        if seg is None:  # Spark's placeholder partition of an empty read
            return
        dropped: list[MalformedEntry] = []
        try:
            for batch in read_segment(
                seg,
                self.columns,
                batch_size=self.opts.batch_size,
                mode=self.opts.mode,
                verify_crc=self.opts.verify_crc,
                term_min=self.term_min,
                term_max=self.term_max,
                malformed=dropped,
            ):
                # Same buffers, Spark's nullability.
                yield pa.RecordBatch.from_arrays(batch.columns, schema=self.arrow)
        finally:
            if dropped:
                self._report(seg, dropped)

    def _report(self, seg: Segment, dropped: list[MalformedEntry]) -> None:
        total = sum(d.count for d in dropped)
        log.warning(
            "DROPMALFORMED: %d entr%s dropped from %s (entries %d..%d)",
            total,
            "y" if total == 1 else "ies",
            seg.data_file,
            seg.first_index,
            seg.last_index,
        )
        if not self.opts.bad_records_path:
            return
        out = Path(self.opts.bad_records_path)
        out.mkdir(parents=True, exist_ok=True)
        name = f"dledger-malformed-{seg.node}-{seg.first_index}-{uuid.uuid4().hex[:8]}.json"
        tmp = out / f".{name}.tmp"
        tmp.write_text("".join(json.dumps(asdict(d)) + "\n" for d in dropped))
        tmp.rename(out / name)


class DLedgerReader(_ReadMixin, DataSourceReader):
    """Batch reader: partitions from the index, Arrow batches from the data files."""

    def __init__(self, opts: Options, nodes: list[tuple[str, str]], schema: StructType) -> None:
        self._setup(opts, nodes, schema)
        self.index_min: int | None = opts.start_index
        self.index_max: int | None = opts.end_index
        self.empty = False

    def partitions(self) -> list[InputPartition]:
        lo, hi = self.index_min, self.index_max
        if self.empty or (lo is not None and hi is not None and lo > hi):
            return []
        plan = plan_read(
            [p for _, p in self.nodes],
            lo,
            hi,
            self.opts.committed_only,
            self.columns,
            max_partition_bytes=self.opts.max_partition_bytes,
            term_min=self.term_min,
            term_max=self.term_max,
        )
        return [DLedgerPartition(s) for s in plan.segments]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self._read(partition)


class DLedgerPushdownReader(DLedgerReader):
    """The batch reader plus filter pushdown on ``index`` and ``term``.

    Comparisons (=, <, <=, >, >=, IS NOT NULL) with integer literals are applied exactly: an
    index range narrows the planned range, a term range becomes an index range (terms never
    decrease along the log) and a row filter. ``IN`` lists only prune and stay with Spark.
    """

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        unhandled = []
        for f in filters:
            if not self._absorb(f):
                unhandled.append(f)
        return unhandled

    def _narrow(self, column: str, lo: int | None, hi: int | None) -> None:
        if column == "index":
            if lo is not None:
                self.index_min = lo if self.index_min is None else max(self.index_min, lo)
            if hi is not None:
                self.index_max = hi if self.index_max is None else min(self.index_max, hi)
            if self.index_max is not None and self.index_max < 0:
                self.empty = True
            if self.index_min is not None and self.index_min < 0:
                self.index_min = 0
        else:
            if lo is not None:
                self.term_min = lo if self.term_min is None else max(self.term_min, lo)
            if hi is not None:
                self.term_max = hi if self.term_max is None else min(self.term_max, hi)
            if self.term_min is not None and self.term_max is not None and self.term_min > self.term_max:
                self.empty = True

    def _absorb(self, f: Filter) -> bool:
        attr = getattr(f, "attribute", None)
        if attr not in (("index",), ("term",)):
            return False
        column = attr[0]
        if isinstance(f, IsNotNull):
            return True
        value: Any = getattr(f, "value", None)
        if isinstance(f, In):
            values = list(value or ())
            if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                self._narrow(column, min(values), max(values))
            return False  # pruned by range; Spark keeps the exact test
        if not isinstance(value, int) or isinstance(value, bool):
            return False
        lo_hi = bounds(f, value)
        if lo_hi is None:
            return False
        self._narrow(column, *lo_hi)
        return True


class DLedgerStreamReader(_ReadMixin, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Streaming reader. The offset is ``{node: last index read}``; each micro-batch reads the
    entries committed since the previous offset (``committedOnly=false``: written since)."""

    def __init__(self, opts: Options, nodes: list[tuple[str, str]], schema: StructType) -> None:
        self._setup(opts, nodes, schema)
        self._target: dict[str, int] | None = None

    def _limits(self) -> dict[str, int]:
        out = {}
        for name, p in self.nodes:
            with NodeSnapshot(name, Path(p)) as snap:
                limit = snap.limit(self.opts.committed_only)
                if self.opts.end_index is not None:
                    limit = min(limit, self.opts.end_index)
                out[name] = limit
        return out

    def initialOffset(self) -> dict[str, int]:
        out = {}
        for name, p in self.nodes:
            with NodeSnapshot(name, Path(p)) as snap:
                first = snap.begin if self.opts.start_index is None else self.opts.start_index
                out[name] = first - 1
        return out

    def latestOffset(self, start: dict[str, int] | None = None, limit: Any = None) -> dict[str, int]:
        latest = self._target if self._target is not None else self._limits()
        start = start or {}
        budget = read_budget(limit)
        out = {}
        for name, _ in self.nodes:
            begin = int(start.get(name, -1))
            end = max(begin, int(latest.get(name, begin)))
            if budget is not None:
                end = min(end, begin + budget)
                budget -= end - begin
            out[name] = end
        return out

    def getDefaultReadLimit(self) -> Any:
        return default_read_limit(self.opts.max_entries_per_trigger) or super().getDefaultReadLimit()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._limits()

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        out: list[InputPartition] = []
        for name, p in self.nodes:
            first, last = int(start.get(name, -1)) + 1, int(end.get(name, -1))
            if first > last:
                continue
            with NodeSnapshot(name, Path(p)) as snap:
                segs = snap.segments(first, last, self.opts.max_partition_bytes)
            out += [DLedgerPartition(s) for s in segs]
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self._read(partition)

    def commit(self, end: dict[str, int]) -> None:
        # Nothing to release: the segment files belong to the nodes, not to us.
        pass


def register(spark: Any, pushdown: bool = True) -> None:
    """Register the data source and, with ``pushdown``, turn on Spark's filter pushdown for
    Python data sources (``spark.sql.python.filterPushdown.enabled``) so that ``index`` and
    ``term`` filters prune partitions; also registers the ``rocketmq`` format (message stores).
    In a local session with neither ``PYSPARK_PYTHON`` nor ``spark.pyspark.python`` set, Spark's
    Python workers run this interpreter (see ``_workers_run_this_python``)."""
    from dledger.spark.rocketmq_source import RocketMQDataSource

    _workers_run_this_python(spark)
    spark.dataSource.register(DLedgerDataSource)
    spark.dataSource.register(RocketMQDataSource)
    if pushdown:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")


def _workers_run_this_python(spark: Any) -> None:
    """Without ``PYSPARK_PYTHON``, Spark starts its Python workers as ``python3`` from PATH: run
    from a virtualenv not activated, that interpreter lacks pyarrow and dledger. A local
    session's workers run on this machine, so they get this interpreter. The data source takes
    the context's interpreter when it is registered, hence here, before. Other masters' workers
    run elsewhere, where this path may not exist: theirs is the deployment's to set."""
    if os.environ.get("PYSPARK_PYTHON"):
        return
    try:
        sc = spark.sparkContext
    except Exception:  # Spark Connect: the server starts the workers
        return
    if sc.getConf().get("spark.pyspark.python") or not str(sc.master).startswith("local"):
        return
    if sc.pythonExec != sys.executable:
        log.info("Spark's Python workers run %s (PYSPARK_PYTHON is unset)", sys.executable)
        sc.pythonExec = sys.executable
