"""RocketMQ's RebalanceLockManager: which client of a consumer group holds a message queue, for
orderly consumers (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ). A lock lives 60 s
(``rocketmq.broker.rebalance.lockMaxLiveTime``) past its holder's last lock request; a client
renews its locks every 20 s (``RebalanceImpl.lockAll``), so a dead client's queues pass to
another within a minute, and never while the holder renews.

The table is only touched on the broker's event loop: no lock is needed."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

# rocketmq.broker.rebalance.lockMaxLiveTime's default.
REBALANCE_LOCK_MAX_LIVE_TIME_MS = 60_000

# A MessageQueue: (topic, brokerName, queueId).
MessageQueue = tuple[str, str, int]


@dataclass(slots=True)
class LockEntry:
    client_id: str
    last_update_ms: float


class RebalanceLockManager:
    def __init__(
        self,
        max_live_ms: float = REBALANCE_LOCK_MAX_LIVE_TIME_MS,
        clock: Callable[[], float] = lambda: time.monotonic() * 1000.0,
    ) -> None:
        self.max_live_ms = max_live_ms
        self.clock = clock
        self.table: dict[str, dict[MessageQueue, LockEntry]] = {}

    def _expired(self, e: LockEntry, now: float) -> bool:
        return now - e.last_update_ms > self.max_live_ms

    def try_lock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> list[MessageQueue]:
        """The queues ``client_id`` holds after the call: those it held (renewed), those nobody
        held and those whose holder's lock expired (taken over)."""
        now = self.clock()
        locks = self.table.setdefault(group, {})
        got = []
        for mq in mqs:
            e = locks.get(mq)
            if e is None:
                locks[mq] = LockEntry(client_id, now)
            elif e.client_id == client_id or self._expired(e, now):
                e.client_id, e.last_update_ms = client_id, now
            else:
                continue
            got.append(mq)
        return got

    def unlock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> None:
        """Drops the locks ``client_id`` holds among ``mqs`` (another client's stay)."""
        locks = self.table.get(group)
        if locks is None:
            return
        for mq in mqs:
            e = locks.get(mq)
            if e is not None and e.client_id == client_id:
                del locks[mq]


__all__ = ["REBALANCE_LOCK_MAX_LIVE_TIME_MS", "LockEntry", "MessageQueue", "RebalanceLockManager"]
