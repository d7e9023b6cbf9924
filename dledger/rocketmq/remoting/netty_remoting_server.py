"""RocketMQ's NettyRemotingServer on asyncio: a listener whose connections carry remoting
commands, each request handed to the processor registered for its code.

As NettyRemotingAbstract.processRequestCommand: requests of a connection run concurrently
(a held pull does not stall the heartbeat behind it); a code nobody serves is answered
REQUEST_CODE_NOT_SUPPORTED and a processor's exception SYSTEM_ERROR, the connection staying
open; a oneway request gets no answer. A frame that does not decode closes the connection, as
NettyDecoder does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from dledger.rocketmq.remoting.netty_decoder import FRAME_MAX_LENGTH, NettyDecoder
from dledger.rocketmq.remoting.remoting_command import RemotingCommand
from dledger.rocketmq.remoting.remoting_command_exception import RemotingCommandException
from dledger.rocketmq.remoting.response_code import ResponseCode

log = logging.getLogger(__name__)

READ_SIZE = 256 * 1024


class Channel:
    """One accepted connection: its peer and a way to write commands to it (the server's
    answers, and requests the server sends, such as NOTIFY_CONSUMER_IDS_CHANGED)."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        peer = writer.get_extra_info("peername")
        self.remote_addr = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "?"
        self.closed = False
        self._out: list[bytes] = []
        self._flush_handle: asyncio.Handle | None = None
        # Requests this server sent on the connection and awaits answers to, by opaque.
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}

    async def invoke(self, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """Send a request to the peer and wait for its answer (NettyRemotingServer.invokeSync,
        as Broker2Client.callClient uses it). TimeoutError after ``timeout_s``;
        ConnectionError when the connection is or gets closed."""
        if self.closed:
            raise ConnectionError(f"connection to {self.remote_addr} closed")
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._pending[cmd.opaque] = fut
        try:
            self.send(cmd)
            return await asyncio.wait_for(fut, timeout_s)
        finally:
            self._pending.pop(cmd.opaque, None)

    def response_arrived(self, cmd: RemotingCommand) -> None:
        fut = self._pending.pop(cmd.opaque, None)
        if fut is not None and not fut.done():
            fut.set_result(cmd)

    def send(self, cmd: RemotingCommand) -> None:
        if self.closed:
            return
        data = cmd.encode()
        if self._flush_handle is not None:
            self._out.append(data)
            return
        # The first command of a loop turn goes out now (a lone answer does not wait a turn);
        # the ones after it in the same turn (the answers of a window of sends committed
        # together) are joined and written once by the flush scheduled here: one send call,
        # not one each.
        self._writer.write(data)
        self._flush_handle = asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_handle = None
        if self._out and not self.closed:
            data = self._out[0] if len(self._out) == 1 else b"".join(self._out)
            self._out.clear()
            self._writer.write(data)

    def close(self) -> None:
        if not self.closed:
            if self._flush_handle is not None:
                self._flush_handle.cancel()
                self._flush()
            self.closed = True
            self._writer.close()
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError(f"connection to {self.remote_addr} closed"))
            self._pending.clear()


# A processor answers a request (None: no answer, as for a oneway request or a held one that
# will not be answered).
Processor = Callable[[RemotingCommand, Channel], Awaitable[RemotingCommand | None]]


class NettyRemotingServer:
    """Serves ``processors`` by request code on ``host:port`` (port 0: any free one)."""

    def __init__(
        self,
        host: str,
        port: int,
        processors: dict[int, Processor] | None = None,
        *,
        response_version: int = 0,
        max_frame_length: int = FRAME_MAX_LENGTH,
        on_channel_close: Callable[[Channel], None] | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.processors: dict[int, Processor] = dict(processors or {})
        # What Java stamps into its answers' version: 0 unless rocketmq.remoting.version is
        # set (the broker sets it, the name server does not).
        self.response_version = response_version
        self.max_frame_length = max_frame_length
        self.on_channel_close = on_channel_close
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.channels: set[Channel] = set()

    def register_processor(self, code: int, processor: Processor) -> None:
        self.processors[code] = processor

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, limit=READ_SIZE)
        sock = self._server.sockets[0]
        self.port = int(sock.getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for ch in list(self.channels):
            ch.close()
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ch = Channel(writer)
        self.channels.add(ch)
        decoder = NettyDecoder(self.max_frame_length)
        try:
            while True:
                data = await reader.read(READ_SIZE)
                if not data:
                    break
                for frame in decoder.feed(data):
                    cmd = RemotingCommand.decode(frame)
                    if cmd.is_response:
                        ch.response_arrived(cmd)  # an answer to a request this server sent
                        continue
                    task = asyncio.get_running_loop().create_task(self._process(cmd, ch))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
        except RemotingCommandException as exc:
            log.warning("closing %s: %s", ch.remote_addr, exc)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.channels.discard(ch)
            ch.close()
            if self.on_channel_close is not None:
                self.on_channel_close(ch)

    async def _process(self, cmd: RemotingCommand, ch: Channel) -> None:
        proc = self.processors.get(cmd.code)
        resp: RemotingCommand | None
        if proc is None:
            resp = cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported")
        else:
            try:
                resp = await proc(cmd, ch)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.exception("processing request code %d from %s", cmd.code, ch.remote_addr)
                resp = cmd.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        if resp is None or cmd.is_oneway:
            return
        resp.opaque = cmd.opaque
        resp.flag |= 1
        resp.serialize_type = cmd.serialize_type
        if resp.version == 0:
            resp.version = self.response_version
        try:
            ch.send(resp)
        except (ConnectionError, RuntimeError):
            pass


__all__ = ["Channel", "NettyRemotingServer", "Processor"]
