"""ConsumeQueue / ConsumeQueueTable: RocketMQ 4.9.4's consume-queue files and rules."""

from __future__ import annotations

import ctypes
import hashlib
import mmap
import os
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dledger.rocketmq.store.consume_queue import INT_MAX, ConsumeQueue
from dledger.rocketmq.store.consume_queue_table import ConsumeQueueTable
from dledger.rocketmq.store.mapped_file import CQ_STORE_UNIT_SIZE

UNITS_PER_FILE = 10
FILE_SIZE = UNITS_PER_FILE * CQ_STORE_UNIT_SIZE


def unit_bytes(phys: int, size: int, tags: int) -> bytes:
    return struct.pack(">qiq", phys, size, tags)


def queue_dir(root: Path, topic: str = "T", qid: int = 0) -> Path:
    return root / "consumequeue" / topic / str(qid)


def snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def fill(cq: ConsumeQueue, first: int, count: int, size: int = 100) -> None:
    offs = np.arange(first, first + count, dtype=np.int64)
    cq.put_units(offs, offs * size, np.full(count, size, np.int32), offs + 7)


def test_units_are_20_byte_big_endian_records_in_files_named_by_start_offset(tmp_path: Path) -> None:
    cq = ConsumeQueue(tmp_path, "T", 0, FILE_SIZE)
    fill(cq, 0, 25)
    cq.flush()
    names = sorted(p.name for p in queue_dir(tmp_path).iterdir())
    assert names == ["00000000000000000000", "00000000000000000200", "00000000000000000400"]
    assert all((queue_dir(tmp_path) / n).stat().st_size == FILE_SIZE for n in names)
    second = (queue_dir(tmp_path) / names[1]).read_bytes()
    assert second == b"".join(unit_bytes(i * 100, 100, i + 7) for i in range(10, 20))
    third = (queue_dir(tmp_path) / names[2]).read_bytes()
    assert third[:100] == b"".join(unit_bytes(i * 100, 100, i + 7) for i in range(20, 25))
    assert third[100:] == bytes(100)
    assert (cq.min_offset, cq.max_offset, cq.max_physic_offset) == (0, 25, 2500)
    cq.close()


def test_reopen_recovers_the_end_and_reads_across_files(tmp_path: Path) -> None:
    cq = ConsumeQueue(tmp_path, "T", 0, FILE_SIZE)
    fill(cq, 0, 23)
    cq.close()
    cq = ConsumeQueue(tmp_path, "T", 0, FILE_SIZE)
    assert (cq.max_offset, cq.max_physic_offset, cq.last_offset()) == (23, 2300, 2300)
    phys, sizes, tags = cq.get_units(8, 5)
    assert phys.tolist() == [800, 900, 1000, 1100, 1200]
    assert sizes.tolist() == [100] * 5 and tags.tolist() == [15, 16, 17, 18, 19]
    assert cq.get_units(22, 32)[0].tolist() == [2200]
    assert len(cq.get_units(23, 32)[0]) == 0
    assert cq.get_unit(3) == (300, 100, 10)
    # Appends continue where the queue ended.
    fill(cq, 23, 2)
    assert cq.max_offset == 25
    assert [u[0] for u in cq.iter_units()] == list(range(25))
    cq.close()


def test_file_size_is_taken_from_existing_files(tmp_path: Path) -> None:
    cq = ConsumeQueue(tmp_path, "T", 0, FILE_SIZE)
    fill(cq, 0, 12)
    cq.close()
    cq = ConsumeQueue(tmp_path, "T", 0)  # the 6,000,000-byte default
    assert cq.file_size == FILE_SIZE and cq.max_offset == 12
    cq.close()


def test_first_unit_not_at_zero_pre_blanks_the_first_file(tmp_path: Path) -> None:
    cq = ConsumeQueue(tmp_path, "T", 0, FILE_SIZE)
    assert cq.put_units([13, 14], [5000, 5100], [100, 100], [1, 2]) == 2
    assert [p.name for p in queue_dir(tmp_path).iterdir()] == ["00000000000000000200"]
    data = (queue_dir(tmp_path) / "00000000000000000200").read_bytes()
    blank = unit_bytes(0, INT_MAX, 0)
    assert data[:60] == blank * 3
    assert data[60:100] == unit_bytes(5000, 100, 1) + unit_bytes(5100, 100, 2)
    assert (cq.min_offset, cq.max_offset) == (13, 15)
    assert len(cq.get_units(12, 5)[0]) == 0  # below the minimum
    assert cq.get_units(13, 5)[0].tolist() == [5000, 5100]
    cq.close()
    # After a restart the minimum comes back from correctMinOffset (DefaultMessageStore does it).
    cq = ConsumeQueue(tmp_path, "T", 0, FILE_SIZE)
    assert cq.max_offset == 15 and cq.max_physic_offset == 5200
    cq.correct_min_offset(4000)
    assert cq.min_offset == 13
    cq.close()


def test_repeated_builds_are_ignored(tmp_path: Path) -> None:
    cq = ConsumeQueue(tmp_path, "T", 0, FILE_SIZE)
    fill(cq, 0, 15)
    cq.flush()
    before = snapshot(tmp_path)
    offs = np.arange(0, 15, dtype=np.int64)
    # offset + size <= max_physic_offset: a message dispatched again.
    assert cq.put_units(offs, offs * 100, np.full(15, 100, np.int32), offs + 7) == 0
    assert cq.put_unit(3, 300, 100, 10)
    # A queue offset behind the end with a newer message is skipped too ("Build consume queue repeatedly").
    assert cq.put_units([4], [9000], [100], [0]) == 0
    cq.flush()
    assert snapshot(tmp_path) == before
    assert cq.max_offset == 15
    # Part old, part new: only the new ones go in.
    offs = np.arange(10, 20, dtype=np.int64)
    assert cq.put_units(offs, offs * 100, np.full(10, 100, np.int32), offs + 7) == 5
    assert cq.get_units(0, 100)[0].tolist() == [i * 100 for i in range(20)]
    cq.close()


def test_a_gap_in_queue_offsets_is_written_at_the_end(tmp_path: Path) -> None:
    # RocketMQ logs "[BUG]logic queue order maybe wrong" and appends at its current end.
    cq = ConsumeQueue(tmp_path, "T", 0, FILE_SIZE)
    fill(cq, 0, 3)
    assert cq.put_units([7], [900], [10], [0]) == 1
    assert cq.max_offset == 4
    assert cq.get_unit(3) == (900, 10, 0)
    cq.close()


def test_recovery_stops_at_the_first_invalid_unit_and_drops_the_rest(tmp_path: Path) -> None:
    cq = ConsumeQueue(tmp_path, "T", 0, FILE_SIZE)
    fill(cq, 0, 25)
    cq.close()
    path = queue_dir(tmp_path) / "00000000000000000200"
    data = bytearray(path.read_bytes())
    data[5 * 20 : 6 * 20] = unit_bytes(1500, 0, 0)  # a torn unit: size 0
    path.write_bytes(bytes(data))
    # Read-only: the end is found, nothing is written or deleted.
    before = snapshot(tmp_path)
    ro = ConsumeQueue(tmp_path, "T", 0, FILE_SIZE, readonly=True)
    assert (ro.max_offset, ro.max_physic_offset) == (15, 1500)
    assert ro.get_units(10, 100)[0].tolist() == [1000, 1100, 1200, 1300, 1400]
    ro.close()
    assert snapshot(tmp_path) == before
    # Writable: the file after is deleted and the tail zeroed, so it stays recovered.
    cq = ConsumeQueue(tmp_path, "T", 0, FILE_SIZE)
    assert cq.max_offset == 15
    cq.close()
    assert sorted(p.name for p in queue_dir(tmp_path).iterdir()) == ["00000000000000000000", "00000000000000000200"]
    assert path.read_bytes()[100:] == bytes(100)
    cq = ConsumeQueue(tmp_path, "T", 0, FILE_SIZE)
    fill(cq, 15, 2)
    assert cq.get_units(14, 5)[0].tolist() == [1400, 1500, 1600]
    cq.close()


def test_recovery_stops_at_a_unit_with_a_negative_offset(tmp_path: Path) -> None:
    # recoverNormally keeps a unit only when ``offset >= 0 && size > 0``: a garbled unit with a
    # sane size but a negative commit-log offset ends the queue too (a pull would otherwise
    # read it as a message at that offset).
    cq = ConsumeQueue(tmp_path, "T", 0, FILE_SIZE)
    fill(cq, 0, 18)
    cq.close()
    path = queue_dir(tmp_path) / "00000000000000000200"
    data = bytearray(path.read_bytes())
    data[4 * 20 : 5 * 20] = unit_bytes(-(1 << 40), 100, 0)
    path.write_bytes(bytes(data))
    cq = ConsumeQueue(tmp_path, "T", 0, FILE_SIZE)
    assert (cq.max_offset, cq.max_physic_offset) == (14, 1400)
    assert cq.get_units(10, 100)[0].tolist() == [1000, 1100, 1200, 1300]
    cq.close()


def test_truncate_dirty_drops_units_of_messages_at_or_after_an_offset(tmp_path: Path) -> None:
    cq = ConsumeQueue(tmp_path, "T", 0, FILE_SIZE)
    fill(cq, 0, 25)
    cq.truncate_dirty(1250)  # units 0..12 point before it
    assert (cq.max_offset, cq.max_physic_offset) == (13, 1300)
    assert [p.name for p in sorted(queue_dir(tmp_path).iterdir())] == ["00000000000000000000", "00000000000000000200"]
    cq.truncate_dirty(1000)  # exactly the start of the second file: it goes
    assert cq.max_offset == 10 and len(list(queue_dir(tmp_path).iterdir())) == 1
    fill(cq, 10, 3)
    cq.close()
    cq = ConsumeQueue(tmp_path, "T", 0, FILE_SIZE)
    assert cq.get_units(0, 100)[0].tolist() == [i * 100 for i in range(13)]
    cq.truncate_dirty(0)
    assert cq.max_offset == 0 and not list(queue_dir(tmp_path).iterdir())
    cq.close()


def test_truncated_units_do_not_come_back_after_reopen(tmp_path: Path) -> None:
    cq = ConsumeQueue(tmp_path, "T", 0, FILE_SIZE)
    fill(cq, 0, 8)
    cq.truncate_dirty(500)
    cq.close()
    cq = ConsumeQueue(tmp_path, "T", 0, FILE_SIZE)
    assert cq.max_offset == 5
    cq.close()


def test_delete_expired_removes_leading_files_and_corrects_the_minimum(tmp_path: Path) -> None:
    cq = ConsumeQueue(tmp_path, "T", 0, FILE_SIZE)
    fill(cq, 0, 35)
    assert cq.delete_expired(2150) == 2  # files 0 and 200 end before it; file 400 holds 2150's unit
    assert [p.name for p in sorted(queue_dir(tmp_path).iterdir())] == ["00000000000000000400", "00000000000000000600"]
    assert cq.min_offset == 22
    assert len(cq.get_units(21, 5)[0]) == 0
    assert cq.get_units(22, 2)[0].tolist() == [2200, 2300]
    # The last file is never deleted.
    assert cq.delete_expired(10**9) == 1
    assert [p.name for p in queue_dir(tmp_path).iterdir()] == ["00000000000000000600"]
    assert cq.max_offset == 35
    cq.close()


def resident_pages(path: Path) -> int:
    """How many of the file's pages are in the page cache (mincore over a mapping of it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    size = path.stat().st_size
    with open(path, "rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY) as m:
        pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        vec = (ctypes.c_ubyte * pages)()
        addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
        assert libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(size), vec) == 0, ctypes.get_errno()
        return sum(v & 1 for v in vec)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore and readahead as Linux has them")
def test_a_new_queue_file_takes_page_cache_only_for_what_is_written(tmp_path: Path) -> None:
    """A queue's first units fault in their own pages, not a readahead window of zeros (the
    whole 6 MB file where the disk reads ahead 8 MB)."""
    cq = ConsumeQueue(tmp_path, "T", 0)  # the default 6 MB files
    fill(cq, 0, 3)
    path = cq.files[-1].path
    cq.close()
    assert resident_pages(path) <= 2


def test_read_only_queue_never_writes(tmp_path: Path) -> None:
    cq = ConsumeQueue(tmp_path, "T", 0, FILE_SIZE)
    fill(cq, 0, 12)
    cq.close()
    (queue_dir(tmp_path) / ".00000000000000000400.creating").write_bytes(b"")
    before = snapshot(tmp_path)
    ro = ConsumeQueue(tmp_path, "T", 0, FILE_SIZE, readonly=True)
    with pytest.raises(PermissionError):
        ro.put_units([12], [1200], [100], [0])
    with pytest.raises(PermissionError):
        ro.truncate_dirty(0)
    with pytest.raises(PermissionError):
        ro.delete_expired(10**9)
    ro.flush()
    ro.close()
    assert snapshot(tmp_path) == before
    # A writable open removes the interrupted creation.
    ConsumeQueue(tmp_path, "T", 0, FILE_SIZE).close()
    assert not (queue_dir(tmp_path) / ".00000000000000000400.creating").exists()


def test_files_of_different_sizes_are_refused(tmp_path: Path) -> None:
    d = queue_dir(tmp_path)
    d.mkdir(parents=True)
    (d / "00000000000000000000").write_bytes(bytes(FILE_SIZE))
    (d / "00000000000000000200").write_bytes(bytes(FILE_SIZE + 20))
    with pytest.raises(ValueError, match="different sizes"):
        ConsumeQueue(tmp_path, "T", 0, FILE_SIZE)


def test_offset_for_timestamp_finds_the_nearest_message(tmp_path: Path) -> None:
    cq = ConsumeQueue(tmp_path, "T", 0, FILE_SIZE)
    fill(cq, 0, 8)
    store_ts = {i * 100: 1000 + i * 10 for i in range(8)}
    pick = lambda phys, size: store_ts[phys]  # noqa: E731
    os.utime(queue_dir(tmp_path) / "00000000000000000000", ns=(2 * 10**18, 2 * 10**18))
    assert cq.offset_for_timestamp(1030, pick, 0) == 3
    assert cq.offset_for_timestamp(1033, pick, 0) == 3
    assert cq.offset_for_timestamp(1037, pick, 0) == 4
    assert cq.offset_for_timestamp(0, pick, 0) == 0
    assert cq.offset_for_timestamp(10**6, pick, 0) == 7
    cq.close()


def test_table_dispatches_many_queues_and_lists_them_in_order(tmp_path: Path) -> None:
    table = ConsumeQueueTable(tmp_path, FILE_SIZE)
    topics = ["B", "A", "B", "A", "B", "A10"]
    qids = [1, 0, 1, 2, 10, 0]
    cq_offsets = [0, 0, 1, 0, 0, 0]
    phys = [0, 100, 200, 300, 400, 500]
    assert table.put_batch(topics, qids, cq_offsets, phys, [100] * 6, [0] * 6) == 6
    table.flush()
    table.close()
    table = ConsumeQueueTable(tmp_path, FILE_SIZE, readonly=True)
    table.load()
    assert [(t, q, cq.max_offset) for t, q, cq in table] == [
        ("A", 0, 1),
        ("A", 2, 1),
        ("A10", 0, 1),
        ("B", 1, 2),
        ("B", 10, 1),
    ]
    assert table.max_physic_offset() == 600
    assert table.get("C", 0) is None
    table.close()


class _Model:
    """What a consume queue must hold: units by queue offset, and the minimum offset."""

    def __init__(self, start: int) -> None:
        self.units: dict[int, tuple[int, int, int]] = {}
        self.min = start
        self.max = start
        # Above 0, so the pre-blank units (offset 0) are below every message.
        self.next_phys = 1000

    def put(self, sizes: list[int]) -> tuple[list[int], list[int], list[int], list[int]]:
        cq, phys, size, tags = [], [], [], []
        for s in sizes:
            cq.append(self.max)
            phys.append(self.next_phys)
            size.append(s)
            tags.append(self.max * 3)
            self.units[self.max] = (self.next_phys, s, self.max * 3)
            self.max += 1
            self.next_phys += s
        return cq, phys, size, tags

    def truncate(self, at: int) -> None:
        while self.max > self.min and self.units[self.max - 1][0] >= at:
            self.max -= 1
            del self.units[self.max]
        self.next_phys = (self.units[self.max - 1][0] + self.units[self.max - 1][1]) if self.max > self.min else at
        self.next_phys = max(self.next_phys, at)

    def delete_expired(self, min_phys: int) -> None:
        first_file = min(self.units) // UNITS_PER_FILE if self.units else 0
        last_file = (self.max - 1) // UNITS_PER_FILE
        f = first_file
        while f < last_file and self.units[f * UNITS_PER_FILE + UNITS_PER_FILE - 1][0] < min_phys:
            for o in range(f * UNITS_PER_FILE, (f + 1) * UNITS_PER_FILE):
                self.units.pop(o, None)
            f += 1
        hits = [
            o
            for o in range(f * UNITS_PER_FILE, min((f + 1) * UNITS_PER_FILE, self.max))
            if o in self.units and self.units[o][0] >= min_phys
        ]
        self.min = hits[0] if hits else min((f + 1) * UNITS_PER_FILE, self.max)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("put"), st.lists(st.integers(1, 40), min_size=1, max_size=25)),
            st.tuples(st.just("reopen"), st.just(0)),
            st.tuples(st.just("truncate"), st.integers(0, 100)),
            st.tuples(st.just("expire"), st.integers(0, 100)),
        ),
        max_size=12,
    ),
    start=st.integers(0, 35),
)
def test_random_operations_match_a_model(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, object]], start: int
) -> None:
    """Puts, reopens, truncations and expiry against a model, from a first queue offset that
    may need pre-blank units."""
    root = tmp_path_factory.mktemp("cq")
    model = _Model(start)
    put_any = False
    cq = ConsumeQueue(root, "T", 0, FILE_SIZE)
    try:
        for op, arg in ops:
            if op == "put":
                assert isinstance(arg, list)
                cq.put_units(*model.put(arg))
                put_any = True
            elif op == "reopen":
                cq.close()
                cq = ConsumeQueue(root, "T", 0, FILE_SIZE)
                if model.max > model.min:
                    cq.correct_min_offset(model.units[model.min][0])
                else:
                    cq.min_logic_offset = model.min * CQ_STORE_UNIT_SIZE
            elif op == "truncate" and model.max > model.min:
                # A point at or after the first live message, as a percentage of the live range.
                lo, hi = model.units[model.min][0], model.next_phys
                at = lo + (hi - lo) * int(str(arg)) // 100
                model.truncate(at)
                cq.truncate_dirty(at)
            elif op == "expire" and model.max > model.min:
                lo, hi = model.units[model.min][0], model.next_phys
                at = lo + (hi - lo) * int(str(arg)) // 100
                model.delete_expired(at)
                cq.delete_expired(at)
            if not put_any:
                continue
            # A queue whose files are all gone answers max 0, as RocketMQ's getMaxOffsetInQueue.
            want_max = 0 if model.max == model.min and not cq.files else model.max
            assert (cq.min_offset, cq.max_offset) == (model.min, want_max), op
            phys, sizes, tags = cq.get_units(model.min, 10**6)
            want = [model.units[o] for o in range(model.min, model.max)]
            assert list(zip(phys.tolist(), sizes.tolist(), tags.tolist(), strict=True)) == want, op
    finally:
        cq.close()


FIXTURES_MQ = Path(__file__).resolve().parents[1] / "fixtures" / "rocketmq-4.9"


@pytest.mark.parametrize("name", ["classic-3topics", "dledger-1node"])
def test_rebuilding_the_fixture_queues_gives_the_java_files_byte_for_byte(tmp_path: Path, name: str) -> None:
    root = FIXTURES_MQ / name
    rows = [ln.split("\t") for ln in (root / "expected" / "consumequeue.tsv").read_text().splitlines()[1:]]
    table = ConsumeQueueTable(tmp_path, 6000)
    # A few units at a time, as dispatch batches them.
    for start in range(0, len(rows), 7):
        chunk = rows[start : start + 7]
        table.put_batch(
            [r[0] for r in chunk],
            [int(r[1]) for r in chunk],
            [int(r[2]) for r in chunk],
            [int(r[3]) for r in chunk],
            [int(r[4]) for r in chunk],
            [int(r[5]) for r in chunk],
        )
    table.close()
    java = sorted(p.relative_to(root / "consumequeue") for p in (root / "consumequeue").rglob("*") if p.is_file())
    mine = sorted(
        p.relative_to(tmp_path / "consumequeue") for p in (tmp_path / "consumequeue").rglob("*") if p.is_file()
    )
    assert mine == java
    for rel in java:
        assert (tmp_path / "consumequeue" / rel).read_bytes() == (root / "consumequeue" / rel).read_bytes(), rel


def test_roll_next_file_is_the_first_offset_of_the_next_file(tmp_path: Path) -> None:
    # ConsumeQueue.rollNextFile: where a consumer goes on when its unit's file is gone.
    cq = ConsumeQueue(tmp_path, "T", 0, FILE_SIZE)
    per_file = FILE_SIZE // 20
    assert [cq.roll_next_file(i) for i in (0, 1, per_file - 1, per_file, 2 * per_file + 3)] == [
        per_file,
        per_file,
        per_file,
        2 * per_file,
        3 * per_file,
    ]
    cq.close()
