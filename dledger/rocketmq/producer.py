"""Producers of a message-store group: ``AsyncProducer`` (asyncio) and ``Producer`` (blocking).

They find the leader and retry as the entry client does (they ride on an ``AsyncClient``):
a member that is not the leader answers NOT_LEADER with the leader's id, a leader still
catching up answers LEADER_NOT_READY, and both are asked again until the timeout. The
producer gives every message its UNIQ_KEY before the first attempt (RocketMQ's
MessageClientIDSetter), so a message sent again after a lost answer keeps its id: sends are
at-least-once, and a duplicate is recognisable by its ``msg_id``.
"""

from __future__ import annotations

import asyncio
import itertools
import ssl as ssl_module
import threading
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from dledger.client import AsyncClient
from dledger.codes import ResponseCode
from dledger.errors import DLedgerError
from dledger.net.transport import Response
from dledger.rocketmq.message import UNIQ_KEY, Message, UniqIdGenerator, create_message_id, encode_properties
from dledger.rocketmq.status import PutMessageStatus
from dledger.rocketmq.wire import MessageRequestCode, SendRequest, SendResponse

T = TypeVar("T")

SEND_OK = "SEND_OK"
# One batch request carries at most this many bytes of bodies and properties; bigger
# batches go as several requests, in order, to the same queue.
BATCH_MAX_BYTES = 1024 * 1024
BATCH_MAX_MESSAGES = 4096

# (topic, number of write queues, message) -> queue id
QueueSelector = Callable[[str, int, Message], int]


@dataclass(slots=True, frozen=True)
class SendResult:
    """RocketMQ's SendResult: ``status`` is ``"SEND_OK"`` or, when the group refused the message
    or no leader could be reached in time, the PutMessageStatus name (MESSAGE_ILLEGAL,
    SERVICE_NOT_AVAILABLE, OS_PAGECACHE_BUSY, UNKNOWN_ERROR...) with ``reason``.
    ``msg_id`` is the UNIQ_KEY, ``offset_msg_id`` the id of the stored record (store host and
    commit-log offset, what ``view_by_msg_id`` takes)."""

    status: str
    msg_id: str
    queue_id: int
    queue_offset: int
    offset_msg_id: str = ""
    topic: str = ""
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.status == SEND_OK


def _status_name(code: int) -> str:
    try:
        return PutMessageStatus(code).name
    except ValueError:
        return f"status {code}"


class AsyncProducer:
    """``peers`` as the entry client's (``"n0-host:port;n1-host:port"``); ``group`` the DLedger
    group (None: the one the members serve). ``selector`` picks a queue for a message (default:
    round-robin over the topic's write queues)."""

    def __init__(self, peers: str | dict[str, str], group: str | None = None, *,
                 selector: QueueSelector | None = None, secret: str | bytes | None = None,
                 ssl: ssl_module.SSLContext | None = None, timeout: float = 10.0,
                 request_timeout: float = 3.0) -> None:
        self.client = AsyncClient(peers, group, secret=secret, ssl=ssl, timeout=timeout,
                                  request_timeout=request_timeout)
        self.selector = selector
        self._queue_nums: dict[str, int] = {}
        self._round_robin = itertools.count()
        self._uniq = UniqIdGenerator()

    async def close(self) -> None:
        await self.client.close()

    async def __aenter__(self) -> AsyncProducer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def queue_nums(self, topic: str) -> int:
        """The topic's number of write queues, as the group says."""
        n = self._queue_nums.get(topic)
        if n is None:
            resp = await self.client._leader_call(MessageRequestCode.GET_ROUTEINFO_BY_TOPIC,  # type: ignore[arg-type]
                                                  {"topic": topic})
            n = int(resp.check().body["queue_nums"])
            self._queue_nums[topic] = n
        return n

    async def _select(self, msg: Message, queue_id: int | None) -> int:
        if queue_id is not None:
            return queue_id
        n = await self.queue_nums(msg.topic)
        if self.selector is not None:
            return self.selector(msg.topic, n, msg)
        return next(self._round_robin) % n

    def _properties(self, msg: Message) -> tuple[str, bytes]:
        props = msg.store_properties()
        uniq = props.get(UNIQ_KEY)
        if not uniq:
            uniq = props[UNIQ_KEY] = self._uniq.create()
        return uniq, encode_properties(props).encode("utf-8", "surrogatepass")

    async def send(self, msg: Message, queue_id: int | None = None) -> SendResult:
        """Send one message (to ``queue_id``, else the selector's queue); returns once the
        group has it on a majority, or with the reason it has not."""
        qid = await self._select(msg, queue_id)
        uniq, props = self._properties(msg)
        req = SendRequest(msg.topic, qid, [bytes(msg.body)], [props], msg.flag, msg.sys_flag, msg.born_timestamp)
        return (await self._request(MessageRequestCode.SEND_MESSAGE, req, [uniq]))[0]

    async def send_batch(self, msgs: Sequence[Message], queue_id: int | None = None) -> list[SendResult]:
        """Send messages of one topic to one queue as a batch (RocketMQ's MessageBatch), in
        order, one request per ~1 MiB; one SendResult per message."""
        if not msgs:
            return []
        topic = msgs[0].topic
        if any(m.topic != topic for m in msgs):
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, "a batch's messages must share their topic")
        qid = await self._select(msgs[0], queue_id)
        results: list[SendResult] = []
        chunk: list[Message] = []
        size = 0
        for m in msgs:
            if chunk and (size + len(m.body) > BATCH_MAX_BYTES or len(chunk) >= BATCH_MAX_MESSAGES):
                results.extend(await self._send_chunk(chunk, qid))
                chunk, size = [], 0
            chunk.append(m)
            size += len(m.body)
        results.extend(await self._send_chunk(chunk, qid))
        return results

    async def _send_chunk(self, msgs: list[Message], qid: int) -> list[SendResult]:
        uniqs: list[str] = []
        props: list[bytes] = []
        for m in msgs:
            u, p = self._properties(m)
            uniqs.append(u)
            props.append(p)
        first = msgs[0]
        req = SendRequest(first.topic, qid, [bytes(m.body) for m in msgs], props, first.flag, first.sys_flag,
                          first.born_timestamp)
        code = MessageRequestCode.SEND_BATCH_MESSAGE if len(msgs) > 1 else MessageRequestCode.SEND_MESSAGE
        return await self._request(code, req, uniqs)

    async def _request(self, code: MessageRequestCode, req: SendRequest, uniqs: list[str]) -> list[SendResult]:
        resp: Response = await self.client._leader_call(code, req.to_wire())  # type: ignore[arg-type]
        body = resp.body if isinstance(resp.body, dict) else {}
        if resp.code == ResponseCode.SUCCESS and "status" in body:
            r = SendResponse.from_wire(body)
            if r.status == PutMessageStatus.PUT_OK and len(r.phys_offsets) == len(uniqs):
                return [SendResult(SEND_OK, u, r.queue_id, r.queue_offset + k,
                                   _offset_msg_id(r.store_host, p), req.topic)
                        for k, (u, p) in enumerate(zip(uniqs, r.phys_offsets, strict=True))]
            return [SendResult(_status_name(r.status), u, req.queue_id, -1, "", req.topic, r.reason) for u in uniqs]
        # No leader took it in time: what the last member said.
        status = _status_name(int(body["status"])) if "status" in body else PutMessageStatus.SERVICE_NOT_AVAILABLE.name
        reason = resp.message or _code_name(resp.code)
        return [SendResult(status, u, req.queue_id, -1, "", req.topic, reason) for u in uniqs]


def _code_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return f"code {code}"


def _offset_msg_id(store_host: str, phys: int) -> str:
    host, _, port = store_host.rpartition(":")
    return create_message_id((host.strip("[]"), int(port)), phys)


class Blocking:
    """Runs an asyncio twin on an event loop of its own, in the calling thread, one call at a
    time (as ``dledger.Client``)."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._lock = threading.Lock()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            coro.close()
            raise RuntimeError(f"{type(self).__name__} blocks; inside a running asyncio loop use its Async twin")
        with self._lock:
            if self._loop.is_closed():
                coro.close()
                raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"{type(self).__name__} is closed")
            return self._loop.run_until_complete(coro)

    def _close_loop(self, coro: Coroutine[Any, Any, None]) -> None:
        if self._loop.is_closed():
            coro.close()
            return
        self._run(coro)
        with self._lock:
            self._loop.close()


class Producer(Blocking):
    """The blocking twin of ``AsyncProducer`` (same arguments)."""

    def __init__(self, peers: str | dict[str, str], group: str | None = None, **kwargs: Any) -> None:
        super().__init__()
        self._async: AsyncProducer = self._run(_make_producer(peers, group, kwargs))

    def send(self, msg: Message, queue_id: int | None = None) -> SendResult:
        return self._run(self._async.send(msg, queue_id))

    def send_batch(self, msgs: Sequence[Message], queue_id: int | None = None) -> list[SendResult]:
        return self._run(self._async.send_batch(msgs, queue_id))

    def queue_nums(self, topic: str) -> int:
        return self._run(self._async.queue_nums(topic))

    @property
    def leader(self) -> str | None:
        return self._async.client.leader

    def close(self) -> None:
        self._close_loop(self._async.close())

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _make_producer(peers: str | dict[str, str], group: str | None, kwargs: dict[str, Any]) -> AsyncProducer:
    return AsyncProducer(peers, group, **kwargs)


__all__ = ["SEND_OK", "AsyncProducer", "Producer", "QueueSelector", "SendResult"]
