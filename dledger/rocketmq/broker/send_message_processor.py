"""RocketMQ's SendMessageProcessor up to the store, for a member of a DLedger group: the checks
the Java broker makes of a send (topic, queue, numbers, properties as MessageDecoder reads them)
and the batch it hands the commit log, packed as it came where it can (one kernel call for the
records, no object per message) or as ``Message`` objects for one message, a delayed message
or a retry.
"""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from dledger._ext import load as _load_ext
from dledger.packed import FramedBodies, PackedBodies
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.encode import (
    MAX_PROPERTIES_BYTES,
    IllegalMessage,
    PreparedBatch,
    check_java_ints,
)
from dledger.rocketmq.store.message import PROPERTY_DELAY, Message, MessageSysFlag, encode_host, host_v6_bits
from dledger.rocketmq.store.topic_validator import validate_send_topic
from dledger.rocketmq.wire import SendRequest

if TYPE_CHECKING:
    from dledger.rocketmq.store.message_store import MessageStore

K = _load_ext("message")

# MixAll's prefixes of a consumer group's retry and dead-letter topics; SubscriptionGroupConfig's
# retryMaxTimes default; SendMessageProcessor.DLQ_NUMS_PER_GROUP.
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
MAX_RECONSUME_TIMES = 16
DLQ_NUMS_PER_GROUP = 1

# System topics of this service (RocketMQ's RMQ_SYS_ prefix).
OFFSET_TOPIC = "RMQ_SYS_CONSUMER_OFFSET"
NOOP_TOPIC = "RMQ_SYS_DLEDGER_NOOP"
SYSTEM_TOPICS = frozenset({OFFSET_TOPIC, NOOP_TOPIC})


def _delayed(m: Message) -> bool:
    try:
        return m.delay_time_level > 0
    except ValueError:  # not a number: the preparer refuses it
        return False


def _check_properties(raw: bytes) -> str:
    """A properties string as RocketMQ's producer writes it, or IllegalMessage."""
    if len(raw) > MAX_PROPERTIES_BYTES:
        raise IllegalMessage(f"properties are {len(raw)} bytes, over the limit of {MAX_PROPERTIES_BYTES}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise IllegalMessage(f"properties are not UTF-8: {exc}") from None
    for piece in text.split("\x02"):
        if piece and piece.find("\x01") <= 0:
            raise IllegalMessage(f"properties: {piece[:40]!r} is not a name\\x01value pair")
    return text


def _props_dict(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for piece in text.split("\x02"):
        if piece:
            k, _, v = piece.partition("\x01")
            out[k] = v
    return out


def _split_host(text: str) -> tuple[str, int] | None:
    """``host:port`` (the host may be a bracketed or bare IPv6 address), or None."""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _parse_host(text: str | None) -> tuple[str, int] | None:
    if not text:
        return None
    hp = _split_host(text)
    if hp is None:
        raise IllegalMessage(f"born host {text!r}: want host:port")
    return hp


# A connection sends many requests: its peer string is parsed once (4 us a parse).
@functools.lru_cache(maxsize=1024)
def _peer_host(peer: str) -> tuple[str, int] | None:
    """A connection's ``host:port`` as a BORNHOST (an IPv4-mapped IPv6 address as the IPv4 one,
    as Java gives it); None when it is not an IP address and port."""
    hp = _split_host(peer)
    if hp is None:
        return None
    try:
        ip = ipaddress.ip_address(hp[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip), hp[1]


# What the remoting processors take as a message's BORNHOST from their connection.
peer_host = _peer_host

_PROPS_REASONS = {
    K.PROPS_TOO_LONG: f"over the limit of {MAX_PROPERTIES_BYTES} bytes",
    K.PROPS_NOT_UTF8: "not UTF-8 (or a string starts or ends inside a character)",
    K.PROPS_NOT_PAIRS: "not name\\x01value pairs joined by \\x02",
}


class _OneString(dict[int, np.ndarray]):
    """The offsets array ``[0, n]`` of one packed string, by n."""

    def __missing__(self, n: int) -> np.ndarray:
        arr = np.array([0, n], dtype=np.int64)
        if len(self) < 1024:
            self[n] = arr
        return arr


_ONE_STRING = _OneString()


def _stem_properties(stem: bytes, first: int, n: int) -> list[bytes]:
    return [stem + f"{(first + k) & 0xFFFF:04X}".encode() for k in range(n)]


def _packed(items: list[bytes]) -> PackedBodies:
    offsets = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, items), dtype=np.int64, count=len(items)), out=offsets[1:])
    return PackedBodies(b"".join(items), offsets)


@dataclass(slots=True)
class PackedSend:
    """A checked batch to one topic-queue, kept as the producer packed it; ``encode`` makes its
    records with one kernel call (RocketMQ's MessageExtBatch through MessageSerializer)."""

    n: int
    # The records' bytes, all told.
    total: int
    queue_id: int
    queue_key: str
    advances: bool
    bodies: PackedBodies
    # One per message, or the stem that ``uniq_first``'s counter digits complete.
    properties: PackedBodies | bytes
    uniq_first: int
    topic: bytes
    flag: int
    sys_flag: int
    born_timestamp: int
    born_host: bytes
    store_host: bytes

    def encode(self, first_offset: int, store_timestamp: int) -> FramedBodies:
        """The records, queue offsets from ``first_offset``, each behind room for its entry
        header, as the file store appends them (in place, one pwrite). Their PHYSICALOFFSET is
        written by the AppendHook as they are appended."""
        buf, starts = K.encode_uniform(
            self.bodies,
            self.topic,
            self.properties,
            self.uniq_first,
            self.queue_id,
            self.flag,
            self.sys_flag,
            self.born_timestamp,
            self.born_host,
            store_timestamp,
            self.store_host,
            first_offset,
            self.advances,
            0,
            FramedBodies.GAP,
        )
        return FramedBodies(buf, starts)


def dlq_topic(req: SendRequest) -> str | None:
    """``%DLQ%<group>`` for a send to ``%RETRY%<group>`` whose message was consumed its
    ``max_reconsume_times`` (MAX_RECONSUME_TIMES unless the client names one) already
    (handleRetryAndDLQ, and CONSUMER_SEND_MSG_BACK through it); None for every other send."""
    if req.topic.startswith(RETRY_GROUP_TOPIC_PREFIX) and req.reconsume_times >= req.max_reconsume_times:
        return DLQ_GROUP_TOPIC_PREFIX + req.topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
    return None


class SendMessagePreparer:
    """The checked batch of a send request (on the member's loop)."""

    def __init__(self, store: MessageStore, store_config: MessageStoreConfig, queue_nums: int) -> None:
        self.store = store
        self.store_config = store_config
        self.queue_nums = queue_nums

    def prepare(
        self, req: SendRequest, bodies: PackedBodies, props: PackedBodies | None, peer: str
    ) -> PreparedBatch | PackedSend:
        """The checked batch: packed, to be encoded by one kernel call (``PackedSend``), or as
        ``Message`` objects for one message or a batch with a DELAY property (the store's
        preparer rewrites those to the schedule topic). Raises IllegalMessage."""
        topic = req.topic
        if topic in SYSTEM_TOPICS:
            raise IllegalMessage(f"topic {topic!r} is a system topic of the message service")
        # What the Java broker takes from a producer (SendMessageProcessor's checks).
        why = validate_send_topic(topic)
        if why is not None:
            raise IllegalMessage(why)
        if not isinstance(req.queue_id, int) or not 0 <= req.queue_id < self.queue_nums:
            raise IllegalMessage(
                f"queue id {req.queue_id} of topic {topic!r} is unknown (topics have {self.queue_nums} write queues)"
            )
        dead = dlq_topic(req)
        if dead is not None:
            # handleRetryAndDLQ: tried too often, the message goes to its group's dead letters.
            req = dataclasses.replace(req, topic=dead, queue_id=0)
            topic = dead
        check_java_ints(
            ("flag", req.flag, 32),
            ("sys flag", req.sys_flag, 32),
            ("born timestamp", req.born_timestamp, 64),
            ("reconsume times", req.reconsume_times, 32),
        )
        # The producer's address as the connection sees it, as the Java broker takes BORNHOST
        # from the channel (SendMessageProcessor), unless the request names one.
        born_host = _parse_host(req.born_host) if req.born_host else _peer_host(peer)
        n = len(bodies)
        tran = req.sys_flag & MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
        if n > 1 and tran != MessageSysFlag.TRANSACTION_NOT_TYPE:
            raise IllegalMessage("a batch cannot hold transaction messages (as RocketMQ's putMessages)")
        stem = req.props_stem
        if props is None:
            assert stem is not None
            # The stem and any 4 hex digits pass or fail alike: check one string.
            bad, reason, delay = K.check_packed_properties(stem + b"0000", _ONE_STRING[len(stem) + 4])
            # One by one: one message, a delay, or a reconsume count (which the packed kernel,
            # for the batches producers send, does not write; retried messages go alone).
            if bad < 0 and (delay or n == 1 or req.reconsume_times):
                props = _packed(_stem_properties(stem, req.uniq_first, n))
        if props is not None:
            praw, poffs = props.packed
            bad, reason, delay = K.check_packed_properties(praw, poffs)
        if bad >= 0:
            raise IllegalMessage(f"properties of message {bad}: {_PROPS_REASONS.get(reason, reason)}")
        batch: PreparedBatch | PackedSend
        if n == 1 or delay or req.reconsume_times:
            assert props is not None
            prepared = self._messages(req, bodies, props, born_host, no_delay=dead is not None)
            total = int(prepared.record_lengths().sum()) if n > 1 else 0
            batch = prepared
        else:
            batch = self._packed(req, bodies, props, born_host)
            total = batch.total
        if total > self.store_config.max_message_size:
            # RocketMQ caps a whole batch at maxMessageSize (DLedgerCommitLog.MessageSerializer).
            raise IllegalMessage(
                f"the batch is {total} bytes as records, over max_message_size {self.store_config.max_message_size}"
            )
        return batch

    def _messages(
        self,
        req: SendRequest,
        bodies: PackedBodies,
        props: PackedBodies,
        born_host: tuple[str, int] | None,
        no_delay: bool = False,
    ) -> PreparedBatch:
        topic = req.topic
        msgs = []
        n = len(bodies)
        for k in range(n):
            text = _check_properties(props[k])
            pairs = _props_dict(text)
            if no_delay:
                pairs.pop(PROPERTY_DELAY, None)  # msg.setDelayTimeLevel(0)
            m = Message(
                topic,
                bodies[k],
                queue_id=req.queue_id,
                flag=req.flag,
                properties=pairs,
                sys_flag=req.sys_flag,
                born_timestamp=req.born_timestamp,
                born_host=born_host,
                reconsume_times=req.reconsume_times,
            )
            if n > 1 and _delayed(m):
                # putMessages refuses it: each delayed message would take an offset in a schedule
                # queue while the answer numbers the batch's messages in its own queue.
                raise IllegalMessage("a batch cannot carry a delay level (as RocketMQ's putMessages)")
            msgs.append(m)
        # The string was checked as the Java broker checks it (_check_properties), which takes
        # pairs that read back dropped (an empty value): kept as sent, as the packed path does.
        return self.store.preparer.prepare(msgs, check_properties=False)

    def _packed(
        self, req: SendRequest, bodies: PackedBodies, props: PackedBodies | None, born_host: tuple[str, int] | None
    ) -> PackedSend:
        """A batch whose properties were checked, kept packed as it came: record lengths from
        the size arrays (no object per message)."""
        traw = req.topic.encode("utf-8")
        if not traw or len(traw) > 127:
            raise IllegalMessage(f"topic is {len(traw)} bytes in UTF-8: want 1 to 127")
        store_raw = self.store.preparer.store_host_raw
        braw = encode_host(born_host) if born_host is not None else store_raw
        sflag = host_v6_bits(req.sys_flag, braw, store_raw)
        fixed = K.record_length(sflag, 0, len(traw), 0)
        raw, boffs = bodies.packed
        n = len(bodies)
        # Lengths as the subtraction of two views: np.diff's Python wrapper cost more than the
        # subtraction itself, twice a send (docs/remoting.md, "Send path CPU, per phase").
        if props is None:
            assert req.props_stem is not None
            plen = len(req.props_stem) + 4
            longest = int((boffs[1:] - boffs[:-1]).max()) + plen + fixed
            total = len(raw) + n * (plen + fixed)
            packed_props: PackedBodies | bytes = req.props_stem
        else:
            praw, poffs = props.packed
            # A message's body and properties together: the step of the summed offsets.
            ends = boffs + poffs
            longest = int((ends[1:] - ends[:-1]).max()) + fixed
            total = len(raw) + len(praw) + n * fixed
            packed_props = props
        if longest > self.store_config.max_message_size:
            raise IllegalMessage(
                f"a message is {longest} bytes as a record, over max_message_size {self.store_config.max_message_size}"
            )
        tran = req.sys_flag & MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
        return PackedSend(
            n=n,
            total=total,
            queue_id=req.queue_id,
            queue_key=f"{req.topic}-{req.queue_id}",
            advances=tran in (MessageSysFlag.TRANSACTION_NOT_TYPE, MessageSysFlag.TRANSACTION_COMMIT_TYPE),
            bodies=bodies,
            properties=packed_props,
            uniq_first=req.uniq_first if props is None else -1,
            topic=traw,
            flag=req.flag,
            sys_flag=sflag,
            born_timestamp=req.born_timestamp or int(time.time() * 1000),
            born_host=braw,
            store_host=store_raw,
        )
