"""RocketMQ's NettyRemotingServer on asyncio: a listener whose connections carry remoting
commands, each request handed to the processor registered for its code.

As NettyRemotingAbstract.processRequestCommand: requests of a connection run concurrently
(a held pull does not stall the heartbeat behind it); a code nobody serves is answered
REQUEST_CODE_NOT_SUPPORTED and a processor's exception SYSTEM_ERROR, the connection staying
open; a oneway request gets no answer. A code with no processor goes to the default processor
(registerDefaultProcessor; the broker's answers REQUEST_CODE_NOT_SUPPORTED, so a oneway one is
left unanswered as in Java); with none, the server answers REQUEST_CODE_NOT_SUPPORTED itself,
oneway or not, in its own serialize type (JSON), as processRequestCommand does. A frame that
does not decode closes the connection, as NettyDecoder does (the requests before it in the stream are still served).

The read path is an ``asyncio.BufferedProtocol``: the socket is read into the decoder's
scratch buffer (``dledger.net.frames.BufferedFrameDecoder``, the one our own protocol reads
with) and its frames are split and made into commands by a kernel, no bytes object per frame.
A processor's coroutine is first run right there, in the read callback: one that answers
without waiting (a send the store takes at once, a pull that finds messages, the heartbeat)
is answered in that turn with no task, so such answers leave in the order of their requests;
only one that waits (a held pull, a send waiting for its commit) goes on in a task of its own.
On Python 3.12+ that first step runs inside an eager task (``_EAGER``), same order.

Flow control (docs/remoting.md): a code's ``RequestPool`` bounds its requests waiting at once
(Java's executor queue capacities; SYSTEM_BUSY ``[OVERLOAD]`` past it, nothing if oneway), and a
connection is read no more while its write buffer is over the high-water mark or while
MAX_IN_FLIGHT_PER_CHANNEL of its requests wait.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any

from dledger.net.frames import SCRATCH_SIZE, BufferedFrameDecoder
from dledger.rocketmq.remoting.netty_decoder import FRAME_MAX_LENGTH, FrameTooLong
from dledger.rocketmq.remoting.remoting_command import RESPONSE_FLAG, K, RemotingCommand
from dledger.rocketmq.remoting.remoting_command_exception import RemotingCommandException
from dledger.rocketmq.remoting.response_code import ResponseCode

log = logging.getLogger(__name__)

READ_SIZE = SCRATCH_SIZE

# Python 3.12+: a request's processor runs as an eager task (its first step at once, inside a
# task): from 3.12 ``asyncio.wait_for`` (the held pull, a send waiting for its commit) needs a
# current task, and a coroutine stepped outside one fails with "Timeout should be used inside
# a task". 3.11 has no eager start; there the first step runs outside a task (``_Resume``),
# which its ``wait_for`` allows (``asyncio.timeout`` it would not: processors do not use it).
_EAGER = sys.version_info >= (3, 12)


class CommandDecoder(BufferedFrameDecoder[RemotingCommand]):
    """A connection's byte stream made into commands, with the BufferedProtocol buffer
    interface (``get_buffer``/``buffer_updated``, or ``feed``). A frame is an int32 length,
    then that many bytes, at most ``max_frame`` counting the length field (NettyDecoder's
    limit). A frame past the limit or that does not decode sets ``error`` (the commands before
    it are still returned); the decoder takes nothing more after it."""

    __slots__ = ("error",)

    def __init__(self, max_frame: int = FRAME_MAX_LENGTH, scratch_size: int = SCRATCH_SIZE) -> None:
        super().__init__(max_frame, scratch_size, 4)
        self.error: RemotingCommandException | None = None

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        if self.error is not None:
            raise self.error
        return super().get_buffer(sizehint)

    def _parse(self) -> list[RemotingCommand]:
        start, need, cmds, error = K.decode_frames(self._view, self._start, self._end, self.max_frame)
        end = self._end
        if error is not None:
            self.error = error if isinstance(error, RemotingCommandException) else FrameTooLong(str(error))
            if not cmds:
                raise self.error
        elif need > len(self._buf):
            # Too big for the scratch buffer: its own buffer, received straight into.
            self._receive_big(need - 4, start + 4, end)
            start = end = 0
            need = 4
        self._need = need
        if start == end:
            start = end = 0
        self._start, self._end = start, end
        return cmds

    def _whole(self, payload: memoryview, tailed: bool) -> RemotingCommand:
        # The buffer is this frame's alone: the body is a view of it, not a copy.
        cmd: RemotingCommand = K.decode_command(payload, payload.toreadonly())
        return cmd


class _Resume:
    """Awaiting it goes on with a coroutine that was started outside a task and is now
    waiting for ``first`` (what it yielded): the task awaiting this waits for ``first`` and
    then drives the coroutine to its end, as ``await`` would have."""

    __slots__ = ("coro", "first")

    def __init__(self, coro: Coroutine[Any, Any, Any], first: Any) -> None:
        self.coro = coro
        self.first = first

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, out = self.coro, self.first
        self.first = None
        while True:
            try:
                sent = yield out
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # a cancellation, or what the awaited future raised
                try:
                    out = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    out = coro.send(sent)
                except StopIteration as stop:
                    return stop.value


# Answers of one loop turn are joined and written once (see Channel.send) up to this many bytes;
# past it they are written at once, so the transport's high-water mark sees them.
COALESCE_LIMIT = 64 * 1024
OVERLOAD_REMARK = "[OVERLOAD]system busy, start flow control for a while"
# BrokerFastFailure's answers to a request that waited too long before it ran.
TIMEOUT_CLEAN_QUEUE_REMARK = (
    "[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: %sms, size of queue: %d"
)
PCBUSY_CLEAN_QUEUE_REMARK = (
    "[PCBUSY_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: %sms, size of queue: %d"
)
# A connection with this many requests waiting (in tasks) is read no more until half of them
# are answered: a peer that pipelines requests cannot make the server hold unbounded work.
# Requests the server's ``parks`` says wait by design (a held pull) do not count.
MAX_IN_FLIGHT_PER_CHANNEL = 256


class RequestPool:
    """What bounds an executor's queue in Java (``sendThreadPoolQueueCapacity`` and the like):
    here, how many requests of its codes may wait at once (a send waiting for its commit, a
    held pull); one past it is answered SYSTEM_BUSY ``[OVERLOAD]``, nothing if oneway, as
    processRequestCommand answers a RejectedExecutionException."""

    __slots__ = ("capacity", "in_flight", "max_wait_s", "name")

    def __init__(self, name: str, capacity: int) -> None:
        self.name = name
        self.capacity = capacity
        self.in_flight = 0
        # BrokerFastFailure's waitTimeMillsIn<Pool>Queue, in seconds: a request of this pool
        # that waited this long between its read and its run is answered SYSTEM_BUSY instead
        # of run (None: never). The server's ``queue_timeouts_changed`` must hear of a change.
        self.max_wait_s: float | None = None


# A processor answers a request (None: no answer, as for a oneway request or a held one that
# will not be answered).
Processor = Callable[[RemotingCommand, "Channel"], Awaitable[RemotingCommand | None]]


class Channel(asyncio.BufferedProtocol):
    """One accepted connection: its peer, its read path, and a way to write commands to it
    (the server's answers, and requests the server sends, such as
    NOTIFY_CONSUMER_IDS_CHANGED)."""

    def __init__(self, server: NettyRemotingServer) -> None:
        self.server = server
        self.decoder = CommandDecoder(server.max_frame_length)
        self.remote_addr = "?"
        self.closed = False
        self.transport: asyncio.Transport | None = None
        self._out: list[bytes] = []
        self._out_size = 0
        self._flush_handle: asyncio.Handle | None = None
        # The transport's write buffer is over its high-water mark (pause_writing): no request
        # is run and nothing read until it drains; ``_backlog`` holds the commands of the last
        # read not yet run, and where to go on.
        self._write_paused = False
        # (commands, first not run, when they were read): the connection's share of the
        # pools' queues (BrokerFastFailure cleans it).
        self._backlog: tuple[list[RemotingCommand], int, float] | None = None
        self._reading_paused = False
        # Requests of this connection waiting in tasks (those that count: see MAX_IN_FLIGHT...).
        self.in_flight = 0
        self._loop = asyncio.get_running_loop()
        # Requests this server sent on the connection and awaits answers to, by opaque.
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}

    # -- asyncio.BufferedProtocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.remote_addr = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "?"
        self.server.channels.add(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.decoder.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        try:
            cmds = self.decoder.buffer_updated(nbytes)
        except RemotingCommandException as exc:
            log.warning("closing %s: %s", self.remote_addr, exc)
            self.close()
            return
        self._run(cmds, 0, time.monotonic())

    def _run(self, cmds: list[RemotingCommand], start: int, read_at: float) -> None:
        server = self.server
        dispatch = server.dispatch
        for i in range(start, len(cmds)):
            if self.closed:
                return
            if self._write_paused or self.in_flight >= MAX_IN_FLIGHT_PER_CHANNEL:
                # The peer does not read its answers, or has too many requests waiting: the
                # rest of this read waits, and the transport reads nothing more meanwhile.
                self._backlog = (cmds, i, read_at)
                server.backlogged.add(self)
                self._pause_reading()
                return
            cmd = cmds[i]
            if cmd.flag & 1:
                self.response_arrived(cmd)  # an answer to a request this server sent
            elif (
                # A send about to run while the page cache is busy: answered as the task
                # answers the queued ones, not left to wait for the put lock on the loop.
                server.page_cache_busy is None or not server.clean_if_busy(cmd, self, read_at, cmds, i + 1)
            ) and (
                # A request behind one that held the loop (a slow put) waited in this read as
                # in Java's executor queue: the fast-failure check, at the moment it would run.
                time.monotonic() - read_at < server.min_queue_wait_s
                or not server.expire_queued(cmd, self, read_at, cmds, i + 1)
            ):
                dispatch(cmd, self)
        if self.decoder.error is not None:
            log.warning("closing %s: %s", self.remote_addr, self.decoder.error)
            self.close()

    # Flow control: asyncio calls these when the transport's write buffer crosses its high-
    # and low-water marks. Netty 4.9.4 goes on reading (its outbound buffer grows without
    # bound); we stop reading the peer until it takes its answers, so what a connection holds
    # stays bounded.
    def pause_writing(self) -> None:
        self._write_paused = True
        self._pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        if self.in_flight < MAX_IN_FLIGHT_PER_CHANNEL:
            self._go_on()

    def task_done(self) -> None:
        """A counted request of this connection was answered (or failed)."""
        self.in_flight -= 1
        if self._reading_paused and not self._write_paused and self.in_flight <= MAX_IN_FLIGHT_PER_CHANNEL // 2:
            self._go_on()

    def clean_backlog(self, expired: Callable[[RemotingCommand, float], str | None]) -> None:
        """Answer SYSTEM_BUSY, with the remark ``expired`` gives, each waiting request it gives
        one for, and take it out of the backlog: it will not run."""
        if self._backlog is None:
            return
        cmds, start, read_at = self._backlog
        kept: list[RemotingCommand] = []
        for i in range(start, len(cmds)):
            cmd = cmds[i]
            remark = None if cmd.flag & 1 else expired(cmd, read_at)
            if remark is None:
                kept.append(cmd)
            else:
                self.server.write_at_once(cmd, self, ResponseCode.SYSTEM_BUSY, remark)
        if len(kept) != len(cmds) - start:
            self._backlog = (kept, 0, read_at)

    def queued(self, pool: RequestPool) -> int:
        """How many of this connection's requests wait in ``pool``'s queue (its backlog)."""
        if self._backlog is None:
            return 0
        cmds, start, _ = self._backlog
        return self.server.count_in_pool(pool, cmds, start)

    def _pause_reading(self) -> None:
        if not self._reading_paused and self.transport is not None and not self.closed:
            self._reading_paused = True
            self.transport.pause_reading()

    def _go_on(self) -> None:
        backlog, self._backlog = self._backlog, None
        self.server.backlogged.discard(self)
        if backlog is not None:
            self._run(*backlog)
        if self._backlog is None and self._reading_paused and not self._write_paused and not self.closed:
            self._reading_paused = False
            if self.transport is not None:
                self.transport.resume_reading()

    def eof_received(self) -> bool:
        return False  # let the transport close itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        self._out.clear()
        self._backlog = None
        self.server.backlogged.discard(self)
        self._fail_pending()
        if self in self.server.channels:
            self.server.channels.discard(self)
            if self.server.on_channel_close is not None:
                self.server.on_channel_close(self)

    # -- requests this server sends -------------------------------------------------------------

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

    def _fail_pending(self) -> None:
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError(f"connection to {self.remote_addr} closed"))
        self._pending.clear()

    # -- writing -------------------------------------------------------------------------------

    def send(self, cmd: RemotingCommand) -> None:
        if self.closed or self.transport is None:
            return
        data = cmd.encode()
        if self._flush_handle is not None:
            self._out.append(data)
            self._out_size += len(data)
            if self._out_size >= COALESCE_LIMIT:
                self._flush()  # the transport's buffer, and its high-water mark, see them now
            return
        # The first command of a loop turn goes out now (a lone answer does not wait a turn);
        # the ones after it in the same turn (the answers of a window of sends committed
        # together) are joined and written once by the flush scheduled here: one send call,
        # not one each.
        self.transport.write(data)
        self._flush_handle = self._loop.call_soon(self._flushed)

    def _flushed(self) -> None:
        self._flush_handle = None
        self._flush()

    def _flush(self) -> None:
        if self._out and not self.closed and self.transport is not None:
            data = self._out[0] if len(self._out) == 1 else b"".join(self._out)
            self._out.clear()
            self._out_size = 0
            self.transport.write(data)

    def close(self) -> None:
        if not self.closed:
            if self._flush_handle is not None:
                self._flush_handle.cancel()
                self._flush_handle = None
                self._flush()
            self.closed = True
            if self.transport is not None:
                self.transport.close()
            self._fail_pending()


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
        default_processor: Processor | None = None,
        pools: dict[int, RequestPool] | None = None,
        parks: Callable[[RemotingCommand], bool] | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.processors: dict[int, Processor] = dict(processors or {})
        # registerDefaultProcessor: what serves a code no processor is registered for. The
        # broker's is AdminBrokerProcessor (REQUEST_CODE_NOT_SUPPORTED through the normal
        # answer path, so a oneway request gets none); without one the server answers itself.
        self.default_processor = default_processor
        # The pool each code's waiting requests count against (none: unbounded).
        self.pools: dict[int, RequestPool] = dict(pools or {})
        # Whether a request waits by design (a held pull): not counted against its connection.
        self.parks = parks
        # What Java stamps into its answers' version: 0 unless rocketmq.remoting.version is
        # set (the broker sets it, the name server does not).
        self.response_version = response_version
        self.max_frame_length = max_frame_length
        self.on_channel_close = on_channel_close
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.channels: set[Channel] = set()
        # The connections with requests read and not run (the pools' queues), and the least
        # of the pools' fast-failure waits (inf: none is cleaned).
        self.backlogged: set[Channel] = set()
        self.min_queue_wait_s = float("inf")
        self.queue_timeouts_changed()
        # BrokerFastFailure's page-cache check and the pool it empties (None: not checked).
        self.page_cache_busy: Callable[[], bool] | None = None
        self.busy_pool: RequestPool | None = None

    def queue_timeouts_changed(self) -> None:
        """A pool's ``max_wait_s`` was set or cleared."""
        waits = [p.max_wait_s for p in self.pools.values() if p.max_wait_s is not None]
        self.min_queue_wait_s = min(waits, default=float("inf"))

    def count_in_pool(self, pool: RequestPool, cmds: list[RemotingCommand], start: int) -> int:
        pools = self.pools
        return sum(1 for i in range(start, len(cmds)) if pools.get(cmds[i].code) is pool and not cmds[i].flag & 1)

    def queue_size(self, pool: RequestPool) -> int:
        """How many requests of ``pool`` wait in the connections' backlogs."""
        return sum(ch.queued(pool) for ch in self.backlogged)

    def expire_queued(
        self, cmd: RemotingCommand, ch: Channel, read_at: float, rest: list[RemotingCommand], start: int
    ) -> bool:
        """BrokerFastFailure's cleanExpiredRequestInQueue for a request about to run (``rest``
        from ``start``: the requests of its read behind it): whether it waited its pool's
        ``max_wait_s`` or more since it was read, and so was answered SYSTEM_BUSY
        ``[TIMEOUT_CLEAN_QUEUE]`` instead of run."""
        pool = self.pools.get(cmd.code)
        if pool is None or pool.max_wait_s is None:
            return False
        behind = time.monotonic() - read_at
        if behind < pool.max_wait_s:
            return False
        size = self.count_in_pool(pool, rest, start) + self.queue_size(pool)
        self.write_at_once(cmd, ch, ResponseCode.SYSTEM_BUSY, TIMEOUT_CLEAN_QUEUE_REMARK % (int(behind * 1000), size))
        return True

    def clean_if_busy(
        self, cmd: RemotingCommand, ch: Channel, read_at: float, rest: list[RemotingCommand], start: int
    ) -> bool:
        """cleanExpiredRequest's page-cache-busy branch for a request about to run: whether it
        is one of ``busy_pool``'s and the page cache is busy, and so was answered SYSTEM_BUSY
        ``[PCBUSY_CLEAN_QUEUE]`` instead of run."""
        pool = self.pools.get(cmd.code)
        busy = self.page_cache_busy
        if pool is None or pool is not self.busy_pool or busy is None or not busy():
            return False
        size = self.count_in_pool(pool, rest, start) + self.queue_size(pool)
        behind = int((time.monotonic() - read_at) * 1000)
        self.write_at_once(cmd, ch, ResponseCode.SYSTEM_BUSY, PCBUSY_CLEAN_QUEUE_REMARK % (behind, size))
        return True

    def clean_expired(self) -> None:
        """cleanExpiredRequestInQueue over every pool with a ``max_wait_s``: each request in a
        connection's backlog that waited that long is answered SYSTEM_BUSY
        ``[TIMEOUT_CLEAN_QUEUE]`` and will not run."""
        self._clean(TIMEOUT_CLEAN_QUEUE_REMARK, lambda pool: pool.max_wait_s)

    def clean_all(self, pool: RequestPool) -> None:
        """cleanExpiredRequest's page-cache-busy branch: every request waiting in ``pool``'s
        queue answered SYSTEM_BUSY ``[PCBUSY_CLEAN_QUEUE]``, whatever its wait."""
        self._clean(PCBUSY_CLEAN_QUEUE_REMARK, lambda p: 0.0 if p is pool else None)

    def _clean(self, remark: str, wait_of: Callable[[RequestPool], float | None]) -> None:
        """Answers SYSTEM_BUSY ``remark`` to each backlogged request whose pool's ``wait_of``
        (None: not cleaned) it waited, and takes it out of its backlog."""
        if not self.backlogged:
            return
        now = time.monotonic()
        pools = self.pools
        sizes: dict[int, int] = {}

        def expired(cmd: RemotingCommand, read_at: float) -> str | None:
            pool = pools.get(cmd.code)
            wait = None if pool is None else wait_of(pool)
            if pool is None or wait is None or now - read_at < wait:
                return None
            key = id(pool)
            if key not in sizes:
                sizes[key] = self.queue_size(pool)
            sizes[key] -= 1  # Java's size is the queue's after the removal
            return remark % (int((now - read_at) * 1000), sizes[key])

        for ch in list(self.backlogged):
            ch.clean_backlog(expired)

    def register_processor(self, code: int, processor: Processor) -> None:
        self.processors[code] = processor

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: Channel(self), self.host, self.port)
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

    def dispatch(self, cmd: RemotingCommand, ch: Channel) -> None:
        """Serve one request: its processor's coroutine is run here until it answers or waits;
        only one that waits goes on in a task (see the module docstring)."""
        proc = self.processors.get(cmd.code) or self.default_processor
        if proc is None:
            remark = f" request type {cmd.code} not supported"
            log.error("%s%s", ch.remote_addr, remark)
            self.write_at_once(cmd, ch, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark)
            return
        pool = self.pools.get(cmd.code)
        if pool is not None and pool.in_flight >= pool.capacity:
            if not cmd.flag & 2:
                self.write_at_once(cmd, ch, ResponseCode.SYSTEM_BUSY, OVERLOAD_REMARK)
            return
        # Counted against its pool and connection from before its task runs to its answer
        # (the decrements in _finish: no done-callback, which would cost a loop handle each).
        try:
            aw = proc(cmd, ch)
            if _EAGER:
                loop = asyncio.get_running_loop()
                counted = self._count(pool, cmd, ch)  # net zero if it answers in its first step
                finish = self._finish(cmd, ch, aw, pool, counted)
                task = asyncio.Task(finish, loop=loop, eager_start=True)  # type: ignore[call-arg]
                if not task.done():
                    self._hold(task)
                return
            send = getattr(aw, "send", None)
            if send is None:  # an awaitable that is not a coroutine: a task awaits it
                counted = self._count(pool, cmd, ch)
                self._spawn(self._finish(cmd, ch, aw, pool, counted))
                return
            first = send(None)
        except StopIteration as stop:
            self._answer(cmd, ch, stop.value)
            return
        except Exception as exc:
            self._answer(cmd, ch, self._failed(cmd, ch, exc))
            return
        counted = self._count(pool, cmd, ch)
        self._spawn(self._finish(cmd, ch, _Resume(aw, first), pool, counted))  # type: ignore[arg-type]

    def _count(self, pool: RequestPool | None, cmd: RemotingCommand, ch: Channel) -> bool:
        """A request about to wait counted in its pool and, unless it waits by design, its
        connection; whether it was the latter."""
        if pool is not None:
            pool.in_flight += 1
        if self.parks is not None and self.parks(cmd):
            return False
        ch.in_flight += 1
        return True

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        self._hold(asyncio.get_running_loop().create_task(coro))

    def _hold(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _finish(
        self,
        cmd: RemotingCommand,
        ch: Channel,
        aw: Awaitable[RemotingCommand | None],
        pool: RequestPool | None,
        counted: bool,
    ) -> None:
        try:
            try:
                resp = await aw
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                resp = self._failed(cmd, ch, exc)
            self._answer(cmd, ch, resp)
        finally:
            if pool is not None:
                pool.in_flight -= 1
            if counted:
                ch.task_done()

    @staticmethod
    def _failed(cmd: RemotingCommand, ch: Channel, exc: Exception) -> RemotingCommand:
        log.exception("processing request code %d from %s", cmd.code, ch.remote_addr, exc_info=exc)
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")

    def write_at_once(self, cmd: RemotingCommand, ch: Channel, code: int, remark: str) -> None:
        """An answer written before any processor ran (processRequestCommand's
        REQUEST_CODE_NOT_SUPPORTED and SYSTEM_BUSY): as Java, whether or not the request is
        oneway, and in the server's serialize type (createResponseCommand's default, JSON), not
        the request's."""
        resp = RemotingCommand(code, None, b"", remark, cmd.opaque, RESPONSE_FLAG, self.response_version)
        try:
            ch.send(resp)
        except (ConnectionError, RuntimeError):
            pass

    def _answer(self, cmd: RemotingCommand, ch: Channel, resp: RemotingCommand | None) -> None:
        if resp is None or cmd.flag & 2:  # no answer, or a oneway request
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
        except RemotingCommandException as exc:  # an answer that does not encode: logged, not sent
            log.error("answer to request code %d from %s: %s", cmd.code, ch.remote_addr, exc)


__all__ = [
    "PCBUSY_CLEAN_QUEUE_REMARK",
    "TIMEOUT_CLEAN_QUEUE_REMARK",
    "Channel",
    "CommandDecoder",
    "NettyRemotingServer",
    "Processor",
    "RequestPool",
]
