"""Recovery of a file store on open (DLedgerMmapFileStore.recover), and the log-position
operations it shares with the store (reviseLedgerBeginIndex, truncation of a file list).

Recovery scans the data files from the third-last (or an earlier one whose first entry is
sound), keeps the longest valid prefix, cuts a torn tail, and makes the index agree with the
data, which is the truth: a unit that disagrees, or is missing, is rewritten from the data.
Damage before the checkpoint's endIndex was flushed before, so it is corruption, not a torn
write: recovery refuses it unless asked to cut there.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dledger._ext import load as _load_ext
from dledger.codes import ResponseCode
from dledger.errors import CorruptionError, DLedgerError
from dledger.store.layout import BODY_OFFSET, HEADER_SIZE, INDEX_DTYPE, INDEX_UNIT_SIZE, read_index_units

if TYPE_CHECKING:
    from dledger._ext.segment import EntryLog, MappedFile, MmapFileList

_codec = _load_ext("codec")

log = logging.getLogger(__name__)

# Recovery scans at most this many entries per kernel call, so its memory stays bounded.
_SCAN_CHUNK = 1 << 20
# How much of a torn tail recovery zeroes: enough to wipe the torn header, without touching
# (and so allocating) the sparse rest of a large file.
_TORN_ZERO_BYTES = 4096


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


# -- log positions, shared with the store ---------------------------------------------------


def set_end(files: MmapFileList, offset: int) -> None:
    """Make the file holding ``offset`` end there (no zeroing)."""
    for f in files.files:
        if f.file_from_offset <= offset < f.file_from_offset + f.file_size:
            f.wrote_position = offset - f.file_from_offset
            f.flushed_position = min(f.flushed_position, f.wrote_position)


def truncate_data(data: MmapFileList, offset: int) -> None:
    """Cut the data files at ``offset``, restarting them there when it is outside them."""
    if data.files and (offset < data.min_offset or offset > data.max_wrote_position):
        data.rebuild_with_pos(offset)
    else:
        data.truncate_offset(offset)


def truncate_index(index: MmapFileList, offset: int) -> None:
    """Cut the index files at ``offset``, restarting them there when it is outside them."""
    if index.files and (offset < index.min_offset or offset > index.max_wrote_position):
        index.rebuild_with_pos(offset)
    elif index.files:
        index.truncate_offset(offset)
    elif offset > 0:
        index.rebuild_with_pos(offset)


def revise_begin(lg: EntryLog) -> None:
    """reviseLedgerBeginIndex: begin is the index of the first entry of the first data file."""
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


# -- recovery -------------------------------------------------------------------------------


@dataclass(slots=True)
class _Scan:
    """How far the scan of the data files got."""

    process_offset: int  # absolute offset just after the last valid entry (or file end)
    last_index: int = -1
    last_term: int = -1
    expect: int = -1  # the index the next entry must have (-1: any)
    mismatch_from: int = -1  # first entry whose index unit disagrees with the data
    stop_code: int = _codec.SCAN_END
    stop_file: MappedFile | None = None
    # The last scan's columns, referenced until the next scan has allocated its own: freed
    # first, their memory goes back to the system and the next scan faults it in again.
    last_cols: dict[str, np.ndarray] | None = None


class Recovery:
    """One recovery of an entry log whose files are loaded (``data.load()``, ``index.load()``)."""

    def __init__(self, lg: EntryLog, path: Path, readonly: bool) -> None:
        self.lg = lg
        self.path = path
        self.readonly = readonly
        self.report = RecoveryReport()

    def run(self, ckpt_end: int, truncate_corrupt: bool) -> RecoveryReport:
        """Recover; ``ckpt_end`` is the checkpoint's endIndex (-1 without one)."""
        lg = self.lg
        if not lg.data.files:
            if not self.readonly:
                lg.index.truncate_offset(0)
            lg.index.flushed_where = 0
            return self.report
        start = self._start_file()
        scan = self._scan(start)
        if scan.stop_code in (_codec.SCAN_BAD, _codec.SCAN_CRC):
            self._cut(scan, ckpt_end, truncate_corrupt)
        lg.end, lg.end_term = scan.last_index, scan.last_term
        # Loaded files count as full; the file holding the end of the valid data ends there.
        # Setting the positions first keeps truncation from zeroing (and so allocating) the
        # never-written sparse remainder of a large file.
        set_end(lg.data, scan.process_offset)
        lg.data.truncate_offset(scan.process_offset)
        revise_begin(lg)
        self._repair_index(scan.mismatch_from, scan.last_index)
        self._settle(start)
        return self.report

    # -- where to start ----------------------------------------------------------------------

    def _start_file(self) -> int:
        """DLedger's choice of where recovery starts: the third-last file, or earlier until one
        whose first entry is sound and agrees with its index unit."""
        files = self.lg.data.files
        k = max(len(files) - 3, 0)
        while k > 0:
            if self._first_entry_sound(files[k]):
                return int(k)
            k -= 1
        return 0

    def _first_entry_offset(self) -> int:
        """Where the first data file's first entry is: 0, unless the log was rebuilt at a position
        inside the file (a follower that started from the leader's position), which the first
        written index unit tells."""
        f = self.lg.data.files[0]
        if _codec.decode_header(f.view(0, BODY_OFFSET))[0] != 0 or not self.lg.index.files:
            return 0
        xf = self.lg.index.files[0]
        units = np.frombuffer(xf.view(0, xf.file_size), dtype=INDEX_DTYPE)
        written = np.flatnonzero(units["magic"] != 0)
        if not len(written):
            return 0
        rel = int(units["pos"][written[0]]) - f.file_from_offset
        return rel if 0 <= rel < f.file_size else 0

    def _first_entry_sound(self, f: MappedFile) -> bool:
        magic, size, index, term, pos, _ch, _cc, _bc, body_size = _codec.decode_header(f.view(0, BODY_OFFSET))
        if magic <= 0 or size <= HEADER_SIZE or body_size + BODY_OFFSET != size:
            return False
        if pos != f.file_from_offset:
            return False
        unit = self._index_unit(index)
        return unit is not None and unit == (magic, pos, size, index, term)

    def _index_unit(self, index: int) -> tuple[int, int, int, int, int] | None:
        if index < 0:
            return None
        off = index * INDEX_UNIT_SIZE
        f = self.lg.index.find(off)
        if f is None:
            return None
        rel = off - f.file_from_offset
        return _codec.decode_index(f.view(rel, rel + INDEX_UNIT_SIZE))

    # -- the scan ----------------------------------------------------------------------------

    def _scan(self, start: int) -> _Scan:
        files = self.lg.data.files
        scan = _Scan(process_offset=files[start].file_from_offset)
        for k in range(start, len(files)):
            f = files[k]
            f.start_position = self._first_entry_offset() if k == 0 else 0
            scan.stop_code, scan.stop_file = self._scan_file(f, scan), f
            if scan.stop_code not in (_codec.SCAN_BLANK, _codec.SCAN_END):
                break
            # A blank record (or an exactly full file) ends the file: go on with the next.
            scan.process_offset = f.file_from_offset + f.file_size
        return scan

    def _scan_file(self, f: MappedFile, scan: _Scan) -> int:
        """Scan one data file from its first entry, in chunks; returns the stop code."""
        view = f.view()
        offset = f.start_position
        while True:
            cols, stop, code = _codec.scan(
                view, f.file_from_offset, offset, -1, scan.expect, scan.last_term, True, _SCAN_CHUNK
            )
            scan.last_cols = cols
            if len(cols["index"]):
                self._take(cols, stop - offset, scan)
            scan.process_offset = f.file_from_offset + stop
            offset = stop
            if code != _codec.SCAN_LIMIT:
                return int(code)

    def _take(self, cols: dict[str, np.ndarray], nbytes: int, scan: _Scan) -> None:
        self.report.scanned_entries += len(cols["index"])
        self.report.scanned_bytes += nbytes
        if scan.mismatch_from < 0:
            scan.mismatch_from = self._first_index_mismatch(cols)
        scan.last_index = int(cols["index"][-1])
        scan.last_term = int(cols["term"][-1])
        scan.expect = scan.last_index + 1

    def _first_index_mismatch(self, cols: dict[str, np.ndarray]) -> int:
        first = int(cols["index"][0])
        units = read_index_units(self.lg.index, first, len(cols["index"]))
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

    # -- a torn tail -------------------------------------------------------------------------

    def _cut(self, scan: _Scan, ckpt_end: int, truncate_corrupt: bool) -> None:
        """The scan stopped at a bad entry: refuse it when the checkpoint vouched for it, else
        cut the log there."""
        f = scan.stop_file
        assert f is not None
        bad_index = scan.expect
        rel = scan.process_offset - f.file_from_offset
        reason = _codec.STOP_NAMES[scan.stop_code]
        if ckpt_end >= 0 and 0 <= bad_index <= ckpt_end and not truncate_corrupt:
            raise CorruptionError(
                f"{f.path}: {reason} at offset {rel} (entry {bad_index}), before the "
                f"checkpoint end index {ckpt_end}: this was flushed, so it is corruption, not a "
                "torn write. Open with truncate_corrupt=True to cut the log there.",
                file=f.path,
                offset=rel,
                index=bad_index,
            )
        report = self.report
        report.cut_file, report.cut_offset, report.cut_reason = f.path, rel, reason
        report.cut_entries = max(self._count_units_after(scan.last_index), 1)
        log.warning(
            "recovery: cutting the log at %s offset %d (entry %d, %s); about %d entr%s dropped",
            f.path,
            rel,
            bad_index,
            reason,
            report.cut_entries,
            "y" if report.cut_entries == 1 else "ies",
        )
        if not self.readonly:
            f.zero_range(rel, rel + _TORN_ZERO_BYTES)

    def _count_units_after(self, last_index: int) -> int:
        """How many index units past ``last_index`` look written: the entries a cut drops."""
        units = read_index_units(self.lg.index, last_index + 1, 1 << 20)
        written = np.flatnonzero(units["magic"] == 0) if len(units) else np.empty(0, dtype=np.int64)
        return int(written[0]) if len(written) else len(units)

    # -- the index ---------------------------------------------------------------------------

    def _repair_index(self, mismatch_from: int, last_index: int) -> None:
        """Make the index files agree with the recovered data and end where it ends."""
        lg, index = self.lg, self.lg.index
        if lg.begin >= 0 and (not index.files or index.min_offset > lg.begin * INDEX_UNIT_SIZE):
            # Index files for the front of the log are gone: rebuild all of it.
            mismatch_from = int(lg.begin)
        if mismatch_from >= 0:
            if self.readonly:
                raise DLedgerError(
                    ResponseCode.DISK_ERROR,
                    f"{self.path}: index unit of entry {mismatch_from} disagrees with the data; "
                    "open the store read-write once to rebuild the index",
                )
            self.report.index_rewritten_from = mismatch_from
            log.warning("recovery: index disagrees with data from entry %d; rewriting it", mismatch_from)
            self._rewrite_index_from(mismatch_from)
        end_units = (last_index + 1) * INDEX_UNIT_SIZE if last_index >= 0 else 0
        set_end(index, end_units)
        if index.files and (end_units < index.min_offset or end_units > index.max_wrote_position):
            if not self.readonly:
                index.rebuild_with_pos(end_units)
        else:
            index.truncate_offset(end_units)

    def _rewrite_index_from(self, first: int) -> None:
        """Rebuild index units from entry ``first`` on, from the data (which is the truth)."""
        truncate_index(self.lg.index, first * INDEX_UNIT_SIZE)
        for f in self.lg.data.files:
            view = f.view(0, f.wrote_position)
            cols, _stop, _code = _codec.scan(view, f.file_from_offset, 0, -1, -1, -1, False, -1)
            del view
            keep = cols["index"] >= first
            if not keep.any():
                continue
            units = np.empty(int(keep.sum()), dtype=INDEX_DTYPE)
            for name in ("magic", "pos", "size", "index", "term"):
                units[name] = cols[name][keep]
            self._append_index_bytes(units.tobytes())

    def _append_index_bytes(self, buf: bytes) -> None:
        mv = memoryview(buf)
        index = self.lg.index
        while len(mv):
            f = index.last_file(0, True)
            n = min(len(mv), f.file_size - f.wrote_position)
            f.append(mv[:n])
            mv = mv[n:]

    def _settle(self, start: int) -> None:
        data, index = self.lg.data, self.lg.index
        if not self.readonly:
            # What recovery read may be only in the page cache (the process died, the machine
            # did not). From here on it counts as written, and a member reports it to its
            # leader as held: make it durable now. Clean pages make this cheap.
            for f in data.files[start:]:
                f.flushed_position = 0
                f.flush(0)
        data.flushed_where = data.max_wrote_position
        index.flushed_where = index.max_wrote_position
