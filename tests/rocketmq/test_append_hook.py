"""The DLedger AppendHook (``MmapFileStore(body_pos_patch=28)``): leader appends stamp each body with
its own log offset (entry pos + 48) at PHY_POS_POSITION before the body CRC, as DLedgerCommitLog's
hook does; followers store the leader's bytes as they are."""

from __future__ import annotations

import os
import struct
import tempfile
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from record_oracle import encode_record

from dledger._ext import message as mk
from dledger.codes import ResponseCode
from dledger.config import DLedgerConfig
from dledger.errors import DLedgerError
from dledger.store.entry import Entry
from dledger.store.file import MmapFileStore

AT = mk.PHY_POS_POSITION  # 28


def _open(path: Path, cfg: DLedgerConfig, **kw) -> MmapFileStore:
    return MmapFileStore(path, cfg, start_services=False, **kw)


def stamped(body: bytes, pos: int, at: int = AT) -> bytes:
    """What the hook stores for ``body`` appended at entry position ``pos``."""
    return body[:at] + struct.pack(">q", pos + 48) + body[at + 8 :]


@pytest.fixture
def cfg() -> DLedgerConfig:
    # Small data files so batches cross file boundaries (a blank ends each file).
    return DLedgerConfig(mapped_file_size_for_entry_data=8192, mapped_file_size_for_entry_index=32 * 64)


def check_store(store: MmapFileStore, originals: list[bytes], at: int = AT) -> None:
    for k, body in enumerate(originals):
        e = store.get(k)
        assert e.body == stamped(body, e.pos, at)
        assert e.body_crc == zlib.crc32(e.body)  # the CRC of the bytes stored, stamp included


def test_leader_appends_stamp_the_body_offset(tmp_path, cfg):
    store = _open(tmp_path / "n0", cfg, body_pos_patch=AT)
    assert store._log.body_pos_patch == AT
    bodies = [os.urandom(40 + k * 13 % 300) for k in range(120)]
    given_bodies = [bytes(b) for b in bodies]
    store.append(given_bodies[0], 1)
    e = store.append_as_leader(given_bodies[1], 1)
    assert (e.index, e.pos) == (1, 48 + len(bodies[0]))
    mutable = bytearray(bodies[2])
    assert store._log.append_with_pos(mutable, 1)[0] == 2
    first, positions = store.append_batch(given_bodies[3:], 1)
    assert first == 3
    assert given_bodies == bodies and mutable == bodies[2]  # the caller's bytes are not changed
    check_store(store, bodies)
    assert [store.get(k).pos for k in range(3, len(bodies))] == positions.tolist()
    assert len(store._log.data.files) > 2  # the batch crossed files
    store.close()


def test_batches_longer_than_one_write_run(tmp_path):
    # Over 512 entries per batch: several pwritev runs.
    store = _open(tmp_path / "n0", DLedgerConfig(), body_pos_patch=AT)
    bodies = [bytes([k % 251]) * (36 + k % 50) for k in range(1300)]
    store.append_batch(bodies, 2)
    check_store(store, bodies)
    store.close()


def test_stamp_far_into_the_body(tmp_path):
    # Each entry's bytes before the stamp are staged beside its header, so runs get shorter.
    at = 300_000
    store = _open(tmp_path / "n0", DLedgerConfig(), body_pos_patch=at)
    bodies = [os.urandom(at + 8 + k) for k in range(9)]
    store.append_batch(bodies, 1)
    check_store(store, bodies, at)
    store.close()


def test_records_read_back_with_their_offsets(tmp_path, cfg):
    """A RocketMQ record appended with PHYSICALOFFSET 0 scans back with its own offset there."""
    store = _open(tmp_path / "n0", cfg, body_pos_patch=AT)
    bufs = [encode_record(os.urandom(k * 37 % 500), b"TopicA", b"TAGS\x01a", queue_offset=k) for k in range(60)]
    store.append_batch(bufs[:50], 1)
    for b in bufs[50:]:
        store.append(b, 1)
    store.flush()
    seen = 0
    for f in store._log.data.files:
        cols, _stop, code = mk.scan_dledger_records(f.view(), f.file_from_offset, check_crc=True)
        assert code in (mk.STOP_BLANK, mk.STOP_ZERO)
        assert (cols["stored_phys_offset"] == cols["phys_offset"]).all()
        assert cols["queue_offset"].tolist() == list(range(seen, seen + len(cols["size"])))
        seen += len(cols["size"])
    assert seen == 60
    store.close()


def test_followers_store_the_leaders_bytes(tmp_path, cfg):
    leader = _open(tmp_path / "leader", cfg, body_pos_patch=AT)
    follower = _open(tmp_path / "follower", cfg, body_pos_patch=AT)
    raw_follower = _open(tmp_path / "raw", cfg, body_pos_patch=AT)
    bodies = [os.urandom(36 + k % 90) for k in range(40)]
    leader.append_batch(bodies, 1)
    for k in range(40):
        follower.append_as_follower(leader.get(k))
    blob, first_pos, count = leader.get_raw_range(0, 39, 1 << 20)
    raw_follower.append_raw_as_follower(blob, 0, first_pos, count)
    for k in range(count, 40):  # the next files' entries
        raw_follower.append_as_follower(leader.get(k))
    for store in (follower, raw_follower):
        assert [store.get_raw(k) for k in range(40)] == [leader.get_raw(k) for k in range(40)]
    # A follower stores what it is given, even a body the hook would have stamped otherwise.
    odd = Entry(index=40, term=1, pos=leader.get(39).pos + leader.get(39).size, body=bytes(64))
    follower.append_as_follower(odd)
    assert follower.get(40).body == bytes(64)
    for s in (leader, follower, raw_follower):
        s.close()


def test_reopened_store_reads_the_stamped_bodies(tmp_path, cfg):
    path = tmp_path / "n0"
    store = _open(path, cfg, body_pos_patch=AT)
    bodies = [os.urandom(50 + k % 200) for k in range(80)]
    store.append_batch(bodies[:60], 3)
    for b in bodies[60:]:
        store.append_as_leader(b, 3)
    store.flush()
    store.close()
    for hook in (AT, None):  # recovery checks the CRCs: they are those of the stored bytes
        again = _open(path, cfg, body_pos_patch=hook)
        assert again.ledger_end_index == 79
        check_store(again, bodies)
        again.close()


def test_short_bodies_are_refused_and_change_nothing(tmp_path, cfg):
    store = _open(tmp_path / "n0", cfg, body_pos_patch=AT)
    store.append(bytes(36), 1)
    for attempt in (
        lambda: store.append(bytes(35), 1),
        lambda: store.append_as_leader(b"x", 1),
        lambda: store.append_batch([bytes(40), bytes(10), bytes(40)], 1),
    ):
        with pytest.raises(DLedgerError) as exc:
            attempt()
        assert exc.value.code == ResponseCode.UNEXPECTED_ARGUMENT
    assert store.ledger_end_index == 0
    with pytest.raises(ValueError):
        _open(tmp_path / "n1", cfg, body_pos_patch=-1)
    store.close()


def test_without_the_hook_bodies_are_stored_as_given(tmp_path, cfg):
    store = _open(tmp_path / "n0", cfg)
    assert store._log.body_pos_patch is None
    store.append_batch([bytes(40), b"x"], 1)
    assert [store.get(k).body for k in range(2)] == [bytes(40), b"x"]
    store.close()


@settings(max_examples=25, deadline=None)
@given(at=st.integers(0, 64), extra=st.lists(st.integers(0, 100), min_size=1, max_size=30), single=st.integers(0, 5))
def test_any_patch_position(at, extra, single):
    bodies = [bytes([(k * 7 + j) % 256 for j in range(at + 8 + n)]) for k, n in enumerate(extra)]
    with tempfile.TemporaryDirectory() as d:
        store = _open(
            Path(d) / "n0",
            DLedgerConfig(mapped_file_size_for_entry_data=4096, mapped_file_size_for_entry_index=32 * 64),
            body_pos_patch=at,
        )
        for b in bodies[:single]:
            store.append(b, 1)
        if bodies[single:]:
            store.append_batch(bodies[single:], 1)
        check_store(store, bodies, at)
        store.close()
