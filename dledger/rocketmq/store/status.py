"""Status codes and results with RocketMQ 4.9.4's names (org.apache.rocketmq.store)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING

import numpy as np

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


class AppendMessageResult:
    """Where a put landed. For a batch, ``wrote_offset``/``logics_offset`` are the first
    message's and ``wrote_offsets``/``queue_offsets`` hold every message's (one message's
    too, put alone or as a batch of one).

    A batch put may leave both arrays to be built on first read (most callers read neither, and
    two numpy arrays cost a batch of small messages more than its result does): ``_positions``
    with ``_delta`` gives ``wrote_offsets = _positions + _delta``, and ``_advances`` (not None)
    gives ``queue_offsets``: ``logics_offset`` on by one per message, or zeros when False."""

    __slots__ = (
        "_advances",
        "_delta",
        "_msg_ids",
        "_positions",
        "_queue_offsets",
        "_wrote_offsets",
        "logics_offset",
        "msg_num",
        "status",
        "store_host",
        "store_timestamp",
        "wrote_bytes",
        "wrote_offset",
    )

    def __init__(
        self,
        status: AppendMessageStatus,
        wrote_offset: int = 0,
        wrote_bytes: int = 0,
        store_timestamp: int = 0,
        logics_offset: int = 0,
        msg_num: int = 1,
        store_host: bytes = b"",
        wrote_offsets: np.ndarray | None = None,
        queue_offsets: np.ndarray | None = None,
        _positions: np.ndarray | None = None,
        _delta: int = 0,
        _advances: bool | None = None,
    ) -> None:
        self.status = status
        self.wrote_offset = wrote_offset
        self.wrote_bytes = wrote_bytes
        self.store_timestamp = store_timestamp
        self.logics_offset = logics_offset
        self.msg_num = msg_num
        self.store_host = store_host
        self._wrote_offsets = wrote_offsets
        self._queue_offsets = queue_offsets
        self._positions = _positions
        self._delta = _delta
        self._advances = _advances
        # The message ids are built on first use: a batch put does not pay for strings nobody reads.
        self._msg_ids: list[str] | None = None

    @property
    def wrote_offsets(self) -> np.ndarray | None:
        if self._wrote_offsets is None:
            if self._positions is not None:
                self._wrote_offsets = self._positions + self._delta
                self._positions = None
            elif self.msg_num == 1 and self.status == AppendMessageStatus.PUT_OK:
                # One message, put alone or as a batch of one: the same arrays as a batch.
                self._wrote_offsets = np.array([self.wrote_offset], dtype=np.int64)
        return self._wrote_offsets

    @wrote_offsets.setter
    def wrote_offsets(self, value: np.ndarray | None) -> None:
        self._wrote_offsets, self._positions = value, None

    @property
    def queue_offsets(self) -> np.ndarray | None:
        if self._queue_offsets is None and self._advances is not None:
            q0, n = self.logics_offset, self.msg_num
            self._queue_offsets = (
                np.arange(q0, q0 + n, dtype=np.int64) if self._advances else np.zeros(n, dtype=np.int64)
            )
            self._advances = None
        elif self._queue_offsets is None and self.msg_num == 1 and self.status == AppendMessageStatus.PUT_OK:
            self._queue_offsets = np.array([self.logics_offset], dtype=np.int64)
        return self._queue_offsets

    @queue_offsets.setter
    def queue_offsets(self, value: np.ndarray | None) -> None:
        self._queue_offsets, self._advances = value, None

    def __repr__(self) -> str:
        return (
            f"AppendMessageResult(status={self.status!r}, wrote_offset={self.wrote_offset}, "
            f"wrote_bytes={self.wrote_bytes}, store_timestamp={self.store_timestamp}, "
            f"logics_offset={self.logics_offset}, msg_num={self.msg_num}, store_host={self.store_host!r}, "
            f"wrote_offsets={self.wrote_offsets!r}, queue_offsets={self.queue_offsets!r})"
        )

    @property
    def msg_ids(self) -> list[str]:
        if self._msg_ids is None:
            from dledger.rocketmq.store.message import create_message_id

            wrote = self.wrote_offsets
            offsets = wrote.tolist() if wrote is not None else [self.wrote_offset]
            self._msg_ids = [create_message_id(self.store_host, o) for o in offsets]
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
