"""The fast paths of dispatch's kernels against plain counterparts: Java's hash eight ASCII bytes
at a time (java_hash_bytes against the UTF-16 oracle), the one-pass property scan of
dispatch_keys (against property_spans_many, on properties of any bytes) and dispatch_round's
keys pass run record by record with its scan (against scan + dispatch_keys + index_put_many,
with its columns grown mid-batch and over 256 topics)."""

from __future__ import annotations

import errno
import mmap
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from record_oracle import (
    encode_dledger_entry,
    encode_record,
    index_file_size,
    java_hash,
    java_hash_bytes,
    key_columns,
)

from dledger._ext import load

K = load("message")

_ascii = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=127), max_size=20)
_piece = _ascii.map(str.encode) | st.sampled_from(["é", "中", "😀", "\x7f"]).map(str.encode) | st.binary(max_size=3)


@settings(max_examples=500, deadline=None)
@given(pieces=st.lists(_piece, max_size=8))
@example(pieces=[b"TopicA#C00002021C6CB4B790D075C4BB2C0000"])
@example(pieces=[b"abcdefg", b"\xe4\xb8\xad", b"abcdefgh"])
@example(pieces=[b"abcdefgh\xff"])
def test_java_hash_ascii_runs_and_the_rest(pieces: list[bytes]) -> None:
    raw = b"".join(pieces)
    assert K.java_hash_bytes(raw) == java_hash_bytes(raw)
    if raw.isascii():
        assert K.java_hash_bytes(raw) == java_hash(raw.decode())


def test_java_hash_of_long_ascii_keys() -> None:
    for n in range(0, 40):
        s = "".join(chr(33 + (i * 7) % 90) for i in range(n))
        assert K.java_hash_bytes(s.encode()) == java_hash(s)
    assert K.java_hash("TopicA#TagA-TagA") == java_hash("TopicA#TagA-TagA")


_token = st.sampled_from(
    [
        b"TAGS",
        b"KEYS",
        b"UNIQ_KEY",
        b"UNIQ_KEYS",
        b"TAG",
        b"\x01",
        b"\x02",
        b"\x00",
        b" ",
        b"a",
        b"abcdefghij",
        b"\xe4\xb8\xad",
    ]
)
_props = st.lists(_token | st.binary(max_size=9), max_size=14).map(b"".join)
_record = st.tuples(
    st.sampled_from([b"TopicA", b"T", b"", b"topic-%RETRY%g-long-name"]), _props, st.sampled_from([0, 8, 0xC])
)


def _layout(records: list[tuple[bytes, bytes, int]]) -> tuple[bytes, dict[str, np.ndarray]]:
    return key_columns(records)


@settings(max_examples=400, deadline=None)
@given(records=st.lists(_record, max_size=12), index_from=st.integers(0, 12))
@example(records=[(b"TopicA", b"TAGS\x01TagA\x02UNIQ_KEY\x01C00002021C6CB4B790D075C4BB2C0000", 0)], index_from=0)
@example(records=[(b"T", b"KEYS\x01a\x01b \x00c\x02KEYS\x01\x02TAGS\x01x\x00\x02", 0)], index_from=0)
def test_dispatch_keys_reads_properties_of_any_bytes_as_property_spans_many(
    records: list[tuple[bytes, bytes, int]], index_from: int
) -> None:
    buf, c = _layout(records)
    ids, firsts, tags, hashes, rows = K.dispatch_keys(
        buf, buf, c["props_off"], c["props_len"], c["topic_off"], c["topic_len"], c["sys_flag"], index_from
    )
    (to, tl), (uo, ul), (ko, kl) = K.property_spans_many(
        buf, c["props_off"], c["props_len"], (b"TAGS", b"UNIQ_KEY", b"KEYS")
    )
    assert tags.tolist() == K.java_hash_many(buf, to, tl).astype(np.int64).tolist()
    topics = [buf[o : o + n] for o, n in zip(c["topic_off"][firsts], c["topic_len"][firsts], strict=True)]
    prefix = np.array([java_hash_bytes(t + b"#") & 0xFFFFFFFF for t in topics], dtype=np.int64)[ids]
    sel = np.flatnonzero((c["sys_flag"] & 0xC != 0xC) & (np.arange(len(ids)) >= index_from))
    want_h, want_r = K.index_key_hashes(buf, prefix[sel], uo[sel], ul[sel], ko[sel], kl[sel])
    assert hashes.tolist() == want_h.tolist()
    assert rows.tolist() == sel[want_r].tolist()


def _log(n: int, dledger: bool, topics: int) -> bytes:
    """A first record larger than the rest (dispatch_round's columns, sized from it, then grow),
    ``topics`` topics, KEYS of one to three words, a ROLLBACK now and then."""
    buf = bytearray()
    ts = 1_700_000_000_000
    for i in range(n):
        body = b"x" * (600 if i == 0 else i % 5)
        keys = " ".join(f"k{i}-{j}" for j in range(1 + i % 3))
        props = f"TAGS\x01tag{i % 4}\x02UNIQ_KEY\x01{i:032X}\x02KEYS\x01{keys}".encode()
        if i % 11 == 5:
            props += "\x02TAGS\x01标签".encode()
        at = len(buf)
        rec = encode_record(
            body,
            f"t{i % topics}".encode(),
            props,
            queue_id=i % 3,
            queue_offset=i,
            phys_offset=at + (48 if dledger else 0),
            sys_flag=0xC if i % 17 == 3 else 0,
            store_timestamp=ts + 300 * i,
        )
        buf += encode_dledger_entry(i, 1, at, rec) if dledger else rec
    return bytes(buf)


def test_dispatch_round_keys_pass_with_its_scan_grown_columns_and_many_topics() -> None:
    for dledger in (False, True):
        for n, topics, index_num in ((700, 300, 5000), (700, 1, 400), (40, 2, 5000)):
            buf = _log(n, dledger, topics)
            scan = K.scan_dledger_records if dledger else K.scan_records
            cols, stop, code = scan(buf, 0, 0, -1, False, -1)
            assert len(cols["size"]) == n
            floor = int(cols["phys_offset"][n // 3])
            want = K.dispatch_keys(
                buf,
                buf,
                cols["props_off"],
                cols["props_len"],
                cols["topic_off"],
                cols["topic_len"],
                cols["sys_flag"],
                n // 3,
            )
            slots = 97
            index = bytearray(index_file_size(slots, index_num))
            struct.pack_into(">q", index, 0, 1_700_000_000_000)
            want_index = bytearray(index)
            _ids, _firsts, _tags, hashes, rows = want
            # putKey's timeDiff in a fresh file: against the header's time, then the first item's.
            ts = cols["store_timestamp"][rows]
            begins = np.full(len(ts), 1_700_000_000_000, dtype=np.int64)
            begins[1:] = ts[0]
            diffs = ((ts - begins) // 1000).astype(np.int32)
            want_put = K.index_put_many(want_index, slots, index_num, hashes, cols["phys_offset"][rows], diffs)
            got = K.dispatch_round(buf, 0, 0, -1, dledger, -1, floor, index, slots, index_num, 1_700_000_000_000)
            gcols, gstop, gcode, *keys, units, put = got
            assert (gstop, gcode) == (stop, code)
            for name, col in cols.items():
                assert np.array_equal(gcols[name], col), name
            for g, w in zip(keys, want, strict=True):
                assert g.dtype == w.dtype and g.tolist() == w.tolist()
            assert len(keys[1]) == topics
            assert put == want_put and index == want_index
            assert units is None  # several queues


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from([0, 0, 1, 2]),
            st.sampled_from([0, 0, 1, 7, -1, 2**31 - 1]),
            st.sampled_from([0, 0, 0, 4, 8, 0xC]),
            st.sampled_from([1, 1, 1, 0, 2]),
        ),
        max_size=40,
    )
)
def test_queue_runs_are_the_rows_grouped_by_queue(rows: list[tuple[int, int, int, int]]) -> None:
    n = len(rows)
    tid = np.array([r[0] for r in rows], dtype=np.int32)
    qid = np.array([r[1] for r in rows], dtype=np.int32)
    sf = np.array([r[2] for r in rows], dtype=np.int32)
    qo = np.cumsum([r[3] for r in rows], dtype=np.int64)
    phys = 1000 + 50 * np.arange(n, dtype=np.int64)
    size = np.full(n, 40, dtype=np.int32)
    tags = np.arange(n, dtype=np.int64) * 977 - 5
    runs, order, units = K.queue_runs(tid, qid, qo, sf, phys, size, tags)
    # The groups in the order of their first record, each in commit-log order.
    want: dict[tuple[int, int], list[int]] = {}
    for k in range(n):
        if sf[k] & 0xC in (0, 8):
            want.setdefault((int(tid[k]), int(qid[k])), []).append(k)
    assert [(r[0], r[1]) for r in runs.tolist()] == list(want)
    assert order.tolist() == [k for ks in want.values() for k in ks]
    for (t, q, start, count, first_qo, contiguous, first_end, last_end), ks in zip(
        runs.tolist(), want.values(), strict=True
    ):
        assert (t, q) == (tid[ks[0]], qid[ks[0]])
        assert order[start : start + count].tolist() == ks
        assert first_qo == qo[ks[0]]
        assert contiguous == int(bool((qo[ks] == qo[ks[0]] + np.arange(len(ks))).all()))
        assert (first_end, last_end) == (phys[ks[0]] + 40, phys[ks[-1]] + 40)
    assert bytes(units) == K.consume_queue_units(phys[order], size[order], tags[order])


def test_queue_runs_of_many_queues() -> None:
    # Queues enough to grow queue_runs' table several times, records of a queue far apart.
    n = 5000
    k = np.arange(n)
    tid = (k % 7).astype(np.int32)
    qid = ((k * 7919) % 1013).astype(np.int32)
    qo = k.astype(np.int64)
    runs, order, _units = K.queue_runs(tid, qid, qo, np.zeros(n, np.int32), k * 10, np.full(n, 10, np.int32), k)
    key = tid.astype(np.int64) * 4096 + qid
    _, first = np.unique(key, return_index=True)
    want_groups = key[np.sort(first)]
    assert (runs[:, 0] * 4096 + runs[:, 1]).tolist() == want_groups.tolist()
    want_order = np.concatenate([np.flatnonzero(key == g) for g in want_groups])
    assert order.tolist() == want_order.tolist()
    assert runs[:, 3].sum() == n and not runs[runs[:, 3] > 1, 5].any()


def test_dispatch_round_prefaults_other_files_and_changes_no_byte() -> None:
    buf = _log(50, False, 2)
    other = bytearray(b"\x5a" * 20000)
    plain = K.dispatch_round(buf, 0, 0, -1, False, -1, 0)
    got = K.dispatch_round(buf, 0, 0, -1, False, -1, 0, prefault=[(other, 100, 9000), (other, 0, 20000)])
    assert other == bytearray(b"\x5a" * 20000)
    for g, w in zip(got[3:8], plain[3:8], strict=True):
        assert g.tolist() == w.tolist()
    with pytest.raises(ValueError, match="prefault range"):
        K.dispatch_round(buf, 0, 0, -1, False, -1, 0, prefault=[(other, 0, 20001)])


def test_dispatch_round_zero_fills_only_whole_pages_past_a_ranges_start(tmp_path: Path) -> None:
    # A prefault range with its file's path is written with zeros before it is populated. The
    # range starts past what was written, but the page holding its start may hold written
    # bytes: they and everything below must survive, in the file and through the mapping.
    path = tmp_path / "queue"
    size = 64 << 10
    written = bytes(range(256)) * 20  # 5,120 bytes: the second page is part written
    with open(path, "wb") as f:
        f.truncate(size)
    fd = os.open(path, os.O_RDWR)
    try:
        mm = mmap.mmap(fd, size)
        mm[: len(written)] = written
        buf = _log(20, False, 1)
        K.dispatch_round(buf, 0, 0, -1, False, -1, 0, prefault=[(mm, len(written), 40000, os.fsencode(path))])
        # The hinted queue's range takes its path by keyword.
        K.dispatch_round(
            buf,
            0,
            0,
            -1,
            False,
            -1,
            0,
            cq_buf=mm,
            cq_topic=b"T",
            cq_prefault_start=len(written),
            cq_prefault_end=size,
            cq_path=os.fsencode(path),
        )
        assert mm[: len(written)] == written
        assert not any(mm[len(written) :])
        mm.close()
    finally:
        os.close(fd)
    on_disk = path.read_bytes()
    assert on_disk[: len(written)] == written and not any(on_disk[len(written) :])
    with pytest.raises(TypeError, match="bytes"):
        K.dispatch_round(buf, 0, 0, -1, False, -1, 0, prefault=[(bytearray(8192), 0, 8192, str(path))])


def test_zero_fill_writes_zeros_and_reports_errors_as_errno(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"\xff" * 10000)
    fd = os.open(path, os.O_RDWR)
    try:
        assert K.zero_fill(fd, 4096, 9000) == 0
    finally:
        os.close(fd)
    got = path.read_bytes()
    assert got[:4096] == b"\xff" * 4096 and got[4096:9000] == bytes(4904) and got[9000:] == b"\xff" * 1000
    assert K.zero_fill(fd, 0, 10) == errno.EBADF  # closed above
    with pytest.raises(ValueError, match="bad range"):
        K.zero_fill(0, 10, 5)


def test_dispatch_round_with_an_arena_returns_what_it_returns_without() -> None:
    arena: dict[str, object] = {}
    for dledger, n, topics, max_records in (
        (False, 700, 3, -1),
        (False, 60, 1, 8),
        (True, 700, 300, -1),
        (False, 40, 2, -1),
    ):
        buf = _log(n, dledger, topics)
        start = 0
        while True:
            want = K.dispatch_round(buf, 0, start, -1, dledger, max_records, 0)
            got = K.dispatch_round(buf, 0, start, -1, dledger, max_records, 0, arena=arena)
            assert got[1:3] == want[1:3] and got[9] == want[9]
            assert {k: v.tolist() for k, v in got[0].items()} == {k: v.tolist() for k, v in want[0].items()}
            for g, w in zip(got[3:8], want[3:8], strict=True):
                assert g.dtype == w.dtype and g.tolist() == w.tolist()
            assert (got[8] is None) == (want[8] is None)
            if got[8] is not None and want[8] is not None:
                assert bytes(got[8]) == bytes(want[8])
            cols = got[0]
            args = (got[3], cols["queue_id"], cols["queue_offset"], cols["sys_flag"], cols["phys_offset"])
            runs = K.queue_runs(*args, cols["size"], got[5])
            arena_runs = K.queue_runs(*args, cols["size"], got[5], arena)
            for g, w in zip(arena_runs, runs, strict=True):
                assert g.tolist() == w.tolist()
            if got[2] != K.STOP_LIMIT:
                break
            start = got[1]
