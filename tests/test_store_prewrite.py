"""Pre-writing zeros ahead of the writer (MappedFile.prewrite): what makes it safe.

The store service (and the classic commit log's prefault thread) writes zeros just past the
write position so that the writer's pwrites land in pages already made. A caller relies on
one thing: no zero ever lands on a byte a writer wrote, whichever thread runs when. Writers
to a file of a guarded list take the write guard when they reach past ``prewritten_to``.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from dledger._ext import segment as _segment
from dledger.config import DLedgerConfig
from dledger.rocketmq.store import commitlog
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.message_store import MessageStore
from dledger.store.file import MmapFileStore
from tests.test_store_framed import frame

SIZE = 1 << 22


def _file(path: Path, guarded: bool = True) -> _segment.MappedFile:
    files = _segment.MmapFileList(str(path), SIZE, False, guarded=guarded)
    return files.last_file(0, True)


def test_prewrite_writes_zeros_past_the_written_bytes_only(tmp_path: Path) -> None:
    f = _file(tmp_path / "log")
    data = os.urandom(10_000)
    assert f.append(data) == 0
    # Asked to start inside what was written, it starts at the write position.
    assert f.prewrite(0, 20_000) == 10_000
    assert f.prewritten_to == 20_000 and f.populated_to == 20_000
    # Nothing below prewritten_to is written again; a range there writes nothing.
    assert f.prewrite(15_000, 18_000) == 0
    # The end is clipped to the file.
    assert f.prewrite(SIZE - 100, SIZE + 100) == 100
    assert f.prewritten_to == SIZE
    more = os.urandom(5_000)
    assert f.append(more) == 10_000
    f.close()
    raw = (tmp_path / "log" / f"{0:020d}").read_bytes()
    assert raw[:15_000] == data + more and not raw[15_000:].strip(b"\0")


def test_one_prewrite_makes_the_whole_range(tmp_path: Path) -> None:
    # It writes a chunk at a time under the write guard, but one call covers the range: the
    # prefault threads ask for megabytes a call and look again only a tick later.
    f = _file(tmp_path / "log")
    data = os.urandom(1000)
    f.append(data)
    assert f.prewrite(0, 3 << 20) == (3 << 20) - 1000
    assert f.prewritten_to == 3 << 20
    f.close()
    raw = (tmp_path / "log" / f"{0:020d}").read_bytes()
    assert raw[:1000] == data and not raw[1000:].strip(b"\0")


def test_prewrite_needs_a_guarded_file(tmp_path: Path) -> None:
    f = _file(tmp_path / "log", guarded=False)
    with pytest.raises(ValueError, match="guarded"):
        f.prewrite(0, 4096)
    f.close()


def test_a_write_past_prewritten_to_moves_it(tmp_path: Path) -> None:
    # A writer that reaches past what was pre-written takes the guard and moves prewritten_to
    # to its end, so that a later pre-write starts there, not below.
    f = _file(tmp_path / "log")
    f.prewrite(0, 4096)
    assert f.append(os.urandom(8192)) == 0
    assert f.prewritten_to == 8192
    assert f.prewrite(0, 12_288) == 4096
    f.zero_range(8192, 16_384)  # a truncation's zeroing is a write too
    assert f.prewritten_to == 16_384
    f.close()


def test_concurrent_prewrites_never_land_on_written_bytes(tmp_path: Path) -> None:
    # A thread pre-writes just past the write position as fast as it can, without the GIL for
    # its writes, while this one appends writes of every size (small ones with the GIL, large
    # ones without). Every appended byte must read back.
    f = _file(tmp_path / "log")
    stop = threading.Event()
    rounds = [0]

    def prewriter() -> None:
        while not stop.is_set():
            at = f.wrote_position
            f.prewrite(at, at + (64 << 10))
            rounds[0] += 1

    t = threading.Thread(target=prewriter, daemon=True)
    t.start()
    written = bytearray()
    deadline = time.monotonic() + 2.0
    sizes = [1, 7, 100, 4095, 4096, 9728, 70_000]
    k = 0
    try:
        while time.monotonic() < deadline and f.remaining > 80_000:
            chunk = os.urandom(sizes[k % len(sizes)])
            assert f.append(chunk, k % 3 == 0) >= 0
            written += chunk
            k += 1
    finally:
        stop.set()
        t.join(10)
    assert rounds[0] > 10 and k > 10
    end = len(written)
    f.close()
    raw = (tmp_path / "log" / f"{0:020d}").read_bytes()
    assert raw[:end] == bytes(written) and not raw[end:].strip(b"\0")


def test_store_appends_read_back_beside_a_prewriter(tmp_path: Path) -> None:
    # The same through the store: batches (append_batch, and framed ones as the DLedger commit
    # log's put hands them, with and without the GIL) and single entries, while the store
    # service pre-writes ahead (populate_after_batches, as the embedded message store asks).
    # Writes below the pre-written mark go through the mapping, the rest by pwritev. Every
    # entry reads back after a reopen, which checks each entry's CRC, and from the file itself.
    cfg = DLedgerConfig(mapped_file_size_for_entry_data=SIZE, flush_file_interval=1)
    store = MmapFileStore(tmp_path / "dledger-n0", cfg)
    store.populate_after_batches = True
    bodies: list[bytes] = []
    deadline = time.monotonic() + 2.0
    k = 0
    # Whether the pre-writer was ahead of the writer while we wrote (so writes went through the
    # mapping): looked at after every write, since on a loaded machine the service thread may
    # be behind at any one instant, the end included.
    ahead = False
    while time.monotonic() < deadline and len(bodies) < 20_000:
        batch = [os.urandom(50 + (k + j) % 500) for j in range(1 + k % 40)]
        if k % 4 == 3:
            store.append_as_leader(batch[0], 1)
            del batch[1:]
        elif k % 4 == 2:
            store.append_batch(batch, 1)
        elif k % 4 == 1:
            store.append_framed_committed(*frame(batch), 1)
        else:
            store.append_framed(*frame(batch), 1)
        bodies.extend(batch)
        k += 1
        last = store._log.data.files[-1]
        ahead = ahead or last.prewritten_to > last.wrote_position
    assert len(store._log.data.files) > 1 and ahead
    store.close()
    with MmapFileStore(tmp_path / "dledger-n0", cfg, start_services=False) as again:
        assert again.ledger_end_index == len(bodies) - 1
        for i in range(0, len(bodies), 97):
            assert again.get(i).body == bodies[i]
        assert again.get(len(bodies) - 1).body == bodies[-1]
        # The data files' bytes as read(2) sees them: each body after its 48-byte header.
        data = b"".join(p.read_bytes() for p in sorted((tmp_path / "dledger-n0" / "data").iterdir()))
        for i in range(0, len(bodies), 89):
            pos = again.get(i).pos
            assert data[pos + 48 : pos + 48 + len(bodies[i])] == bodies[i]


def test_on_create_is_called_with_each_file_the_list_creates(tmp_path: Path) -> None:
    files = _segment.MmapFileList(str(tmp_path), SIZE, False, guarded=True)
    made: list[_segment.MappedFile] = []
    files.on_create = made.append
    first = files.last_file(0, True)
    assert made == [first]
    assert files.last_file(0, True) is first and made == [first]  # not full: no new file
    first.fill_blank()
    second = files.last_file(0, True)
    assert second is not first and made == [first, second]
    assert second.file_from_offset == SIZE


@pytest.mark.parametrize("mode", ["classic", "dledger"])
def test_a_new_stores_first_file_is_prewritten_without_waiting_for_a_look(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    # The put that creates the commit log's first file wakes its pre-writer: the pages ahead of
    # the next puts are made at once, not at the thread's next look (here set 60 s away, which
    # would fail the wait below), while puts meanwhile go by pwrite under the write guard.
    monkeypatch.setattr(commitlog, "PREFAULT_POLL_S", 60.0)
    monkeypatch.setattr(commitlog, "PREFAULT_IDLE_S", 60.0)
    cfg = MessageStoreConfig(
        enable_dledger_commit_log=mode == "dledger",
        dledger_store_options={"flush_file_interval": 60_000},
    )
    s = MessageStore(tmp_path / "store", cfg)
    try:
        time.sleep(0.1)  # the services' first looks, which find no file
        assert s.put_batch("TopicA", [b"x" * 100] * 32).ok
        data = s.commitlog.store._log.data if mode == "dledger" else s.commitlog.files
        f = data.files[-1]
        deadline = time.monotonic() + 10
        while f.prewritten_to < f.wrote_position + (1 << 20) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert f.prewritten_to >= f.wrote_position + (1 << 20)
        assert s.put_batch("TopicA", [b"y" * 100] * 32).ok
        assert s.wait_dispatched(10)
        got = s.get_messages("TopicA", 0, 0, 64)
        assert [m.body for m in got.messages] == [b"x" * 100] * 32 + [b"y" * 100] * 32
    finally:
        s.close()
