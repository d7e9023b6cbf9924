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

CHILD = r"""
import sys, threading
import numpy as np
from dledger.config import DLedgerConfig
from dledger.errors import DLedgerError
from dledger.store.file import MmapFileStore

root = sys.argv[1]
cfg = DLedgerConfig(mapped_file_size_for_entry_data=4 << 20, mapped_file_size_for_entry_index=32 << 20)
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

def producer():
    size = 48 + 1024
    while True:
        buf = bytearray(size * 32)
        offs = np.arange(0, len(buf) + 1, size, dtype=np.int64)
        with lock:  # the commit log's put lock
            try:
                store.append_framed_committed(buf, offs, 0)
                acked[0] += 32
            except DLedgerError as exc:
                codes[exc.code.name] = codes.get(exc.code.name, 0) + 1
                if codes[exc.code.name] >= 20:
                    return

pre = threading.Thread(target=prewriter)
pre.start()
threads = [threading.Thread(target=producer) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
stop.set()
pre.join()
print("acked", acked[0], "end", store.ledger_end_index, "codes", sorted(codes.items()), flush=True)
"""


def _run(cmd: list[str]) -> None:
    subprocess.run(cmd, check=True, capture_output=True, timeout=60)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 96 MiB ext4 file system mounted on a loop device, 32 MiB of it taken by a filler."""
    if os.geteuid() != 0 or not shutil.which("mkfs.ext4") or not shutil.which("mount"):
        pytest.skip("needs root and mkfs.ext4 to mount a small file system")
    image, mnt = tmp_path / "fs.img", tmp_path / "mnt"
    mnt.mkdir()
    with open(image, "wb") as f:
        f.truncate(96 << 20)
    _run(["mkfs.ext4", "-q", "-F", str(image)])
    try:
        _run(["mount", "-o", "loop", str(image), str(mnt)])
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot loop-mount here: {exc}")
    try:
        with open(mnt / "filler", "wb") as f:
            os.posix_fallocate(f.fileno(), 0, 32 << 20)
        yield mnt
    finally:
        _run(["umount", str(mnt)])


def test_full_disk_answers_disk_full_not_sigbus(small_fs: Path) -> None:
    root = small_fs / "store"
    proc = subprocess.run(
        python_code(CHILD, str(root)),
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
