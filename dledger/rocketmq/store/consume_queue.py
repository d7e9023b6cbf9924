"""RocketMQ 4.9.4's ``ConsumeQueue`` (with the ``MappedFileQueue`` under it) and the per-topic table.

A consume queue is a directory ``<root>/consumequeue/<topic>/<queueId>/`` of equal-size files named
by their first byte offset (20 digits). Unit *n* sits at byte ``n * 20``: commitLogOffset (i64),
size (i32), tagsCode (i64), big-endian. A queue whose first unit is not at offset 0 starts with
"pre-blank" units (0, Integer.MAX_VALUE, 0) up to it, as RocketMQ's ``fillPreBlank`` writes.

Files are created whole (sized under a dot-name, then renamed), written through a shared mapping
and flushed with msync. ``readonly=True`` maps files read-only and never writes, creates or
deletes anything.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dledger._ext import load as _load_ext
from dledger.files import CREATING_SUFFIX, fsync_dir
from dledger.rocketmq.store.mapped_file import CQ_STORE_UNIT_SIZE, MappedFile

log = logging.getLogger(__name__)

DEFAULT_FILE_SIZE = 300000 * CQ_STORE_UNIT_SIZE
INT_MAX = 2**31 - 1
# Suffix of a file being created; such files are whole-or-nothing leftovers of a crash.
TMP_SUFFIX = CREATING_SUFFIX
# The room a kernel's run is given in reserved blocks past the write position (a dispatch
# round's 8192 units take 160 KiB); the reservation itself goes on to a folio boundary.
RUN_RESERVE = 256 << 10

_mk = _load_ext("message")


def encode_units(phys_offsets: ArrayLike, sizes: ArrayLike, tags_codes: ArrayLike) -> bytes:
    """``n * 20`` bytes of big-endian units."""
    phys = np.asarray(phys_offsets, dtype=np.int64)
    size = np.asarray(sizes, dtype=np.int32)
    tags = np.asarray(tags_codes, dtype=np.int64)
    return bytes(_mk.consume_queue_units(phys, size, tags))


def offset_to_file_name(offset: int) -> str:
    """UtilAll.offset2FileName: the start offset zero-padded to 20 digits."""
    return f"{offset:020d}"


class ConsumeQueue:
    """One topic/queue's consume queue (RocketMQ ``ConsumeQueue``).

    Opening loads the files and recovers the queue's end (``recover``), so ``max_offset`` and
    ``max_physic_offset`` are right at once. A file whose size differs from ``file_size`` is taken
    at its own size when every file of the queue agrees (as DLedger reads its segment size from
    the files), so a store written with another ``mappedFileSizeConsumeQueue`` still opens.
    """

    def __init__(
        self,
        root: Path | str,
        topic: str,
        queue_id: int,
        file_size: int = DEFAULT_FILE_SIZE,
        readonly: bool = False,
        *,
        queue_dir: Path | None = None,
    ) -> None:
        if file_size <= 0 or file_size % CQ_STORE_UNIT_SIZE:
            raise ValueError(f"consume queue file size must be a positive multiple of 20, not {file_size}")
        self.topic = topic
        self.queue_id = queue_id
        self.readonly = readonly
        self.dir = queue_dir if queue_dir is not None else Path(root) / "consumequeue" / topic / str(queue_id)
        self.file_size = file_size
        self.files: list[MappedFile] = []
        # Held by reads of the files' units and by whatever unmaps a file (retention, a cut of
        # dirty units, destroy, close): a pull at the low end, racing retention, read a file
        # being destroyed (RocketMQ counts references on its mapped files for the same reason).
        self._unmap_lock = threading.RLock()
        self.max_physic_offset = -1
        self.min_logic_offset = 0
        self._new_file = False
        self._load()
        self.recover()

    # -- loading and recovery ----------------------------------------------------------

    def _load(self) -> None:
        if not self.dir.is_dir():
            return
        paths = []
        for p in sorted(self.dir.iterdir(), key=lambda q: q.name):
            if p.name.startswith("."):
                if p.name.endswith(TMP_SUFFIX) and not self.readonly:
                    p.unlink(missing_ok=True)  # an interrupted creation: never held a unit
                continue
            if p.is_file() and p.name.isdigit():
                paths.append(p)
        if not paths:
            return
        sizes = {p.stat().st_size for p in paths}
        if len(sizes) != 1:
            raise ValueError(f"consume queue {self.dir}: files of different sizes {sorted(sizes)}")
        size = sizes.pop()
        if size != self.file_size:
            if size <= 0 or size % CQ_STORE_UNIT_SIZE:
                raise ValueError(f"consume queue {self.dir}: file size {size} is not a multiple of 20")
            log.info(
                "consume queue %s: files are %d bytes (configured %d); using the files' size",
                self.dir,
                size,
                self.file_size,
            )
            self.file_size = size
        for p in paths:
            f = MappedFile(p, self.file_size, readonly=self.readonly)
            f.wrote_position = self.file_size  # as MappedFileQueue.doLoad; recover() finds the end
            self.files.append(f)

    def recover(self) -> None:
        """Find the end: walk from the third-last file to the first unit that is not
        ``offset >= 0 and size > 0``, and drop what lies beyond it (files after it are deleted
        and the rest of its file zeroed, unless read-only)."""
        if not self.files:
            return
        index = max(len(self.files) - 3, 0)
        process_offset = self.files[index].file_from_offset
        for f in self.files[index:]:
            f.wrote_position = self.file_size
            units = f.units(0, self.file_size)
            bad = np.flatnonzero(~((units["offset"] >= 0) & (units["size"] > 0)))
            valid = int(bad[0]) if len(bad) else len(units)
            self._note_max_physic(units[:valid])
            process_offset = f.file_from_offset + valid * CQ_STORE_UNIT_SIZE
            if valid < len(units):
                break
        self._truncate_files(process_offset)

    def _note_max_physic(self, units: NDArray[Any]) -> None:
        """max_physic_offset from the last real unit of ``units``. Pre-blank units do not count:
        RocketMQ takes their 0 + Integer.MAX_VALUE, after which every later message of a commit
        log under 2 GiB looks already built and is dropped."""
        real = np.flatnonzero(~((units["offset"] == 0) & (units["size"] == INT_MAX) & (units["tags_code"] == 0)))
        if len(real):
            last = units[int(real[-1])]
            self.max_physic_offset = int(last["offset"]) + int(last["size"])

    def _truncate_files(self, offset: int) -> None:
        """MappedFileQueue.truncateDirtyFiles: files past ``offset`` go, the one holding it ends there."""
        keep: list[MappedFile] = []
        for f in self.files:
            if f.file_from_offset + self.file_size <= offset:
                keep.append(f)
            elif offset >= f.file_from_offset:
                self._set_end(f, offset - f.file_from_offset)
                keep.append(f)
            elif self.readonly:
                f.close()
            else:
                f.destroy()
        self.files = keep

    def _set_end(self, f: MappedFile, pos: int) -> None:
        """Move a file's end back to ``pos`` and zero what followed it, so a later recovery does
        not find the dropped units again (RocketMQ only moves its in-memory positions)."""
        old_end = f.wrote_position
        f.wrote_position = pos
        if self.readonly or pos >= self.file_size:
            return
        tail = f.units(pos, self.file_size)
        used = np.flatnonzero((tail["offset"] != 0) | (tail["size"] != 0) | (tail["tags_code"] != 0))
        if len(used):
            end = min(max(pos + (int(used[-1]) + 1) * CQ_STORE_UNIT_SIZE, old_end), self.file_size)
            f.write(pos, bytes(end - pos))

    # -- queries -----------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        """getMinOffsetInQueue: the first unit a reader may ask for."""
        return self.min_logic_offset // CQ_STORE_UNIT_SIZE

    @property
    def max_offset(self) -> int:
        """getMaxOffsetInQueue: the next unit's offset."""
        if not self.files:
            return 0
        last = self.files[-1]
        return (last.file_from_offset + last.wrote_position) // CQ_STORE_UNIT_SIZE

    @property
    def message_total(self) -> int:
        return self.max_offset - self.min_offset

    @property
    def units_per_file(self) -> int:
        return self.file_size // CQ_STORE_UNIT_SIZE

    def _find_file(self, logic_offset: int) -> MappedFile | None:
        if not self.files:
            return None
        first = self.files[0].file_from_offset
        i = (logic_offset - first) // self.file_size
        if 0 <= i < len(self.files) and self.files[i].file_from_offset <= logic_offset:
            return self.files[i]
        return None

    def get_units(
        self, start: int, max_count: int = 32
    ) -> tuple[NDArray[np.int64], NDArray[np.int32], NDArray[np.int64]]:
        """Up to ``max_count`` units from queue offset ``start`` (``getIndexBuffer``, continued
        into the next files): commit-log offsets, sizes and tags codes, as native arrays. Empty
        when ``start`` is below ``min_offset`` or at/after ``max_offset``."""
        phys: list[NDArray[Any]] = []
        sizes: list[NDArray[Any]] = []
        tags: list[NDArray[Any]] = []
        offset = start * CQ_STORE_UNIT_SIZE
        left = max_count
        with self._unmap_lock:
            self._collect_units(offset, left, phys, sizes, tags)
        if not phys:
            return np.empty(0, np.int64), np.empty(0, np.int32), np.empty(0, np.int64)
        return np.concatenate(phys), np.concatenate(sizes), np.concatenate(tags)

    def _collect_units(
        self, offset: int, left: int, phys: list[NDArray[Any]], sizes: list[NDArray[Any]], tags: list[NDArray[Any]]
    ) -> None:
        if offset >= 0 and offset >= self.min_logic_offset:
            while left > 0:
                f = self._find_file(offset)
                if f is None:
                    break
                pos = offset - f.file_from_offset
                units = f.units(pos, min(f.wrote_position, pos + left * CQ_STORE_UNIT_SIZE))
                if not len(units):
                    break
                phys.append(units["offset"].astype(np.int64))
                sizes.append(units["size"].astype(np.int32))
                tags.append(units["tags_code"].astype(np.int64))
                left -= len(units)
                offset += len(units) * CQ_STORE_UNIT_SIZE
                if pos + len(units) * CQ_STORE_UNIT_SIZE < self.file_size:
                    break

    def get_unit(self, offset: int) -> tuple[int, int, int] | None:
        """One unit ``(commit-log offset, size, tags code)``, or None outside [min, max)."""
        p, s, t = self.get_units(offset, 1)
        return (int(p[0]), int(s[0]), int(t[0])) if len(p) else None

    def iter_units(self, start: int | None = None, batch: int = 4096) -> Iterator[tuple[int, int, int, int]]:
        """``(queue offset, commit-log offset, size, tags code)`` from ``start`` (default min) to the end."""
        offset = self.min_offset if start is None else start
        while True:
            p, s, t = self.get_units(offset, batch)
            if not len(p):
                return
            for i in range(len(p)):
                yield offset + i, int(p[i]), int(s[i]), int(t[i])
            offset += len(p)

    def last_offset(self) -> int:
        """getLastOffset: the end (offset + size) of the last unit's message, -1 if none."""
        if not self.files:
            return -1
        f = self.files[-1]
        pos = max(f.wrote_position - CQ_STORE_UNIT_SIZE, 0)
        units = f.units(pos, f.wrote_position)
        if not len(units) or units[-1]["offset"] < 0 or units[-1]["size"] <= 0:
            return -1
        return int(units[-1]["offset"]) + int(units[-1]["size"])

    def offset_for_timestamp(self, timestamp: int, store_timestamp_of: Any, min_phys_offset: int) -> int:
        """getOffsetInQueueByTime: binary search of one file for the unit whose message's store
        time is nearest ``timestamp``. ``store_timestamp_of(phys, size)`` reads a message's store
        timestamp (-1 if unreadable). RocketMQ picks the file by its modification time; so do we."""
        with self._unmap_lock:
            return self._offset_for_timestamp(timestamp, store_timestamp_of, min_phys_offset)

    def _offset_for_timestamp(self, timestamp: int, store_timestamp_of: Any, min_phys_offset: int) -> int:
        if not self.files:
            return 0
        ms = int(timestamp)
        chosen = self.files[-1]
        for f in self.files:
            if int(os.stat(f.path).st_mtime * 1000) >= ms:
                chosen = f
                break
        units = chosen.units(0, chosen.wrote_position)
        low = max(self.min_logic_offset - chosen.file_from_offset, 0) // CQ_STORE_UNIT_SIZE
        high = len(units) - 1
        target = left = right = -1
        left_value = right_value = -1
        while high >= low:
            mid = (low + high) // 2
            phy, size = int(units[mid]["offset"]), int(units[mid]["size"])
            if phy < min_phys_offset:
                low, left = mid + 1, mid
                continue
            store_time = int(store_timestamp_of(phy, size))
            if store_time < 0:
                return 0
            if store_time == ms:
                target = mid
                break
            if store_time > ms:
                high, right, right_value = mid - 1, mid, store_time
            else:
                low, left, left_value = mid + 1, mid, store_time
        if target != -1:
            found = target
        elif left_value == -1:
            found = right
        elif right_value == -1:
            found = left
        else:
            found = right if abs(ms - left_value) > abs(ms - right_value) else left
        if found < 0:  # nothing to search: RocketMQ's (fileFromOffset + -1) / 20
            return max(chosen.file_from_offset - 1, 0) // CQ_STORE_UNIT_SIZE
        return chosen.file_from_offset // CQ_STORE_UNIT_SIZE + found

    # -- writing -----------------------------------------------------------------------

    def _writable(self) -> None:
        if self.readonly:
            raise PermissionError(f"consume queue {self.topic}/{self.queue_id} is open read-only")

    def _last_file(self, start_offset: int) -> MappedFile:
        """MappedFileQueue.getLastMappedFile(startOffset): the last file, or a new one when there
        is none (aligned down to the file size) or the last is full."""
        last = self.files[-1] if self.files else None
        if last is not None and not last.is_full():
            return last
        create = (
            (start_offset - start_offset % self.file_size) if last is None else last.file_from_offset + self.file_size
        )
        self.dir.mkdir(parents=True, exist_ok=True)
        f = MappedFile(self.dir / offset_to_file_name(create), self.file_size, create=True)
        f.first_create_in_queue = not self.files
        self.files.append(f)
        self._new_file = True
        return f

    def _fill_pre_blank(self, f: MappedFile, until_where: int) -> None:
        until = until_where % self.file_size
        n = until // CQ_STORE_UNIT_SIZE
        if n:
            f.write(0, encode_units(np.zeros(n, np.int64), np.full(n, INT_MAX, np.int32), np.zeros(n, np.int64)))
        f.wrote_position = n * CQ_STORE_UNIT_SIZE

    def put_unit(self, cq_offset: int, phys_offset: int, size: int, tags_code: int) -> bool:
        """putMessagePositionInfo for one message."""
        return self.put_units([cq_offset], [phys_offset], [size], [tags_code]) >= 0

    def put_units(
        self,
        cq_offsets: ArrayLike,
        phys_offsets: ArrayLike,
        sizes: ArrayLike,
        tags_codes: ArrayLike,
        prefault: bool = True,
    ) -> int:
        """putMessagePositionInfo for a batch, in order; returns how many units were written.

        As RocketMQ: a unit whose message ends at or before ``max_physic_offset`` is a repeated
        build and is skipped; the first file of a new queue is pre-blanked up to a first unit that
        is not at offset 0; a unit whose queue offset is behind the queue's end is skipped; one
        ahead of it is written at the end (RocketMQ logs "[BUG]logic queue order maybe wrong")."""
        self._writable()
        cq = np.asarray(cq_offsets, dtype=np.int64).reshape(-1)
        phys = np.asarray(phys_offsets, dtype=np.int64).reshape(-1)
        size = np.asarray(sizes, dtype=np.int32).reshape(-1)
        tags = np.asarray(tags_codes, dtype=np.int64).reshape(-1)
        n = len(cq)
        if not (len(phys) == len(size) == len(tags) == n):
            raise ValueError("put_units: arrays of different lengths")
        written = 0
        i = 0
        while i < n:
            ends = phys[i:] + size[i:]
            # Units that end past every unit before them (and past max_physic_offset): the run
            # that can go in one write when their queue offsets continue the queue.
            if ends[0] <= self.max_physic_offset:
                log.warning(
                    "Maybe try to build consume queue repeatedly maxPhysicOffset=%d phyOffset=%d",
                    self.max_physic_offset,
                    int(phys[i]),
                )
                i += 1
                continue
            run = self._contiguous_run(cq[i:], ends)
            if run == 0:
                written += self._put_one(int(cq[i]), int(phys[i]), int(size[i]), int(tags[i]))
                i += 1
                continue
            self._append(phys[i : i + run], size[i : i + run], tags[i : i + run], prefault)
            self.max_physic_offset = int(ends[run - 1])
            written += run
            i += run
        return written

    def _contiguous_run(self, cq: NDArray[np.int64], ends: NDArray[np.int64]) -> int:
        """How many leading units continue the queue exactly (offsets end, end+1, ... with
        growing message ends), so no per-unit rule applies to them."""
        if not self.files or (self.files[-1].first_create_in_queue and self.files[-1].wrote_position == 0):
            return 0
        nxt = self.max_offset
        k = len(cq)
        expected = nxt + np.arange(k, dtype=np.int64)
        ok = (cq == expected) & (ends > np.maximum.accumulate(np.concatenate(([self.max_physic_offset], ends[:-1]))))
        bad = np.flatnonzero(~ok)
        return int(bad[0]) if len(bad) else k

    def append_run(self, units: Any, first_offset: int, first_end: int, last_end: int, prefault: bool = True) -> bool:
        """put_units of encoded units (``units``, 20 bytes each) whose queue offsets run on by one
        from ``first_offset`` and whose messages end at ``first_end`` .. ``last_end``, growing: written
        as they are when they continue this queue exactly (the next offset, past
        ``max_physic_offset``, no pre-blank due), which is when put_units would write them all in
        one run. False, with nothing written, otherwise (put_units then applies its rules)."""
        self._writable()
        if (
            not self.files
            or (self.files[-1].first_create_in_queue and self.files[-1].wrote_position == 0)
            or first_offset != self.max_offset
            or first_end <= self.max_physic_offset
        ):
            return False
        self._append_bytes(units, prefault)
        self.max_physic_offset = last_end
        return True

    def run_target(self) -> tuple[Any, int, int, int, int] | None:
        """Where a run that continues this queue exactly goes, for a kernel to write it in place
        (dispatch's ``dispatch_round``): ``(mapping, position, room, next queue offset,
        max_physic_offset)`` of the last file, or None when the next run must go through
        ``put_units`` / ``append_run`` (no file, a full one, a pre-blank due)."""
        if self.readonly or not self.files:
            return None
        f = self.files[-1]
        if f.mm is None or f.is_full() or (f.first_create_in_queue and f.wrote_position == 0):
            return None
        # Only into reserved blocks (a kernel's store into a hole on a full disk is a SIGBUS);
        # a run that does not fit goes through append_run, whose write reports ENOSPC.
        room = f.reserved_room(RUN_RESERVE)
        if room <= 0:
            return None
        return f.mm, f.wrote_position, room, self.max_offset, self.max_physic_offset

    def run_place(self, first_offset: int, first_end: int, nbytes: int) -> tuple[Any, int] | None:
        """``(mapping, position)`` where ``nbytes`` of units whose queue offsets start at
        ``first_offset`` and whose first message ends at ``first_end`` go in place: when they
        continue this queue exactly (as ``append_run`` requires) and fit its last file, else None
        (``append_run`` / ``put_units`` then take them). After the copy, ``run_written``."""
        target = self.run_target()
        if target is None:
            return None
        mm, pos, room, nxt, max_phys = target
        if first_offset != nxt or first_end <= max_phys or nbytes > room:
            return None
        return mm, pos

    def prefault_range(self, ahead: int) -> tuple[int, int]:
        """The part of the last file a caller should fault in to keep ``ahead`` bytes past the
        write position ready, when less than half of that is: ``(start, end)``, else (0, 0)."""
        if not self.files:
            return 0, 0
        f = self.files[-1]
        if f._prefaulter is not None and f._prefaulter.is_alive():
            return 0, 0  # the file's own prefault thread is at it
        start = max(f._prefaulted_to, f.wrote_position)
        end = min(f.wrote_position + ahead, f.file_size)
        if end - start < ahead // 2 and end < f.file_size:
            return 0, 0
        return (start, end) if start < end else (0, 0)

    def prefaulted(self, end: int) -> None:
        """The last file's pages up to ``end`` were faulted in (``prefault_range``)."""
        f = self.files[-1]
        f._prefaulted_to = max(f._prefaulted_to, end)

    def run_written(self, nbytes: int, last_end: int) -> None:
        """A kernel wrote ``nbytes`` of units at the position ``run_target`` gave, the last for a
        message ending at ``last_end``."""
        f = self.files[-1]
        pos = f.wrote_position
        f.wrote_position = pos + nbytes
        f.written(pos, pos + nbytes, prefault=False)  # the kernel call faulted the pages ahead in
        self.max_physic_offset = last_end

    def _append(
        self, phys: NDArray[np.int64], size: NDArray[np.int32], tags: NDArray[np.int64], prefault: bool = True
    ) -> None:
        self._append_bytes(encode_units(phys, size, tags), prefault)

    def _append_bytes(self, units: Any, prefault: bool = True) -> None:
        data = memoryview(units).cast("B")
        pos = 0
        while pos < len(data):
            f = self._last_file(self.max_offset * CQ_STORE_UNIT_SIZE)
            room = f.file_size - f.wrote_position
            chunk = data[pos : pos + room]
            f.write(f.wrote_position, chunk, prefault)
            f.wrote_position += len(chunk)
            pos += len(chunk)

    def _put_one(self, cq_offset: int, phys: int, size: int, tags: int) -> int:
        expect = cq_offset * CQ_STORE_UNIT_SIZE
        f = self._last_file(expect)
        if f.first_create_in_queue and cq_offset != 0 and f.wrote_position == 0:
            self.min_logic_offset = expect
            self._fill_pre_blank(f, expect)
            log.info("fill pre blank space %s %d %d", f.path.name, expect, f.wrote_position)
        if cq_offset != 0:
            current = f.wrote_position + f.file_from_offset
            if expect < current:
                log.warning(
                    "Build consume queue repeatedly, expectLogicOffset: %d currentLogicOffset: %d Topic: %s QID: %d",
                    expect,
                    current,
                    self.topic,
                    self.queue_id,
                )
                return 0
            if expect != current:
                log.warning(
                    "[BUG]logic queue order maybe wrong, expectLogicOffset: %d currentLogicOffset: %d "
                    "Topic: %s QID: %d",
                    expect,
                    current,
                    self.topic,
                    self.queue_id,
                )
        self.max_physic_offset = phys + size
        f.write(f.wrote_position, encode_units([phys], [size], [tags]))
        f.wrote_position += CQ_STORE_UNIT_SIZE
        return 1

    def truncate_dirty(self, phys_offset: int) -> None:
        """truncateDirtyLogicFiles: drop every unit whose message starts at or after ``phys_offset``."""
        self._writable()
        with self._unmap_lock:
            self._truncate_dirty(phys_offset)

    def _truncate_dirty(self, phys_offset: int) -> None:
        self.max_physic_offset = phys_offset
        while self.files:
            f = self.files[-1]
            units = f.units(0, self.file_size)
            first = units[:1]
            if len(first) and int(first["offset"][0]) >= phys_offset:
                # The whole last file is dirty (RocketMQ's deleteLastMappedFile).
                f.destroy()
                self.files.pop()
                continue
            # RocketMQ keeps the first unit unchecked; an unwritten one is not kept here, so an
            # empty last file ends at 0 rather than holding a (0, 0, 0) unit.
            valid = (units["offset"] >= 0) & (units["size"] > 0)
            keep_mask = valid & (units["offset"] < phys_offset)
            stop = np.flatnonzero(~keep_mask)
            keep = int(stop[0]) if len(stop) else len(units)
            self._note_max_physic(units[:keep])
            self._set_end(f, keep * CQ_STORE_UNIT_SIZE)
            return

    def roll_next_file(self, index: int) -> int:
        """rollNextFile: the first queue offset of the file after the one that holds ``index``."""
        per_file = self.file_size // CQ_STORE_UNIT_SIZE
        return index + per_file - index % per_file

    def correct_min_offset(self, min_phys_offset: int) -> None:
        """correctMinOffset (it reads, never writes: a reader may run it): the first unit (in
        the first file) whose message is at or after ``min_phys_offset`` becomes the queue's
        minimum. When every unit of that file points before it, the minimum moves to the file's
        end: RocketMQ 4.9.4 leaves it where it was, on units whose messages (and perhaps files)
        are gone."""
        if not self.files:
            return
        f = self.files[0]
        units = f.units(0, f.wrote_position)
        hit = np.flatnonzero(units["offset"] >= min_phys_offset)
        first = int(hit[0]) if len(hit) else len(units)
        self.min_logic_offset = (
            max(self.min_logic_offset, f.file_from_offset)
            if not len(units)
            else f.file_from_offset + first * CQ_STORE_UNIT_SIZE
        )

    def delete_expired(self, min_phys_offset: int) -> int:
        """deleteExpiredFile: delete leading files whose last unit's message is before
        ``min_phys_offset`` (never the last file), then correct the minimum. Returns the count."""
        self._writable()
        with self._unmap_lock:
            return self._delete_expired(min_phys_offset)

    def _delete_expired(self, min_phys_offset: int) -> int:
        count = 0
        while len(self.files) > 1:
            f = self.files[0]
            last_unit = f.units(self.file_size - CQ_STORE_UNIT_SIZE, self.file_size)
            if not len(last_unit) or int(last_unit["offset"][0]) >= min_phys_offset:
                break
            log.info(
                "physic min offset %d, logics in current mappedFile max offset %d, delete it",
                min_phys_offset,
                int(last_unit["offset"][0]),
            )
            f.destroy()
            self.files.pop(0)
            count += 1
        self.correct_min_offset(min_phys_offset)
        return count

    def flush(self) -> None:
        for job in self.flush_jobs():
            job()

    def flush_jobs(self) -> list[Callable[[], None]]:
        """The msyncs (and directory fsyncs for new files) a flush of the queue has to run."""
        if self.readonly:
            return []
        jobs = [job for f in self.files for job in f.flush_jobs()]
        if self._new_file:
            self._new_file = False
            jobs += [lambda: fsync_dir(self.dir), lambda: fsync_dir(self.dir.parent)]
        return jobs

    def destroy(self) -> None:
        """Delete every file of the queue (and its directory if empty)."""
        self._writable()
        with self._unmap_lock:
            for f in self.files:
                f.destroy()
            self.files = []
        self.max_physic_offset = -1
        self.min_logic_offset = 0
        try:
            self.dir.rmdir()
        except OSError:
            pass

    def close(self) -> None:
        with self._unmap_lock:
            for f in self.files:
                f.close()
            self.files = []

    def __repr__(self) -> str:
        return (
            f"ConsumeQueue({self.topic!r}, {self.queue_id}, min={self.min_offset}, max={self.max_offset}, "
            f"max_physic_offset={self.max_physic_offset})"
        )
