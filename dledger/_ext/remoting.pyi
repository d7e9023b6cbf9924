"""Type stub for the ``dledger._ext.remoting`` Cython kernel (SEND_BATCH_MESSAGE bodies, frames, headers)."""

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
    npt.NDArray[np.int64],
    npt.NDArray[np.uint8] | bytes,
    npt.NDArray[np.int64],
    int,
    int,
]: ...
def offset_msg_ids(host_hex: bytes, phys: npt.NDArray[np.int64], add: int) -> str: ...
def decode_header(
    buf: _BytesLike,
) -> tuple[int, int, int, int, int, str | None, dict[str, str] | None, str | None]: ...
def configure(
    command: Any,
    json_loads: Any,
    java_text: Any,
    lang_names: dict[str, int],
    lang_other: int,
    json_type: Any,
    rocketmq_type: Any,
    error: type[Exception],
) -> None: ...
def decode_command(buf: _BytesLike, view: memoryview | None = None) -> Any: ...
def decode_frames(buf: _BytesLike, start: int, end: int, max_frame: int) -> tuple[int, int, list[Any], Any]: ...
def encode_json_header(
    code: int, ext: dict[str, str] | None, flag: int, language: str, opaque: int, remark: str | None, version: int
) -> bytes | None: ...
def encode_binary_header(
    code: int, language: int, version: int, opaque: int, flag: int, remark: str | None, ext: dict[str, str] | None
) -> bytes: ...
def json_header(buf: _BytesLike) -> Any: ...
