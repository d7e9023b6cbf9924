"""Status codes and results with RocketMQ 4.9.4's names (org.apache.rocketmq.store)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING

from dledger._ext import load as _load_ext

if TYPE_CHECKING:
    from dledger.rocketmq.store.message import MessageExt


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


# The statuses of a put whose messages are stored though a wait for them ran out or had no
# slave to wait for (SendMessageProcessor.handlePutMessageResult's ``sendOK = true`` cases): the
# answer carries the message ids and queue offset as SUCCESS does.
STORED_PUT_STATUSES = frozenset(
    {
        PutMessageStatus.PUT_OK,
        PutMessageStatus.FLUSH_DISK_TIMEOUT,
        PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
        PutMessageStatus.SLAVE_NOT_AVAILABLE,
    }
)


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


# AppendMessageResult and PutMessageResult are C types of the message kernel: a single put makes
# one of each, filled in C by the put (issue 40; docs/message-store.md).
if TYPE_CHECKING:
    from dledger._ext.message import AppendMessageResult as AppendMessageResult
    from dledger._ext.message import PutMessageResult as PutMessageResult
else:
    _K = _load_ext("message")
    AppendMessageResult = _K.AppendMessageResult
    PutMessageResult = _K.PutMessageResult


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
