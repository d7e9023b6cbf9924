"""A member's checks of what a producer sends, without a group: the batch path (array operations
over the packed buffers) refuses and accepts the same properties strings as the one-message path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dledger._ext import load
from dledger.config import DLedgerConfig
from dledger.rocketmq.broker.message_service import MessageService
from dledger.rocketmq.broker.send_message_processor import PackedSend, _check_properties
from dledger.rocketmq.store.encode import IllegalMessage, PreparedBatch, encode_batch
from dledger.rocketmq.store.message import MessageSysFlag
from dledger.rocketmq.store.records import decode_record
from dledger.rocketmq.wire import SendRequest

K = load("message")
# The producer's address as a member's connection sees it.
PEER = "10.1.2.3:4567"
GOOD = b"UNIQ_KEY\x01abc\x02TAGS\x01t"
CASES = {
    "pairs": (GOOD, True),
    "empty": (b"", True),
    "empty value": (b"a\x01", True),
    "no name": (b"\x01x", False),
    "no separator": (b"abc", False),
    "empty name after a pair": (b"a\x01b\x02\x01c", False),
    "not UTF-8": (b"a\x01\xff", False),
    "over 32767 bytes": (b"a\x01" + b"v" * 32767, False),
}


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MessageService]:
    root: Path = tmp_path_factory.mktemp("prep")
    cfg = DLedgerConfig(
        self_id="n0",
        peers="n0-127.0.0.1:1",
        store_base_dir=str(root),
        message_store=True,
        mapped_file_size_for_entry_data=1 << 22,
        default_topic_queue_nums=4,
    )
    svc = MessageService(cfg, "127.0.0.1:1")
    try:
        yield svc
    finally:
        svc.store.close()


def accepted(svc: MessageService, props: list[bytes], topic: str = "T", queue_id: int = 0) -> bool:
    req, bodies, packed = SendRequest.from_wire(SendRequest(topic, queue_id, [b"x"] * len(props), props).to_wire())
    try:
        svc.sends.prepare(req, bodies, packed, PEER)
    except IllegalMessage:
        return False
    return True


@pytest.mark.parametrize("name", sorted(CASES))
def test_both_paths_judge_properties_alike(service: MessageService, name: str):
    props, ok = CASES[name]
    assert accepted(service, [props]) is ok  # one message: Message objects
    assert accepted(service, [GOOD, props]) is ok  # a batch: array operations
    assert accepted(service, [props, GOOD, GOOD]) is ok


def test_a_string_may_not_start_inside_a_character(service: MessageService):
    # Valid UTF-8 as a whole, but the second string starts with a continuation byte.
    assert not accepted(service, [GOOD + b"\xc3", b"\xa9\x01x"])


def test_queue_and_topic_checks_hold_for_batches(service: MessageService):
    assert not accepted(service, [GOOD, GOOD], queue_id=4)
    assert not accepted(service, [GOOD, GOOD], topic="T" * 128)
    assert not accepted(service, [GOOD, GOOD], topic="RMQ_SYS_CONSUMER_OFFSET")
    assert accepted(service, [GOOD, GOOD], queue_id=3)


def _records(svc: MessageService, req: SendRequest, peer: str = PEER) -> bytes:
    got, bodies, props = SendRequest.from_wire(req.to_wire())
    batch = svc.sends.prepare(got, bodies, props, peer)
    if isinstance(batch, PackedSend):
        return b"".join(batch.encode(7, 1234))  # the records, without the room for entry headers
    offsets = np.arange(7, 7 + batch.n, dtype=np.int64)
    return encode_batch(batch, offsets, np.zeros(batch.n, dtype=np.int64), 1234)[0]


def test_a_stem_a_packed_batch_and_messages_make_the_same_records(service: MessageService):
    # One stem and a UNIQ_KEY counter that wraps within the batch, as the producer sends it.
    stem, first, n = b"TAGS\x01t\x02UNIQ_KEY\x01C0A80001", 0xFFFE, 5
    props = [stem + f"{(first + k) & 0xFFFF:04X}".encode() for k in range(n)]
    bodies = [b"body %d" % k for k in range(n)]
    by_stem = SendRequest("T", 1, bodies, [], 3, born_timestamp=99, props_stem=stem, uniq_first=first)
    packed = _records(service, SendRequest("T", 1, bodies, props, 3, born_timestamp=99))
    assert _records(service, by_stem) == packed
    # Each message through the one-message path (Message objects, the store's preparer).
    singles = [
        _records(service, SendRequest("T", 1, [b], [p], 3, born_timestamp=99))
        for b, p in zip(bodies, props, strict=True)
    ]
    cols, _stop, _code = K.scan_records(packed, 0, 0, -1, True, -1)
    assert len(cols["size"]) == n
    for k, one in enumerate(singles):
        rec = packed[int(cols["phys_offset"][k]) : int(cols["phys_offset"][k]) + int(cols["size"][k])]
        # Queue and physical offsets aside (each single is message 0 of its own batch).
        assert rec[:20] + rec[36:] == one[:20] + one[36:]


@pytest.mark.parametrize(
    "peer,born_host",
    [
        ("10.1.2.3:4567", ("10.1.2.3", 4567)),
        ("::ffff:10.1.2.3:4567", ("10.1.2.3", 4567)),  # a dual-stack listener's IPv4 peer
        ("2001:db8::10:4567", ("2001:db8::10", 4567)),
        ("?", ("127.0.0.1", 1)),  # no address known: the store host, as the embedded store
    ],
)
def test_the_born_host_is_the_producers_address_as_the_member_sees_it(
    service: MessageService, peer: str, born_host: tuple[str, int]
):
    # As the Java broker takes BORNHOST from the channel's remote address.
    props = [b"UNIQ_KEY\x01A", b"UNIQ_KEY\x01B"]
    for req in (
        SendRequest("T", 0, [b"a", b"b"], props),  # packed
        SendRequest("T", 0, [b"a"], props[:1]),  # one message: Message objects
        SendRequest("T", 0, [b"a", b"b"], [b"DELAY\x010", b"DELAY\x010"]),  # Message objects
    ):
        raw = _records(service, req, peer)
        msg = decode_record(raw, 0)
        assert msg is not None
        assert msg.born_host == born_host
        assert bool(msg.sys_flag & MessageSysFlag.BORNHOST_V6_FLAG) == (":" in born_host[0])
    # A request that names its born host keeps it.
    named = SendRequest("T", 0, [b"a"], props[:1], born_host="192.0.2.7:99")
    got = decode_record(_records(service, named, peer), 0)
    assert got is not None and got.born_host == ("192.0.2.7", 99)


def test_a_batch_stem_with_a_delay_is_refused_and_a_delay_of_0_goes_the_message_path(service: MessageService):
    # putMessages refuses a batch with a delay level; a DELAY of 0 is none (it stays in T).
    req = SendRequest("T", 0, [b"a", b"b"], [], props_stem=b"DELAY\x012\x02UNIQ_KEY\x01AB", uniq_first=0)
    got, bodies, props = SendRequest.from_wire(req.to_wire())
    with pytest.raises(IllegalMessage, match="delay level"):
        service.sends.prepare(got, bodies, props, PEER)
    req = SendRequest("T", 0, [b"a", b"b"], [], props_stem=b"DELAY\x010\x02UNIQ_KEY\x01AB", uniq_first=0)
    got, bodies, props = SendRequest.from_wire(req.to_wire())
    batch = service.sends.prepare(got, bodies, props, PEER)
    assert isinstance(batch, PreparedBatch) and batch.topics[0] == b"T"
    # One message with a delay goes to the schedule topic, as a single send does.
    req = SendRequest("T", 0, [b"a"], [], props_stem=b"DELAY\x012\x02UNIQ_KEY\x01AB", uniq_first=0)
    got, bodies, props = SendRequest.from_wire(req.to_wire())
    batch = service.sends.prepare(got, bodies, props, PEER)
    assert isinstance(batch, PreparedBatch) and batch.topics[0] == b"SCHEDULE_TOPIC_XXXX"


def test_a_bad_stem_is_refused(service: MessageService):
    req = SendRequest("T", 0, [b"a", b"b"], [], props_stem=b"\x01x\x02UNIQ_KEY\x01AB", uniq_first=0)
    got, bodies, props = SendRequest.from_wire(req.to_wire())
    with pytest.raises(IllegalMessage):
        service.sends.prepare(got, bodies, props, PEER)


_ALPHABET = [b"\x01", b"\x02", b"a", b"DELAY", b"\xc3", b"\xa9", b"\xed\xa0\x80", b"\xf0\x9f\x98\x80", b"\xe2\x82\xac"]
_ALPHABET += [b"\xf4\x90\x80\x80", b"\xc0\x80", b"\xff", b"\xe0\x80\x80", b"\xf0\x80\x80\x80"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_ALPHABET), max_size=8).map(b"".join), min_size=1, max_size=4))
def test_the_batch_check_judges_each_string_as_the_message_path(strings: list[bytes]):
    offsets = np.zeros(len(strings) + 1, dtype=np.int64)
    np.cumsum([len(x) for x in strings], out=offsets[1:])
    bad, _reason, _delay = K.check_packed_properties(b"".join(strings), offsets)
    expected = -1
    for k, x in enumerate(strings):
        try:
            _check_properties(x)
        except IllegalMessage:
            expected = k
            break
    assert bad == expected


def test_a_request_s_reconsume_count_reaches_every_record_and_a_bad_one_is_refused(service: MessageService):
    stem = b"TAGS\x01t\x02UNIQ_KEY\x01C0A80001"
    for req in (
        SendRequest("T", 1, [b"one"], [GOOD], reconsume_times=5),
        SendRequest("T", 1, [b"a", b"b"], [GOOD, GOOD], reconsume_times=5),
        SendRequest("T", 1, [b"a", b"b"], [], props_stem=stem, uniq_first=0, reconsume_times=5),
    ):
        raw = _records(service, req)
        cols, _stop, _code = K.scan_records(raw, 0, 0, -1, True, -1)
        msgs = [decode_record(raw, int(p)) for p in cols["phys_offset"].tolist()]
        assert [m.reconsume_times for m in msgs if m is not None] == [5] * len(req.bodies)
    with pytest.raises(IllegalMessage, match="reconsume times"):
        _records(service, SendRequest("T", 1, [b"x"], [GOOD], reconsume_times=1 << 31))
