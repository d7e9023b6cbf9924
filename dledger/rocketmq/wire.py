"""The message API between producers/consumers and the members of a message-store group.

Requests travel in the node transport's msgpack frames, beside DLedger's own requests, with
RocketMQ's RequestCode numbers where RocketMQ has one. The frame's response code is a DLedger
``ResponseCode`` (SUCCESS, NOT_LEADER with a leader hint, LEADER_NOT_READY...), which is what
lets the entry client's leader discovery and retry carry these requests too; the RocketMQ
outcome (``PutMessageStatus``, ``GetMessageStatus``) is in the body.

Bodies of a send go packed (``dledger.packed``: one buffer and a uint32 size array), their
properties strings likewise, so a batch costs the member no object per message on the wire.
A batch whose messages differ only in their UNIQ_KEY counter sends one properties *stem*
instead: message k's properties are the stem and the four uppercase hex digits of
``(uniq_first + k) & 0xFFFF`` (how RocketMQ's MessageClientIDSetter ids of one producer differ),
which the member's encoder writes into each record without making the strings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np

from dledger.api import body_int as _int
from dledger.api import body_str as _str
from dledger.codes import ResponseCode
from dledger.errors import DLedgerError
from dledger.packed import SIZE_DTYPE, PackedBodies


class MessageRequestCode(IntEnum):
    """RocketMQ's RequestCode numbers for the requests a message-store member answers."""

    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    # A classic broker's brokerRole and haMasterAddress, changed on the running broker.
    UPDATE_BROKER_CONFIG = 25
    GET_BROKER_RUNTIME_INFO = 28
    # The master's config/consumerOffset.json, for its slaves (SlaveSynchronize).
    GET_ALL_CONSUMER_OFFSET = 43
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    VIEW_MESSAGE_BY_ID = 33
    GET_ROUTEINFO_BY_TOPIC = 105
    SEND_BATCH_MESSAGE = 320


MESSAGE_REQUEST_CODES = frozenset(int(c) for c in MessageRequestCode)


def _pack(items: list[bytes], sizes: np.ndarray | None = None) -> tuple[bytes, bytes]:
    if sizes is None:
        sizes = np.fromiter(map(len, items), dtype=SIZE_DTYPE, count=len(items))
    return b"".join(items), sizes.astype(SIZE_DTYPE, copy=False).tobytes()


def _unpack(raw: object, sizes: object, what: str, allow_empty: bool) -> tuple[Any, np.ndarray]:
    """``(raw, offsets)`` of a packed list; sizes may be 0 when ``allow_empty``."""
    if not isinstance(raw, bytes | bytearray | memoryview) or not isinstance(sizes, bytes):
        raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"{what}: raw and sizes must be bytes")
    if len(sizes) % SIZE_DTYPE.itemsize:
        raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"{what}: sizes is not an array of uint32")
    n = np.frombuffer(sizes, dtype=SIZE_DTYPE)
    if not allow_empty and len(n) and not n.all():
        raise DLedgerError(ResponseCode.REQUEST_WITH_EMPTY_BODYS, f"{what}: empty item")
    offsets = np.zeros(len(n) + 1, dtype=np.int64)
    np.cumsum(n, dtype=np.int64, out=offsets[1:])
    if int(offsets[-1]) != len(raw):
        raise DLedgerError(
            ResponseCode.UNEXPECTED_ARGUMENT, f"{what}: sizes add up to {int(offsets[-1])}, raw holds {len(raw)} bytes"
        )
    return raw, offsets


@dataclass(slots=True)
class SendRequest:
    """SEND_MESSAGE (one message) or SEND_BATCH_MESSAGE (many, one topic and queue, as
    RocketMQ's MessageBatch): bodies and each message's properties string (RocketMQ's
    ``name\\x01value\\x02...``, UNIQ_KEY set by the producer so that a retry is recognisable)."""

    topic: str
    queue_id: int
    bodies: list[bytes]
    properties: list[bytes]
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str | None = None
    # Instead of ``properties``: every message's properties are this stem and 4 hex digits of
    # its UNIQ_KEY counter, ``(uniq_first + k) & 0xFFFF`` (see the module docstring).
    props_stem: bytes | None = None
    uniq_first: int = -1
    # The bodies' lengths, when the sender has them already.
    body_sizes: np.ndarray | None = None
    # Instead of ``bodies``: them joined, and their lengths (uint32), as the producer packed them.
    packed: tuple[bytes, np.ndarray] | None = None
    # SendMessageRequestHeader.reconsumeTimes: a message sent back for another try keeps its
    # count (a retry topic's consumer moves it to the DLQ past maxReconsumeTimes).
    reconsume_times: int = 0
    # SendMessageRequestHeader.maxReconsumeTimes (SubscriptionGroupConfig.retryMaxTimes, 16,
    # when the client names none): a retry-topic send whose count reached it goes to the DLQ.
    max_reconsume_times: int = 16

    def to_wire(self) -> dict[str, Any]:
        if self.packed is not None:
            raw, sizes = self.packed[0], self.packed[1].astype(SIZE_DTYPE, copy=False).tobytes()
        else:
            raw, sizes = _pack(self.bodies, self.body_sizes)
        out: dict[str, Any] = {
            "topic": self.topic,
            "queue_id": self.queue_id,
            "flag": self.flag,
            "sys_flag": self.sys_flag,
            "born_ts": self.born_timestamp,
            "sizes": sizes,
            "raw": raw,
        }
        if self.props_stem is not None:
            out["props_stem"] = self.props_stem
            out["uniq_first"] = self.uniq_first
        else:
            out["props_raw"], out["props_sizes"] = _pack(self.properties)
        if self.born_host:
            out["born_host"] = self.born_host
        if self.reconsume_times:
            out["reconsume"] = self.reconsume_times
        if self.max_reconsume_times != 16:
            out["max_reconsume"] = self.max_reconsume_times
        return out

    @staticmethod
    def from_wire(body: dict[str, Any]) -> tuple[SendRequest, PackedBodies, PackedBodies | None]:
        """The request without the bodies and properties (empty lists), and those as packed
        sequences read in place; the properties are None when the request has a stem
        (``props_stem`` and ``uniq_first`` set)."""
        raw, offs = _unpack(body.get("raw"), body.get("sizes"), "bodies", allow_empty=True)
        if len(offs) < 2:
            raise DLedgerError(ResponseCode.REQUEST_WITH_EMPTY_BODYS, "no messages")
        stem = body.get("props_stem")
        props: PackedBodies | None = None
        uniq_first = -1
        if stem is not None:
            if not isinstance(stem, bytes):
                raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, "props_stem must be bytes")
            uniq_first = _int(body, "uniq_first")
            if not 0 <= uniq_first < 1 << 62:
                raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"uniq_first {uniq_first}: want 0 to 2**62")
        else:
            praw, poffs = _unpack(body.get("props_raw"), body.get("props_sizes"), "properties", allow_empty=True)
            if len(offs) != len(poffs):
                raise DLedgerError(
                    ResponseCode.UNEXPECTED_ARGUMENT,
                    f"{len(offs) - 1} bodies but {len(poffs) - 1} properties strings",
                )
            props = PackedBodies(praw, poffs)
        born_host = body.get("born_host")
        req = SendRequest(
            _str(body, "topic"),
            _int(body, "queue_id"),
            [],
            [],
            _int(body, "flag", 0),
            _int(body, "sys_flag", 0),
            _int(body, "born_ts", 0),
            born_host if isinstance(born_host, str) else None,
            stem,
            uniq_first,
            reconsume_times=_int(body, "reconsume", 0),
            max_reconsume_times=_int(body, "max_reconsume", 16),
        )
        return req, PackedBodies(raw, offs), props


# A SendResponse's record positions: little-endian int64, one per message.
PHYS_DTYPE = np.dtype("<i8")


@dataclass(slots=True)
class SendResponse:
    """``status`` is a PutMessageStatus; on PUT_OK the records' commit-log offsets are
    ``phys_offsets`` plus ``phys_add`` (entry positions and 48: the leader sends the positions
    its log gave, not a list made per message) and ``queue_offset`` the first message's queue
    offset (the rest follow it). ``store_host`` is the leader's address written into the records.
    The positions travel as one buffer of PHYS_DTYPE, read in place: a msgpack list of
    thousands of ints cost the producer more to unpack than the rest of the answer."""

    status: int
    reason: str = ""
    queue_id: int = 0
    queue_offset: int = -1
    phys_offsets: Sequence[int] | np.ndarray = field(default_factory=list)
    store_host: str = ""
    leader: str | None = None
    phys_add: int = 0

    def to_wire(self) -> dict[str, Any]:
        phys = self.phys_offsets
        n = len(phys)
        return {
            "status": self.status,
            "reason": self.reason,
            "queue_id": self.queue_id,
            "queue_offset": self.queue_offset,
            "phys": np.asarray(phys, dtype=PHYS_DTYPE).tobytes() if n else b"",
            "phys_add": self.phys_add,
            "store_host": self.store_host,
            "leader": self.leader,
        }

    @staticmethod
    def from_wire(body: dict[str, Any]) -> SendResponse:
        raw = body.get("phys") or b""
        if not isinstance(raw, bytes) or len(raw) % PHYS_DTYPE.itemsize:
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, "phys must be an array of int64")
        return SendResponse(
            int(body.get("status", 9)),
            str(body.get("reason") or ""),
            int(body.get("queue_id", 0)),
            int(body.get("queue_offset", -1)),
            np.frombuffer(raw, dtype=PHYS_DTYPE),
            str(body.get("store_host") or ""),
            body.get("leader"),
            int(body.get("phys_add") or 0),
        )


@dataclass(slots=True)
class PullRequest:
    """PULL_MESSAGE; ``suspend_ms`` > 0 asks the member to hold the request until a message
    arrives in the queue or the time is up (PullRequestHoldService)."""

    topic: str
    queue_id: int
    offset: int
    max_count: int = 32
    suspend_ms: int = 0

    def to_wire(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "queue_id": self.queue_id,
            "offset": self.offset,
            "max_count": self.max_count,
            "suspend_ms": self.suspend_ms,
        }

    @staticmethod
    def from_wire(body: dict[str, Any]) -> PullRequest:
        req = PullRequest(
            _str(body, "topic"),
            _int(body, "queue_id"),
            _int(body, "offset"),
            _int(body, "max_count", 32),
            _int(body, "suspend_ms", 0),
        )
        if req.max_count < 1 or req.offset < 0 or req.suspend_ms < 0:
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, "want offset >= 0, max_count >= 1, suspend_ms >= 0")
        return req


@dataclass(slots=True)
class PullResponse:
    """``status`` a GetMessageStatus; ``records`` the stored records back to back and
    ``phys_offsets`` their commit-log offsets."""

    status: int
    next_begin_offset: int
    min_offset: int
    max_offset: int
    records: bytes = b""
    phys_offsets: list[int] = field(default_factory=list)

    def to_wire(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "next": self.next_begin_offset,
            "min": self.min_offset,
            "max": self.max_offset,
            "phys": self.phys_offsets,
            "records": self.records,
        }

    @staticmethod
    def from_wire(body: dict[str, Any]) -> PullResponse:
        return PullResponse(
            int(body["status"]),
            int(body["next"]),
            int(body["min"]),
            int(body["max"]),
            bytes(body.get("records") or b""),
            list(body.get("phys") or []),
        )


@dataclass(slots=True)
class QueueRequest:
    """GET_MAX_OFFSET / GET_MIN_OFFSET (and SEARCH_OFFSET_BY_TIMESTAMP with ``timestamp``)."""

    topic: str
    queue_id: int
    timestamp: int = 0

    def to_wire(self) -> dict[str, Any]:
        return {"topic": self.topic, "queue_id": self.queue_id, "timestamp": self.timestamp}

    @staticmethod
    def from_wire(body: dict[str, Any]) -> QueueRequest:
        return QueueRequest(_str(body, "topic"), _int(body, "queue_id"), _int(body, "timestamp", 0))


@dataclass(slots=True)
class ConsumerOffsetRequest:
    """UPDATE_CONSUMER_OFFSET (with ``offset``) / QUERY_CONSUMER_OFFSET."""

    group: str
    topic: str
    queue_id: int
    offset: int = -1

    def to_wire(self) -> dict[str, Any]:
        return {"consumer_group": self.group, "topic": self.topic, "queue_id": self.queue_id, "offset": self.offset}

    @staticmethod
    def from_wire(body: dict[str, Any]) -> ConsumerOffsetRequest:
        req = ConsumerOffsetRequest(
            _str(body, "consumer_group"), _str(body, "topic"), _int(body, "queue_id"), _int(body, "offset", -1)
        )
        if not req.group or not req.topic or "@" in req.group or "@" in req.topic:
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, "consumer group and topic must be non-empty, no '@'")
        # consumerOffset.json holds them as Java's Integer queue ids and Long offsets.
        if not 0 <= req.queue_id < 1 << 31 or req.offset >= 1 << 63:
            raise DLedgerError(
                ResponseCode.UNEXPECTED_ARGUMENT,
                f"queue id {req.queue_id} or offset {req.offset}: want an int32 queue id >= 0 and an int64 offset",
            )
        return req


@dataclass(slots=True)
class QueryMessageRequest:
    """QUERY_MESSAGE (by key, newest first) or VIEW_MESSAGE_BY_ID (``msg_id``, the offset id)."""

    topic: str = ""
    key: str = ""
    max_num: int = 64
    begin_ts: int = 0
    end_ts: int = (1 << 63) - 1
    msg_id: str = ""

    def to_wire(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "key": self.key,
            "max_num": self.max_num,
            "begin": self.begin_ts,
            "end": self.end_ts,
            "msg_id": self.msg_id,
        }

    @staticmethod
    def from_wire(body: dict[str, Any]) -> QueryMessageRequest:
        return QueryMessageRequest(
            _str(body, "topic", ""),
            _str(body, "key", ""),
            _int(body, "max_num", 64),
            _int(body, "begin", 0),
            _int(body, "end", (1 << 63) - 1),
            _str(body, "msg_id", ""),
        )


__all__ = [
    "MESSAGE_REQUEST_CODES",
    "PHYS_DTYPE",
    "ConsumerOffsetRequest",
    "MessageRequestCode",
    "PullRequest",
    "PullResponse",
    "QueryMessageRequest",
    "QueueRequest",
    "SendRequest",
    "SendResponse",
]
