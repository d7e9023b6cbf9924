"""One consume-queue file (RocketMQ's MappedFile under a ConsumeQueue's MappedFileQueue), mapped in full.

Files are created whole (sized under a dot-name, then renamed), written through a shared mapping
and flushed with msync; a big write has the pages of the next writes like it faulted in ahead,
off the GIL."""

from __future__ import annotations

import logging
import mmap
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dledger._ext import load as _load_ext
from dledger.files import create_sized

log = logging.getLogger(__name__)
_mk = _load_ext("message")
_segment = _load_ext("segment")

CQ_STORE_UNIT_SIZE = 20


# commitLogOffset, size, tagsCode: RocketMQ's 20-byte unit, read in place over a file's bytes.
UNIT_DTYPE = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])


# A write this big (a dispatch round of a busy queue) has the pages of PREFAULT_WRITES more like
# it faulted in, in a thread of their own without the GIL, so the next rounds write to mapped
# pages instead of taking a fault per page; smaller writes are left alone: a quiet queue's file
# should not grow page-cache and disk use for units it may never get.
PREFAULT_MIN_WRITE = 16 << 10
PREFAULT_WRITES = 8

# A store through a mapping into a page without blocks faults (SIGBUS) on a full disk, where a
# write answers ENOSPC: so the consume queues and the index reserve blocks (fallocate) before
# they store. The filesystem reserves blocks for a store's whole page-cache folio (ext4 has
# large folios since Linux 6.16, up to a 2 MiB PMD: the segment kernel's FOLIO_MAX), so a
# reservation ends at such a boundary (or at the file's end) and starts at one.
RESERVE_ALIGN: int = _segment.FOLIO_MAX_BYTES


def reserve_blocks(path: Path, start: int, end: int) -> None:
    """Allocate the blocks of ``path``'s bytes ``start``..``end`` (its size unchanged; glibc
    writes zeros where the filesystem has no fallocate). Raises OSError (ENOSPC: the disk is full),
    with whatever was allocated kept."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.posix_fallocate(fd, start, end - start)
    finally:
        os.close(fd)


def reserve_end(end: int, file_size: int) -> int:
    """Where a reservation covering byte ``end`` stops: the folio boundary at or past it."""
    return min(file_size, -(-end // RESERVE_ALIGN) * RESERVE_ALIGN)


def reserve_through(path: Path, reserved_to: int, end: int, file_size: int, what: str) -> int:
    """The one reservation of the message store's mapped files (consume queue, index): blocks
    of ``path`` from the folio holding ``reserved_to`` (reserved already) to the folio boundary
    at or past ``end``, before stores through the mapping up to ``end``. Returns the new
    reserved end; OSError naming ``what`` and the file (ENOSPC: the disk is full) rather than
    SIGBUS at the store."""
    if end <= reserved_to:
        return reserved_to
    target = reserve_end(end, file_size)
    start = reserved_to - reserved_to % RESERVE_ALIGN
    try:
        reserve_blocks(path, start, target)
    except OSError as exc:
        raise OSError(exc.errno, f"{what} {path}: cannot reserve its blocks: {exc.strerror}") from exc
    return target


def _prefault(mm: mmap.mmap, start: int, end: int) -> None:
    try:
        _mk.prefault(mm, start, end, _mk.PREFAULT_WRITE)
    except (ValueError, BufferError):  # pragma: no cover - the file was closed under us
        pass


class MappedFile:
    """One consume-queue file, mapped in full. Positions are relative to the file."""

    __slots__ = (
        "_prefaulted_to",
        "_prefaulter",
        "dirty_from",
        "dirty_to",
        "file_from_offset",
        "file_size",
        "first_create_in_queue",
        "mm",
        "path",
        "readonly",
        "reserved_to",
        "wrote_position",
    )

    def __init__(self, path: Path, file_size: int, *, create: bool = False, readonly: bool = False) -> None:
        self.path = path
        self.file_size = file_size
        self.file_from_offset = int(path.name)
        self.readonly = readonly
        self.wrote_position = 0
        # Bytes below this have their blocks (reserve): 0 for a file opened again, whose first
        # reservation then covers what it holds too (a no-op where blocks are).
        self.reserved_to = 0
        self.first_create_in_queue = False
        self.dirty_from = file_size
        self.dirty_to = 0
        self._prefaulter: threading.Thread | None = None
        self._prefaulted_to = 0
        if create:
            if readonly:
                raise PermissionError(f"read-only consume queue: cannot create {path}")
            fd = create_sized(path, file_size)
        else:
            fd = os.open(path, os.O_RDONLY if readonly else os.O_RDWR)
        try:
            access = mmap.ACCESS_READ if readonly else mmap.ACCESS_WRITE
            self.mm: mmap.mmap | None = mmap.mmap(fd, file_size, access=access)
        except BaseException:
            if create:
                # Nothing is in it yet: gone, the next try makes it again (left, every retry
                # failed on it with FileExistsError, e.g. after one EMFILE).
                path.unlink(missing_ok=True)
            raise
        finally:
            os.close(fd)
        if create and hasattr(mmap, "MADV_RANDOM"):
            # A new file is one hole. A fault in it would read ahead as for a read of the file:
            # read_ahead_kb of zero-filled page cache (8 MB on a virtio disk, so the whole 6 MB
            # file and 3 ms for a queue's first unit), where units fill it 20 bytes at a time and
            # a quiet queue may never need more than a page. Its pages come in as they are
            # written or prefaulted ahead of a busy queue's writes instead.
            self.mm.madvise(mmap.MADV_RANDOM)

    @property
    def view(self) -> memoryview:
        assert self.mm is not None, "closed"
        return memoryview(self.mm)

    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def reserve(self, end: int) -> None:
        """Blocks for the bytes below ``end`` (and up to the folio boundary past it), before a
        store through the mapping there: OSError (ENOSPC) rather than SIGBUS on a full disk."""
        if end > self.reserved_to:
            self.reserved_to = reserve_through(self.path, self.reserved_to, end, self.file_size, "consume queue file")

    def reserved_room(self, ahead: int) -> int:
        """Bytes past the write position a store may take without faulting: reserved (up to
        ``ahead`` more asked for now; a full disk leaves what was reserved before)."""
        try:
            self.reserve(min(self.wrote_position + ahead, self.file_size))
        except OSError as exc:
            log.warning("%s", exc)
        return max(self.reserved_to - self.wrote_position, 0)

    def write(self, pos: int, data: bytes | memoryview, prefault: bool = True) -> None:
        assert self.mm is not None and not self.readonly
        end = pos + len(data)
        self.reserve(end)
        _mk.copy_into(self.mm, pos, data)
        self.written(pos, end, prefault)

    def written(self, pos: int, end: int, prefault: bool = True) -> None:
        """Bookkeeping of bytes ``pos``..``end`` written into the mapping (by ``write``, or by a
        kernel: dispatch's ``dispatch_round``): what the next flush covers, and, with
        ``prefault``, the pages ahead in a thread (dispatch has its next kernel call fault them
        in instead: a thread started from its round costs the round GIL hand-overs)."""
        self.dirty_from = min(self.dirty_from, pos)
        self.dirty_to = max(self.dirty_to, end)
        n = end - pos
        if prefault and n >= PREFAULT_MIN_WRITE and end + n > self._prefaulted_to and end < self.file_size:
            self._prefault_ahead(end, n * PREFAULT_WRITES)

    def _prefault_ahead(self, start: int, length: int) -> None:
        if self._prefaulter is not None and self._prefaulter.is_alive():
            return
        start = max(start, self._prefaulted_to)
        end = min(start + length, self.file_size)
        if start >= end:
            return
        self._prefaulted_to = end
        t = threading.Thread(target=_prefault, args=(self.mm, start, end), name="CQPrefault", daemon=True)
        self._prefaulter = t
        t.start()

    def units(self, start: int = 0, end: int | None = None) -> NDArray[Any]:
        """The units between byte ``start`` and ``end`` (default: the wrote position), in place."""
        end = self.wrote_position if end is None else end
        count = max(end - start, 0) // CQ_STORE_UNIT_SIZE
        return np.frombuffer(self.view, dtype=UNIT_DTYPE, count=count, offset=start)

    def flush(self) -> None:
        for job in self.flush_jobs():
            job()

    def flush_jobs(self) -> list[Callable[[], None]]:
        """What a flush of this file has to write, taken now (the dirty range is reset): the
        msync to run later, outside the lock that excludes dispatch (see MessageStore.flush_logics)."""
        if self.mm is None or self.readonly or self.dirty_to <= self.dirty_from:
            return []
        page = mmap.PAGESIZE
        lo = self.dirty_from - self.dirty_from % page
        hi = self.dirty_to
        self.dirty_from, self.dirty_to = self.file_size, 0

        def sync() -> None:
            if self.mm is None:
                return
            try:
                # mmap.flush would hold the GIL through the msync; the units are appended through
                # the mapping, so the pages below the last are done with (see sync_mapped).
                _mk.sync_mapped(self.mm, lo, hi - lo, True)
            except BaseException:
                self.dirty_from, self.dirty_to = min(self.dirty_from, lo), max(self.dirty_to, hi)
                raise

        return [sync]

    def close(self) -> None:
        if self._prefaulter is not None:
            self._prefaulter.join()  # it holds the mapping while it runs
            self._prefaulter = None
        if self.mm is not None:
            self.flush()
            try:
                self.mm.close()
            except BufferError:  # a caller still holds a view of it: the mapping goes with it
                log.debug("consume queue file %s still viewed at close", self.path)
            self.mm = None

    def destroy(self) -> None:
        self.close()
        if not self.readonly:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
