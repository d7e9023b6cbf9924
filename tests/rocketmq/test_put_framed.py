"""The DLedger commit log's framed put: ``encode_uniform(..., gap=48)`` leaves room for each entry
header and ``append_framed`` fills it in place. The records must be the oracle's, and the store's
files exactly what the unframed path (records, then ``append_batch``) writes."""

from __future__ import annotations

from pathlib import Path

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
    for sub in ("data", "index"):
        fa = sorted((tmp_path / "a" / sub).iterdir())
        fb = sorted((tmp_path / "b" / sub).iterdir())
        assert [p.name for p in fa] == [p.name for p in fb]
        assert all(x.read_bytes() == y.read_bytes() for x, y in zip(fa, fb, strict=True))
    # (the checkpoint's first line is the time it was written, which may differ by a second)
    assert read_properties(tmp_path / "a" / "checkpoint") == read_properties(tmp_path / "b" / "checkpoint")


def test_gap_must_not_be_negative() -> None:
    with pytest.raises(ValueError):
        _uniform([b"x"], b"", -1, 0, 0, -1)
    assert np.asarray(_uniform([b"x"], b"", -1, 0, 0, 0)[1]).dtype == np.int64
