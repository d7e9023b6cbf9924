"""Pre-faulting mapped files for dispatch: the kernel changes no byte, and an index file whose
item pages are faulted in ahead of its puts ends up byte for byte as one that was not."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dledger._ext import load
from dledger.rocketmq.store import index_file, mapped_file
from dledger.rocketmq.store.consume_queue import ConsumeQueue
from dledger.rocketmq.store.index_file import IndexFile
from dledger.rocketmq.store.mapped_file import CQ_STORE_UNIT_SIZE

K = load("message")
HOWS = [K.PREFAULT_READ, K.PREFAULT_WRITE, K.PREFAULT_WILLNEED]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.binary(min_size=1, max_size=3 * 4096 + 17),
    start=st.integers(-5, 20_000),
    end=st.integers(-1, 20_000),
    how=st.sampled_from(HOWS),
)
def test_prefault_changes_no_byte(tmp_path: Path, data: bytes, start: int, end: int, how: int) -> None:
    p = tmp_path / "f"
    p.write_bytes(data)
    with open(p, "r+b") as f:
        mm = mmap.mmap(f.fileno(), len(data))
        try:
            assert K.prefault(mm, start, end, how) == 0
            # A view that starts inside a page: its page is advised from its start.
            assert K.prefault(memoryview(mm)[len(data) // 2 :], 0, -1, how) == 0
            assert mm[:] == data
        finally:
            mm.close()
    assert p.read_bytes() == data


def test_prefault_of_a_read_only_buffer_and_an_empty_range() -> None:
    buf = bytes(10_000)
    assert K.prefault(buf, 0, -1, K.PREFAULT_READ) == 0
    assert K.prefault(buf, 50, 50, K.PREFAULT_WRITE) == 0


def _fill(path: Path, n: int, chunk: int | None, monkeypatch: pytest.MonkeyPatch) -> bytes:
    with monkeypatch.context() as m:
        if chunk is None:
            m.setattr(IndexFile, "_prefault_from", lambda self, start: None)
        else:
            m.setattr(index_file, "PREFAULT_CHUNK", chunk)
        f = IndexFile(path, 97, n + 1, create=True)
        rng = np.random.default_rng(n)
        done = 0
        while done < n:
            k = int(rng.integers(1, 200))
            h = rng.integers(0, 2**31, k).astype(np.int32)
            phys = np.arange(done, done + k, dtype=np.int64) * 100
            ts = 1_795_421_951_105 + np.arange(done, done + k, dtype=np.int64) * 7
            done += f.put_hashes(h, phys, ts)
        f.close()
    return path.read_bytes()


@pytest.mark.parametrize("chunk", [4096, 3 * 4096 + 20, 1 << 20])
def test_index_file_puts_with_pages_faulted_ahead_give_the_same_bytes(
    tmp_path: Path, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = 5000
    assert _fill(tmp_path / "a", n, chunk, monkeypatch) == _fill(tmp_path / "b", n, None, monkeypatch)


def _queue_bytes(root: Path, prefault: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    with monkeypatch.context() as m:
        m.setattr(mapped_file, "PREFAULT_MIN_WRITE", 1 if prefault else 1 << 40)
        q = ConsumeQueue(root, "T", 0, file_size=CQ_STORE_UNIT_SIZE * 3000)
        rng = np.random.default_rng(3)
        off = 0
        while off < 10_000:
            k = int(rng.integers(1, 1500))
            q.put_units(
                np.arange(off, off + k), np.arange(off, off + k) * 300 + 7, np.full(k, 300), rng.integers(0, 2**40, k)
            )
            off += k
        q.close()
    return {p.name: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_consume_queue_units_with_pages_faulted_ahead_give_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = _queue_bytes(tmp_path / "a", True, monkeypatch)
    assert a == _queue_bytes(tmp_path / "b", False, monkeypatch)
    assert len(a) == 4


@given(size=st.integers(0, 2 * 4096), pos=st.integers(-3, 2 * 4096 + 3), src=st.binary(max_size=4096 + 5))
def test_copy_into_is_a_slice_assignment_with_bounds(size: int, pos: int, src: bytes) -> None:
    """copy_into (the consume queue's write, without the GIL) writes what a slice assignment
    would, into a file mapping or an ndarray, and refuses what would not fit."""
    m = mmap.mmap(-1, max(size, 1))
    want = bytearray(m)
    fits = 0 <= pos and pos + len(src) <= len(m)
    if fits:
        want[pos : pos + len(src)] = src
        K.copy_into(m, pos, np.frombuffer(src, dtype=np.uint8))
    else:
        with pytest.raises(ValueError):
            K.copy_into(m, pos, src)
    assert m[:] == bytes(want)
    with pytest.raises(BufferError):
        K.copy_into(bytes(8), 0, b"x")


@given(
    src=st.binary(max_size=600),
    runs=st.lists(
        st.tuples(st.integers(0, 2), st.integers(-2, 300), st.integers(-2, 620), st.integers(-1, 120)), max_size=6
    ),
)
def test_copy_runs_is_slice_assignments_or_nothing(src: bytes, runs: list[tuple[int, int, int, int]]) -> None:
    """copy_runs (a dispatch round's runs into their queues' files, one release of the GIL)
    writes what the slice assignments would, in order, or, when any range does not fit its
    destination or its source, raises before writing anything."""
    maps = [mmap.mmap(-1, size) for size in (64, 256, 300)]
    want = [bytearray(m) for m in maps]
    fits = all(
        0 <= n and 0 <= pos and pos + n <= len(maps[d]) and 0 <= at and at + n <= len(src) for d, pos, at, n in runs
    )
    args = [(maps[d], pos, at, n) for d, pos, at, n in runs]
    if fits:
        for d, pos, at, n in runs:
            want[d][pos : pos + n] = src[at : at + n]
        K.copy_runs(np.frombuffer(src, dtype=np.uint8), args)
    else:
        with pytest.raises(ValueError):
            K.copy_runs(src, args)
    assert [m[:] for m in maps] == [bytes(w) for w in want]


@pytest.mark.parametrize("queues", [1, 3])
def test_dispatch_faults_pages_ahead_in_without_starting_threads(tmp_path: Path, queues: int) -> None:
    """Dispatch keeps the pages ahead of a busy queue's units and of the index's items faulted
    in through its own kernel calls: a prefault thread started from a round costs the round GIL
    hand-overs with the putting thread."""
    from dledger.rocketmq.store.config import MessageStoreConfig
    from dledger.rocketmq.store.message_store import MessageStore

    cfg = MessageStoreConfig(enable_dledger_commit_log=True, mapped_file_size_commit_log=64 << 20)
    with MessageStore(tmp_path, cfg) as s:
        s.reput.stop()  # rounds run here, as the service runs them
        for _ in range(6):
            for q in range(queues):
                assert s.put_batch("T", [b"x" * 40] * 2000, queue_id=q).ok
            s.reput.dispatch_now(max_batches=1, to_end=False)
        s.reput.dispatch_now()
        for q in range(queues):
            cq = s.consume_queues.get("T", q)
            assert cq is not None
            f = cq.files[-1]
            assert f._prefaulter is None
            assert f._prefaulted_to > f.wrote_position
        last = s.index_service.files[-1]
        assert last._prefaulted_to > last._item_pos(last.index_count)
        got = s.get_messages("T", queues - 1, 11990, 32).messages
        assert [m.queue_offset for m in got] == list(range(11990, 12000))
