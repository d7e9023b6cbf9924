"""Store benchmarks: each figure measured beside a baseline doing the same job, in the same run.

Every workload is a ``Case``: a ``setup`` that builds its inputs (not timed) and two callables,
ours and the baseline's, each returning how many units of work it did. ``run_store_bench``
times both several times and reports medians; ``bench/test_bench_store.py`` hands the same
callables to pytest-benchmark.
"""

from __future__ import annotations

import mmap
import os
import random
import shutil
import statistics
import struct
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dledger._ext import require_built
from dledger.config import DLedgerConfig
from dledger.store.file import MmapFileStore

require_built()
from dledger._ext import codec as _codec  # noqa: E402
from dledger._ext import crc as _crc  # noqa: E402

MB = 1_000_000

# The baselines' view of the layout: plain struct, as a Python implementation would write it.
_HEADER = struct.Struct(">iiqqqiIIi")  # magic size index term pos channel chainCrc bodyCrc bodySize
_INDEX_UNIT = struct.Struct(">iqiqq")  # magic pos size index term
_MAGIC = struct.Struct(">i")


@dataclass(slots=True)
class BenchResult:
    name: str
    value: float
    unit: str
    baseline_name: str
    baseline_value: float
    # The lowest and highest run of each side: how far one figure moves on this machine.
    spread: tuple[float, float] = (0.0, 0.0)
    baseline_spread: tuple[float, float] = (0.0, 0.0)

    @property
    def ratio(self) -> float:
        return self.value / self.baseline_value if self.baseline_value else float("inf")

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "value": round(self.value, 3),
            "unit": self.unit,
            "baseline_name": self.baseline_name,
            "baseline_value": round(self.baseline_value, 3),
            "ratio": round(self.ratio, 3),
            "spread": [round(v, 3) for v in self.spread],
            "baseline_spread": [round(v, 3) for v in self.baseline_spread],
        }


def result(
    name: str, unit: str, ours: Sequence[float], baseline_name: str, baseline: Sequence[float], scale: float = 1.0
) -> BenchResult:
    """Medians and spreads of interleaved runs, in the reported unit."""
    return BenchResult(
        name,
        statistics.median(ours) / scale,
        unit,
        baseline_name,
        statistics.median(baseline) / scale,
        (min(ours) / scale, max(ours) / scale),
        (min(baseline) / scale, max(baseline) / scale),
    )


@dataclass(slots=True)
class Sizes:
    batch_entries: int
    append_entries: int
    get_entries: int
    lookup_entries: int
    scan_bytes: int
    recovery_bytes: int
    repeats: int

    @classmethod
    def for_mode(cls, quick: bool) -> Sizes:
        if quick:
            return cls(20_000, 200_000, 200_000, 1_000_000, 8 << 20, 64 << 20, 3)
        return cls(200_000, 2_000_000, 1_000_000, 5_000_000, 64 << 20, 1 << 30, 5)


@dataclass
class Case:
    """One figure: ours and the baseline, each a callable that does the work once and returns
    the units of work done (bytes or operations). ``fresh`` re-creates per-run state."""

    name: str
    unit: str
    scale: float  # divide units/s by this for the reported unit (1e6 for MB/s)
    ours: Callable[[], int]
    baseline_name: str
    baseline: Callable[[], int]
    fresh: Callable[[], None] = lambda: None
    cleanup: list[Callable[[], None]] = field(default_factory=list)


@contextmanager
def _tmpdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="dledger-bench-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _bench_config(data_size: int = 256 << 20) -> DLedgerConfig:
    return DLedgerConfig(mapped_file_size_for_entry_data=data_size, mapped_file_size_for_entry_index=32 * (1 << 20))


def _fill(store: MmapFileStore, count: int, body_size: int, batch: int = 10_000) -> None:
    body = os.urandom(body_size)
    done = 0
    while done < count:
        n = min(batch, count - done)
        store.append_batch([body] * n, 1)
        done += n


def _close(state: dict[str, object], *keys: str) -> None:
    """Close and forget what ``state`` holds under ``keys``: objects with close(), or fds."""
    for key in keys:
        obj = state.pop(key, None)
        if isinstance(obj, int):
            os.close(obj)
        elif obj is not None:
            obj.close()  # type: ignore[attr-defined]


def _preallocated(path: Path, size: int) -> int:
    """A new file of ``size`` allocated bytes, open for writing at its start."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.posix_fallocate(fd, 0, size)
    return fd


# -- cases --------------------------------------------------------------------------------


def case_batch_append_1k(root: Path, sizes: Sizes) -> Case:
    """append_batch of 1 KiB bodies vs the same entry bytes written with the fewest syscalls
    (``os.writev`` of IOV_MAX slices) into a preallocated file. Neither side flushes: ours
    lands in the mmap'd page cache, the baseline's in the file's; ours also writes the index."""
    bodies = [os.urandom(1024) for _ in range(256)]
    work = [bodies[i % 256] for i in range(sizes.batch_entries)]
    encoded, offsets = _codec.encode_batch(work, 0, 1, 0)
    total = len(encoded)
    # One writev takes at most IOV_MAX (1024 on Linux) buffers; slicing a memoryview copies nothing.
    view = memoryview(encoded)
    step = os.sysconf("SC_IOV_MAX")
    spans = [view[offsets[i] : offsets[i] + 48 + 1024] for i in range(len(work))]
    groups = [spans[i : i + step] for i in range(0, len(spans), step)]
    state: dict[str, object] = {}

    def fresh() -> None:
        _close(state, "store")
        shutil.rmtree(root / "batch", ignore_errors=True)
        state["store"] = MmapFileStore(root / "batch" / "dledger-n0", _bench_config(), start_services=False)
        state["fd"] = _preallocated(root / "raw.bin", total)

    def ours() -> int:
        state["store"].append_batch(work, 1)  # type: ignore[attr-defined]
        return total

    def baseline() -> int:
        fd = state.pop("fd")
        assert isinstance(fd, int)
        writev = os.writev
        done = 0
        for g in groups:
            done += writev(fd, g)
        os.close(fd)
        if done != total:  # a regular file takes a whole writev; say so if one did not
            raise OSError(f"short writev: {done} of {total} bytes")
        return total

    def cleanup() -> None:
        _close(state, "store", "fd")

    return Case("batch_append_1k", "MB/s", MB, ours, "raw_os_writev", baseline, fresh, [cleanup])


class _PyEntry(tuple):
    """The twin's entry record (index, term, pos, body, magic, channel, chain_crc, body_crc)."""

    def __new__(cls, *fields: object) -> _PyEntry:
        return super().__new__(cls, fields)


def _struct_scan(buf: bytes, base_pos: int) -> list[tuple[int, int, int, int, int, int, int, int]]:
    """The scan kernel's walk and checks (without CRC) in plain Python: entries as tuples
    (index, term, pos, size, magic, body_offset, body_len, body_crc) up to the first entry
    that is not sound."""
    out: list[tuple[int, int, int, int, int, int, int, int]] = []
    end = len(buf)
    off = 0
    expect_index, prev_term = -1, -1
    while end - off >= 48:
        (magic,) = _MAGIC.unpack_from(buf, off)
        if magic in (-1, 0):
            break
        magic, size, index, term, pos, _ch, _cc, body_crc, body_size = _HEADER.unpack_from(buf, off)
        if not (
            magic == 1
            and size > 44
            and body_size >= 0
            and body_size + 48 == size
            and size <= end - off
            and pos == base_pos + off
            and (expect_index < 0 or index == expect_index)
            and index >= 0
            and term >= prev_term
        ):
            break
        out.append((index, term, pos, size, magic, off + 48, body_size, body_crc))
        expect_index, prev_term = index + 1, term
        off += size
    return out


class _PyTwinLog:
    """The store's append and get written in plain Python over mmap, with struct: the baseline
    for the per-entry paths (what the kernels replace)."""

    def __init__(self, path: Path, data_size: int, index_size: int) -> None:
        self._files: list[mmap.mmap] = []
        self.data = self._map(path / "data", data_size)
        self.index = self._map(path / "index", index_size)
        self.wrote = 0
        self.end = -1

    def _map(self, path: Path, size: int) -> mmap.mmap:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        os.ftruncate(fd, size)
        m = mmap.mmap(fd, size)
        os.close(fd)
        self._files.append(m)
        return m

    def append(self, body: bytes, term: int, _h: struct.Struct = _HEADER, _u: struct.Struct = _INDEX_UNIT) -> int:
        index = self.end + 1
        pos = self.wrote
        size = 48 + len(body)
        _h.pack_into(self.data, pos, 1, size, index, term, pos, 0, 0, zlib.crc32(body), len(body))
        self.data[pos + 48 : pos + size] = body
        _u.pack_into(self.index, index * 32, 1, pos, size, index, term)
        self.wrote = pos + size
        self.end = index
        return index

    def get(self, index: int, _h: struct.Struct = _HEADER, _u: struct.Struct = _INDEX_UNIT) -> _PyEntry:
        _m, pos, size, _i, _t = _u.unpack_from(self.index, index * 32)
        magic, _s, idx, term, p, ch, cc, crc, _n = _h.unpack_from(self.data, pos)
        return _PyEntry(idx, term, p, self.data[pos + 48 : pos + size], magic, ch, cc, crc)

    def lookup(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # Python's best form of a batch lookup: strided numpy views of the index file's three
        # columns, gathered by the whole array at once (no loop in Python) and made native.
        # Measured faster than a structured view (which copies each 32-byte unit) and than
        # fancy indexing of the big-endian views.
        n, idx = len(self.index) // 32, self.index
        pos = np.ndarray((n,), ">i8", idx, 4, (32,)).take(indices).astype(np.int64)
        size = np.ndarray((n,), ">i4", idx, 12, (32,)).take(indices).astype(np.int32)
        term = np.ndarray((n,), ">i8", idx, 24, (32,)).take(indices).astype(np.int64)
        return pos, size, term

    def close(self) -> None:
        for m in self._files:
            m.close()


def case_append_100b(root: Path, sizes: Sizes) -> Case:
    body = os.urandom(100)
    n = sizes.append_entries
    state: dict[str, object] = {}

    def fresh() -> None:
        _close(state, "store", "twin")
        shutil.rmtree(root / "append", ignore_errors=True)
        state["store"] = MmapFileStore(root / "append" / "dledger-n0", _bench_config(), start_services=False)
        twin_dir = root / "append" / "twin"
        (twin_dir / "data").parent.mkdir(parents=True, exist_ok=True)
        twin_dir.mkdir(exist_ok=True)
        state["twin"] = _PyTwinLog(twin_dir, n * (48 + len(body)) + 4096, n * 32 + 4096)

    def ours() -> int:
        append = state["store"].append  # type: ignore[attr-defined]
        for _ in range(n):
            append(body, 1)
        return n

    def baseline() -> int:
        append = state["twin"].append  # type: ignore[attr-defined]
        for _ in range(n):
            append(body, 1)
        return n

    def cleanup() -> None:
        _close(state, "store", "twin")

    return Case("append_100b", "entries/s", 1, ours, "python_struct_mmap_append", baseline, fresh, [cleanup])


def _filled(root: Path, name: str, count: int, body_size: int) -> tuple[MmapFileStore, _PyTwinLog]:
    store = MmapFileStore(root / name / "dledger-n0", _bench_config(), start_services=False)
    _fill(store, count, body_size)
    twin_dir = root / name / "twin"
    twin_dir.mkdir(parents=True, exist_ok=True)
    twin = _PyTwinLog(twin_dir, count * (48 + body_size) + 4096, count * 32 + 4096)
    body = store.get_body(0)
    for _ in range(count):
        twin.append(body, 1)
    return store, twin


def case_random_get(root: Path, sizes: Sizes) -> Case:
    count = sizes.get_entries
    store, twin = _filled(root, "get", count, 100)
    rng = random.Random(7)
    order = [rng.randrange(count) for _ in range(count)]

    def ours() -> int:
        get = store.get
        for i in order:
            get(i)
        return count

    def baseline() -> int:
        get = twin.get
        for i in order:
            get(i)
        return count

    return Case("random_get", "gets/s", 1, ours, "python_struct_mmap_get", baseline, cleanup=[store.close, twin.close])


def case_batch_lookup(root: Path, sizes: Sizes) -> Case:
    count = min(sizes.lookup_entries, sizes.get_entries)
    store, twin = _filled(root, "lookup", count, 20)
    rng = np.random.default_rng(7)
    want = rng.integers(0, count, sizes.lookup_entries)

    def ours() -> int:
        store.lookup(want)
        return len(want)

    def baseline() -> int:
        twin.lookup(want)
        return len(want)

    return Case("batch_lookup", "lookups/s", 1, ours, "numpy_strided_take", baseline, cleanup=[store.close, twin.close])


def case_batch_scan(root: Path, sizes: Sizes) -> Case:
    bodies = [os.urandom(100) for _ in range(64)]
    count = sizes.scan_bytes // 148
    buf, _ = _codec.encode_batch([bodies[i % 64] for i in range(count)], 0, 1, 0)

    def ours() -> int:
        cols, _stop, _code = _codec.scan(buf, 0)
        return len(cols["index"])

    def baseline() -> int:
        return len(_struct_scan(buf, 0))

    return Case("batch_scan", "entries/s", 1, ours, "python_struct_scan", baseline)


def case_recovery_crc(root: Path, sizes: Sizes) -> Case:
    # Segments large enough that the whole store sits in the three files recovery scans.
    data_size = max(sizes.recovery_bytes // 2, 64 << 20)
    cfg = DLedgerConfig(mapped_file_size_for_entry_data=data_size, mapped_file_size_for_entry_index=32 << 20)
    node = root / "recovery" / "dledger-n0"
    store = MmapFileStore(node, cfg, start_services=False)
    _fill(store, sizes.recovery_bytes // (48 + 1024), 1024)
    total = store._log.data.max_wrote_position
    store.close()
    files = sorted((node / "data").iterdir())

    def ours() -> int:
        with MmapFileStore(node, cfg, readonly=True) as s:
            assert s.recovery.scanned_bytes >= total - len(files) * data_size // 1000
        return int(total)

    def baseline() -> int:
        done = 0
        for p in files:
            with open(p, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                zlib.crc32(m)
                done += len(m)
        return done

    return Case("recovery_crc", "GB/s", 1e9, ours, "zlib_crc32_of_files", baseline)


def case_crc32(root: Path, sizes: Sizes) -> Case:
    buf = os.urandom(64 * 1024)
    reps = 2000

    def ours() -> int:
        f = _crc.crc32
        for _ in range(reps):
            f(buf)
        return reps * len(buf)

    def baseline() -> int:
        f = zlib.crc32
        for _ in range(reps):
            f(buf)
        return reps * len(buf)

    return Case("crc32", "GB/s", 1e9, ours, "zlib.crc32", baseline)


CASES = [
    case_batch_append_1k,
    case_append_100b,
    case_random_get,
    case_batch_lookup,
    case_batch_scan,
    case_recovery_crc,
    case_crc32,
]


def _median_rate(fn: Callable[[], int], fresh: Callable[[], None], repeats: int) -> float:
    rates = []
    for _ in range(repeats):
        fresh()
        t0 = time.perf_counter()
        units = fn()
        rates.append(units / (time.perf_counter() - t0))
    return statistics.median(rates)


def run_store_bench(quick: bool = False) -> list[BenchResult]:
    sizes = Sizes.for_mode(quick)
    results = []
    with _tmpdir() as root:
        for make in CASES:
            case = make(root, sizes)
            try:
                # Interleave ours and the baseline so drift on a shared machine hits both.
                ours_rates, base_rates = [], []
                for _ in range(sizes.repeats):
                    ours_rates.append(_median_rate(case.ours, case.fresh, 1))
                    base_rates.append(_median_rate(case.baseline, case.fresh, 1))
                results.append(result(case.name, case.unit, ours_rates, case.baseline_name, base_rates, case.scale))
            finally:
                for c in case.cleanup:
                    c()
    return results


def format_table(results: list[BenchResult]) -> str:
    """Medians, each with the range of its runs in brackets."""

    def num(v: float) -> str:
        return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"

    def rng(lo_hi: tuple[float, float]) -> str:
        return f"[{num(lo_hi[0])}-{num(lo_hi[1])}]"

    lines = [
        f"{'figure':<18}{'ours':>14} {'(runs)':<26} {'unit':<10}{'baseline':<28}{'baseline':>14} {'(runs)':<24}"
        f"{'ratio':>8}"
    ]
    for r in results:
        lines.append(
            f"{r.name:<18}{r.value:>14,.2f} {rng(r.spread):<26} {r.unit:<10}{r.baseline_name:<28}"
            f"{r.baseline_value:>14,.2f} {rng(r.baseline_spread):<24}{r.ratio:>7.2f}x"
        )
    return "\n".join(lines)
