"""Asyncio RPC over length-prefixed msgpack frames: ``RpcServer`` and ``RpcClient``.

One TCP (optionally TLS) connection per peer address carries any number of requests at
once; responses are matched by request id, so they may come back in any order.

Throughput choices:

- Frames written in one event-loop iteration are coalesced into one ``transport.write``
  (a scheduled flush), so 10,000 pipelined calls cost a few syscalls, not 10,000. Nothing
  awaits a write; writers wait only when the transport's buffer passes its high-water mark.
- Big payloads are written as they are, never joined with other frames (no extra copy).
- Receiving uses ``BufferedProtocol`` with ``FrameDecoder`` (see ``frames``).
- The server stops reading from a connection that has too many requests in flight, which
  pushes back on a client through TCP rather than growing a task list without bound.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import ssl as ssl_module
import sys
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any

from dledger.codes import ResponseCode
from dledger.errors import DLedgerError
from dledger.log_limit import RepeatLimiter, held_back
from dledger.net import auth
from dledger.net.frames import DEFAULT_MAX_FRAME, Frame, FrameDecoder, FrameError, Kind, encode_parts, new_packer
from dledger.peers import parse_addr

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 3.0
DEFAULT_CONNECT_TIMEOUT = 3.0
# Frames are queued and flushed together until this many bytes are waiting; past it they
# are handed to the transport at once so that a writer that never yields stays bounded.
_COALESCE_LIMIT = 256 * 1024
# Payloads at least this big skip the coalescing list: joining them would copy them.
_DIRECT_WRITE = 64 * 1024
_WRITE_HIGH_WATER = 1024 * 1024
_DEFAULT_MAX_INFLIGHT = 4096
# Call timeouts are grouped into buckets this many seconds wide, one loop timer per bucket
# instead of one per call; a timeout fires up to this much late, never early.
_TIMEOUT_GRANULARITY = 0.01
# How long a connection closed for misbehaviour may take to flush its last frame.
_CLOSE_GRACE = 1.0


@dataclass(slots=True)
class TransportStats:
    """Bytes read from and written to the sockets (frames, handshakes; TLS records counted as
    the plain bytes they carry), for metrics. Plain ints: an add per read or write."""

    bytes_in: int = 0
    bytes_out: int = 0


@dataclass(slots=True)
class Request:
    code: int
    group: str | None
    body: dict[str, Any]
    id: int
    peer: str
    oneway: bool = False


@dataclass(slots=True)
class Response:
    code: int = ResponseCode.SUCCESS
    body: dict[str, Any] = field(default_factory=dict)
    message: str | None = None

    @property
    def ok(self) -> bool:
        return self.code == ResponseCode.SUCCESS

    def check(self) -> Response:
        """Return self if successful, else raise ``DLedgerError`` with the response's code."""
        if self.code != ResponseCode.SUCCESS:
            try:
                code = ResponseCode(self.code)
            except ValueError:
                code = ResponseCode.UNKNOWN
            raise DLedgerError(code, self.message or "")
        return self


Handler = Callable[[Request], Awaitable["Response | dict[str, Any] | None"]]


if sys.version_info >= (3, 12):

    def _start_task(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        # Eager start: a handler that answers without waiting (a vote, a heartbeat) runs to
        # completion right here, with no task scheduling round trip through the loop.
        return asyncio.Task(coro, loop=loop, eager_start=True)  # type: ignore[call-arg,unused-ignore]

else:

    def _start_task(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        return loop.create_task(coro)


async def cancel_tasks(tasks: Iterable[asyncio.Task[Any]], rounds: int = 10, wait: float = 0.5) -> None:
    """Cancel ``tasks`` and wait for them to end, cancelling again the ones still running.

    Python 3.11's ``asyncio.wait_for`` can lose a cancellation that arrives as the awaited
    future completes (cpython gh-86296, fixed in 3.12): the task then runs on, and a plain
    ``gather`` after one ``cancel()`` waits for it forever. A task that outlives every round
    is logged and left to ``asyncio.run``'s final cancellation.
    """
    pending = {t for t in tasks if not t.done()}
    for _ in range(rounds):
        if not pending:
            return
        for t in pending:
            t.cancel()
        _done, pending = await asyncio.wait(pending, timeout=wait)
    if pending:
        log.error("%d task(s) did not stop when cancelled: %s", len(pending), [t.get_name() for t in pending])


def _format_peer(peername: Any) -> str:
    if isinstance(peername, tuple) and len(peername) >= 2:
        return f"{peername[0]}:{peername[1]}"
    return str(peername)


class _Connection(asyncio.BufferedProtocol):
    """What both ends share: frame decoding, coalesced writes, flow control, closing."""

    def __init__(self, max_frame: int, initial_max_frame: int, stats: TransportStats) -> None:
        self.max_frame = max_frame
        self.stats = stats
        self.decoder = FrameDecoder(initial_max_frame)
        self.packer = new_packer()
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.closed = False
        self.closing = False  # no more frames are processed once set
        self._out: list[bytes] = []
        self._out_size = 0
        self._flush_handle: asyncio.Handle | None = None
        self._paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self._loop = asyncio.get_running_loop()

    # --- asyncio.BufferedProtocol -------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.peer = _format_peer(transport.get_extra_info("peername"))
        transport.set_write_buffer_limits(high=_WRITE_HIGH_WATER)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.decoder.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self.stats.bytes_in += nbytes
        try:
            frames = self.decoder.buffer_updated(nbytes)
        except FrameError as e:
            self.protocol_error(str(e))
            return
        for frame in frames:
            if self.closing:
                return
            self.frame_received(frame)

    def eof_received(self) -> bool:
        if self.decoder.buffered:
            log.warning("%s closed the connection mid-frame (%d bytes)", self.peer, self.decoder.buffered)
        return False  # let the transport close itself

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_drainers(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = self.closing = True
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        self._out.clear()
        self._wake_drainers(exc or ConnectionResetError("connection closed"))

    # --- for subclasses -------------------------------------------------------------------
    def frame_received(self, frame: Frame) -> None:
        raise NotImplementedError

    def protocol_error(self, reason: str) -> None:
        log.warning("closing connection with %s: %s", self.peer, reason)
        self.abort()

    # --- writing ----------------------------------------------------------------------------
    @property
    def paused(self) -> bool:
        return self._paused

    def write_frame(self, frame: Frame) -> None:
        """Queue a frame; raises FrameError/TypeError/ValueError if it cannot be encoded."""
        if self.closed or self.transport is None:
            raise ConnectionResetError("connection closed")
        parts = encode_parts(frame, self.packer, self.max_frame)
        size = sum(map(len, parts))
        self.stats.bytes_out += size
        if size >= _DIRECT_WRITE:
            self.flush()
            for part in parts:
                self.transport.write(part)
            return
        if self._flush_handle is None:
            # The first frame of a loop turn goes out now (a lone request or ack should not
            # wait a turn); the ones after it in the same turn are joined and written once, by
            # the flush scheduled here.
            self.transport.write(parts[0] + parts[1] if len(parts) == 2 else b"".join(parts))
            self._flush_handle = self._loop.call_soon(self.flush)
            return
        self._out += parts
        self._out_size += size
        if self._out_size >= _COALESCE_LIMIT:
            self.flush()
            self._flush_handle = self._loop.call_soon(self.flush)

    def flush(self) -> None:
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        if not self._out or self.transport is None or self.closed:
            return
        data = self._out[0] + self._out[1] if len(self._out) == 2 else b"".join(self._out)
        self._out.clear()
        self._out_size = 0
        self.transport.write(data)

    async def drain(self) -> None:
        if not self._paused:
            return
        if self.closed:
            raise ConnectionResetError("connection closed")
        if self._drain_waiter is None:
            self._drain_waiter = self._loop.create_future()
        await asyncio.shield(self._drain_waiter)

    def _wake_drainers(self, exc: BaseException | None) -> None:
        waiter, self._drain_waiter = self._drain_waiter, None
        if waiter is not None and not waiter.done():
            if exc is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(exc)
                waiter.exception()  # mark retrieved: nobody may be waiting any more

    def close(self) -> None:
        """Flush what is queued and close; abort if the peer does not take it in time."""
        if self.transport is None or self.closed or self.closing:
            return
        self.closing = True
        self.flush()
        self.transport.close()
        self._loop.call_later(_CLOSE_GRACE, self.abort)

    def abort(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.abort()
        self.closed = self.closing = True


# ----------------------------------------------------------------------------------------------
# Server
# ----------------------------------------------------------------------------------------------


class _ServerConnection(_Connection):
    _AWAIT_HELLO, _AWAIT_PROOF, _READY = range(3)

    def __init__(self, server: RpcServer) -> None:
        self.server = server
        secret = server._key is not None
        super().__init__(server.max_frame, auth.HANDSHAKE_MAX_FRAME if secret else server.max_frame, server.stats)
        self.state = self._AWAIT_HELLO if secret else self._READY
        self.tasks: set[asyncio.Task[None]] = set()
        self._reading_paused = False
        self._nonces: tuple[bytes, bytes] = (b"", b"")
        self._auth_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.server._conns.add(self)
        if self.state != self._READY:
            self._auth_timer = self._loop.call_later(self.server.handshake_timeout, self._handshake_expired)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.state == self._AWAIT_PROOF and not self.closing:
            # What a client holding another secret does: it checks our proof first, and leaves.
            self.server.warn_auth(self.peer, "the client left after our challenge (does it hold another secret?)")
        super().connection_lost(exc)
        self.server._conns.discard(self)
        if self._auth_timer is not None:
            self._auth_timer.cancel()
        # Handlers already running are left to finish (a node may be mid-append); their
        # responses are dropped.

    def _handshake_expired(self) -> None:
        if self.state != self._READY and not self.closed:
            self._auth_fail("handshake timed out")

    def _auth_fail(self, reason: str) -> None:
        self.server.warn_auth(self.peer, reason)
        try:
            self.write_frame(Frame(Kind.AUTH, 0, auth.FAIL, message=reason))
        except Exception:
            pass
        self.close()

    def frame_received(self, frame: Frame) -> None:
        if self.state == self._READY:
            kind = frame.kind
            if kind == Kind.REQUEST or kind == Kind.ONEWAY:
                self._dispatch(frame)
            elif kind == Kind.AUTH:
                self._auth_fail(
                    "this server has no shared secret configured"
                    if self.server._key is None
                    else "unexpected handshake frame"
                )
            else:
                self.protocol_error(f"unexpected frame kind {kind} from a client")
            return
        if frame.kind != Kind.AUTH:
            self._auth_fail("authentication required: this server has a shared secret")
            return
        key = self.server._key
        assert key is not None
        if self.state == self._AWAIT_HELLO and frame.code == auth.HELLO:
            client_nonce = frame.body.get("n")
            if not auth.valid_nonce(client_nonce):
                self._auth_fail("bad client nonce")
                return
            assert isinstance(client_nonce, bytes)
            server_nonce = auth.new_nonce()
            self._nonces = (client_nonce, server_nonce)
            body = {"n": server_nonce, "p": auth.server_proof(key, client_nonce, server_nonce)}
            self.write_frame(Frame(Kind.AUTH, 0, auth.CHALLENGE, body=body))
            self.state = self._AWAIT_PROOF
        elif self.state == self._AWAIT_PROOF and frame.code == auth.PROOF:
            if not auth.verify(auth.client_proof(key, *self._nonces), frame.body.get("p")):
                self._auth_fail("wrong shared secret")
                return
            self.state = self._READY
            self.decoder.max_frame = self.max_frame
            if self._auth_timer is not None:
                self._auth_timer.cancel()
                self._auth_timer = None
            self.write_frame(Frame(Kind.AUTH, 0, auth.OK))
        else:
            self._auth_fail(f"unexpected handshake step {frame.code}")

    def _dispatch(self, frame: Frame) -> None:
        request = Request(frame.code, frame.group, frame.body, frame.id, self.peer, frame.kind == Kind.ONEWAY)
        oneway = self.server.oneway_handler
        if oneway is not None and request.oneway:
            try:
                oneway(request)
            except Exception:
                log.exception("one-way handler failed on code %s from %s", request.code, self.peer)
            return
        task = _start_task(self._loop, self._serve(request))
        # An eagerly started task (3.12+) may already be done: nothing to track then.
        if not task.done():
            self.tasks.add(task)
            if len(self.tasks) >= self.server.max_inflight and not self._reading_paused and self.transport is not None:
                self._reading_paused = True
                self.transport.pause_reading()

    def _served(self) -> None:
        # Called by the task itself rather than as a done callback: one loop callback less per request.
        task = asyncio.current_task()
        if task is not None:
            self.tasks.discard(task)
        if self._reading_paused and len(self.tasks) <= self.server.max_inflight // 2 and not self.closed:
            self._reading_paused = False
            assert self.transport is not None
            self.transport.resume_reading()

    async def _serve(self, request: Request) -> None:
        try:
            await self._serve_one(request)
        finally:
            self._served()

    async def _serve_one(self, request: Request) -> None:
        try:
            result = await self.server.handler(request)
            if isinstance(result, Response):
                response = result
            elif result is None:
                response = Response()
            elif isinstance(result, dict):
                response = Response(ResponseCode.SUCCESS, result)
            else:
                raise TypeError(f"handler returned {type(result).__name__}, want Response, dict or None")
        except DLedgerError as e:
            response = Response(e.code, message=e.message or e.code.name)
        except Exception as e:
            # The traceback stays in our log; the peer only learns the code and a one-line message.
            log.exception("handler failed on request code %s from %s", request.code, self.peer)
            response = Response(ResponseCode.INTERNAL_ERROR, message=f"{type(e).__name__}: {e}")
        if request.oneway or self.closed:
            return
        try:
            frame = Frame(Kind.RESPONSE, request.id, int(response.code), None, response.body, response.message)
            self.write_frame(frame)
        except ConnectionResetError:
            return
        except (FrameError, TypeError, ValueError, OverflowError) as e:
            log.error("response to request code %s from %s cannot be sent: %s", request.code, self.peer, e)
            message = f"response could not be encoded: {e}"
            self.write_frame(Frame(Kind.RESPONSE, request.id, ResponseCode.INTERNAL_ERROR, message=message))
        if self._paused:
            try:
                await self.drain()
            except ConnectionError:
                pass


class RpcServer:
    """Serves framed requests with ``handler``; binds 127.0.0.1 unless told otherwise.

    ``handler(request)`` returns a ``Response``, a dict (a successful response body) or None
    (success, empty body). Raising ``DLedgerError`` answers with its code; any other
    exception answers ``INTERNAL_ERROR`` with a one-line message. Requests of one
    connection run concurrently.

    ``oneway_handler``, when given, takes one-way frames instead: it is called right where
    the frame is read, with no task, and must not block (an exception is logged).
    """

    def __init__(
        self,
        handler: Handler,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        secret: str | bytes | None = None,
        ssl: ssl_module.SSLContext | None = None,
        max_frame: int = DEFAULT_MAX_FRAME,
        handshake_timeout: float = auth.DEFAULT_HANDSHAKE_TIMEOUT,
        max_inflight: int = _DEFAULT_MAX_INFLIGHT,
        oneway_handler: Callable[[Request], None] | None = None,
    ) -> None:
        self.handler = handler
        self.oneway_handler = oneway_handler
        self.host = host
        self._port = port
        self._key = auth.as_key(secret) if secret is not None else None
        self._ssl = ssl
        self.max_frame = max_frame
        self.handshake_timeout = handshake_timeout
        self.max_inflight = max(2, max_inflight)
        self._server: asyncio.Server | None = None
        self._conns: set[_ServerConnection] = set()
        self.stats = TransportStats()
        self._auth_warnings = RepeatLimiter()

    def warn_auth(self, peer: str, reason: str) -> None:
        """A failed handshake, logged once a minute per client host (a client without the
        secret retries every few seconds), with the count held back."""
        held = self._auth_warnings.allow(peer.rsplit(":", 1)[0])
        if held is not None:
            log.warning("authentication of %s failed: %s%s", peer, reason, held_back(held))

    @property
    def port(self) -> int:
        return self._port

    @property
    def address(self) -> str:
        return f"{self.host}:{self._port}"

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _ServerConnection(self), self.host, self._port, ssl=self._ssl, reuse_address=True
        )
        self._port = self._server.sockets[0].getsockname()[1]
        log.info(
            "serving on %s:%d%s%s",
            self.host,
            self._port,
            " (TLS)" if self._ssl else "",
            " (shared secret)" if self._key else "",
        )

    async def close(self) -> None:
        if self._server is None:
            return
        server, self._server = self._server, None
        server.close()
        tasks = [t for c in self._conns for t in c.tasks]
        for conn in list(self._conns):
            conn.abort()
        await cancel_tasks(tasks)
        await server.wait_closed()

    async def __aenter__(self) -> RpcServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


# ----------------------------------------------------------------------------------------------
# Client
# ----------------------------------------------------------------------------------------------


class _ClientConnection(_Connection):
    def __init__(self, client: RpcClient, addr: str) -> None:
        secret = client._key is not None
        super().__init__(client.max_frame, auth.HANDSHAKE_MAX_FRAME if secret else client.max_frame, client.stats)
        self.client = client
        self.addr = addr
        self.pending: dict[int, asyncio.Future[Response]] = {}
        self._next_id = 1
        self._timeout_buckets: dict[int, list[int]] = {}
        self._auth_waiter: asyncio.Future[Frame] | None = None
        self._failure: DLedgerError | None = None  # why we are closing, for the pending calls

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.client._lost(self)
        error = self._failure or DLedgerError(
            ResponseCode.NETWORK_ERROR, f"connection to {self.addr} lost" + (f": {exc}" if exc else "")
        )
        pending, self.pending = self.pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(error)
        waiter, self._auth_waiter = self._auth_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)

    def protocol_error(self, reason: str) -> None:
        self._failure = DLedgerError(ResponseCode.NETWORK_ERROR, f"protocol error from {self.addr}: {reason}")
        super().protocol_error(reason)

    def frame_received(self, frame: Frame) -> None:
        if frame.kind == Kind.RESPONSE:
            fut = self.pending.pop(frame.id, None)
            # A missing id is a response that arrived after its call timed out.
            if fut is not None and not fut.done():
                fut.set_result(Response(frame.code, frame.body, frame.message))
        elif frame.kind == Kind.AUTH:
            if self._auth_waiter is not None and not self._auth_waiter.done():
                self._auth_waiter.set_result(frame)
            elif frame.code == auth.FAIL and self.client._key is None:
                self._failure = auth.AuthenticationError(
                    f"{self.addr} requires a shared secret and this client has none ({frame.message})"
                )
                self.client._refused(self.addr, self._failure)
                self.abort()
            else:
                self.protocol_error(f"unexpected handshake frame (step {frame.code})")
        else:
            self.protocol_error(f"unexpected frame kind {frame.kind} from a server")

    async def _next_auth_frame(self) -> Frame:
        self._auth_waiter = self._loop.create_future()
        try:
            return await self._auth_waiter
        finally:
            self._auth_waiter = None

    async def handshake(self, key: bytes) -> None:
        client_nonce = auth.new_nonce()
        self.write_frame(Frame(Kind.AUTH, 0, auth.HELLO, body={"n": client_nonce}))
        frame = await self._next_auth_frame()
        if frame.code == auth.FAIL:
            raise auth.AuthenticationError(f"{self.addr} refused the handshake: {frame.message}")
        server_nonce = frame.body.get("n")
        if frame.code != auth.CHALLENGE or not auth.valid_nonce(server_nonce):
            raise auth.AuthenticationError(f"{self.addr} sent a bad handshake challenge")
        assert isinstance(server_nonce, bytes)
        if not auth.verify(auth.server_proof(key, client_nonce, server_nonce), frame.body.get("p")):
            # Checked before we prove anything: a server without the secret gets nothing from us.
            raise auth.AuthenticationError(f"{self.addr} failed to prove the shared secret (wrong secret?)")
        proof = auth.client_proof(key, client_nonce, server_nonce)
        self.write_frame(Frame(Kind.AUTH, 0, auth.PROOF, body={"p": proof}))
        frame = await self._next_auth_frame()
        if frame.code != auth.OK:
            raise auth.AuthenticationError(f"{self.addr} rejected our proof: {frame.message or frame.code}")
        self.decoder.max_frame = self.max_frame

    def _expire_bucket(self, bucket: int) -> None:
        for rid in self._timeout_buckets.pop(bucket, ()):
            # Calls that completed were already removed from pending.
            fut = self.pending.pop(rid, None)
            if fut is not None and not fut.done():
                fut.set_exception(DLedgerError(ResponseCode.TIMEOUT, f"no response from {self.addr}"))

    def _arm_timeout(self, rid: int, timeout: float) -> None:
        bucket = math.ceil((self._loop.time() + max(timeout, 0.0)) / _TIMEOUT_GRANULARITY)
        rids = self._timeout_buckets.get(bucket)
        if rids is None:
            rids = self._timeout_buckets[bucket] = []
            self._loop.call_at(bucket * _TIMEOUT_GRANULARITY, self._expire_bucket, bucket)
        rids.append(rid)

    async def request(self, frame: Frame, timeout: float) -> Response:
        rid = self._next_id
        self._next_id += 1
        frame.id = rid
        self._write_or_raise(frame)
        fut: asyncio.Future[Response] = self._loop.create_future()
        self.pending[rid] = fut
        # Not asyncio.wait_for nor a timer per call: both cost a loop callback per call, which
        # shows when calls are pipelined.
        self._arm_timeout(rid, timeout)
        try:
            if self._paused:
                await asyncio.wait_for(self.drain(), max(timeout, 0.0))
            return await fut
        except (asyncio.TimeoutError, ConnectionError) as e:
            if isinstance(e, asyncio.TimeoutError):
                raise DLedgerError(ResponseCode.TIMEOUT, f"{self.addr}: send buffer did not drain") from None
            raise DLedgerError(ResponseCode.NETWORK_ERROR, f"connection to {self.addr} lost") from None
        finally:
            self.pending.pop(rid, None)

    def _write_or_raise(self, frame: Frame) -> None:
        try:
            self.write_frame(frame)
        except ConnectionResetError:
            raise DLedgerError(ResponseCode.NETWORK_ERROR, f"connection to {self.addr} closed") from None
        except (FrameError, TypeError, ValueError, OverflowError) as e:
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"request cannot be encoded: {e}") from None


@dataclass(slots=True)
class _Endpoint:
    """Connection state of one address."""

    conn: _ClientConnection | None = None
    connecting: asyncio.Task[_ClientConnection] | None = None
    failures: int = 0  # consecutive failed connection attempts
    attempts: int = 0  # all connection attempts, for tests and metrics
    retry_at: float = 0.0
    last_error: DLedgerError | None = None
    refused: bool = False  # the last attempt was refused: nothing listens at the address


class RpcClient:
    """Calls to any number of servers, one multiplexed connection per address.

    Failures raise ``DLedgerError``: ``TIMEOUT`` when no response came in time,
    ``NETWORK_ERROR`` when the connection could not be made or was lost (an
    ``AuthenticationError`` when the shared-secret handshake failed). After a failed
    connection attempt to an address, calls to it fail at once until an exponentially
    growing, jittered delay (``backoff_base`` doubling up to ``backoff_max``) has passed;
    the next call then tries again. A connection that was up and is lost is retried
    at once.
    """

    def __init__(
        self,
        *,
        secret: str | bytes | None = None,
        ssl: ssl_module.SSLContext | None = None,
        max_frame: int = DEFAULT_MAX_FRAME,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        timeout: float = DEFAULT_TIMEOUT,
        backoff_base: float = 0.05,
        backoff_max: float = 2.0,
    ) -> None:
        self._key = auth.as_key(secret) if secret is not None else None
        self._ssl = ssl
        self.max_frame = max_frame
        self.connect_timeout = connect_timeout
        self.timeout = timeout
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._endpoints: dict[str, _Endpoint] = {}
        self._closed = False
        self.stats = TransportStats()
        # Called with the address each time a connection is made (a first one, or again after
        # one failed or was lost): frames written to a lost connection may never have arrived.
        self.on_connect: Callable[[str], None] | None = None

    def pending(self, addr: str | None = None) -> int:
        """Calls waiting for a response (to ``addr``, or to all addresses)."""
        eps = [self._endpoints.get(addr)] if addr is not None else list(self._endpoints.values())
        return sum(len(ep.conn.pending) for ep in eps if ep is not None and ep.conn is not None)

    def endpoint_failures(self, addr: str) -> int:
        ep = self._endpoints.get(addr)
        return ep.failures if ep else 0

    def connection_attempts(self, addr: str) -> int:
        ep = self._endpoints.get(addr)
        return ep.attempts if ep else 0

    async def call(
        self,
        addr: str,
        code: int,
        body: dict[str, Any] | None = None,
        group: str | None = None,
        timeout: float | None = None,
    ) -> Response:
        """Send a request and wait for its response (whatever its code)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.timeout if timeout is None else timeout)
        conn = await self._connected(addr, deadline)
        return await conn.request(Frame(Kind.REQUEST, 0, int(code), group, body or {}), deadline - loop.time())

    async def send(
        self,
        addr: str,
        code: int,
        body: dict[str, Any] | None = None,
        group: str | None = None,
        timeout: float | None = None,
    ) -> None:
        """Fire and forget: the server runs the handler and sends nothing back."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.timeout if timeout is None else timeout)
        conn = await self._connected(addr, deadline)
        conn._write_or_raise(Frame(Kind.ONEWAY, 0, int(code), group, body or {}))
        if conn.paused:
            try:
                await asyncio.wait_for(conn.drain(), max(deadline - loop.time(), 0.0))
            except asyncio.TimeoutError:
                raise DLedgerError(ResponseCode.TIMEOUT, f"{addr}: send buffer did not drain") from None
            except ConnectionError:
                raise DLedgerError(ResponseCode.NETWORK_ERROR, f"connection to {addr} lost") from None

    def send_nowait(self, addr: str, code: int, body: dict[str, Any], group: str | None = None) -> bool:
        """``send`` without a coroutine, for the common case: writes the frame and returns True
        when a connection to ``addr`` is up and its buffer is not full; otherwise writes
        nothing and returns False (then ``send``, which connects and waits). Encoding errors
        and a connection found closed raise as in ``send``."""
        ep = self._endpoints.get(addr)
        conn = ep.conn if ep is not None else None
        if conn is None or conn.closed or conn.paused:
            return False
        conn._write_or_raise(Frame(Kind.ONEWAY, 0, int(code), group, body))
        return True

    async def _connected(self, addr: str, deadline: float) -> _ClientConnection:
        """The live connection to ``addr``, made (or remade) when there is none."""
        ep = self._endpoints.get(addr)
        conn = ep.conn if ep is not None else None
        if conn is None or conn.closed:
            conn = await self._connection(addr, deadline)
        return conn

    async def close(self) -> None:
        self._closed = True
        endpoints, self._endpoints = self._endpoints, {}
        for ep in endpoints.values():
            if ep.connecting is not None:
                ep.connecting.cancel()
            if ep.conn is not None:
                ep.conn._failure = DLedgerError(ResponseCode.NETWORK_ERROR, "client closed")
                ep.conn.abort()
        # Let connection_lost callbacks fail the pending calls before we return.
        await asyncio.sleep(0)

    async def __aenter__(self) -> RpcClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- connections --------------------------------------------------------------------------
    def _lost(self, conn: _ClientConnection) -> None:
        ep = self._endpoints.get(conn.addr)
        if ep is not None and ep.conn is conn:
            ep.conn = None

    @property
    def closed(self) -> bool:
        return self._closed

    def refuses_authentication(self, addr: str) -> bool:
        """The last connection to ``addr`` failed the shared-secret handshake (or the server
        asked for a secret this client does not have). Retrying will not help until one side's
        secret changes; callers that have other servers to try, or none left, can tell."""
        ep = self._endpoints.get(addr)
        return ep is not None and ep.conn is None and isinstance(ep.last_error, auth.AuthenticationError)

    def refuses_connection(self, addr: str) -> bool:
        """The last attempt to connect to ``addr`` was refused (ECONNREFUSED: nothing listens
        there now), and no connection is up."""
        ep = self._endpoints.get(addr)
        return ep is not None and ep.conn is None and ep.refused

    def _failed(self, addr: str, ep: _Endpoint, error: DLedgerError, delay: float | None = None) -> None:
        """A connection attempt failed: the next waits a growing, jittered delay."""
        ep.failures += 1
        ep.last_error = error
        if delay is None:
            delay = min(self.backoff_max, self.backoff_base * 2 ** min(ep.failures - 1, 30))
        # Jitter keeps the nodes of a cluster from reconnecting in lockstep after an outage.
        ep.retry_at = asyncio.get_running_loop().time() + delay * random.uniform(0.5, 1.0)
        log.info("connection to %s failed (%s); retry in at most %.3fs", addr, error.message, delay)

    def _refused(self, addr: str, error: auth.AuthenticationError) -> None:
        """A connection was made, then refused for want of a secret: the next attempt waits the
        longest delay (the connection itself worked, so the usual growth never starts), rather
        than reconnecting on every call and logging a refusal on the server each time."""
        ep = self._endpoints.get(addr)
        if ep is not None:
            self._failed(addr, ep, error, self.backoff_max)

    async def _connection(self, addr: str, deadline: float) -> _ClientConnection:
        if self._closed:
            raise DLedgerError(ResponseCode.NETWORK_ERROR, "client closed")
        loop = asyncio.get_running_loop()
        ep = self._endpoints.get(addr)
        if ep is None:
            parse_addr(addr)  # reject a bad address before it gets an endpoint
            ep = self._endpoints[addr] = _Endpoint()
        if ep.connecting is None:
            now = loop.time()
            if now < ep.retry_at:
                if isinstance(ep.last_error, auth.AuthenticationError):
                    raise auth.AuthenticationError(ep.last_error.message)  # the same answer until retried
                raise DLedgerError(
                    ResponseCode.NETWORK_ERROR,
                    f"{addr} unreachable ({ep.last_error.message if ep.last_error else '?'}); "
                    f"next attempt in {ep.retry_at - now:.3f}s",
                )
            ep.connecting = loop.create_task(self._connect(addr, ep))
            # Retrieve the outcome even if every caller timed out, so asyncio does not log it.
            ep.connecting.add_done_callback(lambda t: t.cancelled() or t.exception())
        try:
            # Shielded: one caller's timeout must not cancel the attempt others are waiting on.
            return await asyncio.wait_for(asyncio.shield(ep.connecting), max(deadline - loop.time(), 0.0))
        except asyncio.TimeoutError:
            raise DLedgerError(ResponseCode.TIMEOUT, f"connecting to {addr} took too long") from None

    async def _connect(self, addr: str, ep: _Endpoint) -> _ClientConnection:
        loop = asyncio.get_running_loop()
        ep.attempts += 1
        ep.refused = False
        conn: _ClientConnection | None = None
        try:
            host, port = parse_addr(addr)
            try:
                _, proto = await asyncio.wait_for(
                    loop.create_connection(
                        lambda: _ClientConnection(self, addr),
                        host,
                        port,
                        ssl=self._ssl,
                        server_hostname=host if self._ssl is not None else None,
                    ),
                    self.connect_timeout,
                )
                conn = proto
                if self._key is not None:
                    await asyncio.wait_for(conn.handshake(self._key), self.connect_timeout)
            except DLedgerError:
                raise
            except asyncio.TimeoutError:
                raise DLedgerError(ResponseCode.NETWORK_ERROR, f"connecting to {addr} timed out") from None
            except (OSError, EOFError) as e:  # refused, unreachable, TLS verification (ssl.SSLError is an OSError)
                ep.refused = isinstance(e, ConnectionRefusedError)
                raise DLedgerError(ResponseCode.NETWORK_ERROR, f"cannot connect to {addr}: {e}") from None
        except BaseException as e:
            if conn is not None:
                conn.abort()
            if isinstance(e, DLedgerError):
                self._failed(addr, ep, e)
            raise
        finally:
            ep.connecting = None
        if self._closed or self._endpoints.get(addr) is not ep:
            conn.abort()
            raise DLedgerError(ResponseCode.NETWORK_ERROR, "client closed")
        ep.failures = 0
        ep.last_error = None
        ep.refused = False
        ep.conn = conn
        if self.on_connect is not None:
            try:
                self.on_connect(addr)
            except Exception:
                log.exception("on_connect for %s failed", addr)
        return conn
