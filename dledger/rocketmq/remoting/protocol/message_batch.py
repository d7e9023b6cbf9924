"""MessageDecoder.encodeMessages / decodeMessages: the body of SEND_BATCH_MESSAGE, each message
as ``int32 totalSize, int32 magicCode (0), int32 bodyCRC (0), int32 flag, int32 bodyLen, body,
int16 propertiesLength, properties``.

Decoding keeps the bodies joined in one buffer with their offsets (what the member's batch send
path takes, no object per message); only the properties strings are made one by one.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np

from dledger.rocketmq.remoting.remoting_command_exception import RemotingCommandException

_HEAD = struct.Struct(">iiiii")  # totalSize, magicCode, bodyCRC, flag, bodyLen
_PLEN = struct.Struct(">h")


def encode_messages(bodies: Sequence[bytes], properties: Sequence[bytes], flag: int = 0) -> bytes:
    parts: list[bytes] = []
    for body, props in zip(bodies, properties, strict=True):
        if len(props) > 0x7FFF:
            raise RemotingCommandException(f"properties of {len(props)} bytes: a batch message holds 32767")
        parts.append(_HEAD.pack(_HEAD.size + len(body) + 2 + len(props), 0, 0, flag, len(body)))
        parts.append(body)
        parts.append(_PLEN.pack(len(props)))
        parts.append(props)
    return b"".join(parts)


def decode_messages(body: bytes | memoryview) -> tuple[bytes, np.ndarray, list[bytes], int]:
    """(the bodies joined, their offsets (n + 1), each message's properties, the flag of the
    last one (a batch's messages share it)); RemotingCommandException when a size does not fit."""
    mv = memoryview(body)
    n = len(mv)
    pos = 0
    parts: list[memoryview] = []
    props: list[bytes] = []
    offsets = [0]
    flag = 0
    while pos < n:
        if n - pos < _HEAD.size:
            raise RemotingCommandException(f"batch body cut short at {pos} of {n} bytes")
        total, _magic, _crc, flag, blen = _HEAD.unpack_from(mv, pos)
        end = pos + total
        bstart = pos + _HEAD.size
        if total < _HEAD.size + 2 or end > n or blen < 0 or bstart + blen + 2 > end:
            raise RemotingCommandException(f"batch message at {pos}: sizes {total}/{blen} do not fit")
        parts.append(mv[bstart : bstart + blen])
        offsets.append(offsets[-1] + blen)
        (plen,) = _PLEN.unpack_from(mv, bstart + blen)
        pstart = bstart + blen + 2
        if plen < 0 or pstart + plen != end:
            raise RemotingCommandException(f"batch message at {pos}: properties length {plen} does not fit")
        props.append(bytes(mv[pstart:end]))
        pos = end
    if not parts:
        raise RemotingCommandException("empty batch")
    return b"".join(parts), np.asarray(offsets, dtype=np.int64), props, flag


__all__ = ["decode_messages", "encode_messages"]
