"""ScheduleMessageService (rocketmq-store's ``store/schedule/``): delayed messages, delivered when due.

A put with a delay level is stored in ``SCHEDULE_TOPIC_XXXX``, queue level - 1, with
``REAL_TOPIC``/``REAL_QID`` in its properties and the time it is due as its consume-queue tags
code (the preparer and dispatch do that, as CommitLog.putMessage and checkMessageAndReturnSize).
While the store takes puts (a master; a DLedger group's leader) this service looks at each
level's queue when its head message falls due (it sleeps until the soonest one, as RocketMQ's
timer tasks do; see ``next_due_in``) and puts the messages whose time has come back into their
real topic and queue, as ``DeliverDelayedMessageTimerTask.messageTimeup`` rebuilds them: same
body, flag, sys flag, born time and host, reconsume times and properties, DELAY removed and
``WAIT=false``; the UNIQ_KEY (the producer's msg id) is kept.

Where each level's delivery stands is ``offset_table`` (level -> next schedule-queue offset),
read from ``config/delayOffset.json`` at start (a Java broker's file too: what it says was
delivered is not delivered again) and written there in Java's format every
``flush_delay_offset_interval`` (10 s) when it moved, and at shutdown. An owner may pass
``commit`` as well: the DLedger member commits each level's offset through its log (consumer
offsets of DELAY_OFFSET_GROUP on the schedule topic), so every member knows it and a new leader
goes on where the old one stopped; offsets of that group count here like the table's. Delivery
is at least once, as in RocketMQ: a crash after a delivery and before the file (or the log)
recorded it delivers that message again.

One service per store, in a thread of its own (RocketMQ's timer). The embedded MessageStore
starts it at open (a writer) and stops it at close; the classic broker and the DLedger member
start it with their own ``put`` (one that waits for a slave, or goes through the log).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from dledger.rocketmq.store.config import SLAVE
from dledger.rocketmq.store.delay_offset import load_delay_offsets, persist_delay_offsets
from dledger.rocketmq.store.encode import IllegalMessage, PreparedBatch
from dledger.rocketmq.store.message import (
    PROPERTY_DELAY,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    RMQ_SYS_SCHEDULE_TOPIC,
    Message,
    MessageExt,
)
from dledger.rocketmq.store.message_accessor import renew_message
from dledger.rocketmq.store.status import GetMessageStatus, PutMessageStatus

log = logging.getLogger(__name__)

# The consumer group whose offsets on SCHEDULE_TOPIC_XXXX say what each level delivered (the
# DLedger member's and the classic master's records of progress beside delayOffset.json).
DELAY_OFFSET_GROUP = "RMQ_SYS_DELAY_OFFSET"
# The longest the thread sleeps while the store takes no puts (a slave, a follower): a store
# promoted meanwhile starts delivering at most this late, unless its owner calls ``wake``.
IDLE_WAIT = 1.0
# ScheduleMessageService.FIRST_DELAY_TIME: the first look at the queues, this long after start
# (a store opened on overdue delayed messages delivers them then, as a Java broker does).
FIRST_DELAY_TIME = 1.0
# ScheduleMessageService.DELAY_FOR_A_WHILE: the shortest sleep, so that a head left due (its put
# or its offset commit failed) is tried again at Java's pace, not in a busy loop.
DELAY_FOR_A_WHILE = 0.1
# After a round that failed (a put refused, an error), the wait before the next: DELAY_FOR_A_PERIOD.
ERROR_PAUSE = 10.0
# Messages a level delivers in one put, and their records' bytes at most (one over it goes alone).
DELIVER_BATCH = 32
DELIVER_BYTES = 1 << 20
# What get_messages answers for messages whose files were deleted: skipped.
_GONE = (
    GetMessageStatus.OFFSET_TOO_SMALL,
    GetMessageStatus.MESSAGE_WAS_REMOVING,
    GetMessageStatus.OFFSET_FOUND_NULL,
)
# messageTimeup refuses to deliver a half message of a transaction (TransactionalMessageUtil).
_TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"

T = TypeVar("T")


def time_up(m: MessageExt) -> Message | None:
    """messageTimeup: the message to put into its real topic (None when the stored one names no
    real topic and queue, or a transaction's half topic: it cannot be delivered)."""
    topic = m.properties.get(PROPERTY_REAL_TOPIC)
    try:
        queue_id = int(m.properties.get(PROPERTY_REAL_QID, ""))
    except ValueError:
        return None
    if not topic or topic == _TRANS_HALF_TOPIC:
        return None
    return renew_message(m, topic=topic, queue_id=queue_id, drop=(PROPERTY_DELAY,))


def call_on_loop(
    loop: asyncio.AbstractEventLoop,
    make: Callable[[], Coroutine[Any, Any, T]],
    stopping: threading.Event,
    timeout: float,
) -> T | None:
    """Run ``make()`` on ``loop`` from the service's thread and wait for it (an owner's put or
    commit lives on its loop). None when the loop is gone, the service stops, or ``timeout``."""
    if loop.is_closed() or not loop.is_running():
        return None
    fut = asyncio.run_coroutine_threadsafe(make(), loop)
    deadline = time.monotonic() + timeout
    # In slices: a loop stopped meanwhile never completes the future.
    while time.monotonic() < deadline:
        try:
            return fut.result(0.2)
        except TimeoutError:
            if stopping.is_set() and not loop.is_running():
                break
    fut.cancel()
    return None


class ScheduleMessageService:
    """The delayed-message delivery of one store (see the module docstring). ``start`` and
    ``shutdown`` bound its thread; ``deliver_due`` is one round, ``persist`` writes the file."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.delay_table: dict[int, int] = store.config.delay_level_table()
        # level -> the next schedule-queue offset to deliver (ScheduleMessageService.offsetTable).
        self.offset_table: dict[int, int] = {}
        self.put: Callable[[PreparedBatch], bool] = self._store_put
        self.commit: Callable[[int, int], bool] | None = None
        self.writable: Callable[[], bool] = self._store_takes_puts
        self._persisted: dict[int, int] = {}
        self._stop = threading.Event()
        # Set by wake() and shutdown(): the thread looks at the queues now.
        self._wake = threading.Event()
        # Rounds the thread has made (how often it woke).
        self.rounds = 0
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def config_dir(self) -> Any:
        return self.store.root / "config"

    # -- lifecycle ------------------------------------------------------------------------

    def start(
        self,
        put: Callable[[PreparedBatch], bool] | None = None,
        commit: Callable[[int, int], bool] | None = None,
        writable: Callable[[], bool] | None = None,
    ) -> None:
        """load(), then the delivery thread. ``put`` stores a batch of due messages (True: stored;
        default: the store's own put), ``commit(queue_id, offset)`` records a level's progress
        beyond the table (True: recorded), ``writable`` says whether to deliver now (default: the
        store is a writer that takes puts)."""
        if self._thread is not None:
            return
        if put is not None:
            self.put = put
        self.commit = commit
        if writable is not None:
            self.writable = writable
        self.load()
        self._stop.clear()
        self._wake.clear()
        self._thread = threading.Thread(target=self._run, name="rocketmq-schedule", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        """Stop the thread, then write the table (as ScheduleMessageService.shutdown persists)."""
        thread = self._thread
        if thread is None:
            return
        self._stop.set()
        self._wake.set()
        thread.join(60)
        if thread.is_alive():
            log.error("the delayed-message thread did not stop in 60 s")
        self._thread = None
        try:
            self.persist()
        except OSError:
            log.exception("writing %s at shutdown failed", self.config_dir / "delayOffset.json")

    @property
    def stopping(self) -> threading.Event:
        """Set while the service stops (an owner's put waiting on its loop gives up then)."""
        return self._stop

    @property
    def running(self) -> bool:
        return self._thread is not None

    def load(self) -> None:
        """ConfigManager.load, then correctDelayOffset: an offset outside its queue's
        [min, max] is moved inside (a queue cut or cleaned since the file was written)."""
        table = load_delay_offsets(self.config_dir)
        self._persisted = dict(table)
        # A queue still being dispatched (a group member catching up) is not cut down to.
        dispatched = self.store.dispatch_behind_bytes() == 0
        for level, offset in list(table.items()):
            cq = self.store.consume_queues.get(RMQ_SYS_SCHEDULE_TOPIC, level - 1)
            if cq is None:
                continue
            low = int(cq.min_offset)
            high = int(cq.max_offset) if dispatched else max(offset, low)
            fixed = min(max(offset, low), high)
            if fixed != offset:
                log.error("delayOffset.json: level %d at %d, outside [%d, %d]: %d", level, offset, low, high, fixed)
                table[level] = fixed
        with self._lock:
            self.offset_table = table

    def wake(self) -> None:
        """Look at the queues now (the store became a writer, or an owner knows of a new put)."""
        self._wake.set()

    def _run(self) -> None:
        interval = self.store.config.flush_delay_offset_interval / 1000.0
        last_persist = time.monotonic()
        wait = FIRST_DELAY_TIME
        while True:
            self._wake.wait(wait)
            self._wake.clear()
            if self._stop.is_set():
                return
            self.rounds += 1
            wait = IDLE_WAIT
            try:
                if self.writable():
                    self.deliver_due()
                    wait = max(self.next_due_in(), DELAY_FOR_A_WHILE)
                if time.monotonic() - last_persist >= interval:
                    last_persist = time.monotonic()
                    self.persist()
            except Exception:
                log.exception("delivering delayed messages failed; trying again in %.0f s", ERROR_PAUSE)
                wait = ERROR_PAUSE
            # The file is written every interval it moved, whatever the next delivery.
            wait = min(wait, max(0.0, last_persist + interval - time.monotonic()))

    def next_due_in(self) -> float:
        """Seconds until the next delivery (RocketMQ's timer tasks, one a level, each set to
        its head message's time). A level's queue with nothing left waits for a put, whose
        message falls due no sooner than the level's delay from now; a level with no queue yet
        no sooner than the shortest delay: nothing can be due before, so no new put needs to
        wake the thread."""
        now = int(time.time() * 1000)
        if not self.delay_table:
            return IDLE_WAIT
        soonest = now + min(self.delay_table.values())
        for queue_id in self.store.consume_queues.queue_ids(RMQ_SYS_SCHEDULE_TOPIC):
            delay = self.delay_table.get(queue_id + 1)
            cq = self.store.consume_queues.get(RMQ_SYS_SCHEDULE_TOPIC, queue_id)
            if delay is None or cq is None:
                continue
            tags = cq.get_units(self._offset(queue_id), 1)[2].tolist()
            at = now + delay
            if tags:
                # correctDeliverTimestamp: one further off than the delay is due now.
                at = int(tags[0]) if int(tags[0]) <= now + delay else now
            soonest = min(soonest, at)
        return max(0.0, (soonest - now) / 1000.0)

    # -- progress -------------------------------------------------------------------------

    def _group_offset(self, queue_id: int) -> int:
        return int(self.store.query_offset(DELAY_OFFSET_GROUP, RMQ_SYS_SCHEDULE_TOPIC, queue_id))

    def table(self) -> dict[int, int]:
        """Each level's progress: the table's, or the group's offset when it is ahead (applied
        from a DLedger log, or copied from a master)."""
        with self._lock:
            table = dict(self.offset_table)
        for queue_id in self.store.consume_queues.queue_ids(RMQ_SYS_SCHEDULE_TOPIC):
            done = self._group_offset(queue_id)
            if done > table.get(queue_id + 1, -1):
                table[queue_id + 1] = done
        return table

    def update_offsets(self, table: dict[int, int]) -> bool:
        """A master's table (a slave's SlaveSynchronize.syncDelayOffset): taken where it is
        ahead, and the file written at once, so a promoted slave or a Java broker restarted on
        this directory goes on from it. True when the file was written."""
        with self._lock:
            for level, offset in table.items():
                if offset > self.offset_table.get(level, -1):
                    self.offset_table[level] = offset
        return self.persist()

    def persist(self) -> bool:
        """Write delayOffset.json when the table moved since it was last written or read."""
        table = self.table()
        if not table or table == self._persisted:
            return False
        persist_delay_offsets(self.config_dir, table)
        self._persisted = table
        return True

    def _offset(self, queue_id: int) -> int:
        with self._lock:
            done = self.offset_table.get(queue_id + 1, -1)
        done = max(done, self._group_offset(queue_id))
        if done >= 0:
            return done
        return int(self.store.min_offset_in_queue(RMQ_SYS_SCHEDULE_TOPIC, queue_id))

    def _update_offset(self, queue_id: int, offset: int) -> bool:
        if self.commit is not None and not self.commit(queue_id, offset):
            return False
        with self._lock:
            level = queue_id + 1
            self.offset_table[level] = max(offset, self.offset_table.get(level, -1))
        return True

    # -- delivery -------------------------------------------------------------------------

    def deliver_due(self) -> int:
        """One round over every level: what is due delivered, each level's offset advanced past
        it. Returns how many messages were delivered."""
        total = 0
        for queue_id in self.store.consume_queues.queue_ids(RMQ_SYS_SCHEDULE_TOPIC):
            delay = self.delay_table.get(queue_id + 1)
            if delay is None:
                continue  # a level the configuration no longer has: RocketMQ looks only at its own
            n, go_on = self._deliver_level(queue_id, delay)
            total += n
            if not go_on:
                break
        return total

    @staticmethod
    def _due(tags: list[int], now: int, delay: int) -> int:
        """How many units from the first are due. correctDeliverTimestamp: a time further off
        than the level's delay (the clock went back since the put) counts as now."""
        due = 0
        for deliver_at in tags:
            if now < deliver_at <= now + delay:
                break
            due += 1
        return due

    def _deliver_level(self, queue_id: int, delay: int) -> tuple[int, bool]:
        """What is due in one level's queue, in store order. Returns (delivered, whether the
        round goes on: False when a put or an offset commit failed)."""
        store = self.store
        total = 0
        while self.writable() and not self._stop.is_set():
            offset = self._offset(queue_id)
            cq = store.consume_queues.get(RMQ_SYS_SCHEDULE_TOPIC, queue_id)
            if cq is None:
                break
            tags = cq.get_units(offset, DELIVER_BATCH)[2].tolist()
            if not tags:
                if offset < int(cq.min_offset):
                    # Messages deleted with their files: go on from what is left.
                    if not self._update_offset(queue_id, int(cq.min_offset)):
                        return total, False
                    continue
                break
            due = self._due(tags, int(time.time() * 1000), delay)
            if not due:
                break
            res = store.get_messages(RMQ_SYS_SCHEDULE_TOPIC, queue_id, offset, due, DELIVER_BYTES)
            if res.status in _GONE and res.next_begin_offset > offset:
                if not self._update_offset(queue_id, res.next_begin_offset):
                    return total, False
                continue
            if res.status != GetMessageStatus.FOUND:
                break
            if not self._deliver(res.messages):
                self._stop.wait(ERROR_PAUSE)
                return total, False
            total += len(res.messages)
            if not self._update_offset(queue_id, min(res.next_begin_offset, offset + due)):
                return total, False
            if due < len(tags) and res.next_begin_offset >= offset + due:
                break  # the next one is not due yet
        return total, True

    def _deliver(self, due: list[MessageExt]) -> bool:
        msgs: list[Message] = []
        for m in due:
            out = time_up(m)
            if out is None:
                log.warning("delayed message at schedule offset %d cannot be delivered: dropped", m.queue_offset)
            else:
                msgs.append(out)
        if not msgs:
            return True
        prepare = self.store.preparer.prepare
        try:
            batches = [prepare(msgs, check_properties=False)]
        except IllegalMessage:
            # One the store refuses now (its topic, its size): the others one by one.
            batches = []
            for one in msgs:
                try:
                    batches.append(prepare([one], check_properties=False))
                except IllegalMessage as exc:
                    log.warning("delayed message to %r cannot be delivered, dropped: %s", one.topic, exc)
        for batch in batches:
            if not self.put(batch):
                log.warning("delivering %d delayed message(s) was refused; trying again later", batch.n)
                return False
        return True

    # -- the embedded store's own put ---------------------------------------------------------

    def _store_put(self, batch: PreparedBatch) -> bool:
        # The store's put of a prepared batch (a sibling module of the store's: its private seam).
        result = self.store._put(batch)
        if result.status is not PutMessageStatus.PUT_OK:
            log.warning("delayed messages not stored: %s %s", result.status.name, result.reason)
            return False
        return True

    def _store_takes_puts(self) -> bool:
        s = self.store
        return (
            not s.closed
            and not s.readonly
            and s.config.broker_role != SLAVE
            and bool(getattr(s.commitlog, "writable", True))
        )
