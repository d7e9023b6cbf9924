"""``EntryLog.append_framed`` / ``MmapFileStore.append_framed``: entries the caller framed in one
buffer (48 bytes left before each body) are stored byte for byte as ``append_batch`` stores the
same bodies: headers, body CRCs, the AppendHook's stamp, index units and blanks at file ends."""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dledger.codes import ResponseCode
from dledger.config import DLedgerConfig
from dledger.errors import DLedgerError
from dledger.store.file import MmapFileStore
from dledger.store.properties import read_properties
from tests.format_oracle import decode_header, decode_index

HEADER = 48


def frame(bodies: list[bytes]) -> tuple[bytearray, np.ndarray]:
    """The bodies with 48 bytes of room before each (garbage there: the store must overwrite it)."""
    buf = bytearray()
    offsets = [0]
    for b in bodies:
        buf += b"\xee" * HEADER + b
        offsets.append(len(buf))
    return buf, np.array(offsets, dtype=np.int64)


def files_of(path: Path) -> dict[str, object]:
    """Every file's bytes; the checkpoint's properties (its first line is the time it was written)."""
    return {
        str(p.relative_to(path)): read_properties(p) if p.name == "checkpoint" else p.read_bytes()
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


def _open(path: Path, cfg: DLedgerConfig, patch: int | None) -> MmapFileStore:
    return MmapFileStore(path, cfg, start_services=False, body_pos_patch=patch)


SMALL = DLedgerConfig(mapped_file_size_for_entry_data=4096, mapped_file_size_for_entry_index=32 * 16)


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(st.lists(st.binary(min_size=36, max_size=700), min_size=1, max_size=20), min_size=1, max_size=6),
    patch=st.sampled_from([None, 0, 28]),
    term=st.integers(min_value=0, max_value=5),
)
def test_framed_appends_store_what_append_batch_stores(
    tmp_path_factory: pytest.TempPathFactory, batches: list[list[bytes]], patch: int | None, term: int
) -> None:
    root = tmp_path_factory.mktemp("framed")
    a = _open(root / "a", SMALL, patch)
    b = _open(root / "b", SMALL, patch)
    for bodies in batches:
        fa, pa = a.append_batch(bodies, term)
        buf, offs = frame(bodies)
        fb, pb = b.append_framed(buf, offs, term)
        assert (fa, pa.tolist()) == (fb, pb.tolist())
    assert (a.ledger_end_index, a.ledger_end_term) == (b.ledger_end_index, b.ledger_end_term)
    a.close()
    b.close()
    assert files_of(root / "a") == files_of(root / "b")


def test_framed_entries_against_the_oracle(tmp_path: Path) -> None:
    store = _open(tmp_path / "n0", SMALL, 28)
    bodies = [os.urandom(40 + k * 37 % 500) for k in range(40)]
    buf, offs = frame(bodies)
    first, positions = store.append_framed(buf, offs, 3)
    assert first == 0
    data = store._log.data
    assert len(data.files) > 1  # the batch crossed files
    for k, body in enumerate(bodies):
        pos = int(positions[k])
        f = data.find(pos)
        assert f is not None
        raw = bytes(f.read(pos - f.file_from_offset, HEADER + len(body)))
        magic, size, index, term, hpos, channel, chain, crc, body_size = decode_header(raw)
        stored = body[:28] + struct.pack(">q", pos + HEADER) + body[36:]
        assert (magic, size, index, term, hpos, channel, chain, body_size) == (
            1,
            HEADER + len(body),
            k,
            3,
            pos,
            0,
            0,
            len(body),
        )
        assert raw[HEADER:] == stored
        assert crc == zlib.crc32(stored)
        xf = store._log.index.find(k * 32)
        assert xf is not None
        unit = decode_index(bytes(xf.read(k * 32 - xf.file_from_offset, 32)))
        assert unit == (1, pos, HEADER + len(body), k, 3)
        assert store.get(k).body == stored
    store.close()


def test_framed_refusals_change_nothing(tmp_path: Path) -> None:
    store = _open(tmp_path / "n0", SMALL, 28)
    store.append_batch([b"x" * 40], 2)
    before = (store.ledger_end_index, store._log.data.max_wrote_position)
    cases: list[tuple[bytearray, np.ndarray, int, type[Exception], int | None]] = []
    buf, offs = frame([b"y" * 40, b"z" * 20])  # the second has no room for the stamp
    cases.append((buf, offs, 2, DLedgerError, ResponseCode.UNEXPECTED_ARGUMENT))
    buf, offs = frame([b"y" * 40])
    cases.append((buf, offs, 1, DLedgerError, ResponseCode.INCONSISTENT_TERM))  # term below the end term
    cases.append((buf, np.array([0, len(buf) - 1], dtype=np.int64), 2, ValueError, None))  # not spanning
    cases.append((bytearray(HEADER), np.array([0, HEADER], dtype=np.int64), 2, DLedgerError, None))  # empty body
    cases.append((bytearray(10), np.array([0, 10], dtype=np.int64), 2, ValueError, None))  # no room for a header
    cases.append((bytearray(), np.array([0], dtype=np.int64), 2, DLedgerError, None))  # nothing
    big = frame([b"b" * 5000])
    cases.append((big[0], big[1], 2, DLedgerError, ResponseCode.UNEXPECTED_ARGUMENT))  # over the max body
    for buf, offs, term, exc, code in cases:
        with pytest.raises(exc) as info:
            store.append_framed(buf, offs, term)
        if code is not None:
            assert info.value.code == code  # type: ignore[attr-defined]
        assert (store.ledger_end_index, store._log.data.max_wrote_position) == before
    ro, ro_offs = frame([b"q" * 40])
    with pytest.raises(BufferError):
        store.append_framed(bytes(ro), ro_offs, 2)  # type: ignore[arg-type]  # the headers are written into the buffer
    assert (store.ledger_end_index, store._log.data.max_wrote_position) == before
    store.close()


def test_framed_writes_through_populated_pages(tmp_path: Path) -> None:
    # Where the service has populated the pages ahead, the entries go through the mapping.
    cfg = DLedgerConfig(mapped_file_size_for_entry_data=1 << 20)
    a = _open(tmp_path / "a", cfg, 28)
    b = _open(tmp_path / "b", cfg, 28)
    bodies = [os.urandom(100 + k) for k in range(64)]
    a.append_batch(bodies[:1], 1)
    b.append_batch(bodies[:1], 1)
    f = b._log.data.files[-1]
    assert f.populate(0, 1 << 16) in (True, False)  # False: a kernel without MADV_POPULATE_WRITE
    buf, offs = frame(bodies[1:])
    b.append_framed(buf, offs, 1)
    a.append_batch(bodies[1:], 1)
    a.close()
    b.close()
    assert files_of(tmp_path / "a") == files_of(tmp_path / "b")
