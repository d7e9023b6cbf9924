"""The frame codec and the incremental decoder, without sockets."""

from __future__ import annotations

import os
import struct

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dledger.net.frames import Frame, FrameDecoder, FrameError, Kind, decode_payload, encode, encode_bytes, encode_parts


def raw(obj: object) -> bytes:
    payload = msgpack.packb(obj, use_bin_type=True)
    return struct.pack(">I", len(payload)) + payload


def test_round_trip_all_fields() -> None:
    f = Frame(Kind.REQUEST, 42, 51004, "g0", {"entries": [b"\x00" * 10, b"x"], "term": 3}, "hi")
    [g] = FrameDecoder().feed(encode_bytes(f))
    assert g == f
    assert isinstance(g.body["entries"][0], bytes)


def test_absent_optional_fields_default() -> None:
    [g] = FrameDecoder().feed(raw({"k": 1, "i": 7, "c": 200}))
    assert g == Frame(Kind.RESPONSE, 7, 200, None, {}, None)


def test_small_frames_are_compact() -> None:
    header, payload = encode(Frame(Kind.RESPONSE, 1, 200))
    assert len(header) == 4 and len(payload) <= 12


@pytest.mark.parametrize(
    "obj",
    [
        [1, 2, 3],
        "str",
        7,
        None,
        {"k": "req", "i": 1, "c": 1},
        {"k": 0, "i": "1", "c": 1},
        {"k": 0, "i": 1, "c": True},
        {"k": 0, "i": 1, "c": 1, "g": 5},
        {"k": 0, "i": 1, "c": 1, "b": [1]},
        {"k": 0, "i": 1, "c": 1, "m": b"x"},
        {"i": 1, "c": 1},
        {1: 2},
    ],
)
def test_invalid_frames_raise(obj: object) -> None:
    with pytest.raises(FrameError):
        FrameDecoder().feed(raw(obj))


@pytest.mark.parametrize(
    "payload",
    [
        b"\xc1",  # never-used msgpack byte
        b"\x81\xa1k",  # map cut short
        b"\x80\x80",  # extra data after the map
        b"\xdf\xff\xff\xff\xff",  # map claiming 4G entries in a 5-byte frame
        b"\xc6\x7f\xff\xff\xff",  # bin claiming 2 GiB
        b"\x91" * 5000,  # deeply nested arrays
        b"\x81\xa1k\xa2\xff\xfe",  # invalid utf-8 string
    ],
)
def test_malformed_payloads_raise(payload: bytes) -> None:
    with pytest.raises(FrameError):
        FrameDecoder().feed(struct.pack(">I", len(payload)) + payload)


def test_oversized_prefix_refused_before_body() -> None:
    d = FrameDecoder(max_frame=1024)
    with pytest.raises(FrameError, match="exceeds"):
        d.feed(struct.pack(">I", 0xFFFFFFFF))
    d = FrameDecoder(max_frame=1024)
    d.feed(raw({"k": 0, "i": 1, "c": 1, "b": {"x": b"a" * 1000}})[:3])  # not yet a full header
    with pytest.raises(FrameError):
        FrameDecoder(max_frame=1024).feed(raw({"k": 0, "i": 1, "c": 1, "b": {"x": b"a" * 1100}}))


def test_empty_frame_refused() -> None:
    with pytest.raises(FrameError):
        FrameDecoder().feed(b"\x00\x00\x00\x00")


def test_encode_refuses_frames_over_max() -> None:
    with pytest.raises(FrameError):
        encode(Frame(Kind.REQUEST, 1, 1, body={"x": b"a" * 2000}), max_frame=1000)


def test_truncated_frame_is_buffered_not_returned() -> None:
    data = raw({"k": 0, "i": 1, "c": 1})
    d = FrameDecoder()
    assert d.feed(data[:-1]) == []
    assert d.buffered == len(data) - 1


def test_big_frame_gets_its_own_buffer_and_scratch_survives() -> None:
    big = os.urandom(3 * 1024 * 1024)
    frames = [Frame(Kind.REQUEST, i, 1, body={"d": big if i % 2 else b"s" * i}) for i in range(6)]
    stream = b"".join(encode_bytes(f) for f in frames)
    d = FrameDecoder(scratch_size=64 * 1024)
    got: list[Frame] = []
    for i in range(0, len(stream), 100_003):
        got.extend(d.feed(stream[i : i + 100_003]))
    assert got == frames and d.buffered == 0


def test_buffered_protocol_interface_receives_big_frame_in_place() -> None:
    f = Frame(Kind.REQUEST, 1, 1, body={"d": b"z" * 500_000})
    data = encode_bytes(f)
    d = FrameDecoder(scratch_size=4096)
    pos, out = 0, []
    while pos < len(data):
        buf = d.get_buffer(-1)
        n = min(len(buf), len(data) - pos)
        buf[:n] = data[pos : pos + n]
        pos += n
        out.extend(d.buffer_updated(n))
    assert out == [f]


frame_st = st.builds(
    Frame,
    kind=st.sampled_from(list(Kind)),
    id=st.integers(0, 2**63),
    code=st.integers(-(2**31), 2**31),
    group=st.none() | st.text(max_size=8),
    body=st.dictionaries(
        st.text(max_size=5),
        st.binary(max_size=3000) | st.integers(-(2**63), 2**64 - 1) | st.lists(st.binary(max_size=50), max_size=5),
        max_size=4,
    ),
    message=st.none() | st.text(min_size=1, max_size=20),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(frame_st, max_size=20), st.lists(st.integers(1, 5000), min_size=1, max_size=50), st.integers(64, 9000))
def test_any_split_decodes_the_same(frames: list[Frame], cuts: list[int], scratch: int) -> None:
    stream = b"".join(encode_bytes(f) for f in frames)
    d = FrameDecoder(scratch_size=scratch)
    got: list[Frame] = []
    pos, i = 0, 0
    while pos < len(stream):
        n = cuts[i % len(cuts)]
        got.extend(d.feed(stream[pos : pos + n]))
        pos += n
        i += 1
    assert got == frames
    assert d.buffered == 0


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000))
def test_random_bytes_only_raise_frame_error(data: bytes) -> None:
    d = FrameDecoder(max_frame=4096)
    try:
        for f in d.feed(data):
            assert isinstance(f, Frame)
    except FrameError:
        pass


def test_decode_payload_accepts_memoryview() -> None:
    payload = msgpack.packb({"k": 1, "i": 2, "c": 3, "b": {"x": b"y"}})
    assert decode_payload(memoryview(payload)).body == {"x": b"y"}


@pytest.mark.parametrize("size", [100 * 1024, 1024 * 1024])  # in the scratch buffer / its own
def test_big_raw_tail_is_written_apart_and_decodes_the_same(size: int) -> None:
    # A batch push's entries go to the socket as their own buffer (no copy into the payload)
    # and come out of the decoder as the same bytes.
    raw = bytes(range(256)) * (size // 256)
    f = Frame(Kind.ONEWAY, 0, 51, "g1", {"_type": "PushEntryRequest", "raw": raw, "raw_index": 7}, "hi")
    parts = encode_parts(f)
    assert len(parts) == 3 and parts[2] is raw
    frames = []
    d = FrameDecoder()
    wire = b"".join(parts) + encode_bytes(Frame(Kind.REQUEST, 9, 1))
    for k in range(0, len(wire), 65536):  # arriving in pieces, a small frame behind it
        frames += d.feed(wire[k : k + 65536])
    g, h = frames
    assert (g.kind, g.code, g.group, g.message) == (f.kind, f.code, f.group, f.message)
    assert g.body == f.body and bytes(g.body["raw"]) == raw
    assert h.id == 9
    if size > 256 * 1024:
        # Received into a buffer of its own: handed on as a read-only view of it, not copied.
        assert isinstance(g.body["raw"], memoryview) and g.body["raw"].readonly
    else:
        assert type(g.body["raw"]) is bytes  # the scratch buffer is reused: a copy
    small = Frame(Kind.ONEWAY, 0, 51, None, {"raw": b"x" * 10})
    assert b"".join(encode_parts(small)) == encode_bytes(small)
    with pytest.raises(FrameError):
        encode_parts(f, max_frame=len(raw))


@pytest.mark.parametrize("map_len", [2**31, 10**6, 5])
def test_tailed_frame_whose_map_overruns_or_is_garbage_is_refused(map_len: int) -> None:
    payload = struct.pack(">I", map_len % 2**32) + b"\x81\xa1k\x00" + b"t" * 100
    wire = struct.pack(">I", len(payload) | 0x80000000) + payload
    with pytest.raises(FrameError):
        FrameDecoder().feed(wire)
