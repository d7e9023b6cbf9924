"""RocketMQ 4.9.4's BrokerFastFailure (broker/latency): a request that waited too long in its
executor's queue is answered SYSTEM_BUSY instead of run, so that the client retries elsewhere
rather than time out.

Java's executors queue a request between its read and its run. Ours are the remoting server's
pools, and a request waits between its read and its run in two places (docs/remoting.md,
"BrokerFastFailure"): behind the requests of the same read while one of them holds the loop (a
slow put), and in a connection's backlog while the connection is paused (its 256 requests in
flight, or its answers unread). The first is checked as the request is about to run
(``NettyRemotingServer.expire_queued``); the second by ``clean_expired_request`` every 10 ms
(after 1 s), as Java's scheduled task.

The page cache is busy (``is_os_page_cache_busy``) while the commit log's put lock has been
held longer than ``osPageCacheBusyTimeOutMills``; then every send waiting is answered
``[PCBUSY_CLEAN_QUEUE]`` by the task, and a send about to run is answered so instead of
waiting for the lock on the loop. Our puts take the lock on the loop, so a put of the loop's
own can never be seen busy (docs/remoting.md says what that would need); a holder on another
thread can.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dledger._ext import message as K
from dledger.rocketmq.remoting.netty_remoting_server import NettyRemotingServer, RequestPool

log = logging.getLogger(__name__)

# BrokerFastFailure.start: scheduleAtFixedRate(..., 1000, 10, MILLISECONDS).
INITIAL_DELAY_S = 1.0
PERIOD_S = 0.010


@dataclass(frozen=True, slots=True)
class FastFailureConfig:
    """BrokerConfig's brokerFastFailureEnable and waitTimeMillsIn*Queue (4.9.4 defaults)."""

    broker_fast_failure_enable: bool = True
    wait_time_mills_in_send_queue: int = 200
    wait_time_mills_in_pull_queue: int = 5 * 1000
    wait_time_mills_in_heartbeat_queue: int = 31 * 1000
    wait_time_mills_in_transaction_queue: int = 3 * 1000
    # MessageStoreConfig.osPageCacheBusyTimeOutMills (a broker.conf key in Java too).
    os_page_cache_busy_time_out_mills: int = 1000


def never_busy() -> bool:
    return False


# DefaultMessageStore.isOSPageCacheBusy's bound: a begin time further back than this is none.
BUSY_DIFF_BOUND_MS = 10_000_000


def is_os_page_cache_busy(put_lock: K.PutLock, time_out_mills: int) -> bool:
    """DefaultMessageStore.isOSPageCacheBusy: the commit log's put lock held for more than
    ``time_out_mills``. Java reads a begin time of 0 (free) as far past; ours is on a clock from
    boot, so 0 is looked at first."""
    begin = put_lock.begin_time_in_lock
    if not begin:
        return False
    diff = K.put_lock_clock_ms() - begin
    return time_out_mills < diff < BUSY_DIFF_BOUND_MS


class BrokerFastFailure:
    """Cleans the send, pull, heartbeat and end-transaction pools' queues of ``servers`` (the
    broker's two, which share the pools)."""

    def __init__(
        self,
        servers: Sequence[NettyRemotingServer],
        config: FastFailureConfig,
        *,
        send: RequestPool,
        pull: RequestPool,
        heartbeat: RequestPool,
        end_transaction: RequestPool,
        is_os_page_cache_busy: Callable[[], bool] = never_busy,
    ) -> None:
        self.servers = list(servers)
        self.config = config
        self.send = send
        self._waits = {
            send: config.wait_time_mills_in_send_queue,
            pull: config.wait_time_mills_in_pull_queue,
            heartbeat: config.wait_time_mills_in_heartbeat_queue,
            end_transaction: config.wait_time_mills_in_transaction_queue,
        }
        # DefaultMessageStore.isOSPageCacheBusy: the commit log's put lock held longer than
        # osPageCacheBusyTimeOutMills.
        self.is_os_page_cache_busy = is_os_page_cache_busy
        self.os_page_cache_busy_time_out_mills = config.os_page_cache_busy_time_out_mills
        self._task: asyncio.Task[None] | None = None
        self.enable = config.broker_fast_failure_enable

    @property
    def enable(self) -> bool:
        return self._enable

    @enable.setter
    def enable(self, on: bool) -> None:
        """brokerFastFailureEnable: off, no request is cleaned, neither by the task nor as it
        is about to run."""
        self._enable = on
        for pool, wait_ms in self._waits.items():
            pool.max_wait_s = wait_ms / 1000.0 if on else None
        for s in self.servers:
            s.queue_timeouts_changed()
            s.page_cache_busy = self.is_os_page_cache_busy if on else None
            s.busy_pool = self.send if on else None

    def clean_expired_request(self) -> None:
        """cleanExpiredRequest: while the page cache is busy every waiting send is answered
        ``[PCBUSY_CLEAN_QUEUE]``; then each pool's requests that waited its time,
        ``[TIMEOUT_CLEAN_QUEUE]``."""
        if self.is_os_page_cache_busy():
            for s in self.servers:
                s.clean_all(self.send)
        for s in self.servers:
            s.clean_expired()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        await asyncio.sleep(INITIAL_DELAY_S)
        while True:
            if self._enable:
                try:
                    self.clean_expired_request()
                except Exception:  # as Java's task, which swallows what one round throws
                    log.exception("cleaning the expired requests failed")
            await asyncio.sleep(PERIOD_S)

    async def shutdown(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None


__all__ = ["BrokerFastFailure", "FastFailureConfig"]
