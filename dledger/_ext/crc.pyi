"""Type stub for the ``dledger._ext.crc`` Cython kernel (CRC-32, zlib-compatible)."""

import sys
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

if sys.version_info >= (3, 12):
    from collections.abc import Buffer
else:
    from typing_extensions import Buffer

# numpy's stubs only declare ndarray.__buffer__ for Python >= 3.12, so name it explicitly.
_BytesLike: TypeAlias = Buffer | np.ndarray[Any, Any]

def crc32(data: _BytesLike, value: int = 0) -> int:
    """Same result as ``zlib.crc32(data, value)``; *data* must be C-contiguous."""

def crc32_many(
    buf: _BytesLike,
    offsets: npt.ArrayLike,
    lengths: npt.ArrayLike,
) -> npt.NDArray[np.uint32]:
    """``zlib.crc32(buf[o:o + n])`` for every ``(o, n)`` pair; ValueError if a slice is out of bounds."""

def implementation() -> str:
    """The path in use: ``"vpclmul"``, ``"pclmul"``, ``"armv8-crc"`` or ``"table"``."""

def implementations() -> list[str]:
    """The paths this machine runs, fastest first (the last is always ``"table"``)."""

def _force_impl(name: str) -> None:
    """Test only: select ``"table"``, ``"pclmul"``, ``"vpclmul"``, ``"armv8-crc"`` or ``"auto"`` for this module."""
