"""The DLedger commit log's framed put: ``encode_uniform(..., gap=48)`` leaves room for each entry
header and ``append_framed`` fills it in place. The records must be the oracle's, and the store's
files exactly what the unframed path (records, then ``append_batch``) writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import record_oracle as oracle
from hypothesis import given, settings
from hypothesis import strategies as st

from dledger._ext import message as mk
from dledger.config import DLedgerConfig
from dledger.packed import PackedBodies
from dledger.store.file import MmapFileStore
from dledger.store.properties import read_properties

V4 = oracle.host_bytes("10.0.0.1", 10911)
V6 = oracle.host_bytes("2001:db8::10", 10911)


def _uniform(bodies: list[bytes], props: list[bytes] | bytes, uniq: int, sys_flag: int, phys: int, gap: int):
    born = V6 if sys_flag & 16 else V4
    store = V6 if sys_flag & 32 else V4
    return mk.encode_uniform(bodies, b"TopicA", props, uniq, 5, 7, sys_flag, 111, born, 222, store, 40, True, phys, gap)


@settings(max_examples=150, deadline=None)
@given(
    bodies=st.lists(st.binary(max_size=300), min_size=1, max_size=20),
    stem=st.binary(max_size=40),
    per_record=st.booleans(),
    uniq=st.one_of(st.just(-1), st.integers(0, 0xFFFF + 5)),
    sys_flag=st.sampled_from([0, 16, 32, 48]),
    phys=st.integers(0, 2**40),
    gap=st.sampled_from([1, 8, 48]),
)
def test_gap_frames_the_records_of_no_gap(
    bodies: list[bytes], stem: bytes, per_record: bool, uniq: int, sys_flag: int, phys: int, gap: int
) -> None:
    props: list[bytes] | bytes = [stem + bytes([65 + k % 26]) * k for k in range(len(bodies))] if per_record else stem
    plain, poffs = _uniform(bodies, props, uniq, sys_flag, 0, 0)
    framed, foffs = _uniform(bodies, props, uniq, sys_flag, phys, gap)
    assert isinstance(framed, bytearray)
    n = len(bodies)
    assert foffs.tolist() == [phys + int(poffs[k]) + k * gap for k in range(n + 1)]
    for k in range(n):
        start = int(foffs[k]) - phys
        assert framed[start : start + gap] == bytes(gap)
        rec = bytes(framed[start + gap : int(foffs[k + 1]) - phys])
        want = bytearray(plain[int(poffs[k]) : int(poffs[k + 1])])
        want[28:36] = (int(foffs[k]) + gap).to_bytes(8, "big")  # PHYSICALOFFSET: the record's own start
        assert rec == bytes(want)
        assert oracle.decode_record(rec, 0, check_crc=True)["queue_offset"] == 40 + k


@pytest.mark.parametrize("uniq", [-1, 0xFFF0])
def test_framed_put_stores_what_the_packed_put_stores(tmp_path: Path, uniq: int) -> None:
    cfg = DLedgerConfig(mapped_file_size_for_entry_data=1 << 13, mapped_file_size_for_entry_index=32 * 32)
    a = MmapFileStore(tmp_path / "a", cfg, start_services=False, body_pos_patch=mk.PHY_POS_POSITION)
    b = MmapFileStore(tmp_path / "b", cfg, start_services=False, body_pos_patch=mk.PHY_POS_POSITION)
    for i in range(12):
        bodies = [bytes([i, k]) * (k * 7 % 150) for k in range(1 + i * 3 % 17)]
        buf, starts = _uniform(bodies, b"TAGS\x01t\x02UNIQ_KEY\x01AB", uniq, 0, 0, 0)
        pa = a.append_batch(PackedBodies(buf, starts), 1)[1]
        fbuf, fstarts = _uniform(bodies, b"TAGS\x01t\x02UNIQ_KEY\x01AB", uniq, 0, 0, 48)
        pb = b.append_framed(fbuf, fstarts, 1)[1]
        assert pa.tolist() == pb.tolist()
    assert len(a._log.data.files) > 2
    a.close()
    b.close()
    _assert_same_files(tmp_path / "a", tmp_path / "b")
    # (the checkpoint's first line is the time it was written, which may differ by a second)
    assert read_properties(tmp_path / "a" / "checkpoint") == read_properties(tmp_path / "b" / "checkpoint")


def test_gap_must_not_be_negative() -> None:
    with pytest.raises(ValueError):
        _uniform([b"x"], b"", -1, 0, 0, -1)
    assert np.asarray(_uniform([b"x"], b"", -1, 0, 0, 0)[1]).dtype == np.int64


def test_append_framed_end_is_the_end_of_the_last_entry(tmp_path: Path) -> None:
    cfg = DLedgerConfig(mapped_file_size_for_entry_data=1 << 13, mapped_file_size_for_entry_index=32 * 32)
    s = MmapFileStore(tmp_path / "s", cfg, start_services=False, body_pos_patch=mk.PHY_POS_POSITION)
    lg = s._log
    for i in range(12):
        bodies = [bytes([i, k]) * (k * 7 % 150) for k in range(1 + i * 3 % 17)]
        fbuf, fstarts = _uniform(bodies, b"TAGS\x01t", -1, 0, 0, 48)
        # A bytearray and int64 offsets are read in place; anything else through the buffer protocol.
        buf: Any = fbuf if i % 2 else memoryview(fbuf)
        offs: Any = fstarts if i % 3 else fstarts.tolist()
        first, positions, end = lg.append_framed_end(buf, offs, 1, i % 4 < 2)  # with and without the GIL
        assert first == lg.end - len(bodies) + 1
        pos, size = lg.pos_and_size(lg.end)
        assert end == pos + size and int(positions[-1]) == pos
    assert len(lg.data.files) > 2
    with pytest.raises(ValueError):
        lg.append_framed_end(bytearray(100), np.array([0, 50], dtype=np.int64), 1)
    s.close()


def test_committed_appends_commit_as_update_committed_index_does(tmp_path: Path) -> None:
    """The single member's appends (``append_one_committed``, ``append_framed_committed``) leave
    the committed index and position where an append and ``update_committed_index`` leave them,
    across data files, and write the same files."""
    cfg = DLedgerConfig(mapped_file_size_for_entry_data=1 << 13, mapped_file_size_for_entry_index=32 * 32)
    a = MmapFileStore(tmp_path / "a", cfg, start_services=False, body_pos_patch=mk.PHY_POS_POSITION)
    b = MmapFileStore(tmp_path / "b", cfg, start_services=False, body_pos_patch=mk.PHY_POS_POSITION)
    for i in range(40):
        bodies = [bytes([i, k]) * (k * 13 % 170 + 30) for k in range(1 + i % 5)]
        if i % 2:
            for body in _records(bodies):
                index, pos = a.append_with_pos(body, 1)
                a.update_committed_index(1, index)
                assert b.append_one_committed(body, 1) == pos
        else:
            buf, starts = _uniform(bodies, b"TAGS\x01t", -1, 0, 0, 0)
            first, _ = a.append_batch(PackedBodies(buf, starts), 1)
            a.update_committed_index(1, first + len(bodies) - 1)
            fbuf, fstarts = _uniform(bodies, b"TAGS\x01t", -1, 0, 0, 48)
            assert b.append_framed_committed(fbuf, fstarts, 1)[2] == a.committed_pos
        assert (b.committed_index, b.committed_pos) == (a.committed_index, a.committed_pos)
    assert len(a._log.data.files) > 3
    a.close()
    b.close()
    _assert_same_files(tmp_path / "a", tmp_path / "b")


def _assert_same_files(a: Path, b: Path) -> None:
    for sub in ("data", "index"):
        fa = sorted((a / sub).iterdir())
        fb = sorted((b / sub).iterdir())
        assert [p.name for p in fa] == [p.name for p in fb]
        assert all(x.read_bytes() == y.read_bytes() for x, y in zip(fa, fb, strict=True))


def _records(bodies: list[bytes]) -> list[bytes]:
    buf, starts = _uniform(bodies, b"TAGS\x01t", -1, 0, 0, 0)
    return [bytes(buf[int(starts[k]) : int(starts[k + 1])]) for k in range(len(bodies))]


def test_dledger_batch_result_offsets(tmp_path: Path) -> None:
    from dledger.rocketmq.store.config import MessageStoreConfig
    from dledger.rocketmq.store.message import MessageSysFlag
    from dledger.rocketmq.store.message_store import MessageStore

    s = MessageStore(tmp_path, MessageStoreConfig(enable_dledger_commit_log=True, store_host="10.0.0.1:10911"))
    try:
        for _ in range(3):
            res = s.put_batch("TopicA", [b"a" * 10, b"b" * 20, b"c" * 5], tags="T")
            ar = res.append_result
            assert res.ok and ar is not None
            assert ar.wrote_offsets is not None and ar.queue_offsets is not None
            assert ar.wrote_offsets.tolist()[0] == ar.wrote_offset
            assert ar.queue_offsets.tolist() == list(range(ar.logics_offset, ar.logics_offset + 3))
            assert len(ar.msg_ids) == 3 and ar.msg_id == ",".join(ar.msg_ids)
            for k, off in enumerate(ar.wrote_offsets.tolist()):
                m = s.lookup(off)
                assert m is not None and m.phys_offset == off and m.queue_offset == ar.queue_offsets[k]
        prepared = s.put_batch("TopicA", [b"x", b"y"], sys_flag=MessageSysFlag.TRANSACTION_PREPARED_TYPE)
        ar = prepared.append_result
        assert ar is not None and ar.queue_offsets is not None and ar.queue_offsets.tolist() == [0, 0]
        ar.queue_offsets = None  # still settable, as the fields they were
        assert ar.queue_offsets is None
    finally:
        s.close()


def test_longest_body_is_max_of_len() -> None:
    cases: list[Any] = [[], [b""], [b"a", b"abc", b"ab"], [bytearray(7), b"x" * 300, memoryview(b"12345")]]
    for bodies in cases:
        want = max(map(len, bodies), default=0)
        assert mk.longest_body(bodies) == want
        assert mk.longest_body(tuple(bodies)) == want
        assert mk.longest_body(iter(bodies)) == want
