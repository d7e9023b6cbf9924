"""Entry/index encode and decode, batch encode and batch scan (Cython: _ext/codec.pyx)."""

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray
from typing_extensions import Buffer

MAGIC_1: int
CURRENT_MAGIC: int
BLANK_MAGIC_CODE: int
POS_OFFSET: int
HEADER_SIZE: int
BODY_OFFSET: int
INDEX_UNIT_SIZE: int
MIN_BLANK_LEN: int
SCAN_END: int
SCAN_BLANK: int
SCAN_ZERO: int
SCAN_BAD: int
SCAN_CRC: int
SCAN_LIMIT: int
STOP_NAMES: dict[int, str]
COLUMNS: tuple[str, ...]

def encode_entry(
    index: int,
    term: int,
    pos: int,
    body: Buffer,
    magic: int = 1,
    channel: int = 0,
    chain_crc: int = 0,
    body_crc: int | None = None,
) -> bytes: ...
def decode_header(buf: Buffer, offset: int = 0) -> tuple[int, int, int, int, int, int, int, int, int]: ...
def encode_index(magic: int, pos: int, size: int, index: int, term: int) -> bytes: ...
def decode_index(buf: Buffer, offset: int = 0) -> tuple[int, int, int, int, int]: ...
def encode_batch(
    bodies: Sequence[Buffer], first_index: int, term: int, first_pos: int, magic: int = 1, with_crc: bool = True
) -> tuple[bytes, NDArray[np.int64]]: ...
def scan(
    buf: Buffer,
    base_pos: int,
    start: int = 0,
    end: int = -1,
    expect_index: int = -1,
    prev_term: int = -1,
    check_crc: bool = False,
    max_entries: int = -1,
) -> tuple[dict[str, np.ndarray], int, int]: ...
def check_run(
    buf: Buffer,
    base_pos: int,
    expect_index: int = -1,
    prev_term: int = -1,
    check_crc: bool = False,
) -> tuple[int, int, int, int, int]: ...
def decode_index_units(buf: Buffer, start: int = 0, count: int = -1) -> dict[str, np.ndarray]: ...
