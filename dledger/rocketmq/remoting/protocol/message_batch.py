"""MessageDecoder.encodeMessages / decodeMessages: the body of SEND_BATCH_MESSAGE, each message
as ``int32 totalSize, int32 magicCode (0), int32 bodyCRC (0), int32 flag, int32 bodyLen, body,
int16 propertiesLength, properties``.

Decoding (a kernel, ``_ext/remoting.pyx``) gives the bodies and the properties as two packed
lists, what the member's batch send path takes: no object per message.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dledger._ext import load as _load_ext
from dledger.rocketmq.remoting.remoting_command_exception import RemotingCommandException

K = _load_ext("remoting")

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


def decode_messages(body: bytes | memoryview, tail: bytes = b"") -> DecodedBatch:
    """The messages of an encodeMessages body as packed lists, each properties string followed
    by ``tail`` (``\\x02`` and the pairs the broker adds; an empty string gets the pairs alone);
    RemotingCommandException when a size does not fit."""
    bodies, boffs, props, poffs, flag, bad = K.decode_messages(body, tail)
    if bad >= 0:
        raise RemotingCommandException(f"batch message at byte {bad}: its sizes do not fit the body of {len(body)}")
    if len(boffs) < 2:
        raise RemotingCommandException("empty batch")
    return DecodedBatch(memoryview(bodies), boffs, memoryview(props), poffs, flag)


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    bodies: memoryview  # joined
    body_offsets: np.ndarray  # int64, a leading 0 and each message's end (PackedBodies' offsets)
    properties: memoryview  # joined
    properties_offsets: np.ndarray  # int64, as body_offsets
    flag: int  # the last message's (a batch's messages share it)

    def __len__(self) -> int:
        return len(self.body_offsets) - 1

    def split(self) -> tuple[list[bytes], list[bytes]]:
        """Bodies and properties one by one (for tests and tools, not the send path)."""

        def cut(raw: memoryview, offsets: np.ndarray) -> list[bytes]:
            return [bytes(raw[s:e]) for s, e in itertools.pairwise(offsets.tolist())]

        return cut(self.bodies, self.body_offsets), cut(self.properties, self.properties_offsets)


__all__ = ["DecodedBatch", "decode_messages", "encode_messages"]
