"""dledger._ext.message against the struct oracle (record_oracle) and the Java-written fixtures."""

from __future__ import annotations

import hashlib
import ipaddress
import re
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from record_oracle import (
    BORNHOST_V6_FLAG,
    STOREHOSTADDRESS_V6_FLAG,
    body_crc,
    cq_unit,
    encode_blank,
    encode_dledger_entry,
    encode_record,
    index_file_size,
    index_header,
    index_key_hash,
    index_put,
    java_decode,
    java_hash,
    java_hash_bytes,
    property_span,
    record_length,
    scan_dledger_records,
    scan_records,
)

from dledger._ext import message as mk

# -- strategies -------------------------------------------------------------------------------------

i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=30)
ipv4 = st.integers(0, 2**32 - 1).map(lambda v: ipaddress.IPv4Address(v).packed)
ipv6 = st.integers(0, 2**128 - 1).map(lambda v: ipaddress.IPv6Address(v).packed)
ports = st.integers(0, 65535).map(lambda p: struct.pack(">i", p))
MAX_TOPIC = "订" * 42 + "a"  # 127 bytes of UTF-8
assert len(MAX_TOPIC.encode()) == 127


@st.composite
def topics(draw: st.DrawFn) -> bytes:
    t = draw(st.one_of(st.just(MAX_TOPIC), st.just("t" * 127), texts, st.sampled_from(["TopicA", "%RETRY%cg1"])))
    raw = t.encode()
    assume(len(raw) <= 127)
    return raw


@st.composite
def properties(draw: st.DrawFn) -> bytes:
    pairs = draw(
        st.lists(st.tuples(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "a", "属性"]) | texts, texts), max_size=6)
    )
    return "\x02".join(f"{k}\x01{v}" for k, v in pairs).encode()


@st.composite
def records(draw: st.DrawFn) -> dict[str, Any]:
    sys_flag = draw(st.sampled_from([0, 1, 2, 4, 8, 12]))
    born_v6, store_v6 = draw(st.booleans()), draw(st.booleans())
    sys_flag |= (BORNHOST_V6_FLAG if born_v6 else 0) | (STOREHOSTADDRESS_V6_FLAG if store_v6 else 0)
    return {
        "body": draw(st.binary(max_size=300)),
        "topic": draw(topics()),
        "properties": draw(properties()),
        "queue_id": draw(i32),
        "flag": draw(i32),
        "queue_offset": draw(i64),
        "phys_offset": draw(i64),
        "sys_flag": sys_flag,
        "born_timestamp": draw(i64),
        "born_host": draw(ipv6 if born_v6 else ipv4) + draw(ports),
        "store_timestamp": draw(i64),
        "store_host": draw(ipv6 if store_v6 else ipv4) + draw(ports),
        "reconsume_times": draw(i32),
        "prepared_offset": draw(i64),
    }


def oracle_encode(r: dict[str, Any]) -> bytes:
    kw = {k: v for k, v in r.items() if k not in ("body", "topic", "properties")}
    return encode_record(r["body"], r["topic"], r["properties"], **kw)


def kernel_encode(rs: list[dict[str, Any]]) -> tuple[bytes, np.ndarray]:
    def col(name: str) -> list[Any]:
        return [r[name] for r in rs]

    return mk.encode_records(
        col("body"),
        col("topic"),
        col("properties"),
        col("queue_id"),
        col("flag"),
        col("queue_offset"),
        col("phys_offset"),
        col("sys_flag"),
        col("born_timestamp"),
        col("born_host"),
        col("store_timestamp"),
        col("store_host"),
        col("reconsume_times"),
        col("prepared_offset"),
    )


def rows(cols: dict[str, np.ndarray], names: tuple[str, ...] = mk.COLUMNS) -> list[dict[str, Any]]:
    return [dict(zip(names, vals, strict=True)) for vals in zip(*(cols[n].tolist() for n in names), strict=True)]


def oracle_rows(recs: list[dict[str, Any]], names: tuple[str, ...] = mk.COLUMNS) -> list[dict[str, Any]]:
    return [{n: r[n] for n in names} for r in recs]


# -- encode and lengths -------------------------------------------------------------------------------
# Every property here runs with deadline=None: they check results, not speed, and on the shared
# machine an example of test_encode_records_matches_oracle overran Hypothesis's 200 ms deadline.


@settings(max_examples=200, deadline=None)
@given(rs=st.lists(records(), max_size=12))
def test_encode_records_matches_oracle(rs):
    buf, offsets = kernel_encode(rs)
    parts = [oracle_encode(r) for r in rs]
    assert buf == b"".join(parts)
    assert offsets.tolist() == [sum(map(len, parts[:k])) for k in range(len(parts) + 1)]
    for k, r in enumerate(rs):
        (crc,) = struct.unpack_from(">i", buf, offsets[k] + 8)
        assert crc == zlib.crc32(r["body"]) & 0x7FFFFFFF


@given(r=records())
def test_record_length_is_calmsglength(r):
    args = (r["sys_flag"], len(r["body"]), len(r["topic"]), len(r["properties"]))
    assert mk.record_length(*args) == record_length(*args) == len(oracle_encode(r))
    got = mk.record_lengths([args[0]] * 3, [args[1]] * 3, [args[2]] * 3, [args[3]] * 3)
    assert got.dtype == np.int64 and got.tolist() == [record_length(*args)] * 3


def test_record_length_constants():
    assert mk.record_length(0, 0, 0, 0) == mk.MIN_RECORD_LENGTH == 91
    assert mk.record_length(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG, 10, 5, 7) == 91 + 24 + 22
    assert (mk.QUEUE_OFFSET_POSITION, mk.PHY_POS_POSITION, mk.SYSFLAG_POSITION) == (20, 28, 36)
    assert (mk.MESSAGE_MAGIC_CODE, mk.BLANK_MAGIC_CODE) == (-626843481, -875286124)


def test_encode_records_takes_shared_values():
    host = bytes([10, 0, 0, 1]) + struct.pack(">i", 10911)
    buf, offsets = mk.encode_records([b"a", b"bc"], b"T", b"", 1, 0, [5, 6], 0, 0, 7, host, 8, host, 0, 0)
    want = [
        encode_record(
            b, b"T", queue_id=1, queue_offset=q, born_timestamp=7, born_host=host, store_timestamp=8, store_host=host
        )
        for b, q in ((b"a", 5), (b"bc", 6))
    ]
    assert buf == b"".join(want)
    assert offsets.tolist() == [0, len(want[0]), len(want[0]) + len(want[1])]


def test_encode_records_empty_batch():
    buf, offsets = mk.encode_records([], [], [], [], [], [], [], [], [], [], [], [], [], [])
    assert buf == b"" and offsets.tolist() == [0]


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"topic": b"t" * 128}, "topic"),
        ({"properties": b"p" * 32768}, "properties"),
        ({"born_host": bytes(20)}, "born host"),
        ({"store_host": bytes(20)}, "store host"),
        ({"sys_flag": BORNHOST_V6_FLAG}, "born host"),
        ({"sys_flag": STOREHOSTADDRESS_V6_FLAG}, "store host"),
    ],
)
def test_encode_records_refuses_what_rocketmq_refuses(change, match):
    r = {
        "body": b"x",
        "topic": b"T",
        "properties": b"",
        "queue_id": 0,
        "flag": 0,
        "queue_offset": 0,
        "phys_offset": 0,
        "sys_flag": 0,
        "born_timestamp": 0,
        "born_host": bytes(8),
        "store_timestamp": 0,
        "store_host": bytes(8),
        "reconsume_times": 0,
        "prepared_offset": 0,
    }
    with pytest.raises(ValueError, match=match):
        kernel_encode([r, {**r, **change}])


def test_encode_records_refuses_mismatched_lengths():
    with pytest.raises(ValueError, match="queue_ids"):
        mk.encode_records([b"a"], b"T", b"", [1, 2], 0, 0, 0, 0, 0, bytes(8), 0, bytes(8), 0, 0)


# -- scans ------------------------------------------------------------------------------------------

ENDINGS = ["none", "blank", "zeros", "garbage", "flip", "cut", "crc", "short-zero"]


@st.composite
def commitlog_files(draw: st.DrawFn) -> tuple[bytes, int]:
    """Valid records, then an ending: a blank record, unwritten space, garbage, a flipped bit,
    a cut, or a body byte changed under its BODYCRC."""
    rs = draw(st.lists(records(), max_size=15))
    buf = bytearray(b"".join(oracle_encode(r) for r in rs))
    ending = draw(st.sampled_from(ENDINGS))
    if ending == "blank":
        buf += encode_blank(64) + bytes(56)
    elif ending == "zeros":
        buf += bytes(draw(st.integers(1, 200)))
    elif ending == "short-zero":
        buf += bytes(draw(st.integers(1, 3)))
    elif ending == "garbage":
        buf += draw(st.binary(min_size=1, max_size=200))
    elif ending == "flip" and buf:
        bit = draw(st.integers(0, len(buf) * 8 - 1))
        buf[bit // 8] ^= 1 << (bit % 8)
    elif ending == "cut" and buf:
        del buf[draw(st.integers(0, len(buf) - 1)) :]
    elif ending == "crc" and any(r["body"] for r in rs):
        k = draw(st.sampled_from([k for k, r in enumerate(rs) if r["body"]]))
        at = sum(len(oracle_encode(r)) for r in rs[:k])
        rec = scan_records(bytes(buf), 0, at, -1, False, 1)[0][0]
        buf[rec["body_off"] + draw(st.integers(0, rec["body_len"] - 1))] ^= 0x5A
    return bytes(buf), draw(st.integers(0, 2**40))


@settings(max_examples=300, deadline=None)
@given(f=commitlog_files(), check_crc=st.booleans(), limit=st.integers(-1, 16))
def test_scan_records_matches_oracle(f, check_crc, limit):
    buf, base = f
    cols, stop, code = mk.scan_records(buf, base, check_crc=check_crc, max_records=limit)
    o_recs, o_stop, o_code = scan_records(buf, base, 0, -1, check_crc, limit)
    assert rows(cols) == oracle_rows(o_recs)
    assert (stop, code) == (o_stop, o_code)
    assert {n: a.dtype.str[1:] for n, a in cols.items()} == dict(mk.COLUMN_TYPES)


@settings(max_examples=100, deadline=None)
@given(f=commitlog_files(), start_frac=st.floats(0, 1), end_frac=st.floats(0, 1))
def test_scan_records_subrange_matches_oracle(f, start_frac, end_frac):
    buf, base = f
    recs, _, _ = scan_records(buf, base)
    starts = [0] + [r["phys_offset"] - base + r["size"] for r in recs]
    start = starts[int(start_frac * (len(starts) - 1))]
    end = start + int(end_frac * (len(buf) - start))
    cols, stop, code = mk.scan_records(buf, base, start, end)
    o_recs, o_stop, o_code = scan_records(buf, base, start, end)
    assert (rows(cols), stop, code) == (oracle_rows(o_recs), o_stop, o_code)


def test_scan_records_stops():
    rec = encode_record(b"body", b"T", b"TAGS\x01x")
    cols, stop, code = mk.scan_records(rec + encode_blank(100) + bytes(92), 1000)
    assert (cols["phys_offset"].tolist(), stop, code) == ([1000], len(rec), mk.STOP_BLANK)
    assert mk.scan_records(rec + bytes(50), 0)[1:] == (len(rec), mk.STOP_ZERO)
    assert mk.scan_records(rec + rec[:50], 0)[1:] == (len(rec), mk.STOP_BAD)
    assert mk.scan_records(rec + rec, 0, max_records=1)[1:] == (len(rec), mk.STOP_LIMIT)
    assert mk.scan_records(rec, 0)[1:] == (len(rec), mk.STOP_END)
    bad = bytearray(rec)
    bad[-1] ^= 1  # in the properties: not covered by BODYCRC
    assert mk.scan_records(bytes(bad), 0, check_crc=True)[2] == mk.STOP_END
    bad[len(rec) - 2 - 6 - 1 - 1 - 3] ^= 1  # in the body
    assert mk.scan_records(bytes(bad), 0)[2] == mk.STOP_END
    assert mk.scan_records(bytes(bad), 0, check_crc=True)[1:] == (0, mk.STOP_CRC)
    with pytest.raises(ValueError):
        mk.scan_records(rec, 0, len(rec) + 1)


def test_scan_records_grows_its_columns():
    # The columns are sized from the first record; many smaller ones after it make them grow.
    big = encode_record(bytes(3000), b"T")
    small = [encode_record(bytes([k % 256]), b"T", queue_offset=k) for k in range(700)]
    buf = big + b"".join(small)
    cols, stop, code = mk.scan_records(buf, 0)
    assert (stop, code) == (len(buf), mk.STOP_END)
    assert cols["queue_offset"].tolist() == [0, *range(700)]
    assert rows(cols) == oracle_rows(scan_records(buf, 0)[0])


@st.composite
def dledger_files(draw: st.DrawFn) -> tuple[bytes, int]:
    rs = draw(st.lists(records(), max_size=12))
    base = draw(st.integers(0, 2**40))
    first = draw(st.integers(0, 2**32))
    buf = bytearray()
    for k, r in enumerate(rs):
        rec = bytearray(oracle_encode(r))
        struct.pack_into(">q", rec, 28, base + len(buf) + 48)  # what the AppendHook writes
        crc = draw(st.sampled_from([0, zlib.crc32(rec)]))  # Java leaves it 0; we record it
        buf += encode_dledger_entry(first + k, 1, base + len(buf), bytes(rec), crc)
    ending = draw(st.sampled_from([*ENDINGS, "blank-record", "short-body"]))
    if ending == "blank":
        buf += struct.pack(">ii", -1, 64) + bytes(56)
    elif ending == "zeros":
        buf += bytes(draw(st.integers(1, 200)))
    elif ending == "short-zero":
        buf += bytes(draw(st.integers(1, 3)))
    elif ending == "garbage":
        buf += draw(st.binary(min_size=1, max_size=200))
    elif ending == "flip" and buf:
        bit = draw(st.integers(0, len(buf) * 8 - 1))
        buf[bit // 8] ^= 1 << (bit % 8)
    elif ending == "cut" and buf:
        del buf[draw(st.integers(0, len(buf) - 1)) :]
    elif ending == "crc" and buf:
        buf[draw(st.integers(48, len(buf) - 1))] ^= 0x11
    elif ending == "blank-record":  # an entry whose body is not a message record
        buf += encode_dledger_entry(first + len(rs), 1, base + len(buf), encode_blank(100))
    elif ending == "short-body":  # a record shorter than its entry body
        buf += encode_dledger_entry(first + len(rs), 1, base + len(buf), encode_record(b"x", b"T") + b"\0")
    return bytes(buf), base


@settings(max_examples=300, deadline=None)
@given(f=dledger_files(), check_crc=st.booleans(), limit=st.integers(-1, 14))
def test_scan_dledger_records_matches_oracle(f, check_crc, limit):
    buf, base = f
    cols, stop, code = mk.scan_dledger_records(buf, base, check_crc=check_crc, max_records=limit)
    o_recs, o_stop, o_code = scan_dledger_records(buf, base, 0, -1, check_crc, limit)
    assert rows(cols, mk.DLEDGER_COLUMNS) == oracle_rows(o_recs, mk.DLEDGER_COLUMNS)
    assert (stop, code) == (o_stop, o_code)


def test_scan_dledger_records_checks_entry_pos():
    entry = encode_dledger_entry(0, 1, 4096, encode_record(b"x", b"T"))
    assert mk.scan_dledger_records(entry, 4096)[1:] == (len(entry), mk.STOP_END)
    assert mk.scan_dledger_records(entry, 0)[1:] == (0, mk.STOP_BAD)
    assert mk.scan_dledger_records(entry + struct.pack(">ii", -1, 100), 4096)[1:] == (len(entry), mk.STOP_BLANK)


# -- properties, hashes, consume queue ---------------------------------------------------------------

prop_tokens = st.sampled_from(["TAGS", "KEYS", "\x01", "\x02", "a", "TAGSX", "", "值"])


@settings(max_examples=300, deadline=None)
@given(
    strings=st.lists(st.lists(prop_tokens, max_size=12).map("".join), max_size=8),
    name=st.sampled_from([b"TAGS", b"KEYS", b"a", "值".encode()]),
)
@example(strings=["TAGS\x01a\x02TAGS\x01b", "TAGS\x01\x02", "TAGS\x01a\x01b", "\x01TAGS\x01x", "TAGS"], name=b"TAGS")
def test_property_spans_match_string2messageproperties(strings, name):
    raw = [s.encode() for s in strings]
    buf = b"pad" + b"".join(raw)
    offs = np.cumsum([3] + [len(r) for r in raw])[:-1]
    got_off, got_len = mk.property_spans(buf, offs, [len(r) for r in raw], name)
    want = [property_span(r, name) for r in raw]
    assert list(zip(got_off.tolist(), got_len.tolist(), strict=True)) == [
        (o + int(base), n) if o >= 0 else (-1, 0) for (o, n), base in zip(want, offs, strict=True)
    ]
    # The span is the value Java's map holds.
    from record_oracle import parse_properties

    for r, (o, n) in zip(raw, want, strict=True):
        value = parse_properties(r.decode()).get(name.decode())
        assert (r[o : o + n].decode() if o >= 0 else None) == value


def test_property_spans_rejects_out_of_bounds():
    with pytest.raises(ValueError, match="outside"):
        mk.property_spans(b"abc", [2], [5], b"TAGS")


def test_java_hash_known_values():
    # Values Java prints for "...".hashCode().
    assert mk.java_hash("TagA") == 2598919
    assert mk.java_hash("hello") == 99162322
    assert mk.java_hash("") == 0
    assert mk.java_hash("Aa") == mk.java_hash("BB") == 2112
    assert mk.java_hash("polygenelubricants") == -(2**31)
    for s in ("标签X", "订单-🚀-1", "属性", "😀"):
        assert mk.java_hash(s) == java_hash(s) == mk.java_hash_bytes(s.encode())
    assert mk.java_hash("😀") == 0xD83D * 31 + 0xDE00  # a surrogate pair, not the code point


@given(s=st.text())
def test_java_hash_matches_utf16_oracle(s):
    assert mk.java_hash(s) == java_hash(s)
    raw = s.encode("utf-8", "surrogatepass")
    if not any(0xD800 <= ord(c) <= 0xDFFF for c in s):
        assert mk.java_hash_bytes(raw) == java_hash(s)


@settings(max_examples=500, deadline=None)
@given(
    raw=st.lists(
        st.sampled_from(
            [0x41, 0x7F, 0x80, 0xBF, 0xC0, 0xC2, 0xDF, 0xE0, 0xED, 0xA0, 0x9F, 0xEF, 0xF0, 0x90, 0x8F, 0xF4, 0xF5, 0xFF]
        )
        | st.integers(0, 255),
        max_size=12,
    ).map(bytes)
)
@example(raw=b"\xed\xa0\x80")
@example(raw=b"\xed\xa0")
@example(raw=b"\xe4\xb8")
@example(raw=b"\xf0\x90\x80")
@example(raw=b"\xf0\x90\x80A")
def test_java_hash_of_ill_formed_utf8_is_the_jdks(raw):
    assert mk.java_hash_bytes(raw) == java_hash_bytes(raw)


def test_java_decode_replacements():
    # The JDK's choices where they differ from Python's: a 3-byte surrogate is one U+FFFD.
    assert java_decode(b"\xed\xa0\x80") == "\ufffd"
    assert java_decode(b"\xed\xa0A") == "\ufffdA"
    assert java_decode(b"\xe0\x80\x80") == "\ufffd" * 3
    assert mk.java_hash_bytes(b"\xed\xa0\x80") == 0xFFFD


@given(strings=st.lists(st.binary(max_size=20), max_size=10))
def test_java_hash_many_matches(strings):
    buf = b"".join(strings)
    offs = np.cumsum([0] + [len(s) for s in strings])[:-1]
    got = mk.java_hash_many(buf, offs, [len(s) for s in strings])
    assert got.dtype == np.int32
    assert got.tolist() == [java_hash_bytes(s) for s in strings]


def test_java_hash_many_absent_is_zero():
    assert mk.java_hash_many(b"TagA", [-1, 0], [0, 4]).tolist() == [0, 2598919]
    with pytest.raises(ValueError):
        mk.java_hash_many(b"TagA", [2], [3])


@given(units=st.lists(st.tuples(i64, i32, i64), max_size=20))
def test_consume_queue_units_match_oracle(units):
    got = mk.consume_queue_units([u[0] for u in units], [u[1] for u in units], [u[2] for u in units])
    assert got == b"".join(cq_unit(*u) for u in units)
    assert len(got) == mk.CQ_UNIT_SIZE * len(units)


# -- index file -------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    slots=st.integers(1, 8),
    index_num=st.integers(2, 40),
    items=st.lists(st.tuples(st.integers(0, 2**31 - 1), i64, st.integers(0, 50)), max_size=50),
    split=st.integers(0, 50),
    count0=st.sampled_from([0, 1]),
)
def test_index_put_many_and_lookup_match_putkey_and_selectphyoffset(slots, index_num, items, split, count0):
    items = [(k % 5, p, d) for k, p, d in items]  # few keys, so chains and shared slots are long
    buf = bytearray(index_file_size(slots, index_num))
    struct.pack_into(">i", buf, 36, count0)  # a new file's header says 0; IndexHeader.load makes it 1
    want = bytearray(buf)
    put = 0
    for part in (items[:split], items[split:]):
        put += mk.index_put_many(
            buf, slots, index_num, [k for k, _, _ in part], [p for _, p, _ in part], [d for _, _, d in part]
        )
    fitted = [index_put(want, slots, index_num, *it) for it in items]
    assert put == sum(fitted) == min(len(items), index_num - 1)
    assert buf == want
    for key in range(5):
        for begin, end in ((0, 2**62), (1000 * 10, 1000 * 30)):
            for max_num in (1, 64):
                got = mk.index_lookup(buf, slots, index_num, key, max_num, begin, end, 0)
                from record_oracle import index_lookup

                assert got == index_lookup(buf, slots, index_num, key, max_num, begin, end, 0)
    # The newest item of a key comes first.
    if put:
        k, p, _ = items[put - 1]
        assert mk.index_lookup(buf, slots, index_num, k, 1, 0, 2**62, 0) == [p]


def test_index_file_size_checks():
    with pytest.raises(ValueError, match="need"):
        mk.index_put_many(bytearray(100), 64, 256, [1], [0], [0])
    with pytest.raises(ValueError, match=">= 0"):
        mk.index_put_many(bytearray(index_file_size(4, 4)), 4, 4, [-1], [0], [0])
    with pytest.raises(ValueError, match=">= 0"):
        mk.index_lookup(bytes(index_file_size(4, 4)), 4, 4, -5, 10, 0, 1, 0)


# -- the Java-written fixtures -------------------------------------------------------------------------

_ESC = re.compile(r"\\(x[0-9a-fA-F]{2}|.)")


def unescape(field: str) -> str:
    def one(m: re.Match[str]) -> str:
        c = m.group(1)
        return chr(int(c[1:], 16)) if c[0] == "x" else {"t": "\t", "n": "\n", "r": "\r"}.get(c, c)

    return _ESC.sub(one, field)


def tsv(path: Path) -> list[list[str]]:
    return [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines() if not line.startswith("#")]


def java_host(raw: bytes) -> str:
    port = struct.unpack(">i", raw[-4:])[0]
    if len(raw) == 8:
        return f"{ipaddress.IPv4Address(raw[:4])}:{port}"
    groups = struct.unpack(">8H", raw[:16])
    return "[" + ":".join(f"{g:x}" for g in groups) + f"]:{port}"  # Inet6Address.getHostAddress


def scan_fixture(root: Path, dledger: bool) -> list[dict[str, Any]]:
    """Every record of the store's commit log, in order, with its bytes of interest."""
    directory = root / ("dledger-n0/data" if dledger else "commitlog")
    files = sorted(directory.iterdir())
    out: list[dict[str, Any]] = []
    for k, path in enumerate(files):
        buf = path.read_bytes()
        scan = mk.scan_dledger_records if dledger else mk.scan_records
        cols, stop, code = scan(buf, int(path.name), check_crc=True)
        last = k == len(files) - 1
        assert code == (mk.STOP_ZERO if last else mk.STOP_BLANK), (path.name, mk.STOP_NAMES[code], stop)
        for r in rows(cols, mk.DLEDGER_COLUMNS if dledger else mk.COLUMNS):
            r["topic"] = buf[r["topic_off"] : r["topic_off"] + r["topic_len"]].decode()
            r["body"] = buf[r["body_off"] : r["body_off"] + r["body_len"]]
            r["properties"] = buf[r["props_off"] : r["props_off"] + r["props_len"]].decode()
            bh = 20 if r["sys_flag"] & BORNHOST_V6_FLAG else 8
            sh = 20 if r["sys_flag"] & STOREHOSTADDRESS_V6_FLAG else 8
            r["born_host"] = java_host(buf[r["born_host_off"] : r["born_host_off"] + bh])
            r["store_host"] = java_host(buf[r["store_host_off"] : r["store_host_off"] + sh])
            tags_off, tags_len = mk.property_spans(buf, [r["props_off"]], [r["props_len"]], b"TAGS")
            r["tags_code"] = int(mk.java_hash_many(buf, tags_off, tags_len)[0])
            out.append(r)
    return out


FIXTURE_STORES = [("classic-3topics", False), ("dledger-1node", True)]


@pytest.mark.parametrize(("name", "dledger"), FIXTURE_STORES)
def test_fixture_commitlog_scan_matches_expected_messages(fixtures_mq, name, dledger):
    root = fixtures_mq / name
    got = scan_fixture(root, dledger)
    expected = tsv(root / "expected" / "messages.tsv")
    assert len(got) == len(expected)
    for r, e in zip(got, expected, strict=True):
        assert [
            r["phys_offset"],
            r["size"],
            r["topic"],
            r["queue_id"],
            r["queue_offset"],
            r["sys_flag"],
            r["born_timestamp"],
            r["store_timestamp"],
            r["born_host"],
            r["store_host"],
            r["reconsume_times"],
            r["prepared_offset"],
            r["body_crc"],
        ] == [
            int(e[0]),
            int(e[1]),
            unescape(e[2]),
            int(e[3]),
            int(e[4]),
            int(e[5]),
            int(e[6]),
            int(e[7]),
            e[8],
            e[9],
            int(e[10]),
            int(e[11]),
            int(e[12]),
        ]
        assert hashlib.sha256(r["body"]).hexdigest()[:16] == e[13]
        assert r["body_len"] == int(e[14])
        assert r["properties"] == unescape(e[17])
        assert r["flag"] == int(e[19])
        assert r["body_crc"] == body_crc(r["body"])
        if dledger:  # the AppendHook wrote each record's own offset into it
            assert r["stored_phys_offset"] == r["phys_offset"]
    if dledger:
        entries = {int(e[2]) + 48: int(e[0]) for e in tsv(root / "expected" / "dledger.tsv")}
        assert [r["entry_index"] for r in got] == [entries[r["phys_offset"]] for r in got]


@pytest.mark.parametrize(("name", "dledger"), FIXTURE_STORES)
def test_fixture_tags_codes_are_java_hashes_of_tags(fixtures_mq, name, dledger):
    root = fixtures_mq / name
    by_offset = {r["phys_offset"]: r for r in scan_fixture(root, dledger)}
    units = [u for u in tsv(root / "expected" / "consumequeue.tsv") if u[0] != "SCHEDULE_TOPIC_XXXX"]
    assert units
    for topic, _qid, _qoff, phys, size, tags_code in units:
        r = by_offset[int(phys)]
        assert (r["topic"], r["size"]) == (unescape(topic), int(size))
        assert r["tags_code"] == int(tags_code)
    assert any(int(u[5]) < 0 for u in units)  # a negative hashCode stays negative (sign-extended)


@pytest.mark.parametrize(("name", "dledger"), FIXTURE_STORES)
def test_fixture_index_lookups_match_query_message(fixtures_mq, name, dledger):
    root = fixtures_mq / name
    slots, index_num = 64, 256  # the fixtures' maxHashSlotNum / maxIndexNum (README)
    files = [p.read_bytes() for p in sorted((root / "index").iterdir())]
    assert all(len(f) == index_file_size(slots, index_num) for f in files)
    lines = tsv(root / "expected" / "index.tsv")
    assert any("🚀" in line[0] for line in lines)
    for line in lines:
        key, topic = unescape(line[0]), unescape(line[1])
        want = sorted(int(x) for x in line[2].split(",") if x)
        key_hash = index_key_hash(f"{topic}#{key}")
        found: list[int] = []
        # IndexService.queryOffset: newest file first, up to maxNum (64) over all files.
        for f in reversed(files):
            begin_ts = index_header(f)["begin_timestamp"]
            found += mk.index_lookup(f, slots, index_num, key_hash, 64 - len(found), 0, 2**63 - 1, begin_ts)
            if len(found) >= 64:
                break
        assert sorted(found) == want, key
