"""DLedgerCommitLog: RocketMQ records as DLedger entries (RocketMQ 4.9 DLedgerCommitLog and its MessageSerializer).

Each message is one entry of ``dledger-<selfId>/`` whose body is the whole 17-field record.
The queue offset is written into the record under the put lock; the physical offset field is
written by DLedger's AppendHook as the entry is appended (``entry pos + 48``, so replicas hold
identical bytes). A message's physical offset is that ``pos + 48``; commit-log positions
(what dispatch walks, ``max_offset``) are entry positions.

Readers see only what lies below the committed position.

The seam to whatever replicates the entries is the *appender*: an object with
``append_batch(bodies, term) -> (first_index, positions)`` and ``committed_pos``. This class
is told ``on_committed(pos)`` when the committed position moves and ``on_role_change(role,
term)`` when the member's role changes. ``EmbeddedAppender`` is the single-member appender:
a local ``MmapFileStore`` where an append is committed at once.

A store upgraded from the classic log (RocketMQ's smooth upgrade, seed-spec §7.4) keeps its
old ``commitlog/`` files below ``dividedCommitlogOffset`` (``divided``), the start of the first
DLedger data file: one offset space, old records read from the old files, new ones from the
entries. ``upgrade_classic_log`` does the first start's step; ``UpgradePlan`` says what it will do.
"""

from __future__ import annotations

import inspect
import logging
import os
import signal
import struct
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from dledger._ext import load as _load_ext
from dledger.codes import ResponseCode
from dledger.config import DLedgerConfig
from dledger.errors import DLedgerError
from dledger.packed import PackedBodies
from dledger.rocketmq.store.batch_preparer import UniformBatch
from dledger.rocketmq.store.commitlog import CommitLog, LogFiles, Segment
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.encode import PreparedBatch, assign_queue_offsets, encode_batch, encode_one
from dledger.rocketmq.store.status import AppendMessageResult, AppendMessageStatus, PutMessageStatus
from dledger.store.file import MmapFileStore

log = logging.getLogger(__name__)
K = _load_ext("message")
_encode_put = K.encode_put
_PUT_OK = AppendMessageStatus.PUT_OK
_time = time.time

BODY_OFFSET = 48
_SIZE_MAGIC = struct.Struct(">ii")  # a record's TOTALSIZE and MAGICCODE
LEADER = "LEADER"
FOLLOWER = "FOLLOWER"
CANDIDATE = "CANDIDATE"
# disableDeleteDledger: DLedger keeps its files this long while old commit-log files remain.
OLD_FILES_RESERVED_HOURS = 24 * 365 * 10


class Appender(Protocol):
    """What the DLedger commit log needs from the member that holds its entries."""

    def append_batch(self, bodies: Sequence[Any], term: int) -> tuple[int, np.ndarray]: ...

    @property
    def committed_pos(self) -> int: ...


def status_of_dledger_code(code: int) -> PutMessageStatus:
    """DLedgerCommitLog's mapping of DLedger response codes to put statuses."""
    if code == ResponseCode.SUCCESS:
        return PutMessageStatus.PUT_OK
    if code in (
        ResponseCode.INCONSISTENT_LEADER,
        ResponseCode.NOT_LEADER,
        ResponseCode.LEADER_NOT_READY,
        ResponseCode.DISK_FULL,
    ):
        return PutMessageStatus.SERVICE_NOT_AVAILABLE
    if code in (ResponseCode.WAIT_QUORUM_ACK_TIMEOUT, ResponseCode.LEADER_PENDING_FULL):
        # "Do not return flush_slave_timeout to the client, for the ons client will ignore it."
        return PutMessageStatus.OS_PAGECACHE_BUSY
    return PutMessageStatus.UNKNOWN_ERROR


class PutRefused(Exception):
    def __init__(self, status: PutMessageStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def dledger_config_for(config: MessageStoreConfig) -> DLedgerConfig:
    """DLedgerCommitLog's DLedgerConfig, built from the message store config."""
    return DLedgerConfig(
        group=config.dledger_group,
        self_id=config.dledger_self_id,
        peers=config.dledger_peers,
        store_base_dir=str(config.dledger_path.parent),
        mapped_file_size_for_entry_data=config.mapped_file_size_commit_log,
        delete_when=config.delete_when,
        file_reserved_hours=config.file_reserved_time + 1,
        enable_disk_force_clean=config.clean_file_forcibly_enable,
        # setDiskSpaceRatioToCheckExpired(getDiskMaxUsedSpaceRatio() / 100f)
        disk_space_ratio_to_check_expired=config.disk_max_used_space_ratio / 100.0,
        is_enable_batch_push=config.is_enable_batch_push,
        preferred_leader_ids=config.preferred_leader_id,
        max_body_size=config.max_message_size,
        sync=config.sync_flush,
    ).replace(**config.dledger_store_options)


def open_dledger_store(config: MessageStoreConfig, *, readonly: bool) -> MmapFileStore:
    dcfg = dledger_config_for(config)
    kwargs: dict[str, Any] = {}
    if not readonly:
        if "body_pos_patch" not in inspect.signature(MmapFileStore.__init__).parameters:
            raise RuntimeError(
                "this build of dledger has no AppendHook (MmapFileStore(body_pos_patch=...)); "
                "the DLedger commit log can only be opened read-only"
            )
        kwargs["body_pos_patch"] = K.PHY_POS_POSITION
    return MmapFileStore(dcfg.default_path, dcfg, readonly=readonly, **kwargs)


@dataclass(slots=True)
class UpgradePlan:
    """What the first start in DLedger mode does to a classic commit log (DLedgerCommitLog.recover
    on a root without DLedger files): the old records stay where they are, ``[old_min,
    old_end)``; the last old file gets a blank at ``old_end`` (unless it has one) and counts as
    full; the DLedger log starts at ``divided`` (dividedCommitlogOffset), that file's end."""

    old_min: int
    old_end: int
    divided: int
    files: int
    file_size: int
    write_blank: bool


def plan_upgrade(old: CommitLog) -> UpgradePlan | None:
    """The upgrade of a recovered classic log (None when it has no file)."""
    files = old.files.files
    if not files:
        return None
    last = files[-1]
    wrote = int(last.wrote_position)
    size = int(last.file_size)
    write_blank = False
    if wrote + 8 <= size:
        _len, magic = _SIZE_MAGIC.unpack(last.read(wrote, 8))
        write_blank = magic != K.BLANK_MAGIC_CODE
    return UpgradePlan(
        old_min=int(files[0].file_from_offset),
        old_end=int(last.file_from_offset) + wrote,
        divided=int(last.file_from_offset) + size,
        files=len(files),
        file_size=size,
        write_blank=write_blank,
    )


def _crash_point(name: str) -> None:
    """Crash tests' hook: ``DLEDGER_CRASH_AT=<name>`` kills the process here, as kill -9 would
    (nothing flushed, no handler run)."""
    if os.environ.get("DLEDGER_CRASH_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


def upgrade_classic_log(old: CommitLog, store: MmapFileStore) -> UpgradePlan | None:
    """The first start in DLedger mode over classic files (DLedgerCommitLog.recover): recover the
    old log (normally, as Java does whatever the last exit was), end its last file with a blank,
    flush it, and start the DLedger data files at that file's end. Each step can be redone: a
    crash anywhere leaves no DLedger data file, and the next start does it again (the blank is
    then found and not written twice)."""
    old.recover(True)
    plan = plan_upgrade(old)
    if plan is None:
        return None
    if plan.divided % int(store.data_file_size):
        raise ValueError(
            f"{store.path}: DLedger data files of {store.data_file_size} bytes cannot start at the end of "
            f"the classic log ({plan.divided}; its files are {plan.file_size} bytes)"
        )
    last = old.files.files[-1]
    if plan.write_blank:
        rel = plan.old_end - int(last.file_from_offset)
        last.write_at(rel, _SIZE_MAGIC.pack(plan.file_size - rel, K.BLANK_MAGIC_CODE))
        _crash_point("upgrade-blank-written")
    last.wrote_position = plan.file_size
    last.flush(0)
    old.files.flushed_where = plan.divided
    _crash_point("upgrade-blank-flushed")
    with store._lock, store._unmap_lock:
        # getLastMappedFile(dividedCommitlogOffset): the first entry's pos is the divide.
        store._log.data.rebuild_with_pos(plan.divided)
        store._log.data.flush(0)  # the new file's name, durable
    _crash_point("upgrade-dledger-created")
    return plan


class EmbeddedAppender:
    """A single-member group: the local store, where what is appended is committed."""

    def __init__(self, store: MmapFileStore) -> None:
        self.store = store
        # One process putting small framed batches: its writes gain from pages pre-written ahead
        # (below that mark they are copied through the mapping: MAPPED_APPENDS in _ext/segment.pyx).
        store.populate_after_batches = True
        self.on_committed: Callable[[int], None] | None = None

    def append_batch(self, bodies: Sequence[Any], term: int) -> tuple[int, np.ndarray]:
        first, positions = self.store.append_batch(bodies, term)
        self.store.update_committed_index(term, first + len(positions) - 1)
        if self.on_committed is not None:
            self.on_committed(self.store.committed_pos)
        return first, positions

    @property
    def committed_pos(self) -> int:
        return self.store.committed_pos

    @property
    def term(self) -> int:
        return max(self.store.ledger_end_term, 0)


class DLedgerCommitLog(LogFiles):
    dledger = True
    record_header_size = BODY_OFFSET

    def __init__(
        self,
        config: MessageStoreConfig,
        store: MmapFileStore,
        appender: Any = None,
        *,
        readonly: bool = False,
        old: CommitLog | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.readonly = readonly
        # The classic log below dividedCommitlogOffset (an upgraded store), None when it has no file.
        self.old: CommitLog | None = old if old is not None and old.files.files else None
        self.divided = -1
        if self.old is not None:
            if not store._log.data.files:
                raise ValueError(
                    f"{store.path}: the upgrade of the classic commit log beside it did not finish (no DLedger "
                    "data file yet): open the store for writing once to finish it"
                )
            self.divided = int(store._log.data.files[0].file_from_offset)
            old_end = int(self.old.files.files[-1].file_from_offset) + int(self.old.file_size)
            if old_end > self.divided:
                raise ValueError(
                    f"{config.commit_log_path}: the classic log runs to {old_end}, past where the DLedger log "
                    f"starts ({self.divided}); the two overlap"
                )
            # One lock keeps readers of both logs' mappings from their unmapping (retention, close):
            # a reader of the old files under the DLedger store's lock (a pull) cannot then wait on
            # a second lock held by a reader waiting for the first.
            self.old.read_lock = store._unmap_lock
            if not readonly:
                self._hold_dledger_retention()
        self.upgraded: UpgradePlan | None = None
        self.appender: Appender | None = appender
        # The single member's store itself, which its puts call directly (an append there is
        # committed at once; see ``_put_framed`` and ``put_one``).
        self._embedded: MmapFileStore | None = None
        if appender is None and not readonly:
            emb = EmbeddedAppender(store)
            emb.on_committed = self.on_committed
            self.appender = emb
            self._embedded = store
        # The data segment list of the store: reads walk its mapped files directly.
        self.files = store._log.data  # the store has no public handle on its files
        self.file_size = int(store.data_file_size)
        self.put_lock = K.PutLock()
        self.topic_queue_table: dict[str, int] = {}
        self.last_store_timestamp = 0
        self.role = LEADER if appender is None else FOLLOWER
        self.term = max(store.ledger_end_term, 0)
        self.writable = appender is None and not readonly
        if appender is None and not readonly:
            # One member: everything in the ledger is committed.
            if store.ledger_end_index >= 0:
                store.update_committed_index(self.term, store.ledger_end_index)
            self._committed_pos = self._end_pos()
        else:
            # A member of a group knows only what its checkpoint says was committed; its log's
            # tail may be cut by the next leader, so none of it is readable before it commits.
            self._committed_pos = (
                max(int(store.committed_pos), 0)
                if appender is not None
                else (store.committed_pos if store.committed_pos >= 0 else self._end_pos())
            )
            if self.old is not None:
                # What lies below the DLedger log (the old records) is committed.
                self._committed_pos = max(self._committed_pos, self.divided)
        self._role_lock = threading.Lock()
        self.on_role_ready: Callable[[], None] | None = None
        self.wakeup: Callable[[], None] | None = None
        self.closed = False
        self.recovered_from = 0

    def _end_pos(self) -> int:
        return int(self.files.max_wrote_position) if self.files.files else 0

    # -- the seam ------------------------------------------------------------------------

    def on_committed(self, pos: int) -> None:
        """The committed position moved to ``pos`` (end of the last committed entry)."""
        if pos > self._committed_pos:
            self._committed_pos = pos
            if self.wakeup is not None:
                self.wakeup()

    def on_role_change(self, role: str, term: int, ready: Callable[[], bool] | None = None) -> None:
        """DLedgerRoleChangeHandler: a follower or candidate takes no writes; a new leader takes
        them once its ledger end is committed and dispatch has caught up (``ready``), after the
        topic-queue table is rebuilt from the consume queues (``on_role_ready``)."""
        with self._role_lock:
            self.role, self.term = role, term
            self.writable = False
        if role != LEADER:
            return

        def become_leader() -> None:
            deadline = time.monotonic() + self.config.dledger_leader_ready_timeout
            told = False
            while self.role == LEADER and self.term == term and not self.closed:
                try:
                    why_not = self.why_not_leader()
                    if why_not is not None:
                        if not told:
                            log.error("leader of term %d takes no writes: %s", term, why_not)
                            told = True
                    elif ready is None or ready():
                        if self.on_role_ready is not None:
                            self.on_role_ready()
                        # Under the lock: a role change between the check and the write would
                        # otherwise leave a table of this term writable in the next.
                        with self._role_lock:
                            self.writable = self.role == LEADER and self.term == term
                        log.info(
                            "leader of term %d takes writes (log committed and dispatched to %d)",
                            term,
                            self.committed_pos,
                        )
                        return
                except Exception:
                    # A leader that never takes writes is worse than one more try.
                    log.exception("leader of term %d: getting ready failed; trying again", term)
                if time.monotonic() > deadline:
                    log.warning(
                        "leader of term %d: not caught up after %.0f s (committed position %d, ledger "
                        "end %d); still waiting",
                        term,
                        self.config.dledger_leader_ready_timeout,
                        self.committed_pos,
                        self.ledger_end_pos,
                    )
                    deadline = time.monotonic() + self.config.dledger_leader_ready_timeout
                # DLedgerRoleChangeHandler sleeps 100 ms; the check is cheap and each sleep
                # adds to a failover.
                time.sleep(0.01)

        threading.Thread(target=become_leader, name="rocketmq-dledger-role", daemon=True).start()

    def why_not_leader(self) -> str | None:
        """Why this member of a group must not take writes as its leader (None: it may). A group
        whose log continues an upgraded classic store (its entry 0 lies past 0) is led by the
        member holding the old files: the others lack the old consume queues, so they would
        number the queues that had no message since the upgrade from 0 again. And an empty
        member does not lead before the preferred leader has (it may be such a group's)."""
        # (The upgraded member, its old files maybe all gone by retention, keeps commitlog/.)
        if self._embedded is not None or self.appender is None or self.config.commit_log_path.is_dir():
            return None
        st = self.store
        if st.ledger_begin_index == 0 and st.ledger_end_index >= 0:
            first_pos = st.pos_and_size(0)[0]
            if first_pos > 0:
                return (
                    f"the group's log starts at {first_pos}, after a classic commit log this member does not "
                    "hold: the member upgraded from it leads (make it the preferred leader), or give this member "
                    "a copy of that store's commitlog/, consumequeue/, index/ and config/"
                )
        preferred = [p for p in (self.config.preferred_leader_id or "").split(";") if p]
        if st.ledger_end_index < 0 and preferred and self.config.dledger_self_id not in preferred:
            return (
                f"its log is empty and it is not a preferred leader ({';'.join(preferred)}), which may hold an "
                "upgraded classic store: waiting for leadership to pass to it"
            )
        return None

    # -- offsets -------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        """getMinOffset: the first old file's start while there is one, else the DLedger log's."""
        old = self.old
        if old is not None and old.files.files:
            return int(old.files.files[0].file_from_offset)
        return int(self.files.min_offset) if self.files.files else 0

    @property
    def old_files(self) -> int:
        """How many classic commit-log files an upgraded store still holds."""
        return len(self.old.files.files) if self.old is not None else 0

    def _hold_dledger_retention(self) -> None:
        """disableDeleteDledger: while old files remain, DLedger deletes nothing (they go first)."""
        self.store.config = self.store.config.replace(
            enable_disk_force_clean=False, file_reserved_hours=OLD_FILES_RESERVED_HOURS
        )

    def _restore_dledger_retention(self) -> None:
        """refreshConfig: the DLedger retention of the message store's settings."""
        dcfg = dledger_config_for(self.config)
        self.store.config = self.store.config.replace(
            enable_disk_force_clean=dcfg.enable_disk_force_clean,
            file_reserved_hours=dcfg.file_reserved_hours,
            delete_when=dcfg.delete_when,
        )

    @property
    def committed_pos(self) -> int:
        app = self.appender
        pos = app.committed_pos if app is not None else self.store.committed_pos
        return max(int(pos), self._committed_pos, 0)

    @property
    def ledger_end_pos(self) -> int:
        """The end of the last entry in the local ledger, committed or not."""
        return self._end_pos()

    @property
    def max_offset(self) -> int:
        """getMaxOffset: the committed position (the data start when nothing is committed)."""
        pos = self.committed_pos
        return pos if pos > 0 else (int(self.files.min_offset) if self.files.files else 0)

    def recover(self, normal: bool) -> int:
        """The DLedger store recovered itself when it was opened (the old log at the upgrade,
        where recovery started then)."""
        if self.upgraded is not None and self.old is not None:
            return int(self.old.recovered_from)
        return self.min_offset

    # -- puts ----------------------------------------------------------------------------

    def put_uniform(self, batch: UniformBatch) -> AppendMessageResult:
        """``put`` of a batch of one template (the store's put_batch)."""
        embedded = self._embedded
        if embedded is not None and self.writable and batch.n > 1:
            # The usual batch on a single member (writable implies not read-only).
            return self._put_framed(batch, embedded)
        return self.put(batch.prepared())

    def put(self, batch: PreparedBatch) -> AppendMessageResult:
        if self.readonly or self.appender is None:
            raise PutRefused(PutMessageStatus.SERVICE_NOT_AVAILABLE, "the store is read-only")
        if not self.writable:
            raise PutRefused(
                PutMessageStatus.SERVICE_NOT_AVAILABLE,
                f"this member is {self.role} (term {self.term}) and takes no writes now",
            )
        n = batch.n
        if n == 1:
            return self._put_one(batch)
        with self.put_lock:
            now = self._store_time()
            if batch.uniform:
                # One kernel call: the records and their queue offsets (PHYSICALOFFSET is the hook's).
                key = batch.queue_keys[0]
                advances = bool(batch.advances[0])
                q0 = self.topic_queue_table.get(key, 0) if advances else 0
                buf, starts = batch.encode_uniform(q0, 0, now)
                queue_offsets = np.arange(q0, q0 + n, dtype=np.int64) if advances else np.zeros(n, dtype=np.int64)
                updates = {key: q0 + n} if advances else {}
            else:
                queue_offsets, updates = assign_queue_offsets(self.topic_queue_table, batch)
                buf, starts = encode_batch(batch, queue_offsets, np.zeros(n, dtype=np.int64), now)
            try:
                _first, positions = self.appender.append_batch(PackedBodies(buf, starts), self.term)
                wrote_bytes = int(starts[-1])
            except DLedgerError as exc:
                raise PutRefused(status_of_dledger_code(exc.code), str(exc)) from exc
            self.topic_queue_table.update(updates)
            self.last_store_timestamp = now
        phys = np.asarray(positions, dtype=np.int64) + BODY_OFFSET
        return AppendMessageResult(
            AppendMessageStatus.PUT_OK,
            wrote_offset=int(phys[0]),
            wrote_bytes=wrote_bytes,
            store_timestamp=now,
            logics_offset=int(queue_offsets[0]),
            msg_num=n,
            store_host=batch.store_hosts[0],
            wrote_offsets=phys,
            queue_offsets=queue_offsets,
        )

    def _put_framed(self, batch: UniformBatch, store: MmapFileStore) -> AppendMessageResult:
        """``put`` of a uniform batch on the single member: one kernel call encodes the records
        framed as entries (room for each 48-byte header before its record), the store fills the
        headers in place and writes them, so the records are copied once, into the file.
        What ``EmbeddedAppender.append_framed`` and ``on_committed`` do is done here inline
        (a batch of small messages pays for each Python call on the put thread), and the
        result's offset arrays are left to be built when read."""
        n = batch.n
        tpl = batch.tpl
        key = tpl.queue_key
        advances = tpl.advances
        table = self.topic_queue_table
        with self.put_lock:
            # _store_time, inline (a call costs a batch of small messages more than the rule).
            now = int(_time() * 1000)
            if now < self.last_store_timestamp:
                now = self.last_store_timestamp
            q0 = table.get(key, 0) if advances else 0
            buf, starts = batch.encode(q0, 0, now, BODY_OFFSET)
            try:
                _first, positions, end = store.append_framed_committed(buf, starts, self.term)
            except DLedgerError as exc:
                raise PutRefused(status_of_dledger_code(exc.code), str(exc)) from exc
            if end > self._committed_pos:
                self._committed_pos = end
                if self.wakeup is not None:
                    self.wakeup()
            if advances:
                table[key] = q0 + n
            self.last_store_timestamp = now
        return AppendMessageResult(
            _PUT_OK,
            int(positions[0]) + BODY_OFFSET,
            len(buf) - n * BODY_OFFSET,
            now,
            q0,
            n,
            tpl.sraw,
            None,
            None,
            positions,
            BODY_OFFSET,
            advances,
        )

    def _put_one(self, batch: PreparedBatch) -> AppendMessageResult:
        """``put`` of one message without numpy (it costs more than it saves for one record)."""
        assert self.appender is not None
        key = batch.queue_keys[0]
        advances = bool(batch.advances[0])
        with self.put_lock:
            now = self._store_time()
            queue_offset = self.topic_queue_table.get(key, 0) if advances else 0
            rec = encode_one(batch, queue_offset, 0, now)
            try:
                _first, positions = self.appender.append_batch([rec], self.term)
            except DLedgerError as exc:
                raise PutRefused(status_of_dledger_code(exc.code), str(exc)) from exc
            if advances:
                self.topic_queue_table[key] = queue_offset + 1
            self.last_store_timestamp = now
        return AppendMessageResult(
            AppendMessageStatus.PUT_OK,
            wrote_offset=int(positions[0]) + BODY_OFFSET,
            wrote_bytes=len(rec),
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
        encodes the record with its queue offset and store time (PHYSICALOFFSET is the hook's),
        appended as one entry."""
        if not self.writable or self.appender is None:
            self._refuse()
        key = tpl.queue_key
        advances = tpl.advances
        table = self.topic_queue_table
        embedded = self._embedded
        # As CommitLog.put_one: the lock by acquire/release, the store time inline.
        lock = self.put_lock
        lock.acquire()
        try:
            now = int(_time() * 1000)
            if now < self.last_store_timestamp:
                now = self.last_store_timestamp
            queue_offset = table.get(key, 0) if advances else 0
            rec = _encode_put(tpl, body, uniq_head, counter, flag, born_ts, reconsume, prepared, queue_offset, 0, now)
            try:
                if embedded is not None:
                    # The single member: committed as appended.
                    pos = embedded.append_one_committed(rec, self.term)
                    self.on_committed(pos + BODY_OFFSET + len(rec))
                else:
                    assert self.appender is not None
                    pos = int(self.appender.append_batch([rec], self.term)[1][0])
            except DLedgerError as exc:
                raise PutRefused(status_of_dledger_code(exc.code), str(exc)) from exc
            if advances:
                table[key] = queue_offset + 1
            self.last_store_timestamp = now
        finally:
            lock.release()
        return AppendMessageResult(_PUT_OK, pos + BODY_OFFSET, len(rec), now, queue_offset, 1, tpl.store_host)

    def _append_refused(self, exc: BaseException) -> None:
        """``K.SinglePut``'s append (the embedded single member's, under the put lock; the
        committed position is moved in C, as ``_put_framed`` moves it) raised ``exc``: a
        DLedgerError is raised as the PutRefused of its code, anything else the kernel raises."""
        if isinstance(exc, DLedgerError):
            raise PutRefused(status_of_dledger_code(exc.code), str(exc)) from exc

    def _refuse(self) -> None:
        if self.readonly or self.appender is None:
            raise PutRefused(PutMessageStatus.SERVICE_NOT_AVAILABLE, "the store is read-only")
        why_not = self.why_not_leader() if self.role == LEADER else None
        raise PutRefused(
            PutMessageStatus.SERVICE_NOT_AVAILABLE,
            f"this member is {self.role} (term {self.term}) and takes no writes now"
            + (f": {why_not}" if why_not else ""),
        )

    # -- reads ---------------------------------------------------------------------------

    def reading(self) -> AbstractContextManager[Any]:
        # Keeps the store's retention and close from unmapping a file we read; its flushes,
        # which hold the store's main lock through an msync, do not hold this one. The lock
        # itself, not a generator around it: a lookup enters it twice (about 1 us each).
        return self.store._unmap_lock

    def _readable_end(self) -> int:
        """``readable_end`` (the committed position) without its chain of properties; a lookup
        asks twice."""
        app = self.appender
        pos = int(app.committed_pos if app is not None else self.store.committed_pos)
        return pos if pos > self._committed_pos else self._committed_pos

    def segment(self, offset: int, limit: int | None = None) -> Segment | None:
        """Entries from entry position ``offset`` to the end of its file's committed part."""
        if self.closed:
            return None
        if offset < self.divided and self.old is not None:
            return self.old.segment(offset, self.divided if limit is None else min(limit, self.divided))
        end_abs = self.readable_end if limit is None else min(limit, self.readable_end)
        f = self.files.find(offset)
        if f is None:
            return None
        end = min(int(f.wrote_position), end_abs - f.file_from_offset)
        rel = offset - f.file_from_offset
        if rel >= end:
            return None
        return Segment(f.view(), int(f.file_from_offset), rel, int(end), dledger=True)

    def read(self, offset: int, size: int) -> bytes | None:
        """The record of ``size`` bytes at physical offset ``offset`` (entry pos + 48), if committed."""
        if offset < self.divided and self.old is not None:
            return self.old.read(offset, size)
        with self.store._unmap_lock:
            if self.closed or offset + size > self._readable_end():
                return None
            f = self.files.find(offset)
            if f is None:
                return None
            rel = offset - f.file_from_offset
            if rel < BODY_OFFSET or rel + size > f.wrote_position:
                return None
            return bytes(f.read(rel, size))

    def record_size_at(self, offset: int) -> int:
        if offset < self.divided and self.old is not None:
            return self.old.record_size_at(offset)
        with self.store._unmap_lock:
            if self.closed or offset + 8 > self._readable_end():
                return -1
            f = self.files.find(offset)
            if f is None or offset - f.file_from_offset < BODY_OFFSET:
                return -1
            size, magic = _SIZE_MAGIC.unpack(f.read(offset - f.file_from_offset, 8))
            return int(size) if magic == K.MESSAGE_MAGIC_CODE else -1

    def find_file(self, offset: int) -> Any:
        if offset < self.divided and self.old is not None:
            return self.old.files.find(offset)
        return self.files.find(offset)

    def header_size_at(self, offset: int) -> int:
        """Bytes before the record at a log position: none in the old files, an entry header past them."""
        return 0 if offset < self.divided and self.old is not None else BODY_OFFSET

    # -- durability and lifecycle ----------------------------------------------------------

    def flush(self, least_pages: int = 0) -> int:
        if not self.readonly and not self.closed:
            self.store.flush()
        return self.flushed_where

    def start(self) -> None:
        pass

    def wait_flushed(self, offset: int) -> bool:
        self.flush()
        return True

    def delete_expired(
        self,
        expired_ms: float,
        now_ms: float,
        clean_immediately: bool,
        max_files: int = 10,
        used_ratio: float | None = None,
    ) -> int:
        """DLedger applies its own retention (fileReservedTime + 1 hours, deleteWhen), as the
        Java store hands it to DLedger; ``clean_immediately`` asks it as a full disk would. The
        DLedger store keeps what dispatch has still to read itself (``cache_keep_from``)."""
        if self.readonly:
            return 0
        # Not under reading(): the store takes its locks in its own order (main, then unmap).
        ratio = 1.0 if clean_immediately else used_ratio
        return int(self.store.delete_expired(now_ms / 1000.0, used_ratio=ratio))

    def delete_old_expired(self, expired_ms: float, now_ms: float, clean_immediately: bool, keep_from: int = -1) -> int:
        """deleteExpiredFile while old files remain: they go first, by the classic rule, and then
        the last one too (which that rule keeps); never one holding ``keep_from`` or later bytes
        (what dispatch has still to read). Once none remain, DLedger's retention applies again."""
        old = self.old
        if old is None or self.readonly:
            return 0
        count = old.delete_expired(expired_ms, now_ms, clean_immediately, 10, keep_from=keep_from)
        files = old.files.files
        if count == 0 and len(files) == 1:
            f = files[0]
            expired = clean_immediately or now_ms >= f.last_modified() * 1000.0 + expired_ms
            read = keep_from < 0 or f.file_from_offset + f.file_size <= keep_from
            if expired and read:
                log.info("deleting the last classic commit-log file %s", f.path)
                with old.read_lock, old.flush_lock:
                    f.destroy()
                    del files[0]
                count = 1
        if not files:
            self._restore_dledger_retention()
            log.info("no classic commit-log file is left: DLedger's retention applies from now on")
        return int(count)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.writable = False
        self.store.close()
        if self.old is not None:
            self.old.close()
