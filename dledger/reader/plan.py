"""Read planning: a snapshot of each node directory (begin, valid end, committed index) and
the cut of the requested range into :class:`Segment`\\ s, each a run of entries inside one data
file located through the index file. Only the index files and the checkpoint are read here,
plus the entries at the tail that planning checks are whole."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from dledger._ext import load as _load_ext
from dledger.codes import ResponseCode
from dledger.errors import CorruptionError, DLedgerError
from dledger.reader.files import IndexFiles, SegmentFiles, first_true
from dledger.reader.schema import NotAStoreError, StoreNotFoundError, arg_error, arrow_schema, check_columns
from dledger.store.layout import (
    CURRENT_MAGIC,
    DATA_DIR,
    INDEX_DIR,
    INDEX_DTYPE,
    INDEX_UNIT_SIZE,
    MAGIC_1,
    is_store_dir,
    read_checkpoint,
)

_codec = _load_ext("codec")

log = logging.getLogger(__name__)

NODE_DIR_PREFIX = "dledger-"
# How far back from the last index unit planning looks for a valid entry (a torn tail).
_TAIL_WALK_LIMIT = 4096


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


def _pos_at_least(index: IndexFiles, bound: int) -> Callable[[int], bool]:
    return lambda i: index.sound(i).pos >= bound


class NodeSnapshot:
    """One node directory as of one moment: its begin, valid end and committed index.

    The checkpoint is read before the index, so the committed index it names is already in
    the index (a writer appends data, then the index unit, and only then checkpoints).
    """

    def __init__(self, name: str, path: Path) -> None:
        self.name = name
        self.path = path
        self.committed: int | None = self._read_committed()
        self.data = SegmentFiles(path / DATA_DIR)
        self.index = IndexFiles(path / INDEX_DIR)
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
        written_end = first_true(begin + 1, self.index.end_unit, lambda i: not self._written(i)) - 1
        end = written_end
        while end >= begin and not self._entry_valid(end):
            if written_end - end >= _TAIL_WALK_LIMIT:
                raise CorruptionError(
                    f"{self.path}: none of the last {_TAIL_WALK_LIMIT} entries the index names is valid",
                    file=str(self.path / DATA_DIR),
                    offset=-1,
                    index=end,
                )
            end -= 1
        if end < written_end:
            log.warning(
                "%s: entries %d..%d named by the index are torn or unwritten; reading up to %d",
                self.path,
                end + 1,
                written_end,
                end,
            )
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

    def segments(
        self, first: int, last: int, max_bytes: int = 0, term_min: int | None = None, term_max: int | None = None
    ) -> list[Segment]:
        """Cut entries ``first..last`` (clamped to the store) into segments, one per data file,
        or per ``max_bytes`` of a file when that is positive. Only the index is read."""
        first = max(first, self.begin)
        last = min(last, self.end)
        if first > last:
            return []
        idx = self.index
        if term_min is not None:  # terms never decrease along the log: a term range is an index range
            first = first_true(first, last + 1, lambda i: idx.sound(i).term >= term_min)
        if term_max is not None:
            last = first_true(first, last + 1, lambda i: idx.sound(i).term > term_max) - 1
        out: list[Segment] = []
        i = first
        while i <= last:
            u = idx.sound(i)
            k = self.data.locate(u.pos)
            if k < 0:
                raise DLedgerError(
                    ResponseCode.DISK_ERROR,
                    f"{self.path}: entry {i} is at position {u.pos}, which no data file holds "
                    "(deleted by retention while planning?)",
                )
            file_end = self.data.starts[k] + self.data.file_size
            bound = file_end if max_bytes <= 0 else min(file_end, u.pos + max_bytes)
            j = first_true(i + 1, last + 1, _pos_at_least(idx, bound)) - 1
            v = idx.sound(j)
            if v.pos + v.size > file_end:
                raise CorruptionError(
                    f"{self.path}: index unit of entry {j} (pos {v.pos}, size {v.size}) runs past the end "
                    f"of data file {self.data.paths[k]}",
                    file=self.data.paths[k],
                    offset=v.pos - self.data.starts[k],
                    index=j,
                )
            out.append(
                Segment(
                    node=self.name,
                    node_dir=str(self.path),
                    data_file=self.data.paths[k],
                    file_from_offset=self.data.starts[k],
                    first_index=i,
                    last_index=j,
                    start_pos=u.pos,
                    end_pos=v.pos + v.size,
                    first_term=u.term,
                    last_term=v.term,
                    stable_through=self.stable_through,
                )
            )
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
    return name[len(NODE_DIR_PREFIX) :] if name.startswith(NODE_DIR_PREFIX) else name


PathArg = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


def resolve_nodes(path: PathArg) -> list[tuple[str, Path]]:
    """``(node name, node directory)`` for a node directory, a store base directory holding
    ``dledger-<id>`` node directories, or a list of either."""
    paths = [path] if isinstance(path, str | os.PathLike) else list(path)
    if not paths:
        raise arg_error("no path given: pass a dledger-<id> node directory or a store base directory")
    out: list[tuple[str, Path]] = []
    for raw in paths:
        out += _nodes_at(raw)
    return _unique(out)


def _nodes_at(raw: object) -> list[tuple[str, Path]]:
    """The node directories one path names: itself, or those under it."""
    if not isinstance(raw, str | os.PathLike):
        raise arg_error(f"path {raw!r} is not a string or path")
    p = Path(raw)
    if not p.exists():
        raise StoreNotFoundError(f"{p}: no such file or directory")
    if not p.is_dir():
        raise NotAStoreError(
            f"{p} is a file; point at a dledger-<id> node directory or the store base directory that holds them"
        )
    if is_store_dir(p):
        return [(_node_name(p), p)]
    nodes = sorted(c for c in p.iterdir() if c.is_dir() and is_store_dir(c))
    if not nodes:
        raise NotAStoreError(
            f"{p} is not a dledger store: it has no data/ or index/ directory and no "
            "dledger-<id> node directories under it"
        )
    return [(_node_name(c), c) for c in nodes]


def _unique(nodes: list[tuple[str, Path]]) -> list[tuple[str, Path]]:
    """Each directory once (however it was named); two directories of one node name refused."""
    seen: set[Path] = set()
    unique: list[tuple[str, Path]] = []
    for name, p in nodes:
        key = p.resolve()
        if key not in seen:
            seen.add(key)
            unique.append((name, p))
    names = [n for n, _ in unique]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise arg_error(f"node name(s) {', '.join(dup)} appear in more than one directory; read them separately")
    return unique


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
        raise arg_error(f"{name} must be an int, got {value!r}")
    if value < 0:
        raise arg_error(f"{name} must be >= 0, got {value}")
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
