"""Dispatch reading the log ahead in a thread (when far behind) builds the same queues and index,
reads the log in order across files, and leaves no thread behind."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from dledger.rocketmq.store import dispatch
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.index_file import INDEX_HEADER_SIZE, ITEM_DTYPE
from dledger.rocketmq.store.message_store import MessageStore
from tests.test_store_writes import resident_pages

FILE = 256 * 1024


def _built(
    root: Path, dledger: bool, behind: int, monkeypatch: pytest.MonkeyPatch, reads: list[tuple[str, int, int]]
) -> dict[str, bytes]:
    read_range = dispatch._read_range

    def recorded(path: str, start: int, end: int) -> None:
        reads.append((path, start, end))
        read_range(path, start, end)

    with monkeypatch.context() as m:
        m.setattr(dispatch, "READ_AHEAD_BEHIND", behind)
        m.setattr(dispatch, "READ_AHEAD", 64 * 1024)
        m.setattr(dispatch, "READ_AHEAD_STEP", 16 * 1024)
        m.setattr(dispatch, "_read_range", recorded)
        cfg = MessageStoreConfig(
            enable_dledger_commit_log=dledger,
            mapped_file_size_commit_log=FILE,
            max_hash_slot_num=64,
            max_index_num=256,
        )
        s = MessageStore(root, cfg)
        s.reput.stop()
        for k in range(0, 3000, 100):
            r = s.put_batch(
                "T", [b"m" * 100] * 100, queue_id=k // 100 % 3, tags="A", keys=[f"k{i}" for i in range(k, k + 100)]
            )
            assert r.ok
        assert s.reput.dispatch_now() == 3000
        assert not [t for t in threading.enumerate() if t.name == "rocketmq-reput-readahead"]
        s.close()
    # Index file names carry their creation time: compared in order.
    out = {str(p.relative_to(root)): p.read_bytes() for p in sorted((root / "consumequeue").rglob("*")) if p.is_file()}
    for i, p in enumerate(sorted((root / "index").iterdir())):
        out[f"index/{i}"] = p.read_bytes()
    return out


@pytest.mark.parametrize("dledger", [False, True])
def test_read_ahead_builds_the_same_queues_and_index(
    tmp_path: Path, dledger: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[tuple[str, int, int]] = []
    a = _built(tmp_path / "a", dledger, 0, monkeypatch, reads)
    b = _built(tmp_path / "b", dledger, 1 << 40, monkeypatch, [])
    assert a.keys() == b.keys() and len(a) > 3
    for k in a:
        if k.startswith("index/"):  # UNIQ_KEY hashes and times differ run to run: the offsets do not
            ia = np.frombuffer(a[k], ITEM_DTYPE, offset=INDEX_HEADER_SIZE + 64 * 4)
            ib = np.frombuffer(b[k], ITEM_DTYPE, offset=INDEX_HEADER_SIZE + 64 * 4)
            assert ia["phy_offset"].tolist() == ib["phy_offset"].tolist(), k
            assert a[k][36:40] == b[k][36:40], k  # indexCount
        else:
            assert a[k] == b[k], k
    # The reader went through the log in order, file after file, a step at a time at most.
    files = sorted({Path(p) for p, _, _ in reads})
    assert len(files) >= 2, reads
    assert [Path(p) for p, _, _ in reads] == sorted(Path(p) for p, _, _ in reads)
    for p, start, end in reads:
        assert 0 <= start < end <= min(FILE, Path(p).stat().st_size)
        assert end - start <= 16 * 1024


def test_the_log_dispatch_has_still_to_read_is_not_handed_back(tmp_path: Path) -> None:
    """The DLedger log's store hands the page cache far behind its writer back to the kernel
    (data_cache_window), but not what dispatch has still to read: with dispatch stopped the log
    stays, and once dispatched, what is behind the window goes."""
    cfg = MessageStoreConfig(
        enable_dledger_commit_log=True,
        mapped_file_size_commit_log=64 << 20,
        dledger_store_options={"data_cache_window": 1 << 20},
    )
    s = MessageStore(tmp_path, cfg)
    s.reput.stop()
    for k in range(0, 40_000, 1000):
        assert s.put_batch("T", [b"m" * 300] * 1000, queue_id=0, keys=[f"k{i}" for i in range(k, k + 1000)]).ok
    log_store = s.commitlog.store
    log_store.flush()
    end = int(s.commitlog.readable_end)
    assert end > 12 << 20
    data_file = Path(s.commitlog.files.files[0].path)
    behind = end - (2 << 20)  # well behind the 1 MiB window
    cached = resident_pages(data_file, 0, behind)
    assert cached >= behind // 4096 * 3 // 4  # written: in the page cache
    # The store's service drops behind every tick too, so the page cache says what was handed
    # back, not the return value of one call.
    log_store.drop_behind()
    assert resident_pages(data_file, 0, behind) == cached  # nothing dispatched: all of it stayed
    assert s.reput.dispatch_now() == 40_000
    deadline = time.monotonic() + 10
    while resident_pages(data_file, 0, behind) >= cached // 4 and time.monotonic() < deadline:
        log_store.drop_behind()
        time.sleep(0.01)
    assert resident_pages(data_file, 0, behind) < cached // 4  # dispatched and behind the window: gone
    assert s.query_by_key("T", "k7")[0].body == b"m" * 300
    s.close()
