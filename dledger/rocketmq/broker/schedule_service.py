"""ScheduleMessageService on a message-store group: the leader delivers delayed messages.

A put with a delay level is stored in ``SCHEDULE_TOPIC_XXXX``, queue level - 1, with
``REAL_TOPIC``/``REAL_QID`` (the store's preparer does that, as CommitLog.putMessage). Here the
leader, once it takes puts (as the Java broker starts the service in changeToMaster), looks at
each level's queue every DELAY_FOR_A_WHILE and puts the messages whose time has come into their
real topic and queue, as ``DeliverDelayedMessageTimerTask.messageTimeup`` rebuilds them: same
body, flag, sys flag, born time and host, reconsume times and properties, DELAY removed and
``WAIT=false``; the UNIQ_KEY (the producer's msg id) is kept.

Where each level's delivery stands (RocketMQ's ``delayOffset.json``) is a consumer offset of
DELAY_OFFSET_GROUP on the schedule topic, committed through the log after each delivery like
any consumer offset. So every member knows it, and a new leader goes on where the old one
stopped. A leader lost between a delivery and its offset record leaves that delivery to be
made again: delivery is at least once, as in RocketMQ.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from dledger.codes import ResponseCode
from dledger.net.transport import Response
from dledger.rocketmq.store.encode import IllegalMessage, PreparedBatch
from dledger.rocketmq.store.message import (
    PROPERTY_DELAY,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    RMQ_SYS_SCHEDULE_TOPIC,
    Message,
    MessageConst,
    MessageExt,
)
from dledger.rocketmq.store.status import GetMessageStatus
from dledger.rocketmq.wire import ConsumerOffsetRequest

log = logging.getLogger(__name__)

# The consumer group whose offsets on SCHEDULE_TOPIC_XXXX say what each level delivered.
DELAY_OFFSET_GROUP = "RMQ_SYS_DELAY_OFFSET"
# ScheduleMessageService.DELAY_FOR_A_WHILE: how often a level's queue is looked at.
DELAY_FOR_A_WHILE = 0.1
# Messages a level delivers in one put, and their records' bytes at most (one message over it
# goes alone).
DELIVER_BATCH = 32
DELIVER_BYTES = 1 << 20
# What get_messages answers for messages whose files were deleted: skipped.
_GONE = (
    GetMessageStatus.OFFSET_TOO_SMALL,
    GetMessageStatus.MESSAGE_WAS_REMOVING,
    GetMessageStatus.OFFSET_FOUND_NULL,
)
# After a round that failed unexpectedly, the wait before the next.
ERROR_PAUSE = 1.0


def time_up(m: MessageExt) -> Message | None:
    """messageTimeup: the message to put into its real topic (None when the stored one names
    no real topic and queue, which cannot be delivered)."""
    props = dict(m.properties)
    topic = props.get(PROPERTY_REAL_TOPIC)
    try:
        queue_id = int(props.get(PROPERTY_REAL_QID, ""))
    except ValueError:
        return None
    if not topic:
        return None
    props.pop(PROPERTY_DELAY, None)
    props[MessageConst.PROPERTY_WAIT_STORE_MSG_OK] = "false"
    return Message(
        topic,
        m.body,
        queue_id=queue_id,
        flag=m.flag,
        properties=props,
        sys_flag=m.sys_flag,
        born_timestamp=m.born_timestamp,
        born_host=m.born_host,
        reconsume_times=m.reconsume_times,
    )


class ScheduleMessageService:
    """The delivery rounds of one member: ``run()`` on its loop; they act only while
    ``writable()`` (the member leads and takes puts). ``put`` and ``commit`` are the member's
    own put and offset commit (through the log)."""

    def __init__(
        self,
        store: Any,
        put: Callable[[PreparedBatch], Awaitable[Response]],
        commit: Callable[[ConsumerOffsetRequest], Awaitable[Response]],
        writable: Callable[[], bool],
    ) -> None:
        self.store = store
        self.put = put
        self.commit = commit
        self.writable = writable
        self.delay_table = store.config.delay_level_table()
        self._committed: dict[int, int] = {}

    async def run(self) -> None:
        while True:
            await asyncio.sleep(DELAY_FOR_A_WHILE)
            if not self.writable():
                continue
            try:
                await self.deliver_due()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("delivering delayed messages failed; trying again")
                await asyncio.sleep(ERROR_PAUSE)

    def _offset(self, queue_id: int) -> int:
        """Where the level's delivery stands: its offset as applied here, or as this member
        committed it last (committed in the log, maybe not applied yet)."""
        done = int(self.store.query_offset(DELAY_OFFSET_GROUP, RMQ_SYS_SCHEDULE_TOPIC, queue_id))
        done = max(done, self._committed.get(queue_id, -1))
        return done if done >= 0 else int(self.store.min_offset_in_queue(RMQ_SYS_SCHEDULE_TOPIC, queue_id))

    async def deliver_due(self) -> int:
        """One round over every level: what is due delivered, each level's offset committed.
        Returns how many messages were delivered."""
        store = self.store
        total = 0
        for queue_id in store.consume_queues.queue_ids(RMQ_SYS_SCHEDULE_TOPIC):
            delay = self.delay_table.get(queue_id + 1, 1000)
            while self.writable():
                offset = self._offset(queue_id)
                res = await asyncio.to_thread(
                    store.get_messages, RMQ_SYS_SCHEDULE_TOPIC, queue_id, offset, DELIVER_BATCH
                )
                if res.status in _GONE and res.next_begin_offset > offset:
                    # Messages deleted with their files: go on from what is left.
                    if not await self._commit(queue_id, res.next_begin_offset):
                        return total
                    continue
                if res.status != GetMessageStatus.FOUND:
                    break
                now = int(time.time() * 1000)
                due: list[MessageExt] = []
                size = 0
                waits = False
                for m in res.messages:
                    if m.store_timestamp + delay > now:
                        waits = True  # in store order: the later ones are not due either
                        break
                    if due and size + m.size > DELIVER_BYTES:
                        break
                    due.append(m)
                    size += m.size
                if not due:
                    break
                if not await self._deliver(due):
                    return total
                total += len(due)
                if not await self._commit(queue_id, due[-1].queue_offset + 1):
                    return total
                if waits:
                    break
        return total

    async def _deliver(self, due: list[MessageExt]) -> bool:
        msgs: list[Message] = []
        for m in due:
            out = time_up(m)
            if out is None:
                log.warning("delayed message at schedule offset %d names no real topic: dropped", m.queue_offset)
            else:
                msgs.append(out)
        if not msgs:
            return True
        try:
            batches = [self.store.preparer.prepare(msgs, check_properties=False)]
        except IllegalMessage:
            # One the store refuses now (its topic, its size): the others one by one.
            batches = []
            for one in msgs:
                try:
                    batches.append(self.store.preparer.prepare([one], check_properties=False))
                except IllegalMessage as exc:
                    log.warning("delayed message to %r cannot be delivered, dropped: %s", one.topic, exc)
        for batch in batches:
            resp = await self.put(batch)
            if resp.code != ResponseCode.SUCCESS:
                return False
        return True

    async def _commit(self, queue_id: int, offset: int) -> bool:
        resp = await self.commit(ConsumerOffsetRequest(DELAY_OFFSET_GROUP, RMQ_SYS_SCHEDULE_TOPIC, queue_id, offset))
        if resp.code != ResponseCode.SUCCESS:
            return False
        self._committed[queue_id] = max(offset, self._committed.get(queue_id, -1))
        return True
