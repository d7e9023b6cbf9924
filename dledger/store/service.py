"""The file store's background work, on one thread per store: DLedgerMmapFileStore's
FlushDataService (flush, checkpoint, and here also prefault and drop-behind) and
CleanSpaceService (disk-full flag and retention).

Each tick takes the store's lock only in short steps: the flush an acknowledgement waits for
takes it too, and truncation and retention unmap files under it.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from dledger.config import DLedgerConfig
from dledger.config_check import is_it_time_to_do
from dledger.store.recovery import revise_begin

if TYPE_CHECKING:
    from dledger._ext.segment import EntryLog

log = logging.getLogger(__name__)

# The service keeps this much past the write position faulted in (prefault), in steps of
# PREFAULT_STEP per hold of the store lock: enough to stay ahead of appends between two ticks.
# Data pages are populated writable while most appended bytes go through the mapping (single
# entries). While they go by pwrite (batches), where the store asks for it
# (MmapFileStore.populate_after_batches), the service writes zeros there instead
# (MappedFile.prewrite), so the pwrites land in pages already allocated, dirty and with their
# blocks reserved, which the msyncs need not write-protect again (see _ext/segment.pyx). On
# this VM that costs the service 1.1 us a page and leaves the writer 2.3, where populating them
# read-only cost 2-8 and left 3.3 (bench/page_costs.py).
PREFAULT_DATA_AHEAD = 8 << 20
# Pre-writes for batches reach twice as far as what was written since the last call, up to this:
# a tick flushes before it pre-writes (5-10 ms of msync), and at 1 KiB messages (~400 MB/s) the
# writer used up 8 MB ahead in every tick and made the pages itself. Twice the last tick's
# bytes cut the put thread's CPU a message by 17-18 % there (10/10 alternating pairs) and left
# 100 B batches as they were (docs/message-store.md).
PREWRITE_AHEAD_MAX = 64 << 20
PREFAULT_INDEX_AHEAD = 1 << 20
PREFAULT_STEP = 256 << 10
# A pre-write takes the write guard a chunk at a time, not the whole step, and needs the GIL once
# a step: larger steps keep it ahead of 1 KiB batches (at 256 KB it fell behind ~15 % of them).
PREWRITE_STEP = 2 << 20
# drop_behind hands back at least this much at a time (fewer syscalls) and at most this much
# per tick (the store lock is held meanwhile).
DROP_STEP_MIN = 4 << 20
DROP_STEP_MAX = 64 << 20
# How often the clean-space check runs (seconds).
CLEAN_INTERVAL_S = 0.1
# A service failure that repeats is logged at most this often (seconds).
SERVICE_REPORT_S = 10.0


class ServicedStore(Protocol):
    """What the services need of the file store (``MmapFileStore``): its state and its lock.

    A protocol, not the class, so that the store module imports this one and not the reverse.
    """

    config: DLedgerConfig
    path: Path
    readonly: bool
    populate_after_batches: bool
    before_retention: Callable[[], object] | None
    cache_keep_from: Callable[[], int] | None
    _log: EntryLog
    _lock: threading.RLock
    _unmap_lock: threading.RLock
    _closed: bool
    _last_checkpoint: float
    _entries_flushed_at: float

    @property
    def ledger_begin_index(self) -> int: ...

    @property
    def disk_full(self) -> bool: ...

    @disk_full.setter
    def disk_full(self, value: bool) -> None: ...

    def checkpoint(self) -> None: ...

    def flush(self) -> None: ...

    def _writable(self) -> None: ...


class FlushDataService:
    """Flush and checkpoint on their intervals; keep the pages ahead of the writer faulted in
    and hand back the page cache far behind the flushed position."""

    def __init__(self, store: ServicedStore) -> None:
        self.store = store
        self._prefault_ok = True
        self._dropped_to = 0  # data before this absolute offset was handed back (see opened_at)
        # An append created a data file since the last prefault (StoreService's wake-up).
        self.new_file = False

    def opened_at(self, end: int) -> None:
        """The store opened a log whose data ends at ``end``: only what is flushed from now on
        leaves the page cache as it falls behind the window. What the log held at the open was
        handed back (or not) as it was written; handing it all back again at every open threw
        away a page cache other readers had filled (on the same files, or a query right after a
        restart) and unmapped the pages recovery had just faulted in."""
        self._dropped_to = max(end - self.store.config.data_cache_window, 0)

    def tick(self, interval_s: float) -> None:
        store = self.store
        if self.new_file:
            # A new data file's first pages before the flush below (which may take ms).
            self.prefault()
        now = time.monotonic()
        if now - store._last_checkpoint >= store.config.check_point_interval / 1000.0:
            store.checkpoint()
        elif now - store._entries_flushed_at >= interval_s:
            store.flush()
        else:
            # Someone (a node acking appends) msyncs the data continuously: a second msync of
            # it here would only compete for the lock the ack path waits on.
            with store._lock:
                if not store._closed:
                    store._log.index.flush(0)
        self.prefault()
        self.drop_behind()

    def prefault(self) -> int:
        """Fault in the pages just past the write position of the last index file, and of the
        last data file when entries were appended since the last call (writable while they went
        mostly through the mapping, read-only while by pwrite), so that appends there take no
        page fault on the caller's thread. Returns the bytes populated; 0 where the kernel
        cannot (Linux < 5.14)."""
        store = self.store
        if store.readonly or store._closed or not self._prefault_ok:
            return 0
        lg = store._log
        # Advisory counts (an append racing this reset only shifts one tick's decision).
        through_mapping = lg.mapped_bytes > lg.written_bytes
        # A new file wakes the service before its creator's append is counted.
        appended = lg.mapped_bytes + lg.written_bytes > 0 or self.new_file
        self.new_file = False
        batch_ahead = max(PREFAULT_DATA_AHEAD, min(2 * lg.written_bytes, PREWRITE_AHEAD_MAX))
        lg.mapped_bytes = lg.written_bytes = 0
        targets = [(lg.index, PREFAULT_INDEX_AHEAD, True)]
        if through_mapping:
            targets.append((lg.data, PREFAULT_DATA_AHEAD, True))
        elif appended and store.populate_after_batches:
            targets.append((lg.data, batch_ahead, False))
        done = 0
        for files, ahead, write in targets:
            while True:
                with store._lock:
                    if store._closed or not files.files:
                        break
                    f = files.files[-1]
                    start = max(f.populated_to, f.wrote_position)
                    step = PREFAULT_STEP if write else PREWRITE_STEP
                    end = min(f.wrote_position + ahead, f.file_size, start + step)
                    if end <= start:
                        break
                    if not write:
                        f.prewrite(start, end)
                    elif not f.populate(start, end, write):
                        self._prefault_ok = False
                        return done
                    done += end - start
        return done

    def drop_behind(self) -> int:
        """Hand the page cache of data more than ``config.data_cache_window`` bytes behind the
        flushed position back to the kernel, at most DROP_STEP_MAX per call and in steps of at
        least DROP_STEP_MIN, never from ``store.cache_keep_from`` on (data a reader has still to
        read). Returns the bytes advised."""
        store = self.store
        window = store.config.data_cache_window
        if window <= 0 or store.readonly or store._closed:
            return 0
        with store._lock:
            if store._closed:
                return 0
            data = store._log.data
            # A truncation may have moved the flushed position back: follow it down.
            self._dropped_to = min(self._dropped_to, data.flushed_where)
            upto = min(data.flushed_where - window, self._dropped_to + DROP_STEP_MAX)
            keep = store.cache_keep_from
            if keep is not None:
                upto = min(upto, keep())
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


class CleanSpaceService:
    """The disk-full flag and retention of expired data files."""

    def __init__(self, store: ServicedStore) -> None:
        self.store = store

    def tick(self) -> None:
        ratio = self.used_ratio()
        self.check_disk(ratio)
        self.delete_expired(used_ratio=ratio)

    def used_ratio(self) -> float:
        usage = shutil.disk_usage(self.store._log.data.store_path)
        return usage.used / usage.total if usage.total else 0.0

    def check_disk(self, used_ratio: float | None = None) -> bool:
        """Set the disk-full flag from the used ratio; appends fail with DISK_FULL while it is set."""
        store = self.store
        ratio = self.used_ratio() if used_ratio is None else used_ratio
        full = ratio > store.config.disk_full_ratio
        if full != store.disk_full:
            log.warning(
                "disk %s: used ratio %.3f (limit %.3f)",
                "full" if full else "no longer full",
                ratio,
                store.config.disk_full_ratio,
            )
        store.disk_full = full
        return full

    def delete_expired(self, now: float | None = None, used_ratio: float | None = None) -> int:
        """Delete expired data files, never the one being written.

        Files older than ``file_reserved_hours`` go when it is the hour of ``delete_when`` or the
        disk is above ``disk_space_ratio_to_check_expired``; above ``disk_space_ratio_to_force_clean``
        (with ``enable_disk_force_clean``) the oldest files go whatever their age.
        """
        store = self.store
        store._writable()
        cfg = store.config
        now = time.time() if now is None else now
        ratio = self.used_ratio() if used_ratio is None else used_ratio
        time_up = is_it_time_to_do(cfg.delete_when, now)
        force = ratio > max(cfg.disk_space_ratio_to_force_clean, 0.50)
        if not (time_up or ratio > cfg.disk_space_ratio_to_check_expired or force):
            return 0
        expired_ms = max(cfg.file_reserved_hours, 1) * 3600 * 1000.0
        # Never a file whose data a reader of the store has still to read (the message store's
        # dispatch): its records would be gone before their consume-queue units were made.
        keep = store.cache_keep_from
        keep_from = int(keep()) if keep is not None else -1
        clean_now = force and cfg.enable_disk_force_clean
        if store.before_retention is not None and _first_goes(store, expired_ms, now, clean_now, keep_from):
            store.before_retention()
        with store._lock, store._unmap_lock:
            deleted = int(store._log.data.delete_expired_by_time(expired_ms, now * 1000.0, clean_now, 10, keep_from))
            if deleted:
                revise_begin(store._log)
                log.info("retention deleted %d data file(s); ledger begins at %d", deleted, store.ledger_begin_index)
        return deleted


def _first_goes(store: ServicedStore, expired_ms: float, now: float, clean_now: bool, keep_from: int) -> bool:
    """Whether ``delete_expired_by_time`` will delete the first data file (its own test)."""
    data = store._log.data
    first = data.find(data.min_offset) if len(data) > 1 else None
    if first is None or (keep_from >= 0 and first.file_from_offset + first.file_size > keep_from):
        return False
    return clean_now or now * 1000.0 >= first.last_modified() * 1000.0 + expired_ms


class StoreService:
    """The thread that runs both services every ``flush_file_interval`` ms."""

    def __init__(self, store: ServicedStore) -> None:
        self.store = store
        self.flush = FlushDataService(store)
        self.clean = CleanSpaceService(store)
        self._stop = threading.Event()
        # Set with the stop and when an append creates a data file (MmapFileList.on_create): the
        # tick then comes at once, so a new file's first pages are made ahead of its writer.
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._failures: dict[str, int] = {}
        self._last_report: dict[str, float] = {}

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self.store._log.data.on_create = self._on_new_file
        self._thread = threading.Thread(target=self._run, name=f"dledger-store-{self.store.path.name}", daemon=True)
        self._thread.start()

    def _on_new_file(self, _f: object) -> None:
        self.flush.new_file = True
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.store._log.data.on_create = None

    def _run(self) -> None:
        interval = max(self.store.config.flush_file_interval, 1) / 1000.0
        last_clean = 0.0
        while True:
            self._wake.wait(interval)
            self._wake.clear()
            if self._stop.is_set():
                break
            # Each on its own: a flush failing every tick on a full disk must not keep
            # retention, the one thing that can free the disk, from running.
            self._attempt("flush", lambda: self.flush.tick(interval))
            if time.monotonic() - last_clean >= CLEAN_INTERVAL_S:
                last_clean = time.monotonic()
                self._attempt("clean", self.clean.tick)

    def _attempt(self, name: str, tick: Callable[[], object]) -> None:
        failures = self._failures.get(name, 0)
        try:
            tick()
        except Exception:
            # Every tick may fail the same way (a directory removed under us): say so once,
            # then at most every SERVICE_REPORT_S with a count, not a traceback every tick.
            failures += 1
            now = time.monotonic()
            if failures == 1 or now - self._last_report.get(name, 0.0) >= SERVICE_REPORT_S:
                self._last_report[name] = now
                log.exception(
                    "store service of %s: %s failed (%d time(s) in a row); retrying", self.store.path, name, failures
                )
        else:
            failures = 0
        self._failures[name] = failures
