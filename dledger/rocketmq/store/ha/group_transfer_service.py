"""GroupTransferService: a SYNC_MASTER's puts wait here until a slave has acknowledged past them.

RocketMQ keeps two request lists swapped like GroupCommitService's and walks the read list one
request at a time. Here every request the slaves' acknowledgement has passed is answered at once
(group commit: one acknowledgement answers every put below it), and each request past its
deadline gets FLUSH_SLAVE_TIMEOUT. One thread for all requests, never one per put.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from dledger.rocketmq.store.status import PutMessageStatus

log = logging.getLogger(__name__)

# GroupTransferService.run: waitForRunning(10) between rounds when nothing wakes it.
WAIT_S = 0.01


@dataclass(slots=True)
class GroupCommitRequest:
    """CommitLog.GroupCommitRequest: a put whose bytes end at ``next_offset`` waits until a slave
    has them, or until ``deadline`` (time.monotonic()). ``on_done`` is called once, from the
    service's thread, with PUT_OK or FLUSH_SLAVE_TIMEOUT (it must not block)."""

    next_offset: int
    deadline: float
    on_done: Callable[[PutMessageStatus], None] | None = None
    status: PutMessageStatus | None = None
    _event: threading.Event = field(default_factory=threading.Event)

    def wakeup_customer(self, status: PutMessageStatus) -> None:
        self.status = status
        self._event.set()
        if self.on_done is not None:
            try:
                self.on_done(status)
            except Exception:
                log.exception("a put's transfer callback failed")

    def wait_for_flush(self, timeout_s: float) -> PutMessageStatus:
        """Block until answered (for callers on a thread of their own)."""
        self._event.wait(timeout_s)
        # PUT_OK is 0 (an IntEnum): ``status or ...`` took it for no answer.
        return self.status if self.status is not None else PutMessageStatus.FLUSH_SLAVE_TIMEOUT


class GroupTransferService:
    """Answers GroupCommitRequests as ``acked()`` (HAService.push2SlaveMaxOffset) passes them."""

    def __init__(self, acked: Callable[[], int]) -> None:
        self._acked = acked
        self._cond = threading.Condition()
        self._requests_write: list[GroupCommitRequest] = []
        self._waiting: list[GroupCommitRequest] = []
        self._stop = False
        self._notified = False
        # Requests put and not answered yet: an acknowledgement wakes the thread only then (an
        # ASYNC_MASTER's slaves report after each read, hundreds a second: each wake-up would
        # take the GIL from the putting thread for nothing).
        self._unanswered = 0
        self._thread = threading.Thread(target=self._run, name="rocketmq-ha-group-transfer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def put_request(self, req: GroupCommitRequest) -> None:
        with self._cond:
            if self._stop:
                stopped = True
            else:
                stopped = False
                self._unanswered += 1
                self._requests_write.append(req)
                self._notified = True
                self._cond.notify()
        if stopped:
            req.wakeup_customer(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)

    def notify_transfer_some(self) -> None:
        """A slave acknowledged further: look at the waiting requests now (if any)."""
        if not self._unanswered:
            return
        with self._cond:
            self._notified = True
            self._cond.notify()

    def pending(self) -> int:
        with self._cond:
            return len(self._requests_write) + len(self._waiting)

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._notified and not self._stop:
                    self._cond.wait(WAIT_S)
                self._notified = False
                if self._stop:
                    break
                # swapRequests
                fresh, self._requests_write = self._requests_write, []
            self._waiting.extend(fresh)
            if self._waiting:
                self._do_wait_transfer()
        with self._cond:
            left, self._requests_write = self._waiting + self._requests_write, []
            self._waiting = []
        for req in left:
            req.wakeup_customer(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)

    def _do_wait_transfer(self) -> None:
        acked = self._acked()
        now = time.monotonic()
        keep: list[GroupCommitRequest] = []
        for req in self._waiting:
            if acked >= req.next_offset:
                req.wakeup_customer(PutMessageStatus.PUT_OK)
            elif now >= req.deadline:
                log.warning("transfer message to slave timeout, %d > acked %d", req.next_offset, acked)
                req.wakeup_customer(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
            else:
                keep.append(req)
        if len(keep) != len(self._waiting):
            with self._cond:
                self._unanswered -= len(self._waiting) - len(keep)
        self._waiting = keep

    def shutdown(self) -> None:
        """Stop; requests still waiting are answered FLUSH_SLAVE_TIMEOUT."""
        with self._cond:
            self._stop = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join()
