"""RocketMQ's RocketMQSerializable: the binary (ROCKETMQ, type 1) header of a RemotingCommand.

    int16 code, byte language, int16 version, int32 opaque, int32 flag,
    int32 remark length + UTF-8 remark, int32 extFields length,
    then (int16 key length + key, int32 value length + value) repeated; all big-endian.

A string of length 0 reads back as Java's null: a remark so is None, an extFields value so is
the empty string here (writing it back gives the same bytes; Java skips null values).
"""

from __future__ import annotations

from dledger._ext import load as _load_ext
from dledger.rocketmq.remoting.remoting_command_exception import RemotingCommandException

K = _load_ext("remoting")

FIXED_LEN = 13  # code, language, version, opaque, flag


def encode_header(
    code: int, language: int, version: int, opaque: int, flag: int, remark: str | None, ext: dict[str, str] | None
) -> bytes:
    """The header's bytes (rocketMQProtocolEncode, a kernel). Java writes code and version as
    shorts; a number that does not fit its field is a RemotingCommandException."""
    try:
        header: bytes = K.encode_binary_header(code, language, version, opaque, flag, remark, ext)
    except OverflowError:
        raise RemotingCommandException(
            f"a header number does not fit its field: {(code, language, version, opaque, flag)}"
        ) from None
    return header


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


__all__ = ["FIXED_LEN", "decode_header", "encode_header"]
