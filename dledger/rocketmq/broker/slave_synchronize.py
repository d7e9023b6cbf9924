"""SlaveSynchronize: a slave copies its master's metadata (seed-spec §6.1), every 10 s after 3 s
(BrokerController.handleSlaveSynchronize), as Java's does, over remoting on the master's VIP
channel (its ``listenPort - 2``, MixAll.brokerVIPChannel):

- GET_ALL_TOPIC_CONFIG (TopicConfigSerializeWrapper) and GET_ALL_SUBSCRIPTIONGROUP_CONFIG
  (SubscriptionGroupManager's JSON): taken and persisted only when the master's data version
  differs from the slave's;
- GET_ALL_CONSUMER_OFFSET (ConsumerOffsetSerializeWrapper) and GET_ALL_DELAY_OFFSET
  (ScheduleMessageService's ``{"offsetTable":{level:offset}}``): written every round they differ.

The bodies are Java's, so our slave syncs from a Java master and a Java slave from ours. The
master's address is the one the name server answers a slave's registration with (masterAddr).

``TransportOffsetSynchronize`` is the older path for a classic broker without remoting (no
``--remoting-port``): consumer offsets only, over the project's own transport.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from dledger.codes import ResponseCode
from dledger.errors import DLedgerError
from dledger.net.transport import RpcClient
from dledger.rocketmq.broker.subscription_group_manager import SubscriptionGroupManager, decode_wrapper
from dledger.rocketmq.broker.topic_config_manager import TopicConfigManager
from dledger.rocketmq.remoting.netty_remoting_client import NettyRemotingClient
from dledger.rocketmq.remoting.protocol.register_broker_body import DataVersion, TopicConfig
from dledger.rocketmq.remoting.remoting_command import RemotingCommand
from dledger.rocketmq.remoting.request_code import RequestCode
from dledger.rocketmq.remoting.response_code import ResponseCode as RCode
from dledger.rocketmq.store.consumer_offset import decode_offset_table
from dledger.rocketmq.store.delay_offset import decode_delay_offsets
from dledger.rocketmq.wire import MessageRequestCode

if TYPE_CHECKING:
    from dledger.rocketmq.store.consumer_offset import ConsumerOffsetManager

log = logging.getLogger(__name__)

# BrokerController.handleSlaveSynchronize: scheduleAtFixedRate(syncAll, 3000, 10000 ms).
SYNC_DELAY_S = 3.0
SYNC_PERIOD_S = 10.0
# SlaveSynchronize's invokeSync timeout.
SYNC_TIMEOUT_S = 3.0


def vip_channel(addr: str) -> str:
    """MixAll.brokerVIPChannel(true, addr): the same host, port - 2."""
    host, _, port = addr.rpartition(":")
    return f"{host}:{int(port) - 2}"


class SlaveSynchronize:
    """``master_addr`` is the master's remoting address (None: nothing to sync). What is not
    given is not synced (a DLedger member's offsets come through its log)."""

    def __init__(
        self,
        client: NettyRemotingClient,
        topics: TopicConfigManager,
        subscriptions: SubscriptionGroupManager,
        offsets: ConsumerOffsetManager | None = None,
        delay_offsets: Callable[[dict[int, int]], None] | None = None,
        *,
        period_s: float = SYNC_PERIOD_S,
        delay_s: float = SYNC_DELAY_S,
    ) -> None:
        self.client = client
        self.topics = topics
        self.subscriptions = subscriptions
        self.offsets = offsets
        self.delay_offsets = delay_offsets
        self.period_s = period_s
        self.delay_s = delay_s
        self.master_addr: str | None = None
        self.self_addr: str | None = None

    async def run(self) -> None:
        await asyncio.sleep(self.delay_s)
        while True:
            await self.sync_all()
            await asyncio.sleep(self.period_s)

    async def sync_all(self) -> None:
        for step in (self.sync_topic_config, self.sync_consumer_offset, self.sync_delay_offset, self.sync_sub_groups):
            addr = self.master_addr
            if addr is None or addr == self.self_addr:
                return
            try:
                await step(vip_channel(addr))
            except (ConnectionError, TimeoutError, DLedgerError, ValueError, TypeError, AttributeError) as exc:
                log.info("%s from master %s failed: %s", step.__name__, addr, exc)
            except Exception:
                log.exception("%s from master %s failed", step.__name__, addr)

    async def _get(self, addr: str, code: int) -> bytes:
        resp = await self.client.invoke(addr, RemotingCommand.request(code), SYNC_TIMEOUT_S)
        if resp.code != RCode.SUCCESS:
            raise DLedgerError(ResponseCode.UNKNOWN, f"{addr} answered code {code} with {resp.code}: {resp.remark}")
        return bytes(resp.body or b"")

    async def sync_topic_config(self, addr: str) -> None:
        data = json.loads(await self._get(addr, RequestCode.GET_ALL_TOPIC_CONFIG))
        table = {str(k): TopicConfig.from_json(v) for k, v in (data.get("topicConfigTable") or {}).items()}
        version = DataVersion.from_json(data.get("dataVersion"))
        if await asyncio.to_thread(self.topics.replace_from_master, table, version):
            log.info("topic config synced from master %s: %d topics, %s", addr, len(table), version)

    async def sync_consumer_offset(self, addr: str) -> None:
        if self.offsets is None:
            return
        text = (await self._get(addr, RequestCode.GET_ALL_CONSUMER_OFFSET)).decode("utf-8")
        if await asyncio.to_thread(self.offsets.replace_table, decode_offset_table(text)):
            log.info("consumer offsets synced from master %s", addr)

    async def sync_delay_offset(self, addr: str) -> None:
        if self.delay_offsets is None:
            return
        text = (await self._get(addr, RequestCode.GET_ALL_DELAY_OFFSET)).decode("utf-8")
        await asyncio.to_thread(self.delay_offsets, decode_delay_offsets(text))

    async def sync_sub_groups(self, addr: str) -> None:
        data = json.loads(await self._get(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
        table, version = decode_wrapper(data)
        if await asyncio.to_thread(self.subscriptions.replace_from_master, table, version):
            log.info("subscription groups synced from master %s: %d groups, %s", addr, len(table), version)


class TransportOffsetSynchronize:
    """``master_addr`` is the master's client address on the project's transport."""

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


__all__ = ["SYNC_DELAY_S", "SYNC_PERIOD_S", "SlaveSynchronize", "TransportOffsetSynchronize", "vip_channel"]
