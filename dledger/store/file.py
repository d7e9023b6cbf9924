"""DLedgerMmapFileStore: the file store of one node directory (its layout: ``dledger.store.layout``).

Recovery on open is in ``dledger.store.recovery``; the background flush, checkpoint, prefault,
drop-behind and retention (FlushDataService, CleanSpaceService) in ``dledger.store.service``.

The store has one writer (the thread that appends, truncates and resets); a background
thread flushes, writes the checkpoint and applies retention. Structural changes (truncate,
reset, retention, close) and flushes exclude each other through one lock, because a flush
runs msync without the GIL over a mapping that a truncate could otherwise unmap. Readers of
the mapped files from outside (the DLedger commit log's) take a second lock that only the
structural changes also take, so a flush does not hold them up.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import cast

import numpy as np

from dledger._ext import require_built
from dledger.codes import ResponseCode
from dledger.config import DLedgerConfig
from dledger.errors import DLedgerError, check
from dledger.packed import FramedBodies
from dledger.store.entry import Entry, check_starts_after
from dledger.store.layout import (
    BODY_OFFSET,
    DATA_DIR,
    INDEX_DIR,
    INDEX_UNIT_SIZE,
    MIN_BLANK_LEN,
    check_one_size,
    is_store_dir,
    list_segments,
    not_a_node_dir,
    read_checkpoint,
    segment_size_of,
    write_checkpoint,
)
from dledger.store.recovery import Recovery, RecoveryReport, revise_begin, truncate_data, truncate_index
from dledger.store.service import StoreService

require_built()
from dledger._ext import codec as _codec  # noqa: E402
from dledger._ext import segment as _segment  # noqa: E402

__all__ = ["MmapFileStore", "RecoveryReport"]

_segment.set_entry_type(Entry)

log = logging.getLogger(__name__)


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
        # Whether the store service makes the data pages ahead of batch appends (by writing
        # zeros there, MappedFile.prewrite, so that the pwrite finds them made). One process
        # putting small batches gains (the embedded message store turns it on). On a group's
        # members, which append batches of thousands, populating them read-only (what the
        # service did before it pre-wrote) cost 0.2-0.5 us an entry on every member, more than
        # the writes saved: 3 members on 2 cores took a third fewer entries and messages a second.
        self.populate_after_batches = False
        # Where a reader of the log that follows the writer has got to (the message store's
        # dispatch): data from there on is not handed back by the store's page-cache
        # drop-behind (``data_cache_window``), since it is about to be read, nor deleted by
        # retention. None: no such reader.
        self.cache_keep_from: Callable[[], int] | None = None
        # Called before retention deletes a data file (the message store writes the consumer
        # offsets that files' offset records hold). None: nothing to do.
        self.before_retention: Callable[[], object] | None = None
        self.sync = self.config.sync if sync is None else sync
        self._lock = threading.RLock()
        # Held by readers of the mapped files from outside the store (DLedgerCommitLog's) and,
        # after _lock, by every change that unmaps a file (truncate, begin reset, retention,
        # close): readers exclude those, not the flushes, whose msync can take milliseconds.
        self._unmap_lock = threading.RLock()
        self._closed = False
        self._committed = -1
        self._committed_pos = -1
        self._last_checkpoint = 0.0
        self._entries_flushed_at = 0.0
        self._service = StoreService(self)

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
        # Data files are pre-written ahead of batch appends (see dledger/store/service.py), so
        # their writes take the write guard; index units go through the mapping, populated.
        data = _segment.MmapFileList(str(data_dir), data_size, readonly, guarded=True)
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
            ckpt_end, ckpt_committed = self._checkpoint_values()
            self.recovery: RecoveryReport = Recovery(self._log, self.path, readonly).run(ckpt_end, truncate_corrupt)
            if ckpt_committed >= 0:
                self.update_committed_index(-1, ckpt_committed)
            self._service.flush.opened_at(int(data.flushed_where))
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
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, not_a_node_dir(self.path))
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
                raise DLedgerError(
                    ResponseCode.DISK_ERROR,
                    f"{last.path}: index file cut short ({last.size} bytes, segment size "
                    f"{size}); open the store read-write once to repair it",
                )
            log.warning("index file %s is %d bytes, extending it to %d", last.path, last.size, size)
            os.truncate(last.path, size)
        return size

    def _checkpoint_values(self) -> tuple[int, int]:
        ckpt = read_checkpoint(self.path)
        if ckpt is None:
            return -1, -1
        end, committed = ckpt.end_index, ckpt.committed_index
        return (-1 if end is None else end), (-1 if committed is None else committed)

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
        index, pos = self.append_with_pos(body, term)
        return Entry(index=index, term=term, pos=pos, body=bytes(body))

    def append_with_pos(self, body: bytes, term: int) -> tuple[int, int]:
        """``append_as_leader`` returning ``(index, pos)`` only, for callers that keep no Entry."""
        self._writable()
        index, pos = self._log.append_with_pos(body, term)
        if self.sync:
            self.flush()
        return int(index), int(pos)

    def append_batch_as_leader(self, bodies: Sequence[bytes], term: int) -> tuple[int, Sequence[int]]:
        if type(bodies) is FramedBodies:
            # Framed by the proposer (the message service): headers in place, one pwrite. Its
            # positions stay an int64 array, which is what its answer carries (a list of
            # thousands of ints made here and packed back into an array there cost the
            # leader's loop ~50 us a batch of 2000).
            first, positions = self.append_framed(bodies.buf, bodies.offsets, term)
            return first, cast(Sequence[int], positions)
        first, positions = self.append_batch(bodies, term)
        return first, positions.tolist()

    def append_batch(self, bodies: Sequence[bytes], term: int) -> tuple[int, np.ndarray]:
        """Append many bodies in one call; returns the first index and a numpy array of positions."""
        self._writable()
        first, positions = self._log.append_batch(bodies, term)
        if self.sync:
            self.flush()
        return int(first), positions

    def append_framed(self, buf: bytearray, offsets: np.ndarray, term: int) -> tuple[int, np.ndarray]:
        """``append_batch`` of entries the caller framed in ``buf`` (``EntryLog.append_framed``):
        entry k is ``buf[offsets[k]:offsets[k + 1]]``, its first 48 bytes left for the header,
        which is written into ``buf`` in place; the bodies are not copied again."""
        self._writable()
        first, positions = self._log.append_framed(buf, offsets, term)
        if self.sync:
            self.flush()
        return int(first), positions

    def append_one_committed(self, body: bytes, term: int) -> int:
        """``append_with_pos`` where an append is committed at once (a single member), as
        ``append_framed_committed``: also moves the committed index to the entry. Returns its
        position."""
        if self._closed or self.readonly:
            self._writable()
        lg = self._log
        pos: int = lg.append_with_pos(body, term)[1]
        if self.sync:
            self.flush()
        self._committed_pos = pos + BODY_OFFSET + len(body)
        self._committed = lg.end
        return pos

    def append_framed_committed(self, buf: bytearray, offsets: np.ndarray, term: int) -> tuple[int, np.ndarray, int]:
        """``append_framed`` where an append is committed at once (a single member): also moves
        the committed index to the last entry, as ``update_committed_index`` would, without its
        checks and property reads. Returns ``(first, positions, committed_pos)``.

        The GIL is let go while the headers are filled and the batch is written, small or not:
        the caller (the DLedger commit log's put thread) has a dispatch thread that works
        meanwhile (see WRITE_RELEASE in _ext/segment.pyx)."""
        if self._closed or self.readonly:
            self._writable()
        lg = self._log
        first, positions, end = lg.append_framed_end(buf, offsets, term, True)
        if self.sync:
            self.flush()
        self._committed_pos = end
        self._committed = first + len(positions) - 1
        return first, positions, end

    def append_as_follower(self, entry: Entry) -> Entry:
        self._writable()
        self._log.append_entry(
            entry.index,
            entry.term,
            entry.pos,
            entry.body,
            entry.magic,
            entry.channel,
            entry.chain_crc,
            entry.body_crc,
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
                f"entries from {first_index}: {_codec.STOP_NAMES[code]} at blob offset {stop} after {n} entries",
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
        with self._lock, self._unmap_lock:
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
                if lg.begin >= 0 and lg.begin <= last_kept <= lg.end:
                    check_starts_after(entry, self._end_pos(last_kept))
            if lg.begin < 0 or not (lg.begin <= entry.index <= lg.end + 1):
                # Nothing of ours precedes it: restart both lists at the entry.
                lg.data.rebuild_with_pos(entry.pos)
                lg.index.rebuild_with_pos(entry.index * INDEX_UNIT_SIZE)
                lg.begin, lg.end, lg.end_term = -1, entry.index - 1, -1
            else:
                truncate_data(lg.data, data_cut)
                truncate_index(lg.index, (last_kept + 1) * INDEX_UNIT_SIZE)
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
        with self._lock, self._unmap_lock:
            if index > self.ledger_end_index:
                return self.ledger_begin_index
            pos, _size = self.pos_and_size(index)
            data = self._log.data
            while len(data.files) > 1 and data.files[0].file_from_offset + data.file_size <= pos:
                data.files[0].destroy()
                del data.files[0]
            revise_begin(self._log)
        return self.ledger_begin_index

    def update_committed_index(self, term: int, new_committed_index: int) -> None:
        """DLedgerMmapFileStore.updateCommittedIndex. Term checks belong to the consensus layer;
        ``term`` is kept for the interface."""
        if new_committed_index == -1 or self._log.end == -1 or new_committed_index == self._committed:
            return
        if new_committed_index < self._committed or new_committed_index < self._log.begin:
            log.debug(
                "skip committed index %d (committed %d, begin %d)",
                new_committed_index,
                self._committed,
                self._log.begin,
            )
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
        return self._service.clean.used_ratio()

    def check_disk(self, used_ratio: float | None = None) -> bool:
        """Set the disk-full flag from the used ratio; appends fail with DISK_FULL while it is set."""
        return self._service.clean.check_disk(used_ratio)

    def delete_expired(self, now: float | None = None, used_ratio: float | None = None) -> int:
        """Retention (CleanSpaceService): delete expired data files, never the one being written;
        see ``CleanSpaceService.delete_expired``. Returns how many went."""
        return self._service.clean.delete_expired(now, used_ratio)

    # -- background service --------------------------------------------------------------

    def start(self) -> None:
        """Start the background service (flush, checkpoint, prefault, drop-behind, retention)."""
        if not self.readonly:
            self._service.start()

    def prefault(self) -> int:
        """Fault in the pages just ahead of the writer (the service does this every tick);
        returns the bytes populated."""
        return self._service.flush.prefault()

    def drop_behind(self) -> int:
        """Hand back the page cache of data far behind the flushed position (the service does
        this every tick); returns the bytes advised."""
        return self._service.flush.drop_behind()

    def close(self) -> None:
        """Stop the service, flush, write the checkpoint, unmap.

        The store is closed even when the flush or the checkpoint fails (a full disk: the
        checkpoint is a new file); the failure is then raised as DISK_FULL or DISK_ERROR
        saying what was not written. A checkpoint not written costs nothing but time: the next
        open checks the entries after the previous checkpoint as a torn tail would be."""
        if self._closed:
            return
        self._service.stop()
        failed: str | None = None
        code = ResponseCode.DISK_ERROR
        with self._lock, self._unmap_lock:
            # Appends do not take the lock: one in progress on another thread finishes first
            # (it copies into the mappings without the GIL), later ones are refused, so the
            # flush and checkpoint below cover every append that returned.
            self._log.stop_access()
            if not self.readonly:
                step = "flush of the data and index files"
                try:
                    self.flush()
                    step = f"checkpoint (endIndex {self.ledger_end_index})"
                    self.persist_checkpoint()
                except (OSError, DLedgerError) as exc:
                    full = isinstance(exc, OSError) and exc.errno == errno.ENOSPC
                    if full or (isinstance(exc, DLedgerError) and exc.code == ResponseCode.DISK_FULL):
                        code = ResponseCode.DISK_FULL
                    failed = f"{self.path}: closed, but its {step} was not written: {exc}"
            self._closed = True
            self._log.close()
        if failed is not None:
            log.error("%s", failed)
            raise DLedgerError(code, failed)

    def __enter__(self) -> MmapFileStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
