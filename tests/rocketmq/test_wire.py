"""The message API's requests and responses: RocketMQ's request codes, and what a member reads
back from what a client writes (or refuses to read)."""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dledger._ext import load
from dledger.codes import ResponseCode
from dledger.errors import DLedgerError
from dledger.rocketmq.store.status import GetMessageStatus, PutMessageStatus
from dledger.rocketmq.wire import (
    ConsumerOffsetRequest,
    MessageRequestCode,
    PullRequest,
    PullResponse,
    QueryMessageRequest,
    QueueRequest,
    SendRequest,
    SendResponse,
)

K = load("message")


def over_the_wire(body: dict[str, Any]) -> dict[str, Any]:
    return msgpack.unpackb(msgpack.packb(body, use_bin_type=True), raw=False)


def test_request_codes_are_rocketmqs():
    assert MessageRequestCode.SEND_MESSAGE == 10
    assert MessageRequestCode.PULL_MESSAGE == 11
    assert MessageRequestCode.QUERY_MESSAGE == 12
    assert MessageRequestCode.QUERY_CONSUMER_OFFSET == 14
    assert MessageRequestCode.UPDATE_CONSUMER_OFFSET == 15
    assert MessageRequestCode.SEARCH_OFFSET_BY_TIMESTAMP == 29
    assert MessageRequestCode.GET_MAX_OFFSET == 30
    assert MessageRequestCode.GET_MIN_OFFSET == 31
    assert MessageRequestCode.VIEW_MESSAGE_BY_ID == 33
    assert MessageRequestCode.SEND_BATCH_MESSAGE == 320


def test_send_request_round_trip_keeps_bodies_and_properties():
    req = SendRequest(
        "TopicA",
        3,
        [b"one", b"", b"three"],
        [b"TAGS\x01a", b"", b"KEYS\x01k1 k2"],
        flag=7,
        sys_flag=0,
        born_timestamp=123,
        born_host="10.0.0.1:5555",
    )
    got, bodies, props = SendRequest.from_wire(over_the_wire(req.to_wire()))
    assert (got.topic, got.queue_id, got.flag, got.born_timestamp, got.born_host) == (
        "TopicA",
        3,
        7,
        123,
        "10.0.0.1:5555",
    )
    assert list(bodies) == [b"one", b"", b"three"]
    assert props is not None  # None only for a request with a properties stem
    assert list(props) == [b"TAGS\x01a", b"", b"KEYS\x01k1 k2"]


@pytest.mark.parametrize(
    "change",
    [
        {"sizes": b"\x01\x00\x00"},  # not an array of uint32
        {"sizes": b"\x09\x00\x00\x00"},  # sizes do not add up to raw
        {"props_sizes": b""},  # properties for none of the bodies
        {"topic": 5},  # not a string
        {"queue_id": "0"},  # not an int
        {"raw": None},
    ],
)
def test_malformed_send_requests_are_refused(change: dict[str, Any]):
    body = {**SendRequest("T", 0, [b"abc"], [b""]).to_wire(), **change}
    with pytest.raises(DLedgerError) as err:
        SendRequest.from_wire(body)
    assert err.value.code == ResponseCode.UNEXPECTED_ARGUMENT


def test_an_empty_send_is_refused():
    body = SendRequest("T", 0, [], []).to_wire()
    with pytest.raises(DLedgerError) as err:
        SendRequest.from_wire(body)
    assert err.value.code == ResponseCode.REQUEST_WITH_EMPTY_BODYS


def test_responses_and_other_requests_round_trip():
    s = SendResponse(PutMessageStatus.PUT_OK, "", 2, 40, [48, 200], "127.0.0.1:10911", "n1", phys_add=48)
    got = SendResponse.from_wire(over_the_wire(s.to_wire()))
    assert got.phys_offsets.tolist() == [48, 200]  # type: ignore[union-attr]
    got.phys_offsets = s.phys_offsets
    assert got == s
    p = PullResponse(GetMessageStatus.FOUND, 12, 0, 13, b"records", [48])
    assert PullResponse.from_wire(over_the_wire(p.to_wire())) == p
    for req, cls in (
        (PullRequest("T", 1, 5, 10, 2000), PullRequest),
        (QueueRequest("T", 1, 99), QueueRequest),
        (ConsumerOffsetRequest("g", "T", 1, 8), ConsumerOffsetRequest),
        (QueryMessageRequest("T", "k", 5, 1, 2, ""), QueryMessageRequest),
    ):
        assert cls.from_wire(over_the_wire(req.to_wire())) == req


def test_pull_and_offset_requests_check_their_values():
    with pytest.raises(DLedgerError):
        PullRequest.from_wire(PullRequest("T", 0, -1).to_wire())
    with pytest.raises(DLedgerError):
        PullRequest.from_wire(PullRequest("T", 0, 0, 0).to_wire())
    # What consumerOffset.json cannot hold for a Java reader (Integer queue ids, Long offsets),
    # or a key it cannot split (topic@group): refused, never written.
    for bad in (
        ConsumerOffsetRequest("a@b", "T", 0),
        ConsumerOffsetRequest("g", "", 0, 5),
        ConsumerOffsetRequest("g", "T", -7, 5),
        ConsumerOffsetRequest("g", "T", 1 << 40, 5),
        ConsumerOffsetRequest("g", "T", 0, 1 << 63),
    ):
        with pytest.raises(DLedgerError):
            ConsumerOffsetRequest.from_wire(bad.to_wire())
    assert ConsumerOffsetRequest.from_wire(ConsumerOffsetRequest("g", "T", (1 << 31) - 1, (1 << 63) - 1).to_wire())


def test_the_clients_are_exported_by_the_package():
    import dledger.rocketmq as mq
    from dledger.rocketmq.client.consumer import Consumer
    from dledger.rocketmq.client.producer import Producer

    assert mq.Producer is Producer and mq.Consumer is Consumer


def test_send_response_positions_must_be_int64s():
    body = SendResponse(PutMessageStatus.PUT_OK, "", 0, 0, [48]).to_wire()
    body["phys"] = b"\x00" * 12
    with pytest.raises(DLedgerError):
        SendResponse.from_wire(body)


@given(st.lists(st.binary(max_size=40), max_size=30))
def test_pack_bodies_joins_and_measures(bodies: list[bytes]):
    raw, sizes = K.pack_bodies(bodies)
    assert raw == b"".join(bodies)
    assert sizes.dtype == np.uint32 and sizes.tolist() == [len(b) for b in bodies]
    req = SendRequest("T", 0, [], [b""] * len(bodies), packed=(raw, sizes))
    if bodies:
        assert SendRequest.from_wire(over_the_wire(req.to_wire()))[1][:] == bodies


def test_pack_bodies_takes_bytes_only():
    with pytest.raises(TypeError):
        K.pack_bodies([b"a", bytearray(b"b")])


def test_a_blocking_client_that_cannot_start_leaves_no_event_loop_open(recwarn: pytest.WarningsRecorder) -> None:
    import asyncio
    import gc

    from dledger.rocketmq import Consumer, Producer

    with pytest.raises(DLedgerError):
        Producer("garbage")
    with pytest.raises(DLedgerError):
        Consumer("n0-127.0.0.1:1", "g", "T", read_from="nobody")

    async def inside_a_loop() -> None:
        Producer("n0-127.0.0.1:1")

    with pytest.raises(RuntimeError, match="Async twin"):
        asyncio.run(inside_a_loop())
    gc.collect()
    assert not [w for w in recwarn if issubclass(w.category, ResourceWarning)], [str(w.message) for w in recwarn]
