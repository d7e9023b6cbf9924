"""Records to MessageExt objects (``message_ext`` / ``message_exts``, behind ``decode_record``,
``messages_from_columns`` and so every read through the Python API), against the oracle's
MessageDecoder.decode: every field, for records with any bytes in their topic and properties,
IPv4 and IPv6 hosts, and signed values at their limits."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from record_oracle import (
    BORNHOST_V6_FLAG,
    STOREHOSTADDRESS_V6_FLAG,
    encode_blank,
    encode_record,
    host_bytes,
    message_decode,
)

from dledger._ext import message as mk
from dledger.rocketmq.store.message import MessageExt
from dledger.rocketmq.store.records import decode_record, messages_from_columns

I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
# Property strings as producers write them, and as damage or other clients might: names and
# values with separators doubled or missing, invalid UTF-8, multi-byte characters.
PIECE = st.one_of(
    st.tuples(st.sampled_from(["TAGS", "KEYS", "DELAY", "UNIQ_KEY", "a", "ü"]), st.text(max_size=12)).map(
        lambda nv: f"{nv[0]}\x01{nv[1]}".encode()
    ),
    st.binary(max_size=12),
)
PROPS = st.lists(PIECE, max_size=6).map(lambda ps: b"\x02".join(ps)[:32767])
HOST = st.one_of(
    st.tuples(st.ip_addresses(v=4).map(str), I32).map(lambda h: host_bytes(*h)),
    st.tuples(st.ip_addresses(v=6).map(str), I32).map(lambda h: host_bytes(*h)),
)


def fields(m: MessageExt) -> dict[str, Any]:
    return {f.name: getattr(m, f.name) for f in dataclasses.fields(m)}


@st.composite
def records(draw: Any) -> bytes:
    born, store = draw(HOST), draw(HOST)
    sys_flag = draw(I32) & ~(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)
    sys_flag |= (BORNHOST_V6_FLAG if len(born) == 20 else 0) | (STOREHOSTADDRESS_V6_FLAG if len(store) == 20 else 0)
    return encode_record(
        draw(st.binary(max_size=64)),
        draw(st.one_of(st.text(max_size=20).map(lambda t: t.encode()[:127]), st.binary(max_size=127))),
        draw(PROPS),
        queue_id=draw(I32),
        flag=draw(I32),
        queue_offset=draw(I64),
        phys_offset=draw(I64),
        sys_flag=sys_flag,
        born_timestamp=draw(I64),
        born_host=born,
        store_timestamp=draw(I64),
        store_host=store,
        reconsume_times=draw(I32),
        prepared_offset=draw(I64),
    )


def expect(rec: bytes, phys: int, client: bool = False) -> dict[str, Any] | type[Exception]:
    try:
        return message_decode(rec, phys, client)
    except ValueError:  # a DELAY of digits int() does not take ("²")
        return ValueError


@settings(max_examples=300, deadline=None)
@given(records(), st.integers(0, 2**62), st.booleans())
@example(encode_record(b"hi", b"TopicA", b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02DELAY\x013"), 4096, False)
@example(encode_record(b"", b"", b"\x01\x02\x02x\x01\x01y\x02\x01v\x02n\x01"), 0, False)
@example(encode_record(b"x", b"T\xff\xfe", b"\xe2\x82\x02TAGS\x01\xe2\x82"), 7, False)
@example(encode_record(b"x", b"T", b"UNIQ_KEY\x01C0A80001\x02TAGS\x01a"), 7, True)
def test_a_record_decodes_as_message_decoder_does(rec: bytes, phys: int, client: bool) -> None:
    want = expect(rec, phys, client)
    if want is ValueError:
        with pytest.raises(ValueError):
            decode_record(rec, phys, client=client)
        return
    got = decode_record(rec, phys, client=client)
    assert got is not None and fields(got) == want
    assert type(got) is MessageExt


@settings(max_examples=100, deadline=None)
@given(st.lists(records(), min_size=1, max_size=8), st.data())
def test_scanned_records_decode_as_each_alone(recs: list[bytes], data: Any) -> None:
    """messages_from_columns over a scan of several records (a pull, a batch read) gives what
    each record gives alone, for any rows in any order."""
    if any(expect(r, 0) is ValueError for r in recs):
        return  # (the test above covers those)
    buf = b"".join(recs)
    cols, _stop, _code = mk.scan_records(buf, 1000, 0, -1, False, -1)
    assert len(cols["size"]) == len(recs)
    rows = data.draw(st.lists(st.integers(0, len(recs) - 1), max_size=12))
    starts = [sum(len(r) for r in recs[:i]) for i in range(len(recs))]
    for got, k in zip(messages_from_columns(buf, cols, rows), rows, strict=True):
        assert fields(got) == message_decode(recs[k], 1000 + starts[k])
    for got, k in zip(messages_from_columns(buf, cols, rows, client=True), rows, strict=True):
        assert fields(got) == message_decode(recs[k], 1000 + starts[k], client=True)
    assert [m.phys_offset for m in messages_from_columns(buf, cols)] == [1000 + s for s in starts]


def test_no_record_no_message() -> None:
    rec = encode_record(b"body", b"TopicA", b"TAGS\x01a")
    assert decode_record(b"", 0) is None
    assert decode_record(rec[:-1], 0) is None  # torn
    assert decode_record(encode_blank(64), 0) is None
    assert decode_record(bytes(len(rec)), 0) is None
    bad = bytearray(rec)
    bad[4:8] = b"\x00\x00\x00\x01"  # not the message magic
    assert decode_record(bytes(bad), 0) is None


def test_columns_that_point_outside_the_buffer_are_refused() -> None:
    rec = encode_record(b"body", b"TopicA", b"TAGS\x01a")
    cols, _stop, _code = mk.scan_records(rec, 0, 0, -1, False, -1)
    cols = {k: v.copy() for k, v in cols.items()}
    cols["body_len"][0] = len(rec)
    with pytest.raises(ValueError, match="outside"):
        messages_from_columns(rec, cols)
    with pytest.raises(IndexError):
        messages_from_columns(rec, mk.scan_records(rec, 0, 0, -1, False, -1)[0], [1])


def test_the_kernel_knows_message_ext_fields_in_order() -> None:
    """The kernel passes MessageExt's fields by position: a field added or moved in the
    dataclass must be added to the kernel too (records.py refuses to import otherwise)."""
    assert tuple(f.name for f in dataclasses.fields(MessageExt)) == mk.MESSAGE_EXT_FIELDS
