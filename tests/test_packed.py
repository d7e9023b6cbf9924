"""Packed batches (dledger.packed): the bodies a client joins are the bodies the store keeps."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dledger.codes import ResponseCode
from dledger.config import DLedgerConfig
from dledger.errors import DLedgerError
from dledger.packed import FramedBodies, PackedBodies
from dledger.store.file import MmapFileStore
from dledger.store.memory import MemoryStore

CFG = DLedgerConfig(mapped_file_size_for_entry_data=64 << 10, mapped_file_size_for_entry_index=4 << 10)


def _wire(bodies: list[bytes], limit: int = 1 << 20) -> PackedBodies:
    raw, sizes = PackedBodies.pack(bodies)
    return PackedBodies.from_wire(raw, sizes, limit)


@given(st.lists(st.binary(min_size=1, max_size=300), min_size=1, max_size=50))
@settings(max_examples=200, deadline=None)
def test_a_packed_batch_is_the_sequence_of_its_bodies(bodies):
    packed = _wire(bodies)
    assert len(packed) == len(bodies)
    assert list(packed) == bodies
    assert packed[-1] == bodies[-1] and packed[1:3] == bodies[1:3]


@pytest.mark.parametrize(
    ("raw", "sizes", "code"),
    [
        (b"abc", b"", ResponseCode.REQUEST_WITH_EMPTY_BODYS),
        (b"abc", np.array([3, 0], "<u4").tobytes(), ResponseCode.REQUEST_WITH_EMPTY_BODYS),
        (b"abc", np.array([2], "<u4").tobytes(), ResponseCode.UNEXPECTED_ARGUMENT),
        (b"abc", np.array([3], "<u4").tobytes()[:3], ResponseCode.UNEXPECTED_ARGUMENT),
        (b"a" * 20, np.array([20], "<u4").tobytes(), ResponseCode.UNEXPECTED_ARGUMENT),  # over the limit
        ("abc", np.array([3], "<u4").tobytes(), ResponseCode.UNEXPECTED_ARGUMENT),
        (b"abc", [3], ResponseCode.UNEXPECTED_ARGUMENT),
        # sizes that wrap around in 32 bits must not add up to the buffer
        (b"abcd", np.array([0xFFFFFFFF, 5], "<u4").tobytes(), ResponseCode.UNEXPECTED_ARGUMENT),
    ],
)
def test_sizes_that_do_not_describe_the_buffer_are_refused(raw, sizes, code):
    with pytest.raises(DLedgerError) as err:
        PackedBodies.from_wire(raw, sizes, 10)
    assert err.value.code == code


def test_memory_store_takes_a_packed_batch():
    store = MemoryStore(max_body_size=1 << 20)
    bodies = [b"one", b"two", b"three"]
    first, _ = store.append_batch_as_leader(_wire(bodies), 1)
    assert [store.get(first + k).body for k in range(3)] == bodies


def _framed(bodies: list[bytes]) -> FramedBodies:
    gap = FramedBodies.GAP
    offsets = np.zeros(len(bodies) + 1, dtype=np.int64)
    np.cumsum([gap + len(b) for b in bodies], out=offsets[1:])
    buf = bytearray(int(offsets[-1]))
    for k, b in enumerate(bodies):
        buf[int(offsets[k]) + gap : int(offsets[k + 1])] = b
    return FramedBodies(buf, offsets)


@pytest.mark.parametrize("form", [_wire, _framed], ids=["packed", "framed"])
def test_file_store_writes_a_batch_form_as_it_writes_the_list(tmp_path, form):
    # Byte for byte, across segment ends (64 KiB data files), and read back body by body: the
    # packed form (one buffer and sizes) and the framed one (headers written in place, one
    # pwrite a data file) leave the files a list of bodies leaves.
    bodies = [os.urandom(1 + (i * 37) % 3000) for i in range(400)]
    batch = form(bodies)
    assert len(batch) == len(bodies) and list(batch) == bodies and batch[1:3] == bodies[1:3]
    stores = [MmapFileStore(tmp_path / name / "dledger-n0", CFG, start_services=False) for name in ("a", "b")]
    firsts = []
    for store, appended in zip(stores, (bodies, batch), strict=True):
        first, positions = store.append_batch_as_leader(appended, 3)
        firsts.append((first, [int(p) for p in positions]))  # a list, or the framed form's int64 array
        assert [store.get(first + k).body for k in range(len(bodies))] == bodies
        store.close()
    assert firsts[0] == firsts[1]
    for sub in ("data", "index"):
        a = sorted((tmp_path / "a" / "dledger-n0" / sub).iterdir())
        b = sorted((tmp_path / "b" / "dledger-n0" / sub).iterdir())
        assert [p.name for p in a] == [p.name for p in b]
        assert all(x.read_bytes() == y.read_bytes() for x, y in zip(a, b, strict=True))


def test_memory_store_takes_a_framed_batch():
    store = MemoryStore(max_body_size=1 << 20)
    bodies = [b"one", b"two", b"three"]
    first, _ = store.append_batch_as_leader(_framed(bodies), 1)
    assert [store.get(first + k).body for k in range(3)] == bodies
