"""RocketMQ's PullMessageProcessor with its PullRequestHoldService, for a member of a DLedger
group: a pull reads the queue's messages as one buffer of records (no object per message) and,
when the queue has nothing at its offset, is held until a message arrives or its wait ends.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dledger.codes import ResponseCode
from dledger.net.transport import Response
from dledger.rocketmq.broker.service_metrics import MessageStats
from dledger.rocketmq.store.status import GetMessageStatus
from dledger.rocketmq.store.topic_validator import validate_topic
from dledger.rocketmq.wire import PullRequest, PullResponse

if TYPE_CHECKING:
    from dledger.rocketmq.store.message_store import MessageStore

# A pull holds at most this long, whatever it asks.
MAX_SUSPEND_MS = 30_000  # consumer.MAX_HOLD_S
MAX_PULL_COUNT = 1024
# A held pull woken by an arrival reads on the loop when at most this many messages are new.
INLINE_PULL_MAX = 16
_HOLD = (
    GetMessageStatus.OFFSET_OVERFLOW_ONE,
    GetMessageStatus.NO_MESSAGE_IN_QUEUE,
    GetMessageStatus.NO_MATCHED_LOGIC_QUEUE,
)


class PullMessageProcessor:
    """Pulls of one member's store; every call but ``pull_once`` runs on the member's loop."""

    def __init__(
        self,
        store: MessageStore,
        unmap_lock: threading.RLock,
        queue_nums: int,
        stats: MessageStats,
        role_body: Callable[[], dict[str, Any]],
    ) -> None:
        self.store = store
        # The lock the commit log's readers take (reading()); flushes do not hold it.
        self._unmap_lock = unmap_lock
        self.queue_nums = queue_nums
        self.metric_stats = stats
        self._role_body = role_body
        # Held pulls by (topic, queue id): the offset each waits to see and its future.
        self.held: dict[tuple[str, int], list[tuple[int, asyncio.Future[None]]]] = {}
        self.holding = 0  # pulls waiting for a message now (not those still reading)

    def pull_once(self, req: PullRequest) -> PullResponse:
        store = self.store
        count = min(req.max_count, MAX_PULL_COUNT)
        # RocketMQ caps a pull's bytes too (maxTransferBytesOnMessageInMemory): a run of large
        # messages must not make an answer too big to send, which would stall the queue.
        cap = store.config.max_transfer_bytes_on_message_in_memory
        buf, cols = store.pull_columns(req.topic, req.queue_id, req.offset, count, cap)
        n = len(cols["phys_offset"]) if len(buf) else 0
        if n:
            cq_min = store.min_offset_in_queue(req.topic, req.queue_id)
            cq_max = store.max_offset_in_queue(req.topic, req.queue_id)
            return PullResponse(
                GetMessageStatus.FOUND,
                req.offset + n,
                cq_min,
                cq_max,
                bytes(buf),
                [int(p) for p in cols["phys_offset"].tolist()],
            )
        # Nothing readable there: the status and next offset as getMessage says.
        res = store.get_messages(req.topic, req.queue_id, req.offset, 1, 1)
        status, next_offset = res.status, res.next_begin_offset
        if status == GetMessageStatus.FOUND:
            # Readable between the two calls: let the client ask again at once, from here.
            status, next_offset = GetMessageStatus.OFFSET_FOUND_NULL, req.offset
        return PullResponse(status, next_offset, res.min_offset, res.max_offset)

    async def pull(self, req: PullRequest) -> Response:
        # A queue the topics do not have and the store never had: refused, as the Java broker
        # refuses a queueId past readQueueNums, rather than held until the wait runs out. A
        # queue with records stays readable (the schedule topic's, or one from a larger
        # --default-topic-queue-nums before a restart).
        why = self.queue_problem(req.topic, req.queue_id)
        if why is not None:
            return Response(ResponseCode.UNEXPECTED_ARGUMENT, {}, why)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(req.suspend_ms, MAX_SUSPEND_MS) / 1000.0
        woken = False
        while True:
            fut: asyncio.Future[None] = loop.create_future()
            key = (req.topic, req.queue_id)
            held = self.held.setdefault(key, [])
            if len(held) > 1024:
                held[:] = [h for h in held if not h[1].done()]
            # Registered before the look, so that an arrival between the two is not missed.
            held.append((req.offset, fut))
            try:
                got = self.pull_inline(req) if woken else None
                resp = got if got is not None else await asyncio.to_thread(self.pull_once, req)
                woken = True
                left = deadline - loop.time()
                if resp.status not in _HOLD or left <= 0:
                    if resp.phys_offsets:
                        self.metric_stats.pulled_messages[req.topic] += len(resp.phys_offsets)
                    return Response(ResponseCode.SUCCESS, {**resp.to_wire(), **self._role_body()})
                self.holding += 1
                try:
                    await asyncio.wait_for(fut, left)
                except asyncio.TimeoutError:
                    pass
                finally:
                    self.holding -= 1
            finally:
                if not fut.done():
                    fut.cancel()

    def queue_problem(self, topic: str, queue_id: int) -> str | None:
        """Why a read or a commit names no queue: a topic name the broker never takes
        (validateTopic), or a queue id the topics do not have and the store never had."""
        why = validate_topic(topic)
        if why is not None:
            return why
        if not 0 <= queue_id < self.queue_nums and self.store.consume_queues.get(topic, queue_id) is None:
            return f"queue id {queue_id} of topic {topic!r} is unknown (topics have {self.queue_nums} queues)"
        return None

    def pull_inline(self, req: PullRequest) -> PullResponse | None:
        """A held pull's look after an arrival, on the loop: the few records just dispatched are
        in the page cache, and two thread hand-offs are most of the wait. None (look in a
        thread) when more arrived or the log is busy unmapping files (retention, a truncate)."""
        if self.store.max_offset_in_queue(req.topic, req.queue_id) - req.offset > INLINE_PULL_MAX:
            return None
        lock = self._unmap_lock
        if not lock.acquire(blocking=False):
            return None
        try:
            return self.pull_once(req)
        finally:
            lock.release()

    def notify_message_arriving(self) -> None:
        """PullRequestHoldService.notifyMessageArriving: wake the pulls whose queue now has a
        message at their offset."""
        store = self.store
        for key in list(self.held):
            held = self.held[key]
            end = store.max_offset_in_queue(*key)
            keep = []
            for offset, fut in held:
                if fut.done():
                    continue
                if offset < end:
                    fut.set_result(None)
                else:
                    keep.append((offset, fut))
            if keep:
                self.held[key] = keep
            else:
                del self.held[key]
