"""Type stub for the ``dledger._ext.gather`` Cython kernel (body gather for Arrow binary columns)."""

import sys
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

if sys.version_info >= (3, 12):
    from collections.abc import Buffer
else:
    from typing_extensions import Buffer

_BytesLike: TypeAlias = Buffer | np.ndarray[Any, Any]

MAX_BINARY_BYTES: int

def gather(
    buf: _BytesLike,
    offsets: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int32],
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int32]]:
    """Copy ``buf[offsets[k]:offsets[k] + lengths[k]]`` back to back; returns the data and the
    ``len(offsets) + 1`` int32 value offsets (the two buffers of an Arrow binary array)."""
