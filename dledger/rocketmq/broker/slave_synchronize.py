"""SlaveSynchronize: a classic slave copies its master's metadata (seed-spec §6.1).

Every SYNC_PERIOD_S after SYNC_DELAY_S the slave asks its master (at its client address) for
``config/consumerOffset.json``'s content (GET_ALL_CONSUMER_OFFSET, Java's fastjson text) and
writes it to its own when it differs, so a slave promoted, or a Java broker restarted on its
directory, resumes consumers where they committed. Topic configs, subscription groups and
delay offsets are not synced: this broker keeps none of them (docs/ha.md).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from dledger.codes import ResponseCode
from dledger.errors import DLedgerError
from dledger.net.transport import RpcClient
from dledger.rocketmq.store.consumer_offset import decode_offset_table
from dledger.rocketmq.wire import MessageRequestCode

if TYPE_CHECKING:
    from dledger.rocketmq.store.consumer_offset import ConsumerOffsetManager

log = logging.getLogger(__name__)

# BrokerController.handleSlaveSynchronize: scheduleAtFixedRate(syncAll, 3000, 10000 ms).
SYNC_DELAY_S = 3.0
SYNC_PERIOD_S = 10.0
# SlaveSynchronize's invokeSync timeout.
SYNC_TIMEOUT_S = 3.0


class SlaveSynchronize:
    """``master_addr`` is the master's client address (None: nothing to sync)."""

    def __init__(self, offsets: ConsumerOffsetManager, self_addr: str) -> None:
        self.offsets = offsets
        self.self_addr = self_addr
        self.master_addr: str | None = None
        self.synced = 0  # rounds that wrote something

    async def run(self) -> None:
        await asyncio.sleep(SYNC_DELAY_S)
        async with RpcClient(timeout=SYNC_TIMEOUT_S) as rpc:
            while True:
                try:
                    await self.sync_all(rpc)
                except DLedgerError as exc:
                    log.info("metadata sync with master %s failed: %s", self.master_addr, exc.message)
                except Exception:
                    log.exception("metadata sync with master %s failed", self.master_addr)
                await asyncio.sleep(SYNC_PERIOD_S)

    async def sync_all(self, rpc: RpcClient) -> None:
        await self.sync_consumer_offset(rpc)

    async def sync_consumer_offset(self, rpc: RpcClient) -> None:
        addr = self.master_addr
        if addr is None or addr == self.self_addr:
            return
        resp = await rpc.call(addr, MessageRequestCode.GET_ALL_CONSUMER_OFFSET, {}, timeout=SYNC_TIMEOUT_S)
        if resp.code != ResponseCode.SUCCESS:
            raise DLedgerError(ResponseCode.UNKNOWN, f"{addr} answered {resp.code}: {resp.message}")
        text = resp.body.get("json")
        if not isinstance(text, str):
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"{addr} sent no offset table")
        if await asyncio.to_thread(self.offsets.replace_table, decode_offset_table(text)):
            self.synced += 1
            log.info("consumer offsets synced from master %s", addr)
