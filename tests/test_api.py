"""The client API's bodies: each reads back what it writes, writes exactly the maps members and
clients have always exchanged (so old and new ones still talk), and refuses what it cannot
read with UNEXPECTED_ARGUMENT naming the key."""

from __future__ import annotations

import struct
from typing import Any

import msgpack
import numpy as np
import pytest

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
    body_int,
    body_opt_str,
    body_str,
)
from dledger.codes import ResponseCode
from dledger.errors import DLedgerError
from dledger.packed import PackedBodies
from dledger.store.entry import Entry


def over_the_wire(body: dict[str, Any]) -> dict[str, Any]:
    return msgpack.unpackb(msgpack.packb(body, use_bin_type=True), raw=False)


def refused(fn: Any, *args: Any, code: ResponseCode = ResponseCode.UNEXPECTED_ARGUMENT) -> str:
    with pytest.raises(DLedgerError) as err:
        fn(*args)
    assert err.value.code == code
    return err.value.message


def metadata(**change: Any) -> MetadataResponse:
    m = MetadataResponse(
        id="n0",
        addr="127.0.0.1:20911",
        group="g",
        role="LEADER",
        term=3,
        leader="n0",
        end_index=9,
        committed_index=8,
        begin_index=0,
        pid=1234,
        peers={"n0": "127.0.0.1:20911", "n1": "127.0.0.1:20912"},
    )
    for k, v in change.items():
        setattr(m, k, v)
    return m


# -- the maps the wire has always carried ----------------------------------------------------


def test_an_append_of_one_body_is_a_list_and_of_several_is_packed():
    assert AppendRequest([b"abc"]).to_wire() == {"bodies": [b"abc"]}
    assert AppendRequest([b"ab", b"cde"]).to_wire() == {"sizes": struct.pack("<2I", 2, 3), "raw": b"abcde"}
    sizes = np.array([2, 3], dtype="<u4")
    assert AppendRequest([b"ab", b"cde"], sizes).to_wire() == {"sizes": struct.pack("<2I", 2, 3), "raw": b"abcde"}


def test_responses_write_the_maps_of_before():
    assert AppendResponse(7, 300, [100, 200, 300], 2, "n1").to_wire() == {
        "index": 7,
        "pos": 300,
        "positions": [100, 200, 300],
        "term": 2,
        "leader": "n1",
    }
    assert GetRequest(5, 3).to_wire() == {"index": 5, "count": 3}
    assert GetResponse([Entry(index=5, term=1, pos=480, body=b"x")], 9).to_wire() == {
        "entries": [[5, 1, 480, b"x"]],
        "committed": 9,
    }
    assert TransferRequest("n2").to_wire() == {"to": "n2"}
    assert TransferResponse("n2", 4, "").to_wire() == {"leader": "n2", "term": 4, "reason": ""}
    assert LeaderHint(None).to_wire() == {"leader": None}
    assert UnknownGroupResponse(["a", "b"]).to_wire() == {"groups": ["a", "b"]}


def test_metadata_writes_the_map_of_before_and_match_index_only_from_a_leader():
    peers = {"n0": "127.0.0.1:20911", "n1": "127.0.0.1:20912"}
    follower = {
        "id": "n0",
        "addr": "127.0.0.1:20911",
        "group": "g",
        "role": "LEADER",
        "term": 3,
        "leader": "n0",
        "end_index": 9,
        "committed_index": 8,
        "begin_index": 0,
        "pid": 1234,
        "peers": peers,
    }
    assert metadata().to_wire() == follower
    assert list(metadata().to_wire()) == list(follower)
    assert metadata(match_index={"n0": 9, "n1": 7}).to_wire() == {**follower, "match_index": {"n0": 9, "n1": 7}}


# -- round trips -----------------------------------------------------------------------------


def test_bodies_read_back_what_they_write():
    for msg in (
        AppendResponse(7, 300, [100, 200, 300], 2, "n1"),
        AppendResponse(0, 0, [0], 1, None),
        GetRequest(5, 3),
        GetRequest(0),
        GetResponse([Entry(index=5, term=1, pos=480, body=b"x"), Entry(index=6, term=1, pos=529, body=b"yz")], 9),
        GetResponse([], -1),
        TransferRequest("n2"),
        TransferResponse("n2", 4, "already the leader"),
        TransferResponse(None, None, ""),
        metadata(),
        metadata(leader=None, match_index={"n0": 9}),
        UnknownGroupResponse(["a"]),
    ):
        assert type(msg).from_wire(over_the_wire(msg.to_wire())) == msg
    assert LeaderHint.from_wire(over_the_wire(LeaderHint("n1").to_wire())) == LeaderHint("n1")


@pytest.mark.parametrize("bodies", [[b"abc"], [b"a", b"bc", b"d" * 1000]])
def test_appends_read_back_their_bodies(bodies: list[bytes]):
    got = AppendRequest.from_wire(over_the_wire(AppendRequest(bodies).to_wire()), 4096)
    assert list(got.bodies) == bodies
    if len(bodies) > 1:
        assert isinstance(got.bodies, PackedBodies)  # kept packed, for the store to encode in place
        assert list(AppendRequest.from_wire(got.to_wire(), 4096).bodies) == bodies  # and written packed again


def test_an_answer_without_positions_reads_as_none_given():
    r = AppendResponse.from_wire({"index": 3, "pos": 96, "term": 1, "leader": "n0"})
    assert r.positions == [] and r.index == 3 and r.pos == 96


def test_a_leader_hint_is_lenient():
    assert LeaderHint.from_wire({}).leader is None
    assert LeaderHint.from_wire({"leader": 5}).leader is None
    assert LeaderHint.from_wire({"leader": "n1", "index": 3}).leader == "n1"


# -- what is refused -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "code", "says"),
    [
        ({}, ResponseCode.UNEXPECTED_ARGUMENT, "bodies"),
        ({"bodies": "not a list"}, ResponseCode.UNEXPECTED_ARGUMENT, "bodies must be a list"),
        ({"bodies": [b"x", "y"]}, ResponseCode.UNEXPECTED_ARGUMENT, "bodies must be bytes"),
        ({"bodies": []}, ResponseCode.REQUEST_WITH_EMPTY_BODYS, "no bodies"),
        ({"bodies": [b"x", b""]}, ResponseCode.REQUEST_WITH_EMPTY_BODYS, "empty body"),
        ({"bodies": [b"x" * 11]}, ResponseCode.UNEXPECTED_ARGUMENT, "over 10 bytes"),
        ({"raw": b"xxxxx", "sizes": struct.pack("<3I", 2, 2, 2)}, ResponseCode.UNEXPECTED_ARGUMENT, "add up"),
        ({"raw": b"x", "sizes": "1"}, ResponseCode.UNEXPECTED_ARGUMENT, "must be bytes"),
        ({"raw": b"x"}, ResponseCode.UNEXPECTED_ARGUMENT, "must be bytes"),
        ({"raw": b"", "sizes": b""}, ResponseCode.REQUEST_WITH_EMPTY_BODYS, "no bodies"),
    ],
)
def test_a_bad_append_is_refused(body: dict[str, Any], code: ResponseCode, says: str):
    assert says in refused(AppendRequest.from_wire, body, 10, code=code)


@pytest.mark.parametrize(
    ("cls", "body", "says"),
    [
        (GetRequest, {}, "index is missing"),
        (GetRequest, {"index": "3"}, "index must be an int, not str"),
        (GetRequest, {"index": True}, "index must be an int, not bool"),
        (GetRequest, {"index": 3, "count": None}, "count must be an int, not nil"),
        (GetRequest, {"index": -5}, "want index >= 0"),
        (GetRequest, {"index": 0, "count": 0}, "count >= 1"),
        (TransferRequest, {}, "to is missing"),
        (TransferRequest, {"to": 2}, "to must be a string, not int"),
        (AppendResponse, {"pos": 3}, "index is missing"),
        (AppendResponse, {"index": 3, "pos": 3, "positions": [1, "2"]}, "positions must be a list of ints"),
        (AppendResponse, {"index": 3, "pos": 3, "leader": 1}, "leader must be a string or nil"),
        (GetResponse, {"committed": 1}, "entries must be a list, not nil"),
        (GetResponse, {"entries": [[1, 1, 0]], "committed": 1}, "[index, term, pos, body]"),
        (GetResponse, {"entries": [[1, 1, 0, "text"]], "committed": 1}, "[index, term, pos, body]"),
        (GetResponse, {"entries": []}, "committed is missing"),
        (MetadataResponse, {**metadata().to_wire(), "peers": ["n0"]}, "peers must be a map"),
        (MetadataResponse, {**metadata().to_wire(), "match_index": {"n0": "9"}}, "match_index must be a map"),
        (MetadataResponse, {k: v for k, v in metadata().to_wire().items() if k != "role"}, "role is missing"),
        (MetadataResponse, {**metadata().to_wire(), "term": 1.5}, "term must be an int, not float"),
        (TransferResponse, {"leader": "n1", "term": "4"}, "term must be an int or nil"),
        (UnknownGroupResponse, {"groups": [1]}, "groups must be a list of strings"),
    ],
)
def test_a_bad_body_is_refused_naming_what_is_wrong(cls: Any, body: dict[str, Any], says: str):
    assert says in refused(cls.from_wire, body)


def test_the_helpers_take_defaults_and_name_the_key():
    assert body_int({}, "n", 4) == 4 and body_str({}, "s", "") == "" and body_opt_str({}, "s") is None
    assert refused(body_int, {"n": None}, "n", 4) == "n must be an int, not nil"
    assert refused(body_str, {}, "s") == "s is missing"
