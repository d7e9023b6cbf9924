"""RocketMQ's NettyDecoder: a connection's byte stream cut into frames
(LengthFieldBasedFrameDecoder: an int32 length field, the frame after it, at most
``frameMaxLength`` bytes counting the length field).

A frame over the limit, or a negative length, is refused (FrameTooLong / the stream is
corrupt); the Java server then closes the connection, and so does ours.
"""

from __future__ import annotations

import struct

from dledger.rocketmq.remoting.remoting_command_exception import RemotingCommandException

# com.rocketmq.remoting.frameMaxLength's default: 16 MiB, length field included.
FRAME_MAX_LENGTH = 16 * 1024 * 1024

_LEN = struct.Struct(">i")


class FrameTooLong(RemotingCommandException):
    """A frame's length field says more than the limit (or less than nothing)."""


class NettyDecoder:
    """Feed it what a socket reads; it hands back the whole frames (without their length
    field) in order and keeps the rest for the next feed."""

    def __init__(self, max_frame_length: int = FRAME_MAX_LENGTH) -> None:
        self.max_frame_length = max_frame_length
        self._buf = bytearray()

    @property
    def pending(self) -> int:
        """Bytes held of a frame not yet whole."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        buf = self._buf
        buf += data
        frames: list[bytes] = []
        pos, n = 0, len(buf)
        # Frames are copied out of a view, once (a bytearray slice would make a second copy);
        # the view is released before the buffer is trimmed.
        with memoryview(buf) as view:
            while n - pos >= 4:
                (length,) = _LEN.unpack_from(buf, pos)
                if length < 0 or length + 4 > self.max_frame_length:
                    raise FrameTooLong(
                        f"frame length {length} (+4): the limit is {self.max_frame_length} bytes"
                        if length >= 0
                        else f"negative frame length {length}"
                    )
                if n - pos - 4 < length:
                    break
                frames.append(bytes(view[pos + 4 : pos + 4 + length]))
                pos += 4 + length
        if pos:
            del buf[:pos]
        return frames


__all__ = ["FRAME_MAX_LENGTH", "FrameTooLong", "NettyDecoder"]
