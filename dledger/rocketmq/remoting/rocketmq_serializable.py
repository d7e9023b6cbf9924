"""RocketMQ's RocketMQSerializable: the binary (ROCKETMQ, type 1) header of a RemotingCommand.

    int16 code, byte language, int16 version, int32 opaque, int32 flag,
    int32 remark length + UTF-8 remark, int32 extFields length,
    then (int16 key length + key, int32 value length + value) repeated; all big-endian.

A string of length 0 reads back as Java's null: a remark so is None, an extFields value so is
the empty string here (writing it back gives the same bytes; Java skips null values).
"""

from __future__ import annotations

import struct

from dledger._ext import load as _load_ext
from dledger.rocketmq.remoting.remoting_command_exception import RemotingCommandException

K = _load_ext("remoting")

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
    (rocketMQProtocolDecode, a kernel); RemotingCommandException when it does not parse or has
    bytes over."""
    code, language, version, opaque, flag, remark, ext, error = K.decode_header(buf)
    if error is not None:
        raise RemotingCommandException(error)
    return code, language, version, opaque, flag, remark, ext


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
