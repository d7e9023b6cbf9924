"""How the client cuts a batch into append requests (dledger.client._chunks): in order, within
the per-request limits, each piece with the sizes its packed request carries."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dledger import client
from dledger.packed import PackedBodies


def _check(bodies: list[bytes]) -> None:
    chunks = client._chunks(bodies)
    assert [b for piece, _ in chunks for b in piece] == [bytes(b) for b in bodies]
    for piece, sizes in chunks:
        assert piece and all(type(b) is bytes for b in piece)
        assert sizes.tolist() == [len(b) for b in piece]
        assert len(piece) <= client.BATCH_MAX_BODIES
        assert sum(sizes.tolist()) <= client.BATCH_MAX_BYTES or len(piece) == 1
        raw, wire_sizes = PackedBodies.pack(piece, sizes)
        assert list(PackedBodies.from_wire(raw, wire_sizes, 1 << 30)) == piece


@given(st.lists(st.integers(1, 3_000_000), max_size=12))
@settings(max_examples=40, deadline=None)
def test_big_bodies_split_by_bytes(lengths: list[int]) -> None:
    _check([b"x" * n for n in lengths])


def test_many_small_bodies_split_by_count_and_other_buffers_become_bytes() -> None:
    bodies: list = [b"%d" % i for i in range(10_000)]
    bodies[5] = bytearray(b"ba")
    bodies[7000] = memoryview(b"mv")
    _check(bodies)
    assert [len(p) for p, _ in client._chunks(bodies)] == [4096, 4096, 1808]
    assert client._chunks([]) == []


def test_one_request_when_it_fits() -> None:
    [(piece, sizes)] = client._chunks([b"a", b"bb"])
    assert piece == [b"a", b"bb"] and sizes.dtype == np.dtype("<u4")
