"""The classic commit log (RocketMQ's CommitLog over a MappedFileQueue).

``commitlog/`` holds files of ``mapped_file_size_commit_log`` bytes named by their 20-digit
start offset. Records are the 17-field RocketMQ format; a record that does not fit the rest
of a file (with the 8 bytes an END_OF_FILE marker needs) goes to the next file, and the rest
of the old one is marked by a blank record ``{int maxBlank, int BLANK_MAGIC_CODE}``.

Puts are serialised by one lock, under which the store timestamp and queue offsets are
assigned and the bytes written (pwrite into the page cache). A flush service msyncs them:
every ``flush_interval_commit_log`` ms (ASYNC_FLUSH), or at once for waiting puts, several
at a time (SYNC_FLUSH group commit).
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dledger._ext import load as _load_ext
from dledger._ext import require_built
from dledger.rocketmq.store.batch_preparer import UniformBatch
from dledger.rocketmq.store.checkpoint import StoreCheckpoint
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.encode import PreparedBatch, assign_queue_offsets, encode_batch, encode_one
from dledger.rocketmq.store.status import AppendMessageResult, AppendMessageStatus

require_built()
from dledger._ext import segment as _segment  # noqa: E402

K = _load_ext("message")
_encode_put = K.encode_put
_END_MIN_BLANK = K.END_FILE_MIN_BLANK_LENGTH
_PUT_OK = AppendMessageStatus.PUT_OK
_time = time.time
log = logging.getLogger(__name__)

_SCAN_CHUNK = 1 << 16
# A put into a sparse file made the put thread allocate and zero a page-cache page at the first
# write to each page. A thread keeps PREFAULT_AHEAD bytes past the write position made,
# PREFAULT_STEP at a time, without the GIL, by writing zeros there (MappedFile.prewrite: the
# puts then land in pages allocated, dirty and with their blocks reserved, and below that mark
# they are copied through the mapping, MAPPED_APPENDS in _ext/segment.pyx; populating them
# read-only, MADV_POPULATE_READ, cost this VM 2-8 us a page against 1.1 and left the pwrites
# 3.3 us a page against 2.3, bench/page_costs.py). It looks every PREFAULT_POLL_S seconds while
# the log grows (32 MB last 80 ms at 1.3M puts/s of 100 B), every PREFAULT_IDLE_S while it does
# not: each look takes the GIL, which a put thread that never lets go of it (single puts) hands
# over only at the interpreter's switch interval, 5 ms. So a step is large: at 1 MB a step the
# thread fell behind 1 KiB single puts (a quarter to half of them went by pwrite).
PREFAULT_AHEAD = 32 << 20
PREFAULT_STEP = 8 << 20
PREFAULT_POLL_S = 0.01
PREFAULT_IDLE_S = 0.05
_BLANK = struct.Struct(">ii")
# The slave's HA appends (append_data): a copy through the mapping is one of less than
# segment.pyx's NOGIL_COPY that ends below the pre-written mark rounded down to its
# FOLIO_MAX; such a piece keeps the GIL.
_HA_MAPPED_PIECE = _segment.NOGIL_COPY_BYTES - (4 << 10)
_HA_FOLIO = _segment.FOLIO_MAX_BYTES
# How much past a torn tail recovery zeroes, so that stale bytes cannot read as records.
_TORN_ZERO_MIN = 1 << 16


@dataclass(slots=True)
class Segment:
    """A readable stretch of one commit-log file: ``view[start:end]`` holds records; ``base``
    is the file's start offset (absolute offset of ``view[0]``)."""

    view: memoryview
    base: int
    start: int
    end: int
    dledger: bool = False


def segment_size_of(directory: Path) -> int | None:
    if not directory.is_dir():
        return None
    sizes = {
        p.stat().st_size for p in directory.iterdir() if p.is_file() and not p.name.startswith(".") and p.name.isdigit()
    }
    if not sizes:
        return None
    if len(sizes) > 1:
        raise ValueError(f"{directory}: commit-log files of mixed sizes {sorted(sizes)}")
    return sizes.pop()


class FlushService:
    """FlushRealTimeService and GroupCommitService in one thread.

    It msyncs what was written every ``interval_ms`` (fewer than ``least_pages`` new pages wait,
    except every ``thorough_ms``), and at once when a put waits for its bytes (``wait_flushed``):
    every put waiting meanwhile is answered by the same msync (group commit).
    """

    def __init__(self, log_: CommitLog, interval_ms: int, least_pages: int, thorough_ms: int) -> None:
        self.log = log_
        self.interval = max(interval_ms, 1) / 1000.0
        self.least_pages = least_pages
        self.thorough = thorough_ms / 1000.0
        self._cond = threading.Condition()
        self._wanted = 0
        self._stop = False
        self._failed: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="rocketmq-commitlog-flush", daemon=True)
        self.on_flushed: Callable[[], None] | None = None

    def start(self) -> None:
        self._thread.start()

    def wait_flushed(self, offset: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            if offset > self._wanted:
                self._wanted = offset
                self._cond.notify_all()
            while self.log.flushed_where < offset:
                left = deadline - time.monotonic()
                if left <= 0 or self._failed is not None or self._stop:
                    return self.log.flushed_where >= offset
                self._cond.wait(left)
        return True

    def _run(self) -> None:
        last_thorough = time.monotonic()
        while True:
            with self._cond:
                if not self._stop and self._wanted <= self.log.flushed_where:
                    self._cond.wait(self.interval)
                if self._stop:
                    break
                urgent = self._wanted > self.log.flushed_where
            now = time.monotonic()
            least = 0 if urgent or now - last_thorough >= self.thorough else self.least_pages
            if least == 0:
                last_thorough = now
            try:
                self.log.flush(least)
                if self.on_flushed is not None:
                    self.on_flushed()
            except BaseException as exc:  # keep serving: a later flush may succeed
                log.exception("commit log flush failed")
                self._failed = exc
            with self._cond:
                self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join()


class LogFiles:
    """What both commit logs derive from their file list (``files``, ``file_size``) and
    ``max_offset``: MappedFileQueue's positions as CommitLog and DLedgerCommitLog expose them."""

    files: Any
    file_size: int
    last_store_timestamp: int
    record_header_size: int

    def _store_time(self) -> int:
        """A put's STORETIMESTAMP, taken under the put lock: the clock, never behind the last
        put's (CommitLog.putMessage's beginTimeInLock), so a binary search on store times holds."""
        now = int(time.time() * 1000)
        return now if now > self.last_store_timestamp else self.last_store_timestamp

    @property
    def max_offset(self) -> int:
        raise NotImplementedError

    @property
    def readable_end(self) -> int:
        return self.max_offset

    @property
    def flushed_where(self) -> int:
        return int(self.files.flushed_where)

    def roll_next_file(self, offset: int) -> int:
        return offset + self.file_size - offset % self.file_size

    def find_file(self, offset: int) -> Any:
        """The mapped file holding ``offset`` (None when none does)."""
        return self.files.find(offset)

    def header_size_at(self, offset: int) -> int:
        """Bytes from where dispatch reads the record at ``offset`` to the record."""
        return self.record_header_size


class CommitLog(LogFiles):
    """The classic commit log of one store root."""

    dledger = False
    # Bytes from where dispatch reads a record to the record (DLedger: the entry header).
    record_header_size = 0

    def __init__(self, config: MessageStoreConfig, checkpoint: StoreCheckpoint, *, readonly: bool = False) -> None:
        self.config = config
        self.checkpoint = checkpoint
        self.readonly = readonly
        self.path = config.commit_log_path
        self.file_size = segment_size_of(self.path) or config.mapped_file_size_commit_log
        if not readonly:
            self.path.mkdir(parents=True, exist_ok=True)
        self.files = _segment.MmapFileList(str(self.path), self.file_size, readonly, guarded=True)
        self.files.load()
        self.files.check_self()
        self.put_lock = K.PutLock()
        # Structural changes (retention, close) exclude readers of mapped views (read_lock) and
        # the flush (flush_lock, so an msync does not hold up readers).
        self.read_lock = threading.RLock()
        self.flush_lock = threading.Lock()
        self.topic_queue_table: dict[str, int] = {}
        self.last_store_timestamp = 0
        self._flushed_store_timestamp = 0
        self.flush_service: FlushService | None = None
        self.recovered_from = 0
        self.closed = False
        self._prefault_stop = threading.Event()
        # Set with the stop and when a put creates a file (MmapFileList.on_create), whose first
        # pages the thread then makes at once rather than at its next look.
        self._prefault_wake = threading.Event()
        self._prefaulter: threading.Thread | None = None
        # (file start offset, how far its pages are faulted in)
        self._prefaulted = (-1, 0)

    # -- offsets -------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        """getMinOffset: the start of the first file (-1 when there is none)."""
        files = self.files.files
        if not files:
            return -1
        return int(files[0].file_from_offset)

    @property
    def max_offset(self) -> int:
        """getMaxOffset: where the next record goes; everything below is readable."""
        return int(self.files.max_wrote_position)

    # -- recovery ------------------------------------------------------------------------

    def _first_store_timestamp(self, f: object) -> int:
        view = f.view(0, 128)  # type: ignore[attr-defined]
        try:
            if len(view) < 64:
                return 0
            _size, magic = _BLANK.unpack_from(view, 0)
            if magic != K.MESSAGE_MAGIC_CODE:
                return 0
            (sys_flag,) = struct.unpack_from(">i", view, K.SYSFLAG_POSITION)
            at = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + (20 if sys_flag & 16 else 8)
            (ts,) = struct.unpack_from(">q", view, at)
            return int(ts)
        finally:
            view.release()

    def recover(self, normal: bool, resume_at: int = -1) -> int:
        """recoverNormally / recoverAbnormally: find the end of the valid records and cut the
        log there. Returns the offset recovery started scanning at (dispatch must redo
        everything from there after an abnormal exit).

        ``resume_at`` (a read-only store only): a record boundary below which the records are
        known whole (the end of what the consume queues point at); the scan starts there
        rather than up to three files back. A reader cuts nothing and checks each record it
        reads, so it only needs where the log ends, not a proof of what lies before."""
        files = self.files.files
        if not files:
            self.files.flushed_where = 0
            return 0
        first_pos = 0
        if resume_at >= 0 and self.readonly and self.files.find(resume_at) is not None:
            k = next(
                j for j, f in enumerate(files) if f.file_from_offset <= resume_at < f.file_from_offset + f.file_size
            )
            first_pos = resume_at - int(files[k].file_from_offset)
        elif normal:
            k = max(len(files) - 3, 0)
        else:
            # The last file whose first message is older than what the checkpoint vouches for.
            limit = (
                self.checkpoint.min_timestamp_index
                if self.config.message_index_enable and self.config.message_index_safe
                else self.checkpoint.min_timestamp
            )
            k = 0
            for j in range(len(files) - 1, -1, -1):
                ts = self._first_store_timestamp(files[j])
                if ts != 0 and ts <= limit:
                    k = j
                    break
        start_offset = int(files[k].file_from_offset)
        check_crc = self.config.check_crc_on_recover
        process = start_offset
        torn_at = -1
        last_ts = 0
        for j in range(k, len(files)):
            f = files[j]
            view = f.view()
            try:
                pos = first_pos if j == k else 0
                while True:
                    cols, stop, code = K.scan_records(view, f.file_from_offset, pos, -1, check_crc, _SCAN_CHUNK)
                    if len(cols["size"]):
                        last_ts = int(cols["store_timestamp"][-1])
                    pos = stop
                    if code != K.STOP_LIMIT:
                        break
            finally:
                view.release()
            process = f.file_from_offset + pos
            if code == K.STOP_BLANK and j + 1 < len(files):
                continue
            if code == K.STOP_END and j + 1 < len(files):
                continue
            if code in (K.STOP_BAD, K.STOP_CRC):
                torn_at = process
                log.warning(
                    "commit log recovery: %s at %d in %s; the log ends there", K.STOP_NAMES[code], process, f.path
                )
            break
        self._truncate(process, torn_at >= 0)
        if last_ts:
            self.last_store_timestamp = max(self.last_store_timestamp, last_ts)
        self.recovered_from = start_offset
        return start_offset

    def _truncate(self, offset: int, torn: bool) -> None:
        """truncateDirtyFiles: files past ``offset`` go, the one holding it ends there."""
        for f in self.files.files:
            if f.file_from_offset <= offset < f.file_from_offset + f.file_size:
                rel = offset - f.file_from_offset
                if torn and not self.readonly:
                    # Stale bytes past the end must not read as records after the next crash.
                    f.zero_range(rel, min(f.file_size, rel + max(_TORN_ZERO_MIN, self.config.max_message_size)))
                # Set first: truncate_offset then zeroes nothing of the (sparse) rest of the file.
                f.wrote_position = rel
                f.flushed_position = rel
        if not self.readonly:
            self.files.truncate_offset(offset)
        else:
            keep = []
            for f in self.files.files:
                if f.file_from_offset <= offset:
                    keep.append(f)
                else:
                    f.close()
            self.files.files = keep
        self.files.flushed_where = offset

    # -- puts ----------------------------------------------------------------------------

    def _place(self, lengths: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
        """Physical offsets for records of ``lengths`` from the write position, rolling to new
        files as RocketMQ does; and the runs ``(first, last+1, file_from)`` per file."""
        n = len(lengths)
        f = self.files.last_file(0, False)
        if f is None or f.is_full():
            pos = 0 if f is None else f.file_from_offset + f.file_size
        else:
            pos = f.file_from_offset + f.wrote_position
        size = self.file_size
        base = pos - pos % size
        if n == 1 and pos + int(lengths[0]) + K.END_FILE_MIN_BLANK_LENGTH <= base + size:
            return np.array([pos], dtype=np.int64), [(0, 1, base)]
        ends = pos + np.cumsum(lengths)
        if int(ends[-1]) + K.END_FILE_MIN_BLANK_LENGTH <= base + size:
            phys = ends - lengths
            return phys, [(0, n, base)]
        phys = np.empty(n, dtype=np.int64)
        runs: list[tuple[int, int, int]] = []
        first = 0
        for i in range(n):
            ln = int(lengths[i])
            if pos + ln + K.END_FILE_MIN_BLANK_LENGTH > base + size:
                runs.append((first, i, base))
                first = i
                base += size
                pos = base
            phys[i] = pos
            pos += ln
        runs.append((first, n, base))
        return phys, runs

    def put(self, batch: PreparedBatch) -> AppendMessageResult:
        """Write a prepared batch; returns where it landed. Raises on I/O failure with nothing
        recorded in the topic-queue table."""
        if batch.n == 1:
            return self._put_one(batch)
        if batch.longest_record() + _END_MIN_BLANK > self.file_size:
            return AppendMessageResult(AppendMessageStatus.MESSAGE_SIZE_EXCEEDED)
        with self.put_lock:
            now = self._store_time()
            queue_offsets, updates = assign_queue_offsets(self.topic_queue_table, batch)
            phys, runs = self._place(batch.record_lengths())
            buf, starts = encode_batch(batch, queue_offsets, phys, now)
            mv = memoryview(buf)
            for first, last, file_from in runs:
                if first == last:
                    continue
                f = self.files.last_file(file_from, True)
                if f.file_from_offset != file_from:
                    # The current file must end here: mark the rest as END_OF_FILE.
                    self._end_file(f)
                    f = self.files.last_file(file_from, True)
                at = f.append(mv[int(starts[first]) : int(starts[last])], True)
                if at < 0:
                    raise OSError(f"{f.path}: records did not fit where they were placed")
            self.topic_queue_table.update(updates)
            self.last_store_timestamp = now
        return AppendMessageResult(
            AppendMessageStatus.PUT_OK,
            wrote_offset=int(phys[0]),
            wrote_bytes=int(starts[-1]),
            store_timestamp=now,
            logics_offset=int(queue_offsets[0]),
            msg_num=batch.n,
            store_host=batch.store_hosts[0],
            wrote_offsets=phys,
            queue_offsets=queue_offsets,
        )

    def put_uniform(self, batch: UniformBatch) -> AppendMessageResult:
        """``put`` of a batch of one template (the store's put_batch): one kernel call encodes it
        with its offsets, one append writes it, when it fits the current file; else (and for
        one message) ``put`` of it as columns."""
        if batch.n > 1 and batch.longest + _END_MIN_BLANK <= self.file_size:
            with self.put_lock:
                now = self._store_time()
                res = self._put_uniform(batch, now)
            if res is not None:
                return res
        return self.put(batch.prepared())

    def _put_uniform(self, batch: UniformBatch, now: int) -> AppendMessageResult | None:
        """The records of ``batch`` at the end of the current file; None (nothing done) when
        they do not fit there. Under the lock."""
        f = self.files.last_file(0, True)
        pos = f.file_from_offset + f.wrote_position
        tpl = batch.tpl
        key = tpl.queue_key
        advances = tpl.advances
        first = self.topic_queue_table.get(key, 0) if advances else 0
        buf, offsets = batch.encode(first, pos, now)
        if f.wrote_position + len(buf) + K.END_FILE_MIN_BLANK_LENGTH > f.file_size:
            return None
        # The GIL let go for the write: dispatch runs meanwhile (see WRITE_RELEASE in _ext/segment.pyx).
        if f.append(buf, True) < 0:
            raise OSError(f"{f.path}: records did not fit where they were placed")
        n = batch.n
        if advances:
            self.topic_queue_table[key] = first + n
        self.last_store_timestamp = now
        # Positional, the queue offsets built when read (see AppendMessageResult).
        return AppendMessageResult(
            _PUT_OK, pos, len(buf), now, first, n, tpl.sraw, offsets[:-1], None, None, 0, advances
        )

    def _put_one(self, batch: PreparedBatch) -> AppendMessageResult:
        """``put`` of one message, in plain Python ints (numpy costs more than it saves here)."""
        length = int(batch.record_lengths()[0])
        if length + K.END_FILE_MIN_BLANK_LENGTH > self.file_size:
            return AppendMessageResult(AppendMessageStatus.MESSAGE_SIZE_EXCEEDED)
        key = batch.queue_keys[0]
        advances = bool(batch.advances[0])
        with self.put_lock:
            now = self._store_time()
            queue_offset = self.topic_queue_table.get(key, 0) if advances else 0
            f = self.files.last_file(0, True)
            if f.wrote_position + length + K.END_FILE_MIN_BLANK_LENGTH > f.file_size:
                self._end_file(f)
                f = self.files.last_file(0, True)
            pos = f.file_from_offset + f.wrote_position
            if f.append(encode_one(batch, queue_offset, pos, now)) < 0:
                raise OSError(f"{f.path}: the record did not fit where it was placed")
            if advances:
                self.topic_queue_table[key] = queue_offset + 1
            self.last_store_timestamp = now
        return AppendMessageResult(
            AppendMessageStatus.PUT_OK,
            wrote_offset=pos,
            wrote_bytes=length,
            store_timestamp=now,
            logics_offset=queue_offset,
            msg_num=1,
            store_host=batch.store_hosts[0],
        )

    def put_one(
        self,
        tpl: Any,
        body: bytes,
        flag: int,
        born_ts: int,
        reconsume: int,
        prepared: int,
        uniq_head: bytes,
        counter: int,
    ) -> AppendMessageResult:
        """putMessage of one message of template ``tpl`` (``K.PutTemplate``): one kernel call
        encodes the record with what the lock assigns, one append writes it."""
        length = tpl.fixed_len + len(body)
        if length + _END_MIN_BLANK > self.file_size:
            return AppendMessageResult(AppendMessageStatus.MESSAGE_SIZE_EXCEEDED)
        key = tpl.queue_key
        advances = tpl.advances
        table = self.topic_queue_table
        # The lock by acquire/release and the store time inline (_store_time's rule): a single
        # put of 100 B is Python calls, and these cost it ~0.25 us (docs/message-store.md).
        lock = self.put_lock
        lock.acquire()
        try:
            now = int(_time() * 1000)
            if now < self.last_store_timestamp:
                now = self.last_store_timestamp
            queue_offset = table.get(key, 0) if advances else 0
            f = self.files.last_file(0, True)
            if f.wrote_position + length + _END_MIN_BLANK > f.file_size:
                self._end_file(f)
                f = self.files.last_file(0, True)
            pos = f.file_from_offset + f.wrote_position
            rec = _encode_put(tpl, body, uniq_head, counter, flag, born_ts, reconsume, prepared, queue_offset, pos, now)
            if f.append(rec) < 0:
                raise OSError(f"{f.path}: the record did not fit where it was placed")
            if advances:
                table[key] = queue_offset + 1
            self.last_store_timestamp = now
        finally:
            lock.release()
        return AppendMessageResult(_PUT_OK, pos, length, now, queue_offset, 1, tpl.store_host)

    def append_data(self, start_offset: int, data: Any) -> bool:
        """appendData (a slave's HA append): ``data`` as the master wrote it, at ``start_offset``,
        which must be this log's end (or anywhere in an empty log: the file holding it is made)
        and within one file. False, nothing written, otherwise."""
        with self.put_lock:
            end = self.max_offset
            if self.files.files and start_offset != end:
                log.error("HA append at %d refused: the commit log ends at %d", start_offset, end)
                return False
            f = self.files.last_file(start_offset, True)
            if f.file_from_offset + f.wrote_position != start_offset:
                log.error("HA append at %d refused: the file %s ends elsewhere", start_offset, f.path)
                return False
            # No fallocate on the HA thread: it slept up to 0.5 s in ext4's allocator (block
            # bitmap reads) on a busy disk, holding every frame behind it (docs/ha.md).
            f.skip_allocate_ahead()
            # Below the pre-written mark (to its folio) the frames are copied through the mapping
            # in pieces small enough to keep the GIL (MAPPED_APPENDS in _ext/segment.pyx):
            # letting go would cost the HA thread a wait of up to 5 ms to have it back on a busy
            # broker. Past it, one write that lets go of the GIL: there a write may wait on the
            # prefault's write guard, which spinning with the GIL held stalled the slave's
            # appends for up to 80 ms (docs/ha.md).
            rel = start_offset - f.file_from_offset
            mapped_end = f.prewritten_to // _HA_FOLIO * _HA_FOLIO if f.guarded else 0
            view = memoryview(data)
            done, n = 0, len(view)
            while done < n:
                piece = min(n - done, _HA_MAPPED_PIECE)
                if rel + done + piece > mapped_end:
                    return bool(f.append(view[done:], True) >= 0)
                if f.append(view[done : done + piece], False) < 0:
                    return False
                done += piece
            return True

    def _end_file(self, f: object) -> None:
        remaining = f.file_size - f.wrote_position  # type: ignore[attr-defined]
        if remaining >= K.END_FILE_MIN_BLANK_LENGTH:
            f.append(_BLANK.pack(remaining, K.BLANK_MAGIC_CODE))  # type: ignore[attr-defined]
        f.wrote_position = f.file_size  # type: ignore[attr-defined]

    # -- reads ---------------------------------------------------------------------------

    @contextmanager
    def reading(self) -> Iterator[None]:
        with self.read_lock:
            yield

    def segment(self, offset: int, limit: int | None = None) -> Segment | None:
        """The records from ``offset`` to the end of its file's written part (or ``limit``).
        Call under ``reading()`` and release the view before leaving it."""
        if self.closed:
            return None
        f = self.files.find(offset)
        if f is None:
            return None
        end = f.wrote_position
        if limit is not None:
            end = min(end, limit - f.file_from_offset)
        rel = offset - f.file_from_offset
        if rel >= end:
            return None
        return Segment(f.view(), int(f.file_from_offset), rel, int(end))

    def read(self, offset: int, size: int) -> bytes | None:
        """The ``size`` bytes of the record at ``offset``, or None if they are not (or no longer) there."""
        with self.read_lock:
            if self.closed:
                return None
            f = self.files.find(offset)
            if f is None:
                return None
            rel = offset - f.file_from_offset
            if rel + size > f.wrote_position or rel < 0:
                return None
            return bytes(f.read(rel, size))

    def record_size_at(self, offset: int) -> int:
        with self.read_lock:
            f = self.files.find(offset)
            if f is None or offset - f.file_from_offset + 8 > f.wrote_position:
                return -1
            size, magic = _BLANK.unpack(f.read(offset - f.file_from_offset, 8))
            return int(size) if magic == K.MESSAGE_MAGIC_CODE else -1

    # -- durability ----------------------------------------------------------------------

    def flush(self, least_pages: int = 0) -> int:
        if self.readonly or self.closed:
            return self.flushed_where
        # The store time of a message whose record ends at or before ``target`` (a put sets its
        # write position before its timestamp).
        ts = self.last_store_timestamp
        target = self.max_offset
        with self.flush_lock:
            if self.closed:
                return self.flushed_where
            where = int(self.files.flush(least_pages))
        if where >= target and ts:
            # Everything put before this flush began is on disk: what StoreCheckpoint vouches for.
            self.checkpoint.physic_msg_timestamp = max(self.checkpoint.physic_msg_timestamp, ts)
        return where

    def _prefault_loop(self) -> None:
        wait = PREFAULT_POLL_S
        last_end = -1
        while True:
            self._prefault_wake.wait(wait)
            self._prefault_wake.clear()
            if self._prefault_stop.is_set():
                break
            try:
                while self._prefault_step():
                    pass
            except Exception:  # a missed prefault costs the put thread a fault, nothing more
                log.exception("commit log prefault failed; retrying")
                self._prefault_stop.wait(1.0)
            end = self.max_offset if not self.closed else -1
            wait = PREFAULT_POLL_S if end != last_end else PREFAULT_IDLE_S
            last_end = end

    def _prefault_step(self) -> bool:
        """Fault in the next PREFAULT_STEP of the last file if it is less than PREFAULT_AHEAD past
        the write position; True when there may be more to do."""
        with self.read_lock:  # what unmaps files (close, retention) takes it
            if self.closed or not self.files.files:
                return False
            f = self.files.files[-1]
            base, done = self._prefaulted
            wrote = int(f.wrote_position)
            start = max(done if base == f.file_from_offset else 0, wrote)
            end = min(wrote + PREFAULT_AHEAD, int(f.file_size), start + PREFAULT_STEP)
            if end - start < PREFAULT_STEP // 2 and end < f.file_size:
                return False
            if start >= end:
                return False
            f.prewrite(start, end)
            self._prefaulted = (int(f.file_from_offset), end)
            return True

    def start(self) -> None:
        if self.readonly or self.flush_service is not None:
            return
        try:
            # The first step before any put: a reopened store's first puts would otherwise race
            # the thread's first step for the same pages (by pwrite, under the write guard). A
            # new store has no file yet: the put that creates it wakes the thread.
            self._prefault_step()
        except OSError:
            log.exception("commit log prefault failed; the thread retries")
        self.files.on_create = lambda _f: self._prefault_wake.set()
        self._prefaulter = threading.Thread(target=self._prefault_loop, name="rocketmq-commitlog-prefault", daemon=True)
        self._prefaulter.start()
        cfg = self.config
        if cfg.sync_flush:
            self.flush_service = FlushService(self, 10, 0, 0)
        else:
            self.flush_service = FlushService(
                self,
                cfg.flush_interval_commit_log,
                cfg.flush_commit_log_least_pages,
                cfg.flush_commit_log_thorough_interval,
            )
        self.flush_service.start()

    def wait_flushed(self, offset: int) -> bool:
        svc = self.flush_service
        if svc is None:
            self.flush()
            return self.flushed_where >= offset
        return svc.wait_flushed(offset, self.config.sync_flush_timeout / 1000.0)

    # -- retention -----------------------------------------------------------------------

    def delete_expired(
        self,
        expired_ms: float,
        now_ms: float,
        clean_immediately: bool,
        max_files: int = 10,
        used_ratio: float | None = None,
        keep_from: int = -1,
    ) -> int:
        """deleteExpiredFileByTime: whole files (never the last, nor one holding ``keep_from`` or
        later bytes: what dispatch has still to read) older than ``expired_ms``. The caller
        decided it is time (``used_ratio`` is for the DLedger log, which decides itself)."""
        if self.readonly:
            return 0
        with self.read_lock, self.flush_lock:
            return int(self.files.delete_expired_by_time(expired_ms, now_ms, clean_immediately, max_files, keep_from))

    def close(self) -> None:
        if self.closed:
            return
        self._prefault_stop.set()
        self._prefault_wake.set()
        if self._prefaulter is not None:
            self._prefaulter.join()
            self._prefaulter = None
        self.files.on_create = None
        if self.flush_service is not None:
            self.flush_service.stop()
            self.flush_service = None
        self.flush()
        with self.read_lock, self.flush_lock:
            self.closed = True
            self.files.close()
