"""Consensus messages (DLedger's protocol package: VoteRequest, HeartBeatRequest,
PushEntryRequest, LeadershipTransferRequest and their responses) and their plain-dict wire form.

Every message carries DLedger's RequestOrResponse base: group, remote_id (addressee),
local_id (sender), leader_id, term and code. ``req_id`` is ours: DLedger correlates a
response with its request through the Netty remoting layer's opaque id; a sans-IO node has
no futures, so the id travels inside the message and the response echoes it.

``to_wire()`` gives a dict of msgpack-able values (str, int, bytes, list, dict) tagged with
``"_type"`` (the class name);
``message_from_wire()`` turns such a dict back into the right class.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from enum import IntEnum
from typing import Any, ClassVar

from dledger.codes import RequestCode, ResponseCode
from dledger.errors import check
from dledger.store.entry import Entry, entries_from_raw


class VoteResult(IntEnum):
    """VoteResponse.RESULT, in DLedger 0.2.3's enum order."""

    UNKNOWN = 0
    ACCEPT = 1
    REJECT_UNKNOWN_LEADER = 2
    REJECT_UNEXPECTED_LEADER = 3
    REJECT_EXPIRED_VOTE_TERM = 4
    REJECT_ALREADY_VOTED = 5
    REJECT_ALREADY_HAS_LEADER = 6
    REJECT_TERM_NOT_READY = 7
    REJECT_TERM_SMALL_THAN_LEDGER = 8
    REJECT_EXPIRED_LEDGER_TERM = 9
    REJECT_SMALL_LEDGER_END_INDEX = 10
    REJECT_TAKING_LEADERSHIP = 11


class ParseResult(IntEnum):
    """VoteResponse.ParseResult, in DLedger's enum order."""

    WAIT_TO_REVOTE = 0
    REVOTE_IMMEDIATELY = 1
    PASSED = 2
    WAIT_TO_VOTE_NEXT = 3


class PushType(IntEnum):
    """PushEntryRequest.Type, in DLedger's enum order."""

    APPEND = 0
    COMMIT = 1
    COMPARE = 2
    TRUNCATE = 3


@dataclass(slots=True)
class Message:
    group: str = ""
    remote_id: str = ""
    local_id: str = ""
    leader_id: str | None = None
    term: int = -1
    code: int = ResponseCode.SUCCESS
    req_id: int = 0

    REQUEST_CODE: ClassVar[RequestCode] = RequestCode.UNKNOWN
    IS_RESPONSE: ClassVar[bool] = False

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"_type": type(self).__name__}
        for name in _field_names(type(self)):
            value = getattr(self, name)
            if type(value) in _PLAIN:  # most fields: nothing to convert
                out[name] = value
                continue
            if name == "entries":
                value = [_entry_to_wire(e) for e in value]
            elif isinstance(value, IntEnum):
                value = int(value)
            elif isinstance(value, list):
                value = list(value)
            elif isinstance(value, dict):
                value = dict(value)
            out[name] = value
        return out

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Message:
        kwargs: dict[str, Any] = {}
        for name in _field_names(cls):
            if name not in data:
                continue
            value = data[name]
            if type(value) in _PLAIN and name not in _CONVERTED:
                kwargs[name] = value
                continue
            if name == "entries":
                value = [_entry_from_wire(e) for e in value]
            elif name == "vote_result":
                value = VoteResult(value)
            elif name == "type":
                value = PushType(value)
            elif name == "bodies":
                value = [bytes(b) for b in value]
            elif name == "raw":
                # A view of the frame's own receive buffer (frames.decode_tailed) is kept as it
                # is: the entries reach the store without a copy.
                if type(value) is memoryview:
                    value = value.cast("B") if value.format != "B" else value
                elif not isinstance(value, bytes | bytearray):
                    raise TypeError(f"raw is {type(value).__name__}, not bytes")
                else:
                    value = bytes(value)
            elif isinstance(value, list):
                value = list(value)
            kwargs[name] = value
        return cls(**kwargs)

    def base_reply(self, resp: Message) -> Message:
        """Fill a response's base fields from this request (DLedger's copyBaseInfo, swapped ends)."""
        resp.group = self.group
        resp.remote_id = self.local_id
        resp.local_id = self.remote_id
        resp.req_id = self.req_id
        return resp


# Field values sent and taken as they are (the wire decoder gives exactly these types), except
# the fields named in _CONVERTED, which from_wire turns into enums or checks.
_PLAIN = frozenset({int, str, bytes, bool, float, type(None)})
_CONVERTED = frozenset({"vote_result", "type", "raw"})


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


def _entry_to_wire(e: Entry) -> list[Any]:
    return [e.index, e.term, e.pos, e.body, e.magic, e.channel, e.chain_crc, e.body_crc]


def _entry_from_wire(v: list[Any]) -> Entry:
    index, term, pos, body, magic, channel, chain_crc, body_crc = v
    return Entry(
        index=index,
        term=term,
        pos=pos,
        body=bytes(body),
        magic=magic,
        channel=channel,
        chain_crc=chain_crc,
        body_crc=body_crc,
    )


@dataclass(slots=True)
class VoteRequest(Message):
    ledger_end_index: int = -1
    ledger_end_term: int = -1
    REQUEST_CODE: ClassVar[RequestCode] = RequestCode.VOTE


@dataclass(slots=True)
class VoteResponse(Message):
    vote_result: VoteResult = VoteResult.UNKNOWN
    REQUEST_CODE: ClassVar[RequestCode] = RequestCode.VOTE
    IS_RESPONSE: ClassVar[bool] = True


@dataclass(slots=True)
class HeartBeatRequest(Message):
    REQUEST_CODE: ClassVar[RequestCode] = RequestCode.HEART_BEAT


@dataclass(slots=True)
class HeartBeatResponse(Message):
    REQUEST_CODE: ClassVar[RequestCode] = RequestCode.HEART_BEAT
    IS_RESPONSE: ClassVar[bool] = True


@dataclass(slots=True)
class PushEntryRequest(Message):
    """One push. ``entries`` holds the single entry (APPEND, COMPARE, TRUNCATE), a batch
    given as entries, or nothing (COMMIT); DLedger's ``entry``/``batchEntry`` pair in one list.
    The leader sends a batch APPEND as ``raw`` instead: its stored bytes of the entries, which
    the follower validates and appends in one store call (no object per entry either side)."""

    type: PushType = PushType.APPEND
    commit_index: int = -1
    entries: list[Entry] = field(default_factory=list)
    # A batch APPEND in its stored form instead of ``entries``: the leader's bytes of entries
    # raw_index .. raw_index + raw_count - 1 (one data file's worth), raw[0] at raw_pos.
    raw: bytes | memoryview = b""
    raw_index: int = -1
    raw_pos: int = -1
    raw_count: int = 0
    REQUEST_CODE: ClassVar[RequestCode] = RequestCode.PUSH

    @property
    def first_index(self) -> int:
        if self.raw:
            return self.raw_index
        return self.entries[0].index if self.entries else -1

    @property
    def last_index(self) -> int:
        if self.raw:
            return self.raw_index + self.raw_count - 1
        return self.entries[-1].index if self.entries else -1

    def entry_list(self) -> list[Entry]:
        """The pushed entries as objects, decoding ``raw`` if that is the form (raises
        DLedgerError on a blob that does not decode to ``raw_count`` entries)."""
        if not self.raw:
            return self.entries
        entries = entries_from_raw(self.raw, self.raw_index, self.raw_pos)
        check(
            len(entries) == self.raw_count,
            ResponseCode.UNEXPECTED_ARGUMENT,
            f"blob holds {len(entries)} entries, not {self.raw_count}",
        )
        return entries


@dataclass(slots=True)
class PushEntryResponse(Message):
    index: int = -1
    begin_index: int = -1
    end_index: int = -1
    REQUEST_CODE: ClassVar[RequestCode] = RequestCode.PUSH
    IS_RESPONSE: ClassVar[bool] = True


@dataclass(slots=True)
class AppendEntryResponse(Message):
    """The answer to a local append (``AppendDone``): ``index`` is the last entry's index and
    ``pos`` its position; ``positions`` has one position per body of a batch (DLedger's
    BatchAppendFuture positions). Client appends reach the node through the runtime's
    ``propose``, not as messages."""

    index: int = -1
    pos: int = -1
    positions: Sequence[int] = field(default_factory=list)
    REQUEST_CODE: ClassVar[RequestCode] = RequestCode.APPEND
    IS_RESPONSE: ClassVar[bool] = True


@dataclass(slots=True)
class LeadershipTransferRequest(Message):
    transfer_id: str = ""
    transferee_id: str = ""
    take_leadership_ledger_index: int = -1
    REQUEST_CODE: ClassVar[RequestCode] = RequestCode.LEADERSHIP_TRANSFER


@dataclass(slots=True)
class LeadershipTransferResponse(Message):
    # Ours: why a transfer failed (or that the transferee already leads), for the log and
    # the caller; DLedger's response has only the code.
    reason: str = ""
    REQUEST_CODE: ClassVar[RequestCode] = RequestCode.LEADERSHIP_TRANSFER
    IS_RESPONSE: ClassVar[bool] = True


MESSAGE_TYPES: dict[str, type[Message]] = {
    cls.__name__: cls
    for cls in (
        VoteRequest,
        VoteResponse,
        HeartBeatRequest,
        HeartBeatResponse,
        PushEntryRequest,
        PushEntryResponse,
        AppendEntryResponse,
        LeadershipTransferRequest,
        LeadershipTransferResponse,
    )
}


def message_from_wire(data: dict[str, Any]) -> Message:
    """Decode any message dict produced by ``Message.to_wire``."""
    name = data.get("_type")
    cls = MESSAGE_TYPES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ValueError(f"unknown message type {name!r}")
    return cls.from_wire(data)
