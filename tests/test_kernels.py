"""The kernels against the struct-based oracle (tests/format_oracle.py), property by property."""

from __future__ import annotations

import zlib

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dledger._ext import codec
from tests import format_oracle as oracle

i64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
u32 = st.integers(min_value=0, max_value=2**32 - 1)
i32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
bodies = st.binary(min_size=1, max_size=300)


@given(
    index=i64,
    term=i64,
    pos=i64,
    body=st.binary(max_size=500),
    magic=i32,
    channel=i32,
    chain=u32,
    crc=st.one_of(st.none(), u32),
)
def test_encode_entry_matches_oracle(index, term, pos, body, magic, channel, chain, crc):
    got = codec.encode_entry(index, term, pos, body, magic, channel, chain, crc)
    assert got == oracle.encode_entry(index, term, pos, body, magic, channel, chain, crc)
    if crc is None:
        assert oracle.decode_header(got)[7] == zlib.crc32(body)


@given(raw=st.binary(min_size=48, max_size=120), offset=st.integers(0, 72))
def test_decode_header_matches_oracle(raw, offset):
    if offset + 48 > len(raw):
        return
    assert codec.decode_header(raw, offset) == oracle.decode_header(raw, offset)


@given(magic=i32, pos=i64, size=i32, index=i64, term=i64)
def test_index_unit_round_trip(magic, pos, size, index, term):
    unit = codec.encode_index(magic, pos, size, index, term)
    assert unit == oracle.encode_index(magic, pos, size, index, term)
    assert codec.decode_index(unit) == (magic, pos, size, index, term)


@given(units=st.lists(st.tuples(i32, i64, i32, i64, i64), max_size=40))
def test_decode_index_units_matches_oracle(units):
    buf = b"".join(oracle.encode_index(*u) for u in units)
    cols = codec.decode_index_units(buf)
    got = list(zip(*(cols[k].tolist() for k in ("magic", "pos", "size", "index", "term")), strict=False))
    assert got == units


@given(
    bs=st.lists(bodies, min_size=1, max_size=30),
    first=st.integers(0, 2**40),
    term=st.integers(0, 2**40),
    pos=st.integers(0, 2**40),
)
def test_encode_batch_matches_oracle(bs, first, term, pos):
    buf, offsets = codec.encode_batch(bs, first, term, pos)
    assert buf == oracle.encode_batch(bs, first, term, pos)
    expected, at = [], 0
    for b in bs:
        expected.append(at)
        at += 48 + len(b)
    assert offsets.tolist() == expected


def _as_tuples(cols: dict[str, np.ndarray]) -> list[tuple[int, ...]]:
    return list(zip(*(cols[k].tolist() for k in codec.COLUMNS), strict=False))


@st.composite
def segments(draw):
    """A segment buffer: valid entries, then an ending (blank, zeros, garbage, a flipped bit)."""
    base = draw(st.integers(0, 2**32))
    first = draw(st.integers(0, 2**32))
    terms = sorted(draw(st.lists(st.integers(0, 50), min_size=0, max_size=25)))
    buf = bytearray()
    for k, term in enumerate(terms):
        body = draw(bodies)
        crc = draw(st.sampled_from([None, 0]))  # recorded, or left 0 as the Java writer does
        buf += oracle.encode_entry(first + k, term, base + len(buf), body, body_crc=crc)
    ending = draw(st.sampled_from(["none", "blank", "zeros", "garbage", "flip", "cut"]))
    if ending == "blank":
        buf += oracle.BLANK.pack(-1, 64) + bytes(56)
    elif ending == "zeros":
        buf += bytes(draw(st.integers(1, 100)))
    elif ending == "garbage":
        buf += draw(st.binary(min_size=1, max_size=100))
    elif ending == "flip" and buf:
        bit = draw(st.integers(0, len(buf) * 8 - 1))
        buf[bit // 8] ^= 1 << (bit % 8)
    elif ending == "cut" and buf:
        del buf[draw(st.integers(0, len(buf) - 1)) :]
    return bytes(buf), base, first


@settings(max_examples=300)
@given(seg=segments(), check_crc=st.booleans(), expect=st.booleans(), limit=st.integers(-1, 30))
def test_scan_matches_oracle(seg, check_crc, expect, limit):
    buf, base, first = seg
    expect_index = first if expect else -1
    cols, stop, code = codec.scan(buf, base, 0, -1, expect_index, -1, check_crc, limit)
    o_entries, o_stop, o_code = oracle.scan(buf, base, 0, -1, expect_index, -1, check_crc, limit)
    assert _as_tuples(cols) == o_entries
    assert (stop, code) == (o_stop, o_code)


@settings(max_examples=300)
@given(seg=segments(), check_crc=st.booleans(), expect=st.booleans(), prev_term=st.integers(-1, 60))
def test_check_run_is_scan_without_columns(seg, check_crc, expect, prev_term):
    # The follower's batch check must accept and refuse exactly what the oracle's scan does.
    buf, base, first = seg
    expect_index = first if expect else -1
    o_entries, o_stop, o_code = oracle.scan(buf, base, 0, -1, expect_index, prev_term, check_crc)
    lens = [e[6] for e in o_entries]  # body_len, in COLUMNS order
    want = (len(o_entries), o_stop, o_code, min(lens, default=-1), max(lens, default=-1))
    assert codec.check_run(buf, base, expect_index, prev_term, check_crc) == want


@given(seg=segments(), start_frac=st.floats(0, 1), end_frac=st.floats(0, 1))
def test_scan_subrange_matches_oracle(seg, start_frac, end_frac):
    buf, base, _first = seg
    # Start on an entry boundary so the pos check can pass; end anywhere.
    entries, _, _ = oracle.scan(buf, base)
    starts = [0] + [e[5] - 48 + e[3] for e in entries]
    start = starts[int(start_frac * (len(starts) - 1))]
    end = start + int(end_frac * (len(buf) - start))
    cols, stop, code = codec.scan(buf, base, start, end)
    assert (_as_tuples(cols), stop, code) == oracle.scan(buf, base, start, end)


def test_scan_rejects_bad_range():
    import pytest

    with pytest.raises(ValueError):
        codec.scan(b"\x00" * 10, 0, 20)


def test_decode_header_rejects_short_buffer():
    import pytest

    with pytest.raises(ValueError, match="48 header bytes"):
        codec.decode_header(b"\x00" * 47)
    with pytest.raises(ValueError, match="32 index bytes"):
        codec.decode_index(b"\x00" * 40, 10)
