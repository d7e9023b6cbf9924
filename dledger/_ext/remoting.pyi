"""Type stub for the ``dledger._ext.remoting`` Cython kernel (SEND_BATCH_MESSAGE bodies)."""

import sys
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

if sys.version_info >= (3, 12):
    from collections.abc import Buffer
else:
    from typing_extensions import Buffer

_BytesLike: TypeAlias = Buffer | np.ndarray[Any, Any]

def decode_messages(
    buf: _BytesLike, tail: bytes
) -> tuple[
    npt.NDArray[np.uint8] | bytes,
    npt.NDArray[np.uint32],
    npt.NDArray[np.uint8] | bytes,
    npt.NDArray[np.uint32],
    int,
    int,
]: ...
def decode_header(
    buf: _BytesLike,
) -> tuple[int, int, int, int, int, str | None, dict[str, str] | None, str | None]: ...
