"""The pure-Python twin of the entry kernels (``dledger._ext.codec``), written with ``struct``
straight from DLedger's DLedgerEntry and DLedgerEntryCoder field lists.

The oracle the kernels and ``dledger.store.layout`` are tested against (``from tests import
format_oracle``); the library never imports it. Slow and plain on purpose.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

HEADER = struct.Struct(">iiqqqiIIi")  # magic size index term pos channel chainCrc bodyCrc bodySize
INDEX_UNIT = struct.Struct(">iqiqq")  # magic pos size index term
BLANK = struct.Struct(">ii")
BODY_OFFSET = 48
HEADER_SIZE = 44
CURRENT_MAGIC = 1
BLANK_MAGIC_CODE = -1

END, BLANK_RECORD, ZERO, BAD, CRC, LIMIT = range(6)


def encode_entry(
    index: int,
    term: int,
    pos: int,
    body: bytes,
    magic: int = 1,
    channel: int = 0,
    chain_crc: int = 0,
    body_crc: int | None = None,
) -> bytes:
    crc = zlib.crc32(body) if body_crc is None else body_crc & 0xFFFFFFFF
    return HEADER.pack(
        magic, BODY_OFFSET + len(body), index, term, pos, channel, chain_crc & 0xFFFFFFFF, crc, len(body)
    ) + bytes(body)


def decode_header(buf: bytes | memoryview, offset: int = 0) -> tuple[int, ...]:
    return HEADER.unpack_from(buf, offset)


def encode_index(magic: int, pos: int, size: int, index: int, term: int) -> bytes:
    return INDEX_UNIT.pack(magic, pos, size, index, term)


def decode_index(buf: bytes | memoryview, offset: int = 0) -> tuple[int, ...]:
    return INDEX_UNIT.unpack_from(buf, offset)


def encode_batch(bodies: Sequence[bytes], first_index: int, term: int, first_pos: int) -> bytes:
    out = bytearray()
    for k, body in enumerate(bodies):
        out += encode_entry(first_index + k, term, first_pos + len(out), body)
    return bytes(out)


def scan(
    buf: bytes | memoryview,
    base_pos: int,
    start: int = 0,
    end: int = -1,
    expect_index: int = -1,
    prev_term: int = -1,
    check_crc: bool = False,
    max_entries: int = -1,
) -> tuple[list[tuple[int, int, int, int, int, int, int, int]], int, int]:
    """Entries as tuples (index, term, pos, size, magic, body_offset, body_len, body_crc),
    the stop offset and the stop code, with the kernel's rules."""
    n = len(buf)
    end = n if end < 0 or end > n else end
    out: list[tuple[int, int, int, int, int, int, int, int]] = []
    off = start
    while True:
        if 0 <= max_entries <= len(out):
            return out, off, LIMIT
        if off >= end:
            return out, off, END
        if end - off < 4:
            return out, off, BAD
        (magic,) = struct.unpack_from(">i", buf, off)
        if magic == BLANK_MAGIC_CODE:
            return out, off, BLANK_RECORD
        if magic == 0:
            return out, off, ZERO
        if end - off < BODY_OFFSET:
            return out, off, BAD
        magic, size, index, term, pos, _ch, _cc, body_crc, body_size = HEADER.unpack_from(buf, off)
        if not (
            magic == CURRENT_MAGIC
            and size > HEADER_SIZE
            and body_size >= 0
            and body_size + BODY_OFFSET == size
            and size <= end - off
            and pos == base_pos + off
            and (expect_index < 0 or index == expect_index)
            and index >= 0
            and term >= prev_term
        ):
            return out, off, BAD
        if check_crc and body_crc != 0:
            if zlib.crc32(bytes(buf[off + BODY_OFFSET : off + size])) != body_crc:
                return out, off, CRC
        out.append((index, term, pos, size, magic, off + BODY_OFFSET, body_size, body_crc))
        expect_index, prev_term = index + 1, term
        off += size
