"""No per-entry Python objects are kept: the index file is the index."""

from __future__ import annotations

import tracemalloc

from dledger.config import DLedgerConfig
from dledger.store.file import MmapFileStore

ENTRIES = 10_000_000


def test_ten_million_appends_keep_the_heap_flat(tmp_path):
    cfg = DLedgerConfig(mapped_file_size_for_entry_data=256 << 20, mapped_file_size_for_entry_index=64 << 20)
    store = MmapFileStore(tmp_path / "dledger-n0", cfg, start_services=False)
    body = b"m"
    append = store.append
    try:
        append(body, 1)  # first file creation is not per-entry growth
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(ENTRIES - 1):
            append(body, 1)
        grown = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        assert store.ledger_end_index == ENTRIES - 1
        assert grown < 10 * 1024 * 1024, f"heap grew by {grown} bytes over {ENTRIES} appends"
        assert store.get(ENTRIES - 1).body == body
    finally:
        store.close()
