"""Consumers of a message-store group: ``AsyncConsumer`` (asyncio) and ``Consumer`` (blocking).

A consumer reads one topic's queues by queue offset (RocketMQ's pull consumer). ``pull``
may ask the member to hold the request until a message arrives (long polling, RocketMQ's
PullRequestHoldService). Reads go to the leader by default; ``read_from="follower"`` reads
from the other members (any member serves only committed messages, a follower's view may lag
the leader's by a moment). Offsets committed with ``commit`` are written through the group's
log, so every member knows them and they survive a failover.
"""

from __future__ import annotations

import asyncio
import math
import ssl as ssl_module
from collections.abc import AsyncGenerator, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dledger._ext import load as _load_ext
from dledger.client import AsyncClient, Blocking
from dledger.codes import ResponseCode
from dledger.errors import DLedgerError
from dledger.net.transport import Response
from dledger.rocketmq.store.message import MessageExt
from dledger.rocketmq.store.records import decode_record, messages_from_columns
from dledger.rocketmq.store.status import GetMessageStatus
from dledger.rocketmq.store.topic_validator import validate_group, validate_topic
from dledger.rocketmq.wire import (
    ConsumerOffsetRequest,
    MessageRequestCode,
    PullRequest,
    PullResponse,
    QueryMessageRequest,
    QueueRequest,
)

K = _load_ext("message")

LEADER = "leader"
FOLLOWER = "follower"
# Pull answers whose next offset the consumer takes (PullMessageProcessor's PULL_OFFSET_MOVED
# and the statuses RocketMQ's client corrects its offset on). An empty queue is one of them:
# an offset past its end (say, committed before retention emptied it) goes back to its start.
_OFFSET_MOVED = (
    GetMessageStatus.OFFSET_TOO_SMALL,
    GetMessageStatus.OFFSET_OVERFLOW_BADLY,
    GetMessageStatus.OFFSET_FOUND_NULL,
    GetMessageStatus.MESSAGE_WAS_REMOVING,
    GetMessageStatus.NO_MESSAGE_IN_QUEUE,
    GetMessageStatus.NO_MATCHED_LOGIC_QUEUE,
)
# A pull's hold when the iterator waits for messages (RocketMQ's brokerSuspendMaxTimeMillis is 15 s).
DEFAULT_WAIT_S = 15.0
# The longest hold a member grants (pull_message_processor.MAX_SUSPEND_MS).
MAX_HOLD_S = 30.0


@dataclass(slots=True)
class PullResult:
    """RocketMQ's PullResult: ``status`` a GetMessageStatus, the offset to pull from next, the
    queue's min and max (next) offsets, and the messages found (FOUND)."""

    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt] = field(default_factory=list)
    member: str | None = None


def decode_pull(resp: PullResponse) -> list[MessageExt]:
    if not resp.records:
        return []
    cols, _stop, _code = K.scan_records(resp.records, 0, 0, -1, False, -1)
    n = len(cols["size"])
    cols["phys_offset"] = np.asarray(resp.phys_offsets[:n], dtype=np.int64)
    return messages_from_columns(resp.records, cols, client=True)


def _decode_records(body: dict[str, Any]) -> list[MessageExt]:
    out = []
    for data, phys in zip(body.get("records") or [], body.get("phys") or [], strict=False):
        m = decode_record(bytes(data), int(phys), client=True)
        if m is not None:
            out.append(m)
    return out


class AsyncConsumer:
    """``group`` is the consumer group (whose offsets ``commit`` keeps), ``topic`` the topic read;
    ``dledger_group`` the DLedger group (None: the one the members serve)."""

    def __init__(
        self,
        peers: str | dict[str, str],
        group: str,
        topic: str,
        *,
        dledger_group: str | None = None,
        read_from: str = LEADER,
        secret: str | bytes | None = None,
        ssl: ssl_module.SSLContext | None = None,
        timeout: float = 10.0,
        request_timeout: float = 3.0,
        refused_grace: float | None = None,
    ) -> None:
        if read_from not in (LEADER, FOLLOWER):
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"read_from {read_from!r}: want leader or follower")
        # A name no producer could have written to ("" for what reads no topic: stats, view),
        # or a group name RocketMQ's client refuses (Validators.checkGroup).
        why = (validate_topic(topic) if topic else None) or validate_group(group)
        if why is not None:
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, why)
        self.client = AsyncClient(
            peers,
            dledger_group,
            secret=secret,
            ssl=ssl,
            timeout=timeout,
            request_timeout=request_timeout,
            refused_grace=refused_grace,
        )
        self.group = group
        self.topic = topic
        self.read_from = read_from
        self._next_member = 0
        self._member: str | None = None
        self._timeout = timeout
        self._request_timeout = request_timeout
        self._holds: list[float] = []

    async def close(self) -> None:
        await self.client.close()

    async def __aenter__(self) -> AsyncConsumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _read(
        self, code: MessageRequestCode, body: dict[str, Any], wait: float = 0.0, *, to_leader: bool = False
    ) -> tuple[Response, str]:
        """A read: from the leader (redirects followed), or from a follower (the members in
        turn, the leader last known skipped while another answers)."""
        c = self.client
        c.check_open()
        if self.read_from == LEADER or to_leader:
            # A held pull needs its hold on top of the usual answer time, and on top of the
            # time the call may take in all (a hold past `timeout` was cut short, TIMEOUT);
            # concurrent calls share the client, so it gets the longest hold in flight.
            self._holds.append(wait)
            c.request_timeout = self._request_timeout + max(self._holds)
            c.timeout = self._timeout + max(self._holds)
            try:
                resp = await c._leader_call(code, {**body, "leader_only": True})  # type: ignore[arg-type]
            finally:
                self._holds.remove(wait)
                c.request_timeout = self._request_timeout + max(self._holds, default=0.0)
                c.timeout = self._timeout + max(self._holds, default=0.0)
            return resp, c.leader or ""
        if c.group is None:
            await c.discover_group()
        members = list(c.peers)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + c.timeout + wait
        last = Response(ResponseCode.NETWORK_ERROR, {}, "no member asked")
        tries = 0
        while True:
            if self._member is None or tries:
                order = [m for m in members if m != c.leader] + [m for m in members if m == c.leader]
                self._member = order[self._next_member % len(order)]
                self._next_member += 1
            member = self._member
            tries += 1
            try:
                last = await c._rpc.call(
                    c.peers[member], int(code), body, group=c.group, timeout=c.request_timeout + wait
                )
                if last.code == ResponseCode.SUCCESS:
                    # Pulls name the leader: a consumer that only reads learns it there, and its
                    # next read goes to another member (the answer stands: it is committed data).
                    named = last.body.get("leader") if isinstance(last.body, dict) else None
                    if isinstance(named, str) and named in c.peers:
                        c._leader = named
                        if named == member and len(members) > 1:
                            self._member = None
                            tries = 0
                    return last, member
            except DLedgerError as exc:
                last = Response(exc.code, {}, exc.message)
            self._member = None
            if loop.time() >= deadline or c.all_refuse_authentication():
                return last, member
            if tries % len(members) == 0:
                await asyncio.sleep(0.05)

    async def pull(self, queue_id: int, offset: int, max_count: int = 32, wait: float = 0.0) -> PullResult:
        """Up to ``max_count`` messages of queue ``queue_id`` from ``offset``. With ``wait`` > 0
        the member holds the request that many seconds at most for a message to arrive (it
        holds one 30 s at most, so a longer wait is that)."""
        if not 0.0 <= wait < math.inf:  # NaN fails this too
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"wait {wait!r}: want seconds >= 0")
        wait = min(wait, MAX_HOLD_S)
        req = PullRequest(self.topic, queue_id, offset, max_count, int(wait * 1000))
        resp, member = await self._read(MessageRequestCode.PULL_MESSAGE, req.to_wire(), wait)
        resp.check()
        pr = PullResponse.from_wire(resp.body)
        return PullResult(
            GetMessageStatus(pr.status), pr.next_begin_offset, pr.min_offset, pr.max_offset, decode_pull(pr), member
        )

    async def commit(self, queue_id: int, offset: int) -> None:
        """Record ``offset`` as the consumer group's next offset of the queue (through the log)."""
        req = ConsumerOffsetRequest(self.group, self.topic, queue_id, offset)
        (
            await self.client._leader_call(
                MessageRequestCode.UPDATE_CONSUMER_OFFSET,  # type: ignore[arg-type]
                req.to_wire(),
            )
        ).check()

    async def committed(self, queue_id: int) -> int:
        """The group's committed offset of the queue, -1 when it has none. Asked of the leader
        when this client knows it, whatever ``read_from`` says (RocketMQ's queryConsumerOffset
        goes to the master): a follower may not have applied this consumer's last commit yet,
        and a restarted iterator would deliver again what it had committed. A follower reader
        learns the leader from its pulls; one given only followers asks them."""
        req = ConsumerOffsetRequest(self.group, self.topic, queue_id)
        resp, _member = await self._read(
            MessageRequestCode.QUERY_CONSUMER_OFFSET, req.to_wire(), to_leader=self.client.leader is not None
        )
        return int(resp.check().body["offset"])

    async def max_offset(self, queue_id: int) -> int:
        req = QueueRequest(self.topic, queue_id)
        resp, _member = await self._read(MessageRequestCode.GET_MAX_OFFSET, req.to_wire())
        return int(resp.check().body["offset"])

    async def min_offset(self, queue_id: int) -> int:
        req = QueueRequest(self.topic, queue_id)
        resp, _member = await self._read(MessageRequestCode.GET_MIN_OFFSET, req.to_wire())
        return int(resp.check().body["offset"])

    async def offset_for_timestamp(self, queue_id: int, timestamp_ms: int) -> int:
        resp, _member = await self._read(
            MessageRequestCode.SEARCH_OFFSET_BY_TIMESTAMP, QueueRequest(self.topic, queue_id, timestamp_ms).to_wire()
        )
        return int(resp.check().body["offset"])

    async def query(
        self, key: str, max_num: int = 64, begin_ts: int = 0, end_ts: int = (1 << 63) - 1
    ) -> list[MessageExt]:
        """QUERY_MESSAGE: the topic's messages with ``key`` (a KEYS segment or a UNIQ_KEY), newest first."""
        req = QueryMessageRequest(self.topic, key, max_num, begin_ts, end_ts)
        resp, _member = await self._read(MessageRequestCode.QUERY_MESSAGE, req.to_wire())
        return _decode_records(resp.check().body)

    async def view(self, msg_id: str) -> MessageExt | None:
        """VIEW_MESSAGE_BY_ID: the message of an offset message id (SendResult.offset_msg_id)."""
        resp, _member = await self._read(
            MessageRequestCode.VIEW_MESSAGE_BY_ID, QueryMessageRequest(msg_id=msg_id).to_wire()
        )
        found = _decode_records(resp.check().body)
        return found[0] if found else None

    async def stats(self) -> dict[str, dict[str, Any]]:
        """Every member's own view (GET_BROKER_RUNTIME_INFO): role, term, committed and dispatched
        positions, queues with their min and max offsets; ``{"error": ...}`` for a member that
        did not answer."""
        c = self.client
        c.check_open()
        if c.group is None:
            await c.discover_group()

        async def one(addr: str) -> dict[str, Any]:
            try:
                resp = await c._rpc.call(
                    addr, int(MessageRequestCode.GET_BROKER_RUNTIME_INFO), {}, group=c.group, timeout=c.request_timeout
                )
            except DLedgerError as exc:
                return {"error": exc.message, "code": int(exc.code)}
            if resp.code != ResponseCode.SUCCESS:
                return {"error": resp.message or str(resp.code), "code": int(resp.code)}
            return dict(resp.body)

        answers = await asyncio.gather(*(one(a) for a in c.peers.values()))
        return dict(zip(c.peers, answers, strict=True))

    async def messages(
        self,
        queue_id: int,
        offset: int | None = None,
        *,
        wait: float = DEFAULT_WAIT_S,
        idle_timeout: float | None = None,
        auto_commit: bool = True,
    ) -> AsyncGenerator[MessageExt, None]:
        """Every message of the queue from ``offset`` (default: the group's committed offset, else
        the queue's minimum), waiting for new ones; ends after ``idle_timeout`` seconds without
        one (None: never). With ``auto_commit`` the offset past a batch is committed once the
        batch has been consumed, and when the iterator is closed (a ``break``: at once for the
        blocking ``Consumer``; for this one, use ``contextlib.aclosing``), the offset past the
        last message the caller came back from. At-least-once: the message a ``break`` left
        is delivered again."""
        if offset is None:
            offset = await self.committed(queue_id)
            if offset < 0:
                offset = await self.min_offset(queue_id)
        loop = asyncio.get_running_loop()
        idle_since = loop.time()
        # ``done``: the offset past the last message the caller came back from (consumed, for
        # at-least-once); ``committed``: what this iterator has committed.
        done = committed = offset
        try:
            while True:
                hold = wait if idle_timeout is None else max(min(wait, idle_timeout - (loop.time() - idle_since)), 0.0)
                r = await self.pull(queue_id, offset, 32, hold)
                if r.messages:
                    for m in r.messages:
                        yield m
                        done = m.queue_offset + 1
                    idle_since = loop.time()
                    offset = r.next_begin_offset
                    if auto_commit:
                        await self.commit(queue_id, offset)
                        committed = done = offset
                    continue
                if r.status in _OFFSET_MOVED and r.next_begin_offset != offset:
                    # The member says where the queue's messages are (PULL_OFFSET_MOVED).
                    offset = r.next_begin_offset
                    continue
                if idle_timeout is not None and loop.time() - idle_since >= idle_timeout:
                    return
                if hold <= 0:
                    await asyncio.sleep(0.05)
        finally:
            # Left mid-batch (a break): what the caller came back from is consumed; the message
            # it left on is not, and comes again.
            if auto_commit and done > committed and not self.client._rpc.closed:
                try:
                    await self.commit(queue_id, done)
                except DLedgerError:
                    pass  # at-least-once: those messages come again


class Consumer(Blocking):
    """The blocking twin of ``AsyncConsumer`` (same arguments); ``messages`` is a plain iterator."""

    def __init__(self, peers: str | dict[str, str], group: str, topic: str, **kwargs: Any) -> None:
        super().__init__()
        self._async: AsyncConsumer = self._start(_make_consumer(peers, group, topic, kwargs))

    @property
    def topic(self) -> str:
        return self._async.topic

    def pull(self, queue_id: int, offset: int, max_count: int = 32, wait: float = 0.0) -> PullResult:
        return self._run(self._async.pull(queue_id, offset, max_count, wait))

    def commit(self, queue_id: int, offset: int) -> None:
        self._run(self._async.commit(queue_id, offset))

    def committed(self, queue_id: int) -> int:
        return self._run(self._async.committed(queue_id))

    def max_offset(self, queue_id: int) -> int:
        return self._run(self._async.max_offset(queue_id))

    def min_offset(self, queue_id: int) -> int:
        return self._run(self._async.min_offset(queue_id))

    def offset_for_timestamp(self, queue_id: int, timestamp_ms: int) -> int:
        return self._run(self._async.offset_for_timestamp(queue_id, timestamp_ms))

    def stats(self) -> dict[str, dict[str, Any]]:
        return self._run(self._async.stats())

    def query(self, key: str, max_num: int = 64, begin_ts: int = 0, end_ts: int = (1 << 63) - 1) -> list[MessageExt]:
        return self._run(self._async.query(key, max_num, begin_ts, end_ts))

    def view(self, msg_id: str) -> MessageExt | None:
        return self._run(self._async.view(msg_id))

    def messages(
        self,
        queue_id: int,
        offset: int | None = None,
        *,
        wait: float = DEFAULT_WAIT_S,
        idle_timeout: float | None = None,
        auto_commit: bool = True,
    ) -> Iterator[MessageExt]:
        it = self._async.messages(queue_id, offset, wait=wait, idle_timeout=idle_timeout, auto_commit=auto_commit)
        try:
            while True:
                try:
                    yield self._run(_next(it))
                except StopAsyncIteration:
                    return
        finally:
            if not self._loop.is_closed():
                self._run(it.aclose())

    def close(self) -> None:
        self._close_loop(self._async.close())

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _next(it: AsyncGenerator[MessageExt, None]) -> MessageExt:
    return await it.__anext__()


async def _make_consumer(peers: str | dict[str, str], group: str, topic: str, kwargs: dict[str, Any]) -> AsyncConsumer:
    return AsyncConsumer(peers, group, topic, **kwargs)


__all__ = ["FOLLOWER", "LEADER", "AsyncConsumer", "Consumer", "PullResult"]
