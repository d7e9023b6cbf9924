"""The record encoder's side of CommitLog.DefaultAppendMessageCallback: ``PreparedBatch`` (the
columns of a batch ready for the put lock), RocketMQ's record length (calMsgLength), queue
offsets from the topic-queue table, the batch and single-record encoders, and the Java-range
checks of a message's numbers. ``batch_preparer`` builds the batches from messages.

What only the lock can give (store timestamp, queue offsets, physical offsets) is filled in
by the commit log.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from dledger._ext import load as _load_ext
from dledger.rocketmq.store.message import (
    IllegalMessage,
    Message,
    MessageSysFlag,
    java_int_problem,
)

K = _load_ext("message")
_message_ints_ok = K.message_ints_ok
_longest_body = K.longest_body
MAX_TOPIC_BYTES = 127
MAX_PROPERTIES_BYTES = 32767
MAX_QUEUE_ID = (1 << 31) - 1


# The four hex digits of the UNIQ_KEY counter, for every counter value.
HEX4 = [f"{i:04X}".encode() for i in range(1 << 16)]
_FULL_OF_CACHE: dict[tuple[int, Any, Any], np.ndarray] = {}


def full_of(n: int, value: Any, dtype: Any) -> np.ndarray:
    """``np.full`` for the constant columns of a batch, shared between batches (read-only)."""
    key = (n, value, dtype)
    arr = _FULL_OF_CACHE.get(key)
    if arr is None:
        arr = np.full(n, value, dtype=dtype)
        arr.flags.writeable = False
        if len(_FULL_OF_CACHE) > 4096:
            _FULL_OF_CACHE.clear()
        _FULL_OF_CACHE[key] = arr
    return arr


@dataclass(slots=True)
class PreparedBatch:
    """Messages ready for the encoder; arrays are length ``n``."""

    n: int
    topics: list[bytes]
    # Columns are numpy arrays, or lists when n == 1.
    queue_ids: Any
    bodies: list[bytes]
    properties: list[bytes]
    flags: Any
    sys_flags: Any
    born_timestamps: Any
    born_hosts: list[bytes]
    store_hosts: list[bytes]
    reconsume_times: Any
    prepared_offsets: Any
    # calMsgLength of each message (int64); None until ``record_lengths()`` when left lazy.
    lengths: Any
    # Whether each message takes a queue offset (NOT_TYPE / COMMIT_TYPE; PREPARED and ROLLBACK get 0).
    advances: Any
    # "topic-queueId" per message (CommitLog's topicQueueTable key).
    queue_keys: list[str]
    # Whether the put waits for the flush (the WAIT property; RocketMQ's isWaitStoreMsgOK).
    wait_store: bool = True
    # One topic-queue, every field but body and properties shared (RocketMQ's MessageExtBatch):
    # the commit logs encode it with one ``encode_uniform`` call.
    uniform: bool = False
    # With ``uniform``, the properties may be left as one stem (``properties`` empty): each
    # message's are the stem and, when ``uniq_first >= 0``, 4 hex digits of its UNIQ_KEY counter.
    props_stem: bytes | None = None
    uniq_first: int = -1
    # The longest record (-1: not computed; ``lengths.max()``).
    longest: int = -1
    # With ``lengths`` lazy: calMsgLength less the body and the properties.
    fixed_len: int = 0
    # With ``uniform``, the shared fields as plain values (topic, queue id, flag, sys flag, born
    # timestamp, born host, store host, advances), so an encode reads no numpy scalars.
    shared: tuple[Any, ...] | None = None

    def record_lengths(self) -> np.ndarray:
        """``lengths``, computed now if it was left lazy (a uniform batch's fast path needs none)."""
        if self.lengths is None:
            body = np.fromiter(map(len, self.bodies), dtype=np.int64, count=self.n)
            if self.props_stem is not None and not self.properties:
                self.lengths = body + (len(self.props_stem) + (4 if self.uniq_first >= 0 else 0) + self.fixed_len)
            else:
                self.lengths = (
                    body + np.fromiter(map(len, self.properties), dtype=np.int64, count=self.n) + self.fixed_len
                )
        return self.lengths

    def longest_record(self) -> int:
        if self.longest < 0:
            self.longest = int(self.record_lengths().max())
        return self.longest

    def properties_list(self) -> list[bytes]:
        """``properties`` with one value per message (made from the stem if it is not there)."""
        if not self.properties and self.props_stem is not None:
            stem, first = self.props_stem, self.uniq_first
            if first < 0:
                self.properties = [stem] * self.n
            else:
                self.properties = [stem + HEX4[(first + i) & 0xFFFF] for i in range(self.n)]
        return self.properties

    def shared_fields(self) -> tuple[Any, ...]:
        """``shared`` read from the columns' first message (a uniform batch built without it)."""
        return (
            self.topics[0],
            int(self.queue_ids[0]),
            int(self.flags[0]),
            int(self.sys_flags[0]),
            int(self.born_timestamps[0]),
            self.born_hosts[0],
            self.store_hosts[0],
            bool(self.advances[0]),
        )

    def encode_uniform(
        self,
        queue_offset: int,
        phys_offset: int,
        store_timestamp: int,
        first: int = 0,
        last: int = -1,
        gap: int = 0,
    ) -> tuple[Any, np.ndarray]:
        """Messages ``first:last`` of a uniform batch encoded by one kernel call, their queue
        offsets from ``queue_offset`` (the first message's) and physical offsets from
        ``phys_offset``: ``(buffer, offsets)`` as ``K.encode_uniform`` (``gap`` bytes before
        each record: room for a DLedger entry header)."""
        last = self.n if last < 0 else last
        whole = first == 0 and last == self.n
        bodies = self.bodies if whole else self.bodies[first:last]
        if self.props_stem is not None and not self.properties:
            props: Any = self.props_stem
            uniq = self.uniq_first + first if self.uniq_first >= 0 else -1
        else:
            props = self.properties if whole else self.properties[first:last]
            uniq = -1
        sh = self.shared
        if sh is None:
            sh = self.shared_fields()
        topic, queue_id, flag, sys_flag, born_ts, born_host, store_host, adv = sh
        return K.encode_uniform(
            bodies,
            topic,
            props,
            uniq,
            queue_id,
            flag,
            sys_flag,
            born_ts,
            born_host,
            store_timestamp,
            store_host,
            queue_offset + first if adv else 0,
            adv,
            phys_offset,
            gap,
        )

    @property
    def total_bytes(self) -> int:
        return int(self.record_lengths().sum())


def assign_queue_offsets(table: dict[str, int], batch: PreparedBatch) -> tuple[np.ndarray, dict[str, int]]:
    """Queue offsets for a batch from the topic-queue table, without changing it: the offsets
    and the table entries to store once the records are written."""
    n = batch.n
    keys = batch.queue_keys
    if n == 1:
        if not batch.advances[0]:
            return np.zeros(1, dtype=np.int64), {}
        first = table.get(keys[0], 0)
        return np.array([first], dtype=np.int64), {keys[0]: first + 1}
    out = np.zeros(n, dtype=np.int64)
    updates: dict[str, int] = {}
    if n and keys.count(keys[0]) == n:
        # One queue (the usual batch): a running count over the messages that take an offset.
        start = table.get(keys[0], 0)
        adv = batch.advances
        counts = np.cumsum(adv, dtype=np.int64)
        out = np.where(adv, start + counts - 1, 0)
        total = int(counts[-1])
        if total:
            updates[keys[0]] = start + total
        return out, updates
    for i, key in enumerate(keys):
        if not batch.advances[i]:
            continue
        cur = updates.get(key)
        if cur is None:
            cur = table.get(key, 0)
        out[i] = cur
        updates[key] = cur + 1
    return out, updates


def encode_batch(
    batch: PreparedBatch, queue_offsets: np.ndarray, phys_offsets: np.ndarray, store_timestamp: int
) -> tuple[bytes, np.ndarray]:
    """The records back to back and their n+1 start offsets in the buffer."""
    if batch.n == 1:
        rec = encode_one(batch, int(queue_offsets[0]), int(phys_offsets[0]), store_timestamp)
        return rec, np.array([0, len(rec)], dtype=np.int64)
    store_ts = np.full(batch.n, store_timestamp, dtype=np.int64)
    buf, starts = K.encode_records(
        batch.bodies,
        batch.topics,
        batch.properties_list(),
        batch.queue_ids,
        batch.flags,
        queue_offsets,
        phys_offsets,
        batch.sys_flags,
        batch.born_timestamps,
        batch.born_hosts,
        store_ts,
        batch.store_hosts,
        batch.reconsume_times,
        batch.prepared_offsets,
    )
    return buf, np.asarray(starts, dtype=np.int64)


_HEAD = struct.Struct(">iiiiiqqiq")
_MID = struct.Struct(">iqi")
_TS = struct.Struct(">q")
_SHORT = struct.Struct(">h")


def record_length(sys_flag: int, body_len: int, topic_len: int, props_len: int) -> int:
    """CommitLog.calMsgLength."""
    return (
        91
        + body_len
        + topic_len
        + props_len
        + (12 if sys_flag & MessageSysFlag.BORNHOST_V6_FLAG else 0)
        + (12 if sys_flag & MessageSysFlag.STOREHOSTADDRESS_V6_FLAG else 0)
    )


def encode_one(batch: PreparedBatch, queue_offset: int, phys_offset: int, store_timestamp: int) -> bytes:
    """The record of a one-message batch, encoded here: the kernel's per-call cost is several
    times this for a single record."""
    body, topic, props = batch.bodies[0], batch.topics[0], batch.properties_list()[0]
    sys_flag = int(batch.sys_flags[0])
    size = int(batch.record_lengths()[0])
    return b"".join(
        (
            _HEAD.pack(
                size,
                K.MESSAGE_MAGIC_CODE,
                zlib.crc32(body) & 0x7FFFFFFF,
                int(batch.queue_ids[0]),
                int(batch.flags[0]),
                queue_offset,
                phys_offset,
                sys_flag,
                int(batch.born_timestamps[0]),
            ),
            batch.born_hosts[0],
            _TS.pack(store_timestamp),
            batch.store_hosts[0],
            _MID.pack(int(batch.reconsume_times[0]), int(batch.prepared_offsets[0]), len(body)),
            body,
            bytes((len(topic),)),
            topic,
            _SHORT.pack(len(props)),
            props,
        )
    )


def check_java_ints(*fields: tuple[str, int, int]) -> None:
    """IllegalMessage for the first (name, value, bits) whose value no Java int of those bits holds."""
    why = java_int_problem(*fields)
    if why is not None:
        raise IllegalMessage(why)


def check_message_ints(m: Message) -> None:
    """IllegalMessage for a number of ``m`` that no Java int or long holds: the record's field
    has no room for it."""
    if _message_ints_ok(m):  # java_ranges_ok, in C
        return
    check_java_ints(
        ("flag", m.flag, 32),
        ("sys flag", m.sys_flag, 32),
        ("reconsume times", m.reconsume_times, 32),
        ("born timestamp", m.born_timestamp, 64),
        ("prepared offset", m.prepared_offset, 64),
    )


def delay_of(table: dict[int, int], level: int) -> int:
    """ScheduleMessageService.computeDeliverTimestamp's delay: the level's, else 1 s."""
    return table.get(level, 1000)
