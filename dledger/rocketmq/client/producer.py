"""Producers of a message-store group: ``AsyncProducer`` (asyncio) and ``Producer`` (blocking).

They find the leader and retry as the entry client does (they ride on an ``AsyncClient``):
a member that is not the leader answers NOT_LEADER with the leader's id, a leader still
catching up answers LEADER_NOT_READY, and both are asked again until the timeout. The
producer gives every message its UNIQ_KEY before the first attempt (RocketMQ's
MessageClientIDSetter), so a message sent again after a lost answer keeps its id: sends are
at-least-once, and a duplicate is recognisable by its ``msg_id``.
"""

from __future__ import annotations

import contextlib
import itertools
import operator
import ssl as ssl_module
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from dledger._ext import load as _load_ext
from dledger.client import AsyncClient, Blocking
from dledger.codes import ResponseCode
from dledger.errors import DLedgerError
from dledger.net.transport import Response
from dledger.rocketmq.client.send_result import SEND_OK, SendResult, SendResults, UniqKeys, not_sent, status_name
from dledger.rocketmq.client.validators import (
    IllegalMessageError,
    check_message,
    columns_problem,
    nth,
    properties_too_long,
    unbatchable,
)
from dledger.rocketmq.store.encode import MAX_PROPERTIES_BYTES
from dledger.rocketmq.store.message import (
    PROPERTY_KEYS,
    STR_BODY_PROBLEM,
    UNIQ_KEY,
    IllegalMessage,
    Message,
    UniqIdGenerator,
    encode_properties,
    joined_properties_problem,
)
from dledger.rocketmq.store.status import STORED_PUT_STATUSES, PutMessageStatus
from dledger.rocketmq.wire import MessageRequestCode, SendRequest, SendResponse

T = TypeVar("T")
K = _load_ext("message")

# One batch request carries at most the group's max_message_size of records (the member refuses
# a bigger batch whole), learnt with the route info before the first batch; this many until
# then (the route info could not be had). Bigger batches go as several requests, in order, to
# the same queue.
BATCH_MAX_BYTES = 1024 * 1024
BATCH_MAX_MESSAGES = 4096
# A record's bytes beyond its body, topic and properties, IPv6 hosts counted (calMsgLength);
# the IPv4 record is 24 less.
RECORD_OVERHEAD = 91 + 24
RECORD_OVERHEAD_V4 = 91
# UNIQ_KEY's length: MessageClientIDSetter's 16 bytes in hex.
UNIQ_KEY_CHARS = 32

# (topic, number of write queues, message) -> queue id
QueueSelector = Callable[[str, int, Message], int]


class AsyncProducer:
    """``peers`` as the entry client's (``"n0-host:port;n1-host:port"``); ``group`` the DLedger
    group (None: the one the members serve). ``selector`` picks a queue for a message (default:
    round-robin over the topic's write queues)."""

    def __init__(
        self,
        peers: str | dict[str, str],
        group: str | None = None,
        *,
        selector: QueueSelector | None = None,
        secret: str | bytes | None = None,
        ssl: ssl_module.SSLContext | None = None,
        timeout: float = 10.0,
        request_timeout: float = 3.0,
        refused_grace: float | None = None,
    ) -> None:
        self.client = AsyncClient(
            peers,
            group,
            secret=secret,
            ssl=ssl,
            timeout=timeout,
            request_timeout=request_timeout,
            refused_grace=refused_grace,
        )
        self.selector = selector
        self._queue_nums: dict[str, int] = {}
        # The group's largest record or batch of records (max_message_size), from route info.
        self._max_batch_bytes: int | None = None
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
            resp = await self.client._leader_call(
                MessageRequestCode.GET_ROUTEINFO_BY_TOPIC,  # type: ignore[arg-type]
                {"topic": topic},
            )
            body = resp.check().body
            n = int(body["queue_nums"])
            self._queue_nums[topic] = n
            limit = body.get("max_message_size")
            if isinstance(limit, int) and limit > 0:
                self._max_batch_bytes = limit
        return n

    async def _batch_limit(self, topic: str) -> int:
        """Record bytes one batch request may carry: the group's max_message_size, asked for
        with the route info before the first batch (a smaller group refuses bigger pieces);
        BATCH_MAX_BYTES if it cannot be had (the send then says why)."""
        if self._max_batch_bytes is None:
            with contextlib.suppress(DLedgerError):
                await self.queue_nums(topic)
        return self._max_batch_bytes or BATCH_MAX_BYTES

    def _oversized(self, least: np.ndarray) -> str | None:
        """Why a batch to be split is refused whole: a message whose record (``least``: with
        IPv4 hosts) is over the group's max_message_size would be refused in any request, after
        the pieces before it were stored."""
        limit = self._max_batch_bytes
        if limit is None or int(least.max()) <= limit:
            return None
        i = int(np.argmax(least > limit))
        return f"message {i} is at least {int(least[i])} bytes as a record, over max_message_size {limit}"

    async def _select(self, msg: Message, queue_id: int | None) -> int:
        if queue_id is not None:
            return _queue_index(queue_id)
        n = await self.queue_nums(msg.topic)
        if self.selector is not None:
            return _queue_index(self.selector(msg.topic, n, msg))
        return next(self._round_robin) % n

    def _properties(self, msg: Message) -> tuple[str, bytes]:
        """The message's UNIQ_KEY and stored properties; IllegalMessageError for ones that would not
        read back as they are (an empty value, a separator in a name or value)."""
        try:
            props = msg.store_properties()
        except IllegalMessage as exc:
            raise IllegalMessageError(str(exc)) from None
        uniq = props.get(UNIQ_KEY)
        if not uniq:
            uniq = props[UNIQ_KEY] = self._uniq.create()
        text = encode_properties(props)
        why = joined_properties_problem(props, text)
        if why is not None:
            raise IllegalMessageError(why)
        raw = text.encode("utf-8", "surrogatepass")
        if len(raw) > MAX_PROPERTIES_BYTES:  # the member refuses it; a batch's other pieces would go
            raise IllegalMessageError(f"properties are {len(raw)} bytes, over the limit of {MAX_PROPERTIES_BYTES}")
        return uniq, raw

    async def send(self, msg: Message, queue_id: int | None = None) -> SendResult:
        """Send one message (to ``queue_id``, else the selector's queue); returns once the
        group has it on a majority, or with the reason it has not. Refused as MESSAGE_ILLEGAL
        without sending: an empty body (Validators.checkMessage), a flag or sys_flag outside
        Java's int, a born_timestamp outside its long, properties that would not read back."""
        qid = await self._select(msg, queue_id)
        try:
            check_message(msg)
            uniq, props = self._properties(msg)
        except IllegalMessageError as exc:
            return _refused(msg.topic, qid, 1, str(exc))[0]
        req = SendRequest(msg.topic, qid, [bytes(msg.body)], [props], msg.flag, msg.sys_flag, msg.born_timestamp)
        req.reconsume_times = msg.reconsume_times
        return (await self._request(MessageRequestCode.SEND_MESSAGE, req, [uniq]))[0]

    async def send_batch(self, msgs: Sequence[Message], queue_id: int | None = None) -> SendResults:
        """Send messages of one topic to one queue as a batch (RocketMQ's MessageBatch), in
        order; one SendResult per message. A batch whose records fit the group's
        max_message_size (learnt with the route info; BATCH_MAX_BYTES if it cannot be had) and
        that has at most BATCH_MAX_MESSAGES messages goes as one request, stored all or nothing;
        a bigger one goes as several such requests, in order, each all or nothing (when a later
        one is refused the earlier ones stay stored; each message's result says which). So do
        messages whose flag, sys_flag, born_timestamp or reconsume_times differ from the one
        before: a request carries one of each, and every message keeps its own.

        What MessageBatch.generateFromList refuses raises DLedgerError UNEXPECTED_ARGUMENT:
        messages of different topics, a delayed message (its record would go to
        SCHEDULE_TOPIC_XXXX and the offsets of the others would be wrong), a retry topic
        (``%RETRY%...``), messages whose WAIT (waitStoreMsgOK) differ. A batch of one message is
        sent as ``send`` sends it, a delay included. What ``send`` refuses in any message, or a
        message no request can hold, refuses the whole batch: MESSAGE_ILLEGAL, nothing sent."""
        if not msgs:
            return SendResults(SEND_OK, "", -1, [])
        first = msgs[0]
        topic = first.topic
        if any(m.topic != topic for m in msgs):
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, "a batch's messages must share their topic")
        tags, base = first.tags, first.properties
        # Only bodies and keys differ: the columnar path (one properties stem without keys).
        columnar = UNIQ_KEY not in base and all(
            m.tags == tags
            and m.properties == base
            and not m.delay_level
            and m.flag == first.flag
            and m.sys_flag == first.sys_flag
            and m.born_timestamp == first.born_timestamp
            and not m.reconsume_times
            and m.born_host is None
            and type(m.body) is not str  # refused on the other path
            for m in msgs
        )
        if len(msgs) > 1:
            # Shared properties: the first message speaks for all.
            why = unbatchable(topic, msgs[:1] if columnar else msgs)
            if why is not None:
                raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, why)
        qid = await self._select(first, queue_id)
        if columnar:
            try:
                # As store_properties takes them: empty keys leave the properties' KEYS.
                keys = (
                    None
                    if all(m.keys is None for m in msgs)
                    else [m.keys_string or m.properties.get(PROPERTY_KEYS) or None for m in msgs]
                )
            except IllegalMessage as exc:
                return _refused(topic, qid, len(msgs), str(exc))
            if keys is not None:
                base = {k: v for k, v in base.items() if k != PROPERTY_KEYS}
            return await self._send_columns(
                topic,
                # bytes(b) of a bytes object is a call a message for the same object
                [m.body if type(m.body) is bytes else bytes(m.body) for m in msgs],
                qid,
                tags,
                keys,
                dict(base),
                first.flag,
                first.sys_flag,
                first.born_timestamp,
            )
        # Every message checked first: a bad one refuses the batch before any of it is sent.
        n = len(msgs)
        props: list[tuple[str, bytes]] = []
        records = np.empty(n, dtype=np.int64)
        extra = RECORD_OVERHEAD + len(topic.encode("utf-8", "surrogatepass"))
        for i, m in enumerate(msgs):
            try:
                check_message(m, i if n > 1 else None)
                prepared = self._properties(m)
            except IllegalMessageError as exc:
                text = str(exc)
                return _refused(topic, qid, n, text if n == 1 or text.startswith("message ") else f"{nth(i)}{text}")
            props.append(prepared)
            records[i] = len(m.body) + len(prepared[1]) + extra
        limit = await self._batch_limit(topic) if n > 1 else BATCH_MAX_BYTES
        # A request carries one flag, sys flag and born time: where they change, a new one
        # starts, so that every message keeps its own (Java's batch body carries each one's).
        cuts = [0]
        for lo, hi in itertools.pairwise(_header_breaks(msgs)):
            cuts += [lo + c for c in _cuts(records[lo:hi], limit)[1:]]
        if len(cuts) > 2:
            why = self._oversized(records - (RECORD_OVERHEAD - RECORD_OVERHEAD_V4))
            if why is not None:
                return _refused(topic, qid, n, why)
        parts: list[SendResults] = []
        for start, end in itertools.pairwise(cuts):
            if parts and not parts[-1].ok:
                parts.append(not_sent(parts[-1], topic, qid, end - start))
                continue
            parts.append(await self._send_chunk(msgs[start:end], props[start:end], qid))
        return SendResults.join(parts)

    async def send_bodies(
        self,
        topic: str,
        bodies: Sequence[bytes],
        queue_id: int | None = None,
        *,
        tags: str | None = None,
        keys: Sequence[str | Sequence[str] | None] | None = None,
        properties: dict[str, str] | None = None,
        flag: int = 0,
    ) -> SendResults:
        """A batch of bodies to one queue sharing tags, properties and flag, each with its own
        keys if given (RocketMQ's MessageBatch, as ``MessageStore.put_batch``): the fast way to
        send many messages, no object per message on either side. Split and refused as
        ``send_batch`` (a DELAY property or a retry topic raises for two bodies or more; an
        empty body, a flag outside Java's int, bad properties or keys are MESSAGE_ILLEGAL)."""
        if not bodies:
            return SendResults(SEND_OK, topic, -1, [])
        if len(bodies) > 1:
            why = unbatchable(topic, [Message(topic, properties=properties or {})])
            if why is not None:
                raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, why)
        qid = await self._select(Message(topic, bodies[0]), queue_id)
        body_list = bodies if isinstance(bodies, list) else list(bodies)
        return await self._send_columns(topic, body_list, qid, tags, keys, dict(properties or {}), flag, 0)

    async def _send_columns(
        self,
        topic: str,
        bodies: list[bytes],
        qid: int,
        tags: str | None,
        keys: Sequence[str | Sequence[str] | None] | None,
        base: dict[str, str],
        flag: int,
        sys_flag: int,
        born_timestamp: int = 0,
    ) -> SendResults:
        if tags:
            base["TAGS"] = tags
        base.pop(UNIQ_KEY, None)
        why, each = columns_problem(base, keys, len(bodies), flag, sys_flag, born_timestamp)
        if why is not None:
            return _refused(topic, qid, len(bodies), why)
        prefix = encode_properties(base)
        joint = f"{prefix}\x02UNIQ_KEY\x01" if prefix else "UNIQ_KEY\x01"
        n = len(bodies)
        why = properties_too_long(joint, self._uniq.head_len, each)
        if why is not None:
            return _refused(topic, qid, n, why)
        try:
            raw: bytes | None
            raw, usizes = K.pack_bodies(bodies)
        except TypeError:  # bytes-like bodies that are not bytes: joined per request below
            if any(isinstance(b, str) for b in bodies):
                return _refused(topic, qid, n, STR_BODY_PROBLEM)
            raw, usizes = None, np.fromiter(map(len, bodies), dtype=np.uint32, count=n)
        if not usizes.all():
            i = int(np.argmin(usizes))
            return _refused(topic, qid, n, f"{nth(i if n > 1 else None)}the message body length is zero")
        sizes = usizes.astype(np.int64)
        # Each record's bytes beyond its body, at most, as the member counts them (IPv6 hosts);
        # ``slack``: what the least (IPv4 hosts, one byte a key character) counts less.
        extra = (
            RECORD_OVERHEAD
            + len(topic.encode("utf-8", "surrogatepass"))
            + len(joint.encode("utf-8", "surrogatepass"))
            + UNIQ_KEY_CHARS
        )
        slack: int | np.ndarray = RECORD_OVERHEAD - RECORD_OVERHEAD_V4
        if each is not None:
            # "\x02KEYS\x01" and a little, and the key at up to 4 bytes a character.
            klen = np.fromiter((len(k or "") for k in each), dtype=np.int64, count=n)
            sizes_rec = sizes + (extra + 8) + 4 * klen
            slack = slack + 8 + 3 * klen
        else:
            sizes_rec = sizes + extra
        # Past the group's limit the batch goes in pieces, each under it; within it, whole.
        cuts = _cuts(sizes_rec, await self._batch_limit(topic) if n > 1 else BATCH_MAX_BYTES)
        if len(cuts) > 2:
            why = self._oversized(sizes_rec - slack)
            if why is not None:
                return _refused(topic, qid, n, why)
        ends = np.cumsum(sizes) if raw is not None and len(cuts) > 2 else None
        parts: list[SendResults] = []
        for start, end in itertools.pairwise(cuts):
            if parts and not parts[-1].ok:
                parts.append(not_sent(parts[-1], topic, qid, end - start))
                continue
            head, first, _now = self._uniq.reserve(end - start)
            packed: tuple[bytes, np.ndarray] | None = None
            if raw is not None:
                if ends is None:
                    packed = (raw, usizes)
                else:
                    lo = int(ends[start - 1]) if start else 0
                    packed = (raw[lo : int(ends[end - 1])], usizes[start:end])
            piece = [] if packed is not None else bodies[start:end]
            if each is None:
                # One stem for all: the member appends each message's 4 counter digits.
                uniqs: Sequence[str] = UniqKeys(head, first, end - start)
                req = SendRequest(
                    topic,
                    qid,
                    piece,
                    [],
                    flag,
                    sys_flag,
                    born_timestamp,
                    props_stem=(joint + head).encode("utf-8", "surrogatepass"),
                    uniq_first=first,
                    body_sizes=sizes[start:end],
                    packed=packed,
                )
            else:
                uniqs = [f"{head}{(first + i) & 0xFFFF:04X}" for i in range(end - start)]
                props = [
                    (joint + u + (f"\x02KEYS\x01{k}" if k else "")).encode("utf-8", "surrogatepass")
                    for u, k in zip(uniqs, each[start:end], strict=True)
                ]
                req = SendRequest(
                    topic,
                    qid,
                    piece,
                    props,
                    flag,
                    sys_flag,
                    born_timestamp,
                    body_sizes=sizes[start:end],
                    packed=packed,
                )
            code = MessageRequestCode.SEND_BATCH_MESSAGE if end - start > 1 else MessageRequestCode.SEND_MESSAGE
            parts.append(await self._request(code, req, uniqs))
        return SendResults.join(parts)

    async def _send_chunk(self, msgs: Sequence[Message], prepared: list[tuple[str, bytes]], qid: int) -> SendResults:
        uniqs = [u for u, _p in prepared]
        props = [p for _u, p in prepared]
        first = msgs[0]
        req = SendRequest(
            first.topic, qid, [bytes(m.body) for m in msgs], props, first.flag, first.sys_flag, first.born_timestamp
        )
        req.reconsume_times = first.reconsume_times
        code = MessageRequestCode.SEND_BATCH_MESSAGE if len(msgs) > 1 else MessageRequestCode.SEND_MESSAGE
        return await self._request(code, req, uniqs)

    async def _request(self, code: MessageRequestCode, req: SendRequest, uniqs: Sequence[str]) -> SendResults:
        resp: Response = await self.client._leader_call(code, req.to_wire())  # type: ignore[arg-type]
        body = resp.body if isinstance(resp.body, dict) else {}
        if resp.code == ResponseCode.SUCCESS and "status" in body:
            r = SendResponse.from_wire(body)
            if r.status in STORED_PUT_STATUSES and len(r.phys_offsets) == len(uniqs):
                # The queue the producer chose, as Java's SendResult: a delayed message is stored
                # in SCHEDULE_TOPIC_XXXX first (queue_offset is its offset there). A flush or
                # slave wait that ran out still stored it: its ids and offset, as Java gives them.
                return SendResults(
                    SEND_OK if r.status == PutMessageStatus.PUT_OK else status_name(r.status),
                    req.topic,
                    req.queue_id,
                    uniqs,
                    r.queue_offset,
                    r.phys_offsets,
                    r.store_host,
                    phys_add=r.phys_add,
                )
            return SendResults(status_name(r.status), req.topic, req.queue_id, uniqs, reason=r.reason)
        # No leader took it in time: what the last member said. A request that cannot be
        # encoded, or that a member calls malformed, is no reason to retry: MESSAGE_ILLEGAL.
        if "status" in body:
            status = status_name(int(body["status"]))
        elif resp.code == ResponseCode.UNEXPECTED_ARGUMENT:
            status = PutMessageStatus.MESSAGE_ILLEGAL.name
        else:
            status = PutMessageStatus.SERVICE_NOT_AVAILABLE.name
        return SendResults(status, req.topic, req.queue_id, uniqs, reason=resp.message or _code_name(resp.code))


def _queue_index(queue_id: Any) -> Any:
    """A queue id as an int when it is one in all but type (a numpy integer); anything else as
    it is, for the member to refuse, naming it."""
    if isinstance(queue_id, int):  # bools too: the member refuses those
        return queue_id
    try:
        return operator.index(queue_id)
    except TypeError:
        return queue_id


def _refused(topic: str, queue_id: int, n: int, reason: str) -> SendResults:
    """What a send refused before it went out gets: MESSAGE_ILLEGAL for each message, as the
    member answers garbage properties."""
    return SendResults(PutMessageStatus.MESSAGE_ILLEGAL.name, topic, queue_id, [""] * n, reason=reason)


def _header_breaks(msgs: Sequence[Message]) -> list[int]:
    """0, each index where a message's flag, sys flag, born time or reconsume count differs
    from the one before it, and len(msgs)."""
    out = [0]
    prev = (msgs[0].flag, msgs[0].sys_flag, msgs[0].born_timestamp, msgs[0].reconsume_times)
    for i in range(1, len(msgs)):
        m = msgs[i]
        head = (m.flag, m.sys_flag, m.born_timestamp, m.reconsume_times)
        if head != prev:
            out.append(i)
            prev = head
    out.append(len(msgs))
    return out


def _cuts(record_sizes: np.ndarray, limit: int) -> list[int]:
    """Where a batch splits into requests of at most ``limit`` record bytes and
    BATCH_MAX_MESSAGES messages (a message over the limit goes alone: the member decides)."""
    n = len(record_sizes)
    if n <= BATCH_MAX_MESSAGES and int(record_sizes.sum()) <= limit:
        return [0, n]
    ends = np.cumsum(record_sizes)
    cuts = [0]
    while cuts[-1] < n:
        start = cuts[-1]
        before = int(ends[start - 1]) if start else 0
        end = int(np.searchsorted(ends, before + limit, side="right"))
        cuts.append(min(max(end, start + 1), start + BATCH_MAX_MESSAGES, n))
    return cuts


def _code_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return f"code {code}"


class Producer(Blocking):
    """The blocking twin of ``AsyncProducer`` (same arguments)."""

    def __init__(self, peers: str | dict[str, str], group: str | None = None, **kwargs: Any) -> None:
        super().__init__()
        self._async: AsyncProducer = self._start(_make_producer(peers, group, kwargs))

    def send(self, msg: Message, queue_id: int | None = None) -> SendResult:
        return self._run(self._async.send(msg, queue_id))

    def send_batch(self, msgs: Sequence[Message], queue_id: int | None = None) -> SendResults:
        return self._run(self._async.send_batch(msgs, queue_id))

    def send_bodies(
        self,
        topic: str,
        bodies: Sequence[bytes],
        queue_id: int | None = None,
        *,
        tags: str | None = None,
        keys: Sequence[str | Sequence[str] | None] | None = None,
        properties: dict[str, str] | None = None,
        flag: int = 0,
    ) -> SendResults:
        return self._run(
            self._async.send_bodies(topic, bodies, queue_id, tags=tags, keys=keys, properties=properties, flag=flag)
        )

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


__all__ = ["SEND_OK", "AsyncProducer", "Producer", "QueueSelector", "SendResult", "SendResults"]
