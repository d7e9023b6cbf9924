"""RocketMQ's NamesrvController: the name server's remoting listener, its request processor and
the scan that drops brokers silent for 120 s (every 10 s, as the Java one)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from dledger.rocketmq.namesrv.default_request_processor import DefaultRequestProcessor
from dledger.rocketmq.namesrv.kv_config_manager import KVConfigManager
from dledger.rocketmq.namesrv.route_info_manager import RouteInfoManager
from dledger.rocketmq.remoting.netty_remoting_server import Channel, NettyRemotingServer

log = logging.getLogger(__name__)

SCAN_INTERVAL_S = 10.0


class NamesrvController:
    def __init__(self, host: str, port: int, kv_config_path: Path | None = None) -> None:
        self.routes = RouteInfoManager()
        self.kv = KVConfigManager(kv_config_path)
        self.processor = DefaultRequestProcessor(self.routes, self.kv)
        self.server = NettyRemotingServer(
            host,
            port,
            self.processor.processors(),
            on_channel_close=self._channel_closed,
            default_processor=self.processor.unknown_code,
        )
        self._scan: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        return self.server.port

    async def start(self) -> None:
        await self.server.start()
        self._scan = asyncio.get_running_loop().create_task(self._scan_loop())
        log.info("name server listening on %s:%d", self.server.host, self.server.port)

    async def _scan_loop(self) -> None:
        while True:
            await asyncio.sleep(SCAN_INTERVAL_S)
            self.routes.scan_not_active_broker()

    def _channel_closed(self, ch: Channel) -> None:
        # BrokerHousekeepingService: a broker whose connection closed is gone at once.
        self.routes.on_channel_destroy(ch.remote_addr, ch)

    async def close(self) -> None:
        if self._scan is not None:
            self._scan.cancel()
        await self.server.close()


async def serve(host: str, port: int, kv_config_path: Path | None = None) -> None:
    """Run a name server until cancelled (``dledger mq namesrv``)."""
    ctl = NamesrvController(host, port, kv_config_path)
    await ctl.start()
    try:
        await asyncio.Event().wait()
    finally:
        await ctl.close()


__all__ = ["NamesrvController", "serve"]
