"""RocketMQ's BrokerOuterAPI: a broker's registrations with its name servers (REGISTER_BROKER
to each, with the topics and their data version; UNREGISTER_BROKER on the way out)."""

from __future__ import annotations

import asyncio
import logging

from dledger.rocketmq.remoting.netty_remoting_client import NettyRemotingClient
from dledger.rocketmq.remoting.protocol.register_broker_body import DataVersion, RegisterBrokerBody, TopicConfig, crc32
from dledger.rocketmq.remoting.remoting_command import RemotingCommand
from dledger.rocketmq.remoting.request_code import RequestCode
from dledger.rocketmq.remoting.response_code import ResponseCode

log = logging.getLogger(__name__)

REGISTER_TIMEOUT_S = 6.0  # registerBrokerTimeoutMills


class BrokerOuterAPI:
    def __init__(self, namesrv_addrs: list[str]) -> None:
        self.namesrv_addrs = namesrv_addrs
        self.client = NettyRemotingClient()

    async def register_broker_all(
        self,
        cluster: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        topics: dict[str, TopicConfig],
        data_version: DataVersion,
    ) -> list[RemotingCommand | None]:
        """One REGISTER_BROKER to every name server at once; an answer or None for each."""
        body = RegisterBrokerBody(topics, data_version).encode()
        ext = {
            "brokerId": str(broker_id),
            "bodyCrc32": str(crc32(body)),
            "clusterName": cluster,
            "brokerAddr": broker_addr,
            "haServerAddr": ha_server_addr,
            "compressed": "false",
            "brokerName": broker_name,
        }

        async def one(addr: str) -> RemotingCommand | None:
            try:
                resp = await self.client.invoke(
                    addr, RemotingCommand.request(RequestCode.REGISTER_BROKER, dict(ext), body), REGISTER_TIMEOUT_S
                )
            except (ConnectionError, TimeoutError) as exc:
                log.warning("register with name server %s failed: %s", addr, exc)
                return None
            if resp.code != ResponseCode.SUCCESS:
                log.warning("name server %s refused the registration: %s %s", addr, resp.code, resp.remark)
            return resp

        return list(await asyncio.gather(*(one(a) for a in self.namesrv_addrs)))

    async def unregister_broker_all(self, cluster: str, broker_addr: str, broker_name: str, broker_id: int) -> None:
        ext = {"brokerId": str(broker_id), "clusterName": cluster, "brokerAddr": broker_addr, "brokerName": broker_name}

        async def one(addr: str) -> None:
            try:
                await self.client.invoke(
                    addr, RemotingCommand.request(RequestCode.UNREGISTER_BROKER, dict(ext)), REGISTER_TIMEOUT_S
                )
            except (ConnectionError, TimeoutError) as exc:
                log.info("unregister from name server %s failed: %s", addr, exc)

        await asyncio.gather(*(one(a) for a in self.namesrv_addrs))

    async def close(self) -> None:
        await self.client.close()


__all__ = ["BrokerOuterAPI"]
