"""How entries reach the data files: through the file descriptor (pwritev), not the mapping.

What a caller relies on: a write the system refuses is an error, not a crash (a store through
a mapping gets SIGBUS instead), it leaves nothing that reads as an entry, and the store goes
on appending where it was.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import resource
import signal
import sys
from pathlib import Path

import pytest

from dledger.codes import ResponseCode
from dledger.config import DLedgerConfig
from dledger.errors import DLedgerError
from dledger.store.file import MmapFileStore
from dledger.testing import store_held

CFG = DLedgerConfig(mapped_file_size_for_entry_data=1 << 20, mapped_file_size_for_entry_index=64 << 10)


def _open(path: Path, cfg: DLedgerConfig = CFG) -> MmapFileStore:
    return MmapFileStore(path, cfg, start_services=False)


def _end_pos(store: MmapFileStore) -> int:
    last = store.get(store.ledger_end_index)
    return last.pos + last.size


def test_refused_write_is_an_error_leaves_no_entry_and_the_store_goes_on(tmp_path):
    node = tmp_path / "dledger-n0"
    store = _open(node)
    for i in range(10):
        store.append_as_leader(b"a%d" % i, 1)
    end = _end_pos(store)
    # The kernel refuses file writes past RLIMIT_FSIZE (EFBIG; SIGXFSZ ignored): the batch
    # below lands two entries and a part of the third, then fails.
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (end + 3000, hard))
    try:
        with pytest.raises(DLedgerError) as err:
            store.append_batch_as_leader([b"z" * 1024] * 10, 1)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)
    assert err.value.code == ResponseCode.DISK_ERROR
    assert "File too large" in str(err.value)
    assert store.ledger_end_index == 9
    data_file = node / "data" / f"{0:020d}"
    assert not data_file.read_bytes()[end:].strip(b"\0")  # what did land was zeroed again

    first, positions = store.append_batch_as_leader([b"b%d" % i for i in range(10)], 1)
    assert first == 10 and positions[0] == end
    store.close()
    with _open(node) as again:
        assert again.ledger_end_index == 19
        assert [again.get(i).body for i in range(10, 20)] == [b"b%d" % i for i in range(10)]
        assert again.recovery.cut_entries == 0


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_writing_a_long_log_holds_one_extra_descriptor(tmp_path):
    # Each mapping holds a descriptor of its own (Python's mmap); writes add one per file list
    # at most, not one per segment file.
    node = tmp_path / "dledger-n0"

    def held() -> int:
        n = 0
        for fd in os.listdir("/proc/self/fd"):
            try:
                n += os.readlink(f"/proc/self/fd/{fd}").startswith(str(node))
            except OSError:
                continue
        return n

    cfg = DLedgerConfig(mapped_file_size_for_entry_data=64 << 10, mapped_file_size_for_entry_index=4 << 10)
    store = _open(node, cfg)
    for _ in range(40):
        store.append_batch_as_leader([os.urandom(1000)] * 50, 1)
    mapped = len(store.data_files) + len(store.index_files)
    assert len(store.data_files) > 20
    assert mapped <= held() <= mapped + 2
    store.close()
    assert held() == 0
    with _open(node, cfg) as again:
        assert again.ledger_end_index == 1999


def test_data_pages_are_prefaulted_after_batches_and_single_appends(tmp_path):
    # Batches fill the page cache by pwritev, single entries through the mapping: either way the
    # service faults the data pages ahead in, off the appending thread (read-only for batches,
    # writable for single entries), without changing a byte. Read-only after batches where the
    # store asks for it (the embedded message store does).
    store = _open(tmp_path / "dledger-n0")
    store.populate_after_batches = True
    data = store._log.data
    store.append_batch_as_leader([b"b" * 1000] * 100, 1)
    if store.prefault() == 0:
        pytest.skip("kernel without MADV_POPULATE_WRITE (Linux < 5.14)")
    last = data.files[-1]
    assert last.populated_to > last.wrote_position
    framed_end = last.wrote_position
    for i in range(100):
        store.append_as_leader(b"s%d" % i, 1)
    store.prefault()
    assert last.populated_to > last.wrote_position
    end = last.wrote_position
    path = Path(last.path)
    store.close()
    raw = path.read_bytes()
    assert 0 < framed_end < end and not raw[end:].strip(b"\0")
    with _open(tmp_path / "dledger-n0") as again:
        assert again.ledger_end_index == 199 and again.get(199).body == b"s99"


def test_batch_prewrites_reach_as_far_as_the_writer_went_since_the_last_call(tmp_path):
    # A fast writer (1 KiB messages) used up the fixed distance between two ticks: the service
    # pre-writes twice what was written since its last call, never less than the fixed distance
    # and never past PREWRITE_AHEAD_MAX.
    from dledger.store import service

    cfg = DLedgerConfig(mapped_file_size_for_entry_data=1 << 30)
    store = _open(tmp_path / "dledger-n0", cfg)
    store.populate_after_batches = True

    def ahead() -> int:
        f = store._log.data.files[-1]
        return int(f.populated_to - f.wrote_position)

    store.append_batch_as_leader([b"b" * 1000] * 100, 1)  # ~100 KB: the fixed distance
    store.prefault()
    assert ahead() == service.PREFAULT_DATA_AHEAD
    chunk = [b"c" * 4000] * 1000
    for _ in range(3):  # ~12 MB since the last call
        store.append_batch_as_leader(chunk, 1)
    written = store._log.written_bytes
    store.prefault()
    assert ahead() == min(2 * written, service.PREWRITE_AHEAD_MAX) > service.PREFAULT_DATA_AHEAD
    for _ in range(12):  # ~48 MB: capped
        store.append_batch_as_leader(chunk, 1)
    store.prefault()
    assert ahead() == service.PREWRITE_AHEAD_MAX
    store.close()


def test_a_members_data_pages_are_not_prefaulted_after_batches(tmp_path):
    # By default (a group's member: batches of thousands) the pwrite fills the pages itself:
    # populating them ahead cost the service more than it saved the writer.
    store = _open(tmp_path / "dledger-n0")
    store.append_batch_as_leader([b"b" * 1000] * 100, 1)
    store.prefault()
    last = store._log.data.files[-1]
    assert last.populated_to == 0
    store.close()


# 64 MiB data files, and a 1 MiB page-cache window behind the flushed position.
WINDOW_CFG = DLedgerConfig(
    mapped_file_size_for_entry_data=64 << 20, mapped_file_size_for_entry_index=1 << 20, data_cache_window=1 << 20
)


def _window_store(tmp_path: Path, entries: int) -> tuple[MmapFileStore, Path]:
    """A store of WINDOW_CFG with ``entries`` random 1000-byte entries; and its first data file."""
    node = tmp_path / "dledger-n0"
    store = _open(node, WINDOW_CFG)
    store.append_batch_as_leader([os.urandom(1000) for _ in range(entries)], 1)
    return store, node / "data" / f"{0:020d}"


def resident_pages(path: Path, start: int, end: int) -> int:
    """How many pages of ``[start, end)`` of the file are in the page cache (mincore)."""
    libc = ctypes.CDLL(None, use_errno=True)
    page = mmap.PAGESIZE
    start -= start % page
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)  # writable view for ctypes; never written
        try:
            base = ctypes.addressof(ctypes.c_char.from_buffer(m))
            n = (end - start) // page
            vec = (ctypes.c_ubyte * n)()
            if libc.mincore(ctypes.c_void_p(base + start), ctypes.c_size_t(n * page), vec) != 0:
                pytest.skip(f"mincore: {os.strerror(ctypes.get_errno())}")
            resident = sum(v & 1 for v in vec)
            del vec
        finally:
            del base
            m.close()
    return resident


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore and fadvise semantics of Linux")
def test_flushed_data_behind_the_window_leaves_the_page_cache_and_still_reads(tmp_path):
    store, data_file = _window_store(tmp_path, 8000)  # ~8 MiB
    bodies = [store.get(i).body for i in range(8000)]
    assert store.drop_behind() == 0  # nothing is flushed yet: dirty pages are never handed back
    store.flush()
    end = _end_pos(store)
    before = resident_pages(data_file, 0, end // 4096 * 4096)
    advised = store.drop_behind()
    assert advised >= end - (1 << 20) - 4096
    after = resident_pages(data_file, 0, end // 4096 * 4096)
    # The advised pages left the cache (but for large folios the range ends cut through).
    assert before - after >= advised // 4096 * 3 // 4
    assert resident_pages(data_file, end - (1 << 20), end // 4096 * 4096) > 0  # the window stayed
    assert [store.get(i).body for i in range(0, 8000, 97)] == bodies[::97]  # read back from disk
    store.close()
    with _open(tmp_path / "dledger-n0", WINDOW_CFG) as again:
        assert again.ledger_end_index == 7999 and again.get(3).body == bodies[3]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore and fadvise semantics of Linux")
def test_reopening_leaves_the_page_cache_of_the_log_it_opens(tmp_path):
    # What the log held at the open is not handed back again: only data flushed after it, as it
    # falls behind the window (a reopen used to evict the whole log and unmap what recovery read).
    store, data_file = _window_store(tmp_path, 8000)  # ~8 MiB
    store.close()
    with open(data_file, "rb") as f:  # the log in the page cache, as a reader left it
        while f.read(1 << 20):
            pass
    store = _open(tmp_path / "dledger-n0", WINDOW_CFG)
    opened_end = _end_pos(store)
    head = (opened_end - (1 << 20)) // 4096 * 4096  # what was behind the window at the open
    before = resident_pages(data_file, 0, head)
    assert before > 0
    assert store.drop_behind() == 0
    assert resident_pages(data_file, 0, head) == before
    store.append_batch_as_leader([os.urandom(1000) for _ in range(6000)], 1)  # ~6 MiB more
    store.flush()
    end = _end_pos(store)
    advised = store.drop_behind()
    # From the window's start at the open to the window's start now, nothing before it.
    assert 0 < advised <= end - opened_end + 4096
    assert resident_pages(data_file, 0, head) == before
    store.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore and fadvise semantics of Linux")
def test_data_a_reader_has_still_to_read_stays_in_the_page_cache(tmp_path):
    # cache_keep_from (the message store's dispatch position) holds the drop-behind back: data
    # from there on is about to be read, and handing it back would make the reader read it
    # from disk. Once the reader moves on, the data behind it and the window goes.
    store, data_file = _window_store(tmp_path, 16000)  # ~16 MiB
    store.flush()
    end = _end_pos(store) // 4096 * 4096
    at = 6 << 20
    reader = [at]
    store.cache_keep_from = lambda: reader[0]
    unread = resident_pages(data_file, at, end)
    assert unread >= (end - at) // 4096 * 3 // 4  # written: in the cache
    advised = store.drop_behind()
    assert 0 < advised <= at
    assert resident_pages(data_file, at, end) == unread  # all of the unread part stayed
    reader[0] = end
    assert store.drop_behind() >= end - (1 << 20) - at - 4096  # the rest behind the window
    assert resident_pages(data_file, at, end - (1 << 20) - 4096) < unread // 4
    store.close()


def test_no_window_no_drop(tmp_path):
    store = _open(tmp_path / "dledger-n0", CFG.replace(data_cache_window=0))
    store.append_batch_as_leader([b"x" * 1000] * 8000, 1)
    store.flush()
    assert store.drop_behind() == 0
    store.close()


def test_a_segment_creation_cut_short_by_a_crash_leaves_nothing_in_the_way(tmp_path):
    # Segment files appear at full size or not at all (sized under a dot-name, then renamed):
    # a kill during the creation leaves only the dot-name, which the next open removes.
    # (An empty file under the real name used to make the next open refuse the directory.)
    node = tmp_path / "dledger-n0"
    cfg = DLedgerConfig(mapped_file_size_for_entry_data=64 << 10, mapped_file_size_for_entry_index=4 << 10)
    store = _open(node, cfg)
    store.append_batch_as_leader([b"x" * 1000] * 100, 1)
    store.close()
    names = sorted(p.name for p in (node / "data").iterdir())
    assert not [n for n in names if n.startswith(".")]
    next_start = int(names[-1]) + (64 << 10)
    leftover = node / "data" / f".{next_start:020d}.creating"
    leftover.write_bytes(b"")
    with _open(node, cfg) as again:
        assert again.ledger_end_index == 99
        again.append_batch_as_leader([b"y" * 1000] * 100, 1)  # creates that very segment
        assert again.get(199).body == b"y" * 1000
    assert not leftover.exists()
    assert {p.stat().st_size for p in (node / "data").iterdir()} == {64 << 10}


def test_a_flush_after_a_new_segment_makes_its_name_durable_first(tmp_path):
    # Creation may run on the event loop, so it does not fsync the directory; the next flush
    # does, before it reports any byte of the new file flushed.
    cfg = DLedgerConfig(mapped_file_size_for_entry_data=64 << 10, mapped_file_size_for_entry_index=4 << 10)
    store = _open(tmp_path / "dledger-n0", cfg)
    data = store._log.data
    store.append_batch_as_leader([b"x" * 1000] * 10, 1)
    assert data.new_names
    store.flush()
    assert not data.new_names
    store.append_batch_as_leader([b"x" * 1000] * 5, 1)  # same file: nothing new to name
    assert not data.new_names
    store.append_batch_as_leader([b"x" * 1000] * 100, 1)  # rolls over
    assert data.new_names
    store.flush()
    assert not data.new_names and not store._log.index.new_names
    store.close()


def test_a_flush_that_must_not_wait_leaves_a_busy_store_alone(tmp_path):
    # The node's loop flushes small writes itself but must not stall behind the store's own
    # service (a checkpoint holds the store while it msyncs everything): it is told "busy".
    store = _open(tmp_path / "dledger-n0")
    try:
        store.append(b"x" * 100, 1)
        pending = store.unflushed_entry_bytes()
        assert pending > 0
        with store_held(store):
            assert store.flush_entries(wait=False) is False
            assert store.unflushed_entry_bytes() == pending
        assert store.flush_entries(wait=False) is True
        assert store.unflushed_entry_bytes() == 0
    finally:
        store.close()


def test_blocks_are_allocated_just_ahead_of_the_writes_not_for_the_whole_file(tmp_path):
    # Appends allocate the data file's blocks a step ahead (ALLOCATE_AHEAD in _ext/segment.pyx:
    # ext4 then skips its per-page delayed allocation); a file of 64 MiB with 1 MiB in it must
    # not take 64 MiB of disk, which the disk-full and retention ratios would count.
    cfg = DLedgerConfig(mapped_file_size_for_entry_data=64 << 20, mapped_file_size_for_entry_index=64 << 10)
    store = _open(tmp_path / "dledger-n0", cfg)
    bodies = [os.urandom(1024) for _ in range(1000)]
    store.append_batch(bodies, 1)
    (data,) = sorted((tmp_path / "dledger-n0" / "data").iterdir())
    assert data.stat().st_size == 64 << 20
    allocated = data.stat().st_blocks * 512
    assert _end_pos(store) <= allocated <= _end_pos(store) + (8 << 20) + (1 << 20)
    store.close()
    with _open(tmp_path / "dledger-n0", cfg) as again:  # recovery checks every entry's CRC
        assert [again.get(i).body for i in range(1000)] == bodies
