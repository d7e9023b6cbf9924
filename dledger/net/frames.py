"""Wire frames: a 4-byte big-endian unsigned length, then one msgpack map.

A frame whose body holds a big ``raw`` bytes value (a batch push, a packed client batch) is
sent in the tailed form instead: the length has its top bit (TAIL_FLAG) set, and the payload
is a 4-byte big-endian length of the msgpack map, the map (its body without ``raw``), then the
``raw`` bytes. The sender writes those bytes to the socket as their own buffer and the
receiver hands them on as a memoryview of the buffer it received the frame into: no copy on
either side (see encode_parts and FrameDecoder).

A frame map uses one-letter keys because small frames (votes, heartbeats, acks) are
dominated by their envelope::

    {"k": kind, "i": request id, "c": request or response code,
     "g": group (optional), "b": body map (optional), "m": message (optional)}

Bodies carry bytes as msgpack bin (``use_bin_type=True``) and strings as str
(``raw=False``).

Decoding does not use ``msgpack.Unpacker.feed``: the length prefix already tells where a
frame ends, so the decoder hands asyncio (``BufferedProtocol``) the memory to receive into
and runs ``msgpack.unpackb`` on a memoryview of it. Small frames are received into one
reusable scratch buffer and decoded in place, many per ``recv``; a frame too big for the
scratch buffer gets a buffer of exactly its size, so its bytes are copied once by the
kernel and once more by msgpack when it builds the ``bytes`` objects, never by us (and the
``raw`` tail of a tailed frame by the kernel only).
``unpackb`` also bounds every str/bin/array/map length by the size of the frame, so a
forged inner length cannot make it allocate more than the frame holds.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Generic, TypeVar

import msgpack
import numpy as np

log = logging.getLogger(__name__)

HEADER = struct.Struct(">I")
HEADER_SIZE = HEADER.size
DEFAULT_MAX_FRAME = 64 * 1024 * 1024
# Frames that fit are received into the shared scratch buffer (many per recv); bigger ones
# get their own exact-size buffer. 256 KiB is what asyncio's selector transport reads at most
# per recv, so a scratch buffer this size never shortens a read.
SCRATCH_SIZE = 256 * 1024

F = TypeVar("F")


class FrameError(Exception):
    """The byte stream is not a valid frame sequence. The connection must be closed."""


class Kind(IntEnum):
    REQUEST = 0
    RESPONSE = 1
    ONEWAY = 2  # a request whose result nobody waits for: no response frame is sent
    AUTH = 3  # handshake step; "c" holds the step number (see dledger.net.auth)


@dataclass(slots=True)
class Frame:
    kind: int
    id: int = 0
    code: int = 0
    group: str | None = None
    body: dict[str, Any] = field(default_factory=dict)
    message: str | None = None


def _frame_map(frame: Frame, with_body: bool) -> dict[str, Any]:
    """The map a frame is packed as (short keys; empty fields left out)."""
    m: dict[str, Any] = {"k": frame.kind, "i": frame.id, "c": frame.code}
    if frame.group is not None:
        m["g"] = frame.group
    if with_body and frame.body:
        m["b"] = frame.body
    if frame.message:
        m["m"] = frame.message
    return m


def encode(
    frame: Frame, packer: msgpack.Packer | None = None, max_frame: int = DEFAULT_MAX_FRAME
) -> tuple[bytes, bytes]:
    """Return ``(header, payload)``.

    They are returned apart so that a big payload can be written without concatenating
    (copying) it behind its 4-byte header. Raises ``FrameError`` if the frame would exceed
    ``max_frame`` (the peer would refuse it) and ``TypeError`` for unpackable bodies.
    """
    m = _frame_map(frame, with_body=True)
    payload = packer.pack(m) if packer is not None else msgpack.packb(m, use_bin_type=True)
    if len(payload) > max_frame:
        raise FrameError(f"frame of {len(payload)} bytes exceeds the maximum of {max_frame}")
    return HEADER.pack(len(payload)), payload


# A body field this big is sent in the tailed form (see the module docstring) instead of
# being copied into the packed payload.
TAIL_MIN = 64 * 1024
TAIL_FIELD = "raw"
# Set in the length prefix of a tailed frame. Frame lengths stay below it (max_frame < 2 GiB).
TAIL_FLAG = 0x80000000


def encode_parts(frame: Frame, packer: msgpack.Packer | None = None, max_frame: int = DEFAULT_MAX_FRAME) -> list[bytes]:
    """The frame as buffers to write in order: ``[header, payload]``, or, when the body holds
    a big ``raw`` bytes value, the tailed form ``[header, map length + map, value]``, so that
    megabytes of entries go to the socket without being copied into a payload first.
    """
    body = frame.body
    tail = body.get(TAIL_FIELD) if body else None
    if type(tail) is not bytes or len(tail) < TAIL_MIN:
        return list(encode(frame, packer, max_frame))
    m = _frame_map(frame, with_body=False)
    m["b"] = {k: v for k, v in body.items() if k != TAIL_FIELD}
    packed = packer.pack(m) if packer is not None else msgpack.packb(m, use_bin_type=True)
    size = HEADER_SIZE + len(packed) + len(tail)
    if size > max_frame:
        raise FrameError(f"frame of {size} bytes exceeds the maximum of {max_frame}")
    return [HEADER.pack(size | TAIL_FLAG), HEADER.pack(len(packed)) + packed, tail]


def encode_bytes(frame: Frame, max_frame: int = DEFAULT_MAX_FRAME) -> bytes:
    """One frame as a single bytes object (tests, small control frames)."""
    header, payload = encode(frame, max_frame=max_frame)
    return header + payload


def new_packer() -> msgpack.Packer:
    return msgpack.Packer(use_bin_type=True, autoreset=True)


def decode_tailed(payload: memoryview, copy: bool) -> Frame:
    """Decode a tailed payload (map length, map, raw). ``raw`` is a view of ``payload``, or a
    copy when ``copy`` (the payload lives in a buffer that will be reused)."""
    if len(payload) < HEADER_SIZE:
        raise FrameError("tailed frame shorter than its map length")
    (n,) = HEADER.unpack_from(payload, 0)
    if n > len(payload) - HEADER_SIZE:
        raise FrameError(f"tailed frame map of {n} bytes overruns a payload of {len(payload)}")
    frame = decode_payload(payload[HEADER_SIZE : HEADER_SIZE + n])
    tail = payload[HEADER_SIZE + n :]
    frame.body[TAIL_FIELD] = bytes(tail) if copy else tail.toreadonly()
    return frame


def decode_payload(payload: bytes | bytearray | memoryview) -> Frame:
    """Decode and validate one frame payload (without its length prefix)."""
    try:
        m = msgpack.unpackb(payload, raw=False, use_list=True, strict_map_key=True)
    except Exception as e:  # msgpack raises ValueError, FormatError, StackError, ExtraData, TypeError...
        raise FrameError(f"malformed frame: {type(e).__name__}: {e}") from None
    if type(m) is not dict:
        raise FrameError(f"frame is a {type(m).__name__}, not a map")
    kind = m.get("k")
    rid = m.get("i", 0)
    code = m.get("c", 0)
    group = m.get("g")
    body = m.get("b")
    message = m.get("m")
    # type(...) is int rejects bool, which msgpack would otherwise pass off as an int.
    if type(kind) is not int or type(rid) is not int or type(code) is not int:
        raise FrameError("frame kind, id and code must be integers")
    if group is not None and type(group) is not str:
        raise FrameError("frame group must be a string")
    if body is None:
        body = {}
    elif type(body) is not dict:
        raise FrameError("frame body must be a map")
    if message is not None and type(message) is not str:
        raise FrameError("frame message must be a string")
    return Frame(kind, rid, code, group, body, message)


class BufferedFrameDecoder(Generic[F]):
    """What a length-prefixed protocol's decoder shares, with the ``asyncio.BufferedProtocol``
    buffer interface: the reusable scratch buffer frames are received into (many per
    ``recv``, decoded in place) and the exact-size buffer of a frame too big for it.

    Call ``get_buffer()``, write up to ``len(buffer)`` bytes into it, then
    ``buffer_updated(n)`` which returns the frames completed. ``feed(data)`` does the same
    for bytes received any other way. A subclass reads the length prefixes (``_parse``, over
    ``_view[_start:_end]``; it sets ``_need``, or hands a frame too big for the scratch buffer
    to ``_receive_big``) and decodes a big frame once whole (``_whole``).
    """

    __slots__ = (
        "_big",
        "_big_fill",
        "_big_tailed",
        "_big_view",
        "_buf",
        "_end",
        "_need",
        "_start",
        "_view",
        "max_frame",
    )

    def __init__(self, max_frame: int, scratch_size: int, prefix_size: int) -> None:
        self.max_frame = max_frame
        self._buf = bytearray(max(scratch_size, 64))
        self._view = memoryview(self._buf)
        self._start = 0  # first unparsed byte in the scratch buffer
        self._end = 0  # end of received bytes in the scratch buffer
        self._need = prefix_size  # bytes from _start needed before the next frame can complete
        self._big: np.ndarray | None = None
        self._big_view: memoryview | None = None
        self._big_fill = 0
        self._big_tailed = False

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames (non-zero at EOF means truncation)."""
        return self._big_fill if self._big is not None else self._end - self._start

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        if self._big_view is not None:
            return self._big_view[self._big_fill :]
        size = len(self._buf)
        if self._start and (self._end == size or self._start + self._need > size):
            # Move the partial frame to the front. Only partial frames smaller than the
            # scratch buffer live here, so this copy is bounded and rare.
            n = self._end - self._start
            self._buf[:n] = bytes(self._view[self._start : self._end])
            self._start, self._end = 0, n
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> list[F]:
        if self._big is not None:
            self._big_fill += nbytes
            if self._big_fill < len(self._big):
                return []
            view, self._big, self._big_view, self._big_fill = self._big_view, None, None, 0
            assert view is not None
            # The buffer is this frame's alone: what is decoded may keep views of it.
            return [self._whole(view, self._big_tailed)]
        self._end += nbytes
        return self._parse()

    def feed(self, data: bytes | bytearray | memoryview) -> list[F]:
        frames: list[F] = []
        src = memoryview(data).cast("B")
        pos = 0
        while pos < len(src):
            dst = self.get_buffer(len(src) - pos)
            n = min(len(dst), len(src) - pos)
            dst[:n] = src[pos : pos + n]
            pos += n
            frames.extend(self.buffer_updated(n))
        return frames

    def _receive_big(self, length: int, have_from: int, end: int, tailed: bool = False) -> None:
        """Give a frame of ``length`` bytes (after its prefix) its own buffer, the bytes of it
        received so far (``_view[have_from:end]``) copied in; the rest is received straight
        into it. np.empty, not bytearray: the kernel overwrites every byte, so zeroing the
        megabytes first would be wasted."""
        self._big = np.empty(length, dtype=np.uint8)
        self._big_view = self._big.data
        self._big_tailed = tailed
        self._big_view[: end - have_from] = self._view[have_from:end]
        self._big_fill = end - have_from

    def _parse(self) -> list[F]:
        raise NotImplementedError

    def _whole(self, payload: memoryview, tailed: bool) -> F:
        raise NotImplementedError


class FrameDecoder(BufferedFrameDecoder[Frame]):
    """Incremental decoder of this protocol's frames (see BufferedFrameDecoder). After a
    ``FrameError`` the decoder is unusable.

    ``max_frame`` may be changed between calls (the server lowers it until a peer has
    authenticated); it applies to the next length prefix read.
    """

    __slots__ = ()

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME, scratch_size: int = SCRATCH_SIZE) -> None:
        if not 0 < max_frame < TAIL_FLAG:
            raise ValueError(f"max_frame must be positive and below {TAIL_FLAG}")
        super().__init__(max_frame, scratch_size, HEADER_SIZE)

    def _whole(self, payload: memoryview, tailed: bool) -> Frame:
        # The buffer is this frame's alone: a tail can be handed on as a view of it.
        return decode_tailed(payload, copy=False) if tailed else decode_payload(payload)

    def _parse(self) -> list[Frame]:
        frames: list[Frame] = []
        view, start, end = self._view, self._start, self._end
        while end - start >= HEADER_SIZE:
            (length,) = HEADER.unpack_from(view, start)
            tailed = bool(length & TAIL_FLAG)
            length &= ~TAIL_FLAG
            # Checked before anything is allocated or waited for: a forged 4 GiB prefix fails here.
            if length > self.max_frame:
                raise FrameError(f"frame length {length} exceeds the maximum of {self.max_frame}")
            if length == 0:
                raise FrameError("empty frame")
            total = HEADER_SIZE + length
            if end - start >= total:
                payload = view[start + HEADER_SIZE : start + total]
                frames.append(decode_tailed(payload, copy=True) if tailed else decode_payload(payload))
                start += total
                continue
            if total > len(self._buf):
                # Too big for the scratch buffer: its own buffer, received straight into.
                self._receive_big(length, start + HEADER_SIZE, end, tailed)
                start = end = 0
                total = HEADER_SIZE
            self._need = total
            break
        else:
            self._need = HEADER_SIZE
        if start == end:
            start = end = 0
        self._start, self._end = start, end
        return frames
