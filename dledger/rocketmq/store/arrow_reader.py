"""The messages of a RocketMQ message store on disk as Arrow tables, without a broker.

``read_messages(path, ...)`` returns a ``pyarrow.Table``; ``iter_message_batches`` yields
``pyarrow.RecordBatch``es. The Spark ``rocketmq`` format (``dledger.spark``) plans and reads
with the same pieces: :func:`plan_ranges` cuts a read into :class:`QueueRange`\\ s (a run of
one consume queue) or :class:`LogRange`\\ s (one commit-log file), and :func:`read_range`
turns one into record batches. The record scan kernel fills numpy columns straight from the
mapped files and the kernels of ``_ext/message_arrow.pxi`` make the string, map and binary
columns from them: there is no Python object per message.

Reading with ``topics`` (or ``queues``) goes through the consume queues: only those queues'
records are touched, and a message is there once dispatch put its unit in the queue (a
store-level PREPARED or ROLLBACK transaction record never is). Reading without walks the
commit log as ReputMessageService does and gives every record. Classic and DLedger commit
logs, written by this package or by Java RocketMQ 4.9.

``start``/``end`` (end exclusive) are queue offsets when reading by queue, as an int for every
queue or ``{topic: {queue_id: offset}}`` (-2: the queue's earliest, -1: its latest); when
walking they are commit-log offsets (DLedger: entry positions). ``committed_only``: the walk
stops at the committed position of a DLedger log (False: at the end of the local ledger);
queue reads never go past what the queues hold, which dispatch wrote from committed records.
"""

from __future__ import annotations

import ctypes
import itertools
import logging
import mmap
import os
import weakref
import zlib
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from dledger._ext import load as _load_ext
from dledger.rocketmq.store.message_store import MessageStore

log = logging.getLogger(__name__)
K = _load_ext("message")
_gather = _load_ext("gather")

# madvise(2), to let go of commit-log pages once read (Python's mmap.madvise needs the mmap
# object, which the store's segment files keep to themselves).
_MADV_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)
_madvise: Any = None
if _MADV_DONTNEED is not None:
    # CDLL(None): the C library already loaded; find_library would run ldconfig at import,
    # in every Spark worker.
    _madvise = ctypes.CDLL(None, use_errno=True).madvise
    _madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)

EARLIEST = -2
LATEST = -1

# Rows per batch: large enough that per-batch Python calls vanish, small enough that a batch's
# records and new buffers stay in the cache (every column kernel re-reads the records; 8 Ki rows
# took ~30% less CPU than 64 Ki, docs/spark.md).
DEFAULT_BATCH_ROWS = 1 << 13
# A walk maps this much of a commit-log file per scan (more than the largest record).
_WALK_WINDOW = 64 << 20

TYPES: dict[str, pa.DataType] = {
    "topic": pa.string(),
    "queue_id": pa.int32(),
    "queue_offset": pa.int64(),
    "commit_log_offset": pa.int64(),
    "size": pa.int32(),
    "msg_id": pa.string(),
    "tags": pa.string(),
    "keys": pa.string(),
    "properties": pa.map_(pa.string(), pa.string()),
    "body": pa.binary(),
    "body_crc": pa.int32(),
    "flag": pa.int32(),
    "sys_flag": pa.int32(),
    "born_timestamp": pa.timestamp("ms"),
    "store_timestamp": pa.timestamp("ms"),
    "born_host": pa.string(),
    "store_host": pa.string(),
    "reconsume_times": pa.int32(),
    "prepared_transaction_offset": pa.int64(),
}
COLUMNS: tuple[str, ...] = tuple(TYPES)
# Absent tags or keys are null; everything else always has a value.
NULLABLE = frozenset({"tags", "keys"})

# Scan column behind each plain fixed-width column.
_FIXED = {
    "queue_id": "queue_id",
    "queue_offset": "queue_offset",
    "commit_log_offset": "phys_offset",
    "size": "size",
    "body_crc": "body_crc",
    "flag": "flag",
    "sys_flag": "sys_flag",
    "born_timestamp": "born_timestamp",
    "store_timestamp": "store_timestamp",
    "reconsume_times": "reconsume_times",
    "prepared_transaction_offset": "prepared_offset",
}


# Scan columns each output column is made from (besides ``size``, always scanned).
_NEEDS: dict[str, tuple[str, ...]] = {name: (src,) for name, src in _FIXED.items()} | {
    "topic": ("topic_off",),
    "msg_id": ("store_host_off", "sys_flag", "phys_offset"),
    "tags": ("props_off",),
    "keys": ("props_off",),
    "properties": ("props_off",),
    "body": ("body_off",),
    "born_host": ("born_host_off", "sys_flag"),
    "store_host": ("store_host_off", "sys_flag"),
}


def scan_columns(columns: Iterable[str], rows: RowFilter | None = None, decompress: bool = False) -> frozenset[str]:
    """The scan columns a read of ``columns`` under ``rows`` fills (the scan fills no other:
    a four-column read does not write twenty)."""
    need = {"size"}
    for c in columns:
        need.update(_NEEDS[c])
    if decompress and "body" in columns:
        need.add("sys_flag")
    if rows is not None:
        need.update(rows.scan_columns)
    return frozenset(need)


def message_schema(columns: Sequence[str] = COLUMNS) -> pa.Schema:
    return pa.schema([pa.field(c, TYPES[c], nullable=c in NULLABLE) for c in columns])


def check_columns(columns: Iterable[str] | None) -> tuple[str, ...]:
    if columns is None:
        return COLUMNS
    cols = tuple(columns)
    unknown = [c for c in cols if c not in TYPES]
    if unknown:
        raise ValueError(f"unknown column(s) {', '.join(unknown)}; columns are {', '.join(COLUMNS)}")
    return cols


# -- columns from scan columns ----------------------------------------------------------------


def _binary(typ: pa.DataType, n: int, data: Any, offsets: Any, valid: np.ndarray | None = None) -> pa.Array:
    bitmap = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(typ, n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)])


def _slices(buf: Any, typ: pa.DataType, off: np.ndarray, length: np.ndarray) -> pa.Array:
    data, vo = _gather.gather(buf, np.ascontiguousarray(off, np.int64), np.ascontiguousarray(length, np.int32))
    return _binary(typ, len(off), data, vo)


def _hosts(buf: Any, off: np.ndarray, sys_flag: np.ndarray, v6_flag: int) -> pa.Array:
    data, vo = K.host_texts(buf, off, sys_flag, v6_flag)
    return _binary(pa.string(), len(off), data, vo)


def _string(n: int, data: Any, offsets: Any, bitmap: Any = None, null_count: int = 0) -> pa.Array:
    validity = pa.py_buffer(bitmap) if null_count else None
    return pa.Array.from_buffers(
        pa.string(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=null_count
    )


def _property_columns(buf: Any, cols: Mapping[str, np.ndarray], wanted: Sequence[str]) -> dict[str, pa.Array]:
    """``properties``, ``tags`` and ``keys`` (those in ``wanted``) from one pass over the
    properties strings."""
    n = len(cols["size"])
    props, tags, keys = K.property_columns(
        buf, cols["props_off"], cols["props_len"], "properties" in wanted, "tags" in wanted, "keys" in wanted
    )
    out: dict[str, pa.Array] = {}
    if props is not None:
        entry_offsets, kd, ko, vd, vo = props
        m = len(ko) - 1
        out["properties"] = pa.MapArray.from_arrays(
            pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(entry_offsets)]),
            _string(m, kd, ko),
            _string(m, vd, vo),
        )
    if tags is not None:
        out["tags"] = _string(n, *tags)
    if keys is not None:
        out["keys"] = _string(n, *keys)
    return out


def _bodies(buf: Any, cols: Mapping[str, np.ndarray], decompress: bool) -> pa.Array:
    if not decompress:
        return _slices(buf, pa.binary(), cols["body_off"], cols["body_len"])
    compressed = np.flatnonzero(cols["sys_flag"] & K.COMPRESSED_FLAG)
    if not len(compressed):
        return _slices(buf, pa.binary(), cols["body_off"], cols["body_len"])
    # Compressed bodies are rare (RocketMQ compresses bodies above 4 KiB): inflate those one
    # by one and gather the rest as they are.
    data, vo = _gather.gather(buf, cols["body_off"], cols["body_len"])
    mv = memoryview(data)
    parts: list[bytes | memoryview] = []
    lengths = np.diff(vo).astype(np.int64)
    at = 0
    for k in compressed.tolist():
        parts.append(mv[vo[at] : vo[k]])
        parts.append(zlib.decompress(mv[vo[k] : vo[k + 1]]))
        lengths[k] = len(parts[-1])
        at = k + 1
    parts.append(mv[vo[at] :])
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > 2**31 - 1:
        raise ValueError("decompressed bodies exceed the 2 GiB of an Arrow binary column in one batch")
    return _binary(pa.binary(), len(lengths), b"".join(parts), offsets.astype(np.int32))


def batch_from_columns(
    buf: Any,
    cols: Mapping[str, np.ndarray],
    columns: Sequence[str] = COLUMNS,
    *,
    decompress: bool = False,
    schema: pa.Schema | None = None,
) -> pa.RecordBatch:
    """One record batch of ``columns`` from scan columns over ``buf`` (see ``scan_records``)."""
    n = len(cols["size"])
    arrays: list[pa.Array] = []
    props: dict[str, pa.Array] | None = None
    for name in columns:
        src = _FIXED.get(name)
        if src is not None:
            values = np.ascontiguousarray(cols[src])
            arrays.append(pa.Array.from_buffers(TYPES[name], n, [None, pa.py_buffer(values)]))
        elif name == "topic":
            arrays.append(_slices(buf, pa.string(), cols["topic_off"], cols["topic_len"]))
        elif name == "body":
            arrays.append(_bodies(buf, cols, decompress))
        elif name in ("tags", "keys", "properties"):
            if props is None:
                props = _property_columns(buf, cols, columns)
            arrays.append(props[name])
        elif name == "msg_id":
            data, vo = K.offset_msg_ids(buf, cols["store_host_off"], cols["sys_flag"], cols["phys_offset"])
            arrays.append(_binary(pa.string(), n, data, vo))
        elif name == "born_host":
            arrays.append(_hosts(buf, cols["born_host_off"], cols["sys_flag"], K.BORNHOST_V6_FLAG))
        elif name == "store_host":
            arrays.append(_hosts(buf, cols["store_host_off"], cols["sys_flag"], K.STOREHOSTADDRESS_V6_FLAG))
        else:
            raise ValueError(f"unknown column {name!r}")
    return pa.RecordBatch.from_arrays(arrays, schema=schema or message_schema(columns))


# Columns made from variable-length parts of a record; a read of at least FUSED_FROM of them
# builds every column in the fused pass (one per record while it is in cache) instead of one
# pass per column (docs/spark.md).
_DERIVED = frozenset({"topic", "msg_id", "tags", "keys", "properties", "body", "born_host", "store_host"})
FUSED_FROM = 3
# Record bytes a fused walk batch takes at most (it also stops at its rows; a larger record
# doubles it). Each variable-length output is allocated at this size and shrunk in place: kept
# under numpy's 4 MiB huge-page threshold (its entry offsets are 4/3 of it), as a huge page is
# zero-filled whole on first touch: 6 MiB budgets spent half the row's time in the kernel.
_FUSED_BUDGET = 2 << 20


def batch_from_fused(out: Mapping[str, Any], columns: Sequence[str], schema: pa.Schema) -> pa.RecordBatch:
    """One record batch of ``columns`` from the outputs of ``fused_walk``/``fused_at``."""
    n = len(out["size"])
    arrays: list[pa.Array] = []
    for name in columns:
        src = _FIXED.get(name)
        if src is not None:
            arrays.append(pa.Array.from_buffers(TYPES[name], n, [None, pa.py_buffer(out[src])]))
        elif name == "properties":
            entry_offsets, kd, ko, vd, vo = out["properties"]
            m = len(ko) - 1
            arrays.append(
                pa.MapArray.from_arrays(
                    pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(entry_offsets)]),
                    _string(m, kd, ko),
                    _string(m, vd, vo),
                )
            )
        elif name in ("tags", "keys"):
            arrays.append(_string(n, *out[name]))
        else:
            data, offsets = out[name]
            arrays.append(_binary(TYPES[name], n, data, offsets))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _take(cols: Mapping[str, np.ndarray], keep: np.ndarray) -> dict[str, np.ndarray]:
    return {k: v[keep] for k, v in cols.items()}


# -- ranges -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueueRange:
    """Queue offsets ``[start, end)`` of one consume queue."""

    topic: str
    queue_id: int
    start: int
    end: int

    @property
    def count(self) -> int:
        return max(self.end - self.start, 0)


@dataclass(frozen=True, slots=True)
class LogRange:
    """Commit-log offsets (DLedger: entry positions) ``[start, end)`` within one file."""

    start: int
    end: int


@dataclass(frozen=True, slots=True)
class RowFilter:
    """Rows a walk keeps (None: any): what pushed-down filters ask, applied exactly."""

    topics: frozenset[str] | None = None
    queue_ids: frozenset[int] | None = None
    offset_min: int | None = None
    offset_max: int | None = None
    ts_min: int | None = None
    ts_max: int | None = None

    def mask(self, buf: Any, cols: Mapping[str, np.ndarray]) -> np.ndarray | None:
        n = len(cols["size"])
        keep = np.ones(n, dtype=bool)
        if self.queue_ids is not None:
            keep &= np.isin(cols["queue_id"], np.fromiter(self.queue_ids, np.int32))
        if self.offset_min is not None:
            keep &= cols["queue_offset"] >= self.offset_min
        if self.offset_max is not None:
            keep &= cols["queue_offset"] <= self.offset_max
        if self.ts_min is not None:
            keep &= cols["store_timestamp"] >= self.ts_min
        if self.ts_max is not None:
            keep &= cols["store_timestamp"] <= self.ts_max
        if self.topics is not None and keep.any():
            topic_ids, firsts = K.topic_ids(buf, cols["topic_off"], cols["topic_len"])
            mv = memoryview(buf)
            off, ln = cols["topic_off"], cols["topic_len"]
            wanted = np.array(
                [
                    bytes(mv[int(off[i]) : int(off[i] + ln[i])]).decode("utf-8", "replace") in self.topics
                    for i in firsts
                ],
                dtype=bool,
            )
            keep &= wanted[topic_ids]
        return None if keep.all() else keep

    @property
    def empty(self) -> bool:
        return self == RowFilter()

    @property
    def scan_columns(self) -> tuple[str, ...]:
        """The scan columns :meth:`mask` reads."""
        out = []
        if self.queue_ids is not None:
            out.append("queue_id")
        if self.offset_min is not None or self.offset_max is not None:
            out.append("queue_offset")
        if self.ts_min is not None or self.ts_max is not None:
            out.append("store_timestamp")
        if self.topics is not None:
            out.append("topic_off")
        return tuple(out)


def open_store(path: str | os.PathLike[str]) -> MessageStore:
    """The store at ``path`` opened read-only (no byte written, no lock: a running writer may
    have it open)."""
    return MessageStore(Path(path), readonly=True)


def queue_ids_of(store: MessageStore, topic: str) -> list[int]:
    return store.consume_queues.queue_ids(topic)


def readable_queue_end(store: MessageStore, topic: str, queue_id: int) -> int:
    """The queue offset past the last unit whose record is readable (committed, dispatched)."""
    cq = store.consume_queues.get(topic, queue_id)
    if cq is None:
        return 0
    hi, lo = int(cq.max_offset), int(cq.min_offset)
    limit = int(store.commitlog.readable_end)
    while hi > lo:
        phys, sizes, _tags = cq.get_units(hi - 1, 1)
        if len(phys) and int(phys[0]) + int(sizes[0]) <= limit:
            return hi
        hi -= 1
    return hi


def queue_bounds(store: MessageStore, topic: str, queue_id: int) -> tuple[int, int]:
    """``(earliest, latest)`` offsets of a queue: its min offset and past its last readable unit."""
    cq = store.consume_queues.get(topic, queue_id)
    if cq is None:
        return 0, 0
    return int(cq.min_offset), readable_queue_end(store, topic, queue_id)


def store_timestamp_of_unit(store: MessageStore, topic: str, queue_id: int, offset: int) -> int:
    cq = store.consume_queues.get(topic, queue_id)
    unit = cq.get_unit(offset) if cq is not None else None
    if unit is None:
        return -1
    return store.store_timestamp_at(unit[0], unit[1])


def offset_for_timestamp(store: MessageStore, topic: str, queue_id: int, timestamp_ms: int) -> int:
    """The first queue offset whose message was stored at or after ``timestamp_ms`` (the end of
    the queue when none was): a binary search on the consume queue, reading one record per
    step (store times never decrease along the log, so neither along a queue)."""
    lo, hi = queue_bounds(store, topic, queue_id)
    while lo < hi:
        mid = (lo + hi) // 2
        ts = store_timestamp_of_unit(store, topic, queue_id, mid)
        if 0 <= ts < timestamp_ms:
            lo = mid + 1
        else:
            hi = mid
    return lo


OffsetSpec = int | Mapping[str, Mapping[Any, int]] | None


def _resolve(spec: OffsetSpec, topic: str, queue_id: int, earliest: int, latest: int, default: int) -> int:
    if spec is None:
        return default
    if isinstance(spec, Mapping):
        per_queue = spec.get(topic)
        if per_queue is None:
            return default
        value = per_queue.get(str(queue_id), per_queue.get(queue_id))
        if value is None:
            return default
        spec = int(value)
    if spec == EARLIEST:
        return earliest
    if spec == LATEST:
        return latest
    if spec < -2:
        raise ValueError(f"offset {spec} of {topic}/{queue_id}: -2 (earliest), -1 (latest) or >= 0")
    return min(max(int(spec), earliest), latest)


def topics_of(store: MessageStore, topics: Iterable[str] | None) -> list[str]:
    return sorted(store.consume_queues.topics()) if topics is None else list(dict.fromkeys(topics))


def queue_ranges(
    store: MessageStore,
    topics: Iterable[str] | None = None,
    queues: Iterable[int] | None = None,
    start: OffsetSpec = None,
    end: OffsetSpec = None,
) -> list[QueueRange]:
    """One range per queue of ``topics`` (every topic with a consume queue when None), only
    ``queues`` when given, from ``start`` to ``end`` (see the module docstring)."""
    wanted = None if queues is None else set(queues)
    out = []
    for topic in topics_of(store, topics):
        for qid in queue_ids_of(store, topic):
            if wanted is not None and qid not in wanted:
                continue
            earliest, latest = queue_bounds(store, topic, qid)
            lo = _resolve(start, topic, qid, earliest, latest, earliest)
            hi = _resolve(end, topic, qid, earliest, latest, latest)
            out.append(QueueRange(topic, qid, lo, max(lo, hi)))
    return out


def walk_end(store: MessageStore, committed_only: bool) -> int:
    cl = store.commitlog
    if store.mode == "dledger" and not committed_only:
        return int(cl.ledger_end_pos)
    return int(cl.readable_end)


def log_ranges(store: MessageStore, start: int | None, end: int | None, committed_only: bool) -> list[LogRange]:
    """One range per commit-log file holding ``[start, end)`` (positions; None: the whole log)."""
    cl = store.commitlog
    lo = max(int(cl.min_offset), 0) if start is None else max(int(start), max(int(cl.min_offset), 0))
    hi = walk_end(store, committed_only) if end is None else min(int(end), walk_end(store, committed_only))
    size = int(cl.file_size)
    out = []
    pos = lo
    while pos < hi:
        file_end = pos - pos % size + size
        out.append(LogRange(pos, min(file_end, hi)))
        pos = file_end
    return out


def plan_ranges(
    store: MessageStore,
    topics: Iterable[str] | None = None,
    queues: Iterable[int] | None = None,
    start: OffsetSpec = None,
    end: OffsetSpec = None,
    committed_only: bool = True,
) -> list[QueueRange] | list[LogRange]:
    """Queue ranges when ``topics`` or ``queues`` are given, else commit-log file ranges."""
    if topics is not None or queues is not None:
        return queue_ranges(store, topics, queues, start, end)
    if isinstance(start, Mapping) or isinstance(end, Mapping):
        raise ValueError("per-queue start/end offsets need topics")
    return log_ranges(store, start, end, committed_only)


# -- reading ranges ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReadArgs:
    columns: tuple[str, ...] = COLUMNS
    batch_rows: int = DEFAULT_BATCH_ROWS
    decompress: bool = False
    committed_only: bool = True
    rows: RowFilter = RowFilter()
    # Build walked batches in buffers reused once the caller has let go of the batch before
    # (``_BufferPool``): for callers that consume batches one by one.
    reuse_buffers: bool = False

    @property
    def scan_names(self) -> tuple[str, ...]:
        return tuple(sorted(scan_columns(self.columns, self.rows, self.decompress)))

    @property
    def fused(self) -> frozenset[str] | None:
        """The variable-length columns a fused pass makes, when this read takes one: most of
        them, no row filter and no inflating (those go through the scan columns)."""
        derived = _DERIVED.intersection(self.columns)
        if len(derived) < FUSED_FROM or not self.rows.empty or self.decompress:
            return None
        return frozenset(derived)


CQ_UNIT = 20


def _queue_part(
    view: Any,
    base: int,
    part: np.ndarray,
    part_sizes: np.ndarray,
    first_offset: int,
    args: ReadArgs,
    names: tuple[str, ...],
    schema: pa.Schema,
) -> Generator[pa.RecordBatch, None, int]:
    """The batch of the records at commit-log offsets ``part`` (all in the file mapped as
    ``view``, which starts at ``base``), of queue offsets from ``first_offset``; returns how
    many were whole records of their unit's size (the read stops at the first that is not)."""
    fused = args.fused
    if fused is not None and int(part_sizes.sum(dtype=np.int64)) < 2**31:
        out, n = K.fused_at(view, base, np.ascontiguousarray(part - base), np.ascontiguousarray(part_sizes), fused)
        if n:
            out["queue_offset"] = np.arange(first_offset, first_offset + n, dtype=np.int64)
            yield batch_from_fused(out, args.columns, schema)
        return int(n)
    cols, n = K.scan_at(view, base, np.ascontiguousarray(part - base), np.ascontiguousarray(part_sizes), names)
    if n:
        cols["queue_offset"] = np.arange(first_offset, first_offset + n, dtype=np.int64)
        mask = args.rows.mask(view, cols)
        if mask is not None:
            cols = _take(cols, mask)
        if len(cols["size"]):
            yield batch_from_columns(view, cols, args.columns, decompress=args.decompress, schema=schema)
    return int(n)


def _log_short(rng: QueueRange, offset: int, phys: int) -> None:
    log.warning(
        "%s/%d: the record of queue offset %d at %d is not whole; the read stops there",
        rng.topic,
        rng.queue_id,
        offset,
        phys,
    )


def _read_queue(store: MessageStore, rng: QueueRange, args: ReadArgs, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    cq = store.consume_queues.get(rng.topic, rng.queue_id)
    if cq is None:
        return
    cl = store.commitlog
    names = args.scan_names
    offset = max(rng.start, int(cq.min_offset))
    fsize = int(cl.file_size)
    while offset < rng.end:
        phys, sizes, _tags = cq.get_units(offset, min(args.batch_rows, rng.end - offset))
        if not len(phys):
            return
        ok = (phys + sizes <= int(cl.readable_end)) & (phys >= int(cl.min_offset))
        if not ok.all():
            cut = int(np.argmin(ok))
            phys, sizes = phys[:cut], sizes[:cut]
            if not len(phys):
                return
        cuts = np.flatnonzero(np.diff(phys // fsize)) + 1
        got = 0
        for part, part_sizes in zip(np.split(phys, cuts), np.split(sizes, cuts), strict=True):
            with cl.reading():
                f = cl.files.find(int(part[0]))
                if f is None:
                    return
                view = f.view()
                base = int(f.file_from_offset)
                try:
                    n = yield from _queue_part(view, base, part, part_sizes, offset + got, args, names, schema)
                finally:
                    _drop_pages(view, int(part[0]) - base, int(part[-1]) + int(part_sizes[-1]) - base)
                    view.release()
            got += n
            if n < len(part):
                _log_short(rng, offset + got, int(part[n]))
                return
        offset += got


def _drop_pages(view: Any, start: int, end: int) -> None:
    """Unmap this process's resident pages of ``view[start:end]`` (a view of a whole mapped
    file) once read: mapped pages count in the resident size until unmapped, so reading a 3 GB
    commit log into a 3 GB table would peak at 6 GB. MADV_DONTNEED on a shared file mapping
    only drops page-table entries; the page cache keeps the bytes and a later read refaults them."""
    if _madvise is None:
        return
    start -= start % mmap.PAGESIZE
    end = min(end, len(view))
    if end > start:
        addr = np.frombuffer(view, np.uint8).ctypes.data
        _madvise(ctypes.c_void_p(addr + start), ctypes.c_size_t(end - start), _MADV_DONTNEED)


class _BufferPool:
    """The fused walk's buffers, lent to one batch at a time: a set of buffers is reused for a
    later batch once nothing holds the batch made in it (its arrays gone), so a caller consuming
    batches one by one does not fault in fresh pages for each (docs/spark.md). Two sets: a
    ``for`` loop still holds the batch before while asking for the next. A batch made while
    both are held gets new buffers of its own."""

    SETS = 2

    def __init__(self) -> None:
        self._sets: list[tuple[dict[str, np.ndarray], list[weakref.ref[Any]]]] = []
        self._lent = -1

    def lend(self) -> dict[str, np.ndarray] | None:
        for k, (buffers, held) in enumerate(self._sets):
            if all(ref() is None for ref in held):
                self._lent = k
                return buffers
        if len(self._sets) < self.SETS:
            self._sets.append(({}, []))
            self._lent = len(self._sets) - 1
            return self._sets[-1][0]
        return None

    def lent(self, out: Mapping[str, Any]) -> None:
        """The kernel's outputs ``out`` (numpy views of the lent buffers, which the batch's
        Arrow buffers hold) are the batch: the set is free again once every view is gone."""
        views = [v for value in out.values() for v in (value if isinstance(value, tuple) else (value,))]
        self._sets[self._lent] = (
            self._sets[self._lent][0],
            [weakref.ref(v) for v in views if isinstance(v, np.ndarray)],
        )


def _walk_view(
    view: Any,
    base: int,
    wrote: int,
    fsize: int,
    pos: int,
    end: int,
    args: ReadArgs,
    schema: pa.Schema,
    dledger: bool,
    pool: _BufferPool | None = None,
) -> Generator[pa.RecordBatch, None, int | None]:
    """Batches of the records from ``pos`` in one mapped file (at most one window of it);
    returns where the walk goes on, or None when it is over."""
    names = args.scan_names
    stop_at = min(wrote, end - base, pos - base + _WALK_WINDOW)
    cur = pos - base
    code = K.STOP_END
    fused = args.fused
    budget = _FUSED_BUDGET
    while cur < stop_at:
        if fused is not None:
            lend = pool.lend() if pool is not None else None
            out, stop, code = K.fused_walk(view, base, cur, stop_at, args.batch_rows, dledger, budget, fused, lend)
            if len(out["size"]):
                if lend is not None and pool is not None:
                    pool.lent(out)
                batch = batch_from_fused(out, args.columns, schema)
                del out  # the batch alone holds the views now
                yield batch
                del batch
            elif code == K.STOP_LIMIT:
                budget *= 2  # a record larger than the budget
            cur = stop
            if code != K.STOP_LIMIT:
                break
            continue
        cols, stop, code = K.scan_some(view, base, cur, stop_at, args.batch_rows, dledger, names)
        if len(cols["size"]):
            mask = args.rows.mask(view, cols)
            if mask is not None:
                cols = _take(cols, mask)
            if len(cols["size"]):
                yield batch_from_columns(view, cols, args.columns, decompress=args.decompress, schema=schema)
        cur = stop
        if code != K.STOP_LIMIT:
            break
    if code in (K.STOP_BLANK, K.STOP_ZERO) or cur >= fsize:
        return None  # the rest of this file holds no record; the next range starts the next file
    if code == K.STOP_END or (code == K.STOP_BAD and base + stop_at < end and cur > pos - base):
        if base + cur <= pos:
            return None
        return base + cur  # the window ended, maybe inside a record: go on from the last whole one
    log.error("commit log: %s record at %d; the walk stops there", K.STOP_NAMES[code], base + cur)
    return None


def _read_log(store: MessageStore, rng: LogRange, args: ReadArgs, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    cl = store.commitlog
    dledger = store.mode == "dledger"
    pool = _BufferPool() if args.reuse_buffers else None
    pos: int | None = rng.start
    while pos is not None and pos < rng.end:
        with cl.reading():
            f = cl.files.find(pos)
            if f is None:
                return
            view = f.view()
            base, was = int(f.file_from_offset), pos
            try:
                pos = yield from _walk_view(
                    view, base, int(f.wrote_position), int(f.file_size), pos, rng.end, args, schema, dledger, pool
                )
            finally:
                _drop_pages(view, was - base, (rng.end if pos is None else pos) - base)
                view.release()


@dataclass(frozen=True, slots=True)
class LogFile:
    """The commit-log file a walk's range lies in, read by mapping that file alone (opening
    the store costs tens of ms per Spark partition; the range was bounded by the readable, or
    for a DLedger log the committed, end when it was planned)."""

    path: str
    base: int
    size: int
    dledger: bool = False


def log_file_of(store: MessageStore, rng: LogRange) -> LogFile | None:
    """The file ``rng`` lies in, when it can be read alone (None: a DLedger store that still
    holds classic files from its upgrade). DLedger data files are named by their start position
    like a classic log's, and hold entries the walk reads in DLedger mode."""
    cl = store.commitlog
    dledger = store.mode == "dledger"
    if dledger and cl.old_files:  # positions below ``divided`` are in other files, with no entry header
        return None
    log_dir = cl.files.store_path if dledger else cl.path
    size = int(cl.file_size)
    base = rng.start - rng.start % size
    return LogFile(str(Path(log_dir) / f"{base:020d}"), base, size, dledger)


def read_log_file(
    file: LogFile, rng: LogRange, args: ReadArgs = ReadArgs(), schema: pa.Schema | None = None
) -> Iterator[pa.RecordBatch]:
    """Record batches of ``rng`` (within ``file``, see :func:`log_file_of`), in log order."""
    schema = schema or message_schema(args.columns)
    with open(file.path, "rb") as fh:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    pool = _BufferPool() if args.reuse_buffers else None
    try:
        size = min(file.size, len(mm))
        pos: int | None = rng.start
        while pos is not None and pos < rng.end:
            view = memoryview(mm)
            was = pos
            try:
                pos = yield from _walk_view(
                    view, file.base, size, file.size, pos, rng.end, args, schema, file.dledger, pool
                )
            finally:
                _drop_pages(view, was - file.base, (rng.end if pos is None else pos) - file.base)
                view.release()
    finally:
        mm.close()


@dataclass(frozen=True, slots=True)
class QueueFiles:
    """Where a store's (topic, queue) range is read from by mapping only its consume
    queue's files and the commit-log files its units point into (opening the store maps every
    queue of every topic: 0.14-0.36 s per Spark partition). ``readable_end`` and ``log_min``
    bound the units read, as the store's commit log did when the range was planned."""

    cq_dir: str
    cq_file_size: int
    log_dir: str
    log_file_size: int
    readable_end: int
    log_min: int


# A consume-queue unit: commit-log offset, record size, tags code (big-endian).
_UNIT = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags", ">i8")])


def queue_files_of(store: MessageStore, rng: QueueRange) -> QueueFiles | None:
    """What :func:`read_queue_files` needs for ``rng`` (None when the range is read through the
    store: a DLedger store that still holds classic files from its upgrade). A DLedger store's
    units point at the record inside an entry of its data files, which are named by their start
    position like a classic log's, so the same mapping reads both."""
    cq = store.consume_queues.get(rng.topic, rng.queue_id)
    if cq is None:
        return None
    cl = store.commitlog
    if store.mode == "dledger":
        if cl.old_files:  # positions below ``divided`` are in other files, with no entry header
            return None
        log_dir = str(cl.files.store_path)
    else:
        log_dir = str(cl.path)
    return QueueFiles(
        str(cq.dir), int(cq.file_size), log_dir, int(cl.file_size), int(cl.readable_end), int(cl.min_offset)
    )


class _Maps:
    """Read-only mappings of whole files by name, kept while a range is read."""

    def __init__(self) -> None:
        self._maps: dict[str, mmap.mmap | None] = {}

    def get(self, path: str) -> mmap.mmap | None:
        if path not in self._maps:
            try:
                with open(path, "rb") as fh:
                    self._maps[path] = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            except (FileNotFoundError, ValueError):  # ValueError: an empty file
                self._maps[path] = None
        return self._maps[path]

    def close(self) -> None:
        for mm in self._maps.values():
            if mm is not None:
                mm.close()
        self._maps.clear()


def read_queue_files(
    files: QueueFiles, rng: QueueRange, args: ReadArgs = ReadArgs(), schema: pa.Schema | None = None
) -> Iterator[pa.RecordBatch]:
    """Record batches of ``rng`` in queue order (see :class:`QueueFiles`), the same as
    :func:`read_range` over the opened store gives."""
    schema = schema or message_schema(args.columns)
    names = args.scan_names
    maps = _Maps()
    offset = rng.start
    try:
        while offset < rng.end:
            at = offset * CQ_UNIT
            cq_base = at - at % files.cq_file_size
            cq = maps.get(str(Path(files.cq_dir) / f"{cq_base:020d}"))
            if cq is None:
                return
            pos = at - cq_base
            n = min(args.batch_rows, rng.end - offset, (min(len(cq), files.cq_file_size) - pos) // CQ_UNIT)
            if n <= 0:
                return
            units = np.frombuffer(cq[pos : pos + n * CQ_UNIT], _UNIT)
            phys, sizes = units["offset"].astype(np.int64), units["size"].astype(np.int32)
            ok = (sizes > 0) & (phys >= files.log_min) & (phys + sizes <= files.readable_end)
            if not ok.all():
                cut = int(np.argmin(ok))
                phys, sizes = phys[:cut], sizes[:cut]
                if not len(phys):
                    return
            fsize = files.log_file_size
            cuts = np.flatnonzero(np.diff(phys // fsize)) + 1
            got = 0
            for part, part_sizes in zip(np.split(phys, cuts), np.split(sizes, cuts), strict=True):
                base = int(part[0]) - int(part[0]) % fsize
                mm = maps.get(str(Path(files.log_dir) / f"{base:020d}"))
                if mm is None:
                    log.warning("%s/%d: no commit-log file at %d; the read stops there", rng.topic, rng.queue_id, base)
                    return
                view = memoryview(mm)
                try:
                    m = yield from _queue_part(view, base, part, part_sizes, offset + got, args, names, schema)
                finally:
                    _drop_pages(view, int(part[0]) - base, int(part[-1]) + int(part_sizes[-1]) - base)
                    view.release()
                got += m
                if m < len(part):
                    _log_short(rng, offset + got, int(part[m]))
                    return
            offset += got
    finally:
        maps.close()


def split_log_range(store: MessageStore, rng: LogRange, max_bytes: int) -> list[LogRange]:
    """``rng`` cut into pieces of about ``max_bytes`` at record starts: the commit-log offsets of
    consume-queue units (a classic store's units point at whole records; records no queue
    holds lie between them and are walked as before). A DLedger log is not cut."""
    if store.mode == "dledger" or max_bytes <= 0 or rng.end - rng.start <= max_bytes:
        return [rng]
    pieces = -(-(rng.end - rng.start) // max_bytes)
    step = (rng.end - rng.start) // pieces
    cuts = [rng.start]
    for k in range(1, pieces):
        at = _first_record_at_or_after(store, rng.start + k * step, rng.end)
        if at is not None and at > cuts[-1]:
            cuts.append(at)
    cuts.append(rng.end)
    return [LogRange(a, b) for a, b in itertools.pairwise(cuts) if a < b]


def _first_record_at_or_after(store: MessageStore, target: int, end: int) -> int | None:
    """The smallest commit-log offset in ``[target, end)`` that a consume-queue unit points at."""
    best: int | None = None
    for topic in store.consume_queues.topics():
        for qid in store.consume_queues.queue_ids(topic):
            cq = store.consume_queues.get(topic, qid)
            if cq is None:
                continue
            lo, hi = int(cq.min_offset), int(cq.max_offset)
            while lo < hi:  # first unit at or after target (units grow along a queue)
                mid = (lo + hi) // 2
                unit = cq.get_unit(mid)
                if unit is not None and unit[0] < target:
                    lo = mid + 1
                else:
                    hi = mid
            unit = cq.get_unit(lo) if lo < int(cq.max_offset) else None
            if unit is not None and unit[0] < end and (best is None or unit[0] < best):
                best = unit[0]
    return best


def read_range(
    store: MessageStore, rng: QueueRange | LogRange, args: ReadArgs = ReadArgs(), schema: pa.Schema | None = None
) -> Iterator[pa.RecordBatch]:
    """Record batches of one range, in queue (or log) order."""
    schema = schema or message_schema(args.columns)
    if isinstance(rng, QueueRange):
        return _read_queue(store, rng, args, schema)
    return _read_log(store, rng, args, schema)


@dataclass(frozen=True, slots=True)
class ReadRequest:
    """What ``read_messages`` and ``iter_message_batches`` take besides the path (see the
    module docstring): checked when made, so a bad value fails before the store is opened."""

    topics: Iterable[str] | str | None = None
    queues: Iterable[int] | None = None
    start: OffsetSpec = None
    end: OffsetSpec = None
    columns: Iterable[str] | None = None
    committed_only: bool = True
    _: KW_ONLY
    batch_rows: int = DEFAULT_BATCH_ROWS
    decompress: bool = False
    reuse_buffers: bool = False

    def __post_init__(self) -> None:
        if self.batch_rows <= 0:
            raise ValueError(f"batch_rows must be positive, got {self.batch_rows}")
        object.__setattr__(self, "columns", check_columns(self.columns))
        if isinstance(self.topics, str):
            object.__setattr__(self, "topics", [self.topics])

    @property
    def args(self) -> ReadArgs:
        assert isinstance(self.columns, tuple)
        return ReadArgs(
            self.columns, self.batch_rows, self.decompress, self.committed_only, reuse_buffers=self.reuse_buffers
        )

    def ranges(self, store: MessageStore) -> Sequence[QueueRange | LogRange]:
        topics = self.topics
        assert not isinstance(topics, str)
        return plan_ranges(store, topics, self.queues, self.start, self.end, self.committed_only)


def iter_message_batches(path: str | os.PathLike[str], *fields: Any, **request: Any) -> Iterator[pa.RecordBatch]:
    """The messages of the store at ``path`` as record batches: queue by queue (topics in
    order, then queue ids) when reading by topic or queue, else in commit-log order.
    ``fields``, ``request``: the fields of :class:`ReadRequest` (``topics``, ``queues``, ``start``,
    ``end``, ``columns``, ``committed_only``; ``batch_rows``, ``decompress``, ``reuse_buffers`` by
    name; see :func:`message_batch_reader` for the last)."""
    return _batches(path, ReadRequest(*fields, **request))


def message_batch_reader(path: str | os.PathLike[str], *fields: Any, **request: Any) -> pa.RecordBatchReader:
    """:func:`iter_message_batches` as a ``pyarrow.RecordBatchReader``, for callers that take
    batches one by one: a walk builds each batch in the buffers of the batch before once that
    one is gone (``reuse_buffers``, faulting fresh pages in once instead of per batch); a batch
    still held when the next is made keeps its buffers and the next gets new ones, so holding
    batches is safe, only not faster."""
    request.setdefault("reuse_buffers", True)
    req = ReadRequest(*fields, **request)
    assert isinstance(req.columns, tuple)
    return pa.RecordBatchReader.from_batches(message_schema(req.columns), _batches(path, req))


def _batches(path: str | os.PathLike[str], req: ReadRequest) -> Iterator[pa.RecordBatch]:
    args = req.args
    schema = message_schema(args.columns)
    with open_store(path) as store:
        for rng in req.ranges(store):
            yield from read_range(store, rng, args, schema)


def read_messages(path: str | os.PathLike[str], *fields: Any, threads: int | None = None, **request: Any) -> pa.Table:
    """The messages of the store at ``path`` as one ``pyarrow.Table`` (see
    :func:`iter_message_batches`; the same :class:`ReadRequest` fields). Ranges are
    read on ``threads`` threads (default: the CPU count, at most 8); the kernels release the
    GIL, and a walk of fewer commit-log files than threads is cut at record starts so that
    each thread has its share. Rows stay in the order of the ranges."""
    req = ReadRequest(*fields, **request)
    args = req.args
    schema = message_schema(args.columns)
    with open_store(path) as store:
        ranges = req.ranges(store)
        workers = threads if threads is not None else min(os.cpu_count() or 1, 8)
        if workers > 1:
            ranges = thread_pieces(store, ranges, workers)
        workers = min(workers, len(ranges))

        def one(rng: QueueRange | LogRange) -> list[pa.RecordBatch]:
            return list(read_alone(store, rng, args, schema))

        if workers > 1:
            with ThreadPoolExecutor(workers, thread_name_prefix="rocketmq-read") as pool:
                parts = list(pool.map(one, ranges))
        else:
            parts = [one(r) for r in ranges]
    return pa.Table.from_batches([b for p in parts for b in p], schema=schema)


# A walk is cut for threads into pieces of at least this many bytes (smaller logs are read
# whole: a piece costs a look in every consume queue and a thread hand-off).
MIN_PIECE_BYTES = 32 << 20


def thread_pieces(
    store: MessageStore, ranges: Sequence[QueueRange | LogRange], workers: int, min_bytes: int | None = None
) -> Sequence[QueueRange | LogRange]:
    """``ranges`` with each commit-log range cut at record starts (``split_log_range``) into
    pieces of about a ``2 * workers``-th of the walk, so that ``workers`` threads end together
    (a 10 M-message log is two 1 GiB files and a part of a third). Queue ranges and DLedger
    logs are left as they are."""
    logs = [r for r in ranges if isinstance(r, LogRange)]
    if not logs or len(logs) != len(ranges):
        return ranges
    total = sum(r.end - r.start for r in logs)
    piece = max(-(-total // (2 * workers)), MIN_PIECE_BYTES if min_bytes is None else min_bytes)
    return [p for r in logs for p in split_log_range(store, r, piece)]


def read_alone(
    store: MessageStore, rng: QueueRange | LogRange, args: ReadArgs = ReadArgs(), schema: pa.Schema | None = None
) -> Iterator[pa.RecordBatch]:
    """:func:`read_range`, mapping the range's own files (as a Spark partition does) when it
    can: reads of the opened store's files hold its read lock for a window at a time, so
    threads reading through it take turns."""
    if isinstance(rng, LogRange):
        file = log_file_of(store, rng)
        if file is not None:
            return read_log_file(file, rng, args, schema)
    else:
        files = queue_files_of(store, rng)
        if files is not None:
            return read_queue_files(files, rng, args, schema)
    return read_range(store, rng, args, schema)
