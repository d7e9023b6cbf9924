"""RocketMQ's RocketMQSerializable: the binary (ROCKETMQ, type 1) header of a RemotingCommand.

    int16 code, byte language, int16 version, int32 opaque, int32 flag,
    int32 remark length + UTF-8 remark, int32 extFields length,
    then (int16 key length + key, int32 value length + value) repeated; all big-endian.

A string of length 0 reads back as Java's null: a remark so is None, an extFields value so is
the empty string here (writing it back gives the same bytes; Java skips null values).
"""

from __future__ import annotations

import struct

from dledger.rocketmq.remoting.remoting_command_exception import RemotingCommandException

_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
FIXED_LEN = _FIXED.size  # 13


def encode_header(
    code: int, language: int, version: int, opaque: int, flag: int, remark: str | None, ext: dict[str, str] | None
) -> bytes:
    """The header's bytes (rocketMQProtocolEncode). Java writes code and version as shorts."""
    parts = [_FIXED.pack(_short(code), _byte(language), _short(version), _int(opaque), _int(flag))]
    rb = remark.encode("utf-8") if remark else b""
    parts.append(_I32.pack(len(rb)))
    parts.append(rb)
    if ext:
        fields = []
        for k, v in ext.items():
            if k is None or v is None:
                continue
            kb, vb = k.encode("utf-8"), v.encode("utf-8")
            if len(kb) > 0x7FFF:
                raise RemotingCommandException(f"extFields key of {len(kb)} bytes: a short length holds 32767")
            fields.append(_I16.pack(len(kb)))
            fields.append(kb)
            fields.append(_I32.pack(len(vb)))
            fields.append(vb)
        body = b"".join(fields)
        parts.append(_I32.pack(len(body)))
        parts.append(body)
    else:
        parts.append(_I32.pack(0))
    return b"".join(parts)


def decode_header(
    buf: bytes | memoryview,
) -> tuple[int, int, int, int, int, str | None, dict[str, str] | None]:
    """(code, language, version, opaque, flag, remark, extFields) of a whole header
    (rocketMQProtocolDecode); RemotingCommandException when it does not parse or has bytes over."""
    n = len(buf)
    try:
        code, language, version, opaque, flag = _FIXED.unpack_from(buf, 0)
        pos = FIXED_LEN
        (rlen,) = _I32.unpack_from(buf, pos)
        pos += 4
        remark = None
        if rlen:
            if rlen < 0 or pos + rlen > n:
                raise RemotingCommandException(f"remark length {rlen} past the header of {n} bytes")
            remark = _text(buf[pos : pos + rlen])
            pos += rlen
        (elen,) = _I32.unpack_from(buf, pos)
        pos += 4
        ext: dict[str, str] | None = None
        if elen > 0:
            end = pos + elen
            if end > n:
                raise RemotingCommandException(f"extFields length {elen} past the header of {n} bytes")
            ext = {}
            while pos < end:
                (klen,) = _I16.unpack_from(buf, pos)
                pos += 2
                if klen < 0 or pos + klen > end:
                    raise RemotingCommandException(f"extFields key length {klen} past the map")
                key = _text(buf[pos : pos + klen])
                pos += klen
                (vlen,) = _I32.unpack_from(buf, pos)
                pos += 4
                if vlen < 0 or pos + vlen > end:
                    raise RemotingCommandException(f"extFields value length {vlen} past the map")
                ext[key] = _text(buf[pos : pos + vlen])
                pos += vlen
        elif elen < 0:
            raise RemotingCommandException(f"extFields length {elen}")
    except struct.error as exc:
        raise RemotingCommandException(f"ROCKETMQ header of {n} bytes is cut short: {exc}") from None
    if pos != n:
        raise RemotingCommandException(f"ROCKETMQ header has {n - pos} bytes past its fields")
    return code, language, version, opaque, flag, remark, ext


def _text(b: bytes | memoryview) -> str:
    try:
        return bytes(b).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RemotingCommandException(f"a header string is not UTF-8: {exc}") from None


def _short(v: int) -> int:
    if not -0x8000 <= v <= 0x7FFF:
        raise RemotingCommandException(f"{v} does not fit the header's int16")
    return v


def _byte(v: int) -> int:
    if not -0x80 <= v <= 0x7F:
        raise RemotingCommandException(f"language {v} does not fit a byte")
    return v


def _int(v: int) -> int:
    if not -0x80000000 <= v <= 0x7FFFFFFF:
        raise RemotingCommandException(f"{v} does not fit the header's int32")
    return v


__all__ = ["FIXED_LEN", "decode_header", "encode_header"]
