"""DLedgerMmapFileStore: data and index segment files, checkpoint, recovery, flush, retention.

Layout of a node directory (spec §2.2), byte-compatible with DLedger 0.2.x::

    <node dir>/data/<20-digit offset>    entries (48-byte header + body), blank record at file end
    <node dir>/index/<20-digit offset>   32-byte index units, entry i at byte i*32
    <node dir>/checkpoint                endIndex=..., committedIndex=...

The store has one writer (the thread that appends, truncates and resets); a background
thread flushes, writes the checkpoint and applies retention. Structural changes (truncate,
reset, retention, close) and flushes exclude each other through one lock, because a flush
runs msync without the GIL over a mapping that a truncate could otherwise unmap.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dledger._ext import require_built
from dledger.codes import ResponseCode
from dledger.config import DLedgerConfig
from dledger.errors import CorruptionError, DLedgerError, check
from dledger.store.entry import Entry
from dledger.store.layout import (
    BODY_OFFSET,
    DATA_DIR,
    HEADER_SIZE,
    INDEX_DIR,
    INDEX_DTYPE,
    INDEX_UNIT_SIZE,
    MIN_BLANK_LEN,
    check_one_size,
    is_store_dir,
    list_segments,
    read_checkpoint,
    read_index_units,
    segment_size_of,
    write_checkpoint,
)

require_built()
from dledger._ext import codec as _codec  # noqa: E402
from dledger._ext import segment as _segment  # noqa: E402

_segment.set_entry_type(Entry)

log = logging.getLogger(__name__)

# Recovery scans at most this many entries per kernel call, so its memory stays bounded.
_SCAN_CHUNK = 1 << 20
# How much of a torn tail recovery zeroes: enough to wipe the torn header, without touching
# (and so allocating) the sparse rest of a 1 GiB file.
_TORN_ZERO_BYTES = 4096
# The service keeps this much past the write position faulted in (prefault), in steps of
# PREFAULT_STEP per hold of the store lock. Data at 200 MB/s fills 2 MB per 10 ms tick. Data
# pages are prefaulted only while most appended bytes go through the mapping (single entries):
# batches reach the file by pwritev, which fills the page cache without a fault, and a page
# faulted in ahead of them would only cost a zero-fill (see _ext/segment.pyx).
PREFAULT_DATA_AHEAD = 8 << 20
# drop_behind hands back at least this much at a time (fewer syscalls) and at most this much
# per tick (the store lock is held meanwhile).
DROP_STEP_MIN = 4 << 20
DROP_STEP_MAX = 64 << 20
PREFAULT_INDEX_AHEAD = 1 << 20
PREFAULT_STEP = 256 << 10
# A service failure that repeats is logged at most this often (seconds).
SERVICE_REPORT_S = 10.0


@dataclass(slots=True)
class RecoveryReport:
    """What opening the store found and did."""

    scanned_entries: int = 0
    scanned_bytes: int = 0
    cut_file: str | None = None
    cut_offset: int = -1
    cut_entries: int = 0
    cut_reason: str = ""
    index_rewritten_from: int = -1


def _set_end(files: object, offset: int) -> None:
    """Make the file holding ``offset`` end there (no zeroing)."""
    for f in files.files:  # type: ignore[attr-defined]
        if f.file_from_offset <= offset < f.file_from_offset + f.file_size:
            f.wrote_position = offset - f.file_from_offset
            f.flushed_position = min(f.flushed_position, f.wrote_position)


class MmapFileStore:
    """The file store of one node directory. See the module docstring for the layout.

    ``sync=True`` makes every append durable (msync of data and index) before it returns;
    otherwise the background flush writes within ``flush_file_interval`` ms.
    ``truncate_corrupt=True`` cuts the log at a CRC mismatch found before the checkpoint
    instead of refusing to open. ``body_pos_patch`` is DLedgerCommitLog's AppendHook: leader
    appends write the body's own offset (``pos + 48``) at that byte of each body (EntryLog).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        config: DLedgerConfig | None = None,
        *,
        readonly: bool = False,
        create: bool = True,
        sync: bool | None = None,
        truncate_corrupt: bool = False,
        start_services: bool = True,
        body_pos_patch: int | None = None,
    ) -> None:
        self.config = config or DLedgerConfig()
        self.path = Path(path)
        self.readonly = readonly
        self.sync = self.config.sync if sync is None else sync
        self._lock = threading.RLock()
        self._closed = False
        self._committed = -1
        self._committed_pos = -1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_checkpoint = 0.0
        self._prefault_ok = True
        self._entries_flushed_at = 0.0
        self._dropped_to = 0  # data before this absolute offset was handed back (drop_behind)

        data_dir = Path(self.config.data_store_path) if self.config.data_store_path else self.path / DATA_DIR
        index_dir = self.path / INDEX_DIR
        self._open_dir(data_dir, index_dir, create)
        data_size = segment_size_of(data_dir) or self.config.mapped_file_size_for_entry_data
        index_size = self._index_segment_size(index_dir) or self.config.mapped_file_size_for_entry_index
        check(
            index_size % INDEX_UNIT_SIZE == 0,
            ResponseCode.UNEXPECTED_ARGUMENT,
            f"index segment size {index_size} is not a multiple of {INDEX_UNIT_SIZE}",
        )
        self.data_file_size = data_size
        self.index_file_size = index_size
        data = _segment.MmapFileList(str(data_dir), data_size, readonly)
        index = _segment.MmapFileList(str(index_dir), index_size, readonly)
        # A body must also fit a data segment with its header and the blank record after it.
        self.max_body_size = min(self.config.max_body_size, data_size - BODY_OFFSET - MIN_BLANK_LEN)
        # body_pos_patch: DLedgerCommitLog's AppendHook (see EntryLog); followers store the leader's bytes.
        self._log = _segment.EntryLog(data, index, self.max_body_size, body_pos_patch=body_pos_patch)
        try:
            data.load()
            index.load()
            data.check_self()
            index.check_self()
            self.recovery = self._recover(truncate_corrupt)
        except BaseException:
            self._log.close()
            raise
        if start_services and not readonly:
            self.start()

    # -- opening -------------------------------------------------------------------------

    def _open_dir(self, data_dir: Path, index_dir: Path, create: bool) -> None:
        if self.path.exists() and not self.path.is_dir():
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"{self.path} is not a directory")
        if is_store_dir(self.path):
            return
        if self.path.is_dir() and any(self.path.iterdir()):
            raise DLedgerError(
                ResponseCode.UNEXPECTED_ARGUMENT,
                f"{self.path} is not a dledger node directory (no data/, index/ or checkpoint); "
                "point at the dledger-<id> directory",
            )
        if self.readonly or not create:
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"{self.path}: no dledger store here")
        data_dir.mkdir(parents=True, exist_ok=True)
        index_dir.mkdir(parents=True, exist_ok=True)

    def _index_segment_size(self, index_dir: Path) -> int | None:
        """Index files are derived data: a last file cut short by a crash is extended back to
        the segment size (recovery then rewrites the lost units from the data files)."""
        files = list_segments(index_dir)
        if not files:
            return None
        size = max(f.size for f in files)
        size += -size % INDEX_UNIT_SIZE
        check_one_size(index_dir, files[:-1], size)
        last = files[-1]
        if last.size != size:
            if self.readonly:
                raise DLedgerError(ResponseCode.DISK_ERROR,
                                   f"{last.path}: index file cut short ({last.size} bytes, segment size "
                                   f"{size}); open the store read-write once to repair it")
            log.warning("index file %s is %d bytes, extending it to %d", last.path, last.size, size)
            os.truncate(last.path, size)
        return size

    def _checkpoint_values(self) -> tuple[int, int]:
        ckpt = read_checkpoint(self.path)
        if ckpt is None:
            return -1, -1
        end, committed = ckpt.end_index, ckpt.committed_index
        return (-1 if end is None else end), (-1 if committed is None else committed)

    def _start_file(self) -> int:
        """DLedger's choice of where recovery starts: the third-last file, or earlier until one
        whose first entry is sound and agrees with its index unit."""
        files = self._log.data.files
        k = max(len(files) - 3, 0)
        while k > 0:
            f = files[k]
            if self._first_entry_sound(f):
                return int(k)
            k -= 1
        return 0

    def _first_entry_offset(self) -> int:
        """Where the first data file's first entry is: 0, unless the log was rebuilt at a position
        inside the file (a follower that started from the leader's position), which the first
        written index unit tells."""
        f = self._log.data.files[0]
        if _codec.decode_header(f.view(0, BODY_OFFSET))[0] != 0 or not self._log.index.files:
            return 0
        xf = self._log.index.files[0]
        units = np.frombuffer(xf.view(0, xf.file_size), dtype=INDEX_DTYPE)
        written = np.flatnonzero(units["magic"] != 0)
        if not len(written):
            return 0
        rel = int(units["pos"][written[0]]) - f.file_from_offset
        return rel if 0 <= rel < f.file_size else 0

    def _first_entry_sound(self, f: object) -> bool:
        view = f.view(0, BODY_OFFSET)  # type: ignore[attr-defined]
        magic, size, index, term, pos, _ch, _cc, _bc, body_size = _codec.decode_header(view)
        if magic <= 0 or size <= HEADER_SIZE or body_size + BODY_OFFSET != size:
            return False
        if pos != f.file_from_offset:  # type: ignore[attr-defined]
            return False
        unit = self._index_unit(index)
        return unit is not None and unit == (magic, pos, size, index, term)

    def _index_unit(self, index: int) -> tuple[int, int, int, int, int] | None:
        if index < 0:
            return None
        off = index * INDEX_UNIT_SIZE
        f = self._log.index.find(off)
        if f is None:
            return None
        rel = off - f.file_from_offset
        return tuple(_codec.decode_index(f.view(rel, rel + INDEX_UNIT_SIZE)))  # type: ignore[return-value]

    def _recover(self, truncate_corrupt: bool) -> RecoveryReport:
        report = RecoveryReport()
        lg = self._log
        data, index = lg.data, lg.index
        ckpt_end, ckpt_committed = self._checkpoint_values()
        if not data.files:
            if not self.readonly:
                index.truncate_offset(0)
            index.flushed_where = 0
            return report

        files = data.files
        start = self._start_file()
        expect = -1
        prev_term = -1
        last_index = -1
        last_term = -1
        process_offset = files[start].file_from_offset
        mismatch_from = -1  # first entry whose index unit disagrees with the data
        stop_code = _codec.SCAN_END
        stop_file = None
        for k in range(start, len(files)):
            f = files[k]
            view = f.view()
            offset = self._first_entry_offset() if k == 0 else 0
            f.start_position = offset
            while True:
                cols, stop, code = _codec.scan(
                    view, f.file_from_offset, offset, -1, expect, prev_term, True, _SCAN_CHUNK
                )
                n = len(cols["index"])
                if n:
                    report.scanned_entries += n
                    report.scanned_bytes += stop - offset
                    if mismatch_from < 0:
                        mismatch_from = self._first_index_mismatch(cols)
                    last_index = int(cols["index"][-1])
                    last_term = int(cols["term"][-1])
                    expect, prev_term = last_index + 1, last_term
                process_offset = f.file_from_offset + stop
                offset = stop
                if code != _codec.SCAN_LIMIT:
                    break
            del view
            stop_code, stop_file = code, f
            if code in (_codec.SCAN_BLANK, _codec.SCAN_END):
                # A blank record (or an exactly full file) ends the file: go on with the next.
                process_offset = f.file_from_offset + f.file_size
                if k + 1 < len(files):
                    continue
            break

        torn = stop_code in (_codec.SCAN_BAD, _codec.SCAN_CRC)
        if torn:
            assert stop_file is not None
            bad_index = expect if expect >= 0 else -1
            rel = process_offset - stop_file.file_from_offset
            reason = _codec.STOP_NAMES[stop_code]
            if ckpt_end >= 0 and 0 <= bad_index <= ckpt_end and not truncate_corrupt:
                raise CorruptionError(
                    f"{stop_file.path}: {reason} at offset {rel} (entry {bad_index}), before the "
                    f"checkpoint end index {ckpt_end}: this was flushed, so it is corruption, not a "
                    "torn write. Open with truncate_corrupt=True to cut the log there.",
                    file=stop_file.path,
                    offset=rel,
                    index=bad_index,
                )
            report.cut_file, report.cut_offset, report.cut_reason = stop_file.path, rel, reason
            report.cut_entries = max(self._count_units_after(last_index), 1)
            log.warning(
                "recovery: cutting the log at %s offset %d (entry %d, %s); about %d entr%s dropped",
                stop_file.path, rel, bad_index, reason, report.cut_entries,
                "y" if report.cut_entries == 1 else "ies",
            )
            if not self.readonly:
                stop_file.zero_range(rel, rel + _TORN_ZERO_BYTES)
        lg.end, lg.end_term = last_index, last_term
        # Loaded files count as full; the file holding the end of the valid data ends there.
        # Setting the positions first keeps truncation from zeroing (and so allocating) the
        # never-written sparse remainder of a large file.
        _set_end(data, process_offset)
        data.truncate_offset(process_offset)
        self._revise_begin()
        if lg.begin >= 0 and (not index.files or index.min_offset > lg.begin * INDEX_UNIT_SIZE):
            # Index files for the front of the log are gone: rebuild all of it.
            mismatch_from = int(lg.begin)
        if mismatch_from >= 0 and self.readonly:
            raise DLedgerError(ResponseCode.DISK_ERROR,
                               f"{self.path}: index unit of entry {mismatch_from} disagrees with the data; "
                               "open the store read-write once to rebuild the index")
        if mismatch_from >= 0 and not self.readonly:
            report.index_rewritten_from = mismatch_from
            log.warning("recovery: index disagrees with data from entry %d; rewriting it", mismatch_from)
            self._rewrite_index_from(mismatch_from)
        end_units = (last_index + 1) * INDEX_UNIT_SIZE if last_index >= 0 else 0
        _set_end(index, end_units)
        if index.files and (end_units < index.min_offset or end_units > index.max_wrote_position):
            if not self.readonly:
                index.rebuild_with_pos(end_units)
        else:
            index.truncate_offset(end_units)
        if not self.readonly:
            # What recovery read may be only in the page cache (the process died, the machine
            # did not). From here on it counts as written, and a member reports it to its
            # leader as held: make it durable now. Clean pages make this cheap.
            for f in data.files[start:]:
                f.flushed_position = 0
                f.flush(0)
        data.flushed_where = data.max_wrote_position
        index.flushed_where = index.max_wrote_position
        if ckpt_committed >= 0:
            self.update_committed_index(-1, ckpt_committed)
        return report

    def _first_index_mismatch(self, cols: dict[str, np.ndarray]) -> int:
        first = int(cols["index"][0])
        units = read_index_units(self._log.index, first, len(cols["index"]))
        n = len(units)
        same = (
            (units["magic"] == cols["magic"][:n])
            & (units["pos"] == cols["pos"][:n])
            & (units["size"] == cols["size"][:n])
            & (units["index"] == cols["index"][:n])
            & (units["term"] == cols["term"][:n])
        )
        if n < len(cols["index"]) or not same.all():
            bad = np.flatnonzero(~same)
            return first + (int(bad[0]) if len(bad) else n)
        return -1

    def _count_units_after(self, last_index: int) -> int:
        """How many index units past ``last_index`` look written: the entries a cut drops."""
        units = read_index_units(self._log.index, last_index + 1, 1 << 20)
        written = np.flatnonzero(units["magic"] == 0) if len(units) else np.empty(0, dtype=np.int64)
        return int(written[0]) if len(written) else len(units)

    def _rewrite_index_from(self, first: int) -> None:
        """Rebuild index units from entry ``first`` on, from the data (which is the truth)."""
        lg = self._log
        self._truncate_index(first * INDEX_UNIT_SIZE)
        for f in lg.data.files:
            view = f.view(0, f.wrote_position)
            cols, _stop, _code = _codec.scan(view, f.file_from_offset, 0, -1, -1, -1, False, -1)
            keep = cols["index"] >= first
            if not keep.any():
                continue
            units = np.empty(int(keep.sum()), dtype=INDEX_DTYPE)
            for name in ("magic", "pos", "size", "index", "term"):
                units[name] = cols[name][keep]
            self._append_index_bytes(units.tobytes())
            del view

    def _append_index_bytes(self, buf: bytes) -> None:
        mv = memoryview(buf)
        index = self._log.index
        while len(mv):
            f = index.last_file(0, True)
            n = min(len(mv), f.file_size - f.wrote_position)
            f.append(mv[:n])
            mv = mv[n:]

    def _truncate_data(self, offset: int) -> None:
        data = self._log.data
        if data.files and (offset < data.min_offset or offset > data.max_wrote_position):
            data.rebuild_with_pos(offset)
        else:
            data.truncate_offset(offset)

    def _truncate_index(self, offset: int) -> None:
        index = self._log.index
        if index.files and (offset < index.min_offset or offset > index.max_wrote_position):
            index.rebuild_with_pos(offset)
        elif index.files:
            index.truncate_offset(offset)
        elif offset > 0:
            index.rebuild_with_pos(offset)

    def _revise_begin(self) -> None:
        """reviseLedgerBeginIndex: begin is the index of the first entry of the first data file."""
        lg = self._log
        if not lg.data.files or lg.end < 0:
            lg.begin = -1 if lg.end < 0 else lg.begin
            return
        f = lg.data.files[0]
        start = f.start_position
        if start + BODY_OFFSET > f.wrote_position:
            lg.begin = lg.end + 1 if lg.end >= 0 else -1
            return
        header = _codec.decode_header(f.view(start, start + BODY_OFFSET))
        lg.begin = int(header[2])
        lg.index.reset_offset(lg.begin * INDEX_UNIT_SIZE)

    # -- properties ----------------------------------------------------------------------

    @property
    def ledger_begin_index(self) -> int:
        return int(self._log.begin)

    @property
    def ledger_end_index(self) -> int:
        return int(self._log.end)

    @property
    def ledger_end_term(self) -> int:
        return int(self._log.end_term)

    @property
    def committed_index(self) -> int:
        return self._committed

    @property
    def committed_pos(self) -> int:
        return self._committed_pos

    @property
    def disk_full(self) -> bool:
        return bool(self._log.disk_full)

    @disk_full.setter
    def disk_full(self, value: bool) -> None:
        self._log.disk_full = value

    @property
    def data_files(self) -> list[str]:
        return [f.path for f in self._log.data.files]

    @property
    def index_files(self) -> list[str]:
        return [f.path for f in self._log.index.files]

    # -- appends -------------------------------------------------------------------------

    def _writable(self) -> None:
        if self._closed:
            raise DLedgerError(ResponseCode.DISK_ERROR, f"{self.path}: store is closed")
        if self.readonly:
            raise DLedgerError(ResponseCode.DISK_ERROR, f"{self.path}: store is opened read-only")

    def append(self, body: bytes, term: int) -> int:
        """Append one body as leader; returns its index. The fast path of ``append_as_leader``."""
        self._writable()
        index: int = self._log.append(body, term)
        if self.sync:
            self.flush()
        return index

    def append_as_leader(self, body: bytes, term: int) -> Entry:
        self._writable()
        index, pos = self._log.append_with_pos(body, term)
        if self.sync:
            self.flush()
        return Entry(index=index, term=term, pos=pos, body=bytes(body))

    def append_batch_as_leader(self, bodies: Sequence[bytes], term: int) -> tuple[int, list[int]]:
        first, positions = self.append_batch(bodies, term)
        return first, positions.tolist()

    def append_batch(self, bodies: Sequence[bytes], term: int) -> tuple[int, np.ndarray]:
        """Append many bodies in one call; returns the first index and a numpy array of positions."""
        self._writable()
        first, positions = self._log.append_batch(bodies, term)
        if self.sync:
            self.flush()
        return int(first), positions

    def append_as_follower(self, entry: Entry) -> Entry:
        self._writable()
        self._log.append_entry(
            entry.index, entry.term, entry.pos, entry.body, entry.magic, entry.channel,
            entry.chain_crc, entry.body_crc,
        )
        if self.sync:
            self.flush()
        return entry

    def append_raw_as_follower(
        self, blob: bytes | memoryview, first_index: int, first_pos: int, count: int = -1
    ) -> int:
        """Append the leader's encoded entries: ``blob`` is its stored bytes of entries
        ``first_index``.. (``count`` of them when not -1), ``blob[0]`` at ``first_pos``.

        One ``codec.check_run`` (``scan`` without its columns) validates the lot (contiguous
        indices from ``first_index``, contiguous positions, sizes, terms not below ours,
        recorded CRCs); one kernel call writes it (one
        memcpy, then the index units) after checking where it lands. All or nothing: anything
        wrong raises DLedgerError and leaves the store as it was. Returns the last index.
        """
        self._writable()
        lg = self._log
        check(
            first_index == lg.end + 1,
            ResponseCode.INCONSISTENT_INDEX,
            f"expected index {lg.end + 1}, got {first_index}",
        )
        n, stop, code, shortest, longest = _codec.check_run(blob, first_pos, first_index, lg.end_term, True)
        if code != _codec.SCAN_END or stop != len(blob) or n == 0:
            raise DLedgerError(
                ResponseCode.UNEXPECTED_ARGUMENT,
                f"entries from {first_index}: {_codec.STOP_NAMES[code]} at blob offset {stop} "
                f"after {n} entries",
            )
        check(count < 0 or n == count, ResponseCode.UNEXPECTED_ARGUMENT, f"blob holds {n} entries, not {count}")
        check(shortest > 0, ResponseCode.REQUEST_WITH_EMPTY_BODYS, "empty body")
        check(
            longest <= self.max_body_size,
            ResponseCode.UNEXPECTED_ARGUMENT,
            f"body of {longest} bytes is over the limit of {self.max_body_size}",
        )
        last: int = lg.append_raw(blob, first_index, first_pos)
        if self.sync:
            self.flush()
        return last

    # -- reads ---------------------------------------------------------------------------

    def get(self, index: int) -> Entry:
        entry: Entry = self._log.read_entry(index)
        return entry

    def get_body(self, index: int) -> bytes:
        body: bytes = self._log.read_body(index)
        return body

    def get_raw(self, index: int) -> bytes:
        """The encoded entry (header and body) exactly as stored."""
        raw: bytes = self._log.read_raw(index)
        return raw

    def get_raw_range(self, first: int, last: int, max_bytes: int) -> tuple[bytes, int, int]:
        """``(blob, first_pos, count)``: the stored bytes of entries ``first`` .. at most ``last``
        in one copy, stopping at the end of the data file (where a blank record sits) and
        before ``max_bytes`` is passed; at least one entry."""
        blob, pos, count = self._log.read_raw_range(first, last, max_bytes)
        return blob, int(pos), int(count)

    def get_range(self, start: int, end: int) -> list[Entry]:
        return [self.get(i) for i in range(start, min(end, self.ledger_end_index) + 1)]

    def iter_entries(self, start: int | None = None, end: int | None = None) -> Iterator[Entry]:
        first = self.ledger_begin_index if start is None else start
        last = self.ledger_end_index if end is None else min(end, self.ledger_end_index)
        for i in range(first, last + 1):
            yield self.get(i)

    def term_at(self, index: int) -> int:
        if index == -1:
            return -1
        return int(self._log.term_of(index))

    def lookup(self, indices: np.ndarray | Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Batch index lookup: ``(pos, size, term)`` arrays for many indices in one call."""
        result: tuple[np.ndarray, np.ndarray, np.ndarray] = self._log.lookup(indices)
        return result

    def pos_and_size(self, index: int) -> tuple[int, int]:
        pos, size = self._log.pos_and_size(index)
        return int(pos), int(size)

    # -- follower truncate, begin reset, commit ------------------------------------------

    def truncate(self, entry: Entry) -> int:
        """Follower truncate: keep the log up to ``entry`` (appending it where it is absent)."""
        self._writable()
        lg = self._log
        with self._lock:
            existing = None
            if lg.begin >= 0 and lg.begin <= entry.index <= lg.end:
                existing = self.get(entry.index)
            existed = entry.same_as(existing)
            if existed:
                assert existing is not None
                data_cut = existing.pos + existing.size
                last_kept = entry.index
            else:
                data_cut = entry.pos
                last_kept = entry.index - 1
            if lg.begin < 0 or not (lg.begin <= entry.index <= lg.end + 1):
                # Nothing of ours precedes it: restart both lists at the entry.
                lg.data.rebuild_with_pos(entry.pos)
                lg.index.rebuild_with_pos(entry.index * INDEX_UNIT_SIZE)
                lg.begin, lg.end, lg.end_term = -1, entry.index - 1, -1
            else:
                self._truncate_data(data_cut)
                self._truncate_index((last_kept + 1) * INDEX_UNIT_SIZE)
                lg.end = last_kept
                lg.end_term = self.term_at(last_kept) if last_kept >= lg.begin else -1
                if last_kept < lg.begin:
                    lg.begin = -1
            if not existed:
                self.append_as_follower(entry)
            if self._committed > lg.end:
                self._committed = int(lg.end)
                self._committed_pos = self._end_pos(self._committed)
            if self.sync:
                self.flush()
        return entry.index

    def reset_begin_index(self, index: int) -> int:
        """Drop whole data files that hold only entries before ``index``; returns the new begin.

        Retention granularity is a file, as in DLedger: the new begin is the first entry of
        the file that holds ``index``, so it can be below ``index``.
        """
        self._writable()
        check(
            self.ledger_begin_index <= index <= self.ledger_end_index + 1,
            ResponseCode.INDEX_OUT_OF_RANGE,
            f"begin index {index} outside [{self.ledger_begin_index}, {self.ledger_end_index + 1}]",
        )
        with self._lock:
            if index > self.ledger_end_index:
                return self.ledger_begin_index
            pos, _size = self.pos_and_size(index)
            data = self._log.data
            while len(data.files) > 1 and data.files[0].file_from_offset + data.file_size <= pos:
                data.files[0].destroy()
                del data.files[0]
            self._revise_begin()
        return self.ledger_begin_index

    def update_committed_index(self, term: int, new_committed_index: int) -> None:
        """updateCommittedIndex (§2.1). Term checks belong to the consensus layer; ``term`` is kept
        for the interface."""
        if new_committed_index == -1 or self._log.end == -1 or new_committed_index == self._committed:
            return
        if new_committed_index < self._committed or new_committed_index < self._log.begin:
            log.debug("skip committed index %d (committed %d, begin %d)", new_committed_index,
                      self._committed, self._log.begin)
            return
        new_committed_index = min(new_committed_index, int(self._log.end))
        self._committed_pos = self._end_pos(new_committed_index)
        self._committed = new_committed_index

    def _end_pos(self, index: int) -> int:
        if index < 0 or index < self._log.begin:
            return -1
        pos, size = self.pos_and_size(index)
        return pos + size

    # -- durability ----------------------------------------------------------------------

    def flush(self) -> None:
        """msync data and index up to what was written."""
        if self.readonly or self._closed:
            return
        with self._lock:
            self._log.data.flush(0)
            self._log.index.flush(0)

    def flush_entries(self, wait: bool = True) -> bool:
        """msync the data files only: what an acknowledgement needs, at half the cost.

        The index is derived from the data: recovery checks it against the data it scans and
        rewrites a tail that never reached the disk, and ``flush`` (the background service,
        every ``flush_file_interval`` ms, and every checkpoint) writes it.

        With ``wait=False``, when another thread holds the store (the service writing a
        checkpoint, say) this does nothing and returns False instead of waiting for it.
        """
        if self.readonly or self._closed:
            return True
        if not self._lock.acquire(blocking=wait):
            return False
        try:
            self._log.data.flush(0)
        finally:
            self._lock.release()
        self._entries_flushed_at = time.monotonic()
        return True

    def unflushed_entry_bytes(self) -> int:
        data = self._log.data
        return max(0, data.max_wrote_position - data.flushed_where)

    def persist_checkpoint(self, end_index: int | None = None) -> None:
        """Write ``checkpoint`` (endIndex, committedIndex). It vouches that the entries up to
        endIndex are on disk (recovery then treats damage there as corruption, not a torn
        write), so ``end_index`` must be the end as it was *before* a flush that has finished;
        the default, the current end, is right only when nothing is appended meanwhile."""
        if self.readonly:
            return
        end = self.ledger_end_index if end_index is None else end_index
        write_checkpoint(self.path, end, min(self._committed, end))
        self._last_checkpoint = time.monotonic()

    def checkpoint(self) -> None:
        """Flush, then record the checkpoint; what it names survives any crash from here on."""
        with self._lock:
            # Appends do not take the lock: the end is taken before the flush that covers it.
            end = self.ledger_end_index
            self.flush()
            self.persist_checkpoint(end)

    # -- retention and disk space --------------------------------------------------------

    def used_ratio(self) -> float:
        usage = shutil.disk_usage(self._log.data.store_path)
        return usage.used / usage.total if usage.total else 0.0

    def check_disk(self, used_ratio: float | None = None) -> bool:
        """Set the disk-full flag from the used ratio; appends fail with DISK_FULL while it is set."""
        ratio = self.used_ratio() if used_ratio is None else used_ratio
        full = ratio > self.config.disk_full_ratio
        if full != self.disk_full:
            log.warning("disk %s: used ratio %.3f (limit %.3f)", "full" if full else "no longer full",
                        ratio, self.config.disk_full_ratio)
        self._log.disk_full = full
        return full

    def delete_expired(self, now: float | None = None, used_ratio: float | None = None) -> int:
        """Retention (CleanSpaceService): delete expired data files, never the one being written.

        Files older than ``file_reserved_hours`` go when it is the hour of ``delete_when`` or the
        disk is above ``disk_space_ratio_to_check_expired``; above ``disk_space_ratio_to_force_clean``
        (with ``enable_disk_force_clean``) the oldest files go whatever their age.
        """
        self._writable()
        cfg = self.config
        now = time.time() if now is None else now
        ratio = self.used_ratio() if used_ratio is None else used_ratio
        hour = time.strftime("%H", time.localtime(now))
        time_up = hour in [h.strip() for h in cfg.delete_when.split(";") if h.strip()]
        force = ratio > max(cfg.disk_space_ratio_to_force_clean, 0.50)
        if not (time_up or ratio > cfg.disk_space_ratio_to_check_expired or force):
            return 0
        expired_ms = max(cfg.file_reserved_hours, 1) * 3600 * 1000.0
        with self._lock:
            deleted = int(self._log.data.delete_expired_by_time(
                expired_ms, now * 1000.0, force and cfg.enable_disk_force_clean, 10))
            if deleted:
                self._revise_begin()
                log.info("retention deleted %d data file(s); ledger begins at %d", deleted,
                         self.ledger_begin_index)
        return deleted

    # -- background service --------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None or self.readonly:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._service, name=f"dledger-store-{self.path.name}",
                                        daemon=True)
        self._thread.start()

    def _service(self) -> None:
        interval = max(self.config.flush_file_interval, 1) / 1000.0
        last_clean = 0.0
        failures = 0
        last_report = 0.0
        while not self._stop.wait(interval):
            try:
                now = time.monotonic()
                checkpoint_due = now - self._last_checkpoint >= self.config.check_point_interval / 1000.0
                if checkpoint_due:
                    self.checkpoint()
                elif now - self._entries_flushed_at >= interval:
                    self.flush()
                else:
                    # Someone (a node acking appends) msyncs the data continuously: a second
                    # msync of it here would only compete for the lock the ack path waits on.
                    with self._lock:
                        if not self._closed:
                            self._log.index.flush(0)
                self.prefault()
                self.drop_behind()
                if time.monotonic() - last_clean >= 0.1:
                    last_clean = time.monotonic()
                    ratio = self.used_ratio()
                    self.check_disk(ratio)
                    self.delete_expired(used_ratio=ratio)
                failures = 0
            except Exception:
                # Every tick may fail the same way (a directory removed under us): say so once,
                # then at most every SERVICE_REPORT_S with a count, not 100 tracebacks a second.
                failures += 1
                now = time.monotonic()
                if failures == 1 or now - last_report >= SERVICE_REPORT_S:
                    last_report = now
                    log.exception("store service of %s failed (%d time(s) in a row); retrying",
                                  self.path, failures)

    def prefault(self) -> int:
        """Fault in the pages just past the write position of the last index file, and of the
        last data file while appends since the last call went mostly through the mapping, so
        that appends there take no page fault on the caller's thread (the service runs this
        every tick). Returns the bytes populated; 0 where the kernel cannot (Linux < 5.14).
        """
        if self.readonly or self._closed or not self._prefault_ok:
            return 0
        log = self._log
        # Advisory counts (an append racing this reset only shifts one tick's decision).
        through_mapping = log.mapped_bytes > log.written_bytes
        log.mapped_bytes = log.written_bytes = 0
        targets = [(log.index, PREFAULT_INDEX_AHEAD)]
        if through_mapping:
            targets.append((log.data, PREFAULT_DATA_AHEAD))
        done = 0
        for files, ahead in targets:
            while True:
                # In steps, each under the lock (truncation and retention unmap files under it),
                # held briefly: the flush an acknowledgement waits for takes it too.
                with self._lock:
                    if self._closed or not files.files:
                        break
                    f = files.files[-1]
                    start = max(f.populated_to, f.wrote_position)
                    end = min(f.wrote_position + ahead, f.file_size, start + PREFAULT_STEP)
                    if end <= start:
                        break
                    if not f.populate(start, end):
                        self._prefault_ok = False
                        return done
                    done += end - start
        return done

    def drop_behind(self) -> int:
        """Hand the page cache of data more than ``config.data_cache_window`` bytes behind the
        flushed position back to the kernel (the service runs this every tick), at most
        DROP_STEP_MAX per call and in steps of at least DROP_STEP_MIN. Returns the bytes advised.
        """
        window = self.config.data_cache_window
        if window <= 0 or self.readonly or self._closed:
            return 0
        with self._lock:
            if self._closed:
                return 0
            data = self._log.data
            # A truncation may have moved the flushed position back: follow it down.
            self._dropped_to = min(self._dropped_to, data.flushed_where)
            upto = min(data.flushed_where - window, self._dropped_to + DROP_STEP_MAX)
            if upto - self._dropped_to < DROP_STEP_MIN:
                return 0
            done = 0
            for f in data.files:
                lo = max(self._dropped_to, f.file_from_offset)
                hi = min(upto, f.file_from_offset + f.file_size)
                if lo < hi:
                    done += f.drop_cache(lo - f.file_from_offset, hi - f.file_from_offset)
            self._dropped_to = upto
            return done

    def close(self) -> None:
        """Stop the service, flush, write the checkpoint, unmap."""
        if self._closed:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            if not self.readonly:
                self.flush()
                self.persist_checkpoint()
            self._closed = True
            self._log.close()

    def __enter__(self) -> MmapFileStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @classmethod
    def from_config(cls, config: DLedgerConfig, **kwargs: object) -> MmapFileStore:
        return cls(config.default_path, config, **kwargs)  # type: ignore[arg-type]
