"""RocketMQ 4.9 commit-log records: batch encode, scans into numpy columns, properties lookup, Java
String.hashCode, consume-queue units and IndexFile updates (Cython: _ext/message.pyx)."""

from collections.abc import Callable, Iterable, Sequence, Sized
from typing import Any, TypeAlias

import numpy as np
from numpy.typing import ArrayLike, NDArray
from typing_extensions import Buffer

# One value per record, or one value for every record.
_Ints: TypeAlias = ArrayLike
_Fields: TypeAlias = Sequence[Buffer] | bytes

MESSAGE_MAGIC_CODE: int
BLANK_MAGIC_CODE: int
QUEUE_OFFSET_POSITION: int
PHY_POS_POSITION: int
SYSFLAG_POSITION: int
END_FILE_MIN_BLANK_LENGTH: int
CQ_UNIT_SIZE: int
INDEX_HEADER_SIZE: int
INDEX_SLOT_SIZE: int
INDEX_ITEM_SIZE: int
MIN_RECORD_LENGTH: int
MAX_TOPIC_LENGTH: int
MAX_PROPERTIES_LENGTH: int
DLEDGER_BODY_OFFSET: int

COMPRESSED_FLAG: int
MULTI_TAGS_FLAG: int
TRANSACTION_NOT_TYPE: int
TRANSACTION_PREPARED_TYPE: int
TRANSACTION_COMMIT_TYPE: int
TRANSACTION_ROLLBACK_TYPE: int
BORNHOST_V6_FLAG: int
STOREHOSTADDRESS_V6_FLAG: int

STOP_END: int
STOP_BLANK: int
STOP_ZERO: int
STOP_BAD: int
STOP_CRC: int
STOP_LIMIT: int
STOP_NAMES: dict[int, str]

COLUMN_TYPES: tuple[tuple[str, str], ...]
COLUMNS: tuple[str, ...]
DLEDGER_COLUMN_TYPES: tuple[tuple[str, str], ...]
DLEDGER_COLUMNS: tuple[str, ...]

def record_length(sys_flag: int, body_len: int, topic_len: int, props_len: int) -> int: ...
def record_lengths(
    sys_flags: _Ints, body_lens: ArrayLike, topic_lens: _Ints, props_lens: _Ints
) -> NDArray[np.int64]: ...
def encode_records(
    bodies: Sequence[Buffer],
    topics: _Fields,
    properties: _Fields,
    queue_ids: _Ints,
    flags: _Ints,
    queue_offsets: _Ints,
    phys_offsets: _Ints,
    sys_flags: _Ints,
    born_timestamps: _Ints,
    born_hosts: _Fields,
    store_timestamps: _Ints,
    store_hosts: _Fields,
    reconsume_times: _Ints,
    prepared_offsets: _Ints,
) -> tuple[bytes, NDArray[np.int64]]: ...
def encode_uniform(
    bodies: Sequence[Buffer],
    topic: bytes,
    properties: Sequence[Buffer] | bytes,
    uniq_first: int,
    queue_id: int,
    flag: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_timestamp: int,
    store_host: bytes,
    queue_offset: int,
    advance: bool,
    phys_offset: int,
    gap: int = 0,
    keys: list[str | None] | None = None,
    keys_prefix: bytes = b"",
) -> tuple[bytes | bytearray, NDArray[np.int64]]: ...
def scan_records(
    buf: Buffer,
    base_offset: int,
    start: int = 0,
    end: int = -1,
    check_crc: bool = False,
    max_records: int = -1,
) -> tuple[dict[str, NDArray[Any]], int, int]: ...
def scan_dledger_records(
    buf: Buffer,
    base_pos: int,
    start: int = 0,
    end: int = -1,
    check_crc: bool = False,
    max_records: int = -1,
) -> tuple[dict[str, NDArray[Any]], int, int]: ...
def property_spans(
    buf: Buffer, props_off: ArrayLike, props_len: ArrayLike, name: bytes
) -> tuple[NDArray[np.int64], NDArray[np.int32]]: ...
def property_spans_many(
    buf: Buffer, props_off: ArrayLike, props_len: ArrayLike, names: tuple[bytes, ...]
) -> list[tuple[NDArray[np.int64], NDArray[np.int32]]]: ...
def topic_ids(
    buf: Buffer, topic_off: ArrayLike, topic_len: ArrayLike
) -> tuple[NDArray[np.int32], NDArray[np.int64]]: ...
def index_key_hashes(
    buf: Buffer,
    prefix_hashes: ArrayLike,
    uniq_off: ArrayLike,
    uniq_len: ArrayLike,
    keys_off: ArrayLike,
    keys_len: ArrayLike,
) -> tuple[NDArray[np.int32], NDArray[np.int64]]: ...
def java_hash(s: str) -> int: ...
def java_hash_bytes(raw: Buffer) -> int: ...
def java_hash_many(buf: Buffer, offs: ArrayLike, lens: ArrayLike) -> NDArray[np.int32]: ...
def consume_queue_units(phys_offsets: ArrayLike, sizes: _Ints, tags_codes: _Ints) -> bytes: ...
def index_put_many(
    buf: Buffer,
    hash_slot_num: int,
    index_num: int,
    key_hashes: ArrayLike,
    phys_offsets: _Ints,
    time_diffs: _Ints,
) -> int: ...
def index_lookup(
    buf: Buffer,
    hash_slot_num: int,
    index_num: int,
    key_hash: int,
    max_num: int,
    begin_ts: int,
    end_ts: int,
    file_begin_ts: int,
) -> list[int]: ...

# The message service's check of a batch's packed properties (_ext/message_service.pxi).
PROPS_OK: int
PROPS_TOO_LONG: int
PROPS_NOT_UTF8: int
PROPS_NOT_PAIRS: int

def check_packed_properties(buf: Buffer, offsets: ArrayLike) -> tuple[int, int, bool]: ...
def sync_mapped(mapped: Buffer, offset: int = 0, length: int = -1, unmap_written: bool = False) -> None: ...
def pack_bodies(bodies: list[bytes]) -> tuple[bytes, NDArray[np.uint32]]: ...
def pull_records(
    buf: Buffer, offsets: NDArray[np.int64], sizes: NDArray[np.int32]
) -> tuple[
    int, dict[str, NDArray[Any]], NDArray[np.uint8], NDArray[np.int32], NDArray[np.uint8], NDArray[np.int32]
]: ...
def record_fields(buf: Buffer, start: int = 0) -> tuple[int, ...] | None: ...

# -- dispatch (message_dispatch.pxi) --
PREFAULT_READ: int
PREFAULT_WRITE: int
PREFAULT_WILLNEED: int

def prefault(buf: Buffer, start: int = 0, end: int = -1, how: int = ...) -> int: ...
def copy_into(dst: Buffer, pos: int, src: Buffer) -> None: ...
def copy_runs(src: Buffer, runs: list[tuple[Buffer, int, int, int]]) -> None: ...
def zero_fill(fd: int, start: int, end: int) -> int: ...

# The single put (_ext/message_put.pxi).
class PutTemplate:
    topic: bytes
    props_head: bytes
    props_tail: bytes
    born_host: bytes
    store_host: bytes
    queue_id: int
    sys_flag: int
    uniq: bool
    uniq_len: int
    fixed_len: int
    queue_key: str
    advances: bool
    wait_store: bool
    props_len: int
    keys_before: bytes | None
    def __init__(
        self,
        topic: bytes,
        props_head: bytes,
        props_tail: bytes,
        uniq: bool,
        uniq_head_len: int,
        queue_id: int,
        sys_flag: int,
        born_host: bytes,
        store_host: bytes,
        queue_key: str,
        advances: bool,
        wait_store: bool,
        keys_before: bytes | None = None,
    ) -> None: ...
    def with_keys(self, keys: str) -> PutTemplate | None: ...

def encode_put(
    t: PutTemplate,
    body: bytes,
    uniq_head: bytes,
    counter: int,
    flag: int,
    born_ts: int,
    reconsume: int,
    prepared: int,
    queue_offset: int,
    phys_offset: int,
    store_ts: int,
) -> bytes: ...
def longest_body(bodies: Iterable[Sized]) -> int: ...
def message_ints_ok(m: object) -> bool: ...
def keyed_longest(bodies: object, keys: object, prefix_len: int) -> tuple[int, int] | None: ...
def dispatch_keys(
    buf: Buffer,
    topic_buf: Buffer,
    props_off: ArrayLike,
    props_len: ArrayLike,
    topic_off: ArrayLike,
    topic_len: ArrayLike,
    sys_flag: ArrayLike,
    index_from: int = 0,
) -> tuple[NDArray[np.int32], NDArray[np.int64], NDArray[np.int64], NDArray[np.int32], NDArray[np.int64]]: ...
def queue_runs(
    topic_id: ArrayLike,
    queue_id: ArrayLike,
    queue_offset: ArrayLike,
    sys_flag: ArrayLike,
    phys_offset: ArrayLike,
    size: ArrayLike,
    tags_code: ArrayLike,
    arena: dict[str, Any] | None = None,
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.uint8]]: ...
def dispatch_round(
    buf: Buffer,
    base: int,
    start: int,
    end: int,
    dledger: bool,
    max_records: int,
    index_floor: int,
    index_buf: Buffer | None = None,
    hash_slot_num: int = 0,
    index_num: int = 0,
    index_begin_ts: int = 0,
    cq_buf: Buffer | None = None,
    cq_pos: int = 0,
    cq_room: int = 0,
    cq_topic: bytes | None = None,
    cq_queue_id: int = -1,
    cq_next: int = -1,
    cq_max_phys: int = -1,
    cq_prefault_start: int = 0,
    cq_prefault_end: int = 0,
    prefault: Sequence[tuple[Buffer, int, int] | tuple[Buffer, int, int, bytes]] = (),
    arena: dict[str, Any] | None = None,
    cq_path: bytes | None = None,
) -> tuple[
    dict[str, NDArray[Any]],
    int,
    int,
    NDArray[np.int32],
    NDArray[np.int64],
    NDArray[np.int64],
    NDArray[np.int32],
    NDArray[np.int64],
    NDArray[np.uint8] | None,
    int,
]: ...

# -- records to MessageExt objects (message_objects.pxi) --
MESSAGE_EXT_FIELDS: tuple[str, ...]

def message_ext(buf: Buffer, phys_offset: int, cls: type[Any], client: bool = False) -> Any: ...
def message_exts(
    buf: Buffer, cols: dict[str, NDArray[Any]], rows: ArrayLike | None, cls: type[Any], client: bool = False
) -> list[Any]: ...

# -- the Arrow message reader (message_arrow.pxi) --
def scan_at(
    buf: Buffer, base_offset: int, offsets: NDArray[np.int64], sizes: NDArray[np.int32]
) -> tuple[dict[str, NDArray[Any]], int]: ...
def offset_msg_ids(
    buf: Buffer, host_off: NDArray[np.int64], sys_flag: NDArray[np.int32], phys: NDArray[np.int64]
) -> tuple[NDArray[np.uint8], NDArray[np.int32]]: ...
def host_texts(
    buf: Buffer, host_off: NDArray[np.int64], sys_flag: NDArray[np.int32], v6_flag: int
) -> tuple[NDArray[np.uint8], NDArray[np.int32]]: ...
def property_columns(
    buf: Buffer, props_off: ArrayLike, props_len: ArrayLike, want_map: bool, want_tags: bool, want_keys: bool
) -> tuple[
    tuple[NDArray[np.int32], NDArray[np.uint8], NDArray[np.int32], NDArray[np.uint8], NDArray[np.int32]] | None,
    tuple[NDArray[np.uint8], NDArray[np.int32], NDArray[np.uint8], int] | None,
    tuple[NDArray[np.uint8], NDArray[np.int32], NDArray[np.uint8], int] | None,
]: ...

class UniqClock:
    def __init__(self, heads: Callable[[int], tuple[int, str, bytes]] | None = None) -> None: ...
    def take(self, n: int, now: int) -> tuple[int, int]: ...
    def reserve_raw(self, n: int) -> tuple[bytes, int, int]: ...

class AppendMessageResult:
    """Where a put landed (store.status re-exports it)."""

    status: Any
    wrote_offset: int
    wrote_bytes: int
    store_timestamp: int
    logics_offset: int
    msg_num: int
    store_host: bytes
    def __init__(
        self,
        status: Any,
        wrote_offset: int = 0,
        wrote_bytes: int = 0,
        store_timestamp: int = 0,
        logics_offset: int = 0,
        msg_num: int = 1,
        store_host: bytes = b"",
        wrote_offsets: NDArray[np.int64] | None = None,
        queue_offsets: NDArray[np.int64] | None = None,
        _positions: NDArray[np.int64] | None = None,
        _delta: int = 0,
        _advances: bool | None = None,
    ) -> None: ...
    @property
    def wrote_offsets(self) -> NDArray[np.int64] | None: ...
    @wrote_offsets.setter
    def wrote_offsets(self, value: NDArray[np.int64] | None) -> None: ...
    @property
    def queue_offsets(self) -> NDArray[np.int64] | None: ...
    @queue_offsets.setter
    def queue_offsets(self, value: NDArray[np.int64] | None) -> None: ...
    @property
    def msg_ids(self) -> list[str]: ...
    @property
    def msg_id(self) -> str: ...

class PutMessageResult:
    """A put's outcome (store.status re-exports it)."""

    status: Any
    append_result: AppendMessageResult | None
    reason: str
    def __init__(self, status: Any, append_result: AppendMessageResult | None = None, reason: str = "") -> None: ...
    @property
    def ok(self) -> bool: ...
    def is_ok(self) -> bool: ...
    @property
    def msg_id(self) -> str: ...
    @property
    def phys_offset(self) -> int: ...
    @property
    def queue_offset(self) -> int: ...

def put_lock_clock_ms() -> int: ...

class PutLock:
    """The commit logs' put lock: ``threading.Lock``'s interface, and a wait that takes it only
    with the GIL (``acquire_when_free``, K.SinglePut's)."""

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool: ...
    def acquire_when_free(self, timeout: float = -1) -> bool: ...
    def release(self) -> None: ...
    def locked(self) -> bool: ...
    @property
    def begin_time_in_lock(self) -> int: ...
    def __enter__(self) -> bool: ...
    def __exit__(self, *exc: object) -> None: ...
