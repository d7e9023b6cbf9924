"""Message store read figures at the issue's scale, beside same-run baselines (pytest-benchmark).

    pytest bench/test_bench_mq_scale.py -p no:cacheprovider --benchmark-group-by=group \\
        --benchmark-columns=median,min,max,rounds
    DLEDGER_BENCH_FULL=1 pytest bench/test_bench_mq_scale.py ...   # 10M messages, 10 index files

One data set per commit-log mode, built once per module with ``put_batch``: N messages of
100-byte bodies, all in queue 0 of one topic (so the pull reads "N messages of one queue"),
each with a key ``key-<i>`` of its own; with its UNIQ_KEY that is 2N index items, and the
index geometry is chosen so they fill ``INDEX_FILES`` files (``max_index_num`` items and a
quarter as many hash slots, RocketMQ's ratio). The data set lives under
``$DLEDGER_BENCH_CACHE`` (default: a directory in the system tempdir) and is reused by later
runs with the same N when ``DLEDGER_BENCH_KEEP=1`` (it is deleted at the end otherwise).

* pull: every message of the queue by offset into Arrow (``pull_arrow``, 2**18 a call);
  baselines: reading the commit-log bytes that hold them, and the kernel scan of the log.
* query: one key a call, keys drawn at random (the median of the rounds is the p50); every
  query walks all index files, newest first (a key is one message, never 64). Baselines:
  the offsets alone (``query_offsets_by_key``), and a key that is in no file. Both commit
  logs are measured the same way: the store opened (its recovery maps the log's pages), then
  every file of the data set read once, so the reads come from the page cache;
  ``extra_info`` says how much of the log was in the page cache (``log_cached``, mincore) and
  mapped in the process (``log_mapped``, smaps Rss) after the rounds.
* dispatch alone: consume queue and index built from a written commit log of the same
  messages (``ReputMessageService.dispatch_now``); baseline: the kernel scan alone.

``extra_info['msgs_per_s_median']`` is N / median for the throughput figures.
DLEDGER_BENCH_SCALE_N overrides N; DLEDGER_BENCH_MODES picks the modes (``classic,dledger``).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.message_store import MessageStore

FULL = os.environ.get("DLEDGER_BENCH_FULL") == "1"
N = int(os.environ.get("DLEDGER_BENCH_SCALE_N", 10_000_000 if FULL else 1_000_000))
MODES = [m for m in os.environ.get("DLEDGER_BENCH_MODES", "classic,dledger").split(",") if m]
KEEP = os.environ.get("DLEDGER_BENCH_KEEP") == "1"
CACHE = Path(os.environ.get("DLEDGER_BENCH_CACHE") or Path(tempfile.gettempdir()) / "dledger-bench-mq-scale")
ROUNDS = 3 if FULL else 5
INDEX_FILES = 10
ITEMS_PER_MESSAGE = 2  # its key and its UNIQ_KEY
BATCH = 1024
TOPIC = "TopicA"
# Bumped when the data set's shape changes, so a kept cache is not reused wrongly.
VERSION = 1


def index_geometry(n: int) -> tuple[int, int]:
    """(max_hash_slot_num, max_index_num) for n messages' items to fill INDEX_FILES files: a
    file holds max_index_num - 1 items (item 0 is never used); a little room is left so the
    last file is not quite full (a full one would make the next put open an eleventh)."""
    per_file = -(-n * ITEMS_PER_MESSAGE // INDEX_FILES)
    index_num = per_file + 1 + max(per_file // 1000, 16)
    return max(index_num // 4, 1), index_num


def store_config(mode: str, n: int) -> MessageStoreConfig:
    slots, items = index_geometry(n)
    return MessageStoreConfig(
        enable_dledger_commit_log=mode == "dledger",
        mapped_file_size_commit_log=1 << 30,
        store_host="10.0.0.1:10911",
        max_hash_slot_num=slots,
        max_index_num=items,
    )


def keys_of(start: int, count: int) -> list[str | None]:
    return [f"key-{i}" for i in range(start, start + count)]


def write_messages(s: MessageStore, n: int) -> None:
    body = b"m" * 100
    bodies = [body] * BATCH
    for k in range(0, n, BATCH):
        c = min(BATCH, n - k)
        r = s.put_batch(TOPIC, bodies[:c], queue_id=0, tags="TagA", keys=keys_of(k, c))
        assert r.ok, r


class DataSet:
    def __init__(self, mode: str, path: Path, store: MessageStore, build_s: float) -> None:
        self.mode = mode
        self.path = path
        self.store = store
        self.build_s = build_s


def open_data_set(mode: str) -> DataSet:
    path = CACHE / f"{mode}-{N}-v{VERSION}"
    done = path / "complete"
    build_s = 0.0
    if not done.exists():
        shutil.rmtree(path, ignore_errors=True)
        t0 = time.perf_counter()
        s = MessageStore(path / "store", store_config(mode, N))
        write_messages(s, N)
        assert s.wait_dispatched(3600)
        build_s = time.perf_counter() - t0
        s.close()
        done.write_text(f"{N} messages, built in {build_s:.1f} s\n")
    s = MessageStore(path / "store", store_config(mode, N))
    assert s.wait_dispatched(3600)
    assert s.max_offset_in_queue(TOPIC, 0) == N
    assert len(s.index_service.files) == INDEX_FILES, s.index_service.files
    return DataSet(mode, path, s, build_s)


@pytest.fixture(scope="module", params=MODES)
def data(request: Any) -> Iterator[DataSet]:
    ds = open_data_set(request.param)
    try:
        yield ds
    finally:
        ds.store.close()
        if not KEEP:
            shutil.rmtree(ds.path, ignore_errors=True)
            if not os.environ.get("DLEDGER_BENCH_CACHE"):
                try:
                    CACHE.rmdir()  # the default directory, once its last data set is gone
                except OSError:
                    pass


def warm(ds: DataSet) -> None:
    """Read the data set's files once, so a figure is of reads from the page cache: this VM
    reclaims pages that went cold (DAMON), and a lookup that faults in from disk measures the
    disk."""
    buf = bytearray(16 << 20)
    for p in sorted(ds.path.rglob("*")):
        if p.is_file():
            with open(p, "rb", buffering=0) as f:
                while f.readinto(buf):
                    pass


def log_residency(ds: DataSet) -> tuple[float, float]:
    """(in the page cache, mapped in this process) as fractions of the commit log's written
    bytes: the conditions a query's read of the message ran in. (-1, -1) off Linux."""
    if not sys.platform.startswith("linux"):
        return -1.0, -1.0
    spans = {str(f.path): int(f.wrote_position) for f in ds.store.commitlog.files.files}
    written = sum(spans.values()) or 1
    libc = ctypes.CDLL(None, use_errno=True)
    cached = 0
    for path, length in spans.items():
        pages = -(-length // mmap.PAGESIZE)
        if not pages:
            continue
        with open(path, "rb") as lf:
            # A private writable view only so ctypes takes its address; never written.
            m = mmap.mmap(lf.fileno(), pages * mmap.PAGESIZE, access=mmap.ACCESS_COPY)
            try:
                vec = (ctypes.c_ubyte * pages)()
                base = ctypes.c_char.from_buffer(m)
                rc = libc.mincore(ctypes.c_void_p(ctypes.addressof(base)), ctypes.c_size_t(pages * mmap.PAGESIZE), vec)
                del base
                if rc != 0:
                    return -1.0, -1.0
                cached += int((np.frombuffer(memoryview(vec).cast("B"), dtype=np.uint8) & 1).sum()) * mmap.PAGESIZE
            finally:
                m.close()
    mapped = 0
    with open("/proc/self/smaps") as sm:
        mapping = ""
        for line in sm:
            if re.match(r"[0-9a-f]+-[0-9a-f]+ ", line):
                head = line.split(None, 5)
                mapping = head[5].strip() if len(head) > 5 else ""
            elif line.startswith("Rss:") and mapping in spans:
                mapped += int(line.split()[1]) * 1024
    return min(cached / written, 1.0), min(mapped / written, 1.0)


def throughput(benchmark: Any, fn: Any, messages: int) -> None:
    done = benchmark.pedantic(fn, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    assert done == messages
    benchmark.extra_info["messages"] = messages
    benchmark.extra_info["msgs_per_s_median"] = messages / benchmark.stats.stats.median


# -- pull --------------------------------------------------------------------------------------


@pytest.mark.parametrize("side", ["pull_arrow", "read_files", "scan"])
def test_pull_queue_scale(benchmark: Any, data: DataSet, side: str) -> None:
    """Every message of the queue by offset into Arrow; baselines: reading the commit-log bytes
    that hold them (what any reader pays for the bytes), the kernel scan of the whole log."""
    s = data.store
    n = s.max_offset_in_queue(TOPIC, 0)
    benchmark.group = f"pull {N} of one queue into Arrow, {data.mode}"
    benchmark.name = {
        "pull_arrow": "pull_arrow, 2**18 a call",
        "read_files": "read the log files",
        "scan": "kernel scan of the log (iter_batches)",
    }[side]
    benchmark.extra_info["build_s"] = round(data.build_s, 1)
    end = s.max_phys_offset
    spans = [(Path(f.path), min(f.file_size, end - f.file_from_offset)) for f in s.commitlog.files.files]

    def pull() -> int:
        off = 0
        while off < n:
            off += s.pull_arrow(TOPIC, 0, off, 1 << 18).num_rows
        return off

    def read() -> int:
        buf = bytearray(64 << 20)
        for p, length in spans:
            with open(p, "rb", buffering=0) as f:
                left = length
                while left > 0:
                    got = f.readinto(memoryview(buf)[: min(left, len(buf))])
                    assert got
                    left -= got
        return n

    def scan() -> int:
        return sum(len(cols["size"]) for _buf, cols in s.iter_batches())

    throughput(benchmark, {"pull_arrow": pull, "read_files": read, "scan": scan}[side], n)


# -- query by key ------------------------------------------------------------------------------

QUERY_SIDES = ["with_message", "offsets_only", "missing_key"]


@pytest.mark.parametrize("side", QUERY_SIDES)
def test_query_by_key_scale(benchmark: Any, data: DataSet, side: str) -> None:
    """One key a call over all index files, newest first; the median is the p50 latency."""
    s = data.store
    warm(data)
    rnd = np.random.default_rng(7)
    if side == "missing_key":
        keys = [f"nokey-{int(i)}" for i in rnd.integers(0, N, 20_000)]
    else:
        keys = [f"key-{int(i)}" for i in rnd.integers(0, N, 20_000)]
    it = iter(keys * 1000)
    benchmark.group = f"query by key, {N} messages in {INDEX_FILES} index files, {data.mode}"
    benchmark.extra_info["index_files"] = len(s.index_service.files)
    if side == "with_message":
        benchmark.name = "query_by_key: offsets and messages"
        found = benchmark(lambda: s.query_by_key(TOPIC, next(it)))
        assert len(found) == 1
    elif side == "offsets_only":
        benchmark.name = "query_offsets_by_key"
        found = benchmark(lambda: s.query_offsets_by_key(TOPIC, next(it)))
        assert 1 <= len(found) <= 3  # the index holds key hashes: a collision adds an offset
    else:
        benchmark.name = "query_offsets_by_key, key in no file"
        found = benchmark(lambda: s.query_offsets_by_key(TOPIC, next(it)))
        assert found == [] or len(found) <= 2  # a hash collision may give an offset
    cached, mapped = log_residency(data)
    benchmark.extra_info["log_cached"] = round(cached, 3)
    benchmark.extra_info["log_mapped"] = round(mapped, 3)


# -- dispatch alone ----------------------------------------------------------------------------


@pytest.mark.parametrize("side", ["dispatch", "scan"])
def test_dispatch_alone_scale(benchmark: Any, data: DataSet, side: str, tmp_path_factory: Any) -> None:
    """Consume queue and index (2 items a message, over INDEX_FILES files) built from a written
    commit log of N messages; baseline: the kernel scan of the same log."""
    benchmark.group = f"dispatch alone {N}, {data.mode}"
    if side == "scan":
        benchmark.name = "kernel scan of the log (iter_batches)"
        s = data.store
        throughput(benchmark, lambda: sum(len(cols["size"]) for _b, cols in s.iter_batches()), N)
        return
    benchmark.name = "ReputMessageService.dispatch_now (queue + index)"
    base = tmp_path_factory.mktemp(f"dispatch-{data.mode}")
    opened: list[MessageStore] = []
    k = [0]

    def setup() -> tuple[tuple[Any, ...], dict[str, Any]]:
        for o in opened:
            o.close()
        opened.clear()
        shutil.rmtree(base / str(k[0]), ignore_errors=True)
        k[0] += 1
        st = MessageStore(base / str(k[0]), store_config(data.mode, N))
        opened.append(st)
        st.reput.stop()
        write_messages(st, N)
        return (st,), {}

    def work(st: MessageStore) -> int:
        return int(st.reput.dispatch_now())

    try:
        done = benchmark.pedantic(work, setup=setup, rounds=ROUNDS, iterations=1, warmup_rounds=0)
        assert done == N
        assert len(opened[0].index_service.files) == INDEX_FILES
    finally:
        for o in opened:
            o.close()
        shutil.rmtree(base, ignore_errors=True)
    benchmark.extra_info["messages"] = N
    benchmark.extra_info["msgs_per_s_median"] = N / benchmark.stats.stats.median
