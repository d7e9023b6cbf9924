"""Crash consistency: torn tails, zeroed tails, damaged index files and flipped bits."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dledger.child_process import python_code
from dledger.errors import CorruptionError
from dledger.store.file import MmapFileStore
from dledger.store.properties import read_properties, write_properties
from dledger.store.verify import verify_store

N = 200
CHECKPOINT_AT = 120


def body(i: int) -> bytes:
    return f"entry-{i:05d}-".encode() * (1 + i % 5)


@pytest.fixture
def store_dir(tmp_path, small_config) -> Path:
    """N entries, flushed; the checkpoint vouches for the first CHECKPOINT_AT+1 of them, as if the
    process died after writing the rest but before its next checkpoint."""
    node = tmp_path / "dledger-n0"
    store = MmapFileStore(node, small_config, start_services=False)
    for i in range(N):
        store.append_as_leader(body(i), 1 + i // 50)
    store.update_committed_index(4, CHECKPOINT_AT)
    store.close()
    write_properties(node / "checkpoint", {"endIndex": CHECKPOINT_AT, "committedIndex": CHECKPOINT_AT})
    return node


def _open(node: Path, small_config, **kw) -> MmapFileStore:
    return MmapFileStore(node, small_config, start_services=False, **kw)


def _locate(node: Path, small_config, index: int) -> tuple[Path, int, int]:
    """(data file, offset in it, entry size) of entry ``index``."""
    with MmapFileStore(node, small_config, readonly=True) as s:
        pos, size = s.pos_and_size(index)
    size_of_file = small_config.mapped_file_size_for_entry_data
    start = pos - pos % size_of_file
    return node / "data" / f"{start:020d}", pos - start, size


def _patch(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def _assert_prefix(store: MmapFileStore, last: int) -> None:
    assert store.ledger_end_index == last
    for i in range(store.ledger_begin_index, last + 1):
        assert store.get(i).body == body(i)


def test_clean_reopen_keeps_everything(store_dir, small_config):
    with _open(store_dir, small_config) as s:
        _assert_prefix(s, N - 1)
        assert s.recovery.cut_entries == 0


def test_torn_last_entry_body_is_cut(store_dir, small_config, caplog):
    path, off, size = _locate(store_dir, small_config, N - 1)
    _patch(path, off + 48 + (size - 48) // 2, bytes(size - 48 - (size - 48) // 2))
    with caplog.at_level(logging.WARNING, logger="dledger.store.recovery"):
        with _open(store_dir, small_config) as s:
            _assert_prefix(s, N - 2)
            assert s.recovery.cut_file == str(path) and s.recovery.cut_offset == off
            assert s.recovery.cut_reason == "crc mismatch"
            # The cut tail is reusable: the next append lands where the torn one was.
            assert s.append_as_leader(b"after", 4).pos == s.get(N - 2).pos + s.get(N - 2).size
    assert str(path) in caplog.text and f"offset {off}" in caplog.text


def test_a_cut_torn_tail_is_zeroed_so_a_shorter_entry_over_it_reopens_clean(store_dir, small_config):
    # Recovery alone must wipe what it cuts: no store service runs here, so no pre-writer
    # writes zeros past the write position (which would hide a recovery that does not). An
    # entry appended over the torn one and shorter than it leaves the torn bytes just past
    # the log's end, and every later open would cut a "torn tail" off a clean log and
    # verify would call it damaged.
    path, off, size = _locate(store_dir, small_config, N - 1)
    _patch(path, off + 48 + (size - 48) // 2, bytes(size - 48 - (size - 48) // 2))
    with _open(store_dir, small_config) as s:
        assert s.recovery.cut_entries == 1
        assert s.append_as_leader(b"x", 4).pos == s.get(N - 2).pos + s.get(N - 2).size
    with _open(store_dir, small_config) as s:
        assert s.recovery.cut_entries == 0 and s.recovery.cut_file is None
        assert s.ledger_end_index == N - 1 and s.get(N - 1).body == b"x"
        assert [s.get(i).body for i in range(N - 1)] == [body(i) for i in range(N - 1)]
    assert verify_store(store_dir).ok


def test_torn_last_entry_header_is_cut(store_dir, small_config):
    path, off, _size = _locate(store_dir, small_config, N - 1)
    _patch(path, off + 8, bytes(40))
    with _open(store_dir, small_config) as s:
        _assert_prefix(s, N - 2)
        assert s.recovery.cut_reason == "bad header"


def test_zeroed_tail_is_a_clean_end(store_dir, small_config):
    path, off, _ = _locate(store_dir, small_config, N - 5)
    _patch(path, off, bytes(small_config.mapped_file_size_for_entry_data - off))
    for later in sorted((store_dir / "data").iterdir()):
        if later.name > path.name:
            later.unlink()
    with _open(store_dir, small_config) as s:
        _assert_prefix(s, N - 6)
        assert s.recovery.cut_entries == 0  # unwritten space is an end, not damage
    assert verify_store(store_dir).ok


def test_truncated_index_file_is_rebuilt(store_dir, small_config):
    last_index_file = sorted((store_dir / "index").iterdir())[-1]
    os.truncate(last_index_file, 100)  # cut mid-unit, as a crash during extension could
    with _open(store_dir, small_config) as s:
        _assert_prefix(s, N - 1)
        assert s.recovery.index_rewritten_from >= 0
    assert verify_store(store_dir).ok


def test_lost_index_files_are_rebuilt(store_dir, small_config):
    for p in (store_dir / "index").iterdir():
        p.unlink()
    with _open(store_dir, small_config) as s:
        _assert_prefix(s, N - 1)
    assert verify_store(store_dir).ok


def test_damaged_index_units_are_rewritten(store_dir, small_config):
    idx_size = small_config.mapped_file_size_for_entry_index
    target = 190 * 32
    path = store_dir / "index" / f"{target - target % idx_size:020d}"
    _patch(path, target % idx_size, b"\xff" * 32)
    with _open(store_dir, small_config) as s:
        assert s.recovery.index_rewritten_from == 190
        _assert_prefix(s, N - 1)


def test_flipped_bit_before_checkpoint_is_corruption(store_dir, small_config):
    path, off, _ = _locate(store_dir, small_config, 100)
    raw = bytearray(path.read_bytes())
    raw[off + 50] ^= 0x04
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptionError) as exc:
        _open(store_dir, small_config)
    err = exc.value
    assert (err.file, err.offset, err.index) == (str(path), off, 100)
    assert str(path) in str(err) and "entry 100" in str(err)
    # Nothing was changed by the refusal.
    assert path.read_bytes() == bytes(raw)
    with _open(store_dir, small_config, truncate_corrupt=True) as s:
        _assert_prefix(s, 99)


def test_flipped_header_bit_before_checkpoint_is_corruption(store_dir, small_config):
    # Recovery scans from the third-last data file on, as DLedger does; pick an entry there.
    path, off, _ = _locate(store_dir, small_config, 110)
    assert path in sorted((store_dir / "data").iterdir())[-3:]
    raw = bytearray(path.read_bytes())
    raw[off + 10] ^= 0x80  # the index field
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptionError) as exc:
        _open(store_dir, small_config)
    assert exc.value.index == 110


def test_flipped_bit_after_checkpoint_is_cut(store_dir, small_config):
    path, off, _ = _locate(store_dir, small_config, 150)
    raw = bytearray(path.read_bytes())
    raw[off + 49] ^= 0x01
    path.write_bytes(bytes(raw))
    with _open(store_dir, small_config) as s:
        _assert_prefix(s, 149)
        assert s.recovery.cut_entries >= 1
    props = read_properties(store_dir / "checkpoint")
    assert props is not None and props["endIndex"] == "149"


def test_verify_reports_each_problem(store_dir, small_config):
    path, off, _ = _locate(store_dir, small_config, 100)
    raw = bytearray(path.read_bytes())
    raw[off + 51] ^= 0x10
    path.write_bytes(bytes(raw))
    res = subprocess.run(
        [sys.executable, "-m", "dledger.cli", "verify", str(store_dir)], capture_output=True, text=True
    )
    assert res.returncode == 1
    lines = res.stdout.splitlines()
    assert any(str(path) in ln and f"offset {off}" in ln and "index 100" in ln for ln in lines), lines


WRITER = textwrap.dedent("""
    import sys
    from dledger.config import DLedgerConfig
    from dledger.store.file import MmapFileStore
    cfg = DLedgerConfig(mapped_file_size_for_entry_data=65536, mapped_file_size_for_entry_index=3200)
    s = MmapFileStore(sys.argv[1], cfg, start_services=False)
    i = s.ledger_end_index + 1
    while True:
        s.append_as_leader(f"entry-{i:05d}-".encode() * (1 + i % 5), 1)
        if i % 500 == 499:
            s.update_committed_index(1, i)
            s.checkpoint()
            print(i, flush=True)
        i += 1
""")


def test_kill_9_loses_nothing_checkpointed(tmp_path):
    node = tmp_path / "dledger-n0"
    proc = subprocess.Popen(python_code(WRITER, str(node), die_with_parent=True), stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        seen = 0
        assert proc.stdout is not None
        while seen < 3 and time.monotonic() < deadline:
            if proc.stdout.readline():
                seen += 1
        assert seen == 3, "writer made no progress"
        time.sleep(0.05)  # let it get part-way into the next batch
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    props = read_properties(node / "checkpoint")
    assert props is not None
    ckpt_end = int(props["endIndex"])
    assert ckpt_end >= 1499
    with MmapFileStore(node, start_services=False) as s:
        assert s.ledger_end_index >= ckpt_end
        assert s.committed_index >= 1499
        for i in range(0, s.ledger_end_index + 1):
            assert s.get(i).body == body(i)
    assert verify_store(node).ok


def test_index_tail_that_never_reached_the_disk_is_rebuilt(tmp_path, small_config):
    # An ack needs only the data msynced (flush_entries): the index units of the last
    # entries may be lost in a crash, and recovery must rebuild them from the data.
    node = tmp_path / "dledger-n0"
    store = MmapFileStore(node, small_config, start_services=False)
    for i in range(N):
        store.append_as_leader(body(i), 1)
    store.flush()
    for i in range(N, N + 30):
        store.append_as_leader(body(i), 1)
    store.flush_entries()
    store.close()
    idx_size = small_config.mapped_file_size_for_entry_index
    for i in range(N, N + 30):
        unit = i * 32
        _patch(node / "index" / f"{unit - unit % idx_size:020d}", unit % idx_size, bytes(32))
    with _open(node, small_config) as s:
        assert s.recovery.index_rewritten_from == N
        _assert_prefix(s, N + 29)
    assert verify_store(node).ok
