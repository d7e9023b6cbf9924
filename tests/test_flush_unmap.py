"""A flush unmaps the whole pages it writes back before the msync (so that the msync need not
write-protect them one TLB shootdown each). What a caller relies on is unchanged: every byte
written, through the mapping or not, is on disk after the flush and reads back, and the file
takes writes to those pages again (a truncation's zeroing, a rewrite) as before."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

from dledger._ext import load as _load_ext
from dledger._ext import segment as _segment
from dledger.config import DLedgerConfig
from dledger.store.file import MmapFileStore

K = _load_ext("message")


def rss_kib(path: str | Path) -> int:
    """Resident KiB of this process's mappings of ``path`` (/proc/self/smaps)."""
    path = str(path)
    rss, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            if "-" in line.split(" ", 1)[0]:
                inside = line.rstrip().endswith(path)
            elif inside and line.startswith("Rss:"):
                rss += int(line.split()[1])
    return rss


def test_single_entries_through_the_mapping_survive_flushes_and_a_reopen(tmp_path: Path) -> None:
    cfg = DLedgerConfig(mapped_file_size_for_entry_data=1 << 20, mapped_file_size_for_entry_index=64 << 10)
    store = MmapFileStore(tmp_path / "n0", cfg, start_services=False)
    bodies = [os.urandom(37 + k % 500) for k in range(3000)]  # several data and index files
    for k, body in enumerate(bodies):
        store.append_as_leader(body, 1)
        if k % 200 == 199:
            store.flush()
            assert store.get(k).body == body  # read back through the mapping it unmapped
    store.close()
    with MmapFileStore(tmp_path / "n0", cfg, start_services=False) as again:
        assert again.ledger_end_index == len(bodies) - 1
        assert [again.get(k).body for k in range(len(bodies))] == bodies


def test_flush_unmaps_the_written_pages_and_keeps_their_bytes(tmp_path: Path) -> None:
    files = _segment.MmapFileList(str(tmp_path / "log"), 1 << 20, False)
    f = files.last_file(0, True)
    data = os.urandom(10 * 4096 + 100)
    f.append(data)
    f.view(0, len(data)).tobytes()  # mapped by a read
    before = rss_kib(f.path)
    f.flush()
    assert rss_kib(f.path) <= before - 40  # ten whole pages went; the last, partial one stays
    f.zero_range(4096, 8192)  # written again after the flush
    f.flush(0)
    f.close()
    raw = (tmp_path / "log" / f"{0:020d}").read_bytes()
    assert raw[: len(data)] == data[:4096] + bytes(4096) + data[8192:]


def test_sync_mapped_unmap_written_keeps_the_bytes(tmp_path: Path) -> None:
    path = tmp_path / "cq"
    path.write_bytes(bytes(1 << 16))
    with open(path, "r+b") as fh, mmap.mmap(fh.fileno(), 1 << 16) as m:
        units = os.urandom(5 * 4096 + 20)
        m[: len(units)] = units
        K.sync_mapped(m, 0, len(units), True)
        m[len(units) : len(units) + 20] = b"u" * 20  # the next unit, on the page kept mapped
        m[:20] = b"r" * 20  # and a rewrite of an unmapped page
        K.sync_mapped(m, 0, len(units) + 20, True)
    raw = path.read_bytes()
    assert raw[: len(units) + 20] == b"r" * 20 + units[20:] + b"u" * 20
