"""The layout module (dledger.store.layout): its constants agree with the struct oracle, and the
node directory is listed and its checkpoint read as the store, the verifier and the reader expect."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from dledger._ext import codec
from dledger.errors import DLedgerError
from dledger.store import layout
from dledger.store.properties import write_properties
from tests import format_oracle as oracle


def test_constants_agree_with_the_struct_oracle() -> None:
    # The oracle is written from DLedgerEntry's field list; the kernels export dl_format.h.
    assert layout.BODY_OFFSET == oracle.HEADER.size == 48
    assert layout.HEADER_SIZE == oracle.HEADER_SIZE == struct.calcsize(">iiqqqiII")
    assert layout.POS_OFFSET == struct.calcsize(">iiqq")
    assert layout.INDEX_UNIT_SIZE == oracle.INDEX_UNIT.size == 32
    assert layout.MIN_BLANK_LEN == oracle.BLANK.size == 8
    assert layout.MAGIC_1 == layout.CURRENT_MAGIC == oracle.CURRENT_MAGIC
    assert layout.BLANK_MAGIC_CODE == oracle.BLANK_MAGIC_CODE
    assert (layout.BODY_OFFSET, layout.INDEX_UNIT_SIZE) == (codec.BODY_OFFSET, codec.INDEX_UNIT_SIZE)


def test_dtypes_decode_what_the_oracle_encodes() -> None:
    raw = oracle.encode_entry(7, 3, 4096, b"body", channel=5, chain_crc=0xFFFFFFFE)
    header = np.frombuffer(raw, dtype=layout.HEADER_DTYPE, count=1)[0]
    assert layout.HEADER_DTYPE.itemsize == layout.BODY_OFFSET
    assert layout.HEADER_DTYPE.fields is not None and layout.HEADER_DTYPE.fields["pos"][1] == layout.POS_OFFSET
    assert tuple(int(v) for v in header.item()) == oracle.decode_header(raw)
    unit = oracle.encode_index(1, 4096, 52, 7, 3)
    assert layout.INDEX_DTYPE.itemsize == layout.INDEX_UNIT_SIZE
    assert tuple(int(v) for v in np.frombuffer(unit, dtype=layout.INDEX_DTYPE)[0].item()) == oracle.decode_index(unit)


def test_list_segments_takes_20_digit_names_in_offset_order(tmp_path: Path) -> None:
    for offset in (8192, 0, 4096):
        (tmp_path / f"{offset:020d}").write_bytes(bytes(4096))
    (tmp_path / f".{0:020d}.tmp").write_bytes(b"being created")
    (tmp_path / "notes.txt").write_bytes(b"stray")
    files = layout.list_segments(tmp_path)
    assert [(f.offset, f.size) for f in files] == [(0, 4096), (4096, 4096), (8192, 4096)]
    assert layout.segment_size_of(tmp_path) == 4096
    assert layout.list_segments(tmp_path / "missing") == [] and layout.segment_size_of(tmp_path / "missing") is None


def test_mixed_segment_sizes_are_a_disk_error(tmp_path: Path) -> None:
    (tmp_path / f"{0:020d}").write_bytes(bytes(4096))
    (tmp_path / f"{4096:020d}").write_bytes(bytes(2048))
    with pytest.raises(DLedgerError, match="mixed sizes"):
        layout.segment_size_of(tmp_path)
    files = layout.list_segments(tmp_path)
    assert layout.check_one_size(tmp_path, files[:1], 4096) == 4096


def test_checkpoint_round_trip_and_lazy_parse(tmp_path: Path) -> None:
    assert layout.read_checkpoint(tmp_path) is None
    layout.write_checkpoint(tmp_path, 41, 40)
    ckpt = layout.read_checkpoint(tmp_path)
    assert ckpt is not None and (ckpt.end_index, ckpt.committed_index) == (41, 40)
    # Damage to one key fails only the reader of that key.
    write_properties(tmp_path / layout.CHECK_POINT_FILE, {"endIndex": "x", "committedIndex": 3})
    ckpt = layout.read_checkpoint(tmp_path)
    assert ckpt is not None and ckpt.committed_index == 3
    with pytest.raises(DLedgerError, match="endIndex is not a number"):
        _ = ckpt.end_index


def test_is_store_dir(tmp_path: Path) -> None:
    assert not layout.is_store_dir(tmp_path)
    (tmp_path / layout.INDEX_DIR).mkdir()
    assert layout.is_store_dir(tmp_path)
