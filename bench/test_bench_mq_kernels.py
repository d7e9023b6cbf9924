"""Message kernel figures (dledger._ext.message) beside baselines taken in the same run.

    pytest bench/test_bench_mq_kernels.py --benchmark-group-by=group --benchmark-columns=median,ops

Each group is one piece of work done by the kernel and by its baselines: a plain ``struct`` loop
(what the Python would be without the kernel) and a floor (a copy or a CRC of the same bytes,
which no encoder or checking scan can beat). ``extra_info["records"]`` gives the per-record cost.
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dledger._ext import codec
from dledger._ext import message as mk
from dledger.config import DLedgerConfig
from dledger.store.file import MmapFileStore

BODY_SIZES = {"100B": 100, "1KiB": 1024}
BATCH = 2000  # records per encode call
SCAN_BYTES = 4 << 20  # bytes of records per scan call
TOPIC = b"TopicA"
HOST = bytes([192, 168, 0, 10]) + struct.pack(">i", 10911)
PROPS = (
    b"KEYS\x01order-12345\x02UNIQ_KEY\x01FD00000000000000000000000000000260954E0E2F2A7314EC5B0000"
    b"\x02CLUSTER\x01DefaultCluster\x02TAGS\x01TagA"
)

HEAD = struct.Struct(">iiiiiqqiq")
HOST_TS = struct.Struct(">q")
TAIL = struct.Struct(">iqi")


def bodies_of(size: int, n: int) -> list[bytes]:
    rng = np.random.default_rng(size)
    return [rng.integers(0, 256, size, dtype=np.uint8).tobytes() for _ in range(n)]


def encode_ours(bodies: list[bytes], base: int = 0) -> tuple[bytes, np.ndarray]:
    n = len(bodies)
    return mk.encode_records(
        bodies, TOPIC, PROPS, 1, 0, np.arange(n), base, 0, 1_700_000_000_000, HOST, 1_700_000_000_001, HOST, 0, 0
    )


def split(buf: bytes, offs: np.ndarray) -> list[bytes]:
    return [buf[a:b] for a, b in zip(offs[:-1].tolist(), offs[1:].tolist(), strict=True)]


def encode_struct(bodies: list[bytes]) -> bytes:
    """The baseline: DefaultAppendMessageCallback in plain Python, one struct.pack per field group."""
    out = []
    for k, body in enumerate(bodies):
        size = 91 + len(body) + len(TOPIC) + len(PROPS)
        out.append(
            HEAD.pack(size, mk.MESSAGE_MAGIC_CODE, zlib.crc32(body) & 0x7FFFFFFF, 1, 0, k, 0, 0, 1_700_000_000_000)
            + HOST
            + HOST_TS.pack(1_700_000_000_001)
            + HOST
            + TAIL.pack(0, 0, len(body))
            + body
            + bytes([len(TOPIC)])
            + TOPIC
            + struct.pack(">h", len(PROPS))
            + PROPS
        )
    return b"".join(out)


def scan_struct(buf: bytes) -> int:
    """The baseline: the classic walk in plain Python, fields by struct.unpack_from, bodies not copied."""
    off, n, end = 0, 0, len(buf)
    cols: list[list[Any]] = [[] for _ in range(8)]
    while off < end:
        size, magic, crc, qid, _flag, qoff, _phys, sysf, bts = HEAD.unpack_from(buf, off)
        if magic != mk.MESSAGE_MAGIC_CODE:
            break
        at = off + 48 + (20 if sysf & 0x10 else 8)
        (sts,) = HOST_TS.unpack_from(buf, at)
        at += 8 + (20 if sysf & 0x20 else 8)
        _rc, _prep, body_len = TAIL.unpack_from(buf, at)
        at += 16 + body_len
        topic_len = buf[at]
        (props_len,) = struct.unpack_from(">h", buf, at + 1 + topic_len)
        for col, v in zip(cols, (off, size, crc, qid, qoff, bts, sts, props_len), strict=True):
            col.append(v)
        off += size
        n += 1
    return n


@pytest.fixture(scope="module", params=list(BODY_SIZES), ids=list(BODY_SIZES))
def sized(request: pytest.FixtureRequest) -> tuple[str, list[bytes], bytes, bytes]:
    label = request.param
    size = BODY_SIZES[label]
    bodies = bodies_of(size, BATCH)
    one, offs = encode_ours(bodies)
    reps = max(1, SCAN_BYTES // len(one))
    classic = one * reps
    dledger, _ = codec.encode_batch(split(one, offs) * reps, 0, 1, 0)
    return label, bodies, classic, dledger


@pytest.mark.parametrize("side", ["kernel", "struct-loop", "floor-join"])
def test_encode(benchmark, sized, side: str) -> None:
    label, bodies, _, _ = sized
    benchmark.group = f"mq-encode-{label}"
    benchmark.extra_info["records"] = len(bodies)
    encoded, offs = encode_ours(bodies)
    fn: Callable[[], Any]
    if side == "kernel":
        fn = lambda: encode_ours(bodies)[0]  # noqa: E731
    elif side == "struct-loop":
        fn = lambda: encode_struct(bodies)  # noqa: E731
    else:
        parts = split(encoded, offs)
        fn = lambda: b"".join(parts)  # noqa: E731  # the bytes it must produce, copied once
    out = benchmark(fn)
    assert out == encoded


@pytest.mark.parametrize("side", ["kernel", "kernel-crc", "struct-loop", "floor-crc32"])
def test_scan(benchmark, sized, side: str) -> None:
    label, _, classic, _ = sized
    benchmark.group = f"mq-scan-{label}"
    want = mk.scan_records(classic, 0)[0]["size"].shape[0]
    benchmark.extra_info["records"] = want
    benchmark.extra_info["bytes"] = len(classic)
    if side == "kernel":
        assert benchmark(lambda: mk.scan_records(classic, 0)[0]["size"].shape[0]) == want
    elif side == "kernel-crc":
        assert benchmark(lambda: mk.scan_records(classic, 0, check_crc=True)[0]["size"].shape[0]) == want
    elif side == "struct-loop":
        assert benchmark.pedantic(scan_struct, args=(classic,), rounds=3, iterations=1) == want
    else:
        benchmark(zlib.crc32, classic)  # a checking scan reads every byte at least once


@pytest.mark.parametrize("side", ["kernel", "kernel-crc", "entries-only"])
def test_scan_dledger(benchmark, sized, side: str) -> None:
    label, _, _, dledger = sized
    benchmark.group = f"mq-scan-dledger-{label}"
    want = codec.scan(dledger, 0)[0]["size"].shape[0]
    benchmark.extra_info["records"] = want
    if side == "entries-only":  # the DLedger entry scan alone, without the records inside
        assert benchmark(lambda: codec.scan(dledger, 0)[0]["size"].shape[0]) == want
    else:
        crc = side == "kernel-crc"
        assert benchmark(lambda: mk.scan_dledger_records(dledger, 0, check_crc=crc)[0]["size"].shape[0]) == want


@pytest.mark.parametrize("side", ["kernel", "python"])
def test_tags_codes(benchmark, sized, side: str) -> None:
    """tagsCode of every record of a scan: property_spans + java_hash_many, or the Python way."""
    label, _, classic, _ = sized
    benchmark.group = f"mq-tags-codes-{label}"
    cols = mk.scan_records(classic, 0)[0]
    benchmark.extra_info["records"] = cols["size"].shape[0]

    def kernel() -> np.ndarray:
        offs, lens = mk.property_spans(classic, cols["props_off"], cols["props_len"], b"TAGS")
        return mk.java_hash_many(classic, offs, lens)

    def python() -> list[int]:
        out = []
        for o, n in zip(cols["props_off"].tolist(), cols["props_len"].tolist(), strict=True):
            props = dict(item.split("\x01", 1) for item in classic[o : o + n].decode().split("\x02") if "\x01" in item)
            tags = props.get("TAGS")
            out.append(mk.java_hash(tags) if tags else 0)
        return out

    got = benchmark(kernel if side == "kernel" else python)
    assert list(got) == list(kernel())


@pytest.fixture(scope="module")
def store_root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="dledger-bench-mq-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("hook", ["none", "body_pos_patch=28"])
def test_append_batch_with_hook(benchmark, sized, store_root: Path, hook: str) -> None:
    """append_batch of encoded records, with and without the AppendHook stamping each body."""
    label, bodies, _, _ = sized
    benchmark.group = f"mq-append-batch-{label}"
    records = split(*encode_ours(bodies))
    benchmark.extra_info["records"] = len(records)
    cfg = DLedgerConfig(mapped_file_size_for_entry_data=64 << 20, mapped_file_size_for_entry_index=32 << 16)
    state: dict[str, MmapFileStore] = {}
    counter = iter(range(1 << 30))

    def fresh() -> None:
        if "store" in state:
            state.pop("store").close()
        path = store_root / f"{label}-{hook}-{next(counter)}"
        state["store"] = MmapFileStore(
            path, cfg, start_services=False, body_pos_patch=mk.PHY_POS_POSITION if hook != "none" else None
        )
        state["store"].append_batch(records[:1], 1)  # files created outside the timing

    def run() -> None:
        state["store"].append_batch(records, 1)

    benchmark.pedantic(run, setup=fresh, rounds=15, iterations=1)
    state.pop("store").close()
    if os.environ.get("DLEDGER_BENCH_KEEP") != "1":
        shutil.rmtree(store_root, ignore_errors=True)
        store_root.mkdir()
