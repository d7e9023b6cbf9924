"""MessageStore: RocketMQ 4.9.4's DefaultMessageStore over the classic or the DLedger commit log.

A store root holds ``commitlog/`` (classic) or ``dledger-<selfId>/`` (DLedger), plus
``consumequeue/``, ``index/``, ``checkpoint``, ``config/`` and, while a writer has it open,
``lock`` (flock) and ``abort`` (its absence on the next open means the last close was clean).

Opening read-write recovers the commit log (normally, or from the checkpoint after an
abnormal exit), cuts consume queues that point past its end, dispatches what the queues
and the index lack, rebuilds the topic-queue table from the queues, then starts the flush,
dispatch and clean-up services. ``readonly=True`` opens without writing a byte and without
the lock, so it can look at a store another process is running, or at a copy it must not touch.
``dispatch_thread=False`` starts no dispatch thread: the owner runs dispatch's rounds itself
(``self.reput.dispatch_now``; a group member's loop, through ``dispatch.LoopReput``).
A writer delivers delayed messages (``self.schedule``, ScheduleMessageService) from open to close.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dledger._ext import load as _load_ext
from dledger.codes import ResponseCode
from dledger.config_check import is_it_time_to_do
from dledger.errors import DLedgerError
from dledger.rocketmq.store import columnar_reads
from dledger.rocketmq.store.batch_preparer import BatchPreparer, UniformBatch, as_body
from dledger.rocketmq.store.checkpoint import FILE_NAME as CHECKPOINT_FILE
from dledger.rocketmq.store.checkpoint import StoreCheckpoint
from dledger.rocketmq.store.commitlog import CommitLog
from dledger.rocketmq.store.config import SLAVE, MessageStoreConfig
from dledger.rocketmq.store.consume_queue_table import ConsumeQueueTable
from dledger.rocketmq.store.consumer_offset import ConsumerOffsetManager, OffsetFileError
from dledger.rocketmq.store.dispatch import ReputMessageService
from dledger.rocketmq.store.encode import IllegalMessage, PreparedBatch, check_message_ints
from dledger.rocketmq.store.index_file import IndexService
from dledger.rocketmq.store.message import (
    IDS_PER_HEAD,
    UNIQ_KEY,
    Message,
    MessageExt,
    decode_message_id,
    local_host_address,
    split_keys,
)
from dledger.rocketmq.store.records import decode_record, messages_from_columns
from dledger.rocketmq.store.schedule_message_service import ScheduleMessageService
from dledger.rocketmq.store.status import (
    AppendMessageResult,
    AppendMessageStatus,
    GetMessageResult,
    GetMessageStatus,
    PutMessageResult,
    PutMessageStatus,
)
from dledger.rocketmq.store.store_util import TOTAL_PHYSICAL_MEMORY_SIZE

log = logging.getLogger(__name__)
K = _load_ext("message")
_APPEND_OK = AppendMessageStatus.PUT_OK
_PUT_OK = PutMessageStatus.PUT_OK
_message_ints_ok = K.message_ints_ok
_gather = _load_ext("gather")

ABORT_FILE = "abort"
LOCK_FILE = "lock"
CLASSIC = "classic"
DLEDGER = "dledger"
LONG_MAX = (1 << 63) - 1
# RocketMQ's rocketmq.broker.diskSpaceWarningLevelRatio and diskSpaceCleanForciblyRatio: the
# disk-full flag goes up above the first, down below the second (check_disk_space); retention
# deletes the oldest files whatever their age above the second.
DISK_SPACE_WARNING_LEVEL_RATIO = 0.90
DISK_SPACE_CLEAN_FORCIBLY_RATIO = 0.85


class StoreLockedError(RuntimeError):
    """Another open store (in this process or another) holds the root's lock file."""


def detect_mode(root: Path, config: MessageStoreConfig, readonly: bool = False) -> tuple[str, str | None]:
    """``(mode, dledger self id)`` from what is on disk, else from the config. A classic store
    opened for writing with ``enable_dledger_commit_log`` becomes a DLedger one (the upgrade)."""
    ids = sorted(p.name[len("dledger-") :] for p in root.glob("dledger-*") if p.is_dir()) if root.is_dir() else []
    if ids:
        self_id = config.dledger_self_id if config.dledger_self_id in ids else ids[0]
        return DLEDGER, self_id
    if config.enable_dledger_commit_log and not readonly:
        return DLEDGER, config.dledger_self_id
    if (root / "commitlog").is_dir() or config.store_path_commit_log:
        return CLASSIC, None
    return (DLEDGER, config.dledger_self_id) if config.enable_dledger_commit_log else (CLASSIC, None)


def _out_of_space(exc: Exception) -> bool:
    """ENOSPC, as the segment kernel raises it (DISK_FULL) or as the OS does."""
    if isinstance(exc, DLedgerError):
        return exc.code == ResponseCode.DISK_FULL
    return isinstance(exc, OSError) and exc.errno == errno.ENOSPC


class MessageStore:
    """The message store of one root directory. See the module docstring."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        config: MessageStoreConfig | None = None,
        *,
        readonly: bool = False,
        appender: Any = None,
        dispatch_thread: bool = True,
        schedule: bool = True,
    ) -> None:
        self.root = Path(root)
        cfg = (config or MessageStoreConfig()).replace(store_path_root_dir=str(self.root))
        self.readonly = readonly
        if readonly and not self.root.is_dir():
            raise FileNotFoundError(f"{self.root}: no store here")
        mode, self_id = detect_mode(self.root, cfg, readonly)
        if mode == DLEDGER:
            cfg = cfg.replace(enable_dledger_commit_log=True, dledger_self_id=self_id or cfg.dledger_self_id)
        else:
            cfg = cfg.replace(enable_dledger_commit_log=False)
        self.config = cfg
        self.mode = mode
        self._closed = False
        # RunningFlags' DISK_FULL bit (check_disk_space).
        self.disk_full = False
        self._lock_fd = -1
        self._services_stop = threading.Event()
        self._service_thread: threading.Thread | None = None
        # Held while consume-queue and index files are written out (flush_logics) or deleted.
        self._flush_lock = threading.Lock()
        if not readonly:
            self.root.mkdir(parents=True, exist_ok=True)
            self._take_lock()
        try:
            self._open(appender, dispatch_thread)
        except BaseException:
            self._abandon()
            self._release_lock()
            raise
        # Delayed messages (ScheduleMessageService): a writer delivers them while it takes puts.
        # An owner with a put of its own (a broker, a group member) passes schedule=False and
        # starts self.schedule itself; close() stops it either way.
        self.schedule: ScheduleMessageService | None = None if readonly else ScheduleMessageService(self)
        if self.schedule is not None and schedule:
            self.schedule.start()

    # -- opening -------------------------------------------------------------------------

    def _take_lock(self) -> None:
        fd = os.open(self.root / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreLockedError(
                f"{self.root}: another writer has this store open, in this process or another (lock failed)"
            ) from None
        os.pwrite(fd, b"lock", 0)
        self._lock_fd = fd

    def _abandon(self) -> None:
        """Close what a failed open had opened (no flush: it may be what failed)."""
        reput = getattr(self, "reput", None)
        if reput is not None:
            reput.stop()
        self._services_stop.set()
        for name in ("commitlog", "consume_queues", "index_service"):
            part = getattr(self, name, None)
            if part is None:
                continue
            try:
                part.close()
            except Exception:
                log.exception("closing %s after a failed open", name)

    def _release_lock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def _open(self, appender: Any, dispatch_thread: bool) -> None:
        cfg, ro = self.config, self.readonly
        self.last_exit_ok = not (self.root / ABORT_FILE).exists()
        self.checkpoint = StoreCheckpoint(self.root / CHECKPOINT_FILE, readonly=ro)
        host = cfg.store_host or f"{local_host_address()}:10911"
        addr, _, port = host.rpartition(":")
        self.store_host = (addr.strip("[]"), int(port))
        self.preparer = BatchPreparer(cfg, self.store_host)
        # A put waits for its flush (SYNC_FLUSH); the DLedger log's appends flush themselves.
        self._sync_classic = cfg.sync_flush and self.mode == CLASSIC
        self.commitlog: Any
        if self.mode == DLEDGER:
            self.commitlog = self._open_dledger_log(appender)
        else:
            self.commitlog = CommitLog(cfg, self.checkpoint, readonly=ro)
        # The single put of a message whose template is cached, in one kernel call.
        self._single_put = K.SinglePut(
            self.preparer,
            cfg,
            self.commitlog,
            _PUT_OK,
            _APPEND_OK,
            cfg.max_message_size,
            self._sync_classic,
            K.END_FILE_MIN_BLANK_LENGTH,
            self.commitlog.record_header_size,
            (Message, MessageExt),
        )
        self.consume_queues = ConsumeQueueTable(self.root, cfg.mapped_file_size_consume_queue, ro)
        self.consume_queues.load()
        self.index_service = IndexService(
            self.root / "index",
            cfg.max_hash_slot_num,
            cfg.max_index_num,
            ro,
            max_msgs_num_batch=max(cfg.max_msgs_num_batch, 64),
        )
        # After an abnormal exit a writer drops index files the checkpoint does not vouch for and
        # rebuilds them; a reader cannot rebuild, and next to a running writer "abort" is there anyway.
        self.index_service.load(self.last_exit_ok or ro, self.checkpoint.index_msg_timestamp)
        self.consumer_offsets = ConsumerOffsetManager(self.root / "config", readonly=ro)
        try:
            self.consumer_offsets.load()
        except OffsetFileError as exc:
            if not ro:
                raise
            # A reader (dump, stats, a consume by offset) needs no consumer offsets; a writer
            # refuses to start without them, as the broker's ConfigManager.load does.
            log.warning("%s; read without consumer offsets", exc)

        # recover(): consume queues first (they recovered their ends when loaded), then the log.
        max_cq_phys = self.consume_queues.max_physic_offset()
        if ro and self.mode == CLASSIC:
            # A reader needs only where the log ends: from the end of what dispatch reached.
            started = self.commitlog.recover(self.last_exit_ok, resume_at=max_cq_phys)
        else:
            started = self.commitlog.recover(self.last_exit_ok)
        if self.mode == DLEDGER:
            # As DLedgerCommitLog.recover, the queues are cut to the log's written end, not to the
            # committed position (on a member, 0 until its leader speaks: every queue was cut and
            # rebuilt from the start of the log). Dispatch follows only committed entries, so what
            # the queues cover below the written end was committed, and a committed entry is never
            # cut: readers may see it now (a reader beside a running member too).
            end = int(self.commitlog.ledger_end_pos)
            if max_cq_phys > 0:
                self.commitlog.on_committed(min(max_cq_phys, end))
        else:
            end = self.commitlog.max_offset
        if max_cq_phys > end and not ro:
            log.warning("consume queues point up to %d, past the commit log's end %d: cutting them", max_cq_phys, end)
            self.consume_queues.truncate_dirty(end)
        self.reput = ReputMessageService(
            self.commitlog,
            self.consume_queues,
            self.index_service if cfg.message_index_enable else None,
            self.checkpoint,
            cfg,
        )
        self.reput.reput_from = self._reput_start(started)
        if self.mode == DLEDGER:
            if dispatch_thread:  # else the owner runs the rounds, told of commits its own way
                self.commitlog.wakeup = self.reput.wakeup
            self.reput.woken_by_commits = True
            # The log store hands the page cache far behind its writer back to the kernel
            # (data_cache_window), but not what dispatch has still to read: dispatch stopped or
            # behind (catching up, a slow follower) would read it back from disk.
            reput = self.reput
            self.commitlog.store.cache_keep_from = lambda: reput.reput_from
            # The DLedger store deletes its files on its own thread: the offsets first.
            self.commitlog.store.before_retention = self.consumer_offsets.persist_if_changed
            self.commitlog.on_role_ready = self.recover_topic_queue_table
        if not ro:
            # start(): finish what dispatch lacks before taking writes. A group member's owner
            # runs dispatch itself (dispatch_thread=False) and takes writes only once it has caught
            # up (on_role_change): its reads are served from the queues kept meanwhile, while the
            # rest (after kill -9, the last index file, up to 20M records) is dispatched there.
            if not (self.mode == DLEDGER and appender is not None and not dispatch_thread):
                self.reput.dispatch_now()
            self.recover_topic_queue_table()
            if cfg.message_index_enable:
                self.index_service.prepare_first_file()
            (self.root / ABORT_FILE).touch()
            self.commitlog.start()
            if dispatch_thread:
                self.reput.start()
            self._service_thread = threading.Thread(target=self._services, name="rocketmq-store-services", daemon=True)
            self._service_thread.start()
        else:
            self.recover_topic_queue_table()

    def _open_dledger_log(self, appender: Any) -> Any:
        """The DLedger commit log, with the classic files of an upgraded store below it; over a
        classic store without DLedger data files yet, the upgrade first (DLedgerCommitLog.recover)."""
        from dledger.rocketmq.store.commitlog import segment_size_of
        from dledger.rocketmq.store.dledger_commitlog import (
            DLedgerCommitLog,
            open_dledger_store,
            upgrade_classic_log,
        )

        cfg, ro = self.config, self.readonly
        old: CommitLog | None = None
        if segment_size_of(cfg.commit_log_path):
            old = CommitLog(cfg, self.checkpoint, readonly=ro)
            # The DLedger log continues the old one's offsets: its files must be the same size.
            cfg = cfg.replace(mapped_file_size_commit_log=old.file_size)
        try:
            dstore = open_dledger_store(cfg, readonly=ro)
        except BaseException:
            if old is not None:
                old.close()
            raise
        plan = None
        try:
            if old is not None and not dstore._log.data.files and not ro:
                plan = upgrade_classic_log(old, dstore)
            if appender is not None and not hasattr(appender, "append_batch"):
                appender = appender(dstore)  # a factory: it wraps the store this opened
            cl = DLedgerCommitLog(self.config, dstore, appender, readonly=ro, old=old)
        except BaseException:
            dstore.close()
            if old is not None:
                old.close()
            raise
        cl.upgraded = plan
        if plan is not None:
            log.warning(
                "%s: upgraded the classic commit log to DLedger: old records [%d, %d) in %d file(s) stay in "
                "commitlog/, the DLedger log starts at dividedCommitlogOffset %d%s",
                self.root,
                plan.old_min,
                plan.old_end,
                plan.files,
                plan.divided,
                " (blank written at the old end)" if plan.write_blank else "",
            )
        return cl

    def _reput_start(self, recovery_start: int) -> int:
        cl = self.commitlog
        low = max(int(cl.min_offset), 0)
        cq_end = self.consume_queues.max_physic_offset()
        start = max(cq_end, low) if cq_end >= 0 else low
        # A reader beside a running writer finds "abort" there: it dispatches nothing, and its
        # start is only what stats report as dispatch's lag, which the queues' end gives.
        abnormal = not self.last_exit_ok and not self.readonly
        if abnormal and (self.mode == CLASSIC or getattr(cl, "upgraded", None) is not None):
            # Abnormal exit: redo from the file recovery started at (duplicates are ignored).
            start = min(start, max(recovery_start, low))
        if self.config.message_index_enable:
            index_next = self._index_next(abnormal)
            self.reput.index_from = index_next
            # Dispatch reads from record starts: a DLedger record lies past its entry header.
            at = index_next - cl.header_size_at(index_next) if abnormal else index_next
            start = min(start, max(at, low))
        divided = int(getattr(cl, "divided", -1))
        if start < divided <= cl.roll_next_file(start) and cl.record_size_at(start) < 0:
            # The blank that ends an upgraded store's old log: what follows it is the first entry
            # (else a reader's stats count the blank as dispatch's lag).
            start = divided
        return start

    def _index_next(self, abnormal: bool) -> int:
        """Where the index needs dispatch from: past the last indexed record, or after an
        abnormal exit at it, as buildIndex skips only what lies before the last file's
        endPhyOffset. A record's items may span two files, and recovery drops a last file the
        checkpoint does not vouch for: the record's items there come back only if it is
        indexed again (the ones that stayed are found twice; queries give an offset once)."""
        files = self.index_service.files
        if not files or all(f.entries == 0 for f in files):
            return max(int(self.commitlog.min_offset), 0)
        end_phy = int(files[-1].end_phy_offset)
        if abnormal:
            return end_phy
        size = self.commitlog.record_size_at(end_phy)
        return end_phy + size if size > 0 else end_phy

    def recover_topic_queue_table(self) -> None:
        """recoverTopicQueueTable: the next queue offset of every queue, from its consume queue."""
        table: dict[str, int] = {}
        low = max(int(self.commitlog.min_offset), 0)
        for topic, qid, cq in self.consume_queues:
            table[f"{topic}-{qid}"] = cq.max_offset
            # A reader too: after retention the first file's first units point into deleted log.
            cq.correct_min_offset(low)
        with self.commitlog.put_lock:
            self.commitlog.topic_queue_table = table

    # -- the DLedger seam ------------------------------------------------------------------

    def on_committed(self, pos: int) -> None:
        """DLedger mode: the group committed the ledger up to data position ``pos``."""
        self.commitlog.on_committed(pos)

    def on_role_change(self, role: str, term: int) -> None:
        """DLedger mode: this member became LEADER, FOLLOWER or CANDIDATE in ``term``. A leader
        takes writes once everything in its ledger is committed and dispatched, with the
        topic-queue table rebuilt from the consume queues (DLedgerRoleChangeHandler)."""
        cl = self.commitlog

        def ready() -> bool:
            return cl.committed_pos >= cl.ledger_end_pos and self.reput.behind() == 0

        cl.on_role_change(role, term, ready)

    # -- background services ---------------------------------------------------------------

    def _services(self) -> None:
        """FlushConsumeQueueService and CleanCommitLogService/CleanConsumeQueueService."""
        cfg = self.config
        interval = max(cfg.flush_interval_consume_queue, 10) / 1000.0
        last_clean = last_offsets = time.monotonic()
        # Each service on its own, as RocketMQ schedules them: on a full disk the flush and the
        # offsets fail (ENOSPC), and retention, behind them in one try, never ran, so nothing
        # freed the disk and puts stayed refused.
        while not self._services_stop.wait(interval):
            try:
                self.flush_logics()
            except Exception:
                log.exception("consume-queue flush failed; retrying")
            if time.monotonic() - last_offsets >= cfg.flush_consumer_offset_interval / 1000.0:
                # Offsets applied from the log live in memory until written: a member that
                # crashes replays the offset records its log still holds, not older ones.
                last_offsets = time.monotonic()
                try:
                    self.consumer_offsets.persist_if_changed()
                except Exception:
                    log.exception("consumer offsets not persisted; retrying")
            if time.monotonic() - last_clean >= cfg.clean_resource_interval / 1000.0:
                last_clean = time.monotonic()
                try:
                    self.delete_expired(used_ratio=self.check_disk_space())
                except Exception:
                    log.exception("retention failed; retrying")

    def check_disk_space(self, used_ratio: float | None = None) -> float:
        """CleanCommitLogService.isSpaceToDelete's RunningFlags: above
        DISK_SPACE_WARNING_LEVEL_RATIO of the disk used, the disk-full flag is set and puts are
        refused (SERVICE_NOT_AVAILABLE) while retention cleans; below
        DISK_SPACE_CLEAN_FORCIBLY_RATIO it is cleared (getAndMakeDiskOK), in between it stays as
        it is. Returns the ratio."""
        ratio = self.disk_used_ratio() if used_ratio is None else used_ratio
        if ratio > DISK_SPACE_WARNING_LEVEL_RATIO:
            if not self.disk_full:
                log.error("disk maybe full soon (%.3f used): puts refused until retention frees space", ratio)
            self.disk_full = True
        elif ratio < DISK_SPACE_CLEAN_FORCIBLY_RATIO:
            if self.disk_full:
                log.warning("disk space ok again (%.3f used): puts accepted", ratio)
            self.disk_full = False
        return ratio

    def flush_logics(self) -> None:
        """Flush consume queues and index, then record in the checkpoint what they cover."""
        if self.readonly or self._closed:
            return
        logics_ts = self.reput.dispatched_store_timestamp
        with self._flush_lock:
            # What to write is taken under dispatch's lock (the tables it grows); the msyncs run
            # after it is let go: dispatch waited out each one (up to ~140 ms a second for a
            # busy member's queues and index), and a long poll with it.
            with self.reput._lock:
                jobs = self.consume_queues.flush_jobs() + self.index_service.flush_jobs(partial=False)
            for job in jobs:
                job()
        if logics_ts:
            self.checkpoint.logics_msg_timestamp = logics_ts
        if self.index_service.index_msg_timestamp:
            self.checkpoint.index_msg_timestamp = self.index_service.index_msg_timestamp
        if self.mode == DLEDGER:
            self.checkpoint.physic_msg_timestamp = max(
                self.checkpoint.physic_msg_timestamp, self.commitlog.last_store_timestamp
            )
        self.checkpoint.flush()

    def flush(self) -> None:
        """Flush the commit log, the consume queues, the index and the checkpoint."""
        if self.readonly or self._closed:
            return
        self.commitlog.flush(0)
        self.flush_logics()

    # -- puts ----------------------------------------------------------------------------

    def put_message(self, msg: Message) -> PutMessageResult:
        """putMessage of one message: its template (topic, queue, properties, hosts; checked and
        encoded once per kind of message), then one kernel call under the lock writes the record.
        Stores what ``put_messages([msg])`` stores, byte for byte."""
        if self._closed or self.readonly or self.disk_full or self.config.broker_role == SLAVE:
            refused = self._refuse()
            if refused is not None:
                return refused
        try:
            result = self._single_put.put(msg)
        except Exception as exc:
            return self._put_failed(exc)
        if result is not None:
            return result
        prep = self.preparer
        try:
            if not _message_ints_ok(msg):  # in C; check_message_ints says which number
                check_message_ints(msg)
            tpl = prep.put_template(msg)
        except IllegalMessage as exc:
            log.info("put refused: %s", exc)
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, reason=str(exc))
        body = msg.body
        if type(body) is not bytes:
            try:
                body = as_body(body)
            except IllegalMessage as exc:
                return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, reason=str(exc))
        if tpl.fixed_len + len(body) > self.config.max_message_size:
            reason = (
                f"message 0 is {tpl.fixed_len + len(body)} bytes as a record, "
                f"over max_message_size {self.config.max_message_size}"
            )
            log.info("put refused: %s", reason)
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, reason=reason)
        # The counter is taken as the batch path takes it (for every message), so both number
        # alike; the clock is read once, for the UNIQ_KEY and (when the message has none) the
        # born time.
        head, counter, now = prep.uniq.reserve_raw(1)
        try:
            result = self.commitlog.put_one(
                tpl,
                body,
                msg.flag,
                msg.born_timestamp or now,
                msg.reconsume_times,
                msg.prepared_offset,
                head if tpl.uniq else b"",
                counter,
            )
        except Exception as exc:
            return self._put_failed(exc)
        if self._sync_classic and tpl.wait_store:
            return self._put_done(result, lambda: result.wrote_offset + result.wrote_bytes)
        if result.status is _APPEND_OK:
            return PutMessageResult(_PUT_OK, result)
        return self._put_done(result, None)

    def put_messages(self, msgs: Sequence[Message]) -> PutMessageResult:
        """Store messages (one batch: one lock hold, one write). A message the store refuses
        makes the whole batch MESSAGE_ILLEGAL with nothing written."""
        refused = self._refuse()
        if refused is not None:
            return refused
        try:
            batch = self.preparer.prepare(msgs)
        except IllegalMessage as exc:
            log.info("put refused: %s", exc)
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, reason=str(exc))
        return self._put(batch)

    def put_batch(
        self,
        topic: str,
        bodies: Sequence[bytes],
        *,
        queue_id: int = 0,
        tags: str | None = None,
        keys: Sequence[str | Sequence[str] | None] | None = None,
        properties: dict[str, str] | None = None,
        flag: int = 0,
        sys_flag: int = 0,
        born_host: tuple[str, int] | None = None,
        born_timestamp: int = 0,
    ) -> PutMessageResult:
        """putMessages of a MessageExtBatch: many bodies to one topic-queue, sharing tags,
        properties and flags, each with its own keys if given (a space-separated string or a
        list of str, as ``Message.keys``).
        The fast way to store many messages; no delay level (as RocketMQ's batch)."""
        if self._closed or self.readonly or self.disk_full or self.config.broker_role == SLAVE:
            refused = self._refuse()
            if refused is not None:
                return refused
        prep = self.preparer
        batch: PreparedBatch | UniformBatch
        try:
            if keys is None and len(bodies) <= IDS_PER_HEAD:
                batch = prep.prepare_uniform(
                    topic, bodies, queue_id, tags, properties, flag, sys_flag, born_host, born_timestamp
                )
            else:
                # A key per body (the encoder writes them), or more messages than one UNIQ_KEY
                # head names (their properties one by one).
                batch = prep.prepare_keyed(
                    topic,
                    bodies,
                    queue_id,
                    tags,
                    keys if keys is not None else [None] * len(bodies),
                    properties,
                    flag,
                    sys_flag,
                    born_host,
                    born_timestamp,
                )
        except IllegalMessage as exc:
            log.info("put refused: %s", exc)
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, reason=str(exc))
        return self._put(batch)

    def _refuse(self) -> PutMessageResult | None:
        if self._closed or self.readonly:
            return PutMessageResult(
                PutMessageStatus.SERVICE_NOT_AVAILABLE,
                reason="store is closed" if self._closed else "store is read-only",
            )
        if self.config.broker_role == SLAVE:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, reason="the store is a slave")
        if self.disk_full:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, reason="disk full: puts are refused")
        return None

    def _put(self, batch: PreparedBatch | UniformBatch) -> PutMessageResult:
        try:
            if type(batch) is UniformBatch:
                result = self.commitlog.put_uniform(batch)
            else:
                result = self.commitlog.put(batch)
        except Exception as exc:
            return self._put_failed(exc)
        if not (self._sync_classic and batch.wait_store):
            if result.status is _APPEND_OK:
                return PutMessageResult(_PUT_OK, result)
            return self._put_done(result, None)

        def written_end() -> int:
            if result.wrote_offsets is not None:
                return int(result.wrote_offsets[-1]) + int(batch.record_lengths()[-1])
            return int(result.wrote_offset + result.wrote_bytes)

        return self._put_done(result, written_end)

    @staticmethod
    def _put_failed(exc: Exception) -> PutMessageResult:
        # A refusal the commit log names (PutRefused: the DLedger codes of §7.3) keeps its status.
        status = getattr(exc, "status", None)
        if status is not None:
            return PutMessageResult(status, reason=str(exc))
        if _out_of_space(exc):
            # 4.9.4 answers CREATE_MAPEDFILE_FAILED when the commit log cannot get the file to
            # write into (getLastMappedFile null); a write of ours that finds no blocks is that.
            # Nothing of the put is kept (the kernel zeroes what landed), nothing acknowledged.
            log.error("put refused, the disk is full: %s", exc)
            return PutMessageResult(PutMessageStatus.CREATE_MAPEDFILE_FAILED, reason=f"disk full: {exc}")
        log.exception("put failed")
        return PutMessageResult(PutMessageStatus.UNKNOWN_ERROR, reason=str(exc))

    def _put_done(self, result: AppendMessageResult, wait_end: Callable[[], int] | None) -> PutMessageResult:
        """The put's status once appended; with ``wait_end`` (SYNC_FLUSH on the classic log) after
        the flush has passed the end of what it wrote (group commit)."""
        if result.status == AppendMessageStatus.MESSAGE_SIZE_EXCEEDED:
            return PutMessageResult(
                PutMessageStatus.MESSAGE_ILLEGAL, result, reason="message larger than a commit-log file"
            )
        if wait_end is not None and not self.commitlog.wait_flushed(wait_end()):
            return PutMessageResult(PutMessageStatus.FLUSH_DISK_TIMEOUT, result, reason="flush timed out")
        return PutMessageResult(PutMessageStatus.PUT_OK, result)

    # -- reads ---------------------------------------------------------------------------

    def _cq(self, topic: str, queue_id: int) -> Any:
        return self.consume_queues.get(topic, queue_id)

    def _check_readable(self) -> None:
        # A closed store's files are unmapped: an answer would be a made-up empty queue.
        if self._closed:
            raise ValueError(f"{self.root}: the message store is closed")

    def get_messages(
        self, topic: str, queue_id: int, offset: int, max_count: int = 32, max_bytes: int | None = None
    ) -> GetMessageResult:
        """getMessage: up to ``max_count`` messages (and about ``max_bytes``) of a queue from
        ``offset``, with RocketMQ's status and next offset."""
        self._check_readable()
        max_bytes = self.config.max_transfer_bytes_on_message_in_memory if max_bytes is None else max_bytes
        cq = self._cq(topic, queue_id)
        if cq is None:
            return GetMessageResult(
                GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, next_begin_offset=self._next_offset_correction(offset, 0)
            )
        min_off, max_off = int(cq.min_offset), int(cq.max_offset)
        res = GetMessageResult(
            GetMessageStatus.NO_MESSAGE_IN_QUEUE, next_begin_offset=offset, min_offset=min_off, max_offset=max_off
        )
        if max_off == 0:
            res.next_begin_offset = self._next_offset_correction(offset, 0)
        elif offset < min_off:
            res.status = GetMessageStatus.OFFSET_TOO_SMALL
            res.next_begin_offset = self._next_offset_correction(offset, min_off)
        elif offset == max_off:
            res.status, res.next_begin_offset = GetMessageStatus.OFFSET_OVERFLOW_ONE, offset
        elif offset > max_off:
            # 4.9.4 moves an offset past the end to the end (older releases sent it back to 0
            # when the queue's minimum was 0, which replays a whole queue).
            res.status = GetMessageStatus.OFFSET_OVERFLOW_BADLY
            res.next_begin_offset = self._next_offset_correction(offset, max_off)
        else:
            phys, sizes, _tags = cq.get_units(offset, max(max_count, 1))
            if not len(phys):
                # The unit's file is gone (retention between the two looks): on to the next file.
                res.status = GetMessageStatus.OFFSET_FOUND_NULL
                res.next_begin_offset = self._next_offset_correction(offset, cq.roll_next_file(offset))
                return res
            res.status = GetMessageStatus.NO_MATCHED_MESSAGE
            total = 0
            i = 0
            min_phys = int(self.commitlog.min_offset)
            for i in range(len(phys)):
                p, s = int(phys[i]), int(sizes[i])
                if res.messages and (len(res.messages) >= max_count or total + s > max_bytes):
                    break
                data = self.commitlog.read(p, s) if p >= min_phys else None
                if data is None:
                    if not res.messages:
                        res.status = GetMessageStatus.MESSAGE_WAS_REMOVING
                    continue
                msg = decode_record(data, p)
                if msg is None:
                    continue
                res.messages.append(msg)
                total += s
                res.status = GetMessageStatus.FOUND
            else:
                i = len(phys)
            res.next_begin_offset = offset + i
        return res

    def _next_offset_correction(self, old: int, new: int) -> int:
        """nextOffsetCorrection: a master sends a consumer to ``new``; a slave (offsetCheckInSlave
        false, RocketMQ's default) leaves its offset alone, since the slave may only be behind.
        In a group the members that are not the leader are the slaves."""
        if self.config.broker_role == SLAVE:
            return old
        if self.mode == DLEDGER:
            from dledger.rocketmq.store.dledger_commitlog import LEADER

            return new if self.commitlog.role == LEADER else old
        return new

    def pull_columns(
        self, topic: str, queue_id: int, offset: int, max_count: int = 65536, max_bytes: int | None = None
    ) -> tuple[memoryview, dict[str, np.ndarray]]:
        """Up to ``max_count`` messages of a queue from ``offset`` (and no more than ``max_bytes``
        of records, but at least one, as isTheBatchFull) as scan columns over one buffer
        holding their records back to back (``phys_offset`` is each record's commit-log offset,
        ``queue_offset`` its queue offset). Stops at the first unit whose record is not readable
        (not yet committed, or deleted). The fast read path: no object per message."""
        self._check_readable()
        return columnar_reads.pull_columns(self.commitlog, self._cq(topic, queue_id), offset, max_count, max_bytes)

    def pull_arrow(self, topic: str, queue_id: int, offset: int, max_count: int = 65536) -> Any:
        """Up to ``max_count`` messages of a queue from ``offset`` as a pyarrow Table:
        queue_offset, phys_offset, size, store_timestamp, born_timestamp, sys_flag, flag,
        reconsume_times, body and properties (binary). Stops at the first unit whose record is
        not readable (not yet committed, or deleted) or not whole, as ``pull_columns``. The
        records are read in place in the log's mapping (one kernel call per log file)."""
        self._check_readable()
        return columnar_reads.pull_arrow(self.commitlog, self._cq(topic, queue_id), offset, max_count)

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        self._check_readable()
        cq = self._cq(topic, queue_id)
        return int(cq.min_offset) if cq is not None else 0

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        self._check_readable()
        cq = self._cq(topic, queue_id)
        return int(cq.max_offset) if cq is not None else 0

    def store_timestamp_at(self, phys_offset: int, size: int = -1) -> int:
        """pickupStoreTimestamp: the store time of the record at ``phys_offset`` (-1 if unreadable)."""
        if size <= 0:
            size = self.commitlog.record_size_at(phys_offset)
            if size <= 0:
                return -1
        data = self.commitlog.read(phys_offset, size)
        if data is None:
            return -1
        msg = decode_record(data, phys_offset)
        return msg.store_timestamp if msg is not None else -1

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp: int) -> int:
        """getOffsetInQueueByTime: binary search on store time for the queue offset nearest ``timestamp``."""
        self._check_readable()
        cq = self._cq(topic, queue_id)
        if cq is None:
            return 0
        return int(cq.offset_for_timestamp(timestamp, self.store_timestamp_at, max(int(self.commitlog.min_offset), 0)))

    def lookup(self, phys_offset: int) -> MessageExt | None:
        """lookMessageByOffset: the message whose record starts at ``phys_offset``."""
        self._check_readable()
        size = self.commitlog.record_size_at(phys_offset)
        if size <= 0:
            return None
        data = self.commitlog.read(phys_offset, size)
        return decode_record(data, phys_offset) if data is not None else None

    def view_by_msg_id(self, msg_id: str) -> MessageExt | None:
        """The message of an offset message id (store host + physical offset)."""
        try:
            _host, phys = decode_message_id(msg_id)
        except ValueError:
            return None
        return self.lookup(phys)

    def query_offsets_by_key(
        self, topic: str, key: str, max_count: int = 64, begin_ts: int = 0, end_ts: int = LONG_MAX
    ) -> list[int]:
        """The physical offsets of the index items of ``topic`` and ``key``, newest first, as
        queryOffset gives them (an offset twice when a message has a key twice)."""
        self._check_readable()
        return [int(p) for p in self.index_service.query(topic, key, max_count, begin_ts, end_ts)]

    def query_by_key(
        self, topic: str, key: str, max_count: int = 64, begin_ts: int = 0, end_ts: int = LONG_MAX
    ) -> list[MessageExt]:
        """queryMessage: the messages of ``topic`` with ``key`` (UNIQ_KEY or a KEYS segment), newest
        first. The index knows key hashes only; as RocketMQ's client does, messages whose topic
        or keys do not match (a hash collision) are left out."""
        out = []
        # Each message once: a key given twice, or a record indexed again after a crash (see
        # _index_next), has two items.
        for p in dict.fromkeys(self.query_offsets_by_key(topic, key, max_count, begin_ts, end_ts)):
            msg = self.lookup(p)
            if msg is None or msg.topic != topic:
                continue
            if msg.properties.get(UNIQ_KEY) == key or key in split_keys(msg.keys_string):
                out.append(msg)
        return out

    # -- offsets and lag -------------------------------------------------------------------

    @property
    def min_phys_offset(self) -> int:
        return max(int(self.commitlog.min_offset), 0)

    @property
    def max_phys_offset(self) -> int:
        """getMaxPhyOffset: the end of the readable commit log."""
        return int(self.commitlog.max_offset)

    def suggest_pulling_from_slave(self, max_phy_offset_pulling: int) -> bool:
        """getMessage's suggestPullingFromSlave: a pull whose last unit lies further behind the
        commit log's end than ``access_message_in_memory_max_ratio`` % of the machine's memory
        reads pages the page cache has likely dropped, so a slave had better serve it."""
        memory = int(TOTAL_PHYSICAL_MEMORY_SIZE * (self.config.access_message_in_memory_max_ratio / 100.0))
        return self.max_phys_offset - max_phy_offset_pulling > memory

    @property
    def committed_phys_offset(self) -> int:
        """What readers may see: the committed position in DLedger mode, the written end otherwise."""
        return int(self.commitlog.readable_end)

    def append_to_commit_log(self, start_offset: int, data: Any) -> bool:
        """appendToCommitLog: a slave appends what its master pushed (classic log only); dispatch
        then builds the consume queues and the index from it."""
        if self._closed or self.readonly or self.mode != CLASSIC:
            return False
        if not self.commitlog.append_data(start_offset, data):
            return False
        reput = self.reput
        if reput.reput_from < self.commitlog.min_offset:
            # An empty slave starts at the master's last file: dispatch starts there too.
            with reput._lock:
                reput.reput_from = max(reput.reput_from, int(self.commitlog.min_offset))
        self.reput.wakeup()
        return True

    def change_role(self, role: str) -> None:
        """A classic store changes role (BrokerController.changeToMaster / changeToSlave). A new
        master first dispatches everything, cuts a record its last HA frame left half-written
        (frames are cut by size), and rebuilds the topic-queue table from its consume queues,
        so its first put follows the last record it holds."""
        if self.mode != CLASSIC or self.readonly:
            raise ValueError(f"{self.root}: only a writable classic store changes role")
        cfg = self.config.replace(broker_role=role)
        if role != SLAVE:
            self.reput.dispatch_now()
            cl = self.commitlog
            with cl.put_lock:
                end = int(self.reput.reput_from)
                if end < cl.max_offset:
                    log.warning("new master: the log's last %d bytes are half a record: cut", cl.max_offset - end)
                    cl._truncate(end, True)
            self.recover_topic_queue_table()
        self.config = cfg
        self.commitlog.config = cfg

    def dispatch_behind_bytes(self) -> int:
        return self.reput.behind()

    def dispatch_now(self) -> int:
        """Dispatch what is readable now, in the caller's thread."""
        if self.readonly:
            return 0
        return self.reput.dispatch_now()

    def wait_dispatched(self, timeout: float = 30.0) -> bool:
        if self.readonly:
            return self.reput.behind() == 0
        return self.reput.wait_dispatched(None, timeout)

    # -- walking the log ------------------------------------------------------------------------

    def iter_batches(self, start_phys: int | None = None) -> Iterator[tuple[memoryview, dict[str, np.ndarray]]]:
        """Scan columns of the records in commit-log order, each batch with the buffer its
        ``*_off`` columns point into: a copy of at most ``_WINDOW`` bytes of the log (valid
        after the loop moves on)."""
        self._check_readable()
        return columnar_reads.iter_batches(self.commitlog, start_phys)

    def iter_messages(self, start_phys: int | None = None) -> Iterator[MessageExt]:
        """Every message in commit-log order, as ReputMessageService walks the log."""
        for buf, cols in self.iter_batches(start_phys):
            yield from messages_from_columns(buf, cols)

    # -- consumer offsets ---------------------------------------------------------------------

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.consumer_offsets.commit_offset(group, topic, queue_id, offset)

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        return int(self.consumer_offsets.query_offset(group, topic, queue_id))

    # -- retention ----------------------------------------------------------------------------

    def disk_used_ratio(self) -> float:
        usage = shutil.disk_usage(self.root)
        return usage.used / usage.total if usage.total else 0.0

    def delete_expired(self, now: float | None = None, used_ratio: float | None = None, force: bool = False) -> int:
        """CleanCommitLogService, then CleanConsumeQueueService: delete commit-log files older
        than ``file_reserved_time`` hours when it is a ``delete_when`` hour or the disk is over
        ``disk_max_used_space_ratio`` (or ``force``; above 85 % files go whatever their age),
        then the consume-queue and index files that point only into deleted commit log.
        Returns the commit-log files deleted."""
        if self.readonly or self._closed:
            return 0
        cfg = self.config
        now = time.time() if now is None else now
        ratio = self.disk_used_ratio() if used_ratio is None else used_ratio
        time_up = is_it_time_to_do(cfg.delete_when, now)
        space_full = ratio > cfg.disk_max_used_space_ratio / 100.0
        clean_now = (ratio > DISK_SPACE_CLEAN_FORCIBLY_RATIO and cfg.clean_file_forcibly_enable) or force
        deleted = 0
        expired_ms = cfg.file_reserved_time * 3600 * 1000.0
        if self.mode == DLEDGER and self.commitlog.old_files:
            # An upgraded store: its old files go first, by the classic rule; DLedger deletes
            # nothing until none is left (DLedgerCommitLog.deleteExpiredFile).
            if time_up or space_full or force:
                self.consumer_offsets.persist_if_changed()
                keep_from = int(self.reput.reput_from)
                deleted = self.commitlog.delete_old_expired(expired_ms, now * 1000.0, clean_now, keep_from)
                if deleted:
                    log.info("retention deleted %d classic commit-log file(s) of the upgraded store", deleted)
        elif self.mode == DLEDGER:
            # DLedger's own retention decides (fileReservedTime + 1 hours, its disk ratios).
            deleted = self.commitlog.delete_expired(0.0, now * 1000.0, clean_now, 10, used_ratio=ratio)
        elif time_up or space_full or force:
            # Offsets first: the offset records in the files about to go are then in the file a
            # restart loads (after a crash it replays only what the log still holds). The
            # DLedger store does this itself (before_retention), when a file will go.
            self.consumer_offsets.persist_if_changed()
            # Never past what dispatch has read: those records would never reach a queue.
            keep_from = int(self.reput.reput_from)
            deleted = self.commitlog.delete_expired(expired_ms, now * 1000.0, clean_now, 10, keep_from=keep_from)
            if deleted:
                log.info(
                    "retention deleted %d commit-log file(s); the log starts at %d", deleted, self.commitlog.min_offset
                )
        low = max(int(self.commitlog.min_offset), 0)
        # Queue by queue, each under the locks (no file goes while a flush writes it out or
        # dispatch adds to its queue): held across thousands of queues, they stalled dispatch,
        # and every held pull with it, for as long as the unlinks took.
        with self.reput._lock:
            queues = [cq for _, _, cq in self.consume_queues]
        for cq in queues:
            with self._flush_lock, self.reput._lock:
                cq.delete_expired(low)
        with self._flush_lock, self.reput._lock:
            self.index_service.delete_expired(low)
        return deleted

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """shutdown(): stop the services, dispatch what is left, flush everything, remove ``abort``."""
        if self._closed:
            return
        if self.schedule is not None:
            self.schedule.shutdown()
        if not self.readonly:
            self._services_stop.set()
            if self._service_thread is not None:
                self._service_thread.join()
            self.reput.stop()
            try:
                self.reput.dispatch_now()
            except Exception:
                log.exception("dispatch at close failed")
            self.commitlog.flush(0)
            self.flush_logics()
            self.consumer_offsets.persist()
        clean = self.readonly or self.reput.behind() == 0
        self._closed = True
        self.commitlog.close()
        self.consume_queues.close()
        self.index_service.close()
        if not self.readonly:
            if clean:
                (self.root / ABORT_FILE).unlink(missing_ok=True)
            self._release_lock()

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MessageStore({str(self.root)!r}, mode={self.mode}, readonly={self.readonly})"
