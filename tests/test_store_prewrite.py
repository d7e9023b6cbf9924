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
    files = store._log.data.files
    assert len(files) > 1 and any(f.prewritten_to > f.wrote_position for f in files[-1:])
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
