"""ReputMessageService: follows the commit log and builds the consume queues and the index.

It walks the (committed) commit log from ``reput_from`` in batches. One kernel call a batch
(``dispatch_round``, without the GIL) scans the records into columns, hashes their TAGS
(tagsCode) and index keys, puts the index items into the last index file and, when the records
are one queue's run, encodes their consume-queue units, which go to the queue as they are;
other batches go to their queues by topic-queue with put_units' rules. PREPARED and ROLLBACK
records get no unit; ROLLBACK records are not indexed. For ``SCHEDULE_TOPIC_XXXX`` the tags
code is the delivery time (store time + the level's delay), as ``computeDeliverTimestamp``.

``reput_from`` is a commit-log position: a record's offset in the classic log, an entry
position in the DLedger log (whose record offsets are that + 48).
"""

from __future__ import annotations

import logging
import os
import queue
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from dledger._ext import load as _load_ext
from dledger.rocketmq.store.checkpoint import StoreCheckpoint
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.consume_queue import ConsumeQueue
from dledger.rocketmq.store.consume_queue_table import ConsumeQueueTable
from dledger.rocketmq.store.index_file import IndexService
from dledger.rocketmq.store.message import RMQ_SYS_SCHEDULE_TOPIC
from dledger.rocketmq.store.topic_validator import store_topic_problem

log = logging.getLogger(__name__)
K = _load_ext("message")

BATCH_RECORDS = 8192
# Index items a round may store (reserved before it, see IndexFile.reserved_limit): a round's
# records with a few keys each.
INDEX_RESERVE_ITEMS = BATCH_RECORDS * 4
# When dispatch is this far behind the readable end, a thread reads the log ahead of it, from its
# own file descriptors and without the GIL, keeping up to READ_AHEAD read past where dispatch is
# (across files). A log written a while ago may have left the page cache, and reading it back a
# fault at a time in the dispatch thread is what kept dispatch of a freshly written 10M-message
# DLedger log at half classic's rate. Only far behind (catching up on a log written earlier):
# following a live writer, the pages are in the cache and the reads took CPU from the puts (put
# with dispatch 5-30 % slower at 16 MB, alternating runs).
READ_AHEAD_BEHIND = 256 << 20
READ_AHEAD = 64 << 20
# What the reader is given at a time: the range it reads before it looks at dispatch again.
READ_AHEAD_STEP = 8 << 20
_READ_CHUNK = 1 << 20


def _read_range(path: str, start: int, end: int) -> None:
    """Bring ``path``'s bytes ``start``..``end`` into the page cache (the data are dropped)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # deleted by retention meanwhile: nothing to read ahead
        return
    try:
        buf = bytearray(_READ_CHUNK)
        at = start
        while at < end:
            got = os.preadv(fd, [memoryview(buf)[: min(_READ_CHUNK, end - at)]], at)
            if got <= 0:
                break
            at += got
    except OSError:
        pass
    finally:
        os.close(fd)


class _ReadAhead:
    """The thread that reads the log ahead of a catch-up run (see READ_AHEAD_BEHIND). It is
    handed ranges in log order; a range dispatch has already passed is skipped."""

    def __init__(self, position: Callable[[], int]) -> None:
        # Where dispatch is now (the service's reput_from).
        self._position = position
        self._ranges: queue.SimpleQueue[tuple[str, int, int, int] | None] = queue.SimpleQueue()
        # The log position up to which ranges were handed on.
        self.planned = 0
        self._thread = threading.Thread(target=self._run, name="rocketmq-reput-readahead", daemon=True)
        self._thread.start()

    def read(self, path: str, start: int, end: int, log_end: int) -> None:
        """Read ``path``'s ``start``..``end``, which ends at log position ``log_end``."""
        self._ranges.put((path, start, end, log_end))
        self.planned = log_end

    def _run(self) -> None:
        while True:
            item = self._ranges.get()
            if item is None:
                return
            path, start, end, log_end = item
            if log_end > self._position():
                _read_range(path, start, end)

    def close(self) -> None:
        """Drop what is not read yet and wait for the range being read."""
        while True:
            try:
                self._ranges.get_nowait()
            except queue.Empty:
                break
        self._ranges.put(None)
        self._thread.join()


_SCHEDULE = RMQ_SYS_SCHEDULE_TOPIC.encode()
LONG_MAX = (1 << 63) - 1
CQ_UNIT = K.CQ_UNIT_SIZE
# How far ahead of a busy queue's writes dispatch keeps its file's pages faulted in.
CQ_PREFAULT = 256 << 10
# At most this many files' ranges a batch (what dispatch_round takes).
CQ_PREFAULTS = 16
# The longest a service woken by commits sleeps without one (a wake that never came is
# caught up on after this).
IDLE_WAIT = 0.05
# The pause between rounds (see ReputMessageService._run), and the longer one after a round of
# HEAVY_ROUND records or more (a stream of ~500k messages a second and up); the figures that
# chose them are in docs/message-store.md.
BUSY_PAUSE = 0.001
HEAVY_PAUSE = 0.004
HEAVY_ROUND = 512
# A group follower's pause after such a round (LoopReput.heavy_pause). Its queues serve only
# follower reads, which may trail the leader's a little; in rounds 3x as large, each round's
# Python is paid a third as often (docs/message-service.md, "Dispatch pace on followers").
FOLLOWER_HEAVY_PAUSE = 0.012


class ReputMessageService:
    def __init__(
        self,
        commitlog: Any,
        consume_queues: ConsumeQueueTable,
        index: IndexService | None,
        checkpoint: StoreCheckpoint,
        config: MessageStoreConfig,
    ) -> None:
        self.commitlog = commitlog
        self.consume_queues = consume_queues
        self.index = index
        self.checkpoint = checkpoint
        self.config = config
        self.delay_table = config.delay_level_table()
        self.max_delay_level = config.max_delay_level
        self.reput_from = 0
        # Records below this were indexed before (a restart re-dispatches from the consume
        # queues' end, which can lie before the last indexed record).
        self.index_from = 0
        self.dispatched_store_timestamp = 0
        self.dispatched_messages = 0
        self._reader: _ReadAhead | None = None
        # The last dispatch_now stopped at its max_batches (there may be more to read).
        self.capped = False
        self._lock = threading.RLock()
        self._cond = threading.Condition()
        self._wake = threading.Event()
        # Set by the store when every move of the readable end calls ``wakeup`` (DLedger mode).
        self.woken_by_commits = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        # (consume queue, its topic's bytes) the last batch's run went to.
        self._cq_hint: tuple[ConsumeQueue, bytes] | None = None
        # Mapped files (file, start, end) the next batch's kernel call faults in: the pages ahead
        # of the queues a batch of several queues' runs appended to, and of the index's items.
        self._prefaults: list[tuple[Any, int, int]] = []
        # The kernels' arrays, filled again by each batch (see dispatch_round): what a batch's
        # call returns is valid until the next batch's.
        self._arena: dict[str, Any] = {}
        # Topics (as stored) and whether they name one directory: a record of one that does
        # not gets no consume-queue unit (see _legal_topic).
        self._legal: dict[bytes, bool] = {}

    # -- position ------------------------------------------------------------------------

    def behind(self) -> int:
        """dispatchBehindBytes: how far dispatch is behind the readable end of the commit log."""
        return max(int(self.commitlog.readable_end) - self.reput_from, 0)

    # -- the loop ------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="rocketmq-reput", daemon=True)
        self._thread.start()

    def wakeup(self) -> None:
        """The readable end moved (a DLedger commit): an idle service dispatches at once, so a
        lone message is not kept waiting; a busy one finds the wake set after its pause."""
        if not self._wake.is_set():
            self._wake.set()

    def _run(self) -> None:
        last = 0
        while not self._stop.is_set():
            # After a round, a pause, so that what comes meanwhile makes one batch (a round per
            # put or commit would cost more than the put): 1 ms as RocketMQ, and HEAVY_PAUSE
            # once rounds find HEAVY_ROUND records or more. Each round takes the GIL from the
            # putting thread (the leader's event loop, in a group) a few times, and each
            # hand-over stalls it (a thread that waits for the GIL, woken on another core, is
            # slow to run in a VM): a stream that fast is served better by fewer, bigger
            # rounds, while a slower one keeps the 1 ms.
            pause = HEAVY_PAUSE if last >= HEAVY_ROUND else BUSY_PAUSE
            if self.woken_by_commits:
                # Every commit wakes the service, so an idle one sleeps until one comes rather
                # than polling: a round that finds nothing still takes the GIL.
                if last:
                    self._stop.wait(pause)
                self._wake.wait(IDLE_WAIT)
            else:
                # Puts do not wake it (as RocketMQ): it polls.
                self._wake.wait(pause)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                last = self.dispatch_now(to_end=False)
            except BaseException as exc:
                self.error = exc
                log.exception("dispatch failed at commit-log offset %d; retrying", self.reput_from)
                self._stop.wait(0.5)
                last = 0

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def wait_dispatched(self, offset: int | None = None, timeout: float = 30.0) -> bool:
        """Wait until dispatch reached ``offset`` (default: the readable end as of now)."""
        target = int(self.commitlog.readable_end) if offset is None else offset
        deadline = time.monotonic() + timeout
        while self.reput_from < target:
            if self._thread is None:
                self.dispatch_now()
                if self.reput_from < target:
                    return False
                break
            self._wake.set()
            with self._cond:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))
        return True

    def dispatch_now(self, max_batches: int = -1, to_end: bool = True) -> int:
        """doReput: dispatch what is readable now, in this thread. Returns the records dispatched.
        With ``to_end`` False (the service's rounds) it stops after a batch that reached the end
        it was given, rather than following the end while puts move it: what comes meanwhile
        waits for the next round (1 ms), in one batch rather than in several small ones, each
        of which takes the GIL from the putting thread."""
        with self._lock:
            try:
                done = self._dispatch_batches(max_batches, to_end)
            finally:
                if self._reader is not None:
                    self._reader.close()
                    self._reader = None
        if done:
            with self._cond:
                self._cond.notify_all()
        return done

    def _dispatch_batches(self, max_batches: int, to_end: bool) -> int:
        """dispatch_now's loop, under its lock."""
        done = 0
        cl = self.commitlog
        batches = 0
        self.capped = False
        while True:
            if 0 <= max_batches <= batches:
                self.capped = True
                break
            end = int(cl.readable_end)
            low = int(cl.min_offset)
            if low >= 0 and self.reput_from < low:
                log.warning(
                    "dispatch offset %d is below the commit log's first offset %d (expired): going on from there",
                    self.reput_from,
                    low,
                )
                self.reput_from = low
            if self.reput_from >= end:
                break
            with cl.reading():
                seg = cl.segment(self.reput_from, end)
                if seg is None:
                    # The position sits at the end of a file whose successor holds the data.
                    nxt = cl.roll_next_file(self.reput_from)
                    if nxt < end and cl.segment(nxt, end) is not None:
                        self.reput_from = nxt
                        continue
                    break
                if self._reader is not None or end - self.reput_from > READ_AHEAD_BEHIND:
                    self._read_ahead(cl, end)
                partial = False
                try:
                    stop, code, n = self._dispatch_segment(seg)
                    if code not in (K.STOP_BLANK, K.STOP_END, K.STOP_LIMIT):
                        partial = self._partial_tail(seg, stop)
                finally:
                    seg.view.release()
            done += n
            batches += 1
            if code == K.STOP_BLANK:
                self.reput_from = cl.roll_next_file(seg.base + stop)
            elif code in (K.STOP_END, K.STOP_LIMIT):
                self.reput_from = seg.base + stop
                if stop >= cl.file_size:
                    self.reput_from = seg.base + cl.file_size
                elif code == K.STOP_END and not to_end:
                    break
            elif partial:
                # A slave's log may end inside a record (HA frames are cut by size, not by
                # record): the rest comes with the next frame.
                self.reput_from = seg.base + stop
                break
            else:
                # A record dispatch cannot read: RocketMQ's master skips the rest of the
                # segment (its data came through the put path, so this is a bug or damage).
                log.error(
                    "dispatch: %s record at commit-log offset %d; skipping to %d",
                    K.STOP_NAMES[code],
                    seg.base + stop,
                    seg.base + seg.end,
                )
                self.reput_from = seg.base + seg.end
        return done

    def _partial_tail(self, seg: Any, stop: int) -> bool:
        """The bytes at ``stop`` are the beginning of a record that ends past the segment,
        within its file (or too few to hold a record's size and magic). Before the view goes."""
        left = seg.end - stop
        if left < 8:
            return left >= 0
        size, magic = struct.unpack_from(">ii", seg.view, stop)
        return bool(magic == K.MESSAGE_MAGIC_CODE and stop + size > seg.end and stop + size <= len(seg.view))

    def _read_ahead(self, cl: Any, end: int) -> None:
        """Have the reader keep up to READ_AHEAD read past dispatch (not past ``end``), a
        READ_AHEAD_STEP at a time, across files."""
        if self._reader is None:
            self._reader = _ReadAhead(lambda: self.reput_from)
        reader = self._reader
        at = max(reader.planned, self.reput_from)
        target = min(self.reput_from + READ_AHEAD, end)
        while target - at >= min(READ_AHEAD_STEP, end - at) > 0:
            f = cl.find_file(at)
            path = getattr(f, "path", None)
            if f is None or path is None:
                return
            base = int(f.file_from_offset)
            stop = min(at + READ_AHEAD_STEP, end, base + int(f.wrote_position))
            if stop <= at:
                at = base + cl.file_size  # the rest of this file is blank: the next one
                reader.planned = at
                continue
            reader.read(str(path), at - base, stop - base, stop)
            at = stop

    # -- one batch -----------------------------------------------------------------------

    def _dispatch_segment(self, seg: Any) -> tuple[int, int, int]:
        """One batch of ``seg``'s records, under the log's ``reading()``: ``(stop, code, records)``.

        One kernel call (``dispatch_round``, without the GIL) scans the records, numbers their
        topics, hashes their tagsCodes and index keys, puts the index items into the last index
        file and, when they are one queue's run, encodes their units, which then go to the queue
        as they are. The dispatch thread takes the GIL back once per batch, not once per step:
        each time it waits for the putting thread to let go of it, and each hand-over costs both
        threads (about a fifth of the put thread's time with a step per kernel call)."""
        index = self.index if self.config.message_index_enable else None
        f = None
        first_put = False
        floor = LONG_MAX
        index_limit = -1
        if index is not None:
            # Records past what the index has (buildIndex skips what the last file covers; a
            # restart re-dispatches from the queues' end). A full (or missing) last file is left
            # to put_hashes below, which rolls to a new one as IndexService does.
            last = index.files[-1] if index.files else None
            floor = max(self.index_from, int(last.end_phy_offset) if last is not None else 0)
            if last is not None and not last.is_write_full() and last.mm is not None:
                f = last
                first_put = f.index_count <= 1
                # The kernel stores items only into blocks reserved for them (a full disk: the
                # rest go to put_hashes below, which reports ENOSPC; the round is retried).
                index_limit = f.reserved_limit(INDEX_RESERVE_ITEMS)
        # The queue the last batch went to: a batch that continues it has its units written into
        # its file by the kernel too, and the file's pages CQ_PREFAULT ahead faulted in (the page
        # faults then hold no GIL).
        hint = self._cq_hint
        hint_cq: ConsumeQueue | None = None
        target = None
        if hint is not None and self.consume_queues.get(hint[0].topic, hint[0].queue_id) is hint[0]:
            hint_cq = hint[0]
            target = hint_cq.run_target()
        cq_args: tuple[Any, ...] = ()
        cq_path = None
        pf_end = 0
        if target is not None and hint is not None and hint_cq is not None:
            mm, pos, room, nxt, max_phys = target
            pf_start, pf_end = hint_cq.prefault_range(CQ_PREFAULT)
            cq_args = (mm, pos, room, hint[1], hint_cq.queue_id, nxt, max_phys, pf_start, pf_end)
            if pf_end:
                cq_path = os.fsencode(hint_cq.files[-1].path)
        # Each range lies past everything written to its file, and only this thread writes
        # the queues and the index: the kernel may write zeros there before it populates
        # (the path; see dl_zero_fill.h for what that saves).
        prefaults = tuple(
            (pf[0].mm, pf[1], pf[2], os.fsencode(pf[0].path)) for pf in self._prefaults if pf[0].mm is not None
        )
        self._prefaults.clear()
        cols, stop, code, topic_id, firsts, tags_code, hashes, rows, units, put = K.dispatch_round(
            seg.view,
            seg.base,
            seg.start,
            seg.end,
            seg.dledger,
            BATCH_RECORDS,
            floor,
            f.mm if f is not None else None,
            f.hash_slot_num if f is not None else 0,
            f.index_num if f is not None else 0,
            f.begin_timestamp if f is not None else 0,
            *cq_args,
            prefault=prefaults,
            arena=self._arena,
            cq_path=cq_path,
            index_limit=index_limit,
        )
        if pf_end and hint_cq is not None:
            hint_cq.prefaulted(pf_end)
        n = len(cols["size"])
        if not n:
            return stop, code, 0
        phys = cols["phys_offset"]
        sizes = cols["size"]
        ts = cols["store_timestamp"]
        if put:
            assert f is not None
            r0, r1 = int(rows[0]), int(rows[put - 1])
            ahead = f.after_put(first_put, int(phys[r0]), int(ts[r0]), int(phys[r1]), int(ts[r1]), prefault=False)
            if ahead is not None:
                self._prefaults.append((f, *ahead))
        if index is not None and put < len(hashes):
            rest = rows[put:]
            index.put_hashes(hashes[put:], phys[rest], ts[rest])
        view = seg.view
        topic_off, topic_len = cols["topic_off"], cols["topic_len"]
        topics_raw = [bytes(view[int(topic_off[k]) : int(topic_off[k]) + int(topic_len[k])]) for k in firsts.tolist()]
        written = False
        last_end = int(phys[-1]) + int(sizes[-1])
        if units is not None and not len(units):
            # The kernel wrote the run into the hinted queue's file.
            assert hint_cq is not None
            hint_cq.run_written(n * CQ_UNIT, last_end)
            written = True
        elif units is not None and topics_raw[0] != _SCHEDULE and self._legal_topic(topics_raw[0]):
            cq = self.consume_queues.find_or_create(topics_raw[0].decode("utf-8", "replace"), int(cols["queue_id"][0]))
            written = cq.append_run(
                units, int(cols["queue_offset"][0]), int(phys[0]) + int(sizes[0]), last_end, prefault=False
            )
            if written:
                self._cq_hint = (cq, topics_raw[0])
        if not written:
            self._queue_runs(view, cols, topic_id, topics_raw, tags_code)
        self.dispatched_store_timestamp = int(ts[-1])
        self.dispatched_messages += n
        return stop, code, n

    def _queue_runs(
        self,
        view: memoryview,
        cols: dict[str, np.ndarray],
        topic_id: np.ndarray,
        topics_raw: list[bytes],
        tags_code: np.ndarray,
    ) -> None:
        """The consume-queue units of scanned records by queue, with put_units' rules (the
        records of several queues, PREPARED/ROLLBACK ones, a queue's first units, a re-dispatch,
        SCHEDULE_TOPIC_XXXX's delivery times). ``queue_runs`` groups them and encodes each
        queue's units; a group that continues its queue exactly is appended as it is (what
        put_units would write in one run), the others go through put_units."""
        phys = cols["phys_offset"]
        sizes = cols["size"]
        runs, order, units = K.queue_runs(
            topic_id, cols["queue_id"], cols["queue_offset"], cols["sys_flag"], phys, sizes, tags_code, self._arena
        )
        # The groups that continue their queue exactly and fit its last file: copied in one
        # kernel call after the loop (a group's own append_run and copy cost ~7 us of Python,
        # which a round of many queues pays per queue).
        copies: list[tuple[Any, int, int, int]] = []
        placed: list[tuple[ConsumeQueue, int, int]] = []
        for tid, qid, start, count, first_offset, contiguous, first_end, last_end in runs.tolist():
            topic_raw = topics_raw[tid]
            if not self._legal_topic(topic_raw):
                continue
            cq = self.consume_queues.find_or_create(topic_raw.decode("utf-8", "replace"), qid)
            if contiguous and topic_raw != _SCHEDULE:
                nbytes = count * CQ_UNIT
                place = cq.run_place(first_offset, first_end, nbytes)
                if place is not None:
                    copies.append((place[0], place[1], start * CQ_UNIT, nbytes))
                    placed.append((cq, nbytes, last_end))
                    continue
                run = units[start * CQ_UNIT : (start + count) * CQ_UNIT]
                if cq.append_run(run, first_offset, first_end, last_end, prefault=False):
                    self._prefault_next(cq)
                    continue
            keep = order[start : start + count]
            if cq.max_physic_offset > 0 and first_end <= cq.max_physic_offset:
                # Re-dispatch after a restart: units the queue has are skipped here, not one by one.
                keep = keep[phys[keep] + sizes[keep] > cq.max_physic_offset]
                if not len(keep):
                    continue
            codes = tags_code[keep]
            if topic_raw == _SCHEDULE:
                codes = self._deliver_timestamps(view, keep, cols, codes)
            cq.put_units(cols["queue_offset"][keep], phys[keep], sizes[keep], codes, prefault=False)
            self._prefault_next(cq)
        if copies:
            K.copy_runs(units, copies)
            for cq, nbytes, last_end in placed:
                cq.run_written(nbytes, last_end)
                self._prefault_next(cq)

    def _legal_topic(self, raw: bytes) -> bool:
        """Whether the topic ``raw`` names one directory under ``consumequeue/``. The puts refuse
        any other, but a log written before they did (or by another writer) may hold one: its
        records get no consume-queue unit, on every member alike, rather than a directory
        elsewhere or a dispatch that fails on them for ever. They stay in the log and the
        index."""
        ok = self._legal.get(raw)
        if ok is None:
            why = store_topic_problem(raw.decode("utf-8", "replace"))
            ok = why is None
            if len(self._legal) < 100_000:
                self._legal[raw] = ok
            if not ok:
                log.warning("records of topic %r get no consume-queue unit: %s", raw, why)
        return ok

    def _prefault_next(self, cq: ConsumeQueue) -> None:
        """Have the next batch's kernel call fault in the pages past what was just appended to
        ``cq`` (without the GIL, and without the file starting a prefault thread, which wants
        the GIL)."""
        pf_start, pf_end = cq.prefault_range(CQ_PREFAULT)
        if pf_end and len(self._prefaults) < CQ_PREFAULTS:
            self._prefaults.append((cq.files[-1], pf_start, pf_end))
            cq.prefaulted(pf_end)

    def _deliver_timestamps(
        self, view: memoryview, rows: np.ndarray, cols: dict[str, np.ndarray], codes: np.ndarray
    ) -> np.ndarray:
        codes = codes.copy()
        offs, lens = K.property_spans(view, cols["props_off"][rows], cols["props_len"][rows], b"DELAY")
        u8 = np.frombuffer(view, dtype=np.uint8)
        try:
            for j, (o, n) in enumerate(zip(np.asarray(offs).tolist(), np.asarray(lens).tolist(), strict=True)):
                if o < 0:
                    continue
                try:
                    level = int(bytes(u8[o : o + n]))
                except ValueError:
                    continue
                level = min(level, self.max_delay_level)
                if level > 0:
                    codes[j] = int(cols["store_timestamp"][rows[j]]) + self.delay_table.get(level, 1000)
        finally:
            del u8
        return codes


# What one round of LoopReput dispatches at most before the loop serves its I/O again: 4 batches
# of BATCH_RECORDS, a few ms. A member catching up on a long log goes on in such rounds, one per
# turn of the loop, so its heartbeats and votes are not held up.
LOOP_BATCHES = 4
# After a round that failed, the wait before the next (as the thread's).
ERROR_PAUSE = 0.5


class LoopReput:
    """ReputMessageService's rounds run by an asyncio loop instead of its thread: a group member's,
    where commits arrive on the loop (``kick``).

    The rounds keep the thread's pace: a round after a commit, then at least BUSY_PAUSE before
    the next (``heavy_pause`` after a round of HEAVY_ROUND records or more: HEAVY_PAUSE, or
    FOLLOWER_HEAVY_PAUSE on a group follower), so what commits meanwhile makes one batch; a
    round that stopped at LOOP_BATCHES goes on at the loop's next turn. ``on_dispatched(n)`` is
    called on the loop after each round that dispatched ``n > 0`` records. The loop must not be
    blocked on dispatch's lock: a round that finds it held (a flush gathering its work,
    retention deleting files) comes back after BUSY_PAUSE. Why a member runs dispatch this way:
    docs/message-service.md."""

    def __init__(
        self, reput: ReputMessageService, loop: Any, on_dispatched: Callable[[int], None] | None = None
    ) -> None:
        self.reput = reput
        self.loop = loop
        self.on_dispatched = on_dispatched
        self._handle: Any = None
        self._next_at = 0.0
        self._closed = False
        # Set by the owner as its role changes (a float, read by the next round).
        self.heavy_pause = HEAVY_PAUSE

    def kick(self) -> None:
        """The readable end moved: a round now, or once the pause after the last one is over.
        Call on the loop."""
        if self._handle is not None or self._closed:
            return
        delay = self._next_at - time.monotonic()
        if delay <= 0:
            self._handle = self.loop.call_soon(self._round)
        else:
            self._handle = self.loop.call_later(delay, self._round)

    def close(self) -> None:
        """No round starts after this returns (one running finishes first: it holds dispatch's
        lock, which the store's close takes). Safe off the loop."""
        self._closed = True
        with self.reput._lock:
            pass

    def _later(self, delay: float) -> None:
        self._handle = self.loop.call_later(delay, self._round)

    def _round(self) -> None:
        self._handle = None
        if self._closed:
            return
        reput = self.reput
        if not reput._lock.acquire(blocking=False):
            self._later(BUSY_PAUSE)
            return
        try:
            if self._closed:
                return
            n = reput.dispatch_now(max_batches=LOOP_BATCHES, to_end=False)
        except Exception as exc:
            reput.error = exc
            log.exception("dispatch failed at commit-log offset %d; retrying", reput.reput_from)
            self._next_at = time.monotonic() + ERROR_PAUSE
            self._later(ERROR_PAUSE)
            return
        finally:
            reput._lock.release()
        pause = self.heavy_pause if n >= HEAVY_ROUND else BUSY_PAUSE
        self._next_at = time.monotonic() + pause if n else 0.0
        if reput.behind() > 0:
            if reput.capped:
                self._handle = self.loop.call_soon(self._round)
            elif n:
                self._later(pause)
            else:
                # Readable but nothing dispatched (a record still being written?): look again
                # as the idle thread would.
                self._later(IDLE_WAIT)
        if n and self.on_dispatched is not None:
            try:
                self.on_dispatched(n)
            except Exception:
                log.exception("a dispatch listener failed")
