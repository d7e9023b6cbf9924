"""A pure-Python ``struct`` twin of ``dledger._ext.message``, written from
RocketMQ 4.9.4's CommitLog / MessageDecoder / IndexFile: the oracle the kernels are tested
against, importable by every message-store test (``from record_oracle import ...``).

Slow and plain on purpose: one record at a time, no cleverness.
"""

from __future__ import annotations

import codecs
import ipaddress
import struct
import zlib
from typing import Any

import numpy as np

MESSAGE_MAGIC_CODE = -626843481
BLANK_MAGIC_CODE = -875286124
QUEUE_OFFSET_POSITION = 20
PHY_POS_POSITION = 28
SYSFLAG_POSITION = 36
END_FILE_MIN_BLANK_LENGTH = 8
CQ_UNIT_SIZE = 20
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
BORNHOST_V6_FLAG = 0x10
STOREHOSTADDRESS_V6_FLAG = 0x20

STOP_END, STOP_BLANK, STOP_ZERO, STOP_BAD, STOP_CRC, STOP_LIMIT = range(6)

DL_BODY_OFFSET = 48
DL_HEADER = struct.Struct(">iiqqqiIIi")  # magic size index term pos channel chainCrc bodyCrc bodySize

INDEX_HEADER_SIZE = 40
INDEX_SLOT_SIZE = 4
INDEX_ITEM_SIZE = 20
INDEX_HEADER = struct.Struct(">qqqqii")  # beginTs endTs beginPhy endPhy hashSlotCount indexCount
INDEX_ITEM = struct.Struct(">iqii")  # keyHash phyOffset timeDiff prevIndex

# Fields 1-9 of the record: size magic bodyCrc queueId flag queueOffset physicalOffset sysFlag bornTimestamp.
_HEAD = struct.Struct(">iiiiiqqiq")

COLUMNS = (
    "phys_offset",
    "size",
    "body_crc",
    "queue_id",
    "flag",
    "queue_offset",
    "stored_phys_offset",
    "sys_flag",
    "born_timestamp",
    "born_host_off",
    "store_timestamp",
    "store_host_off",
    "reconsume_times",
    "prepared_offset",
    "body_off",
    "body_len",
    "topic_off",
    "topic_len",
    "props_off",
    "props_len",
)


def body_crc(body: bytes) -> int:
    """RocketMQ's UtilAll.crc32: CRC-32 with the sign bit cleared."""
    return zlib.crc32(body) & 0x7FFFFFFF


def host_len(sys_flag: int, v6_flag: int) -> int:
    return 20 if sys_flag & v6_flag else 8


def record_length(sys_flag: int, body_len: int, topic_len: int, props_len: int) -> int:
    """CommitLog.calMsgLength."""
    return (
        4
        + 4
        + 4
        + 4
        + 4
        + 8
        + 8
        + 4
        + 8
        + host_len(sys_flag, BORNHOST_V6_FLAG)
        + 8
        + host_len(sys_flag, STOREHOSTADDRESS_V6_FLAG)
        + 4
        + 8
        + 4
        + max(body_len, 0)
        + 1
        + topic_len
        + 2
        + max(props_len, 0)
    )


def host_bytes(ip: str, port: int) -> bytes:
    """A BORNHOST / STOREHOSTADDRESS field: the address (4 or 16 bytes), then the port as int."""
    return ipaddress.ip_address(ip).packed + struct.pack(">i", port)


def encode_record(
    body: bytes,
    topic: bytes,
    properties: bytes = b"",
    *,
    queue_id: int = 0,
    flag: int = 0,
    queue_offset: int = 0,
    phys_offset: int = 0,
    sys_flag: int = 0,
    born_timestamp: int = 0,
    born_host: bytes = b"\x7f\x00\x00\x01\x00\x00\x00\x01",
    store_timestamp: int = 0,
    store_host: bytes = b"\x7f\x00\x00\x01\x00\x00\x2a\x9f",
    reconsume_times: int = 0,
    prepared_offset: int = 0,
    crc: int | None = None,
) -> bytes:
    """One record as DefaultAppendMessageCallback.doAppend writes it (its 17 fields)."""
    if len(born_host) != host_len(sys_flag, BORNHOST_V6_FLAG):
        raise ValueError("born host length disagrees with BORNHOST_V6_FLAG")
    if len(store_host) != host_len(sys_flag, STOREHOSTADDRESS_V6_FLAG):
        raise ValueError("store host length disagrees with STOREHOSTADDRESS_V6_FLAG")
    if len(topic) > 127 or len(properties) > 32767:
        raise ValueError("topic over 127 bytes or properties over 32767 bytes")
    size = record_length(sys_flag, len(body), len(topic), len(properties))
    out = _HEAD.pack(
        size,
        MESSAGE_MAGIC_CODE,
        body_crc(body) if crc is None else crc,
        queue_id,
        flag,
        queue_offset,
        phys_offset,
        sys_flag,
        born_timestamp,
    )
    out += born_host + struct.pack(">q", store_timestamp) + store_host
    out += struct.pack(">iqi", reconsume_times, prepared_offset, len(body)) + body
    out += struct.pack(">b", len(topic)) + topic + struct.pack(">h", len(properties)) + properties
    assert len(out) == size
    return out


def encode_blank(length: int) -> bytes:
    """The END_OF_FILE record: ``length`` then BLANK_MAGIC_CODE (the rest of the file is unused)."""
    return struct.pack(">ii", length, BLANK_MAGIC_CODE)


class BadRecord(ValueError):
    def __init__(self, code: int, why: str) -> None:
        super().__init__(why)
        self.code = code


def decode_record(buf: bytes, offset: int = 0, end: int | None = None, check_crc: bool = False) -> dict[str, Any]:
    """The record at ``buf[offset:]`` (within ``end``) as a dict of COLUMNS (``*_off`` relative to
    ``buf``, ``phys_offset`` = ``offset``) plus ``body``, ``topic``, ``properties``, ``born_host``,
    ``store_host`` bytes. Raises BadRecord with the scan stop code when there is no record."""
    end = len(buf) if end is None else end
    avail = end - offset
    if avail < 4:
        if any(buf[offset:end]):
            raise BadRecord(STOP_BAD, "torn size field")
        raise BadRecord(STOP_ZERO, "unwritten")
    (size,) = struct.unpack_from(">i", buf, offset)
    if size == 0:
        raise BadRecord(STOP_ZERO, "size 0")
    if avail < 8:
        raise BadRecord(STOP_BAD, "torn magic")
    (magic,) = struct.unpack_from(">i", buf, offset + 4)
    if magic == BLANK_MAGIC_CODE:
        raise BadRecord(STOP_BLANK, "blank")
    if magic != MESSAGE_MAGIC_CODE:
        raise BadRecord(STOP_BAD, f"magic {magic:#x}")
    if size < record_length(0, 0, 0, 0) or size > avail:
        raise BadRecord(STOP_BAD, f"size {size}")
    rec = buf[offset : offset + size]
    (_, _, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts) = _HEAD.unpack_from(rec, 0)
    at = _HEAD.size
    bh = host_len(sys_flag, BORNHOST_V6_FLAG)
    sh = host_len(sys_flag, STOREHOSTADDRESS_V6_FLAG)
    fields: dict[str, Any] = {}
    try:
        fields["born_host"] = _take(rec, at, bh)
        fields["born_host_off"] = offset + at
        at += bh
        (store_ts,) = struct.unpack_from(">q", rec, at)
        at += 8
        fields["store_host"] = _take(rec, at, sh)
        fields["store_host_off"] = offset + at
        at += sh
        reconsume, prepared, body_len = struct.unpack_from(">iqi", rec, at)
        at += 16
        if body_len < 0:
            raise BadRecord(STOP_BAD, "negative body length")
        fields["body"] = _take(rec, at, body_len)
        fields["body_off"] = offset + at
        at += body_len
        (topic_len,) = struct.unpack_from(">b", rec, at)
        at += 1
        if topic_len < 0:
            raise BadRecord(STOP_BAD, "negative topic length")
        fields["topic"] = _take(rec, at, topic_len)
        fields["topic_off"] = offset + at
        at += topic_len
        (props_len,) = struct.unpack_from(">h", rec, at)
        at += 2
        if props_len < 0:
            raise BadRecord(STOP_BAD, "negative properties length")
        fields["properties"] = _take(rec, at, props_len)
        fields["props_off"] = offset + at
        at += props_len
    except struct.error as e:
        raise BadRecord(STOP_BAD, "field past the record") from e
    if at != size or record_length(sys_flag, body_len, topic_len, props_len) != size:
        raise BadRecord(STOP_BAD, "size is not the sum of the fields")
    if check_crc and body_len > 0 and body_crc(fields["body"]) != crc:
        raise BadRecord(STOP_CRC, "body crc")
    fields.update(
        phys_offset=offset,
        size=size,
        body_crc=crc,
        queue_id=queue_id,
        flag=flag,
        queue_offset=queue_offset,
        stored_phys_offset=phys,
        sys_flag=sys_flag,
        born_timestamp=born_ts,
        store_timestamp=store_ts,
        reconsume_times=reconsume,
        prepared_offset=prepared,
        body_len=body_len,
        topic_len=topic_len,
        props_len=props_len,
    )
    return fields


def _take(rec: bytes, at: int, n: int) -> bytes:
    if at + n > len(rec):
        raise BadRecord(STOP_BAD, "field past the record")
    return bytes(rec[at : at + n])


def scan_records(
    buf: bytes, base_offset: int, start: int = 0, end: int = -1, check_crc: bool = False, max_records: int = -1
) -> tuple[list[dict[str, Any]], int, int]:
    """Records of classic commit-log bytes ``buf[start:end]``: (records, stop offset, stop code);
    ``phys_offset`` is ``base_offset`` + position."""
    end = len(buf) if end < 0 or end > len(buf) else end
    out: list[dict[str, Any]] = []
    off = start
    while True:
        if 0 <= max_records <= len(out):
            return out, off, STOP_LIMIT
        if off >= end:
            return out, off, STOP_END
        try:
            rec = decode_record(buf, off, end, check_crc)
        except BadRecord as e:
            return out, off, e.code
        rec["phys_offset"] = base_offset + off
        out.append(rec)
        off += rec["size"]


def scan_dledger_records(
    buf: bytes, base_pos: int, start: int = 0, end: int = -1, check_crc: bool = False, max_records: int = -1
) -> tuple[list[dict[str, Any]], int, int]:
    """Records in DLedger entries of ``buf[start:end]`` (``buf[0]`` at ``base_pos``): each entry's
    body is one record, ``phys_offset`` = entry pos + 48; adds ``entry_index``."""
    end = len(buf) if end < 0 or end > len(buf) else end
    out: list[dict[str, Any]] = []
    off = start
    while True:
        if 0 <= max_records <= len(out):
            return out, off, STOP_LIMIT
        if off >= end:
            return out, off, STOP_END
        avail = end - off
        if avail < 4:
            return out, off, STOP_BAD if any(buf[off:end]) else STOP_ZERO
        (magic,) = struct.unpack_from(">i", buf, off)
        if magic == -1:
            return out, off, STOP_BLANK
        if magic == 0:
            return out, off, STOP_ZERO
        if avail < DL_BODY_OFFSET:
            return out, off, STOP_BAD
        _, size, index, _term, pos, _ch, _chain, ecrc, body_size = DL_HEADER.unpack_from(buf, off)
        if magic != 1 or body_size <= 0 or size != body_size + DL_BODY_OFFSET or size > avail:
            return out, off, STOP_BAD
        if pos != base_pos + off:
            return out, off, STOP_BAD
        body_at = off + DL_BODY_OFFSET
        if check_crc and ecrc != 0 and zlib.crc32(buf[body_at : off + size]) != ecrc:
            return out, off, STOP_CRC
        try:
            rec = decode_record(buf, body_at, off + size, check_crc)
        except BadRecord as e:
            return out, off, STOP_CRC if e.code == STOP_CRC else STOP_BAD
        if rec["size"] != body_size:
            return out, off, STOP_BAD
        rec["phys_offset"] = pos + DL_BODY_OFFSET
        rec["entry_index"] = index
        out.append(rec)
        off += size


def encode_dledger_entry(index: int, term: int, pos: int, body: bytes, body_crc: int = 0) -> bytes:
    """A DLedger entry (Java leaves bodyCrc 0)."""
    return DL_HEADER.pack(1, DL_BODY_OFFSET + len(body), index, term, pos, 0, 0, body_crc, len(body)) + body


# -- properties and hashes -----------------------------------------------------------------------


def parse_properties(props: str) -> dict[str, str]:
    """MessageDecoder.string2messageProperties: ``name\\x01value\\x02...``; an item needs a non-empty
    name and value; a later duplicate wins."""
    out: dict[str, str] = {}
    for item in props.split("\x02"):
        sep = item.find("\x01")
        if 0 < sep < len(item) - 1:
            out[item[:sep]] = item[sep + 1 :]
    return out


def message_decode(buf: bytes, phys_offset: int, client: bool = False) -> dict[str, Any]:
    """MessageDecoder.decode of the record at the start of ``buf`` into MessageExt's fields (the
    message id of the store host and ``phys_offset``; text decoded with replacement). ``client``:
    the message id a consumer's MessageClientExt gives, the UNIQ_KEY when there is one."""
    rec = decode_record(buf)

    def host(raw: bytes) -> tuple[str, int]:
        return str(ipaddress.ip_address(raw[:-4])), struct.unpack(">i", raw[-4:])[0]

    props_string = rec["properties"].decode("utf-8", "replace")
    props = parse_properties(props_string)
    delay = props.get("DELAY")
    offset_id = (rec["store_host"] + struct.pack(">q", phys_offset)).hex().upper()
    return {
        "topic": rec["topic"].decode("utf-8", "replace"),
        "body": rec["body"],
        "queue_id": rec["queue_id"],
        "flag": rec["flag"],
        "tags": props.get("TAGS"),
        "keys": props.get("KEYS"),
        "properties": props,
        "delay_level": int(delay) if delay and delay.isdigit() else 0,
        "sys_flag": rec["sys_flag"],
        "born_timestamp": rec["born_timestamp"],
        "born_host": host(rec["born_host"]),
        "reconsume_times": rec["reconsume_times"],
        "prepared_offset": rec["prepared_offset"],
        "queue_offset": rec["queue_offset"],
        "phys_offset": phys_offset,
        "size": rec["size"],
        "store_timestamp": rec["store_timestamp"],
        "store_host": host(rec["store_host"]),
        "body_crc": rec["body_crc"],
        "msg_id": props["UNIQ_KEY"] if client and "UNIQ_KEY" in props else offset_id,
        "properties_string": props_string,
        "stored_phys_offset": rec["stored_phys_offset"],
        "offset_msg_id": offset_id,
    }


def property_span(props: bytes, name: bytes) -> tuple[int, int]:
    """(offset, length) of the value of ``name`` inside ``props`` as string2messageProperties
    would take it (the last non-empty one), or (-1, 0)."""
    found = (-1, 0)
    at = 0
    for item in props.split(b"\x02"):
        sep = item.find(b"\x01")
        if 0 < sep < len(item) - 1 and item[:sep] == name:
            found = (at + sep + 1, len(item) - sep - 1)
        at += len(item) + 1
    return found


def java_hash(s: str) -> int:
    """Java String.hashCode: over UTF-16 code units, 32-bit wrap-around, signed."""
    units = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for k in range(0, len(units), 2):
        h = (31 * h + (units[k] << 8 | units[k + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _java_replace(exc: UnicodeError) -> tuple[str, int]:
    # Python replaces each maximal ill-formed subpart with U+FFFD, as the JDK's UTF-8 decoder
    # does, except around ED: the JDK takes ED A0..BF as a 3-byte lead and prefix (1 U+FFFD for
    # the 3, or the 2 of a cut one) where Python replaces every byte on its own.
    assert isinstance(exc, UnicodeDecodeError)
    b, s = exc.object, exc.start
    if b[s] == 0xED and s + 1 < len(b) and 0xA0 <= b[s + 1] <= 0xBF:
        if s + 2 < len(b) and 0x80 <= b[s + 2] <= 0xBF:
            return "\ufffd", s + 3
        return "\ufffd", s + 2
    return "\ufffd", exc.end


codecs.register_error("java-replace", _java_replace)


def java_decode(raw: bytes) -> str:
    """``new String(raw, UTF_8)``: invalid input decoded with U+FFFD as the JDK does."""
    return raw.decode("utf-8", "java-replace")


def java_hash_bytes(raw: bytes) -> int:
    return java_hash(java_decode(raw))


def index_key_hash(key: str) -> int:
    """IndexFile.indexKeyHashMethod: abs(hashCode), Integer.MIN_VALUE -> 0."""
    h = abs(java_hash(key))
    return 0 if h >= 1 << 31 else h


def cq_unit(phys_offset: int, size: int, tags_code: int) -> bytes:
    return struct.pack(">qiq", phys_offset, size, tags_code)


# -- index file ------------------------------------------------------------------------------------


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    return INDEX_HEADER_SIZE + hash_slot_num * INDEX_SLOT_SIZE + index_num * INDEX_ITEM_SIZE


def index_header(buf: bytes | bytearray | memoryview) -> dict[str, int]:
    names = ("begin_timestamp", "end_timestamp", "begin_phy_offset", "end_phy_offset", "hash_slot_count", "index_count")
    return dict(zip(names, INDEX_HEADER.unpack_from(buf, 0), strict=True))


def _index_count(buf: bytes | bytearray | memoryview) -> int:
    (count,) = struct.unpack_from(">i", buf, 36)
    return count if count > 0 else 1  # IndexHeader.load


def index_put(
    buf: bytearray, hash_slot_num: int, index_num: int, key_hash: int, phy_offset: int, time_diff: int
) -> bool:
    """The slot and item part of IndexFile.putKey (the kernel's unit of work): False when full."""
    count = _index_count(buf)
    if count >= index_num:
        return False
    slot_at = INDEX_HEADER_SIZE + (key_hash % hash_slot_num) * INDEX_SLOT_SIZE
    (slot,) = struct.unpack_from(">i", buf, slot_at)
    if slot <= 0 or slot > count:
        slot = 0
    item_at = INDEX_HEADER_SIZE + hash_slot_num * INDEX_SLOT_SIZE + count * INDEX_ITEM_SIZE
    INDEX_ITEM.pack_into(buf, item_at, key_hash, phy_offset, time_diff, slot)
    struct.pack_into(">i", buf, slot_at, count)
    if slot == 0:
        (slots,) = struct.unpack_from(">i", buf, 32)
        struct.pack_into(">i", buf, 32, slots + 1)
    struct.pack_into(">i", buf, 36, count + 1)
    return True


def index_put_key(
    buf: bytearray, hash_slot_num: int, index_num: int, key: str, phy_offset: int, store_timestamp: int
) -> bool:
    """All of IndexFile.putKey, header timestamps and offsets included."""
    h = index_header(buf)
    if _index_count(buf) >= index_num:
        return False
    elapsed = store_timestamp - h["begin_timestamp"]
    diff = 0 if h["begin_timestamp"] <= 0 or elapsed < 0 else min(elapsed // 1000, 2**31 - 1)
    first = _index_count(buf) <= 1
    index_put(buf, hash_slot_num, index_num, index_key_hash(key), phy_offset, diff)
    if first:
        struct.pack_into(">q", buf, 16, phy_offset)
        struct.pack_into(">q", buf, 0, store_timestamp)
    struct.pack_into(">q", buf, 24, phy_offset)
    struct.pack_into(">q", buf, 8, store_timestamp)
    return True


def index_lookup(
    buf: bytes | bytearray | memoryview,
    hash_slot_num: int,
    index_num: int,
    key_hash: int,
    max_num: int,
    begin_ts: int,
    end_ts: int,
    file_begin_ts: int,
) -> list[int]:
    """IndexFile.selectPhyOffset for one file: offsets of the slot chain, newest first."""
    count = _index_count(buf)
    slot_at = INDEX_HEADER_SIZE + (key_hash % hash_slot_num) * INDEX_SLOT_SIZE
    (slot,) = struct.unpack_from(">i", buf, slot_at)
    out: list[int] = []
    if slot <= 0 or slot > count or count <= 1:
        return out
    nxt = slot
    for _ in range(count):  # a corrupt chain cannot loop for ever
        if len(out) >= max_num:
            break
        item_at = INDEX_HEADER_SIZE + hash_slot_num * INDEX_SLOT_SIZE + nxt * INDEX_ITEM_SIZE
        if item_at + INDEX_ITEM_SIZE > len(buf):
            break
        h, phy, diff, prev = INDEX_ITEM.unpack_from(buf, item_at)
        if diff < 0:
            break
        t = file_begin_ts + diff * 1000
        if h == key_hash and begin_ts <= t <= end_ts:
            out.append(phy)
        if prev <= 0 or prev > count or prev == nxt or t < begin_ts:
            break
        nxt = prev
    return out


def key_columns(
    records: list[tuple[bytes, bytes, int]], after_topic: bytes = b"\x02", after_props: bytes = b"\x01"
) -> tuple[bytes, dict[str, Any]]:
    """A buffer of (topic, properties, sys flag) records with the columns dispatch's keys pass
    reads (topic and properties offsets and lengths, sys flags), each field followed by a byte
    that is not part of it (the kernels must keep to the lengths)."""
    buf = bytearray(b"\x07" * 3)
    cols: dict[str, list[int]] = {k: [] for k in ("topic_off", "topic_len", "props_off", "props_len", "sys_flag")}
    for topic, props, flag in records:
        cols["topic_off"].append(len(buf))
        cols["topic_len"].append(len(topic))
        buf += topic + after_topic
        cols["props_off"].append(len(buf))
        cols["props_len"].append(len(props))
        buf += props + after_props
        cols["sys_flag"].append(flag)
    return bytes(buf), {
        k: np.asarray(v, dtype=np.int32 if k in ("topic_len", "props_len", "sys_flag") else np.int64)
        for k, v in cols.items()
    }
