"""What making a page of page cache costs this machine, by each way the stores can make it.

The stores append batches by ``pwritev`` into sparse segment files; a service thread makes the
pages just past the write position first, so that the writer finds them made. Three ways, each
on a fresh file of ``--mb`` MiB (files are kept until the end, so every page is new memory):

- ``none``: nothing ahead; the writer's pwrites make the pages;
- ``populate-read``: ``MADV_POPULATE_READ`` of the hole, 256 KiB at a time (zero-filled pages,
  mapped read-only);
- ``prewrite``: ``MappedFile.prewrite``, zeros written 1 MiB at a time (what the stores do;
  ``--prewrite-step`` writes them in smaller pieces: a buffered write makes page-cache folios
  as large as it writes, and the writer's cost a page depends on their size).

For each, the service's CPU a 4 KiB page to make them, then the writer's CPU a page to write
batch-sized records (9,728 bytes: 32 DLedger entries of 100 B messages) into them, medians of
``--rounds``. Thread CPU time, so a round is not charged for what other processes do.

With ``--mapped`` the writer copies into the file's mapping instead, 2,000 bytes at a time (a
dispatch round's consume-queue units or index items), and the ways are the ones for such files:

- ``none``: the writer's page faults make the pages;
- ``populate-write``: ``MADV_POPULATE_WRITE`` of the hole, 256 KiB at a time (what dispatch did);
- ``zeros+populate``: zeros written there first (``zero_fill``), then the populate (now).

    python bench/page_costs.py --mb 64 --rounds 4
    python bench/page_costs.py --mb 64 --rounds 4 --mapped
"""

from __future__ import annotations

import argparse
import mmap
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from dledger._ext import load as _load_ext
from dledger._ext import segment as _segment

K = _load_ext("message")
PAGE = 4096
POPULATE_STEP = 256 << 10  # the store service's step
PREWRITE_STEP = 1 << 20
RECORDS = 9728
WAYS = ("none", "populate-read", "prewrite")
MAPPED_WAYS = ("none", "populate-write", "zeros+populate")
UNITS = 2000


def one(root: Path, k: int, way: str, size: int, step: int = PREWRITE_STEP) -> tuple[float, float]:
    """(service, writer) CPU microseconds a page for one fresh file made ``way``."""
    files = _segment.MmapFileList(str(root / f"{k}-{way}"), size, False, guarded=True)
    f = files.last_file(0, True)
    pages = size // PAGE
    c0 = time.thread_time()
    if way == "populate-read":
        with open(f.path, "r+b") as fh, mmap.mmap(fh.fileno(), size) as m:
            for at in range(0, size, POPULATE_STEP):
                K.prefault(m, at, at + POPULATE_STEP, K.PREFAULT_READ)
    elif way == "prewrite":
        for at in range(0, size, step):
            f.prewrite(at, at + step)
    c1 = time.thread_time()
    chunk = os.urandom(RECORDS)
    while f.remaining >= RECORDS:
        f.append(chunk)
    c2 = time.thread_time()
    f.close()
    return (c1 - c0) / pages * 1e6, (c2 - c1) / pages * 1e6


def one_mapped(root: Path, k: int, way: str, size: int) -> tuple[float, float]:
    """(service, writer) CPU microseconds a page for one fresh file written through its mapping."""
    path = root / f"{k}-{way}"
    with open(path, "w+b") as fh:
        fh.truncate(size)
        with mmap.mmap(fh.fileno(), size) as m:
            pages = size // PAGE
            c0 = time.thread_time()
            if way != "none":
                for at in range(0, size, POPULATE_STEP):
                    if way == "zeros+populate":
                        K.zero_fill(fh.fileno(), at, at + POPULATE_STEP)
                    K.prefault(m, at, at + POPULATE_STEP, K.PREFAULT_WRITE)
            c1 = time.thread_time()
            chunk = os.urandom(UNITS)
            for at in range(0, size - UNITS + 1, UNITS):
                K.copy_into(m, at, chunk)
            c2 = time.thread_time()
    return (c1 - c0) / pages * 1e6, (c2 - c1) / pages * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--mb", type=int, default=64, help="MiB a file")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--dir", default=None, help="where to put the files (default: a temporary directory)")
    ap.add_argument("--prewrite-step", type=int, default=PREWRITE_STEP, help="bytes a pre-write call (at most 1 MiB)")
    ap.add_argument("--mapped", action="store_true", help="a writer through the mapping (consume queue, index)")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="dledger-page-costs-", dir=args.dir))
    ways = MAPPED_WAYS if args.mapped else WAYS
    got: dict[str, list[tuple[float, float]]] = {w: [] for w in ways}
    try:
        k = 0
        for _ in range(args.rounds):
            for way in ways:  # interleaved, so that a slow minute of the VM hits every way
                if args.mapped:
                    got[way].append(one_mapped(root, k, way, args.mb << 20))
                else:
                    got[way].append(one(root, k, way, args.mb << 20, args.prewrite_step))
                k += 1
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"CPU us a 4 KiB page, medians of {args.rounds} fresh files of {args.mb} MiB [min-max]:")
    for way, rows in got.items():
        svc = [r[0] for r in rows]
        wr = [r[1] for r in rows]
        print(
            f"  {way:14s} service {statistics.median(svc):5.2f} [{min(svc):.2f}-{max(svc):.2f}]"
            f"  writer {statistics.median(wr):5.2f} [{min(wr):.2f}-{max(wr):.2f}]"
            f"  both {statistics.median(s + w for s, w in rows):5.2f}"
        )


if __name__ == "__main__":
    main()
