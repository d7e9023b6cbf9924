"""The node runtime: drives the sans-IO consensus objects with real time, the store and sockets.

One asyncio loop per process, and every call on a ``RaftNode`` runs on it, one at a time,
as its input arrives: a peer message straight from the connection that read it, a client
call from its request, the tick every 10 ms. What a call returns is acted on at once when
it is early (the leader's pushes, append results) or when no flush is in flight; the rest
waits, in order, for a flush that started after the call's writes (group commit: one msync
at a time, covering every write made before it started; a big one on a thread of its own,
a small one on the loop at the end of its turn, where it costs less than the two thread
hand-offs). Acks and votes therefore never leave before the writes they speak for are on
disk, and the loop waits on the disk only for an msync of a few pages. Each hop through a
queue or a task costs a loop turn, which on a busy machine is a scheduling delay: the hot
path has none.

Peer messages travel one-way (the transport's ``send``); the consensus layer correlates a
response with its request itself. Client calls (append, get, metadata, leadership transfer)
are request/response RPCs answered when the consensus layer reports them done.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import faulthandler
import functools
import logging
import os
import random
import signal
import ssl as ssl_module
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from dledger.api import (
    AppendRequest,
    AppendResponse,
    GetRequest,
    GetResponse,
    LeaderHint,
    MetadataResponse,
    TransferRequest,
    TransferResponse,
    UnknownGroupResponse,
)
from dledger.application import ApplicationFactory, GroupApplication, GroupHandle
from dledger.codes import RequestCode, ResponseCode
from dledger.config import MEMORY, DLedgerConfig
from dledger.errors import DLedgerError
from dledger.log_limit import RepeatLimiter, held_back
from dledger.metrics import (
    FLUSH_BUCKETS,
    AppMetric,
    GroupSample,
    GroupStats,
    LatencyHistogram,
    MetricsCollector,
    MetricsServer,
    Sample,
)
from dledger.net.auth import AuthenticationError
from dledger.net.transport import Request, Response, RpcClient, RpcServer, cancel_tasks
from dledger.peers import parse_addr, parse_peers
from dledger.raft.effects import AppendDone, Output, ReadDone, RoleChanged, Send, TransferDone
from dledger.raft.flush_order import FlushOrder, Ready
from dledger.raft.member_state import Role
from dledger.raft.messages import (
    MESSAGE_TYPES,
    AppendEntryResponse,
    HeartBeatRequest,
    Message,
    VoteRequest,
    message_from_wire,
)
from dledger.raft.node import RaftNode, error_response
from dledger.raft.timings import RaftTimings
from dledger.store.base import DLedgerStore
from dledger.store.memory import MemoryStore
from dledger.term_file import FileTermStore

log = logging.getLogger(__name__)

TICK_MS = 10
# A flush of at most this many bytes of entries, started by a write with none in flight, runs
# on the loop: its msync takes as long on either side, and the thread would add two hand-offs
# (wake it, then wake the loop) to a synchronous append's path on the leader and on a
# follower. A bigger flush, or one that follows another, takes the thread, so that the loop
# goes on while the disk works.
INLINE_FLUSH_MAX_BYTES = 64 * 1024
FLUSH_RETRY_MS = 100
SHUTDOWN_GRACE_S = 15
# Peer messages waiting for a slow or dead peer are dropped past this; Raft resends.
PEER_QUEUE_LIMIT = 10_000
# The most entries (and bytes) one GET may return.
GET_MAX_ENTRIES = 1024
GET_MAX_BYTES = 16 * 1024 * 1024


@dataclass(slots=True)
class _Group:
    config: DLedgerConfig
    node: RaftNode
    store: DLedgerStore
    peers: dict[str, str]
    waiters: dict[int, asyncio.Future[Any]] = field(default_factory=dict)
    stats: GroupStats = field(default_factory=GroupStats)
    app: GroupApplication | None = None
    # The committed index the application was last told of.
    app_committed: int = -2


class _GroupHandle:
    """The server's ``GroupHandle``: what a ``GroupApplication`` may do with its group."""

    def __init__(self, server: NodeServer, group: _Group) -> None:
        self._server = server
        self._g = group

    @property
    def name(self) -> str:
        return self._g.config.group

    @property
    def self_id(self) -> str:
        return self._g.config.self_id

    @property
    def address(self) -> str:
        return self._server.address

    @property
    def peers(self) -> dict[str, str]:
        return dict(self._g.peers)

    @property
    def role(self) -> Role:
        return self._g.node.role

    @property
    def term(self) -> int:
        return self._g.node.term

    @property
    def leader_id(self) -> str | None:
        return self._g.node.leader_id

    @property
    def is_leader(self) -> bool:
        return self._g.node.is_leader

    @property
    def store(self) -> DLedgerStore:
        return self._g.store

    def propose(self, bodies: Sequence[bytes]) -> asyncio.Future[AppendEntryResponse]:
        """Append ``bodies`` as one batch now (the leader writes them to its log before this
        returns, or refuses at once); the future gets the consensus answer (SUCCESS once a
        quorum holds them). Call on the loop."""
        g = self._g
        start = time.perf_counter()
        done = self._server._call(g, lambda now: g.node.propose(now, bodies))
        out: asyncio.Future[AppendEntryResponse] = asyncio.get_running_loop().create_future()

        def relay(f: asyncio.Future[Any]) -> None:
            if out.done():
                return
            if f.cancelled():
                out.cancel()
            elif f.exception() is not None:
                out.set_exception(f.exception())  # type: ignore[arg-type]
            else:
                r = f.result().response
                # The same metrics as client appends.
                g.stats.append_latency.observe(time.perf_counter() - start)
                if r.code == ResponseCode.SUCCESS:
                    g.stats.appended_entries += len(bodies)
                else:
                    name = _code_name(r.code)
                    g.stats.append_errors[name] = g.stats.append_errors.get(name, 0) + 1
                out.set_result(r)

        done.add_done_callback(relay)
        return out


class NodeServer:
    """One process's member of one or more groups (DLedger's multi-Raft), all on one address.

    Every config must name the same ``self_id`` address in its ``peers``; each group keeps
    its files in its own ``<store_base_dir>/dledger-<self_id>/``.
    """

    def __init__(
        self,
        configs: DLedgerConfig | Sequence[DLedgerConfig],
        *,
        host: str | None = None,
        secret: str | bytes | None = None,
        server_ssl: ssl_module.SSLContext | None = None,
        client_ssl: ssl_module.SSLContext | None = None,
        timings: RaftTimings | None = None,
        seed: int | None = None,
        application_factory: ApplicationFactory | None = None,
    ) -> None:
        """``application_factory(config, address)`` gives each group its ``GroupApplication``
        (or None); a group whose config has ``message_store`` needs one that gives it the
        RocketMQ message service (``dledger.rocketmq.broker.message_service_factory``)."""
        configs = [configs] if isinstance(configs, DLedgerConfig) else list(configs)
        if not configs:
            raise ValueError("no group to serve")
        self.groups: dict[str, _Group] = {}
        addr: str | None = None
        rng = random.Random(seed)
        for cfg in configs:
            if cfg.group in self.groups:
                raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"group {cfg.group!r} given twice")
            peers = parse_peers(cfg.peers)
            if cfg.self_id not in peers:
                raise DLedgerError(
                    ResponseCode.UNEXPECTED_ARGUMENT, f"self id {cfg.self_id!r} is not among the peers {sorted(peers)}"
                )
            mine = peers[cfg.self_id]
            if addr is not None and mine != addr:
                raise DLedgerError(
                    ResponseCode.UNEXPECTED_ARGUMENT, f"groups of one process must share its address ({addr} != {mine})"
                )
            addr = mine
            if cfg.message_store and cfg.store_path_root_dir:
                # The message store root holds the node directory (RocketMQ's storePathRootDir).
                cfg = cfg.replace(store_base_dir=cfg.store_path_root_dir)
            app = self._open_application(cfg, mine, application_factory)
            store = app.node_store if app is not None and app.node_store is not None else self._open_store(cfg)
            term_store = FileTermStore(cfg.default_path)
            # DLedger paces pushes to a lagging follower only when its entries come off disk.
            node_timings = replace(
                timings or RaftTimings().scaled(cfg.raft_timing_scale), push_throttle=not isinstance(store, MemoryStore)
            )
            # Request ids must never repeat across restarts (the replay fence): the wall clock at
            # start grows across restarts and reboots, where the monotonic clock does not.
            node = RaftNode(
                cfg,
                store,
                term_store,
                random.Random(rng.random()),
                timings=node_timings,
                incarnation=int(time.time() * 1000),
            )
            self.groups[cfg.group] = _Group(cfg, node, store, peers, app=app)
        assert addr is not None
        self._stores = [g.store for g in self.groups.values()]
        self.address = addr
        _bind_host, port = parse_addr(addr)
        self.host = host if host is not None else "127.0.0.1"
        self.port = port
        self.rpc_server = RpcServer(
            self._handle, self.host, port, secret=secret, ssl=server_ssl, oneway_handler=self._handle_peer
        )
        self.rpc_client = RpcClient(secret=secret, ssl=client_ssl)
        self.rpc_client.on_connect = self._peer_connected
        self._auth_warnings = RepeatLimiter()
        self._peer_queues: dict[str, asyncio.Queue[tuple[str, Message]]] = {}
        self._peer_busy: set[str] = set()
        self._tasks: list[asyncio.Task[Any]] = []
        self._stopped = asyncio.Event()
        self._closed = False
        # Which outputs wait for which flush (one flush covers every group's store). See _emit
        # and _start_flush; _flush_running also covers an inline flush scheduled to start.
        self._order: FlushOrder[_Group] = FlushOrder()
        self._flush_running = False
        self._flush_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="dledger-flush")
        self._loop: asyncio.AbstractEventLoop | None = None
        # Written by whichever flush runs (one at a time: on the loop or on the flush thread).
        self.flush_latency = LatencyHistogram(FLUSH_BUCKETS)
        metrics_port = next((c.metrics_port for c in configs if c.metrics_port), None)
        self.metrics: MetricsServer | None = (
            MetricsServer(MetricsCollector(self._metrics_sample), self.host, metrics_port) if metrics_port else None
        )

    @staticmethod
    def _open_application(
        cfg: DLedgerConfig, address: str, factory: ApplicationFactory | None
    ) -> GroupApplication | None:
        if factory is not None:
            return factory(cfg, address)
        if cfg.message_store:
            # The server imports no application: whoever builds it hands it the message service.
            raise DLedgerError(
                ResponseCode.UNEXPECTED_ARGUMENT,
                f"group {cfg.group!r} has message_store set: build the server with "
                "application_factory=dledger.rocketmq.broker.message_service_factory",
            )
        return None

    @staticmethod
    def _open_store(cfg: DLedgerConfig) -> DLedgerStore:
        if cfg.store_type == MEMORY:
            return MemoryStore(cfg.max_body_size)
        from dledger.store.file import MmapFileStore

        return MmapFileStore(cfg.default_path, cfg)

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self.rpc_server.start()
        self.port = self.rpc_server.port
        self._tasks.append(asyncio.create_task(self._ticker(), name="dledger-ticker"))
        for g in self.groups.values():
            if g.app is not None:
                g.app.bind(_GroupHandle(self, g))
        if self.metrics is not None:
            self.metrics.collector.bind(self._loop)
            await asyncio.to_thread(self.metrics.start)
        log.info("node %s serving groups %s on %s:%d", self.self_ids(), sorted(self.groups), self.host, self.port)

    def self_ids(self) -> str:
        return ",".join(sorted({g.config.self_id for g in self.groups.values()}))

    async def serve_forever(self) -> None:
        await self._stopped.wait()

    def request_stop(self) -> None:
        self._stopped.set()

    async def close(self) -> None:
        """Stop serving; flush, write the checkpoint and close every store."""
        if self._closed:
            return
        self._closed = True
        self._stopped.set()
        if self.metrics is not None:
            await asyncio.to_thread(self.metrics.close)
        await self.rpc_server.close()
        await cancel_tasks(self._tasks)
        await self.rpc_client.close()
        # A flush still running finishes first (close flushes again and writes the checkpoint).
        await asyncio.to_thread(self._flush_pool.shutdown, wait=True)
        for g in self.groups.values():
            for fut in g.waiters.values():
                if not fut.done():
                    fut.set_exception(DLedgerError(ResponseCode.NETWORK_ERROR, "node shutting down"))
            if g.app is not None:
                try:
                    await asyncio.to_thread(g.app.close)
                except Exception:
                    log.exception("group %s: closing its application failed", g.config.group)
            await asyncio.to_thread(g.store.close)

    # -- driving the nodes ---------------------------------------------------------------

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(TICK_MS / 1000)
            for g in self.groups.values():
                self._drive(g, g.node.tick)

    def _drive(self, g: _Group, call: Callable[[int], list[Output]]) -> None:
        """Make one call on ``g.node`` now and act on what it returns."""
        if self._closed:
            return
        try:
            outs = call(int(time.monotonic() * 1000))
        except Exception:
            log.exception("group %s: a consensus call failed", g.config.group)
            return
        self._emit(g, outs)

    def _emit(self, g: _Group, outs: list[Output]) -> None:
        app = g.app
        if app is not None and g.store.committed_index != g.app_committed:
            g.app_committed = g.store.committed_index
            try:
                app.on_committed(g.app_committed)
            except Exception:
                log.exception("group %s: the application's on_committed failed", g.config.group)
        # The leader's pushes and append results go at once, and the rest too when no write
        # waits for a flush; anything else waits for a flush that starts after this call.
        for o in self._order.submit(g, outs):
            self._perform(g, o)
        if self._order.flush_wanted:
            self._start_flush(may_inline=True)

    def _start_flush(self, may_inline: bool = False) -> None:
        """Group commit, pipelined: one msync at a time covering every write made before it
        started, on a thread of its own while the nodes go on. A small one that a write
        starts (no flush was running) runs on the loop at the end of this turn instead (see
        INLINE_FLUSH_MAX_BYTES); one that follows another is part of a stream and keeps the
        thread, so that the loop goes on while the disk works."""
        if self._flush_running or not self._order.flush_wanted or self._closed:
            return
        self._flush_running = True
        loop = self._loop
        assert loop is not None
        if may_inline and sum(s.unflushed_entry_bytes() for s in self._stores) <= INLINE_FLUSH_MAX_BYTES:
            # call_soon, not now: every input read in this loop turn is written first and
            # the one msync covers them all.
            loop.call_soon(self._flush_inline)
            return
        self._flush_on_thread(self._order.flush_started(), self._stores)

    def _flush_on_thread(self, target: int, stores: list[DLedgerStore]) -> None:
        loop = self._loop
        assert loop is not None

        def flush() -> None:
            start = time.perf_counter()
            for store in stores:
                store.flush_entries()
            self.flush_latency.observe(time.perf_counter() - start)

        def done(f: concurrent.futures.Future[None]) -> None:
            try:
                loop.call_soon_threadsafe(self._flush_done, target, f.exception())
            except RuntimeError:
                pass  # the loop is closed: the process is stopping

        self._flush_pool.submit(flush).add_done_callback(done)

    def _flush_inline(self) -> None:
        target = self._order.flush_started()  # on the loop, so every write made so far is covered
        if self._closed:
            self._flush_done(target, None)
            return
        start = time.perf_counter()
        try:
            busy = [s for s in self._stores if not s.flush_entries(wait=False)]
        except Exception as exc:
            self._flush_done(target, exc)
            return
        if not busy:
            self.flush_latency.observe(time.perf_counter() - start)
        if busy:
            # A store's own service holds it (a checkpoint, say): the flush thread waits for
            # that, not the loop.
            self._flush_on_thread(target, busy)
            return
        self._flush_done(target, None)

    def _flush_done(self, target: int, exc: BaseException | None) -> None:
        self._flush_running = False
        if self._closed:
            return
        if exc is not None:
            # Nothing the flush covers may be acknowledged; keep trying (a full or failing
            # disk may recover) while the consensus layer times the waiting appends out.
            self._order.flush_failed(target)
            log.error("flush failed: %s; retrying in %d ms", exc, FLUSH_RETRY_MS)
            assert self._loop is not None
            self._loop.call_later(FLUSH_RETRY_MS / 1000, self._start_flush)
            return
        for ready in self._order.flush_done(target):
            self._perform_ready(ready)
        self._start_flush()

    def _perform_ready(self, ready: Ready[_Group]) -> None:
        g = ready.key
        for o in ready.outputs:
            self._perform(g, o)
        for token in ready.tokens:
            self._drive(g, functools.partial(_flushed, g.node, token))

    def _perform(self, g: _Group, out: Output) -> None:
        if isinstance(out, Send):
            self._send_peer(g, out.to, out.msg)
        elif isinstance(out, AppendDone | TransferDone | ReadDone):
            fut = g.waiters.pop(out.handle, None)
            if fut is not None and not fut.done():
                fut.set_result(out)
        elif isinstance(out, RoleChanged):
            g.stats.leader_seen(out.leader_id)
            log.info(
                "group %s: %s is %s in term %d (leader %s)",
                g.config.group,
                g.config.self_id,
                out.role.name,
                out.term,
                out.leader_id,
            )
            if g.app is not None:
                try:
                    g.app.on_role_change(out.role, out.term, out.leader_id)
                except Exception:
                    log.exception("group %s: the application's on_role_change failed", g.config.group)

    def _send_peer(self, g: _Group, to: str, msg: Message) -> None:
        addr = g.peers.get(to)
        if addr is None:
            log.debug("no address for %s; dropping %s", to, type(msg).__name__)
            return
        q = self._peer_queues.get(addr)
        if q is None:
            q = self._peer_queues[addr] = asyncio.Queue()
            self._tasks.append(asyncio.create_task(self._peer_sender(addr, q), name=f"dledger-send-{addr}"))
        if q.empty() and addr not in self._peer_busy:
            # Nothing queued or on its way to this peer: write it now, one task hop less.
            try:
                if self.rpc_client.send_nowait(addr, int(msg.REQUEST_CODE), msg.to_wire(), group=g.config.group):
                    return
            except DLedgerError as exc:
                self._send_failed(addr, exc)
                self._answer_unreachable(g.config.group, msg)
                return
            except Exception:
                log.exception("send to %s failed", addr)
                return
        if q.qsize() >= PEER_QUEUE_LIMIT:
            return  # Raft resends what a lagging peer misses
        q.put_nowait((g.config.group, msg))

    async def _peer_sender(self, addr: str, q: asyncio.Queue[tuple[str, Message]]) -> None:
        while True:
            group, msg = await q.get()
            # Until this message is written, later ones queue behind it (keeps their order).
            self._peer_busy.add(addr)
            try:
                await self.rpc_client.send(addr, int(msg.REQUEST_CODE), msg.to_wire(), group=group, timeout=1.0)
            except DLedgerError as exc:
                # The peer is down or slow: drop what is queued for it rather than send stale
                # messages later; the consensus layer retries on its own schedule.
                self._send_failed(addr, exc, q.qsize())
                failed = [msg]
                while not q.empty():
                    failed.append(q.get_nowait()[1])
                for m in failed:
                    self._answer_unreachable(group, m)
            except Exception:
                log.exception("send to %s failed", addr)
            finally:
                self._peer_busy.discard(addr)

    def _send_failed(self, addr: str, exc: DLedgerError, dropped: int = 0) -> None:
        """A peer down or slow is routine (debug); one that refuses our secret is a
        misconfiguration nothing else reports, so it is a warning, once a minute per peer."""
        if isinstance(exc, AuthenticationError):
            held = self._auth_warnings.allow(addr)
            if held is not None:
                log.warning(
                    "cannot authenticate with the peer at %s: %s; do all members share one secret?%s",
                    addr,
                    exc.message,
                    held_back(held),
                )
        else:
            log.debug("send to %s failed (%s); dropping %d queued", addr, exc, dropped)

    def _peer_connected(self, addr: str) -> None:
        """A connection to ``addr`` was made: each group's node learns of it for the peer at
        that address (a leader resynchronises a follower whose pushes may be lost)."""
        if self._loop is None:
            return
        for g in self.groups.values():
            for peer, peer_addr in g.peers.items():
                if peer_addr == addr and peer != g.config.self_id:
                    # Later, not from inside the connect of the send under way.
                    self._loop.call_soon(self._drive, g, functools.partial(_peer_connected, g.node, peer))

    def _answer_unreachable(self, group: str, msg: Message) -> None:
        """A vote or heartbeat that could not be sent is answered NETWORK_ERROR, as DLedger's
        failed RPC future is: the round then ends when every peer has answered, instead of
        waiting out its timeout for a member that is down (which would slow every failover)."""
        if not isinstance(msg, VoteRequest | HeartBeatRequest):
            return
        g = self.groups.get(group)
        reply = error_response(msg, ResponseCode.NETWORK_ERROR, term=msg.term)
        if g is not None and reply is not None and self._loop is not None:
            # Later, not from inside the call whose outputs are being sent.
            self._loop.call_soon(self._drive, g, functools.partial(_step, g.node, reply))

    # -- requests ------------------------------------------------------------------------

    def _group(self, request: Request) -> _Group | None:
        name = request.group
        if name is None and len(self.groups) == 1:
            name = next(iter(self.groups))  # a client that names no group means the only one
        return self.groups.get(name) if name is not None else None

    def _unknown_group(self, request: Request) -> Response:
        """UNKNOWN_GROUP, naming the groups this member serves (in the body and the message),
        so that a client that named the wrong group, or none, can say which to use."""
        served = sorted(self.groups)
        asked = "no group" if request.group is None else f"group {request.group!r}"
        return Response(
            ResponseCode.UNKNOWN_GROUP,
            UnknownGroupResponse(served).to_wire(),
            f"{self.self_ids()} does not serve {asked}; it serves {', '.join(served)}",
        )

    async def _handle(self, request: Request) -> Response | dict[str, Any] | None:
        body = request.body
        code = request.code
        g = self._group(request)
        if g is None:
            return self._unknown_group(request)
        if g.app is not None and code in g.app.request_codes:
            return await g.app.handle(code, body, request.peer)
        if code == RequestCode.APPEND:
            if g.app is not None and g.app.node_store is not None:
                # Its entries are the application's records: a raw entry would be garbage to it.
                return Response(
                    ResponseCode.UNSUPPORTED,
                    LeaderHint(g.node.leader_id).to_wire(),
                    f"group {g.config.group!r} runs an application (message store): "
                    "append through it, not with raw entries",
                )
            # A body it cannot read raises DLedgerError: the transport answers with its code.
            return await self._propose(g, AppendRequest.from_wire(body, g.config.max_body_size).bodies)
        if code == RequestCode.GET:
            return await self._get(g, GetRequest.from_wire(body))
        if code == RequestCode.METADATA:
            return self._metadata(g).to_wire()
        if code == RequestCode.LEADERSHIP_TRANSFER:
            return await self._transfer(g, TransferRequest.from_wire(body))
        raise DLedgerError(ResponseCode.UNSUPPORTED, f"request code {code} is not a client request")

    def _handle_peer(self, request: Request) -> None:
        body = request.body
        if not isinstance(body.get("_type"), str) or body["_type"] not in MESSAGE_TYPES:
            log.debug("dropping a one-way frame that is not a consensus message from %s", request.peer)
            return None
        try:
            msg = message_from_wire(body)
        except (ValueError, TypeError, KeyError) as exc:
            log.debug("dropping a malformed %s from %s: %s", body.get("_type"), request.peer, exc)
            return None
        g = self.groups.get(msg.group)
        if g is None or msg.local_id not in g.peers or msg.remote_id != g.config.self_id:
            code = ResponseCode.UNKNOWN_GROUP if g is None else ResponseCode.UNKNOWN_MEMBER
            reply = error_response(msg, code)
            sender = g.peers.get(msg.local_id) if g is not None else None
            if reply is not None and g is not None and sender is not None:
                self._send_peer(g, msg.local_id, reply)
            log.debug("%s from %s: %s", type(msg).__name__, request.peer, code.name)
            return None
        self._drive(g, functools.partial(_step, g.node, msg))
        return None

    def _call(self, g: _Group, fn: Any) -> asyncio.Future[Any]:
        """Run ``fn(now) -> handle`` on the node now; the future gets the matching *Done output."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def run(now: int) -> list[Output]:
            g.waiters[fn(now)] = fut
            return g.node.drain()

        self._drive(g, run)
        return fut

    async def _propose(self, g: _Group, bodies: Sequence[bytes]) -> Response:
        start = time.perf_counter()
        done: AppendDone = await self._call(g, lambda now: g.node.propose(now, bodies))
        r = done.response
        stats = g.stats
        stats.append_latency.observe(time.perf_counter() - start)
        if r.code == ResponseCode.SUCCESS:
            stats.appended_entries += len(bodies)
        else:
            name = _code_name(r.code)
            stats.append_errors[name] = stats.append_errors.get(name, 0) + 1
        out = AppendResponse(r.index, r.pos, list(r.positions), r.term, r.leader_id)
        return Response(r.code, out.to_wire(), None if r.code == ResponseCode.SUCCESS else ResponseCode(r.code).name)

    async def _get(self, g: _Group, req: GetRequest) -> Response:
        index = req.index
        # Linearizable: the leader confirms with a quorum that it still leads, and serves
        # only what was committed when the read arrived (read-index).
        done: ReadDone = await self._call(g, lambda now: g.node.read_index(now))
        if done.code != ResponseCode.SUCCESS:
            return Response(done.code, LeaderHint(g.node.leader_id).to_wire(), ResponseCode(done.code).name)
        if index > done.read_index:
            return Response(
                ResponseCode.INDEX_OUT_OF_RANGE,
                LeaderHint(g.node.leader_id).to_wire(),
                f"index {index} is past the committed index {done.read_index}",
            )
        last = min(index + min(req.count, GET_MAX_ENTRIES) - 1, done.read_index)
        entries = []
        size = 0
        for e in g.store.get_range(index, last):
            entries.append(e)
            size += len(e.body)
            if size >= GET_MAX_BYTES:
                break
        return Response(ResponseCode.SUCCESS, GetResponse(entries, done.read_index).to_wire())

    def _match_index(self, g: _Group) -> dict[str, int] | None:
        node = g.node
        rep = node.replicator
        if node.is_leader and rep.water_mark_term == node.term:
            return {p: rep.water_marks.get(p, -1) for p in g.peers}
        return None

    def _app_metrics(self, g: _Group) -> list[AppMetric]:
        if g.app is None:
            return []
        try:
            return g.app.metrics()
        except Exception:  # the member's own metrics are still served
            log.exception("group %s: the application's metrics failed", g.config.group)
            return []

    def _metrics_sample(self) -> Sample:
        """Every metric's value now; runs on the loop (see dledger.metrics)."""
        groups = []
        for g in self.groups.values():
            node, store, stats = g.node, g.store, g.stats
            used = getattr(store, "used_ratio", None)
            try:
                ratio = float(used()) if callable(used) else None
            except OSError:
                ratio = None
            groups.append(
                GroupSample(
                    group=g.config.group,
                    member=g.config.self_id,
                    role=node.role.name,
                    term=node.term,
                    leader=node.leader_id,
                    begin_index=store.ledger_begin_index,
                    end_index=store.ledger_end_index,
                    committed_index=store.committed_index,
                    match_index=self._match_index(g),
                    pending_appends=len(node.replicator.pending) if node.is_leader else 0,
                    pending_requests=len(g.waiters),
                    disk_used_ratio=ratio,
                    disk_full=bool(getattr(store, "disk_full", False)),
                    appended_entries=stats.appended_entries,
                    append_errors=dict(stats.append_errors),
                    leader_changes=stats.leader_changes,
                    append_latency=stats.append_latency.snapshot(),
                    app_metrics=self._app_metrics(g),
                )
            )
        stats_in = self.rpc_server.stats.bytes_in + self.rpc_client.stats.bytes_in
        stats_out = self.rpc_server.stats.bytes_out + self.rpc_client.stats.bytes_out
        return Sample(groups, stats_in, stats_out, self.flush_latency.snapshot(), self.self_ids())

    def _metadata(self, g: _Group) -> MetadataResponse:
        node = g.node
        # The leader adds each member's match index (its own: what it has flushed), for lag.
        return MetadataResponse(
            id=g.config.self_id,
            addr=self.address,
            group=g.config.group,
            role=node.role.name,
            term=node.term,
            leader=node.leader_id,
            end_index=g.store.ledger_end_index,
            committed_index=g.store.committed_index,
            begin_index=g.store.ledger_begin_index,
            pid=os.getpid(),
            peers=g.peers,
            match_index=self._match_index(g),
        )

    async def _transfer(self, g: _Group, req: TransferRequest) -> Response:
        to = req.to
        if to not in g.peers:
            return Response(
                ResponseCode.UNKNOWN_MEMBER,
                LeaderHint(g.node.leader_id).to_wire(),
                f"no member {to!r} in group {g.config.group!r} (members: {', '.join(g.peers)})",
            )
        done: TransferDone = await self._call(g, lambda now: g.node.transfer_leadership(now, to))
        r = done.response
        return Response(
            r.code,
            TransferResponse(r.leader_id, r.term, r.reason).to_wire(),
            r.reason or (None if r.code == ResponseCode.SUCCESS else _code_name(r.code)),
        )


def _code_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return f"code {code}"


def _step(node: RaftNode, msg: Message, now: int) -> list[Output]:
    return node.step(now, msg)


def _peer_connected(node: RaftNode, peer: str, now: int) -> list[Output]:
    return node.peer_connected(now, peer)


def _flushed(node: RaftNode, token: int, now: int) -> list[Output]:
    return node.flushed(now, token)


async def run_server(server: NodeServer, on_ready: Callable[[NodeServer], None] | None = None) -> int:
    """Serve until SIGTERM or SIGINT; then flush, checkpoint and return 0."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, server.request_stop)
    await server.start()
    if on_ready is not None:
        on_ready(server)
    try:
        await server.serve_forever()
    finally:
        # A stop must end: past the grace period, every thread's stack goes to stderr and the
        # process exits (1). Nothing is lost by that: what was acknowledged is on disk, and
        # recovery needs no clean shutdown.
        faulthandler.dump_traceback_later(SHUTDOWN_GRACE_S, exit=True)
        try:
            await server.close()
        finally:
            faulthandler.cancel_dump_traceback_later()
    return 0


__all__ = ["ApplicationFactory", "GroupApplication", "GroupHandle", "NodeServer", "Role", "parse_peers", "run_server"]
