"""RocketMQ's SendResult, and the results of a batch send as one lazy sequence (no object per
message until one is asked for)."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dledger.rocketmq.store.message import (
    create_message_id,
)
from dledger.rocketmq.store.status import PutMessageStatus
from dledger.sequences import LazySequence

SEND_OK = "SEND_OK"


@dataclass(slots=True, frozen=True)
class SendResult:
    """RocketMQ's SendResult: ``status`` is ``"SEND_OK"`` or, when the group refused the message
    or no leader could be reached in time, the PutMessageStatus name (MESSAGE_ILLEGAL,
    SERVICE_NOT_AVAILABLE, OS_PAGECACHE_BUSY, UNKNOWN_ERROR...) with ``reason``. Three statuses
    say the message is stored though a wait after the put ran out (FLUSH_DISK_TIMEOUT,
    FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE): as in RocketMQ they carry the queue offset and
    ids as SEND_OK does.
    ``msg_id`` is the UNIQ_KEY, ``offset_msg_id`` the id of the stored record (store host and
    commit-log offset, what ``view_by_msg_id`` takes)."""

    status: str
    msg_id: str
    queue_id: int
    queue_offset: int
    offset_msg_id: str = ""
    topic: str = ""
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.status == SEND_OK


class UniqKeys(LazySequence[str]):
    """The UNIQ_KEYs of a batch from one producer: a head and a counter's 4 hex digits, made
    when asked for."""

    __slots__ = ("first", "head", "n")

    def __init__(self, head: str, first: int, n: int) -> None:
        self.head, self.first, self.n = head, first, n

    _what = "UNIQ_KEY"

    def __len__(self) -> int:
        return self.n

    def _item(self, i: int) -> str:
        return f"{self.head}{(self.first + i) & 0xFFFF:04X}"


class SendResults(LazySequence[SendResult]):
    """The SendResult of each message of a batch, made when asked for (a batch of thousands
    would otherwise spend more of the producer's time making results than sending)."""

    __slots__ = ("_phys", "_phys_add", "_uniqs", "first_offset", "queue_id", "reason", "status", "store_host", "topic")

    def __init__(
        self,
        status: str,
        topic: str,
        queue_id: int,
        uniqs: Sequence[str],
        first_offset: int = -1,
        phys: Sequence[int] | np.ndarray | None = None,
        store_host: str = "",
        reason: str = "",
        phys_add: int = 0,
    ) -> None:
        self.status = status
        self.topic = topic
        self.queue_id = queue_id
        self.first_offset = first_offset
        self.store_host = store_host
        self.reason = reason
        self._uniqs = uniqs
        # The records' positions as the member sent them (an int64 array read in place).
        self._phys: Sequence[int] | np.ndarray = [] if phys is None else phys
        # Added to each of ``_phys`` (the member answers entry positions and the 48 to add).
        self._phys_add = phys_add

    @property
    def ok(self) -> bool:
        return self.status == SEND_OK

    def __len__(self) -> int:
        return len(self._uniqs)

    _what = "send result"

    def _item(self, i: int) -> SendResult:
        if self.first_offset >= 0 and len(self._phys) == len(self._uniqs):
            # Stored: SEND_OK, or a flush or slave wait that ran out after the put.
            return SendResult(
                self.status,
                self._uniqs[i],
                self.queue_id,
                self.first_offset + i,
                offset_msg_id(self.store_host, int(self._phys[i]) + self._phys_add),
                self.topic,
            )
        return SendResult(self.status, self._uniqs[i], self.queue_id, -1, "", self.topic, self.reason)

    def __repr__(self) -> str:
        return f"SendResults({self.status}, {len(self)} messages, queue {self.queue_id}, from {self.first_offset})"

    @staticmethod
    def join(parts: list[SendResults]) -> SendResults:
        """Results of a batch sent as several requests (each all-or-nothing): the first failed
        request's status, else SEND_OK with the offsets of each piece."""
        if len(parts) == 1:
            return parts[0]
        bad = next((p for p in parts if not p.ok), None)
        uniqs = [u for p in parts for u in p._uniqs]
        if bad is not None:
            out = _Mixed(parts)
            return out
        first = parts[0]
        contiguous = all(
            parts[k].first_offset == parts[k - 1].first_offset + len(parts[k - 1]) for k in range(1, len(parts))
        )
        if contiguous and all(p.store_host == first.store_host for p in parts):
            return SendResults(
                SEND_OK,
                first.topic,
                first.queue_id,
                uniqs,
                first.first_offset,
                np.concatenate([np.asarray(p._phys, dtype=np.int64) + p._phys_add for p in parts]),
                first.store_host,
            )
        return _Mixed(parts)


class _Mixed(SendResults):
    """A batch whose pieces answered differently: each message's result from its piece."""

    __slots__ = ("_parts", "_starts")

    def __init__(self, parts: list[SendResults]) -> None:
        bad = next((p for p in parts if not p.ok), parts[0])
        super().__init__(bad.status, bad.topic, bad.queue_id, [u for p in parts for u in p._uniqs], reason=bad.reason)
        self._parts = parts
        self._starts = list(itertools.accumulate((len(p) for p in parts), initial=0))

    def _item(self, i: int) -> SendResult:
        k = bisect.bisect_right(self._starts, i) - 1
        return self._parts[k][i - self._starts[k]]


def status_name(code: int) -> str:
    try:
        return PutMessageStatus(code).name
    except ValueError:
        return f"status {code}"


def offset_msg_id(store_host: str, phys: int) -> str:
    host, _, port = store_host.rpartition(":")
    return create_message_id((host.strip("[]"), int(port)), phys)


def not_sent(failed: SendResults, topic: str, qid: int, n: int) -> SendResults:
    """The result of a batch's piece left unsent because an earlier one failed: sent after it,
    it would leave a hole in the queue (and its messages out of order when that one is sent
    again)."""
    reason = f"not sent: an earlier piece of the batch failed ({failed.status}: {failed.reason})"
    return SendResults(failed.status, topic, qid, [""] * n, reason=reason)
