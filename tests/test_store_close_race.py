"""What another thread may do to a segment file while a write or pre-write runs on it.

The store service pre-writes zeros ahead of the writer without the GIL; the writer closes a
full file's write descriptor at a roll-over (``release_fd``), and ``close`` unmaps the files.
A caller relies on: zeros only ever land in the segment file, whatever number the writer's
descriptor has by then; and closing a store under an append neither crashes the process nor
loses an append that returned.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import NamedTuple

import pytest

from dledger._ext import segment as _segment
from dledger.child_process import python_code


def _wait_for_first_chunk(f: _segment.MappedFile) -> None:
    deadline = time.monotonic() + 30
    while f.prewritten_to == 0:
        assert time.monotonic() < deadline, "the pre-write never started"


def _descriptors_of(path: Path) -> set[int]:
    out = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") == str(path):
                out.add(int(name))
        except OSError:
            continue  # the listing's own descriptor, gone by now
    return out


class _SegmentBesideAnother(NamedTuple):
    f: _segment.MappedFile
    path: Path  # f's file
    number: int  # f's write descriptor
    other: Path
    mine: bytes  # other's bytes, which must stay
    other_fd: int  # other, open read-write


def _segment_beside_another(tmp_path: Path, size: int, head: bytes, mine: bytes) -> _SegmentBesideAnother:
    """A segment file of ``size`` holding ``head`` (which opens its write descriptor), and an
    unrelated file holding ``mine``, open, whose descriptor a test can put on that number."""
    files = _segment.MmapFileList(str(tmp_path / "log"), size, False, guarded=True)
    f = files.last_file(0, True)
    path = tmp_path / "log" / f"{0:020d}"
    before = _descriptors_of(path)
    f.append(head)
    (number,) = _descriptors_of(path) - before
    other = tmp_path / "other"
    other.write_bytes(mine)
    return _SegmentBesideAnother(f, path, number, other, mine, os.open(other, os.O_RDWR))


def _run_ok(cmd: list[str], on_sigsegv: str) -> None:
    """Runs a child script that prints "ok" when every check in it held: a crash there is a
    SIGSEGV (named ``on_sigsegv``), not this test process's."""
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONFAULTHANDLER": "1"}
    )
    assert proc.returncode != -signal.SIGSEGV, f"{on_sigsegv}:\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "ok"


def test_a_prewrite_never_writes_through_a_descriptor_number_closed_under_it(tmp_path: Path) -> None:
    # A large range keeps the pre-writer busy (a chunk of zeros at a time, without the GIL)
    # long after its first chunk, which is when the write descriptor's number is closed and
    # taken by another file (dup2 does both at once, as a roll-over's release_fd and an open()
    # on another thread can). The other file must keep its bytes.
    size = 128 << 20
    f, path, number, other, mine, other_fd = _segment_beside_another(tmp_path, size, b"x" * 100, b"\xab" * (4 << 20))
    t = threading.Thread(target=f.prewrite, args=(0, size))
    t.start()
    try:
        _wait_for_first_chunk(f)
        os.dup2(other_fd, number)
        at_swap = f.prewritten_to
    finally:
        t.join(60)
    os.close(other_fd)
    assert at_swap < size // 2, "the pre-write ended before the swap: nothing was tested"
    assert f.prewritten_to == size  # it went on, into its own file
    assert other.read_bytes() == mine
    f.close()  # closes the number, which is the other file's now: the test's own doing
    raw = path.read_bytes()
    assert raw[:100] == b"x" * 100 and not raw[100:].strip(b"\0")


def test_release_fd_leaves_the_prewriters_descriptor_open(tmp_path: Path) -> None:
    # The roll-over's release_fd while a pre-write runs: the pre-write still ends its range.
    size = 64 << 20
    files = _segment.MmapFileList(str(tmp_path / "log"), size, False, guarded=True)
    f = files.last_file(0, True)
    f.append(b"y" * 10)
    t = threading.Thread(target=f.prewrite, args=(0, size))
    t.start()
    try:
        _wait_for_first_chunk(f)
        f.release_fd()
    finally:
        t.join(60)
    assert f.prewritten_to == size
    f.close()


CLOSE_UNDER_APPENDS = r"""
import os, sys, threading, time
from dledger.config import DLedgerConfig
from dledger.errors import DLedgerError
from dledger.store.file import MmapFileStore

root = sys.argv[1]
cfg = DLedgerConfig(mapped_file_size_for_entry_data=16 << 20)
body = os.urandom(1 << 20)  # copied and checksummed without the GIL
small = [os.urandom(100)] * 64
for round_ in range(12):
    store = MmapFileStore(f"{root}/r{round_}", cfg)
    acked = []
    started = threading.Event()

    def writer(store=store, acked=acked, started=started):
        k = 0
        while True:
            try:
                if k % 3 == 2:
                    first, _ = store.append_batch(small, 1)
                    acked.append(first + len(small) - 1)
                else:
                    acked.append(store.append(body, 1))
            except DLedgerError as exc:
                assert exc.code.name == "DISK_ERROR", exc
                return
            k += 1
            started.set()

    t = threading.Thread(target=writer)
    t.start()
    started.wait()
    time.sleep(0.002 * round_)
    store.close()
    t.join()
    again = MmapFileStore(f"{root}/r{round_}", cfg, start_services=False)
    assert again.ledger_end_index == acked[-1], (again.ledger_end_index, acked[-1])
    again.close()
print("ok")
"""


def test_closing_a_store_under_appends_neither_crashes_nor_loses_one(tmp_path: Path) -> None:
    # Run in a child: with the close unmapping under an append's copy the process dies (SIGSEGV).
    _run_ok(python_code(CLOSE_UNDER_APPENDS, str(tmp_path)), "the close unmapped under an append")


# What both reader scripts share: a reader calls ``read_one()`` (whether the read was right,
# and what it read) until a read goes wrong (noted in ``problems``), ``refusal(exc)`` says
# "end" or "again" for a refused read (None: the refusal is itself a problem), or ``stop()``.
READ_LOOP = r"""
import os, random, sys, threading, time
from dledger.config import DLedgerConfig
from dledger.errors import DLedgerError
from dledger.store.file import MmapFileStore

problems = []


def read_loop(read_one, refusal, reads, stop=lambda: False):
    while not stop():
        try:
            ok, what = read_one()
        except DLedgerError as exc:
            answer = refusal(exc)
            if answer == "again":
                continue
            if answer is None:
                problems.append(repr(exc))
            return
        except BaseException as exc:
            problems.append(repr(exc))
            return
        if not ok:
            problems.append(f"garbage read of {what}")
            return
        reads[0] += 1
"""

CLOSE_UNDER_READS = (
    READ_LOOP
    + r"""
root = sys.argv[1]
cfg = DLedgerConfig(mapped_file_size_for_entry_data=1 << 20, mapped_file_size_for_entry_index=32 << 10)
COUNT = 6000  # about 12 data files and 6 index files


def body(i):
    return i.to_bytes(8, "little") * (1 + i % 40)


def reader(store, seed, reads):
    rnd = random.Random(seed)

    def read_one():
        i = rnd.randrange(COUNT)
        kind = rnd.randrange(4)
        if kind == 0:
            ok = store.get(i).body == body(i)
        elif kind == 1:
            blob, pos, n = store.get_raw_range(i, i + 50, 1 << 16)
            ok = n >= 1 and blob[48:48 + len(body(i))] == body(i)
        elif kind == 2:
            pos, size, term = store.lookup(list(range(i, min(i + 300, COUNT))))
            ok = int(size[0]) == 48 + len(body(i)) and bool((term == 1).all())
        else:
            ok = store.term_at(i) == 1
        return ok, f"entry {i} (kind {kind})"

    def refusal(exc):
        return "end" if exc.code.name == "DISK_ERROR" and "closed" in str(exc) else None

    read_loop(read_one, refusal, reads)


for round_ in range(10):
    path = f"{root}/r{round_}"
    store = MmapFileStore(path, cfg, start_services=False)
    store.append_batch([body(i) for i in range(COUNT)], 1)
    counts = [[0] for _ in range(3)]
    threads = [threading.Thread(target=reader, args=(store, round_ * 10 + k, counts[k])) for k in range(3)]
    for t in threads:
        t.start()
    while min(c[0] for c in counts) < 50 and not problems:  # a reader that stopped on a problem never gets there
        time.sleep(0.001)
    time.sleep(0.003 * round_)
    store.close()
    for t in threads:
        t.join(60)
    assert not problems, problems[:5]
print("ok")
"""
)


def test_closing_a_store_under_reads_neither_crashes_nor_returns_garbage(tmp_path: Path) -> None:
    # Readers of every kind (an entry, a raw range, a batch lookup, a term) on three threads
    # while another closes the store: each read answers right or is refused as closed.
    # Before readers were guarded, a read after the unmap followed a NULL mapping: SIGSEGV.
    _run_ok(python_code(CLOSE_UNDER_READS, str(tmp_path)), "a read followed an unmapped pointer")


READS_UNDER_RETENTION = (
    READ_LOOP
    + r"""
root = sys.argv[1]
cfg = DLedgerConfig(mapped_file_size_for_entry_data=64 << 10, mapped_file_size_for_entry_index=32 << 10)
COUNT = 8000


def body(i):
    return i.to_bytes(8, "little") * (1 + i % 20)


stop = False


def reader(store, seed, reads):
    rnd = random.Random(seed)

    def read_one():
        begin = max(store.ledger_begin_index, 0)
        i = rnd.randrange(begin, min(begin + 400, COUNT))
        return store.get(i).body == body(i), f"entry {i}"

    def refusal(exc):
        return "again" if exc.code.name in ("INDEX_LESS_THAN_LOCAL_BEGIN", "DISK_ERROR") else None

    read_loop(read_one, refusal, reads, lambda: stop)


for round_ in range(3):
    stop = False
    store = MmapFileStore(f"{root}/r{round_}", cfg, start_services=False)
    store.append_batch([body(i) for i in range(COUNT)], 1)
    counts = [[0] for _ in range(2)]
    threads = [threading.Thread(target=reader, args=(store, round_ * 10 + k, counts[k])) for k in range(2)]
    for t in threads:
        t.start()
    for k in range(0, COUNT, 40):
        store.reset_begin_index(k)
    stop = True
    for t in threads:
        t.join(60)
    store.close()
    assert not problems, problems[:5]
    assert min(c[0] for c in counts) > 0, counts
print("ok")
"""
)


def test_reads_while_begin_resets_delete_files_neither_crash_nor_return_garbage(tmp_path: Path) -> None:
    # A reader of the oldest entries while the begin moves on and deletes their data files
    # (reset_begin_index; retention does the same): a file closed and not yet dropped from its
    # list was followed through its NULL mapping (SIGSEGV). Each read now answers right or is
    # refused (below the begin, or its file gone).
    _run_ok(python_code(READS_UNDER_RETENTION, str(tmp_path)), "a read followed a deleted file's mapping")


def test_release_fd_forgets_the_number_before_closing_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # os.close lets go of the GIL: a pre-write starting on another thread right after the
    # close, when an open() elsewhere has taken the number, must not take the number for the
    # segment's descriptor. Made deterministic by running that thread's part inside os.close
    # (the real close, an unrelated file on the number, then the pre-write).
    f, _path, number, other, mine, other_fd = _segment_beside_another(
        tmp_path, 8 << 20, b"z" * 100, b"\xcd" * (1 << 20)
    )
    real_close = os.close
    prewrote: list[int] = []
    armed = [True]

    def close_then_reuse_then_prewrite(fd: int) -> None:
        real_close(fd)
        if fd == number and armed[0]:
            armed[0] = False
            os.dup2(other_fd, number)
            prewrote.append(f.prewrite(0, 1 << 20))

    monkeypatch.setattr(os, "close", close_then_reuse_then_prewrite)
    f.release_fd()
    monkeypatch.setattr(os, "close", real_close)
    os.close(number)  # the other file's now
    os.close(other_fd)
    assert prewrote and prewrote[0] > 0, "the pre-write did not run inside the close"
    assert other.read_bytes() == mine
    f.close()
