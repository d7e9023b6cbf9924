"""A full disk under 4 threads of framed batch appends: DISK_FULL, never SIGBUS.

The issue-40 bench died of "Fatal Python error: Bus error" in ``append_framed_committed``: on
a full disk a store through a data or index file's mapping faults (SIGBUS) where a pwrite
answers ENOSPC. Reproduced here on a small ext4 file system (a loop device; needs root, and is
skipped without it) that the appends fill: the writer must get DISK_FULL, and every entry it
was told was appended must be there after a reopen.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from dledger.child_process import python_code
from tests.rocketmq.loop_fs import small_fs as loop_fs

CHILD = r"""
import sys, threading
import numpy as np
from dledger.config import DLedgerConfig
from dledger.errors import DLedgerError
from dledger.store.file import MmapFileStore

root, mode = sys.argv[1], sys.argv[2]
# Single entries fill larger data files (their fallocate ahead fails first, then zeros by
# pwrite reserve the blocks: the stores through the mapping that died of SIGBUS came after).
data_size = (64 if mode == "single" else 4) << 20
cfg = DLedgerConfig(mapped_file_size_for_entry_data=data_size, mapped_file_size_for_entry_index=32 << 20)
# No service thread (its disk check would refuse appends before the disk is full); the
# pre-writer runs on a thread of its own, as the service would run it.
store = MmapFileStore(root, cfg, start_services=False)
store.populate_after_batches = True
lock = threading.Lock()
stop = threading.Event()
codes = {}
acked = [0]

def prewriter():
    while not stop.is_set():
        try:
            store.prefault()
        except DLedgerError:
            pass

def producer(k):
    size = 48 + 1024
    body = bytes(range(256)) * 4
    n = 0
    while True:
        n += 1
        buf = bytearray(size * 32)
        offs = np.arange(0, len(buf) + 1, size, dtype=np.int64)
        with lock:  # the commit log's put lock
            try:
                if mode == "single" and (k % 2 or n % 3):  # one entry a call: EntryLog._put
                    store.append(body, 0)
                    acked[0] += 1
                elif mode == "single":  # and a few batches between them
                    store.append_batch([body] * 8, 0)
                    acked[0] += 8
                else:
                    store.append_framed_committed(buf, offs, 0)
                    acked[0] += 32
            except DLedgerError as exc:
                codes[exc.code.name] = codes.get(exc.code.name, 0) + 1
                if codes[exc.code.name] >= 20:
                    return

pre = threading.Thread(target=prewriter)
pre.start()
threads = [threading.Thread(target=producer, args=(k,)) for k in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
stop.set()
pre.join()
print("acked", acked[0], "end", store.ledger_end_index, "codes", sorted(codes.items()), flush=True)
"""


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 96 MiB ext4 file system mounted on a loop device, 32 MiB of it taken by a filler."""
    with loop_fs(tmp_path) as mnt:
        with open(mnt / "filler", "wb") as f:
            os.posix_fallocate(f.fileno(), 0, 32 << 20)
        yield mnt


@pytest.mark.parametrize("mode", ["framed", "single"])
def test_full_disk_answers_disk_full_not_sigbus(small_fs: Path, mode: str) -> None:
    # Single entries through the mapping after the first ENOSPC died of SIGBUS in about half
    # the runs (8 of 16 measured; the framed batches in every run), and no trigger of it in one
    # run was found: ten runs, each a fresh process and store, so that the old behaviour
    # survives all of them about once in a thousand (with 4 runs it did 6% of the time).
    for run in range(10 if mode == "single" else 1):
        if run:
            shutil.rmtree(small_fs / "store")
        _fill_and_check(small_fs / "store", mode)


def _fill_and_check(root: Path, mode: str) -> None:
    proc = subprocess.run(
        python_code(CHILD, str(root), mode),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
    )
    assert proc.returncode != -signal.SIGBUS, f"the appends died of SIGBUS:\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = proc.stdout.strip().splitlines()[-1]
    assert "DISK_FULL" in line, line
    acked, end = int(line.split()[1]), int(line.split()[3])
    assert acked > 0 and end == acked - 1, line
    # Nothing acknowledged is lost: a reopen (read-only: the disk is still full) has them all.
    check = subprocess.run(
        python_code(
            "import sys\nfrom dledger.store.file import MmapFileStore\n"
            "s = MmapFileStore(sys.argv[1], readonly=True)\nprint(s.ledger_end_index)\n",
            str(root),
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stderr[-3000:]
    assert int(check.stdout.split()[-1]) == end


FILL = r"""
import errno, os

def fill(path):
    # Write until the file system has no block left (ENOSPC), in smaller and smaller writes.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    chunk = 1 << 20
    try:
        while chunk:
            try:
                os.write(fd, b"\1" * chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                chunk //= 2
    finally:
        os.close(fd)
"""

RAW_CHILD = (
    FILL
    + r"""
import sys
from dledger.config import DLedgerConfig
from dledger.errors import DLedgerError
from dledger.store.file import MmapFileStore

leader_dir, follower_dir, filler = sys.argv[1:4]
# Index files of 2048 units: the follower's units spill into a new one, which a full disk
# cannot give blocks, after the blob itself went into the data file's allocated blocks.
cfg = DLedgerConfig(mapped_file_size_for_entry_data=4 << 20, mapped_file_size_for_entry_index=64 << 10)
leader = MmapFileStore(leader_dir, cfg, start_services=False)
bodies = [os.urandom(100) for _ in range(2060)]
for b in bodies:
    leader.append(b, 1)
follower = MmapFileStore(follower_dir, cfg, start_services=False)

def ship(first, last):
    raw, pos, count = leader.get_raw_range(first, last, 1 << 20)
    assert count == last - first + 1, count
    return follower.append_raw_as_follower(raw, first, pos, count)

ship(0, 2039)
fill(filler)
try:
    ship(2040, 2059)
    print("appended on a full disk")
except DLedgerError as exc:
    print(exc.code.name)
assert follower.ledger_end_index == 2039, follower.ledger_end_index
os.unlink(filler)
ship(2040, 2059)  # the same entries again, now that there is room: they land where they belong
follower.close()
again = MmapFileStore(follower_dir, cfg, start_services=False)
assert again.ledger_end_index == 2059, again.ledger_end_index
assert [again.get(i).body for i in range(2060)] == bodies
print("ok")
"""
)


def test_a_follower_blob_refused_on_a_full_index_changes_nothing(small_fs: Path, tmp_path: Path) -> None:
    # append_raw must reserve its index units before writing the blob: otherwise the blob is
    # written, its units fail, and the retry finds the data end moved ("would land at").
    proc = subprocess.run(
        python_code(RAW_CHILD, str(tmp_path / "leader"), str(small_fs / "follower"), str(small_fs / "filler2")),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert proc.stdout.split() == ["DISK_FULL", "ok"], proc.stdout


CLOSE_CHILD = (
    FILL
    + r"""
import sys
from dledger.config import DLedgerConfig
from dledger.errors import DLedgerError
from dledger.store.file import MmapFileStore

root, filler = sys.argv[1:3]
cfg = DLedgerConfig(mapped_file_size_for_entry_data=4 << 20, mapped_file_size_for_entry_index=64 << 10)
store = MmapFileStore(root, cfg, start_services=False)
bodies = [os.urandom(100) for _ in range(500)]
for b in bodies:
    store.append(b, 1)
fill(filler)
try:
    store.close()
    print("closed")
except DLedgerError as exc:
    print(exc.code.name, "checkpoint" in str(exc))
assert store._log.data.files[0].closed and store._log.index.files[0].closed
assert not os.path.exists(os.path.join(root, "checkpoint.tmp"))
store.close()  # closed: nothing more to do, nothing raised
os.unlink(filler)
again = MmapFileStore(root, cfg, start_services=False)
assert [again.get(i).body for i in range(500)] == bodies and again.ledger_end_index == 499
print("ok")
"""
)


def test_close_on_a_full_disk_closes_and_says_the_checkpoint_was_not_written(small_fs: Path) -> None:
    proc = subprocess.run(
        python_code(CLOSE_CHILD, str(small_fs / "store"), str(small_fs / "filler2")),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert proc.stdout.split() == ["DISK_FULL", "True", "ok"], proc.stdout
