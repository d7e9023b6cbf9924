"""The log of a DLedger store on disk as Arrow data, without a running node.

``read_table(path)`` returns a ``pyarrow.Table`` (for pandas, polars, DuckDB, ...);
``iter_batches(path)`` yields ``pyarrow.RecordBatch``es. The Spark data source
(``dledger.spark``) plans and reads with the same functions: ``plan_read`` cuts the log into
:class:`Segment`\\ s (a run of entries inside one data file, located through the index file)
and ``read_segment`` turns one into record batches.

How a read works: the batch scan kernel walks the entry headers of a data file straight from
its mmap into numpy arrays (validating each entry as DLedger's recovery does), the gather
kernel copies the bodies back to back, and the arrays become Arrow buffers. There is no
Python object per entry.

What is read: entries from the begin index (the first entry of the first data file) up to
the committed index of the ``checkpoint`` file, or, when the store has no checkpoint (a
store written by the Java DLedger, which writes one only on shutdown or flush) or with
``committed_only=False``, up to the last entry the index file names whose data is valid.
The range is fixed when the read is planned, so a store being appended to meanwhile is read
as of that moment, and every returned entry passed the scan's checks (structure, position,
index continuity, non-decreasing term and, when recorded, the body CRC).

Schema: ``index long, term long, pos long, magic int, body_crc int, body binary``, plus
``node string`` when more than one node directory is read. ``body_crc`` is the stored
unsigned CRC32 reinterpreted as a signed 32-bit int (Spark has no unsigned int);
``& 0xFFFFFFFF`` gives it back. ``end_index`` is inclusive, like DLedger's ledgerEndIndex.
"""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from dledger._ext import load as _load_ext
from dledger.codes import ResponseCode
from dledger.errors import CorruptionError, DLedgerError
from dledger.store.layout import (
    CURRENT_MAGIC,
    DATA_DIR,
    INDEX_DIR,
    INDEX_DTYPE,
    INDEX_UNIT_SIZE,
    MAGIC_1,
    check_one_size,
    is_store_dir,
    list_segments,
    read_checkpoint,
)

_codec = _load_ext("codec")
_gather = _load_ext("gather")

log = logging.getLogger(__name__)

__all__ = [
    "COLUMNS",
    "DEFAULT_BATCH_ROWS",
    "DROPMALFORMED",
    "FAILFAST",
    "MalformedEntry",
    "NodeSnapshot",
    "NotAStoreError",
    "ReadPlan",
    "Segment",
    "StoreNotFoundError",
    "arrow_schema",
    "iter_batches",
    "plan_read",
    "read_segment",
    "read_table",
    "resolve_nodes",
]

COLUMNS = ("index", "term", "pos", "magic", "body_crc", "body")
NODE_COLUMN = "node"
_TYPES: dict[str, pa.DataType] = {
    "index": pa.int64(),
    "term": pa.int64(),
    "pos": pa.int64(),
    "magic": pa.int32(),
    "body_crc": pa.int32(),
    "body": pa.binary(),
    NODE_COLUMN: pa.string(),
}

FAILFAST = "FAILFAST"
DROPMALFORMED = "DROPMALFORMED"
MODES = (FAILFAST, DROPMALFORMED)

NODE_DIR_PREFIX = "dledger-"

# 64 Ki rows of 100-byte bodies is ~6.5 MB a batch: big enough that the per-batch cost
# (a few Python calls) vanishes, small enough to stay in cache between scan and gather.
DEFAULT_BATCH_ROWS = 1 << 16
# A batch also stops at this many bytes of entries, far below the 2 GiB an Arrow binary
# column can hold, so large bodies cannot make a batch (or a Spark task) balloon.
MAX_BATCH_BYTES = 64 << 20
# How far back from the last index unit planning looks for a valid entry (a torn tail).
_TAIL_WALK_LIMIT = 4096


class StoreNotFoundError(DLedgerError, FileNotFoundError):
    """The path given to the reader does not exist."""

    def __init__(self, message: str) -> None:
        super().__init__(ResponseCode.UNEXPECTED_ARGUMENT, message)


class NotAStoreError(DLedgerError):
    """The path exists but holds no dledger node directory."""

    def __init__(self, message: str) -> None:
        super().__init__(ResponseCode.UNEXPECTED_ARGUMENT, message)


def _arg_error(message: str) -> DLedgerError:
    return DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, message)


# -- segment files ------------------------------------------------------------------------


class _Unit(NamedTuple):
    magic: int
    pos: int
    size: int
    entry_index: int
    term: int


def _map(path: str) -> mmap.mmap | None:
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return None
        return mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)


class _Files:
    """The segment files of one directory (``data/`` or ``index/``), mapped read-only on demand.

    Names and sizes are listed once; a writer creating its next file meanwhile leaves a last
    file that is empty or short, which is left out (nothing in it can be committed yet).
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.starts: list[int] = []
        self.paths: list[str] = []
        self.file_size = 0
        self._maps: dict[int, mmap.mmap] = {}
        files = list_segments(directory)
        if not files:
            return
        # A file being created is shorter than the segment size, never longer.
        size = max(f.size for f in files)
        while files and files[-1].size != size:
            log.debug("%s: leaving out %s (%d bytes, segment size %d): being created", directory,
                      files[-1].path, files[-1].size, size)
            files.pop()
        if size == 0:
            return
        check_one_size(directory, files)
        self.file_size = size
        self.starts = [f.offset for f in files]
        self.paths = [f.path for f in files]

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def end(self) -> int:
        """The absolute offset just after the last file."""
        return self.starts[-1] + self.file_size if self.starts else 0

    def locate(self, offset: int) -> int:
        """The number of the file holding absolute ``offset``, or -1."""
        if not self.starts or offset < self.starts[0]:
            return -1
        k = (offset - self.starts[0]) // self.file_size
        if k < len(self.starts) and self.starts[k] <= offset < self.starts[k] + self.file_size:
            return k
        for k, start in enumerate(self.starts):  # a gap in the files (never in a sound store)
            if start <= offset < start + self.file_size:
                return k
        return -1

    def map(self, k: int) -> mmap.mmap:
        mm = self._maps.get(k)
        if mm is None:
            try:
                mapped = _map(self.paths[k])
            except FileNotFoundError as exc:
                raise DLedgerError(ResponseCode.DISK_ERROR,
                                   f"{self.paths[k]}: deleted while being read (retention?)") from exc
            if mapped is None:
                raise DLedgerError(ResponseCode.DISK_ERROR, f"{self.paths[k]}: empty segment file")
            mm = self._maps[k] = mapped
        return mm

    def close(self) -> None:
        for mm in self._maps.values():
            try:
                mm.close()
            except BufferError:  # an Arrow/numpy view still uses it; it closes when collected
                pass
        self._maps.clear()


class _Index(_Files):
    """The index files: entry ``i``'s 32-byte unit is at absolute offset ``i * 32``."""

    @property
    def first_unit(self) -> int:
        return self.starts[0] // INDEX_UNIT_SIZE if self.starts else 0

    @property
    def end_unit(self) -> int:
        return self.end // INDEX_UNIT_SIZE

    def unit(self, i: int) -> _Unit | None:
        off = i * INDEX_UNIT_SIZE
        k = self.locate(off)
        if k < 0:
            return None
        return _Unit(*_codec.decode_index(self.map(k), off - self.starts[k]))

    def sound(self, i: int) -> _Unit:
        """Entry ``i``'s index unit, which must be written and name entry ``i``."""
        u = self.unit(i)
        if u is None or not (MAGIC_1 <= u.magic <= CURRENT_MAGIC) or u.entry_index != i or u.pos < 0 or u.size <= 0:
            raise CorruptionError(
                f"{self.directory}: index unit of entry {i} is missing or corrupt ({u}); open the store "
                "read-write once (dledger verify / a node start) to rebuild the index from the data",
                file=str(self.directory), offset=i * INDEX_UNIT_SIZE, index=i,
            )
        return u


def _pos_at_least(index: _Index, bound: int) -> Callable[[int], bool]:
    return lambda i: index.sound(i).pos >= bound


def _first_true(lo: int, hi: int, pred: Callable[[int], bool]) -> int:
    """Smallest i in [lo, hi) with pred(i), for pred monotone (False...True); hi if none."""
    while lo < hi:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


# -- planning -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Segment:
    """A run of consecutive entries inside one data file: the unit of work (a Spark partition).

    Positions are absolute (DLedger's ``pos``); ``end_pos`` is just after the last entry.
    ``stable_through`` is the highest index that cannot change any more (the committed index,
    or the valid end of a store without checkpoint): an entry above it that fails the checks
    (a follower truncating its uncommitted tail) ends the read quietly instead of failing it.
    """

    node: str
    node_dir: str
    data_file: str
    file_from_offset: int
    first_index: int
    last_index: int
    start_pos: int
    end_pos: int
    first_term: int
    last_term: int
    stable_through: int

    @property
    def count(self) -> int:
        return self.last_index - self.first_index + 1

    @property
    def nbytes(self) -> int:
        return self.end_pos - self.start_pos


@dataclass(frozen=True, slots=True)
class MalformedEntry:
    """An entry that failed validation and was skipped (``mode="DROPMALFORMED"``).

    ``count`` is more than 1 when the entries after it could not be located either (the index
    units that would have told where they start are unusable), so the rest of the segment went.
    """

    node: str
    file: str
    offset: int
    index: int
    reason: str
    count: int = 1


class NodeSnapshot:
    """One node directory as of one moment: its begin, valid end and committed index.

    The checkpoint is read before the index, so the committed index it names is already in
    the index (a writer appends data, then the index unit, and only then checkpoints).
    """

    def __init__(self, name: str, path: Path) -> None:
        self.name = name
        self.path = path
        self.committed: int | None = self._read_committed()
        self.data = _Files(path / DATA_DIR)
        self.index = _Index(path / INDEX_DIR)
        self.begin = 0
        self.end = -1
        try:
            self._find_range()
        except BaseException:
            self.close()
            raise
        if self.committed is not None:
            self.committed = min(self.committed, self.end)

    def _read_committed(self) -> int | None:
        ckpt = read_checkpoint(self.path)
        return None if ckpt is None else ckpt.committed_index

    def _written(self, i: int) -> bool:
        u = self.index.unit(i)
        return u is not None and u.magic != 0

    def _find_range(self) -> None:
        if not len(self.data) or not len(self.index):
            return
        begin = self._begin()
        if begin < 0 or not self._written(begin):
            return
        # Written units are a prefix from the begin: the writer fills the index in order and
        # truncation zeroes what it cuts.
        written_end = _first_true(begin + 1, self.index.end_unit, lambda i: not self._written(i)) - 1
        end = written_end
        while end >= begin and not self._entry_valid(end):
            if written_end - end >= _TAIL_WALK_LIMIT:
                raise CorruptionError(
                    f"{self.path}: none of the last {_TAIL_WALK_LIMIT} entries the index names is valid",
                    file=str(self.path / DATA_DIR), offset=-1, index=end,
                )
            end -= 1
        if end < written_end:
            log.warning("%s: entries %d..%d named by the index are torn or unwritten; reading up to %d",
                        self.path, end + 1, written_end, end)
        self.begin, self.end = begin, end

    def _begin(self) -> int:
        """reviseLedgerBeginIndex: the first entry of the first data file."""
        first = self.data.starts[0]
        magic, _size, index, _term, pos, *_ = _codec.decode_header(self.data.map(0), 0)
        if magic == CURRENT_MAGIC and pos == first and index >= self.index.first_unit:
            u = self.index.unit(index)
            if u is not None and u.pos == first:
                return int(index)
        # The first file does not start with an entry (a follower rebuilt its log mid-file):
        # the first written unit that points into the data files.
        for k in range(len(self.index)):
            units = np.frombuffer(self.index.map(k), dtype=INDEX_DTYPE)
            hit = np.flatnonzero((units["magic"] != 0) & (units["pos"] >= first))
            if len(hit):
                return int(self.index.starts[k] // INDEX_UNIT_SIZE + hit[0])
        return -1

    def _entry_valid(self, i: int) -> bool:
        u = self.index.unit(i)
        if u is None or not (MAGIC_1 <= u.magic <= CURRENT_MAGIC) or u.entry_index != i:
            return False
        k = self.data.locate(u.pos)
        if k < 0:
            return False
        start = self.data.starts[k]
        rel = u.pos - start
        if rel + u.size > self.data.file_size:
            return False
        cols, _stop, _code = _codec.scan(self.data.map(k), start, rel, rel + u.size, i, -1, True, 1)
        return len(cols["index"]) == 1 and int(cols["term"][0]) == u.term and int(cols["size"][0]) == u.size

    @property
    def stable_through(self) -> int:
        return self.end if self.committed is None else self.committed

    def limit(self, committed_only: bool) -> int:
        """The last index a read may return."""
        if committed_only and self.committed is not None:
            return self.committed
        return self.end

    def segments(self, first: int, last: int, max_bytes: int = 0,
                 term_min: int | None = None, term_max: int | None = None) -> list[Segment]:
        """Cut entries ``first..last`` (clamped to the store) into segments, one per data file,
        or per ``max_bytes`` of a file when that is positive. Only the index is read."""
        first = max(first, self.begin)
        last = min(last, self.end)
        if first > last:
            return []
        idx = self.index
        if term_min is not None:  # terms never decrease along the log: a term range is an index range
            first = _first_true(first, last + 1, lambda i: idx.sound(i).term >= term_min)
        if term_max is not None:
            last = _first_true(first, last + 1, lambda i: idx.sound(i).term > term_max) - 1
        out: list[Segment] = []
        i = first
        while i <= last:
            u = idx.sound(i)
            k = self.data.locate(u.pos)
            if k < 0:
                raise DLedgerError(ResponseCode.DISK_ERROR,
                                   f"{self.path}: entry {i} is at position {u.pos}, which no data file holds "
                                   "(deleted by retention while planning?)")
            file_end = self.data.starts[k] + self.data.file_size
            bound = file_end if max_bytes <= 0 else min(file_end, u.pos + max_bytes)
            j = _first_true(i + 1, last + 1, _pos_at_least(idx, bound)) - 1
            v = idx.sound(j)
            if v.pos + v.size > file_end:
                raise CorruptionError(
                    f"{self.path}: index unit of entry {j} (pos {v.pos}, size {v.size}) runs past the end "
                    f"of data file {self.data.paths[k]}",
                    file=self.data.paths[k], offset=v.pos - self.data.starts[k], index=j,
                )
            out.append(Segment(
                node=self.name, node_dir=str(self.path), data_file=self.data.paths[k],
                file_from_offset=self.data.starts[k], first_index=i, last_index=j, start_pos=u.pos,
                end_pos=v.pos + v.size, first_term=u.term, last_term=v.term,
                stable_through=self.stable_through,
            ))
            i = j + 1
        return out

    def close(self) -> None:
        self.data.close()
        self.index.close()

    def __enter__(self) -> NodeSnapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _node_name(path: Path) -> str:
    name = path.name
    return name[len(NODE_DIR_PREFIX):] if name.startswith(NODE_DIR_PREFIX) else name


PathArg = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


def resolve_nodes(path: PathArg) -> list[tuple[str, Path]]:
    """``(node name, node directory)`` for a node directory, a store base directory holding
    ``dledger-<id>`` node directories, or a list of either."""
    paths = [path] if isinstance(path, str | os.PathLike) else list(path)
    if not paths:
        raise _arg_error("no path given: pass a dledger-<id> node directory or a store base directory")
    out: list[tuple[str, Path]] = []
    for raw in paths:
        if not isinstance(raw, str | os.PathLike):
            raise _arg_error(f"path {raw!r} is not a string or path")
        p = Path(raw)
        if not p.exists():
            raise StoreNotFoundError(f"{p}: no such file or directory")
        if not p.is_dir():
            raise NotAStoreError(f"{p} is a file; point at a dledger-<id> node directory or the store "
                                 "base directory that holds them")
        if is_store_dir(p):
            out.append((_node_name(p), p))
            continue
        nodes = sorted(c for c in p.iterdir() if c.is_dir() and is_store_dir(c))
        if not nodes:
            raise NotAStoreError(f"{p} is not a dledger store: it has no data/ or index/ directory and no "
                                 "dledger-<id> node directories under it")
        out += [(_node_name(c), c) for c in nodes]
    seen: dict[Path, str] = {}
    unique: list[tuple[str, Path]] = []
    for name, p in out:
        key = p.resolve()
        if key in seen:
            continue
        seen[key] = name
        unique.append((name, p))
    names = [n for n, _ in unique]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise _arg_error(f"node name(s) {', '.join(dup)} appear in more than one directory; "
                         "read them separately")
    return unique


def arrow_schema(columns: Sequence[str] = COLUMNS, node_column: bool = False) -> pa.Schema:
    names = list(columns) + ([NODE_COLUMN] if node_column and NODE_COLUMN not in columns else [])
    return pa.schema([pa.field(n, _TYPES[n], nullable=False) for n in names])


def check_columns(columns: Iterable[str] | None, node_column: bool) -> tuple[str, ...]:
    if columns is None:
        return COLUMNS + ((NODE_COLUMN,) if node_column else ())
    if isinstance(columns, str):
        raise _arg_error(f"columns must be a list of names, not the string {columns!r}")
    cols = tuple(columns)
    known = COLUMNS + ((NODE_COLUMN,) if node_column else ())
    unknown = [c for c in cols if c not in known]
    if unknown:
        hint = " (the node column exists only when several nodes are read)" if NODE_COLUMN in unknown else ""
        raise _arg_error(f"unknown column(s) {', '.join(map(repr, unknown))}; the columns are "
                         f"{', '.join(known)}{hint}")
    if len(set(cols)) != len(cols):
        raise _arg_error(f"column listed twice in {list(cols)}")
    return cols


def check_mode(mode: str) -> str:
    m = str(mode).upper()
    if m not in MODES:
        raise _arg_error(f"unknown mode {mode!r}; use FAILFAST (a corrupt entry fails the read) or "
                         "DROPMALFORMED (it is skipped and counted)")
    return m


@dataclass(slots=True)
class ReadPlan:
    """What a read will return: the nodes as of planning and the segments to read, in log order."""

    nodes: list[tuple[str, Path]]
    node_column: bool
    columns: tuple[str, ...]
    segments: list[Segment] = field(default_factory=list)
    limits: dict[str, int] = field(default_factory=dict)

    @property
    def schema(self) -> pa.Schema:
        return arrow_schema(self.columns)


def _opt_index(name: str, value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise _arg_error(f"{name} must be an int, got {value!r}")
    if value < 0:
        raise _arg_error(f"{name} must be >= 0, got {value}")
    return int(value)


def plan_read(
    path: PathArg,
    start_index: int | None = None,
    end_index: int | None = None,
    committed_only: bool = True,
    columns: Iterable[str] | None = None,
    *,
    max_partition_bytes: int = 0,
    term_min: int | None = None,
    term_max: int | None = None,
) -> ReadPlan:
    """Resolve ``path``, take a snapshot of every node and cut the range into segments."""
    start = _opt_index("start_index", start_index)
    end = _opt_index("end_index", end_index)
    nodes = resolve_nodes(path)
    node_column = len(nodes) > 1
    plan = ReadPlan(nodes=nodes, node_column=node_column, columns=check_columns(columns, node_column))
    for name, p in nodes:
        with NodeSnapshot(name, p) as snap:
            limit = snap.limit(committed_only)
            plan.limits[name] = limit
            last = limit if end is None else min(end, limit)
            first = snap.begin if start is None else start
            plan.segments += snap.segments(first, last, max_partition_bytes, term_min, term_max)
    return plan


# -- reading ------------------------------------------------------------------------------


def _body_array(buf: Any, offsets: np.ndarray, lengths: np.ndarray) -> pa.Array:
    data, value_offsets = _gather.gather(buf, offsets, lengths)
    return pa.Array.from_buffers(pa.binary(), len(lengths),
                                 [None, pa.py_buffer(value_offsets), pa.py_buffer(data)])


def _batch(buf: Any, cols: dict[str, np.ndarray], columns: Sequence[str], schema: pa.Schema,
           node: str) -> pa.RecordBatch:
    n = len(cols["index"])
    arrays: list[pa.Array] = []
    for name in columns:
        if name == "body":
            arrays.append(_body_array(buf, cols["body_offset"], cols["body_len"]))
        elif name == NODE_COLUMN:
            arrays.append(pa.repeat(pa.scalar(node, pa.string()), n))
        else:
            # Straight from the numpy buffer: pa.array() would detour through pyarrow's pandas
            # shim (and import pandas on first use).
            values = cols[name].view(np.int32) if name == "body_crc" else cols[name]
            arrays.append(pa.Array.from_buffers(_TYPES[name], n, [None, pa.py_buffer(values)]))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def read_segment(
    seg: Segment,
    columns: Sequence[str] = COLUMNS,
    *,
    batch_size: int = DEFAULT_BATCH_ROWS,
    mode: str = FAILFAST,
    verify_crc: bool = True,
    term_min: int | None = None,
    term_max: int | None = None,
    malformed: list[MalformedEntry] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Record batches of the entries of one segment, in index order.

    Each batch is at most ``batch_size`` rows and about ``MAX_BATCH_BYTES`` of entries; its
    byte range comes from the index, and the scan kernel checks every entry in it. An entry
    that fails raises :class:`CorruptionError` (file, offset, index) in FAILFAST mode; in
    DROPMALFORMED mode it is skipped, logged and appended to ``malformed``, and the read goes
    on at the next entry the index names.
    """
    if batch_size <= 0:
        raise _arg_error(f"batch_size must be positive, got {batch_size}")
    mode = check_mode(mode)
    schema = arrow_schema(columns)
    mm = _map(seg.data_file) if seg.count > 0 else None
    if mm is None:
        return
    index = _Index(Path(seg.node_dir) / INDEX_DIR)
    base = seg.file_from_offset
    try:
        try:
            mm.madvise(mmap.MADV_SEQUENTIAL, 0, 0)
        except (AttributeError, OSError):  # not on every platform
            pass
        expect, pos = seg.first_index, seg.start_pos
        while expect <= seg.last_index:
            want = min(batch_size, seg.last_index - expect + 1)
            stop_at = _batch_end(index, seg, expect, pos, want)
            while want > 1 and stop_at - pos > MAX_BATCH_BYTES:
                want = (want + 1) // 2
                stop_at = _batch_end(index, seg, expect, pos, want)
            cols, stop, code = _codec.scan(mm, base, pos - base, stop_at - base, expect, -1, verify_crc, want)
            n = len(cols["index"])
            if n:
                if term_min is not None or term_max is not None:
                    keep = np.ones(n, dtype=bool)
                    if term_min is not None:
                        keep &= cols["term"] >= term_min
                    if term_max is not None:
                        keep &= cols["term"] <= term_max
                    if not keep.all():
                        cols = {k: v[keep] for k, v in cols.items()}
                if len(cols["index"]):
                    yield _batch(mm, cols, columns, schema, seg.node)
                expect += n
                pos = base + stop
            if n == want:
                continue
            # The entry `expect` at `pos` failed the checks.
            reason = _codec.STOP_NAMES.get(code, str(code))
            offset = pos - base
            if expect > seg.stable_through:
                log.info("%s: uncommitted entry %d at offset %d is %s (truncated meanwhile?); "
                         "the read stops there", seg.data_file, expect, offset, reason)
                return
            if mode == FAILFAST:
                raise CorruptionError(
                    f"{seg.data_file}: corrupt entry {expect} at offset {offset} ({reason}); "
                    "read with mode DROPMALFORMED to skip it",
                    file=seg.data_file, offset=offset, index=expect,
                )
            nxt = _resync(index, seg, expect + 1, pos)
            count = (nxt if nxt is not None else seg.last_index + 1) - expect
            bad = MalformedEntry(seg.node, seg.data_file, offset, expect, reason, count)
            log.warning("dropped %d malformed entr%s from %d at %s offset %d (%s)", count,
                        "y" if count == 1 else "ies", expect, seg.data_file, offset, reason)
            if malformed is not None:
                malformed.append(bad)
            if nxt is None:
                return
            expect, pos = nxt, index.sound(nxt).pos
    finally:
        index.close()
        try:
            mm.close()
        except BufferError:
            pass


def _batch_end(index: _Index, seg: Segment, first: int, pos: int, count: int) -> int:
    """Where entries ``first .. first+count-1`` end, from the index (the segment end if the
    index unit is unusable; the scan then finds what is wrong)."""
    last = first + count - 1
    if last >= seg.last_index:
        return seg.end_pos
    u = index.unit(last)
    if u is None or u.entry_index != last or not (pos < u.pos + u.size <= seg.end_pos):
        return seg.end_pos
    return u.pos + u.size


def _resync(index: _Index, seg: Segment, nxt: int, bad_pos: int) -> int | None:
    """The next entry after a bad one whose index unit can be trusted to say where it starts."""
    if nxt > seg.last_index:
        return None
    u = index.unit(nxt)
    if u is None or u.entry_index != nxt or not (MAGIC_1 <= u.magic <= CURRENT_MAGIC):
        return None
    if not (bad_pos < u.pos < seg.end_pos):
        return None
    return nxt


@dataclass(slots=True)
class _ReadArgs:
    columns: tuple[str, ...]
    batch_size: int
    mode: str
    verify_crc: bool
    malformed: list[MalformedEntry] | None


def iter_batches(
    path: PathArg,
    start_index: int | None = None,
    end_index: int | None = None,
    committed_only: bool = True,
    columns: Iterable[str] | None = None,
    *,
    batch_size: int = DEFAULT_BATCH_ROWS,
    mode: str = FAILFAST,
    verify_crc: bool = True,
    malformed: list[MalformedEntry] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The entries of the store at ``path`` as record batches, in log order (node by node).

    ``path``: a node directory (``dledger-<id>/``), a store base directory holding node
    directories, or a list of either. ``start_index``/``end_index`` (inclusive) narrow the
    range. ``committed_only`` stops at the checkpoint's committed index (without a checkpoint,
    at the last valid entry either way). ``columns`` picks and orders columns. ``mode`` is
    FAILFAST or DROPMALFORMED (skipped entries are appended to ``malformed``). The range is
    planned when the first batch is asked for.
    """
    plan = plan_read(path, start_index, end_index, committed_only, columns)
    args = _ReadArgs(plan.columns, batch_size, check_mode(mode), verify_crc, malformed)
    for seg in plan.segments:
        yield from read_segment(seg, args.columns, batch_size=args.batch_size, mode=args.mode,
                                verify_crc=args.verify_crc, malformed=args.malformed)


def read_table(
    path: PathArg,
    start_index: int | None = None,
    end_index: int | None = None,
    committed_only: bool = True,
    columns: Iterable[str] | None = None,
    *,
    batch_size: int = DEFAULT_BATCH_ROWS,
    mode: str = FAILFAST,
    verify_crc: bool = True,
    malformed: list[MalformedEntry] | None = None,
    threads: int | None = None,
) -> pa.Table:
    """The entries of the store at ``path`` as one ``pyarrow.Table`` (see :func:`iter_batches`).

    Segments are read on ``threads`` threads (default: the CPU count, at most 8); the kernels
    release the GIL, so they run in parallel. Rows stay in log order.
    """
    plan = plan_read(path, start_index, end_index, committed_only, columns)
    mode = check_mode(mode)
    if batch_size <= 0:
        raise _arg_error(f"batch_size must be positive, got {batch_size}")

    def one(seg: Segment) -> tuple[list[pa.RecordBatch], list[MalformedEntry]]:
        dropped: list[MalformedEntry] = []
        batches = list(read_segment(seg, plan.columns, batch_size=batch_size, mode=mode,
                                    verify_crc=verify_crc, malformed=dropped))
        return batches, dropped

    workers = min(threads if threads is not None else min(os.cpu_count() or 1, 8), len(plan.segments))
    if workers > 1:
        with ThreadPoolExecutor(workers, thread_name_prefix="dledger-read") as pool:
            parts = list(pool.map(one, plan.segments))
    else:
        parts = [one(s) for s in plan.segments]
    if malformed is not None:  # in log order, whichever thread found them
        for _, dropped in parts:
            malformed.extend(dropped)
    return pa.Table.from_batches([b for part, _ in parts for b in part], schema=plan.schema)
