"""Status codes and results with RocketMQ 4.9.4's names (org.apache.rocketmq.store)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from dledger.rocketmq.message import MessageExt


class PutMessageStatus(IntEnum):
    PUT_OK = 0
    FLUSH_DISK_TIMEOUT = 1
    FLUSH_SLAVE_TIMEOUT = 2
    SLAVE_NOT_AVAILABLE = 3
    SERVICE_NOT_AVAILABLE = 4
    CREATE_MAPEDFILE_FAILED = 5
    MESSAGE_ILLEGAL = 6
    PROPERTIES_SIZE_EXCEEDED = 7
    OS_PAGECACHE_BUSY = 8
    UNKNOWN_ERROR = 9
    LMQ_CONSUME_QUEUE_NUM_EXCEEDED = 10


class GetMessageStatus(IntEnum):
    FOUND = 0
    NO_MATCHED_MESSAGE = 1
    MESSAGE_WAS_REMOVING = 2
    OFFSET_FOUND_NULL = 3
    OFFSET_OVERFLOW_BADLY = 4
    OFFSET_OVERFLOW_ONE = 5
    OFFSET_TOO_SMALL = 6
    NO_MATCHED_LOGIC_QUEUE = 7
    NO_MESSAGE_IN_QUEUE = 8


class AppendMessageStatus(IntEnum):
    PUT_OK = 0
    END_OF_FILE = 1
    MESSAGE_SIZE_EXCEEDED = 2
    PROPERTIES_SIZE_EXCEEDED = 3
    UNKNOWN_ERROR = 4


@dataclass(slots=True)
class AppendMessageResult:
    """Where a put landed. For a batch, ``wrote_offset``/``logics_offset`` are the first
    message's and ``wrote_offsets``/``queue_offsets`` hold every message's."""

    status: AppendMessageStatus
    wrote_offset: int = 0
    wrote_bytes: int = 0
    store_timestamp: int = 0
    logics_offset: int = 0
    msg_num: int = 1
    store_host: bytes = b""
    wrote_offsets: np.ndarray | None = None
    queue_offsets: np.ndarray | None = None
    # The message ids are built on first use: a batch put does not pay for strings nobody reads.
    _msg_ids: list[str] | None = field(default=None, repr=False)

    @property
    def msg_ids(self) -> list[str]:
        if self._msg_ids is None:
            from dledger.rocketmq.message import create_message_id

            offsets = self.wrote_offsets if self.wrote_offsets is not None else [self.wrote_offset]
            self._msg_ids = [create_message_id(self.store_host, int(o)) for o in offsets]
        return self._msg_ids

    @property
    def msg_id(self) -> str:
        """The offset message id (a batch: the ids joined by commas, as RocketMQ does)."""
        return ",".join(self.msg_ids)


@dataclass(slots=True)
class PutMessageResult:
    status: PutMessageStatus
    append_result: AppendMessageResult | None = None
    # Why the put was refused, for the caller's logs (not a RocketMQ field).
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.status == PutMessageStatus.PUT_OK

    def is_ok(self) -> bool:
        return self.ok

    @property
    def msg_id(self) -> str:
        return self.append_result.msg_id if self.append_result else ""

    @property
    def phys_offset(self) -> int:
        return self.append_result.wrote_offset if self.append_result else -1

    @property
    def queue_offset(self) -> int:
        return self.append_result.logics_offset if self.append_result else -1


@dataclass(slots=True)
class GetMessageResult:
    status: GetMessageStatus
    next_begin_offset: int = 0
    min_offset: int = 0
    max_offset: int = 0
    messages: list[MessageExt] = field(default_factory=list)

    @property
    def message_count(self) -> int:
        return len(self.messages)

    @property
    def buffer_total_size(self) -> int:
        return sum(m.size for m in self.messages)
