"""A batch of bodies as one buffer and their sizes: how a client sends a batch append.

A batch sent as a msgpack list of bytes costs, per body, a pack on the client and an
allocation and copy on the leader when it is unpacked. Sent as one ``raw`` buffer and a
``sizes`` array (little-endian uint32), the client joins the bodies once, the frame layer
writes the buffer to the socket without copying it into the payload (``frames.TAIL_FIELD``),
and the leader's store encodes every entry straight from the received buffer.

``PackedBodies`` is a read-only ``Sequence[bytes]``, so everything that takes a list of
bodies (the node, the memory store) takes it too; the file store's kernel reads
``.packed`` and never makes the per-body ``bytes``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dledger.codes import ResponseCode
from dledger.errors import DLedgerError
from dledger.sequences import LazySequence

SIZE_DTYPE = np.dtype("<u4")


class _BodySequence(LazySequence[bytes]):
    """The read-only ``Sequence[bytes]`` both batch forms are: subclasses say where body k is."""

    __slots__ = ("offsets",)

    _what = "body"
    offsets: np.ndarray  # int64, one more than there are bodies

    def __len__(self) -> int:
        return len(self.offsets) - 1


class PackedBodies(_BodySequence):
    """Bodies ``raw[offsets[k]:offsets[k + 1]]``; build with ``pack`` or ``from_wire``."""

    __slots__ = ("raw",)

    def __init__(self, raw: bytes | bytearray | memoryview, offsets: np.ndarray) -> None:
        self.raw = raw
        self.offsets = offsets  # int64, one more than there are bodies, offsets[0] == 0

    @staticmethod
    def pack(bodies: Sequence[bytes], sizes: np.ndarray | None = None) -> tuple[bytes, bytes]:
        """``(raw, sizes)`` as sent on the wire for ``bodies`` (bytes); ``sizes``, when given,
        is their lengths as a SIZE_DTYPE array (the client has it already)."""
        if sizes is None:
            sizes = np.fromiter(map(len, bodies), dtype=SIZE_DTYPE, count=len(bodies))
        return b"".join(bodies), sizes.astype(SIZE_DTYPE, copy=False).tobytes()

    @classmethod
    def from_wire(cls, raw: object, sizes: object, max_body_size: int) -> PackedBodies:
        """Check a received batch: every size positive and at most ``max_body_size``, the
        sizes adding up to the length of ``raw``. Raises ``DLedgerError`` otherwise."""
        if not isinstance(raw, bytes | bytearray | memoryview) or not isinstance(sizes, bytes):
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, "raw and sizes must be bytes")
        if len(sizes) % SIZE_DTYPE.itemsize:
            raise DLedgerError(
                ResponseCode.UNEXPECTED_ARGUMENT, f"sizes of {len(sizes)} bytes is not an array of uint32"
            )
        n = np.frombuffer(sizes, dtype=SIZE_DTYPE)
        if not len(n):
            raise DLedgerError(ResponseCode.REQUEST_WITH_EMPTY_BODYS, "no bodies")
        if not n.all():
            raise DLedgerError(ResponseCode.REQUEST_WITH_EMPTY_BODYS, "empty body")
        if int(n.max()) > max_body_size:
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"body over {max_body_size} bytes")
        offsets = np.zeros(len(n) + 1, dtype=np.int64)
        np.cumsum(n, dtype=np.int64, out=offsets[1:])  # 64-bit: 32-bit sizes cannot wrap the sum
        if int(offsets[-1]) != len(raw):
            raise DLedgerError(
                ResponseCode.UNEXPECTED_ARGUMENT, f"sizes add up to {int(offsets[-1])}, raw holds {len(raw)} bytes"
            )
        return cls(raw, offsets)

    @property
    def packed(self) -> tuple[bytes | bytearray | memoryview, np.ndarray]:
        """``(raw, offsets)`` for kernels that read the bodies in place."""
        return self.raw, self.offsets

    def _item(self, i: int) -> bytes:
        return bytes(self.raw[int(self.offsets[i]) : int(self.offsets[i + 1])])

    def __repr__(self) -> str:
        return f"PackedBodies(count={len(self)}, bytes={len(self.raw)})"


class FramedBodies(_BodySequence):
    """Bodies each behind room for its DLedger entry header: body k is
    ``buf[offsets[k] + GAP:offsets[k + 1]]``. An encoder that leaves the gap (the message
    service's ``encode_uniform(..., gap=GAP)``) hands its buffer to the file store as it is: the
    store writes the headers into ``buf`` in place and each data file's share with one pwrite
    (``MmapFileStore.append_framed``), where ``PackedBodies`` costs a header scratch and two
    iovecs an entry. Once proposed, ``buf`` is the store's to write into; other stores take the
    bodies one by one."""

    __slots__ = ("buf",)

    GAP = 48  # DLedgerEntry.BODY_OFFSET

    def __init__(self, buf: bytearray, offsets: np.ndarray) -> None:
        self.buf = buf
        self.offsets = offsets  # int64, one more than there are bodies; offsets[-1] == len(buf)

    def _item(self, i: int) -> bytes:
        return bytes(self.buf[int(self.offsets[i]) + self.GAP : int(self.offsets[i + 1])])

    def __repr__(self) -> str:
        return f"FramedBodies(count={len(self)}, bytes={len(self.buf)})"
