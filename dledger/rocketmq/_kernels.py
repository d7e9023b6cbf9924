"""The message kernels: ``dledger._ext.message`` when it is built, else a pure-Python twin.

The twin follows the kernel API of the shared plan (same names, arguments and columns); it is
slow and exists so the store works (and its tests run) on a checkout whose extension is older
than this package. Every caller imports the kernels from here.
"""

from __future__ import annotations

import importlib
import struct
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

MESSAGE_MAGIC_CODE = -626843481
BLANK_MAGIC_CODE = -875286124
QUEUE_OFFSET_POSITION = 20
PHY_POS_POSITION = 28
SYSFLAG_POSITION = 36
END_FILE_MIN_BLANK_LENGTH = 8
CQ_UNIT_SIZE = 20
STOP_END, STOP_BLANK, STOP_ZERO, STOP_BAD, STOP_CRC, STOP_LIMIT = range(6)
STOP_NAMES = ("end", "blank", "zero", "bad", "crc", "limit")
DLEDGER_BODY_OFFSET = 48

_COLS_I64 = ("phys_offset", "queue_offset", "stored_phys_offset", "born_timestamp", "born_host_off",
             "store_timestamp", "store_host_off", "prepared_offset", "body_off", "topic_off", "props_off")
_COLS_I32 = ("size", "body_crc", "queue_id", "flag", "sys_flag", "reconsume_times", "body_len", "topic_len",
             "props_len")


def _py_record_length(sys_flag: int, body_len: int, topic_len: int, props_len: int) -> int:
    born = 20 if sys_flag & 16 else 8
    store = 20 if sys_flag & 32 else 8
    return 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + born + 8 + store + 4 + 8 + 4 + body_len + 1 + topic_len + 2 + props_len


def _py_record_lengths(sys_flags: Any, body_lens: Any, topic_lens: Any, props_lens: Any) -> np.ndarray:
    sf = np.asarray(sys_flags, dtype=np.int64)
    return (91 + np.asarray(body_lens, dtype=np.int64) + np.asarray(topic_lens, dtype=np.int64)
            + np.asarray(props_lens, dtype=np.int64) + np.where(sf & 16, 12, 0) + np.where(sf & 32, 12, 0))


def _py_encode_records(bodies: Sequence[Any], topics: Sequence[bytes], properties: Sequence[bytes], queue_ids: Any,
                       flags: Any, queue_offsets: Any, phys_offsets: Any, sys_flags: Any, born_timestamps: Any,
                       born_hosts: Sequence[bytes], store_timestamps: Any, store_hosts: Sequence[bytes],
                       reconsume_times: Any, prepared_offsets: Any) -> tuple[bytes, np.ndarray]:
    out = bytearray()
    starts = [0]
    for i in range(len(bodies)):
        body = bytes(bodies[i])
        topic, props = topics[i], properties[i]
        sf = int(sys_flags[i])
        if len(topic) > 127 or len(props) > 32767:
            raise ValueError("topic or properties too long")
        if len(born_hosts[i]) != (20 if sf & 16 else 8) or len(store_hosts[i]) != (20 if sf & 32 else 8):
            raise ValueError("host length disagrees with the v6 bits of sys_flag")
        size = _py_record_length(sf, len(body), len(topic), len(props))
        out += struct.pack(">iiiiiqqiq", size, MESSAGE_MAGIC_CODE, zlib.crc32(body) & 0x7FFFFFFF, int(queue_ids[i]),
                           int(flags[i]), int(queue_offsets[i]), int(phys_offsets[i]), sf, int(born_timestamps[i]))
        out += born_hosts[i]
        out += struct.pack(">q", int(store_timestamps[i]))
        out += store_hosts[i]
        out += struct.pack(">iqi", int(reconsume_times[i]), int(prepared_offsets[i]), len(body))
        out += body
        out += struct.pack(">B", len(topic)) + topic + struct.pack(">h", len(props)) + props
        starts.append(len(out))
    return bytes(out), np.asarray(starts, dtype=np.int64)


def _scan_one(mv: memoryview, pos: int, end: int, check_crc: bool) -> tuple[int, dict[str, int] | None]:
    if end - pos < 8:
        return (STOP_END if pos >= end else STOP_BAD), None
    size, magic = struct.unpack_from(">ii", mv, pos)
    if magic == BLANK_MAGIC_CODE:
        return STOP_BLANK, None
    if size == 0 and magic == 0:
        return STOP_ZERO, None
    if magic != MESSAGE_MAGIC_CODE or size < 91 or pos + size > end:
        return STOP_BAD, None
    body_crc, queue_id, flag, queue_offset, stored_phys, sys_flag, born_ts = struct.unpack_from(
        ">iiiqqiq", mv, pos + 8)
    p = pos + 48
    born_off = p
    p += 20 if sys_flag & 16 else 8
    (store_ts,) = struct.unpack_from(">q", mv, p)
    p += 8
    store_off = p
    p += 20 if sys_flag & 32 else 8
    reconsume, prepared, body_len = struct.unpack_from(">iqi", mv, p)
    p += 16
    body_off = p
    if body_len < 0 or p + body_len > pos + size:
        return STOP_BAD, None
    p += body_len
    topic_len = mv[p]
    topic_off = p + 1
    p = topic_off + topic_len
    if p + 2 > pos + size:
        return STOP_BAD, None
    (props_len,) = struct.unpack_from(">h", mv, p)
    props_off = p + 2
    if props_len < 0 or _py_record_length(sys_flag, body_len, topic_len, props_len) != size:
        return STOP_BAD, None
    if check_crc and zlib.crc32(mv[body_off:body_off + body_len]) & 0x7FFFFFFF != body_crc:
        return STOP_CRC, None
    return -1, dict(size=size, body_crc=body_crc, queue_id=queue_id, flag=flag, queue_offset=queue_offset,
                    stored_phys_offset=stored_phys, sys_flag=sys_flag, born_timestamp=born_ts,
                    born_host_off=born_off, store_timestamp=store_ts, store_host_off=store_off,
                    reconsume_times=reconsume, prepared_offset=prepared, body_off=body_off, body_len=body_len,
                    topic_off=topic_off, topic_len=topic_len, props_off=props_off, props_len=props_len)


def _columns(rows: list[dict[str, int]]) -> dict[str, np.ndarray]:
    cols: dict[str, np.ndarray] = {}
    for name in (*_COLS_I64, "entry_index"):
        cols[name] = np.asarray([r.get(name, 0) for r in rows], dtype=np.int64)
    for name in _COLS_I32:
        cols[name] = np.asarray([r[name] for r in rows], dtype=np.int32)
    return cols


def _py_scan_records(buf: Any, base_offset: int, start: int = 0, end: int = -1, check_crc: bool = False,
                     max_records: int = -1) -> tuple[dict[str, np.ndarray], int, int]:
    mv = memoryview(buf).cast("B")
    end = len(mv) if end < 0 else min(end, len(mv))
    pos, code = start, STOP_END
    rows: list[dict[str, int]] = []
    while True:
        if 0 <= max_records <= len(rows):
            code = STOP_LIMIT
            break
        if pos >= end:
            code = STOP_END
            break
        code, row = _scan_one(mv, pos, end, check_crc)
        if row is None:
            break
        row["phys_offset"] = base_offset + pos
        rows.append(row)
        pos += row["size"]
    cols = _columns(rows)
    del cols["entry_index"]
    return cols, pos, code


def _py_scan_dledger_records(buf: Any, base_pos: int, start: int = 0, end: int = -1, check_crc: bool = False,
                             max_records: int = -1) -> tuple[dict[str, np.ndarray], int, int]:
    mv = memoryview(buf).cast("B")
    end = len(mv) if end < 0 else min(end, len(mv))
    pos, code = start, STOP_END
    rows: list[dict[str, int]] = []
    while True:
        if 0 <= max_records <= len(rows):
            code = STOP_LIMIT
            break
        if pos >= end:
            code = STOP_END
            break
        if end - pos < 8:
            code = STOP_BAD
            break
        magic, esize = struct.unpack_from(">ii", mv, pos)
        if magic == -1:
            code = STOP_BLANK
            break
        if magic == 0 and esize == 0:
            code = STOP_ZERO
            break
        if esize < DLEDGER_BODY_OFFSET or pos + esize > end:
            code = STOP_BAD
            break
        (index,) = struct.unpack_from(">q", mv, pos + 8)
        rec_end = pos + esize
        code, row = _scan_one(mv[:rec_end], pos + DLEDGER_BODY_OFFSET, rec_end, check_crc)
        if row is None:
            if code in (STOP_END, STOP_ZERO, STOP_BLANK):
                code = STOP_BAD
            break
        row["phys_offset"] = base_pos + pos + DLEDGER_BODY_OFFSET
        row["entry_index"] = index
        rows.append(row)
        pos = rec_end
    return _columns(rows), pos, code


def _py_property_spans(buf: Any, props_off: Any, props_len: Any, name: bytes) -> tuple[np.ndarray, np.ndarray]:
    mv = bytes(memoryview(buf).cast("B"))
    n = len(props_off)
    offs = np.full(n, -1, dtype=np.int64)
    lens = np.zeros(n, dtype=np.int32)
    for i in range(n):
        o, ln = int(props_off[i]), int(props_len[i])
        text = mv[o:o + ln]
        # string2messageProperties: a later pair with the same name wins
        p = 0
        while p < ln:
            q = text.find(b"\x02", p)
            q = ln if q < 0 else q
            if q - p >= 3:
                s = text.find(b"\x01", p, q)
                if p < s < q - 1 and text[p:s] == name:
                    offs[i], lens[i] = o + s + 1, q - s - 1
            p = q + 1
    return offs, lens


def _py_java_hash(s: str) -> int:
    h = 0
    for unit in struct.unpack(f"<{len(s.encode('utf-16-le')) // 2}H", s.encode("utf-16-le")):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _py_java_hash_many(buf: Any, offs: Any, lens: Any) -> np.ndarray:
    mv = memoryview(buf).cast("B")
    out = np.zeros(len(offs), dtype=np.int32)
    for i in range(len(offs)):
        if int(offs[i]) >= 0:
            out[i] = _py_java_hash(bytes(mv[int(offs[i]):int(offs[i]) + int(lens[i])]).decode("utf-8", "replace"))
    return out


def _py_consume_queue_units(phys_offsets: Any, sizes: Any, tags_codes: Any) -> bytes:
    units = np.empty(len(phys_offsets), dtype=[("o", ">i8"), ("s", ">i4"), ("t", ">i8")])
    units["o"], units["s"], units["t"] = phys_offsets, sizes, tags_codes
    return units.tobytes()


_ext: Any
try:
    _ext = importlib.import_module("dledger._ext.message")
    HAVE_EXT = True
except ImportError:  # pragma: no cover - depends on the build
    _ext = None
    HAVE_EXT = False

record_lengths: Any = _ext.record_lengths if HAVE_EXT else _py_record_lengths
encode_records: Any = _ext.encode_records if HAVE_EXT else _py_encode_records
scan_records: Any = _ext.scan_records if HAVE_EXT else _py_scan_records
scan_dledger_records: Any = _ext.scan_dledger_records if HAVE_EXT else _py_scan_dledger_records
property_spans: Any = _ext.property_spans if HAVE_EXT else _py_property_spans
java_hash: Any = _ext.java_hash if HAVE_EXT else _py_java_hash
java_hash_many: Any = _ext.java_hash_many if HAVE_EXT else _py_java_hash_many
consume_queue_units: Any = _ext.consume_queue_units if HAVE_EXT else _py_consume_queue_units
