"""The store API: what a caller of the file store (and the memory store) relies on."""

from __future__ import annotations

import os
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

from dledger.codes import ResponseCode
from dledger.config import DLedgerConfig
from dledger.errors import DLedgerError
from dledger.store.entry import Entry
from dledger.store.file import MmapFileStore
from dledger.store.memory import MemoryStore
from dledger.store.properties import read_properties
from tests import format_oracle as oracle


def _open(path: Path, cfg: DLedgerConfig, **kw) -> MmapFileStore:
    return MmapFileStore(path, cfg, start_services=False, **kw)


@pytest.fixture(params=["file", "memory"])
def any_store(request, tmp_path, small_config):
    store: MemoryStore | MmapFileStore
    if request.param == "memory":
        store = MemoryStore(max_body_size=small_config.max_body_size)
    else:
        store = _open(tmp_path / "dledger-n0", small_config)
    yield store
    store.close()


def test_append_get_round_trip(any_store):
    bodies = [os.urandom(1 + i % 200) for i in range(300)]
    for k, b in enumerate(bodies):
        e = any_store.append_as_leader(b, 1 + k // 100)
        assert e.index == k
    assert any_store.ledger_begin_index == 0
    assert any_store.ledger_end_index == 299
    assert any_store.ledger_end_term == 3
    for k, b in enumerate(bodies):
        e = any_store.get(k)
        assert (e.index, e.term, e.body) == (k, 1 + k // 100, b)
    assert [e.body for e in any_store.get_range(10, 20)] == bodies[10:21]


def test_bad_bodies_are_refused_and_change_nothing(any_store):
    any_store.append_as_leader(b"a", 1)
    with pytest.raises(DLedgerError) as exc:
        any_store.append_as_leader(b"", 1)
    assert exc.value.code == ResponseCode.REQUEST_WITH_EMPTY_BODYS
    with pytest.raises(DLedgerError) as exc:
        any_store.append_as_leader(b"x" * (any_store.max_body_size + 1), 1)
    assert exc.value.code == ResponseCode.UNEXPECTED_ARGUMENT
    assert any_store.ledger_end_index == 0


def test_get_out_of_range_codes(any_store):
    with pytest.raises(DLedgerError) as exc:
        any_store.get(0)
    assert exc.value.code == ResponseCode.INDEX_OUT_OF_RANGE
    any_store.append_as_leader(b"a", 1)
    with pytest.raises(DLedgerError) as exc:
        any_store.get(-1)
    assert exc.value.code == ResponseCode.INDEX_OUT_OF_RANGE
    with pytest.raises(DLedgerError) as exc:
        any_store.get(1)
    assert exc.value.code == ResponseCode.INDEX_OUT_OF_RANGE


def test_follower_append_checks_index_and_pos(any_store):
    e0 = any_store.append_as_leader(b"first", 1)
    good = Entry(index=1, term=2, pos=e0.pos + e0.size, body=b"second")
    with pytest.raises(DLedgerError) as exc:
        any_store.append_as_follower(Entry(index=2, term=2, pos=good.pos, body=b"x"))
    assert exc.value.code == ResponseCode.INCONSISTENT_INDEX
    with pytest.raises(DLedgerError) as exc:
        any_store.append_as_follower(Entry(index=1, term=2, pos=good.pos + 1, body=b"x"))
    assert exc.value.code == ResponseCode.DISK_ERROR
    assert any_store.ledger_end_index == 0
    any_store.append_as_follower(good)
    assert any_store.get(1).body == b"second"


def test_truncate_replaces_divergent_suffix(any_store):
    entries = [any_store.append_as_leader(f"e{i}".encode(), 1) for i in range(50)]
    # The leader of term 2 has a different entry 30: we keep 0..29 and take its 30.
    new30 = Entry(index=30, term=2, pos=entries[30].pos, body=b"leader's thirty")
    assert any_store.truncate(new30) == 30
    assert any_store.ledger_end_index == 30
    assert any_store.ledger_end_term == 2
    assert any_store.get(30).body == b"leader's thirty"
    assert any_store.get(29).body == b"e29"
    # Truncating at an entry we already have keeps it and drops what follows.
    any_store.append_as_leader(b"after", 2)
    assert any_store.truncate(any_store.get(30)) == 30
    assert any_store.ledger_end_index == 30


@pytest.mark.parametrize("offset", [-5, 7, 10_000], ids=["inside-our-entry", "past-our-entry", "past-our-end"])
def test_truncate_refuses_an_entry_that_does_not_start_where_ours_before_it_ends(any_store, offset):
    # The leader's entry k at its own position: when our k - 1 ends elsewhere (our log is not
    # the leader's up to k - 1: a wrong COMPARE), cutting there would cut an entry of ours in
    # two (recovery then refuses the file) or, past our end, drop every data file. Refused,
    # nothing changed (DLedgerMmapFileStore.truncate checks dataPos == entry.getPos() only
    # after cutting).
    entries = [any_store.append_as_leader(f"entry {i}".encode() * (1 + i % 3), 1) for i in range(20)]
    any_store.update_committed_index(1, 9)
    held: list[bytes] = [any_store.get_raw(i) for i in range(20)] if isinstance(any_store, MmapFileStore) else []
    ours = entries[12].pos
    with pytest.raises(DLedgerError) as exc:
        any_store.truncate(Entry(index=12, term=2, pos=ours + offset, body=b"the leader's twelve"))
    assert exc.value.code == ResponseCode.INCONSISTENT_STATE
    assert (any_store.ledger_end_index, any_store.ledger_end_term) == (19, 1)
    assert [any_store.get(i).body for i in range(20)] == [e.body for e in entries]
    # At our own position it is taken.
    assert any_store.truncate(Entry(index=12, term=2, pos=ours, body=b"the leader's twelve")) == 12
    if isinstance(any_store, MmapFileStore):
        # And the file is one our own recovery opens, every kept entry as it was.
        path, cfg = any_store.path, any_store.config
        any_store.close()
        with MmapFileStore(path, cfg, start_services=False) as again:
            assert again.ledger_end_index == 12
            assert [again.get_raw(i) for i in range(12)] == held[:12]
            assert again.get(12).body == b"the leader's twelve"


def test_committed_index_moves_forward_only(any_store):
    for _i in range(10):
        any_store.append_as_leader(b"x", 1)
    any_store.update_committed_index(1, 5)
    assert any_store.committed_index == 5
    any_store.update_committed_index(1, 3)
    assert any_store.committed_index == 5
    any_store.update_committed_index(1, 100)
    assert any_store.committed_index == 9  # capped at the ledger end
    e = any_store.get(9)
    assert any_store.committed_pos == e.pos + e.size


def test_batch_append_positions_and_layout(tmp_path, small_config):
    store = _open(tmp_path / "n", small_config)
    bodies = [bytes([i % 256]) * (1 + (i * 7) % 300) for i in range(200)]
    first, positions = store.append_batch(bodies, 4)
    assert first == 0
    for k, b in enumerate(bodies):
        e = store.get(k)
        assert e.pos == positions[k] and e.body == b and e.body_crc == zlib.crc32(b)
    pos, size, term = store.lookup(np.arange(200))
    assert pos.tolist() == positions.tolist()
    assert size.tolist() == [48 + len(b) for b in bodies]
    assert set(term.tolist()) == {4}
    store.close()


def test_files_are_byte_compatible_with_dledger(tmp_path, small_config):
    """Names, sizes, blank records and index units as the Java implementation lays them out."""
    node = tmp_path / "dledger-n0"
    store = _open(node, small_config)
    bodies = [os.urandom(50 + i % 400) for i in range(120)]
    for b in bodies:
        store.append_as_leader(b, 7)
    store.close()
    data_size, index_size = small_config.mapped_file_size_for_entry_data, small_config.mapped_file_size_for_entry_index
    # Lay the same entries out by MmapFileList's rules with the struct oracle.
    files: dict[int, bytearray] = {0: bytearray()}
    start = 0
    units = bytearray()
    for k, b in enumerate(bodies):
        size = 48 + len(b)
        if size + 8 > data_size - len(files[start]):
            left = data_size - len(files[start])
            files[start] += oracle.BLANK.pack(-1, left) + bytes(left - 8)
            start += data_size
            files[start] = bytearray()
        pos = start + len(files[start])
        files[start] += oracle.encode_entry(k, 7, pos, b)
        units += oracle.encode_index(1, pos, size, k, 7)
    data_names = sorted(p.name for p in (node / "data").iterdir())
    assert data_names == [f"{s:020d}" for s in sorted(files)]
    for s, content in files.items():
        raw = (node / "data" / f"{s:020d}").read_bytes()
        assert len(raw) == data_size
        assert raw[: len(content)] == bytes(content)
        assert raw[len(content) :] == bytes(data_size - len(content))
    index_raw = b"".join((node / "index" / n).read_bytes() for n in sorted(os.listdir(node / "index")))
    assert all(os.path.getsize(node / "index" / n) == index_size for n in os.listdir(node / "index"))
    assert index_raw[: len(units)] == bytes(units)
    props = read_properties(node / "checkpoint")
    assert props == {"endIndex": "119", "committedIndex": "-1"}


def test_reopen_recovers_state_and_reads_sizes_from_files(tmp_path, small_config):
    node = tmp_path / "dledger-n0"
    store = _open(node, small_config)
    for i in range(100):
        store.append_as_leader(f"entry {i}".encode(), 1 + i // 40)
    store.update_committed_index(3, 90)
    store.close()
    # Opened with the default 1 GiB config: sizes come from the files, not the config.
    with MmapFileStore(node, start_services=False) as again:
        assert again.data_file_size == 4096 and again.index_file_size == 320
        assert (again.ledger_begin_index, again.ledger_end_index, again.ledger_end_term) == (0, 99, 3)
        assert again.committed_index == 90
        assert again.get(57).body == b"entry 57"
        e = again.append_as_leader(b"more", 3)
        assert e.index == 100


def test_not_a_store_and_mixed_sizes_are_refused(tmp_path, small_config):
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("hello")
    with pytest.raises(DLedgerError, match="not a dledger node directory"):
        _open(junk, small_config)
    with pytest.raises(DLedgerError, match="no dledger store"):
        MmapFileStore(tmp_path / "absent", readonly=True)
    node = tmp_path / "dledger-n0"
    store = _open(node, small_config)
    for _i in range(200):
        store.append_as_leader(b"y" * 100, 1)
    store.close()
    files = sorted((node / "data").iterdir())
    assert len(files) > 2
    os.truncate(files[1], 2048)
    before = {p.name: p.read_bytes() for p in files}
    with pytest.raises(DLedgerError, match="mixed sizes"):
        _open(node, small_config)
    assert {p.name: p.read_bytes() for p in files} == before


def test_disk_full_flag_turns_appends_into_disk_full(tmp_path, small_config):
    store = _open(tmp_path / "n", small_config)
    store.append_as_leader(b"ok", 1)
    assert store.check_disk(used_ratio=0.99) is True
    with pytest.raises(DLedgerError) as exc:
        store.append_as_leader(b"refused", 1)
    assert exc.value.code == ResponseCode.DISK_FULL
    with pytest.raises(DLedgerError):
        store.append_batch([b"a", b"b"], 1)
    assert store.ledger_end_index == 0
    assert store.check_disk(used_ratio=0.10) is False
    assert store.append_as_leader(b"again", 1).index == 1
    store.close()


def test_retention_deletes_expired_files_but_never_the_last(tmp_path, small_config):
    cfg = small_config.replace(file_reserved_hours=1, delete_when="99")
    store = _open(tmp_path / "n", cfg)
    for _i in range(300):
        store.append_as_leader(b"z" * 100, 1)
    files = store.data_files
    assert len(files) > 11
    old = time.time() - 2 * 3600
    for p in files:
        os.utime(p, (old, old))
    # Disk not pressed and not the deletion hour: nothing goes.
    assert store.delete_expired(used_ratio=0.10) == 0
    # Above the check ratio: expired files go, but the one being written stays.
    # At most 10 files a call, as DLedger's DELETE_FILES_BATCH_MAX.
    assert store.delete_expired(used_ratio=0.75) == 10
    assert store.delete_expired(used_ratio=0.75) == len(files) - 11
    assert store.data_files == files[-1:]
    begin = store.ledger_begin_index
    assert begin > 0
    assert store.get(begin).body == b"z" * 100
    with pytest.raises(DLedgerError) as exc:
        store.get(begin - 1)
    assert exc.value.code == ResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN
    store.close()
    with _open(tmp_path / "n", cfg) as again:
        assert again.ledger_begin_index == begin
        assert again.ledger_end_index == 299


def test_fresh_files_are_kept_unless_forced(tmp_path, small_config):
    store = _open(tmp_path / "n", small_config.replace(delete_when="99"))
    for _i in range(300):
        store.append_as_leader(b"z" * 100, 1)
    n = len(store.data_files)
    assert store.delete_expired(used_ratio=0.80) == 0
    # Past the force-clean ratio the oldest files go whatever their age (at most 10 a call).
    assert store.delete_expired(used_ratio=0.90) == min(10, n - 1)
    store.close()


def test_reset_begin_index(tmp_path, small_config):
    store = _open(tmp_path / "n", small_config)
    for i in range(300):
        store.append_as_leader(f"{i:04d}".encode() * 20, 1)
    new_begin = store.reset_begin_index(150)
    assert 0 < new_begin <= 150
    assert store.get(150).body == b"0150" * 20
    with pytest.raises(DLedgerError):
        store.reset_begin_index(1000)
    store.close()


def test_sync_option_writes_through(tmp_path, small_config):
    store = _open(tmp_path / "n", small_config, sync=True)
    store.append_as_leader(b"durable", 1)
    # With sync the data is flushed before append returns: flushed_where reached the end.
    assert store._log.data.flushed_where == store._log.data.max_wrote_position
    store.close()


def test_readonly_store_refuses_writes(tmp_path, small_config):
    node = tmp_path / "n"
    with _open(node, small_config) as s:
        s.append_as_leader(b"x", 1)
    with MmapFileStore(node, readonly=True) as ro:
        with pytest.raises(DLedgerError, match="read-only"):
            ro.append_as_leader(b"y", 1)
        assert ro.get(0).body == b"x"


def test_background_service_flushes_and_checkpoints(tmp_path, small_config):
    cfg = small_config.replace(flush_file_interval=5, check_point_interval=20)
    store = MmapFileStore(tmp_path / "n", cfg)
    try:
        for _i in range(10):
            store.append_as_leader(b"bg", 1)
        store.update_committed_index(1, 9)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            props = read_properties(tmp_path / "n" / "checkpoint")
            if props and props.get("committedIndex") == "9":
                break
            time.sleep(0.01)
        assert props == {"endIndex": "9", "committedIndex": "9"}
    finally:
        store.close()


def test_follower_catching_up_past_empty_log(tmp_path, small_config):
    """A follower with nothing takes the leader's entry at its index and pos (rebuild)."""
    store = _open(tmp_path / "n", small_config)
    e = Entry(index=1000, term=5, pos=5 * 4096 + 100, body=b"from the leader")
    store.truncate(e)
    assert (store.ledger_begin_index, store.ledger_end_index) == (1000, 1000)
    assert store.get(1000).pos == e.pos
    nxt = store.append_as_leader(b"next", 5)
    assert (nxt.index, nxt.pos) == (1001, e.pos + e.size)
    store.close()
    with _open(tmp_path / "n", small_config) as again:
        assert (again.ledger_begin_index, again.ledger_end_index) == (1000, 1001)
        assert again.get(1001).body == b"next"


def test_follower_keeps_leader_crc_and_refuses_damaged_bodies(tmp_path, small_config):
    leader = _open(tmp_path / "leader", small_config)
    follower = _open(tmp_path / "follower", small_config)
    java_style = Entry(index=0, term=1, pos=0, body=b"no crc recorded", body_crc=0)
    follower.append_as_follower(java_style)
    assert follower.get(0).body_crc == 0  # kept as the leader wrote it: replicas are byte-identical
    sent = leader.append_as_leader(b"payload", 1)
    # The body changed on the way; the CRC the leader recorded gives it away.
    damaged = Entry(
        index=1, term=1, pos=follower.get(0).size, body=b"pAyload", body_crc=leader.get(sent.index).body_crc
    )
    with pytest.raises(DLedgerError) as exc:
        follower.append_as_follower(damaged)
    assert exc.value.code == ResponseCode.UNEXPECTED_ARGUMENT
    assert follower.ledger_end_index == 0
    leader.close()
    follower.close()


def test_replicas_are_byte_identical(tmp_path, small_config):
    leader = _open(tmp_path / "a" / "dledger-n0", small_config)
    follower = _open(tmp_path / "b" / "dledger-n1", small_config)
    for i in range(150):
        leader.append_as_leader(os.urandom(1 + i * 3 % 200), 1 + i // 60)
    for e in leader.iter_entries():
        follower.append_as_follower(e)
    leader.close()
    follower.close()
    for sub in ("data", "index"):
        a = sorted((tmp_path / "a" / "dledger-n0" / sub).iterdir())
        b = sorted((tmp_path / "b" / "dledger-n1" / sub).iterdir())
        assert [p.name for p in a] == [p.name for p in b]
        assert all(x.read_bytes() == y.read_bytes() for x, y in zip(a, b, strict=True))


# -- raw (stored-bytes) replication ---------------------------------------------------------


def _raw_refusals(store, blob: bytes, first: int, pos: int, count: int) -> None:
    """Every kind of bad raw append is refused and leaves the store as it was."""
    end, end_term = store.ledger_end_index, store.ledger_end_term
    bad_crc = bytearray(blob)
    bad_crc[50] ^= 0xFF  # a body byte of the first entry (its CRC is recorded)
    bad_header_pos = oracle.encode_batch([b"abc"], first, 1, pos + 8)
    cases = [
        (blob, first + 1, pos, count),  # wrong first index
        (blob, first - 1, pos, count) if first > 0 else (blob, first + 5, pos, count),
        (blob, first, pos + 8, count),  # headers say another pos than the argument
        (bad_header_pos, first, pos + 8, 1),  # consistent, but it would not land there
        (bytes(bad_crc), first, pos, count),  # damaged body
        (blob[:-1], first, pos, count),  # torn last entry
        (blob[:30], first, pos, count),  # torn header
        (b"", first, pos, 0),
        (blob, first, pos, count + 1),  # says more entries than it holds
        (oracle.encode_batch([b"old"], first, 0, pos), first, pos, 1) if end_term > 0 else (blob[:-1], first, pos, 1),
    ]
    for data, f, p, c in cases:
        with pytest.raises(DLedgerError):
            store.append_raw_as_follower(data, f, p, c)
        assert (store.ledger_end_index, store.ledger_end_term) == (end, end_term)


def test_raw_append_refuses_anything_wrong_and_changes_nothing(any_store):
    bodies = [b"x" * (10 + k) for k in range(5)]
    blob = oracle.encode_batch(bodies, 0, 1, 0)
    _raw_refusals(any_store, blob, 0, 0, 5)
    assert any_store.append_raw_as_follower(blob, 0, 0, 5) == 4
    nxt_pos = len(blob)
    more = oracle.encode_batch([b"more", b"again"], 5, 2, nxt_pos)
    _raw_refusals(any_store, more, 5, nxt_pos, 2)
    assert any_store.append_raw_as_follower(more, 5, nxt_pos) == 6
    assert [any_store.get(i).body for i in range(7)] == [*bodies, b"more", b"again"]
    assert any_store.ledger_end_term == 2
    assert any_store.get(6).pos == nxt_pos + len(more) - (48 + 5)
    raw, pos, count = any_store.get_raw_range(0, 6, 1 << 20)
    assert (raw, pos, count) == (blob + more, 0, 7)
    assert any_store.get_raw_range(2, 3, 1 << 20)[1:] == (any_store.get(2).pos, 2)
    assert any_store.get_raw_range(2, 6, 1)[2] == 1  # at least one entry, whatever the budget


def test_raw_append_refuses_a_blob_crossing_a_data_file(tmp_path, small_config):
    store = _open(tmp_path / "n", small_config)
    first = oracle.encode_batch([b"a" * 2000], 0, 1, 0)
    store.append_raw_as_follower(first, 0, 0)
    crossing = oracle.encode_batch([b"b" * 1000, b"c" * 1000], 1, 1, len(first))
    with pytest.raises(DLedgerError) as exc:
        store.append_raw_as_follower(crossing, 1, len(first))
    assert exc.value.code == ResponseCode.DISK_ERROR
    assert store.ledger_end_index == 0 and len(store.data_files) == 1
    # The leader would have put them in the next file, after a blank record.
    moved = oracle.encode_batch([b"b" * 1000, b"c" * 1000], 1, 1, 4096)
    assert store.append_raw_as_follower(moved, 1, 4096) == 2
    assert store.get(2).body == b"c" * 1000 and len(store.data_files) == 2
    store.close()


def test_raw_replication_is_byte_identical_to_per_entry(tmp_path, small_config):
    """Leader blobs (split at data-file ends) appended raw give the same files as per-entry appends."""
    leader = _open(tmp_path / "a" / "dledger-n0", small_config)
    raw_follower = _open(tmp_path / "b" / "dledger-n0", small_config)
    entry_follower = _open(tmp_path / "c" / "dledger-n0", small_config)
    for i in range(200):
        leader.append_as_leader(os.urandom(1 + i * 7 % 300), 1 + i // 70)
    for e in leader.iter_entries():
        entry_follower.append_as_follower(e)
    first, frames = 0, 0
    while first <= leader.ledger_end_index:
        blob, pos, count = leader.get_raw_range(first, leader.ledger_end_index, 1500)
        assert blob == b"".join(leader.get_raw(i) for i in range(first, first + count))
        assert pos == leader.get(first).pos and (count == 1 or len(blob) <= 1500)
        # Within one data file: no blank record inside.
        assert pos // 4096 == (pos + len(blob) - 1) // 4096
        assert raw_follower.append_raw_as_follower(blob, first, pos, count) == first + count - 1
        first += count
        frames += 1
    assert frames > len(leader.data_files)
    for s in (leader, raw_follower, entry_follower):
        s.close()
    for sub in ("data", "index"):
        for other in ("b", "c"):
            a = sorted((tmp_path / "a" / "dledger-n0" / sub).iterdir())
            b = sorted((tmp_path / other / "dledger-n0" / sub).iterdir())
            assert [p.name for p in a] == [p.name for p in b]
            assert all(x.read_bytes() == y.read_bytes() for x, y in zip(a, b, strict=True))
    with _open(tmp_path / "b" / "dledger-n0", small_config) as again:
        assert again.ledger_end_index == 199 and again.recovery.index_rewritten_from == -1


def test_prefault_faults_pages_ahead_without_changing_a_byte(tmp_path):
    # The service faults in the pages past the write position off the appending thread
    # (DESIGN: no file work on the loop); the bytes there must stay what they were (zeros),
    # so recovery still sees the end of the log there.
    cfg = DLedgerConfig(mapped_file_size_for_entry_data=1 << 20, mapped_file_size_for_entry_index=64 << 10)
    node = tmp_path / "dledger-n0"
    store = MmapFileStore(node, cfg, start_services=False)
    for i in range(10):
        store.append_as_leader(b"x%d" % i, 1)
    done = store.prefault()
    if done == 0:
        pytest.skip("kernel without MADV_POPULATE_WRITE (Linux < 5.14)")
    assert store.prefault() == 0  # already as far ahead as it goes
    for i in range(10, 5000):
        store.append_as_leader(b"y%d" % i, 1)
    store.prefault()
    for files in (store._log.data, store._log.index):  # each last file ready up to its end
        last = files.files[-1]
        assert last.populated_to == last.file_size
    data_file = node / "data" / f"{0:020d}"
    end = store.get(4999).pos + store.get(4999).size
    store.close()
    assert not data_file.read_bytes()[end:].strip(b"\0")
    with MmapFileStore(node, cfg) as again:
        assert again.ledger_end_index == 4999 and again.get(4999).body == b"y4999"
        assert again.recovery.cut_entries == 0


def test_checkpoint_names_only_what_a_finished_flush_covered(tmp_path):
    # The service takes the end before the flush (appends do not take the store lock): a
    # checkpoint naming an entry appended during the flush would make a torn write of it
    # look like corruption at the next open.
    node = tmp_path / "dledger-n0"
    store = MmapFileStore(node, DLedgerConfig(), start_services=False)
    for i in range(10):
        store.append_as_leader(b"e%d" % i, 1)
    store.update_committed_index(1, 9)
    store.persist_checkpoint(5)
    assert read_properties(node / "checkpoint") == {"endIndex": "5", "committedIndex": "5"}
    store.checkpoint()
    assert read_properties(node / "checkpoint") == {"endIndex": "9", "committedIndex": "9"}
    store.close()


def test_retention_runs_while_every_flush_fails(tmp_path, small_config):
    # A flush that fails every tick (here its checkpoint cannot replace a directory; on a full
    # disk, ENOSPC) must not keep retention, which is what frees the disk, from running.
    hour = time.strftime("%H", time.localtime())
    cfg = small_config.replace(file_reserved_hours=1, delete_when=hour, check_point_interval=1)
    store = MmapFileStore(tmp_path / "n", cfg)
    try:
        for _i in range(300):
            store.append_as_leader(b"z" * 100, 1)
        files = store.data_files
        assert len(files) > 2
        (store.path / "checkpoint").unlink(missing_ok=True)
        (store.path / "checkpoint").mkdir()
        with pytest.raises(OSError):
            store.checkpoint()
        old = time.time() - 2 * 3600
        for p in files:
            os.utime(p, (old, old))
        deadline = time.monotonic() + 30
        while store.data_files != files[-1:] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert store.data_files == files[-1:]
    finally:
        (store.path / "checkpoint").rmdir()
        store.close()
