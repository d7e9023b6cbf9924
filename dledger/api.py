"""The client API's request and response bodies (DLedger's protocol package: AppendEntryRequest,
GetEntriesRequest, MetadataRequest, LeadershipTransferRequest and their responses), beside the
consensus messages of ``dledger.raft.messages``.

Each travels as the body of a transport frame (a msgpack map; the frame carries the request
and response codes). ``to_wire()`` gives that map and ``from_wire()`` reads it back; what a
member or a client cannot read (a missing key, a value of the wrong type) is refused with
``DLedgerError(UNEXPECTED_ARGUMENT)`` naming the key, never a ``KeyError`` or ``TypeError``.
The message service's bodies (``dledger.rocketmq.wire``) use the same helpers.

Bodies of an append go packed when there are several (``dledger.packed``: one buffer and a
uint32 size array), a single one as a list of one, and a member takes either form.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dledger.codes import ResponseCode
from dledger.errors import DLedgerError
from dledger.packed import SIZE_DTYPE, PackedBodies
from dledger.store.entry import Entry


def unexpected(message: str) -> DLedgerError:
    """The error a body that cannot be read is refused with."""
    return DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, message)


def _type_name(value: object) -> str:
    return "nil" if value is None else type(value).__name__


def body_str(body: dict[str, Any], key: str, default: str | None = None) -> str:
    """``body[key]``, a string; ``default`` when it is absent (None: it must be there)."""
    v = body.get(key, default)
    if not isinstance(v, str):
        if v is None and key not in body:
            raise unexpected(f"{key} is missing")
        raise unexpected(f"{key} must be a string, not {_type_name(v)}")
    return v


def body_int(body: dict[str, Any], key: str, default: int | None = None) -> int:
    """``body[key]``, an int (not a bool); ``default`` when it is absent (None: it must be there)."""
    v = body.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool):
        if v is None and key not in body:
            raise unexpected(f"{key} is missing")
        raise unexpected(f"{key} must be an int, not {_type_name(v)}")
    return v


def body_opt_str(body: dict[str, Any], key: str) -> str | None:
    """``body[key]``: a string, or nil / absent (None)."""
    v = body.get(key)
    if v is not None and not isinstance(v, str):
        raise unexpected(f"{key} must be a string or nil, not {_type_name(v)}")
    return v


def body_opt_int(body: dict[str, Any], key: str) -> int | None:
    """``body[key]``: an int, or nil / absent (None)."""
    v = body.get(key)
    if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
        raise unexpected(f"{key} must be an int or nil, not {_type_name(v)}")
    return v


def _int_list(value: object, key: str) -> list[int]:
    # One C loop over the types: a batch answer has an element per body.
    if type(value) is not list or not set(map(type, value)) <= {int}:
        raise unexpected(f"{key} must be a list of ints, not {_type_name(value)}")
    return value


@dataclass(slots=True)
class LeaderHint:
    """The body of a refusal that names the leader as this member knows it (NOT_LEADER and the
    other codes a client retries elsewhere), as DLedger's responses carry ``leaderId``."""

    leader: str | None

    def to_wire(self) -> dict[str, Any]:
        return {"leader": self.leader}

    @staticmethod
    def from_wire(body: object) -> LeaderHint:
        """Lenient, as a hint may be: anything but a string in ``leader`` (or no body) is no hint."""
        leader = body.get("leader") if isinstance(body, dict) else None
        return LeaderHint(leader if type(leader) is str else None)


@dataclass(slots=True)
class UnknownGroupResponse:
    """The body of UNKNOWN_GROUP: the groups the member serves, so the caller can name one."""

    groups: list[str]

    def to_wire(self) -> dict[str, Any]:
        return {"groups": self.groups}

    @staticmethod
    def from_wire(body: dict[str, Any]) -> UnknownGroupResponse:
        groups = body.get("groups")
        if type(groups) is not list or not all(type(g) is str for g in groups):
            raise unexpected(f"groups must be a list of strings, not {_type_name(groups)}")
        return UnknownGroupResponse(groups)


@dataclass(slots=True)
class AppendRequest:
    """APPEND (DLedger's AppendEntryRequest, batched as its BatchAppendEntryRequest): bodies
    appended in order as consecutive entries.

    ``sizes``, when the sender has them, are the bodies' lengths as a SIZE_DTYPE array (spares
    measuring them again). A request read by ``from_wire`` holds a ``PackedBodies`` when it
    came packed, which the file store encodes from in place.
    """

    bodies: Sequence[bytes]
    sizes: np.ndarray | None = field(default=None, compare=False, repr=False)

    def to_wire(self) -> dict[str, Any]:
        bodies = self.bodies
        if len(bodies) <= 1:
            return {"bodies": list(bodies)}
        if isinstance(bodies, PackedBodies):
            raw: bytes | bytearray | memoryview = bodies.raw
            sizes = np.diff(bodies.offsets).astype(SIZE_DTYPE).tobytes()
        else:
            raw, sizes = PackedBodies.pack(bodies, self.sizes)
        return {"sizes": sizes, "raw": raw}

    @staticmethod
    def from_wire(body: dict[str, Any], max_body_size: int) -> AppendRequest:
        """Checks every body is non-empty bytes of at most ``max_body_size``."""
        if "raw" in body:
            return AppendRequest(PackedBodies.from_wire(body["raw"], body.get("sizes"), max_body_size))
        bodies = body.get("bodies")
        if type(bodies) is not list:
            raise unexpected(f"bodies must be a list of bytes (or raw and sizes), not {_type_name(bodies)}")
        if not bodies:
            raise DLedgerError(ResponseCode.REQUEST_WITH_EMPTY_BODYS, "no bodies")
        # C loops (map, min, max) rather than a Python one: this runs for every body.
        if set(map(type, bodies)) != {bytes}:
            raise unexpected("bodies must be bytes")
        lens = list(map(len, bodies))
        if min(lens) == 0:
            raise DLedgerError(ResponseCode.REQUEST_WITH_EMPTY_BODYS, "empty body")
        if max(lens) > max_body_size:
            raise unexpected(f"body over {max_body_size} bytes")
        return AppendRequest(bodies)


@dataclass(slots=True)
class AppendResponse:
    """The answer to APPEND (DLedger's AppendEntryResponse): ``index`` is the last entry's index
    and ``pos`` its position, ``positions`` the position of each body of the batch."""

    index: int
    pos: int
    positions: list[int] = field(default_factory=list)
    term: int = -1
    leader: str | None = None

    def to_wire(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "pos": self.pos,
            "positions": self.positions,
            "term": self.term,
            "leader": self.leader,
        }

    @staticmethod
    def from_wire(body: dict[str, Any]) -> AppendResponse:
        positions = body.get("positions")
        return AppendResponse(
            body_int(body, "index"),
            body_int(body, "pos"),
            [] if positions is None else _int_list(positions, "positions"),
            body_int(body, "term", -1),
            body_opt_str(body, "leader"),
        )


@dataclass(slots=True)
class GetRequest:
    """GET (DLedger's GetEntriesRequest): up to ``count`` committed entries from ``index``."""

    index: int
    count: int = 1

    def to_wire(self) -> dict[str, Any]:
        return {"index": self.index, "count": self.count}

    @staticmethod
    def from_wire(body: dict[str, Any]) -> GetRequest:
        req = GetRequest(body_int(body, "index"), body_int(body, "count", 1))
        if req.index < 0 or req.count < 1:
            raise unexpected("want index >= 0 and count >= 1")
        return req


@dataclass(slots=True)
class GetResponse:
    """The answer to GET: the entries (each as ``[index, term, pos, body]`` on the wire) and
    the committed index the read was served at."""

    entries: list[Entry]
    committed: int

    def to_wire(self) -> dict[str, Any]:
        return {"entries": [[e.index, e.term, e.pos, e.body] for e in self.entries], "committed": self.committed}

    @staticmethod
    def from_wire(body: dict[str, Any]) -> GetResponse:
        raw = body.get("entries")
        if type(raw) is not list:
            raise unexpected(f"entries must be a list, not {_type_name(raw)}")
        entries = []
        for e in raw:
            if (
                type(e) is not list
                or len(e) != 4
                or type(e[0]) is not int
                or type(e[1]) is not int
                or type(e[2]) is not int
                or type(e[3]) is not bytes
            ):
                raise unexpected("each of entries must be [index, term, pos, body]")
            entries.append(Entry(index=e[0], term=e[1], pos=e[2], body=e[3]))
        return GetResponse(entries, body_int(body, "committed"))


@dataclass(slots=True)
class MetadataResponse:
    """The answer to METADATA: one member's own view of itself and its group. The leader adds
    ``match_index``, how far each member's log is known to match its own (its own entry:
    what it has flushed)."""

    id: str
    addr: str
    group: str
    role: str
    term: int
    leader: str | None
    end_index: int
    committed_index: int
    begin_index: int
    pid: int
    peers: dict[str, str]
    match_index: dict[str, int] | None = None

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "addr": self.addr,
            "group": self.group,
            "role": self.role,
            "term": self.term,
            "leader": self.leader,
            "end_index": self.end_index,
            "committed_index": self.committed_index,
            "begin_index": self.begin_index,
            "pid": self.pid,
            "peers": self.peers,
        }
        if self.match_index is not None:
            out["match_index"] = self.match_index
        return out

    @staticmethod
    def from_wire(body: dict[str, Any]) -> MetadataResponse:
        peers = body.get("peers")
        if type(peers) is not dict or not all(type(k) is str and type(v) is str for k, v in peers.items()):
            raise unexpected(f"peers must be a map of member id to address, not {_type_name(peers)}")
        match = body.get("match_index")
        if match is not None and (
            type(match) is not dict or not all(type(k) is str and type(v) is int for k, v in match.items())
        ):
            raise unexpected(f"match_index must be a map of member id to index, not {_type_name(match)}")
        return MetadataResponse(
            body_str(body, "id"),
            body_str(body, "addr"),
            body_str(body, "group"),
            body_str(body, "role"),
            body_int(body, "term"),
            body_opt_str(body, "leader"),
            body_int(body, "end_index"),
            body_int(body, "committed_index"),
            body_int(body, "begin_index"),
            body_int(body, "pid"),
            peers,
            match,
        )


@dataclass(slots=True)
class TransferRequest:
    """LEADERSHIP_TRANSFER (DLedger's LeadershipTransferRequest): hand leadership to ``to``."""

    to: str

    def to_wire(self) -> dict[str, Any]:
        return {"to": self.to}

    @staticmethod
    def from_wire(body: dict[str, Any]) -> TransferRequest:
        return TransferRequest(body_str(body, "to"))


@dataclass(slots=True)
class TransferResponse:
    """The answer to LEADERSHIP_TRANSFER: the leader and term after it, and ``reason``, why it
    failed or that the transferee already led (ours; DLedger's response has only the code)."""

    leader: str | None
    term: int | None
    reason: str = ""

    def to_wire(self) -> dict[str, Any]:
        return {"leader": self.leader, "term": self.term, "reason": self.reason}

    @staticmethod
    def from_wire(body: dict[str, Any]) -> TransferResponse:
        reason = body.get("reason")
        return TransferResponse(
            body_opt_str(body, "leader"), body_opt_int(body, "term"), reason if type(reason) is str else ""
        )


__all__ = [
    "AppendRequest",
    "AppendResponse",
    "GetRequest",
    "GetResponse",
    "LeaderHint",
    "MetadataResponse",
    "TransferRequest",
    "TransferResponse",
    "UnknownGroupResponse",
    "body_int",
    "body_opt_int",
    "body_opt_str",
    "body_str",
    "unexpected",
]
