"""ReputMessageService: follows the commit log and builds the consume queues and the index.

It walks the (committed) commit log from ``reput_from`` in batches: one kernel scan gives the
record columns, tags codes come from one Java-hash pass over the TAGS values, and the units
of each topic-queue go to its consume queue in one call. PREPARED and ROLLBACK records get no
unit; ROLLBACK records are not indexed. For ``SCHEDULE_TOPIC_XXXX`` the tags code is the
delivery time (store time + the level's delay), as ``computeDeliverTimestamp``.

``reput_from`` is a commit-log position: a record's offset in the classic log, an entry
position in the DLedger log (whose record offsets are that + 48).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import numpy as np

from dledger._ext import load as _load_ext
from dledger.rocketmq.checkpoint import StoreCheckpoint
from dledger.rocketmq.config import MessageStoreConfig
from dledger.rocketmq.consume_queue import ConsumeQueueTable
from dledger.rocketmq.index_file import INT_MAX, IndexService, build_key, index_key_hash
from dledger.rocketmq.message import RMQ_SYS_SCHEDULE_TOPIC

log = logging.getLogger(__name__)
K = _load_ext("message")

BATCH_RECORDS = 8192
# 31**k mod 2**32 for every property length k (Java's hash of a concatenation).
_POW31 = np.ones(1 << 15, dtype=np.int64)
for _k in range(1, len(_POW31)):
    _POW31[_k] = (_POW31[_k - 1] * 31) & 0xFFFFFFFF
_SCHEDULE = RMQ_SYS_SCHEDULE_TOPIC.encode()


def _group_by_queue(u8: np.ndarray, topic_off: np.ndarray, topic_len: np.ndarray, topic_hash: np.ndarray,
                    queue_id: np.ndarray) -> list[tuple[bytes, int, np.ndarray]]:
    """Rows grouped by (topic bytes, queue id), each group in commit-log order."""
    n = len(queue_id)
    if n == 0:
        return []
    key = (topic_hash.astype(np.int64) << 32) ^ (queue_id.astype(np.int64) & 0xFFFFFFFF)
    if n == 1 or bool((key == key[0]).all()):
        groups = [np.arange(n)]
    else:
        order = np.argsort(key, kind="stable")
        cuts = np.flatnonzero(np.diff(key[order])) + 1
        groups = np.split(order, cuts)
    out: list[tuple[bytes, int, np.ndarray]] = []
    for rows in groups:
        r0 = int(rows[0])
        length = int(topic_len[r0])
        first = bytes(u8[int(topic_off[r0]):int(topic_off[r0]) + length])
        same = topic_len[rows] == length
        if same.all() and length:
            mat = u8[topic_off[rows][:, None] + np.arange(length)]
            same = (mat == np.frombuffer(first, dtype=np.uint8)).all(axis=1)
        if bool(same.all()):
            out.append((first, int(queue_id[r0]), rows))
            continue
        # A hash collision between topics: split this group the slow way.
        sub: dict[bytes, list[int]] = {}
        for r in rows.tolist():
            sub.setdefault(bytes(u8[int(topic_off[r]):int(topic_off[r]) + int(topic_len[r])]), []).append(r)
        for topic, rs in sub.items():
            out.append((topic, int(queue_id[r0]), np.asarray(rs, dtype=np.int64)))
    return out


def _strings(u8: np.ndarray, offs: np.ndarray, lens: np.ndarray) -> list[str | None]:
    out: list[str | None] = []
    for o, n in zip(offs.tolist(), lens.tolist(), strict=True):
        out.append(None if o < 0 else bytes(u8[o:o + n]).decode("utf-8", "replace"))
    return out


class ReputMessageService:
    def __init__(self, commitlog: Any, consume_queues: ConsumeQueueTable, index: IndexService | None,
                 checkpoint: StoreCheckpoint, config: MessageStoreConfig) -> None:
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
        self._lock = threading.RLock()
        self._cond = threading.Condition()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

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
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            # As RocketMQ: a round, then 1 ms. Puts do not wake it: a round per put would cost
            # more than the put, while 1 ms of puts make one batch.
            self._wake.wait(0.001)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                self.dispatch_now()
            except BaseException as exc:
                self.error = exc
                log.exception("dispatch failed at commit-log offset %d; retrying", self.reput_from)
                self._stop.wait(0.5)

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

    def dispatch_now(self, max_batches: int = -1) -> int:
        """doReput: dispatch what is readable now, in this thread. Returns the records dispatched."""
        done = 0
        with self._lock:
            cl = self.commitlog
            batches = 0
            while max_batches < 0 or batches < max_batches:
                end = int(cl.readable_end)
                low = int(cl.min_offset)
                if low >= 0 and self.reput_from < low:
                    log.warning("dispatch offset %d is below the commit log's first offset %d (expired): "
                                "going on from there", self.reput_from, low)
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
                    try:
                        scan = K.scan_dledger_records if seg.dledger else K.scan_records
                        cols, stop, code = scan(seg.view, seg.base, seg.start, seg.end, False, BATCH_RECORDS)
                        n = len(cols["size"])
                        if n:
                            self._dispatch(seg.view, cols, seg.dledger)
                            done += n
                    finally:
                        seg.view.release()
                batches += 1
                if code == K.STOP_BLANK:
                    self.reput_from = cl.roll_next_file(seg.base + stop)
                elif code in (K.STOP_END, K.STOP_LIMIT):
                    self.reput_from = seg.base + stop
                    if stop >= cl.file_size:
                        self.reput_from = seg.base + cl.file_size
                else:
                    # A record dispatch cannot read: RocketMQ's master skips the rest of the
                    # segment (its data came through the put path, so this is a bug or damage).
                    log.error("dispatch: %s record at commit-log offset %d; skipping to %d",
                              K.STOP_NAMES[code], seg.base + stop, seg.base + seg.end)
                    self.reput_from = seg.base + seg.end
        if done:
            with self._cond:
                self._cond.notify_all()
        return done

    # -- one batch -----------------------------------------------------------------------

    def _dispatch(self, view: memoryview, cols: dict[str, np.ndarray], dledger: bool) -> None:
        u8 = np.frombuffer(view, dtype=np.uint8)
        try:
            self._dispatch_cols(u8, view, cols)
        finally:
            del u8

    def _dispatch_cols(self, u8: np.ndarray, view: memoryview, cols: dict[str, np.ndarray]) -> None:
        phys = cols["phys_offset"]
        sizes = cols["size"]
        sys_flag = cols["sys_flag"]
        store_ts = cols["store_timestamp"]
        tran = sys_flag & 0xC
        props_off, props_len = cols["props_off"], cols["props_len"]
        topic_hash = K.java_hash_many(view, cols["topic_off"], cols["topic_len"])
        groups = _group_by_queue(u8, cols["topic_off"], cols["topic_len"], np.asarray(topic_hash),
                                 cols["queue_id"])
        # Consume queues: NOT_TYPE and COMMIT_TYPE records.
        tag_off, tag_len = K.property_spans(view, props_off, props_len, b"TAGS")
        tags_code = np.asarray(K.java_hash_many(view, tag_off, tag_len), dtype=np.int64)
        tags_code[(np.asarray(tag_off) < 0) | (np.asarray(tag_len) == 0)] = 0
        in_cq = (tran == 0) | (tran == 8)
        for topic_raw, qid, rows in groups:
            keep = rows[in_cq[rows]]
            if not len(keep):
                continue
            topic = topic_raw.decode("utf-8", "replace")
            cq = self.consume_queues.find_or_create(topic, qid)
            if cq.max_physic_offset > 0:
                # Re-dispatch after a restart: units the queue has are skipped here, not one by one.
                keep = keep[phys[keep] + sizes[keep] > cq.max_physic_offset]
                if not len(keep):
                    continue
            codes = tags_code[keep]
            if topic_raw == _SCHEDULE:
                codes = self._deliver_timestamps(view, keep, cols, codes)
            cq.put_units(cols["queue_offset"][keep], phys[keep], sizes[keep], codes)
        # Index: every record but ROLLBACK, from its UNIQ_KEY and KEYS.
        if self.index is not None and self.config.message_index_enable:
            sel = np.flatnonzero((tran != 0xC) & (phys >= self.index_from))
            if len(sel):
                self._build_index(u8, view, cols, groups, sel)
        self.dispatched_store_timestamp = int(store_ts[-1])
        self.dispatched_messages += len(phys)

    def _deliver_timestamps(self, view: memoryview, rows: np.ndarray, cols: dict[str, np.ndarray],
                            codes: np.ndarray) -> np.ndarray:
        codes = codes.copy()
        offs, lens = K.property_spans(view, cols["props_off"][rows], cols["props_len"][rows], b"DELAY")
        u8 = np.frombuffer(view, dtype=np.uint8)
        try:
            for j, (o, n) in enumerate(zip(np.asarray(offs).tolist(), np.asarray(lens).tolist(), strict=True)):
                if o < 0:
                    continue
                try:
                    level = int(bytes(u8[o:o + n]))
                except ValueError:
                    continue
                level = min(level, self.max_delay_level)
                if level > 0:
                    codes[j] = int(cols["store_timestamp"][rows[j]]) + self.delay_table.get(level, 1000)
        finally:
            del u8
        return codes

    def _build_index(self, u8: np.ndarray, view: memoryview, cols: dict[str, np.ndarray],
                     groups: list[tuple[bytes, int, np.ndarray]], sel: np.ndarray) -> None:
        """IndexService.buildIndex for a batch: one item per UNIQ_KEY, then one per non-empty
        KEYS segment, per message, in log order; keys ``topic#key`` hashed as Java does.

        UNIQ_KEY hashes come from one kernel pass: Java's hash of ``topic#`` + key is
        ``hash(topic#) * 31**len(key) + hash(key)`` (mod 2**32), for keys whose UTF-16 length is
        their byte length (ASCII); other keys, and KEYS segments, are hashed one by one."""
        index = self.index
        assert index is not None
        last = index.get_and_create_last_file()
        phys_all = cols["phys_offset"]
        # buildIndex skips what the last file already covers.
        sel = sel[phys_all[sel] >= last.end_phy_offset]
        if not len(sel):
            return
        props_off, props_len = cols["props_off"][sel], cols["props_len"][sel]
        uo, ul = (np.asarray(a) for a in K.property_spans(view, props_off, props_len, b"UNIQ_KEY"))
        ko, kl = (np.asarray(a) for a in K.property_spans(view, props_off, props_len, b"KEYS"))
        n = len(sel)
        topic_of = np.empty(len(cols["size"]), dtype=object)
        prefix_hash = np.zeros(len(cols["size"]), dtype=np.int64)
        for topic_raw, _qid, rows in groups:
            topic = topic_raw.decode("utf-8", "replace")
            topic_of[rows] = topic
            prefix_hash[rows] = K.java_hash(topic + "#") & 0xFFFFFFFF
        topics = topic_of[sel]
        has_u = uo >= 0
        # UNIQ_KEY hashes, vectorised over the ASCII ones
        key_hash = np.asarray(K.java_hash_many(view, np.where(has_u, uo, 0), np.where(has_u, ul, 0)),
                              dtype=np.int64) & 0xFFFFFFFF
        lens = ul.astype(np.int64)
        ascii_ok = np.ones(n, dtype=bool)
        for length in np.unique(lens[has_u]).tolist():
            rows = np.flatnonzero(has_u & (lens == length))
            if length:
                # rows x length bytes through a strided view: no index matrix is built
                mat = np.lib.stride_tricks.sliding_window_view(u8, length)[uo[rows]]
                ascii_ok[rows] = mat.max(axis=1) < 0x80
        pw = _POW31[np.minimum(lens, len(_POW31) - 1)]
        full = ((prefix_hash[sel] * pw) & 0xFFFFFFFF) + key_hash
        full &= 0xFFFFFFFF
        signed = np.where(full >= 1 << 31, full - (1 << 32), full)
        uniq_items = np.abs(signed)
        uniq_items[uniq_items > INT_MAX] = 0
        slow_u = np.flatnonzero(has_u & ~ascii_ok)
        for j in slow_u.tolist():
            key = bytes(u8[int(uo[j]):int(uo[j]) + int(ul[j])]).decode("utf-8", "replace")
            uniq_items[j] = index_key_hash(build_key(topics[j], key))
        # KEYS segments, message by message
        extra: dict[int, list[int]] = {}
        for j in np.flatnonzero(ko >= 0).tolist():
            text = bytes(u8[int(ko[j]):int(ko[j]) + int(kl[j])]).decode("utf-8", "replace")
            segs = [index_key_hash(build_key(topics[j], k)) for k in text.split(" ") if k]
            if segs:
                extra[j] = segs
        counts = has_u.astype(np.int64)
        for j, segs in extra.items():
            counts[j] += len(segs)
        total = int(counts.sum())
        if not total:
            return
        starts = np.cumsum(counts) - counts
        hashes = np.zeros(total, dtype=np.int32)
        hashes[starts[has_u]] = uniq_items[has_u]
        for j, segs in extra.items():
            at = int(starts[j]) + int(has_u[j])
            hashes[at:at + len(segs)] = segs
        index.put_hashes(hashes, np.repeat(phys_all[sel], counts), np.repeat(cols["store_timestamp"][sel], counts))
