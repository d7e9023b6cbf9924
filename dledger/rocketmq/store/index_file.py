"""RocketMQ 4.9.4's key index: ``IndexFile`` (one hash-slot file) and ``IndexService`` (the list).

An index file is a 40-byte header (beginTimestamp, endTimestamp, beginPhyOffset, endPhyOffset,
hashSlotCount, indexCount), ``hashSlotNum`` 4-byte slots, then ``indexNum`` 20-byte items (keyHash
i32, phyOffset i64, timeDiff i32 seconds from beginTimestamp, prevIndex i32), big-endian. A slot
holds the number of the newest item whose ``abs(hash) % hashSlotNum`` is that slot; items chain to
older ones through prevIndex. Item 0 is never used (indexCount starts at 1), so a file holds
``indexNum - 1`` items. Files are named by their creation time, ``yyyyMMddHHmmssSSS`` in local time.

The index key of a message is ``topic#key`` for its UNIQ_KEY and for each non-empty segment of its
KEYS property (split on spaces); the same key twice gives two items. A query matches key hashes
only (as RocketMQ, which leaves the key check to its clients), newest file first.
"""

from __future__ import annotations

import functools
import logging
import mmap
import os
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dledger._ext import load as _load_ext
from dledger.files import CREATING_SUFFIX, create_sized, fsync_dir
from dledger.rocketmq.store.mapped_file import reserve_end, reserve_through

log = logging.getLogger(__name__)

INDEX_HEADER_SIZE = 40
HASH_SLOT_SIZE = 4
INDEX_SIZE = 20
INVALID_INDEX = 0
INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
DEFAULT_HASH_SLOT_NUM = 5_000_000
DEFAULT_INDEX_NUM = 5_000_000 * 4
MAX_MSGS_NUM_BATCH = 64
KEY_SEPARATOR = " "
TMP_SUFFIX = CREATING_SUFFIX

_HEADER = struct.Struct(">qqqqii")
ITEM_DTYPE = np.dtype([("key_hash", ">i4"), ("phy_offset", ">i8"), ("time_diff", ">i4"), ("prev_index", ">i4")])

# Batch put and slot-chain lookup without a Python loop per item.
_mk = _load_ext("message")

# Items are faulted in this far ahead of the next put, this much at a time (in a thread of
# their own, without the GIL): a put then writes to mapped pages instead of taking a fault per
# page, and the put thread keeps the GIL.
PREFAULT_CHUNK = 8 << 20


def _prefault(mm: mmap.mmap, start: int, end: int) -> None:
    try:
        _mk.prefault(mm, start, end, _mk.PREFAULT_WRITE)
    except (ValueError, BufferError):  # pragma: no cover - the file was closed under us
        pass


def java_string_hash(s: str) -> int:
    """Java ``String.hashCode`` (over UTF-16 code units), as a signed 32-bit int."""
    return int(_mk.java_hash(s))


def index_key_hash(key: str) -> int:
    """IndexFile.indexKeyHashMethod: ``abs(hashCode)``, 0 for Integer.MIN_VALUE."""
    h = abs(java_string_hash(key))
    return 0 if h > INT_MAX else h


def build_key(topic: str, key: str) -> str:
    return f"{topic}#{key}"


def index_keys(uniq_key: str | None, keys: str | None) -> list[str]:
    """The keys IndexService.buildIndex indexes for a message: UNIQ_KEY, then each non-empty KEYS
    segment (split on one space), duplicates kept."""
    out = [uniq_key] if uniq_key is not None else []
    if keys:
        out.extend(k for k in keys.split(KEY_SEPARATOR) if k)
    return out


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    return INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index_num * INDEX_SIZE


def geometry_of_size(size: int) -> tuple[int, int]:
    """The (hashSlotNum, indexNum) of a file of ``size`` bytes, with RocketMQ's default ratio of
    four items per slot (the only thing the size alone can tell)."""
    body = size - INDEX_HEADER_SIZE
    per_slot = HASH_SLOT_SIZE + 4 * INDEX_SIZE
    if body <= 0 or body % per_slot:
        raise ValueError(
            f"index file of {size} bytes: not 40 + 84 * hashSlotNum; give max_hash_slot_num and max_index_num"
        )
    return body // per_slot, 4 * (body // per_slot)


def time_millis_to_human_string(ms: int) -> str:
    """UtilAll.timeMillisToHumanString: ``yyyyMMddHHmmssSSS`` in local time."""
    t = time.localtime(ms // 1000)
    return time.strftime("%Y%m%d%H%M%S", t) + f"{ms % 1000:03d}"


@dataclass(slots=True)
class QueryOffsetResult:
    """IndexService.queryOffset's answer: the physical offsets (newest first) and the last index
    file's end timestamp and end physical offset (``indexLastUpdateTimestamp``/``...Phyoffset``)."""

    phy_offsets: list[int] = field(default_factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phyoffset: int = 0


class IndexFile:
    """One index file (RocketMQ ``IndexFile`` with its ``IndexHeader``)."""

    def __init__(
        self,
        path: Path | str,
        hash_slot_num: int,
        index_num: int,
        end_phy_offset: int = 0,
        end_timestamp: int = 0,
        *,
        create: bool = False,
        readonly: bool = False,
    ) -> None:
        self.path = Path(path)
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.readonly = readonly
        self.file_size = index_file_size(hash_slot_num, index_num)
        self._dirty = False
        # Bytes below this have their blocks (reserve_items); 0 for a file opened again.
        self._reserved_to = 0
        if create:
            if readonly:
                raise PermissionError(f"read-only index: cannot create {self.path}")
            fd = create_sized(self.path, self.file_size)
            try:
                # The header and slot table are stored into at random: their blocks (and the
                # first items') are reserved whole now, else a full disk is a SIGBUS there.
                self._reserved_to = reserve_end(self._item_pos(0) + PREFAULT_CHUNK, self.file_size)
                os.posix_fallocate(fd, 0, self._reserved_to)
            except OSError as exc:
                os.close(fd)
                self.path.unlink(missing_ok=True)  # nothing in it: the next try makes it again
                raise OSError(exc.errno, f"index file {self.path}: cannot reserve its blocks: {exc.strerror}") from exc
            # The slot table and the first items, made as page cache now, while no one else has
            # the file (the prefault thread below then only maps them): see dl_zero_fill.h.
            _mk.zero_fill(fd, 0, min(self._item_pos(0) + PREFAULT_CHUNK, self.file_size))
        else:
            fd = os.open(self.path, os.O_RDONLY if readonly else os.O_RDWR)
        try:
            if os.fstat(fd).st_size != self.file_size:
                raise ValueError(
                    f"index file {self.path}: {os.fstat(fd).st_size} bytes, expected {self.file_size} "
                    f"for {hash_slot_num} slots and {index_num} items"
                )
            self.mm: mmap.mmap | None = mmap.mmap(
                fd, self.file_size, access=mmap.ACCESS_READ if readonly else mmap.ACCESS_WRITE
            )
        except BaseException:
            if create:
                self.path.unlink(missing_ok=True)  # nothing in it: the next try makes it again
            raise
        finally:
            os.close(fd)
        self.begin_timestamp = self.end_timestamp = 0
        self.begin_phy_offset = self.end_phy_offset = 0
        self.hash_slot_count = 0
        self.index_count = 1
        self._prefaulter: threading.Thread | None = None
        self._prefaulted_to = 0
        if create:
            if end_phy_offset > 0:
                self.begin_phy_offset = self.end_phy_offset = end_phy_offset
            if end_timestamp > 0:
                self.begin_timestamp = self.end_timestamp = end_timestamp
            # RocketMQ writes only what it set: a new file's counts stay 0 on disk until the first put.
            _HEADER.pack_into(
                self.mm, 0, self.begin_timestamp, self.end_timestamp, self.begin_phy_offset, self.end_phy_offset, 0, 0
            )
            self._dirty = True
            # A new file's puts hit the slot table at random: fault it all in (one pass without
            # the GIL, off the put path), with the first items.
            self._prefault_from(0)
        else:
            self.load()

    def _prefault_range(self, start: int) -> tuple[int, int] | None:
        """``start`` up to ``PREFAULT_CHUNK`` past the next item, to fault in (taken as done),
        or None (nothing there, or the prefault thread still runs)."""
        if self.mm is None or self.readonly or (self._prefaulter is not None and self._prefaulter.is_alive()):
            return None
        end = min(max(self._item_pos(self.index_count), self._item_pos(0)) + PREFAULT_CHUNK, self.file_size)
        if start >= end:
            return None
        self._prefaulted_to = end
        return start, end

    def _prefault_from(self, start: int) -> None:
        """Fault in ``start`` up to ``PREFAULT_CHUNK`` past the next item, in a thread, unless one runs."""
        rng = self._prefault_range(start)
        if rng is None:
            return
        start, end = rng
        t = threading.Thread(target=_prefault, args=(self.mm, start, end), name="IndexPrefault", daemon=True)
        self._prefaulter = t
        t.start()

    def _join_prefault(self) -> None:
        if self._prefaulter is not None:
            self._prefaulter.join()
            self._prefaulter = None

    @property
    def name(self) -> str:
        return self.path.name

    def load(self) -> None:
        """IndexHeader.load (an indexCount of 0 or less reads as 1)."""
        assert self.mm is not None
        (
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        ) = _HEADER.unpack_from(self.mm, 0)
        if self.index_count <= 0:
            self.index_count = 1

    def _write_header(self) -> None:
        assert self.mm is not None and not self.readonly
        _HEADER.pack_into(
            self.mm,
            0,
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )
        self._dirty = True

    def is_write_full(self) -> bool:
        return self.index_count >= self.index_num

    @property
    def entries(self) -> int:
        return self.index_count - 1

    def _item_pos(self, n: int) -> int:
        return INDEX_HEADER_SIZE + self.hash_slot_num * HASH_SLOT_SIZE + n * INDEX_SIZE

    def reserve_items(self, n: int) -> None:
        """Blocks for ``n`` more items (and the header and slot table), before stores through
        the mapping: OSError (ENOSPC) rather than SIGBUS on a full disk."""
        end = self._item_pos(min(self.index_count + n, self.index_num))
        self._reserved_to = reserve_through(self.path, self._reserved_to, end, self.file_size, "index file")

    def reserved_limit(self, ahead: int) -> int:
        """The item count up to which items may be stored now (dispatch's ``index_limit``):
        ``ahead`` more reserved if the disk allows, else what was reserved before."""
        try:
            self.reserve_items(ahead)
        except OSError as exc:
            log.warning("%s", exc)
        if self._reserved_to < self._item_pos(0):
            return 0
        return min((self._reserved_to - self._item_pos(0)) // INDEX_SIZE, self.index_num)

    def _time_diffs(self, timestamps: NDArray[np.int64]) -> NDArray[np.int32]:
        """The timeDiff of each item, as putKey computes it against the header's beginTimestamp;
        the first item of a fresh file moves beginTimestamp to its own timestamp."""
        begins = np.full(len(timestamps), self.begin_timestamp, dtype=np.int64)
        if self.index_count <= 1 and len(timestamps) > 1:
            begins[1:] = timestamps[0]
        diff = timestamps - begins
        diff = np.where(diff < 0, 0, diff // 1000)
        diff = np.minimum(diff, INT_MAX)
        return np.where(begins <= 0, 0, diff).astype(np.int32)

    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        """putKey: False when the file is full."""
        return self.put_hashes([index_key_hash(key)], [phy_offset], [store_timestamp]) == 1

    def put_hashes(self, key_hashes: ArrayLike, phy_offsets: ArrayLike, store_timestamps: ArrayLike) -> int:
        """putKey for items whose key hashes are known, in order; returns how many fitted."""
        if self.readonly:
            raise PermissionError(f"index file {self.path} is open read-only")
        hashes = np.asarray(key_hashes, dtype=np.int32).reshape(-1)
        phys = np.asarray(phy_offsets, dtype=np.int64).reshape(-1)
        ts = np.asarray(store_timestamps, dtype=np.int64).reshape(-1)
        n = min(len(hashes), max(self.index_num - self.index_count, 0))
        if n <= 0:
            if len(hashes):
                log.warning(
                    "Over index file capacity: index count = %d; index max num = %d", self.index_count, self.index_num
                )
            return 0
        hashes, phys, ts = hashes[:n], phys[:n], ts[:n]
        diffs = self._time_diffs(ts)
        assert self.mm is not None
        self.reserve_items(n)
        first_put = self.index_count <= 1
        # The kernel reads and updates hashSlotCount and indexCount in the header itself.
        done = int(_mk.index_put_many(self.mm, self.hash_slot_num, self.index_num, hashes, phys, diffs))
        if done != n:  # pragma: no cover - the kernel and this file disagree about the count
            raise RuntimeError(f"index_put_many wrote {done} of {n} items")
        self.after_put(first_put, int(phys[0]), int(ts[0]), int(phys[-1]), int(ts[-1]))
        return n

    def after_put(
        self, first_put: bool, first_phys: int, first_ts: int, last_phys: int, last_ts: int, prefault: bool = True
    ) -> tuple[int, int] | None:
        """The header after a kernel put items (``index_put_many``, or dispatch's
        ``dispatch_round``, which computes the time diffs as ``_time_diffs``): its counts as the
        kernel left them, begin (when the file had no item before, ``first_put``) and end from
        the first and last item put. The item pages ahead are faulted in by a thread, or, without
        ``prefault``, their range is returned for the caller's next kernel call to fault in
        (dispatch: a thread started from its round cost it GIL hand-overs)."""
        assert self.mm is not None
        _, _, _, _, self.hash_slot_count, self.index_count = _HEADER.unpack_from(self.mm, 0)
        if first_put:
            self.begin_phy_offset = first_phys
            self.begin_timestamp = first_ts
        self.end_phy_offset = last_phys
        self.end_timestamp = last_ts
        self._write_header()
        if self._item_pos(self.index_count) + PREFAULT_CHUNK // 2 > self._prefaulted_to and not self.is_write_full():
            start = max(self._prefaulted_to, self._item_pos(self.index_count))
            if not prefault:
                return self._prefault_range(start)
            self._prefault_from(start)
        return None

    def is_time_matched(self, begin: int, end: int) -> bool:
        return (
            (begin < self.begin_timestamp and end > self.end_timestamp)
            or self.begin_timestamp <= begin <= self.end_timestamp
            or self.begin_timestamp <= end <= self.end_timestamp
        )

    def select_phy_offsets(self, out: list[int], key: str, max_num: int, begin: int, end: int) -> None:
        """selectPhyOffset: follow the key's slot chain newest first, appending the offsets of
        items with the key's hash and a time in [begin, end] to ``out`` until it holds ``max_num``."""
        self.select_by_hash(out, index_key_hash(key), max_num, begin, end)

    def select_by_hash(self, out: list[int], key_hash: int, max_num: int, begin: int, end: int) -> None:
        mm = self.mm
        assert mm is not None
        if self.index_count <= 1 or len(out) >= max_num:
            return
        # The kernel gives Python ints already.
        out.extend(
            _mk.index_lookup(
                mm, self.hash_slot_num, self.index_num, key_hash, max_num - len(out), begin, end, self.begin_timestamp
            )
        )

    def items(self) -> NDArray[Any]:
        """The used items (1 .. indexCount-1), in place."""
        assert self.mm is not None
        return np.frombuffer(self.mm, dtype=ITEM_DTYPE, count=self.entries, offset=self._item_pos(1))

    def flush(self) -> None:
        for job in self.flush_jobs():
            job()

    def flush_jobs(self) -> list[Callable[[], None]]:
        """The header written now and the msync of the file to run later (see
        MessageStore.flush_logics); the file counts as clean from here."""
        if self.mm is None or self.readonly or not self._dirty:
            return []
        self._write_header()
        self._dirty = False
        # A full file is written no more: its pages are unmapped before the msync (the page
        # cache keeps them), which then need not write-protect them one TLB shootdown each
        # (docs/message-store.md, eighth session). A reader faults them back in from the cache.
        done_with = self.is_write_full()

        def sync() -> None:
            if self.mm is None:
                return
            try:
                _mk.sync_mapped(self.mm, 0, -1, done_with)  # mmap.flush would hold the GIL through the msync
            except BaseException:
                self._dirty = True
                raise

        return [sync]

    def close(self) -> None:
        self._join_prefault()  # it holds the mapping while it runs
        if self.mm is not None:
            self.flush()
            try:
                self.mm.close()
            except BufferError:  # a caller still holds a view: the mapping goes with it
                log.debug("index file %s still viewed at close", self.path)
            self.mm = None

    def destroy(self) -> None:
        self.close()
        if not self.readonly:
            self.path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return (
            f"IndexFile({self.name}, ts=[{self.begin_timestamp}, {self.end_timestamp}], "
            f"phy=[{self.begin_phy_offset}, {self.end_phy_offset}], slots={self.hash_slot_count}, "
            f"count={self.index_count})"
        )


class IndexService:
    """The list of index files under ``store/index`` (RocketMQ ``IndexService``).

    New files get ``max_hash_slot_num`` slots and ``max_index_num`` items; existing files whose
    size says otherwise are opened with the geometry their size gives (four items per slot).
    """

    def __init__(
        self,
        index_dir: Path | str,
        max_hash_slot_num: int = DEFAULT_HASH_SLOT_NUM,
        max_index_num: int = DEFAULT_INDEX_NUM,
        readonly: bool = False,
        *,
        max_msgs_num_batch: int = MAX_MSGS_NUM_BATCH,
    ) -> None:
        self.dir = Path(index_dir)
        self.hash_slot_num = max_hash_slot_num
        self.index_num = max_index_num
        self.readonly = readonly
        self.max_msgs_num_batch = max_msgs_num_batch
        self.files: list[IndexFile] = []
        # The end timestamp of the newest full file flushed since the next was created: what
        # StoreCheckpoint.indexMsgTimestamp records (0 until a file fills).
        self.index_msg_timestamp = 0
        # A full file is flushed on a thread of its own (RocketMQ's FlushIndexFileThread): a
        # default-size file is 400 MB of dirty pages, too long to stall dispatch for.
        self._flushers: list[threading.Thread] = []
        self._flush_lock = threading.Lock()
        self._loaded = False
        self._new_file = False

    def load(self, last_exit_ok: bool = True, index_msg_timestamp: int = 0) -> None:
        """Open the files in name order. After an abnormal exit, files that end after the
        checkpoint's ``index_msg_timestamp`` are dropped (deleted unless read-only): dispatch
        rebuilds them."""
        if self._loaded:
            return
        self._loaded = True
        if not self.dir.is_dir():
            return
        paths = []
        for p in sorted(self.dir.iterdir(), key=lambda q: q.name):
            if p.name.startswith("."):
                if p.name.endswith(TMP_SUFFIX) and not self.readonly:
                    p.unlink(missing_ok=True)
                continue
            if p.is_file() and p.name.isdigit():
                paths.append(p)
        for p in paths:
            size = p.stat().st_size
            slots, items = self.hash_slot_num, self.index_num
            if size != index_file_size(slots, items):
                try:
                    slots, items = geometry_of_size(size)
                except ValueError:
                    if p == paths[-1] and not last_exit_ok and not self.readonly:
                        # Cut short by the crash: dispatch rebuilds the last file, as it would
                        # one that ends after the checkpoint.
                        log.warning("index file %s is %d bytes, cut short: dropped", p.name, size)
                        p.unlink()
                        continue
                    raise ValueError(
                        f"index file {p} is {size} bytes: no index file geometry has that size (this store's "
                        f"is {index_file_size(self.hash_slot_num, self.index_num)} bytes); it is damaged. The "
                        f"index is rebuilt from the commit log when the {self.dir.name}/ directory is deleted"
                    ) from None
            f = IndexFile(p, slots, items, readonly=self.readonly)
            if not last_exit_ok and f.end_timestamp > index_msg_timestamp:
                log.info("index file %s ends after the checkpoint: dropped", p.name)
                if self.readonly:
                    f.close()
                else:
                    f.destroy()
                continue
            self.files.append(f)

    # -- building ----------------------------------------------------------------------

    def _new_file_name(self) -> Path:
        ms = time.time_ns() // 1_000_000
        name = time_millis_to_human_string(ms)
        last = self.files[-1].name if self.files else ""
        # Two files in one millisecond (or a clock step back) would share or reorder names.
        while name <= last or (self.dir / name).exists():
            ms += 1
            name = time_millis_to_human_string(ms)
        return self.dir / name

    def get_and_create_last_file(self) -> IndexFile:
        """getAndCreateLastIndexFile: the last file, or a new one starting where a full last
        file ended (which is flushed, and its end timestamp kept for the checkpoint)."""
        if self.readonly:
            raise PermissionError(f"index {self.dir} is open read-only")
        self.load()
        prev = self.files[-1] if self.files else None
        if prev is not None and not prev.is_write_full():
            return prev
        end_phy = prev.end_phy_offset if prev is not None else 0
        end_ts = prev.end_timestamp if prev is not None else 0
        self.dir.mkdir(parents=True, exist_ok=True)
        f = IndexFile(self._new_file_name(), self.hash_slot_num, self.index_num, end_phy, end_ts, create=True)
        self.files.append(f)
        self._new_file = True
        if prev is not None:
            t = threading.Thread(target=self._flush_full, args=(prev,), name="FlushIndexFileThread", daemon=True)
            self._flushers.append(t)
            t.start()
        return f

    def prepare_first_file(self) -> IndexFile | None:
        """Create the first file of an index that has none and fault in its slot table and first
        items, waiting for them. A new store does this when it opens, where RocketMQ creates the
        file at the first dispatch: a new file's puts hit its 20 MB slot table at random, and
        faulting that in beside the first puts slowed them (docs/message-store.md, "Files").
        Returns the file, or None when the index already had one."""
        if self.readonly:
            return None
        self.load()
        if self.files:
            return None
        try:
            f = self.get_and_create_last_file()
        except OSError as exc:  # a full disk: the first dispatch that has keys makes it, or fails and retries
            log.warning("%s", exc)
            return None
        f._join_prefault()
        return f

    def _flush_full(self, f: IndexFile) -> None:
        try:
            f.flush()
        except Exception:  # the next flush() tries again; the checkpoint does not move past it
            log.exception("flush of full index file %s failed", f.name)
            return
        with self._flush_lock:
            self.index_msg_timestamp = max(self.index_msg_timestamp, f.end_timestamp)

    def _join_flushers(self) -> None:
        for t in self._flushers:
            t.join()
        self._flushers = []

    def build_index(
        self,
        topics: str | Sequence[str],
        keys: Sequence[Sequence[str]],
        phys_offsets: ArrayLike,
        store_timestamps: ArrayLike,
    ) -> int:
        """buildIndex for a batch of messages in commit-log order.

        ``topics`` is one topic for all or one per message; ``keys[i]`` are message i's keys as
        ``index_keys`` gives them (UNIQ_KEY first, then KEYS segments; the caller leaves out
        ROLLBACK messages, which RocketMQ does not index). A message before the last file's
        endPhyOffset was indexed already and is skipped. Returns the number of items written."""
        phys = np.asarray(phys_offsets, dtype=np.int64).reshape(-1)
        ts = np.asarray(store_timestamps, dtype=np.int64).reshape(-1)
        if not (len(keys) == len(phys) == len(ts)) or (not isinstance(topics, str) and len(topics) != len(phys)):
            raise ValueError("build_index: columns of different lengths")
        f = self.get_and_create_last_file()
        end_phy = f.end_phy_offset
        hashes: list[int] = []
        rows: list[int] = []
        for i, message_keys in enumerate(keys):
            if not message_keys or int(phys[i]) < end_phy:
                continue
            topic = topics if isinstance(topics, str) else topics[i]
            for k in message_keys:
                hashes.append(index_key_hash(build_key(topic, k)))
                rows.append(i)
        if not hashes:
            return 0
        idx = np.asarray(rows, dtype=np.int64)
        return self.put_hashes(np.asarray(hashes, dtype=np.int32), phys[idx], ts[idx])

    def put_hashes(
        self, key_hashes: NDArray[np.int32], phys_offsets: NDArray[np.int64], store_timestamps: NDArray[np.int64]
    ) -> int:
        """Append items (hashes known), rolling to new files as they fill."""
        done = 0
        n = len(key_hashes)
        while done < n:
            f = self.get_and_create_last_file()
            put = f.put_hashes(key_hashes[done:], phys_offsets[done:], store_timestamps[done:])
            if put == 0 and not f.is_write_full():  # pragma: no cover - defensive
                raise RuntimeError(f"index file {f.name} took no item")
            done += put
        return done

    def build_one(
        self,
        topic: str,
        uniq_key: str | None,
        keys: str | None,
        phys_offset: int,
        store_timestamp: int,
        sys_flag: int = 0,
    ) -> int:
        """buildIndex for one message from its UNIQ_KEY, raw KEYS value and sys flag."""
        if sys_flag & 0xC == 0xC:  # TRANSACTION_ROLLBACK_TYPE: not indexed
            return 0
        return self.build_index(topic, [index_keys(uniq_key, keys)], [phys_offset], [store_timestamp])

    # -- queries -----------------------------------------------------------------------

    def query_offset(
        self, topic: str, key: str, max_num: int, begin: int = 0, end: int = LONG_MAX
    ) -> QueryOffsetResult:
        """queryOffset: newest file first, over files whose time range meets [begin, end], up to
        ``min(max_num, max_msgs_num_batch)`` offsets; stops after a file that begins before ``begin``."""
        self.load()
        result = QueryOffsetResult()
        max_num = min(max_num, self.max_msgs_num_batch)
        if not self.files:
            return result
        key_hash = index_key_hash(build_key(topic, key))
        files = self.files
        last = files[-1]
        if self.readonly:
            last.load()
        result.index_last_update_timestamp = last.end_timestamp
        result.index_last_update_phyoffset = last.end_phy_offset
        out = result.phy_offsets
        # A query over every file (the usual one, and one call per file of ten) pays the kernel
        # call and little else per file: is_time_matched holds for [0, LONG_MAX] and no file
        # begins before 0.
        whole = begin <= 0 and end >= LONG_MAX
        lookup = _mk.index_lookup
        for i in range(len(files) - 1, -1, -1):
            f = files[i]
            if self.readonly and i != len(files) - 1:
                f.load()
            if whole or f.is_time_matched(begin, end):
                mm = f.mm
                if f.index_count > 1 and mm is not None:
                    left = max_num - len(out)
                    out.extend(lookup(mm, f.hash_slot_num, f.index_num, key_hash, left, begin, end, f.begin_timestamp))
            if f.begin_timestamp < begin or len(out) >= max_num:
                break
        return result

    def query(
        self, topic: str, key: str, max_num: int = MAX_MSGS_NUM_BATCH, begin: int = 0, end: int = LONG_MAX
    ) -> list[int]:
        """The physical offsets of ``query_offset``, newest first."""
        return self.query_offset(topic, key, max_num, begin, end).phy_offsets

    # -- retention and lifecycle -----------------------------------------------------------

    def delete_expired(self, min_phys_offset: int) -> int:
        """deleteExpiredFile: drop leading files that end before ``min_phys_offset`` (never the last)."""
        if self.readonly:
            raise PermissionError(f"index {self.dir} is open read-only")
        self.load()
        self._join_flushers()  # never unmap a file a flush thread is writing out
        if not self.files or self.files[0].end_phy_offset >= min_phys_offset:
            return 0
        count = 0
        while len(self.files) > 1 and self.files[0].end_phy_offset < min_phys_offset:
            self.files.pop(0).destroy()
            count += 1
        return count

    def flush(self) -> None:
        """Write out every file (waiting for the flushes of full files first)."""
        for job in self.flush_jobs():
            job()

    def flush_jobs(self, partial: bool = True) -> list[Callable[[], None]]:
        """What ``flush`` does, as jobs taken now and run later: wait for the flushes of full
        files, msync the files written since, fsync the directory after a new file. Without
        ``partial`` (the store's periodic flush) a file still being filled is not written out,
        as RocketMQ's IndexService writes a file out only once it is full (and at shutdown):
        after a crash recovery drops it anyway (it ends after the checkpoint's
        indexMsgTimestamp) and dispatch rebuilds it, while an msync a second wrote its whole
        slot table out again and write-protected its pages, so dispatch's next puts into them
        faulted (a third of the dispatch thread's faults in the replicated produce bench). Its
        header is current in the mapping all along (after_put), for readers."""
        if self.readonly:
            return []
        flushers, self._flushers = self._flushers, []
        jobs: list[Callable[[], None]] = [t.join for t in flushers]
        jobs += [job for f in self.files if partial or f.is_write_full() for job in f.flush_jobs()]
        if self._new_file:
            self._new_file = False
            jobs.append(functools.partial(fsync_dir, self.dir))
        return jobs

    def close(self) -> None:
        self.flush()
        for f in self.files:
            f.close()
        self.files = []
        self._loaded = False
