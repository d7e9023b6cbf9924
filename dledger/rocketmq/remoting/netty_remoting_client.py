"""RocketMQ's NettyRemotingClient on asyncio: one connection per address, requests matched to
their answers by opaque (invokeSync), oneway requests (invokeOneway); requests the far side
sends (NOTIFY_CONSUMER_IDS_CHANGED...) go to ``on_request``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from dledger.rocketmq.remoting.netty_decoder import NettyDecoder
from dledger.rocketmq.remoting.remoting_command import RemotingCommand
from dledger.rocketmq.remoting.remoting_command_exception import RemotingCommandException

log = logging.getLogger(__name__)


class RemotingConnectException(ConnectionError):
    """The address could not be reached, or the connection closed before the answer."""


class RemotingTimeoutException(TimeoutError):
    """No answer within the time asked."""


class _Connection:
    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        on_request: Callable[[RemotingCommand], None] | None,
    ) -> None:
        self.writer = writer
        self.pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self.on_request = on_request
        self.closed = False
        self.task = asyncio.get_running_loop().create_task(self._read(reader))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        decoder = NettyDecoder()
        try:
            while True:
                data = await reader.read(256 * 1024)
                if not data:
                    break
                for frame in decoder.feed(data):
                    cmd = RemotingCommand.decode(frame)
                    if cmd.is_response:
                        fut = self.pending.pop(cmd.opaque, None)
                        if fut is not None and not fut.done():
                            fut.set_result(cmd)
                    elif self.on_request is not None:
                        self.on_request(cmd)
        except (ConnectionError, RemotingCommandException) as exc:
            log.debug("connection lost: %s", exc)
        finally:
            self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.writer.close()
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(RemotingConnectException("connection closed before the answer"))
        self.pending.clear()


class NettyRemotingClient:
    """Connections to brokers and name servers by ``host:port``; call on one event loop."""

    def __init__(
        self, connect_timeout: float = 3.0, on_request: Callable[[RemotingCommand], None] | None = None
    ) -> None:
        self.connect_timeout = connect_timeout
        self.on_request = on_request
        self._conns: dict[str, _Connection] = {}
        self._connecting: dict[str, asyncio.Lock] = {}

    async def _connection(self, addr: str) -> _Connection:
        conn = self._conns.get(addr)
        if conn is not None and not conn.closed:
            return conn
        lock = self._connecting.setdefault(addr, asyncio.Lock())
        async with lock:
            conn = self._conns.get(addr)
            if conn is not None and not conn.closed:
                return conn
            host, _, port = addr.rpartition(":")
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(host.strip("[]"), int(port), limit=256 * 1024), self.connect_timeout
                )
            except (OSError, asyncio.TimeoutError, ValueError) as exc:
                raise RemotingConnectException(f"connect to {addr} failed: {exc}") from None
            conn = self._conns[addr] = _Connection(reader, writer, self.on_request)
            return conn

    async def invoke(self, addr: str, request: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        """invokeSync: the answer to ``request`` (RemotingTimeoutException, RemotingConnectException)."""
        conn = await self._connection(addr)
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        conn.pending[request.opaque] = fut
        try:
            conn.writer.write(request.encode())
            return await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            raise RemotingTimeoutException(f"no answer from {addr} in {timeout}s to code {request.code}") from None
        finally:
            conn.pending.pop(request.opaque, None)

    async def invoke_oneway(self, addr: str, request: RemotingCommand) -> None:
        conn = await self._connection(addr)
        request.flag |= 2
        conn.writer.write(request.encode())
        await conn.writer.drain()

    def close_connection(self, addr: str) -> None:
        conn = self._conns.pop(addr, None)
        if conn is not None:
            conn.close()

    async def close(self) -> None:
        conns = list(self._conns.values())
        self._conns.clear()
        for c in conns:
            c.close()
        for c in conns:
            c.task.cancel()
        await asyncio.gather(*(c.task for c in conns), return_exceptions=True)


__all__ = ["NettyRemotingClient", "RemotingConnectException", "RemotingTimeoutException"]
