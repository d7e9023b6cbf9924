"""Reading planned segments into Arrow: the scan kernel walks the entry headers of a data file
straight from its mmap into numpy arrays (validating each entry as DLedger's recovery does),
the gather kernel copies the bodies back to back, and the arrays become Arrow buffers. There
is no Python object per entry."""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from dledger._ext import load as _load_ext
from dledger.errors import CorruptionError
from dledger.reader.files import IndexFiles, close_map, map_file
from dledger.reader.plan import PathArg, Segment, plan_read
from dledger.reader.schema import (
    COLUMNS,
    FAILFAST,
    NODE_COLUMN,
    TYPES,
    arg_error,
    arrow_schema,
    check_mode,
)
from dledger.store.layout import CURRENT_MAGIC, INDEX_DIR, MAGIC_1

_codec = _load_ext("codec")
_gather = _load_ext("gather")

log = logging.getLogger(__name__)

# Big enough that the per-batch cost (a few Python calls) vanishes, small enough that a batch
# of small bodies stays in cache between scan and gather.
DEFAULT_BATCH_ROWS = 1 << 16
# A batch also stops at this many bytes of entries, far below the 2 GiB an Arrow binary
# column can hold, so large bodies cannot make a batch (or a Spark task) balloon.
MAX_BATCH_BYTES = 64 << 20


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


def _body_array(buf: Any, offsets: np.ndarray, lengths: np.ndarray) -> pa.Array:
    data, value_offsets = _gather.gather(buf, offsets, lengths)
    return pa.Array.from_buffers(pa.binary(), len(lengths), [None, pa.py_buffer(value_offsets), pa.py_buffer(data)])


def _batch(
    buf: Any, cols: dict[str, np.ndarray], columns: Sequence[str], schema: pa.Schema, node: str
) -> pa.RecordBatch:
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
            arrays.append(pa.Array.from_buffers(TYPES[name], n, [None, pa.py_buffer(values)]))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _in_terms(cols: dict[str, np.ndarray], term_min: int | None, term_max: int | None) -> dict[str, np.ndarray]:
    """The rows of ``cols`` whose term is in [term_min, term_max] (either bound may be None)."""
    if term_min is None and term_max is None:
        return cols
    keep = np.ones(len(cols["index"]), dtype=bool)
    if term_min is not None:
        keep &= cols["term"] >= term_min
    if term_max is not None:
        keep &= cols["term"] <= term_max
    return cols if keep.all() else {k: v[keep] for k, v in cols.items()}


@dataclass(slots=True)
class _ReadArgs:
    columns: tuple[str, ...]
    batch_size: int
    mode: str
    verify_crc: bool
    malformed: list[MalformedEntry] | None
    term_min: int | None = None
    term_max: int | None = None


class _SegmentRead:
    """One read of one segment: batches planned from the index, scanned from the mapped file."""

    def __init__(self, seg: Segment, mm: mmap.mmap, index: IndexFiles, args: _ReadArgs) -> None:
        self.seg = seg
        self.mm = mm
        self.index = index
        self.args = args
        self.schema = arrow_schema(args.columns)
        self.base = seg.file_from_offset

    def batches(self) -> Iterator[pa.RecordBatch]:
        seg, args, base = self.seg, self.args, self.base
        expect, pos = seg.first_index, seg.start_pos
        while expect <= seg.last_index:
            want, stop_at = self._batch_range(expect, pos)
            cols, stop, code = _codec.scan(self.mm, base, pos - base, stop_at - base, expect, -1, args.verify_crc, want)
            n = len(cols["index"])
            if n:
                cols = _in_terms(cols, args.term_min, args.term_max)
                if len(cols["index"]):
                    yield _batch(self.mm, cols, args.columns, self.schema, seg.node)
                expect += n
                pos = base + stop
            if n == want:
                continue
            # The entry `expect` at `pos` failed the checks.
            nxt = self._skip_bad(expect, pos, code)
            if nxt is None:
                return
            expect, pos = nxt, self.index.sound(nxt).pos

    def _batch_range(self, first: int, pos: int) -> tuple[int, int]:
        """How many entries the next batch takes and where they end: ``batch_size`` of them,
        halved until they fit MAX_BATCH_BYTES."""
        want = min(self.args.batch_size, self.seg.last_index - first + 1)
        stop_at = self._batch_end(first, pos, want)
        while want > 1 and stop_at - pos > MAX_BATCH_BYTES:
            want = (want + 1) // 2
            stop_at = self._batch_end(first, pos, want)
        return want, stop_at

    def _batch_end(self, first: int, pos: int, count: int) -> int:
        """Where entries ``first .. first+count-1`` end, from the index (the segment end if the
        index unit is unusable; the scan then finds what is wrong)."""
        seg = self.seg
        last = first + count - 1
        if last >= seg.last_index:
            return seg.end_pos
        u = self.index.unit(last)
        if u is None or u.entry_index != last or not (pos < u.pos + u.size <= seg.end_pos):
            return seg.end_pos
        return u.pos + u.size

    def _skip_bad(self, bad: int, pos: int, code: int) -> int | None:
        """Entry ``bad`` at ``pos`` failed: end the read quietly (it was not committed), raise
        (FAILFAST), or record it and return the next entry to read (None: none)."""
        seg = self.seg
        reason = _codec.STOP_NAMES.get(code, str(code))
        offset = pos - self.base
        if bad > seg.stable_through:
            log.info(
                "%s: uncommitted entry %d at offset %d is %s (truncated meanwhile?); the read stops there",
                seg.data_file,
                bad,
                offset,
                reason,
            )
            return None
        if self.args.mode == FAILFAST:
            raise CorruptionError(
                f"{seg.data_file}: corrupt entry {bad} at offset {offset} ({reason}); "
                "read with mode DROPMALFORMED to skip it",
                file=seg.data_file,
                offset=offset,
                index=bad,
            )
        nxt = self._resync(bad + 1, pos)
        count = (nxt if nxt is not None else seg.last_index + 1) - bad
        log.warning(
            "dropped %d malformed entr%s from %d at %s offset %d (%s)",
            count,
            "y" if count == 1 else "ies",
            bad,
            seg.data_file,
            offset,
            reason,
        )
        if self.args.malformed is not None:
            self.args.malformed.append(MalformedEntry(seg.node, seg.data_file, offset, bad, reason, count))
        return nxt

    def _resync(self, nxt: int, bad_pos: int) -> int | None:
        """The next entry after a bad one whose index unit can be trusted to say where it starts."""
        if nxt > self.seg.last_index:
            return None
        u = self.index.unit(nxt)
        if u is None or u.entry_index != nxt or not (MAGIC_1 <= u.magic <= CURRENT_MAGIC):
            return None
        if not (bad_pos < u.pos < self.seg.end_pos):
            return None
        return nxt


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
        raise arg_error(f"batch_size must be positive, got {batch_size}")
    args = _ReadArgs(tuple(columns), batch_size, check_mode(mode), verify_crc, malformed, term_min, term_max)
    mm = map_file(seg.data_file) if seg.count > 0 else None
    if mm is None:
        return
    index = IndexFiles(Path(seg.node_dir) / INDEX_DIR)
    try:
        try:
            mm.madvise(mmap.MADV_SEQUENTIAL, 0, 0)
        except (AttributeError, OSError):  # not on every platform
            pass
        yield from _SegmentRead(seg, mm, index, args).batches()
    finally:
        index.close()
        close_map(mm)


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
        yield from read_segment(
            seg,
            args.columns,
            batch_size=args.batch_size,
            mode=args.mode,
            verify_crc=args.verify_crc,
            malformed=args.malformed,
        )


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
        raise arg_error(f"batch_size must be positive, got {batch_size}")

    def one(seg: Segment) -> tuple[list[pa.RecordBatch], list[MalformedEntry]]:
        dropped: list[MalformedEntry] = []
        batches = list(
            read_segment(seg, plan.columns, batch_size=batch_size, mode=mode, verify_crc=verify_crc, malformed=dropped)
        )
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
