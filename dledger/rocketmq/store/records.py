"""Stored records to ``MessageExt`` objects (MessageDecoder.decode over scan columns)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from dledger._ext import load as _load_ext
from dledger.rocketmq.store.message import MessageExt

K = _load_ext("message")

# The kernel builds MessageExt positionally, in this order of its fields.
if tuple(f.name for f in dataclasses.fields(MessageExt)) != K.MESSAGE_EXT_FIELDS:
    raise ImportError("dledger._ext.message was built for other MessageExt fields: rebuild the extension")


def messages_from_columns(
    buf: Any, cols: dict[str, np.ndarray], rows: Any = None, *, client: bool = False
) -> list[MessageExt]:
    """One MessageExt per scanned record (``rows`` selects some). Bodies are the stored bytes
    (compressed ones stay compressed: see ``MessageExt.sys_flag``). ``client``: ``msg_id`` is
    the UNIQ_KEY, as a consumer sees it (see ``MessageExt.msg_id``)."""
    out: list[MessageExt] = K.message_exts(buf, cols, rows, MessageExt, client)
    return out


def decode_record(data: bytes | memoryview, phys_offset: int, *, client: bool = False) -> MessageExt | None:
    """The message of one record's bytes (None if they are not a whole record)."""
    msg: MessageExt | None = K.message_ext(data, phys_offset, MessageExt, client)
    return msg
