"""Messages as RocketMQ 4.9 stores them: ``Message``, ``MessageExt``, ``MessageConst``, ``MessageSysFlag``.

The properties string is RocketMQ's ``name\\x01value\\x02name\\x01value`` (MessageDecoder's
messageProperties2String / string2messageProperties). Tags, keys and the delay level live in
it as ``TAGS``, ``KEYS`` and ``DELAY``; ``Message`` keeps them as attributes too and writes them
into the properties when the message is stored.
"""

from __future__ import annotations

import ipaddress
import operator
import os
import socket
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dledger._ext import load as _load_ext

_time = time.time  # a global, not an attribute lookup, on every put

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
KEY_SEPARATOR = " "


class MessageConst:
    """Property names (org.apache.rocketmq.common.message.MessageConst)."""

    PROPERTY_KEYS = "KEYS"
    PROPERTY_TAGS = "TAGS"
    PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
    PROPERTY_DELAY_TIME_LEVEL = "DELAY"
    PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
    PROPERTY_REAL_TOPIC = "REAL_TOPIC"
    PROPERTY_REAL_QUEUE_ID = "REAL_QID"
    PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
    PROPERTY_PRODUCER_GROUP = "PGROUP"
    PROPERTY_MIN_OFFSET = "MIN_OFFSET"
    PROPERTY_MAX_OFFSET = "MAX_OFFSET"
    PROPERTY_BUYER_ID = "BUYER_ID"
    PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    PROPERTY_TRANSFER_FLAG = "TRANSFER_FLAG"
    PROPERTY_CORRECTION_FLAG = "CORRECTION_FLAG"
    PROPERTY_MQ2_FLAG = "MQ2_FLAG"
    PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
    PROPERTY_MSG_REGION = "MSG_REGION"
    PROPERTY_TRACE_SWITCH = "TRACE_ON"
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
    PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    PROPERTY_CONSUME_START_TIMESTAMP = "CONSUME_START_TIME"
    PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
    PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
    PROPERTY_INSTANCE_ID = "INSTANCE_ID"
    PROPERTY_CORRELATION_ID = "CORRELATION_ID"
    PROPERTY_MESSAGE_REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
    PROPERTY_MESSAGE_TTL = "TTL"
    PROPERTY_REPLY_MESSAGE_ARRIVE_TIME = "ARRIVE_TIME"
    PROPERTY_PUSH_REPLY_TIME = "PUSH_REPLY_TIME"
    PROPERTY_CLUSTER = "CLUSTER"
    PROPERTY_MESSAGE_TYPE = "MSG_TYPE"
    KEY_SEPARATOR = KEY_SEPARATOR


# Short aliases for the names used most.
PROPERTY_KEYS = MessageConst.PROPERTY_KEYS
PROPERTY_TAGS = MessageConst.PROPERTY_TAGS
PROPERTY_DELAY = MessageConst.PROPERTY_DELAY_TIME_LEVEL
PROPERTY_REAL_TOPIC = MessageConst.PROPERTY_REAL_TOPIC
PROPERTY_REAL_QID = MessageConst.PROPERTY_REAL_QUEUE_ID
UNIQ_KEY = MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
# Aliases with the names of the shared plan.
DELAY = PROPERTY_DELAY
REAL_TOPIC = PROPERTY_REAL_TOPIC
REAL_QID = PROPERTY_REAL_QID

# System topics (TopicValidator / ScheduleMessageService / TransactionalMessageUtil).
RMQ_SYS_SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
RMQ_SYS_TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
RMQ_SYS_TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"


class MessageSysFlag:
    """Bits of the SYSFLAG field (org.apache.rocketmq.common.sysflag.MessageSysFlag)."""

    COMPRESSED_FLAG = 0x1
    MULTI_TAGS_FLAG = 0x2
    TRANSACTION_NOT_TYPE = 0
    TRANSACTION_PREPARED_TYPE = 0x1 << 2
    TRANSACTION_COMMIT_TYPE = 0x2 << 2
    TRANSACTION_ROLLBACK_TYPE = 0x3 << 2
    BORNHOST_V6_FLAG = 0x1 << 4
    STOREHOSTADDRESS_V6_FLAG = 0x1 << 5

    @staticmethod
    def get_transaction_value(flag: int) -> int:
        return flag & MessageSysFlag.TRANSACTION_ROLLBACK_TYPE

    @staticmethod
    def reset_transaction_value(flag: int, tran_type: int) -> int:
        return (flag & ~MessageSysFlag.TRANSACTION_ROLLBACK_TYPE) | tran_type


_HOST_V6_BITS = MessageSysFlag.BORNHOST_V6_FLAG | MessageSysFlag.STOREHOSTADDRESS_V6_FLAG


# -- properties string -------------------------------------------------------------------


def encode_properties(properties: dict[str, str] | None) -> str:
    """messageProperties2String: ``name\\x01value`` pairs joined by ``\\x02`` (None values skipped)."""
    if not properties:
        return ""
    return PROPERTY_SEPARATOR.join(f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in properties.items() if v is not None)


def properties_problem(properties: Mapping[str, str | None]) -> str | None:
    """Why ``properties`` would not read back as they are from their stored string (None: they
    would). string2messageProperties drops a pair with an empty name or value, and a name or
    value holding ``\x01`` or ``\x02`` (its separators) reads back cut or split; RocketMQ's
    producer refuses blank ones (putUserProperty), and the separators are refused here too."""
    for k, v in properties.items():
        if v is None:
            continue
        if not k or not v:
            return f"property {k!r} has an empty name or value, which reading the record back drops"
        if NAME_VALUE_SEPARATOR in k or PROPERTY_SEPARATOR in k or NAME_VALUE_SEPARATOR in v or PROPERTY_SEPARATOR in v:
            return f"property {k!r}: a name or value holds \\x01 or \\x02, RocketMQ's separators"
        if not (_utf8_ok(k) and _utf8_ok(v)):
            return f"property {k!r}: a name or value is no UTF-8 (a lone surrogate), which reads back as U+FFFD"
    return None


def _utf8_ok(text: str) -> bool:
    """``text`` encodes as UTF-8 (no lone surrogate, which surrogatepass would store as bytes
    no reader decodes)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def joined_properties_problem(properties: Mapping[str, str | None], joined: bytes | str) -> str | None:
    """``properties_problem`` for properties already joined into ``joined`` (their
    messageProperties2String): a few scans of the string, the pairs looked at only when those
    find something wrong."""
    n = len(properties)
    one: Any = NAME_VALUE_SEPARATOR if isinstance(joined, str) else b"\x01"
    two: Any = PROPERTY_SEPARATOR if isinstance(joined, str) else b"\x02"
    j: Any = joined
    ok = j.count(one) == n and j.count(two) == n - 1 and not (j.startswith(one) or j.endswith(one))
    ok = ok and one + two not in j and two + one not in j
    # A lone surrogate: stored by surrogatepass as ED A0-BF .. (ED also starts U+D000-U+D7FF,
    # which the pairs' check then passes).
    ok = ok and (b"\xed" not in j if isinstance(j, bytes) else _utf8_ok(j))
    return None if ok or not n else properties_problem(properties)


# Java's int and long: what a record's number fields hold.
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1
_I63 = (1 << 63) - 1

# Why a str body is refused (the store's put paths and the producer).
STR_BODY_PROBLEM = "a message body is a str: give bytes (text.encode())"


def java_ranges_ok(m: Message) -> bool:
    """Every number of ``m`` fits its record field's Java type (the quick test;
    ``java_int_problem`` says which does not)."""
    # Types first: a float or a bool compares as a number and would be stored truncated.
    return (
        type(m.flag) is int
        and type(m.sys_flag) is int
        and type(m.reconsume_times) is int
        and type(m.born_timestamp) is int
        and type(m.prepared_offset) is int
        and _I32_MIN <= m.flag <= _I32_MAX
        and _I32_MIN <= m.sys_flag <= _I32_MAX
        and _I32_MIN <= m.reconsume_times <= _I32_MAX
        and -_I63 <= m.born_timestamp <= _I63
        and -_I63 <= m.prepared_offset <= _I63
    )


def java_int_problem(*fields: tuple[str, Any, int]) -> str | None:
    """Why the first ``(name, value, bits)`` has no room in its record field, a Java int of
    ``bits`` (None: they all fit)."""
    for name, value, bits in fields:
        half = 1 << (bits - 1)
        # An integer (a numpy one too), not a bool or a float, which would be stored truncated.
        whole = not isinstance(value, bool) and hasattr(type(value), "__index__")
        if not whole or not -half <= operator.index(value) < half:
            return f"{name} {value!r} is not a Java {'int' if bits == 32 else 'long'} (int{bits})"
    return None


class IllegalMessage(ValueError):
    """A message the store refuses (MESSAGE_ILLEGAL); the text says why."""


def keys_text(keys: object, what: str = "Message.keys") -> str | None:
    """The KEYS value of ``keys``: a str as it is, a list or tuple of str joined with a space
    (Java's ``setKeys(Collection)``), None as None. IllegalMessage for anything else."""
    if keys is None or type(keys) is str:
        return keys
    if isinstance(keys, (list, tuple)) and all(type(k) is str for k in keys):
        # Java 4.9's setKeys(Collection): each key and a space, then String.trim(); here only the
        # spaces go, so that a separator character is still refused rather than trimmed away.
        return KEY_SEPARATOR.join(keys).strip(KEY_SEPARATOR)
    raise IllegalMessage(f"{what}: a str, a list of str or None, not {keys!r}")


def batch_keys(keys: Sequence[str | Sequence[str] | None], n: int) -> list[str | None]:
    """The KEYS value of each of a batch's ``n`` bodies, each as ``Message.keys`` takes it."""
    if isinstance(keys, (str, bytes)):
        raise IllegalMessage("keys must hold one entry per body (a list), not one string for the batch")
    if len(keys) != n:
        raise IllegalMessage(f"{len(keys)} keys for {n} bodies")
    return [k if k is None or type(k) is str else keys_text(k, f"keys of body {i}") for i, k in enumerate(keys)]


def keys_problem(keys: Iterable[str | None]) -> str | None:
    """Why a batch's KEYS values would not read back as they are (None: they would)."""
    bad = next((k for k in keys if k and (NAME_VALUE_SEPARATOR in k or PROPERTY_SEPARATOR in k)), None)
    if bad is not None:
        return f"keys {bad!r} hold \\x01 or \\x02, RocketMQ's property separators"
    bad = next((k for k in keys if k and not _utf8_ok(k)), None)
    return None if bad is None else f"keys {bad!r} are no UTF-8 (a lone surrogate), which reads back as U+FFFD"


def decode_properties(text: str | None) -> dict[str, str]:
    """string2messageProperties, with its rules: a pair needs a non-empty name and value
    (pieces shorter than 3 characters or without a separator are skipped); a later name wins."""
    out: dict[str, str] = {}
    if not text:
        return out
    for piece in text.split(PROPERTY_SEPARATOR):
        if len(piece) < 3:
            continue
        sep = piece.find(NAME_VALUE_SEPARATOR)
        if 0 < sep < len(piece) - 1:
            out[piece[:sep]] = piece[sep + 1 :]
    return out


def split_keys(keys: str | None) -> list[str]:
    """The non-empty KEYS segments, as the index service takes them (split on one space)."""
    if not keys:
        return []
    return [k for k in keys.split(KEY_SEPARATOR) if k]


# -- hosts ---------------------------------------------------------------------------------

Host = tuple[str, int]

_host_cache: dict[Host, bytes] = {}


def encode_host(host: Host) -> bytes:
    """The BORNHOST/STOREHOSTADDRESS field: 4 (IPv4) or 16 (IPv6) address bytes, then the port
    as a big-endian int. Host names are resolved once."""
    raw = _host_cache.get(host)
    if raw is None:
        addr, port = host
        try:
            ip = ipaddress.ip_address(addr.strip("[]"))
        except ValueError:
            ip = ipaddress.ip_address(socket.gethostbyname(addr))
        raw = ip.packed + struct.pack(">i", port)
        if len(_host_cache) < 4096:
            _host_cache[host] = raw
    return raw


def decode_host(raw: bytes | memoryview) -> Host:
    """Inverse of ``encode_host`` (8 or 20 bytes)."""
    raw = bytes(raw)
    port = struct.unpack(">i", raw[-4:])[0]
    if len(raw) == 8:
        return socket.inet_ntoa(raw[:4]), port  # what ipaddress prints, without its parsing
    return str(ipaddress.ip_address(raw[:-4])), port


def java_host_address(addr: str) -> str:
    """InetAddress.getHostAddress: IPv4 dotted, IPv6 as eight uncompressed lower-case hex groups."""
    ip = ipaddress.ip_address(addr.strip("[]"))
    if ip.version == 4:
        return str(ip)
    groups = struct.unpack(">8H", ip.packed)
    return ":".join(f"{g:x}" for g in groups)


def format_host(host: Host) -> str:
    """InetSocketAddress as RocketMQ prints it without the leading slash: ``a.b.c.d:port`` or
    ``[2001:db8:0:0:0:0:0:10]:10911``."""
    addr, port = host
    text = java_host_address(addr)
    return f"[{text}]:{port}" if ":" in text else f"{text}:{port}"


def is_v6(host: Host) -> bool:
    return len(encode_host(host)) == 20


def create_message_id(store_host: bytes | Host, phys_offset: int) -> str:
    """MessageDecoder.createMessageId: hex (upper case) of the store host field (address and
    port) followed by the 8-byte commit-log offset; 32 chars for IPv4, 56 for IPv6."""
    raw = store_host if isinstance(store_host, (bytes, bytearray)) else encode_host(store_host)
    return (bytes(raw) + struct.pack(">q", phys_offset)).hex().upper()


def decode_message_id(msg_id: str) -> tuple[Host, int]:
    """MessageDecoder.decodeMessageId: ``((ip, port), phys_offset)``."""
    raw = bytes.fromhex(msg_id)
    if len(raw) not in (16, 28):
        raise ValueError(f"not an offset message id: {msg_id!r}")
    return decode_host(raw[:-8]), struct.unpack(">q", raw[-8:])[0]


# -- UNIQ_KEY (MessageClientIDSetter) --------------------------------------------------------


def _host_ip() -> bytes | None:
    """A non-loopback address of this host (IPv4 first), or None when it has none we can find."""
    candidates: list[bytes] = []
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None):
            ip = ipaddress.ip_address(str(info[4][0]).split("%")[0])
            if not (ip.is_loopback or ip.is_link_local or ip.is_unspecified):
                candidates.append(ip.packed)
    except (OSError, ValueError):
        pass
    if not candidates:
        # The address the host would send from (a UDP connect sends nothing); needs a route only.
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect(("10.255.255.255", 1))
                ip = ipaddress.ip_address(s.getsockname()[0])
                if not (ip.is_loopback or ip.is_unspecified):
                    candidates.append(ip.packed)
        except OSError:
            pass
    v4 = [c for c in candidates if len(c) == 4]
    return v4[0] if v4 else (candidates[0] if candidates else None)


def _local_ip() -> bytes:
    """MessageClientIDSetter's IP for unique ids: this host's address, else a fake 4-byte one made
    from the clock (createFakeIP), which only has to differ between hosts."""
    ip = _host_ip()
    return ip if ip is not None else struct.pack(">q", int(time.time() * 1000))[4:]


def local_host_address() -> str:
    """The store host when none is configured (RemotingUtil.getLocalAddress): this host's address,
    else 127.0.0.1. It is written into every record and message id, so it must not change between
    runs of the same store, which a made-up address would."""
    ip = _host_ip()
    return str(ipaddress.ip_address(ip)) if ip is not None else "127.0.0.1"


# Ids one UNIQ_KEY head can name: its counter is 4 hex digits.
IDS_PER_HEAD = 0x10000


class UniqIdGenerator:
    """MessageClientIDSetter.createUniqID: hex of ip + pid (short) + a per-process int, then the
    milliseconds since the start of this month (int) and a counter (short)."""

    def __init__(self, ip: bytes | None = None) -> None:
        ip = _local_ip() if ip is None else ip
        fixed = ip + struct.pack(">HI", os.getpid() & 0xFFFF, id(self) & 0xFFFFFFFF)
        self.prefix = fixed.hex().upper()
        # The counter and the millisecond the last ids' head named, taken in one C call (see
        # UniqClock): ids are unique while one head covers at most IDS_PER_HEAD counter values.
        # The kernel is loaded here, not at import: it brings numpy, which a client that only
        # builds Message objects (and the CLI's parser) must not pay for.
        self._clock = _load_ext("message").UniqClock(self._heads)
        self._take_at: Callable[[int, int], tuple[int, int]] = self._clock.take
        # ``reserve`` with the head as ASCII bytes (what a single put's encoder takes), by one
        # C call: a single put's UNIQ_KEY.
        self.reserve_raw: Callable[[int], tuple[bytes, int, int]] = self._clock.reserve_raw
        self._lock = threading.Lock()  # the month's start (_diff)
        self._start_ms = 0
        self._next_start_ms = 0
        self._head: tuple[int, str, bytes] = (-1, "", b"")
        self._set_start(int(time.time() * 1000))

    def _set_start(self, now_ms: int) -> None:
        dt = datetime.fromtimestamp(now_ms / 1000.0)
        start = dt.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        nxt = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
        self._start_ms = int(start.timestamp() * 1000)
        self._next_start_ms = int(nxt.timestamp() * 1000)

    def _diff(self, now: int | None = None) -> int:
        if now is None:
            now = int(time.time() * 1000)
        if now >= self._next_start_ms:
            with self._lock:
                if now >= self._next_start_ms:
                    self._set_start(now)
        diff = now - self._start_ms
        if -1_000_000 < diff < 0:  # the clock stepped back (NTP)
            diff = 0
        return diff & 0xFFFFFFFF

    def create(self) -> str:
        first, ms = self._take_at(1, int(_time() * 1000))
        return f"{self._heads(ms)[1]}{first & 0xFFFF:04X}"

    def create_many(self, n: int) -> list[str]:
        return [f"{head}{(first + i) & 0xFFFF:04X}" for head, first, k in self.reserve_chunks(n) for i in range(k)]

    def reserve_chunks(self, n: int) -> list[tuple[str, int, int]]:
        """``n`` ids as ``(head, first, count)`` pieces of at most IDS_PER_HEAD, each under a head
        of its own where needed: a batch bigger than the 4-digit counter."""
        out = []
        while n > 0:
            k = min(n, IDS_PER_HEAD)
            head, first, _now = self.reserve(k)
            out.append((head, first, k))
            n -= k
        return out

    def head(self) -> str:
        """Everything but the counter: the ids made within one millisecond share it."""
        return self._heads(int(time.time() * 1000))[1]

    def reserve(self, n: int) -> tuple[str, int, int]:
        """``n`` (at most IDS_PER_HEAD) ids from one reading of the clock: ``(head, first,
        now_ms)``, what a batch's ids need (``now_ms`` serves as its born time)."""
        now = int(_time() * 1000)
        first, ms = self._take_at(n, now)
        return self._heads(ms)[1], first, now

    def _heads(self, now: int) -> tuple[int, str, bytes]:
        """``(now, head, head as bytes)`` for the millisecond ``now``, made once per millisecond."""
        cached = self._head
        if cached[0] != now:
            head = f"{self.prefix}{self._diff(now):08X}"
            cached = self._head = (now, head, head.encode())
        return cached

    @property
    def head_len(self) -> int:
        """The length of ``head()``: the prefix and 8 hex digits of the month's milliseconds."""
        return len(self.prefix) + 8

    def take(self, n: int) -> int:
        """Reserve ``n`` consecutive counter values; returns the first."""
        return self._take_at(n, int(_time() * 1000))[0]


_uniq: UniqIdGenerator | None = None


def create_uniq_id() -> str:
    global _uniq
    if _uniq is None:
        _uniq = UniqIdGenerator()
    return _uniq.create()


# -- messages --------------------------------------------------------------------------------


@dataclass(slots=True)
class _MessageSpec:
    """Message's fields (its dataclass metadata, equality and repr come from here)."""

    topic: str
    body: bytes = b""
    queue_id: int = 0
    flag: int = 0
    tags: str | None = None
    keys: list[str] | str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    delay_level: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: Host | None = None
    reconsume_times: int = 0
    prepared_offset: int = 0


if TYPE_CHECKING:
    _MessageData = _MessageSpec
else:
    _fields_ext = _load_ext("message_fields")
    if tuple(_MessageSpec.__dataclass_fields__) != _fields_ext.MESSAGE_FIELDS:
        raise ImportError("dledger._ext.message_fields does not match Message's fields: rebuild the extension")

    class _MessageData(_fields_ext.MessageFields):
        """_MessageSpec's dataclass, its fields stored by a C type (issue 40: a put builds a
        Message, and the dataclass's generated __init__ cost ~0.3 us more than the C one).
        ``dataclasses.fields``/``replace``/``asdict``, equality, repr, pickling and
        ``dataclass(slots=True)`` subclasses (MessageExt) work as on the dataclass."""

        __slots__ = ()
        __dataclass_fields__ = _MessageSpec.__dataclass_fields__
        __dataclass_params__ = _MessageSpec.__dataclass_params__
        __match_args__ = _MessageSpec.__match_args__
        __eq__ = _MessageSpec.__eq__
        __repr__ = _MessageSpec.__repr__
        __hash__ = None


class Message(_MessageData):
    """A message to store. ``tags``, ``keys`` and ``delay_level`` are written into the properties
    as TAGS, KEYS and DELAY when set; ``properties`` holds the rest (user and system properties).

    ``born_timestamp`` 0 and ``born_host`` None mean "now" and the store's own address.
    """

    __slots__ = ()

    @property
    def keys_string(self) -> str | None:
        if self.keys is None:
            return self.properties.get(PROPERTY_KEYS)
        return keys_text(self.keys)

    @property
    def key_list(self) -> list[str]:
        return split_keys(self.keys_string)

    @property
    def tags_value(self) -> str | None:
        return self.tags if self.tags is not None else self.properties.get(PROPERTY_TAGS)

    @property
    def delay_time_level(self) -> int:
        if self.delay_level:
            return self.delay_level
        text = self.properties.get(PROPERTY_DELAY)
        return int(text) if text else 0

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(UNIQ_KEY)

    def store_properties(self) -> dict[str, str]:
        """The properties as stored: ``properties`` plus KEYS, TAGS and DELAY from the attributes."""
        props = dict(self.properties)
        if self.keys is not None:
            keys = self.keys_string
            if keys:
                props[PROPERTY_KEYS] = keys
        if self.tags is not None and self.tags != "":
            props[PROPERTY_TAGS] = self.tags
        if self.delay_level > 0:
            props[PROPERTY_DELAY] = str(self.delay_level)
        return props

    @property
    def transaction_type(self) -> int:
        return MessageSysFlag.get_transaction_value(self.sys_flag)


if not TYPE_CHECKING:
    # Message(...) without the tuple and dict a subclass of a C type is otherwise called with.
    _fields_ext.install_vectorcall(Message)


@dataclass(slots=True)
class MessageExt(Message):
    """A stored message: what the store assigned, decoded from its commit-log record.

    ``properties`` holds every stored property (TAGS, KEYS, UNIQ_KEY included) and ``tags`` /
    ``keys`` their values; ``properties_string`` is the raw stored string.
    """

    queue_offset: int = 0
    phys_offset: int = 0
    size: int = 0
    store_timestamp: int = 0
    store_host: Host | None = None
    body_crc: int = 0
    # MessageDecoder's msgId, the offset id (store host and commit-log offset), on what a store
    # reads; on what a Consumer receives, the UNIQ_KEY when there is one (MessageClientExt), so
    # that it is SendResult.msg_id and a resent message keeps it.
    msg_id: str = ""
    properties_string: str = ""
    # The stored field: for DLedger records this is entry pos + 48, for classic records the offset.
    stored_phys_offset: int = 0
    # The offset id always (MessageClientExt.getOffsetMsgId): what view_by_msg_id takes.
    offset_msg_id: str = ""

    @property
    def uncompressed_body(self) -> bytes:
        """The body as the producer sent it: zlib-inflated when COMPRESSED_FLAG is set (as
        MessageDecoder.decode with deCompressBody); the stored bytes otherwise."""
        if self.sys_flag & MessageSysFlag.COMPRESSED_FLAG:
            return zlib.decompress(self.body)
        return self.body

    @property
    def born_host_string(self) -> str:
        return format_host(self.born_host) if self.born_host else ""

    @property
    def store_host_string(self) -> str:
        return format_host(self.store_host) if self.store_host else ""


def host_v6_bits(sys_flag: int, born_raw: bytes, store_raw: bytes) -> int:
    """``sys_flag`` with the two v6 bits set from the host field lengths."""
    flag = sys_flag & ~_HOST_V6_BITS
    if len(born_raw) == 20:
        flag |= MessageSysFlag.BORNHOST_V6_FLAG
    if len(store_raw) == 20:
        flag |= MessageSysFlag.STOREHOSTADDRESS_V6_FLAG
    return flag
