# cython: language_level=3
"""RocketMQ 4.9 commit-log records (MessageDecoder, CommitLog.DefaultAppendMessageCallback, DLedgerCommitLog): batch encode, one-pass scans of
classic commit-log files and of DLedger data files into numpy columns, properties lookup,
Java ``String.hashCode``, consume-queue units and the IndexFile slot/item updates.

Every loop that walks a buffer runs in C with the GIL released; no Python object is made per
record. Offsets in the columns are relative to the buffer scanned, so a caller slices the
bytes it wants (body, topic, properties) only for the records it keeps.
"""

import numpy as np
cimport numpy as cnp
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memchr, memcmp, memcpy, memset

from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeASCII, PyUnicode_DecodeUTF8

cnp.import_array()

include "bodies.pxi"

include "format.pxi"

cdef extern from "dl_format.h" nogil:
    void dl_put32(unsigned char *p, uint32_t v)
    void dl_put64(unsigned char *p, uint64_t v)

cdef extern from "mq_format.h" nogil:
    int MQ_MESSAGE_MAGIC
    int MQ_BLANK_MAGIC
    int MQ_BODY_CRC_POS
    int MQ_QUEUE_ID_POS
    int MQ_FLAG_POS
    int MQ_QUEUE_OFFSET_POS
    int MQ_PHY_POS
    int MQ_SYSFLAG_POS
    int MQ_BORN_TS_POS
    int MQ_BORN_HOST_POS
    int MQ_BORNHOST_V6
    int MQ_STOREHOST_V6
    int MQ_MIN_RECORD
    int MQ_MAX_TOPIC
    int MQ_MAX_PROPS
    int MQ_END_FILE_MIN_BLANK
    int MQ_CQ_UNIT
    int MQ_INDEX_HEADER
    int MQ_INDEX_SLOT
    int MQ_INDEX_ITEM
    uint16_t mq_get16(const unsigned char *p)
    void mq_put16(unsigned char *p, uint16_t v)
    int mq_host_len(int32_t sys_flag, int32_t v6_flag)
    int64_t mq_record_length(int32_t sys_flag, int64_t body_len, int64_t topic_len, int64_t props_len)
    uint32_t mq_java_hash_utf8(const unsigned char *s, size_t n)
    uint32_t mq_java_hash_utf8_from(uint32_t h, const unsigned char *s, size_t n)

MESSAGE_MAGIC_CODE = MQ_MESSAGE_MAGIC
BLANK_MAGIC_CODE = MQ_BLANK_MAGIC
QUEUE_OFFSET_POSITION = MQ_QUEUE_OFFSET_POS
PHY_POS_POSITION = MQ_PHY_POS
SYSFLAG_POSITION = MQ_SYSFLAG_POS
END_FILE_MIN_BLANK_LENGTH = MQ_END_FILE_MIN_BLANK
CQ_UNIT_SIZE = MQ_CQ_UNIT
INDEX_HEADER_SIZE = MQ_INDEX_HEADER
INDEX_SLOT_SIZE = MQ_INDEX_SLOT
INDEX_ITEM_SIZE = MQ_INDEX_ITEM
MIN_RECORD_LENGTH = MQ_MIN_RECORD
MAX_TOPIC_LENGTH = MQ_MAX_TOPIC
MAX_PROPERTIES_LENGTH = MQ_MAX_PROPS
DLEDGER_BODY_OFFSET = DL_BODY_OFFSET

# MessageSysFlag.
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_NOT_TYPE = 0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
BORNHOST_V6_FLAG = MQ_BORNHOST_V6
STOREHOSTADDRESS_V6_FLAG = MQ_STOREHOST_V6

# Why a scan stopped. The record at the stop offset is not in the result.
cdef enum:
    C_OK = -1
    C_END = 0       # reached the end of the range
    C_BLANK = 1     # BLANK_MAGIC_CODE record (classic) or blank entry (DLedger): the rest of the file is unused
    C_ZERO = 2      # size 0 / magic 0: never written
    C_BAD = 3       # bad magic, size or a field out of bounds (torn or corrupt)
    C_CRC = 4       # BODYCRC (or a recorded DLedger bodyCrc) does not match, with check_crc
    C_LIMIT = 5     # max_records reached

STOP_END = C_END
STOP_BLANK = C_BLANK
STOP_ZERO = C_ZERO
STOP_BAD = C_BAD
STOP_CRC = C_CRC
STOP_LIMIT = C_LIMIT
STOP_NAMES = {0: "end", 1: "blank", 2: "unwritten", 3: "bad record", 4: "crc mismatch", 5: "limit"}

# Scan columns in order, with their dtypes; *_off are offsets into the buffer scanned.
COLUMN_TYPES = (
    ("phys_offset", "i8"), ("size", "i4"), ("body_crc", "i4"), ("queue_id", "i4"), ("flag", "i4"),
    ("queue_offset", "i8"), ("stored_phys_offset", "i8"), ("sys_flag", "i4"), ("born_timestamp", "i8"),
    ("born_host_off", "i8"), ("store_timestamp", "i8"), ("store_host_off", "i8"), ("reconsume_times", "i4"),
    ("prepared_offset", "i8"), ("body_off", "i8"), ("body_len", "i4"), ("topic_off", "i8"), ("topic_len", "i4"),
    ("props_off", "i8"), ("props_len", "i4"),
)
COLUMNS = tuple(name for name, _ in COLUMN_TYPES)
DLEDGER_COLUMN_TYPES = COLUMN_TYPES + (("entry_index", "i8"),)
DLEDGER_COLUMNS = tuple(name for name, _ in DLEDGER_COLUMN_TYPES)


cdef inline const unsigned char[::1] _ro(object buf):
    return memoryview(buf).cast("B")


cdef object _col(object values, Py_ssize_t n, object dtype, str name):
    """A contiguous 1-D array of ``n`` values (a scalar is repeated)."""
    arr = np.asarray(values)
    if arr.ndim == 0:
        return np.full(n, arr, dtype=dtype)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"{name}: expected {n} values, got shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iub":
        raise TypeError(f"{name}: integers expected, got dtype {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=dtype)


cdef _Bodies _fields(object values, Py_ssize_t n, str name):
    """Byte strings per record; one bytes-like object stands for the same value in every record."""
    cdef _Bodies out
    cdef const unsigned char *ptr
    cdef Py_ssize_t size, k
    if isinstance(values, (bytes, bytearray, memoryview)):
        # The same pointer n times, without a list of n references to walk.
        value = bytes(values)
        ptr = <const unsigned char *>PyBytes_AS_STRING(value)
        size = PyBytes_GET_SIZE(value)
        out = _Bodies(())
        free(out.ptrs)
        free(out.lens)
        out.ptrs = <const unsigned char **>malloc(max(n, 1) * sizeof(unsigned char *))
        out.lens = <Py_ssize_t *>malloc(max(n, 1) * sizeof(Py_ssize_t))
        if out.ptrs == NULL or out.lens == NULL:
            raise MemoryError()
        for k in range(n):
            out.ptrs[k] = ptr
            out.lens[k] = size
        out.count = n
        out.total = n * size
        out.keep = [value]
        return out
    out = _Bodies(values)
    if out.count != n:
        raise ValueError(f"{name}: expected {n} values, got {out.count}")
    return out


# -- lengths and encode -------------------------------------------------------------------------

def record_length(int32_t sys_flag, int64_t body_len, int64_t topic_len, int64_t props_len):
    """CommitLog.calMsgLength: 91 + body + topic + properties, 12 more per IPv6 host."""
    return mq_record_length(sys_flag, body_len, topic_len, props_len)


def record_lengths(sys_flags, body_lens, topic_lens, props_lens):
    """``record_length`` of every record, as an int64 array."""
    b = np.ascontiguousarray(body_lens, dtype=np.int64)
    cdef Py_ssize_t n = b.shape[0], k
    cdef const int32_t[::1] sf = _col(sys_flags, n, np.int32, "sys_flags")
    cdef const int64_t[::1] bl = b
    cdef const int64_t[::1] tl = _col(topic_lens, n, np.int64, "topic_lens")
    cdef const int64_t[::1] pl = _col(props_lens, n, np.int64, "props_lens")
    out = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] o = out
    with nogil:
        for k in range(n):
            o[k] = mq_record_length(sf[k], bl[k], tl[k], pl[k])
    return out


cdef inline void _write_record(unsigned char *p, int64_t size, const unsigned char *body, Py_ssize_t body_len,
                               const unsigned char *topic, Py_ssize_t topic_len, const unsigned char *props,
                               Py_ssize_t props_len, int32_t queue_id, int32_t flag, int64_t queue_offset,
                               int64_t phys_offset, int32_t sys_flag, int64_t born_ts,
                               const unsigned char *born_host, Py_ssize_t bh, int64_t store_ts,
                               const unsigned char *store_host, Py_ssize_t sh, int32_t reconsume,
                               int64_t prepared) noexcept nogil:
    cdef uint32_t crc = (dl_crc32(0, body, <size_t>body_len) & 0x7FFFFFFF) if body_len else 0
    dl_put32(p, <uint32_t>size)
    dl_put32(p + 4, <uint32_t>MQ_MESSAGE_MAGIC)
    dl_put32(p + MQ_BODY_CRC_POS, crc)
    dl_put32(p + MQ_QUEUE_ID_POS, <uint32_t>queue_id)
    dl_put32(p + MQ_FLAG_POS, <uint32_t>flag)
    dl_put64(p + MQ_QUEUE_OFFSET_POS, <uint64_t>queue_offset)
    dl_put64(p + MQ_PHY_POS, <uint64_t>phys_offset)
    dl_put32(p + MQ_SYSFLAG_POS, <uint32_t>sys_flag)
    dl_put64(p + MQ_BORN_TS_POS, <uint64_t>born_ts)
    memcpy(p + MQ_BORN_HOST_POS, born_host, bh)
    p += MQ_BORN_HOST_POS + bh
    dl_put64(p, <uint64_t>store_ts)
    memcpy(p + 8, store_host, sh)
    p += 8 + sh
    dl_put32(p, <uint32_t>reconsume)
    dl_put64(p + 4, <uint64_t>prepared)
    dl_put32(p + 12, <uint32_t>body_len)
    p += 16
    if body_len:
        memcpy(p, body, body_len)
    p += body_len
    p[0] = <unsigned char>topic_len
    memcpy(p + 1, topic, topic_len)
    p += 1 + topic_len
    mq_put16(p, <uint16_t>props_len)
    if props_len:
        memcpy(p + 2, props, props_len)


def encode_records(bodies, topics, properties, queue_ids, flags, queue_offsets, phys_offsets, sys_flags,
                   born_timestamps, born_hosts, store_timestamps, store_hosts, reconsume_times,
                   prepared_offsets):
    """Records back to back, as DefaultAppendMessageCallback / MessageSerializer write them.

    Returns ``(buffer, offsets)``: record k is ``buffer[offsets[k]:offsets[k + 1]]``. Every
    argument has one value per record; the integer ones may also be a scalar, and ``topics``,
    ``properties``, ``born_hosts`` and ``store_hosts`` one bytes object, for a value shared
    by all. Hosts are the raw field: 4-byte IPv4 or 16-byte IPv6 address, then the port as a
    big-endian int; their length must agree with the v6 bits of ``sys_flags``. BODYCRC is
    computed here (``crc32(body) & 0x7FFFFFFF``). Raises ValueError, before writing anything,
    for a topic over 127 bytes, properties over 32767 bytes or a host of the wrong length.
    """
    cdef _Bodies bs = _Bodies(bodies)
    cdef Py_ssize_t n = bs.count, k
    cdef _Bodies tp = _fields(topics, n, "topics")
    cdef _Bodies pr = _fields(properties, n, "properties")
    cdef _Bodies bh = _fields(born_hosts, n, "born_hosts")
    cdef _Bodies sh = _fields(store_hosts, n, "store_hosts")
    cdef const int32_t[::1] qid = _col(queue_ids, n, np.int32, "queue_ids")
    cdef const int32_t[::1] flg = _col(flags, n, np.int32, "flags")
    cdef const int64_t[::1] qoff = _col(queue_offsets, n, np.int64, "queue_offsets")
    cdef const int64_t[::1] phys = _col(phys_offsets, n, np.int64, "phys_offsets")
    cdef const int32_t[::1] sf = _col(sys_flags, n, np.int32, "sys_flags")
    cdef const int64_t[::1] bts = _col(born_timestamps, n, np.int64, "born_timestamps")
    cdef const int64_t[::1] sts = _col(store_timestamps, n, np.int64, "store_timestamps")
    cdef const int32_t[::1] rc = _col(reconsume_times, n, np.int32, "reconsume_times")
    cdef const int64_t[::1] prep = _col(prepared_offsets, n, np.int64, "prepared_offsets")
    offsets = np.empty(n + 1, dtype=np.int64)
    cdef int64_t[::1] offs = offsets
    cdef int64_t total = 0, size
    for k in range(n):
        if tp.lens[k] > MQ_MAX_TOPIC:
            raise ValueError(f"record {k}: topic of {tp.lens[k]} bytes is over {MQ_MAX_TOPIC}")
        if pr.lens[k] > MQ_MAX_PROPS:
            raise ValueError(f"record {k}: properties of {pr.lens[k]} bytes are over {MQ_MAX_PROPS}")
        if bh.lens[k] != mq_host_len(sf[k], MQ_BORNHOST_V6):
            raise ValueError(f"record {k}: born host of {bh.lens[k]} bytes disagrees with sys_flag {sf[k]:#x}")
        if sh.lens[k] != mq_host_len(sf[k], MQ_STOREHOST_V6):
            raise ValueError(f"record {k}: store host of {sh.lens[k]} bytes disagrees with sys_flag {sf[k]:#x}")
        offs[k] = total
        size = mq_record_length(sf[k], bs.lens[k], tp.lens[k], pr.lens[k])
        if size > 0x7FFFFFFF:
            raise ValueError(f"record {k}: {size} bytes do not fit TOTALSIZE")
        total += size
    offs[n] = total
    cdef bytes out = PyBytes_FromStringAndSize(NULL, total)
    cdef unsigned char *p = <unsigned char *>PyBytes_AS_STRING(out)
    with nogil:
        for k in range(n):
            _write_record(p + offs[k], offs[k + 1] - offs[k], bs.ptrs[k], bs.lens[k], tp.ptrs[k], tp.lens[k],
                          pr.ptrs[k], pr.lens[k], qid[k], flg[k], qoff[k], phys[k], sf[k], bts[k],
                          bh.ptrs[k], bh.lens[k], sts[k], sh.ptrs[k], sh.lens[k], rc[k], prep[k])
    return out, offsets


cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL


cdef inline const char *_clean_key(object k, Py_ssize_t *n):
    """The UTF-8 of the KEYS value ``k`` (a str) in ``n``, or NULL (no exception set) when it
    would not read back as it is: not a str, a lone surrogate, or a ``\x01``/``\x02`` (the
    properties' separators). The pointer is the str's own (cached) UTF-8, valid while it lives."""
    cdef const char *p
    if type(k) is not str:
        return NULL
    try:
        p = PyUnicode_AsUTF8AndSize(k, n)
    except UnicodeEncodeError:
        return NULL
    if n[0] and (memchr(p, 1, n[0]) != NULL or memchr(p, 2, n[0]) != NULL):
        return NULL
    return p


cdef class _Keys:
    """The KEYS values of a batch's records, borrowed (``clean`` false when one is not a str or
    None, or would not read back as it is: the caller then takes its general path)."""

    cdef Py_ssize_t count
    cdef const char **ptrs
    cdef Py_ssize_t *lens
    cdef bint clean
    cdef list keep

    def __cinit__(self, list keys):
        cdef Py_ssize_t k, n = PyList_GET_SIZE(keys)
        cdef object item
        self.count = n
        self.keep = keys
        self.clean = True
        self.ptrs = <const char **>malloc(max(n, 1) * sizeof(char *))
        self.lens = <Py_ssize_t *>malloc(max(n, 1) * sizeof(Py_ssize_t))
        if self.ptrs == NULL or self.lens == NULL:
            raise MemoryError()
        for k in range(n):
            item = <object>PyList_GET_ITEM(keys, k)
            self.lens[k] = 0
            self.ptrs[k] = NULL
            if item is None:
                continue
            self.ptrs[k] = _clean_key(item, &self.lens[k])
            if self.ptrs[k] == NULL:
                self.clean = False
                return

    def __dealloc__(self):
        free(self.ptrs)
        free(self.lens)


cdef const unsigned char *_HEX = b"0123456789ABCDEF"


ctypedef struct _Uniform:
    unsigned char *p
    int64_t *offs
    Py_ssize_t n
    Py_ssize_t gap
    const unsigned char **props
    Py_ssize_t *props_lens
    const unsigned char *stem
    Py_ssize_t stem_len
    Py_ssize_t extra
    int64_t uniq_first
    const unsigned char *topic
    Py_ssize_t topic_len
    const unsigned char *born_host
    Py_ssize_t born_host_len
    const unsigned char *store_host
    Py_ssize_t store_host_len
    int32_t queue_id
    int32_t flag
    int32_t sys_flag
    int64_t born_ts
    int64_t store_ts
    int64_t queue_offset
    bint advance
    int64_t phys_offset
    # Each record's KEYS value (NULL: none), after the properties and ``keys_prefix``.
    const char **keys
    Py_ssize_t *keys_lens
    const unsigned char *keys_prefix
    Py_ssize_t keys_prefix_len


cdef void _encode_uniform_loop(_Uniform *u, const unsigned char **body_ptrs, Py_ssize_t *body_lens) noexcept nogil:
    """The records of ``encode_uniform`` into ``u.p`` at ``u.offs`` (then made physical offsets)."""
    cdef Py_ssize_t k, pl, kl, kpart
    cdef const unsigned char *props
    cdef unsigned char *q
    cdef int64_t rsize
    cdef uint32_t counter
    cdef int64_t *offs = u.offs
    for k in range(u.n):
        kl = u.keys_lens[k] if u.keys != NULL else 0
        kpart = u.keys_prefix_len + kl if kl else 0
        if u.props == NULL:
            props = u.stem
            pl = u.stem_len
        else:
            props = u.props[k]
            pl = u.props_lens[k]
        q = u.p + offs[k]
        if u.gap:
            memset(q, 0, u.gap)
            q += u.gap
        rsize = offs[k + 1] - offs[k] - u.gap
        _write_record(q, rsize, body_ptrs[k], body_lens[k], u.topic, u.topic_len, props, pl,
                      u.queue_id, u.flag, u.queue_offset + k if u.advance else u.queue_offset,
                      u.phys_offset + offs[k] + u.gap, u.sys_flag, u.born_ts, u.born_host, u.born_host_len,
                      u.store_ts, u.store_host, u.store_host_len, 0, 0)
        if u.extra or kpart:
            # The properties field ends the record: its length covers the 4 digits after the
            # stem and the KEYS pair after them.
            mq_put16(q + rsize - pl - u.extra - kpart - 2, <uint16_t>(pl + u.extra + kpart))
            q += rsize - u.extra - kpart
            if u.extra:
                counter = <uint32_t>((u.uniq_first + k) & 0xFFFF)
                q[0] = _HEX[(counter >> 12) & 0xF]
                q[1] = _HEX[(counter >> 8) & 0xF]
                q[2] = _HEX[(counter >> 4) & 0xF]
                q[3] = _HEX[counter & 0xF]
                q += 4
            if kpart:
                memcpy(q, u.keys_prefix, u.keys_prefix_len)
                memcpy(q + u.keys_prefix_len, u.keys[k], kl)
    for k in range(u.n + 1):
        offs[k] += u.phys_offset


def encode_uniform(bodies, bytes topic, properties, int64_t uniq_first, int32_t queue_id, int32_t flag,
                   int32_t sys_flag, int64_t born_timestamp, bytes born_host, int64_t store_timestamp,
                   bytes store_host, int64_t queue_offset, bint advance, int64_t phys_offset,
                   Py_ssize_t gap=0, keys=None, bytes keys_prefix=b""):
    """``encode_records`` for a batch to one topic-queue whose records differ only in body and
    properties (RocketMQ's MessageExtBatch), with the offsets assigned here.

    Record k gets QUEUEOFFSET ``queue_offset + k`` (``queue_offset`` for all when not
    ``advance``: PREPARED/ROLLBACK records) and PHYSICALOFFSET ``phys_offset`` plus its start in
    the buffer. ``properties`` is one bytes-like per record, or one ``bytes`` for all; with
    ``uniq_first >= 0`` each record's properties are followed by the four uppercase hex digits
    of ``(uniq_first + k) & 0xFFFF`` (the counter that ends a UNIQ_KEY). Returns ``(buffer,
    offsets)``: record k is ``buffer[offsets[k] - phys_offset:offsets[k + 1] - phys_offset]``, so
    ``offsets[:-1]`` are the records' physical offsets. Raises ValueError as ``encode_records``.

    With ``gap`` > 0 each record is preceded by ``gap`` zero bytes (room for the DLedger entry
    header, which the store writes in place: ``EntryLog.append_framed``), the buffer is a
    ``bytearray``, ``offsets`` are the starts of the frames (``offsets[k] + gap`` the
    records') and PHYSICALOFFSET is ``phys_offset`` plus the record's own start.

    With ``keys`` (a list of one str or None per record) a record whose key is a non-empty str
    gets ``keys_prefix`` and the key's UTF-8 after the rest of its properties (the counter
    digits included): RocketMQ's batch with a KEYS value per message. ValueError for a key
    that would not read back as it is (the store's preparer checks them first).
    """
    cdef _Bodies bs = _Bodies(bodies)
    cdef Py_ssize_t n = bs.count, k
    cdef bint shared = isinstance(properties, bytes)
    cdef _Bodies pr = None if shared else _fields(properties, n, "properties")
    cdef const unsigned char *stem = NULL
    cdef Py_ssize_t stem_len = 0
    if shared:
        stem = <const unsigned char *>PyBytes_AS_STRING(properties)
        stem_len = PyBytes_GET_SIZE(properties)
    cdef Py_ssize_t extra = 4 if uniq_first >= 0 else 0
    cdef Py_ssize_t tl = len(topic), bhl = len(born_host), shl = len(store_host)
    if tl > MQ_MAX_TOPIC:
        raise ValueError(f"topic of {tl} bytes is over {MQ_MAX_TOPIC}")
    if bhl != mq_host_len(sys_flag, MQ_BORNHOST_V6):
        raise ValueError(f"born host of {bhl} bytes disagrees with sys_flag {sys_flag:#x}")
    if shl != mq_host_len(sys_flag, MQ_STOREHOST_V6):
        raise ValueError(f"store host of {shl} bytes disagrees with sys_flag {sys_flag:#x}")
    if phys_offset < 0:
        raise ValueError(f"phys_offset {phys_offset} is negative")
    if gap < 0:
        raise ValueError(f"gap {gap} is negative")
    cdef _Keys ks = None
    cdef Py_ssize_t kpl = len(keys_prefix)
    if keys is not None:
        if type(keys) is not list or len(keys) != n:
            raise ValueError(f"keys must be a list of one per record ({n})")
        ks = _Keys(keys)
        if not ks.clean:
            raise ValueError("a key is not a str or None, or holds what would not read back (\\x01, \\x02, a lone surrogate)")
    offsets = np.empty(n + 1, dtype=np.int64)
    cdef int64_t[::1] offs = offsets
    cdef int64_t total = 0, size
    cdef Py_ssize_t pl
    for k in range(n):
        pl = (stem_len if shared else pr.lens[k]) + extra
        if ks is not None and ks.lens[k]:
            pl += kpl + ks.lens[k]
        if pl > MQ_MAX_PROPS:
            raise ValueError(f"record {k}: properties of {pl} bytes are over {MQ_MAX_PROPS}")
        size = mq_record_length(sys_flag, bs.lens[k], tl, pl)
        if size > 0x7FFFFFFF:
            raise ValueError(f"record {k}: {size} bytes do not fit TOTALSIZE")
        offs[k] = total
        total += gap + size
    offs[n] = total
    # bytes, or for the store to fill the gaps in place a bytearray (same allocation cost)
    out = PyBytes_FromStringAndSize(NULL, total) if gap == 0 else PyByteArray_FromStringAndSize(NULL, total)
    cdef unsigned char *p = <unsigned char *>(PyBytes_AS_STRING(out) if gap == 0 else PyByteArray_AS_STRING(out))
    cdef _Uniform u
    u.p = p
    u.offs = &offs[0]
    u.n = n
    u.gap = gap
    u.props = NULL if shared else pr.ptrs
    u.props_lens = NULL if shared else pr.lens
    u.stem = stem
    u.stem_len = stem_len
    u.extra = extra
    u.uniq_first = uniq_first
    u.topic = topic
    u.topic_len = tl
    u.born_host = born_host
    u.born_host_len = bhl
    u.store_host = store_host
    u.store_host_len = shl
    u.queue_id = queue_id
    u.flag = flag
    u.sys_flag = sys_flag
    u.born_ts = born_timestamp
    u.store_ts = store_timestamp
    u.queue_offset = queue_offset
    u.advance = advance
    u.phys_offset = phys_offset
    u.keys = ks.ptrs if ks is not None else NULL
    u.keys_lens = ks.lens if ks is not None else NULL
    u.keys_prefix = keys_prefix
    u.keys_prefix_len = kpl
    # Released even for a small batch: the put thread runs Python otherwise, and this is where
    # a thread that waits for the GIL (dispatch, the store service) gets it at once rather
    # than after the interpreter's switch interval.
    with nogil:
        _encode_uniform_loop(&u, bs.ptrs, bs.lens)
    return out, offsets


# -- scans --------------------------------------------------------------------------------------

ctypedef struct _Rec:
    # One record's fields; offsets relative to the record's first byte.
    int32_t size
    int32_t body_crc
    int32_t queue_id
    int32_t flag
    int64_t queue_offset
    int64_t phys
    int32_t sys_flag
    int64_t born_ts
    int32_t born_host_off
    int64_t store_ts
    int32_t store_host_off
    int32_t reconsume
    int64_t prepared
    int32_t body_off
    int32_t body_len
    int32_t topic_off
    int32_t topic_len
    int32_t props_off
    int32_t props_len

ctypedef struct _Cols:
    int64_t *phys_offset
    int32_t *size
    int32_t *body_crc
    int32_t *queue_id
    int32_t *flag
    int64_t *queue_offset
    int64_t *stored_phys
    int32_t *sys_flag
    int64_t *born_ts
    int64_t *born_host_off
    int64_t *store_ts
    int64_t *store_host_off
    int32_t *reconsume
    int64_t *prepared
    int64_t *body_off
    int32_t *body_len
    int64_t *topic_off
    int32_t *topic_len
    int64_t *props_off
    int32_t *props_len
    int64_t *entry_index


cdef inline bint _all_zero(const unsigned char *p, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t k
    for k in range(n):
        if p[k]:
            return False
    return True


cdef inline int _parse_record(const unsigned char *p, Py_ssize_t avail, bint check_crc, _Rec *r) noexcept nogil:
    """C_OK and ``r`` filled when a whole valid record starts at ``p`` within ``avail`` bytes,
    else the stop code (checkMessageAndReturnSize's checks, plus every field within the size)."""
    if avail < 4:
        return C_ZERO if _all_zero(p, avail) else C_BAD
    cdef int32_t size = <int32_t>dl_get32(p)
    if size == 0:
        return C_ZERO
    if avail < 8:
        return C_BAD
    cdef int32_t magic = <int32_t>dl_get32(p + 4)
    if magic == MQ_BLANK_MAGIC:
        return C_BLANK
    if magic != MQ_MESSAGE_MAGIC or size < MQ_MIN_RECORD or size > avail:
        return C_BAD
    cdef int32_t sys_flag = <int32_t>dl_get32(p + MQ_SYSFLAG_POS)
    cdef int32_t bh = mq_host_len(sys_flag, MQ_BORNHOST_V6)
    cdef int32_t sh = mq_host_len(sys_flag, MQ_STOREHOST_V6)
    # Everything before the body, then the body length, topic length byte and properties length.
    cdef int32_t at = MQ_BORN_HOST_POS + bh + 8 + sh + 4 + 8
    if at + 4 + 1 + 2 > size:
        return C_BAD
    cdef int32_t body_len = <int32_t>dl_get32(p + at)
    if body_len < 0 or body_len > size - (at + 4 + 1 + 2):
        return C_BAD
    r.body_off = at + 4
    at = r.body_off + body_len
    cdef int32_t topic_len = <int8_t>p[at]
    if topic_len < 0 or at + 1 + topic_len + 2 > size:
        return C_BAD
    r.topic_off = at + 1
    at = r.topic_off + topic_len
    cdef int32_t props_len = <int16_t>mq_get16(p + at)
    if props_len < 0 or at + 2 + props_len != size:
        return C_BAD
    r.props_off = at + 2
    r.body_crc = <int32_t>dl_get32(p + MQ_BODY_CRC_POS)
    if check_crc and body_len > 0:
        if <int32_t>(dl_crc32(0, p + r.body_off, <size_t>body_len) & 0x7FFFFFFF) != r.body_crc:
            return C_CRC
    r.size = size
    r.queue_id = <int32_t>dl_get32(p + MQ_QUEUE_ID_POS)
    r.flag = <int32_t>dl_get32(p + MQ_FLAG_POS)
    r.queue_offset = <int64_t>dl_get64(p + MQ_QUEUE_OFFSET_POS)
    r.phys = <int64_t>dl_get64(p + MQ_PHY_POS)
    r.sys_flag = sys_flag
    r.born_ts = <int64_t>dl_get64(p + MQ_BORN_TS_POS)
    r.born_host_off = MQ_BORN_HOST_POS
    r.store_ts = <int64_t>dl_get64(p + MQ_BORN_HOST_POS + bh)
    r.store_host_off = MQ_BORN_HOST_POS + bh + 8
    r.reconsume = <int32_t>dl_get32(p + r.store_host_off + sh)
    r.prepared = <int64_t>dl_get64(p + r.store_host_off + sh + 4)
    r.body_len = body_len
    r.topic_len = topic_len
    r.props_len = props_len
    return C_OK


cdef inline void _store(_Cols *c, Py_ssize_t k, const _Rec *r, int64_t at, int64_t phys) noexcept nogil:
    """Row ``k`` from ``r``, whose record starts at ``at`` in the buffer."""
    c.phys_offset[k] = phys
    c.size[k] = r.size
    c.body_crc[k] = r.body_crc
    c.queue_id[k] = r.queue_id
    c.flag[k] = r.flag
    c.queue_offset[k] = r.queue_offset
    c.stored_phys[k] = r.phys
    c.sys_flag[k] = r.sys_flag
    c.born_ts[k] = r.born_ts
    c.born_host_off[k] = at + r.born_host_off
    c.store_ts[k] = r.store_ts
    c.store_host_off[k] = at + r.store_host_off
    c.reconsume[k] = r.reconsume
    c.prepared[k] = r.prepared
    c.body_off[k] = at + r.body_off
    c.body_len[k] = r.body_len
    c.topic_off[k] = at + r.topic_off
    c.topic_len[k] = r.topic_len
    c.props_off[k] = at + r.props_off
    c.props_len[k] = r.props_len


cdef inline int _parse_entry(const unsigned char *p, Py_ssize_t off, Py_ssize_t avail, int64_t base_pos,
                             bint check_crc, _Rec *r) noexcept nogil:
    """C_OK when a DLedger entry holding one whole valid record starts at ``p`` (``off`` in the
    buffer), else the stop code."""
    if avail < 4:
        return C_ZERO if _all_zero(p, avail) else C_BAD
    cdef int32_t magic = <int32_t>dl_get32(p)
    if magic == DL_BLANK_MAGIC:
        return C_BLANK
    if magic == 0:
        return C_ZERO
    if avail < DL_BODY_OFFSET or magic != DL_CURRENT_MAGIC:
        return C_BAD
    cdef int32_t size = <int32_t>dl_get32(p + 4)
    cdef int32_t body_size = <int32_t>dl_get32(p + 44)
    if body_size <= 0 or size != body_size + DL_BODY_OFFSET or size > avail:
        return C_BAD
    if <int64_t>dl_get64(p + 24) != base_pos + off:
        return C_BAD
    cdef uint32_t entry_crc
    if check_crc:
        entry_crc = dl_get32(p + 40)
        if entry_crc != 0 and dl_crc32(0, p + DL_BODY_OFFSET, <size_t>body_size) != entry_crc:
            return C_CRC
    cdef int code = _parse_record(p + DL_BODY_OFFSET, body_size, check_crc, r)
    if code == C_OK and r.size != body_size:
        return C_BAD
    if code != C_OK and code != C_CRC:
        return C_BAD  # a blank or unwritten record inside a written entry is damage
    return code


cdef object _alloc(object types, Py_ssize_t cap):
    return {name: np.empty(cap, dtype=dt) for name, dt in types}


cdef inline void *_ptr(object arr):
    return cnp.PyArray_DATA(<cnp.ndarray>arr)


cdef void _bind(dict cols, _Cols *c):
    c.phys_offset = <int64_t *>_ptr(cols["phys_offset"])
    c.size = <int32_t *>_ptr(cols["size"])
    c.body_crc = <int32_t *>_ptr(cols["body_crc"])
    c.queue_id = <int32_t *>_ptr(cols["queue_id"])
    c.flag = <int32_t *>_ptr(cols["flag"])
    c.queue_offset = <int64_t *>_ptr(cols["queue_offset"])
    c.stored_phys = <int64_t *>_ptr(cols["stored_phys_offset"])
    c.sys_flag = <int32_t *>_ptr(cols["sys_flag"])
    c.born_ts = <int64_t *>_ptr(cols["born_timestamp"])
    c.born_host_off = <int64_t *>_ptr(cols["born_host_off"])
    c.store_ts = <int64_t *>_ptr(cols["store_timestamp"])
    c.store_host_off = <int64_t *>_ptr(cols["store_host_off"])
    c.reconsume = <int32_t *>_ptr(cols["reconsume_times"])
    c.prepared = <int64_t *>_ptr(cols["prepared_offset"])
    c.body_off = <int64_t *>_ptr(cols["body_off"])
    c.body_len = <int32_t *>_ptr(cols["body_len"])
    c.topic_off = <int64_t *>_ptr(cols["topic_off"])
    c.topic_len = <int32_t *>_ptr(cols["topic_len"])
    c.props_off = <int64_t *>_ptr(cols["props_off"])
    c.props_len = <int32_t *>_ptr(cols["props_len"])
    c.entry_index = <int64_t *>_ptr(cols["entry_index"]) if "entry_index" in cols else NULL


cdef tuple _scan(object buf, int64_t base, Py_ssize_t start, Py_ssize_t end, bint check_crc,
                 Py_ssize_t max_records, bint dledger):
    cdef const unsigned char[::1] b = _ro(buf)
    cdef Py_ssize_t n = b.shape[0]
    if end < 0 or end > n:
        end = n
    if start < 0 or start > end:
        raise ValueError(f"start {start} outside buffer of {end} bytes")
    cdef const unsigned char *p = &b[0] if n else NULL
    cdef int64_t head = DL_BODY_OFFSET if dledger else 0
    cdef int64_t smallest = head + MQ_MIN_RECORD
    # One pass, into arrays sized from the first record (records of a log tend to be alike),
    # grown when the guess was short and trimmed at the end: the same trade as codec.scan.
    cdef Py_ssize_t upper = (end - start) // smallest + 1
    cdef int64_t first = smallest
    if end - start >= head + 8:
        first = <int32_t>dl_get32(p + start + 4) if dledger else <int32_t>dl_get32(p + start)
        if first < smallest or first > end - start:
            first = smallest
    cdef Py_ssize_t cap = (end - start) // first + (end - start) // (first * 8) + 16
    if cap > upper:
        cap = upper
    if max_records >= 0 and max_records < cap:
        cap = max_records
    types = DLEDGER_COLUMN_TYPES if dledger else COLUMN_TYPES
    cdef dict cols = _alloc(types, cap)
    cdef _Cols c
    cdef _Rec r
    cdef Py_ssize_t off = start, count = 0
    cdef int code = C_END
    cdef bint full
    cdef const unsigned char *q
    while True:
        _bind(cols, &c)
        full = False
        with nogil:
            while True:
                if max_records >= 0 and count >= max_records:
                    code = C_LIMIT
                    break
                if off >= end:
                    code = C_END
                    break
                if count >= cap:
                    full = True
                    break
                q = p + off
                if dledger:
                    code = _parse_entry(q, off, end - off, base, check_crc, &r)
                    if code != C_OK:
                        break
                    _store(&c, count, &r, off + DL_BODY_OFFSET, base + off + DL_BODY_OFFSET)
                    c.entry_index[count] = <int64_t>dl_get64(q + 8)
                    off += DL_BODY_OFFSET + r.size
                else:
                    code = _parse_record(q, end - off, check_crc, &r)
                    if code != C_OK:
                        break
                    _store(&c, count, &r, off, base + off)
                    off += r.size
                count += 1
        if not full:
            break
        cap = min(cap * 2, upper)
        grown = _alloc(types, cap)
        for name in cols:
            grown[name][:count] = cols[name][:count]
        cols = grown
    if count < cap:
        cols = {name: a[:count] for name, a in cols.items()}
    return cols, off, code


def scan_records(buf, int64_t base_offset, Py_ssize_t start=0, Py_ssize_t end=-1, bint check_crc=False,
                 Py_ssize_t max_records=-1):
    """Walk classic commit-log bytes ``buf[start:end]`` (one file; ``buf[0]`` is at commit-log
    offset ``base_offset``) as ReputMessageService / recovery do.

    Returns ``(columns, stop_offset, stop_code)``: ``columns`` maps each name of COLUMNS to a
    numpy array with one value per valid record; ``stop_offset`` is where the walk ended (the
    record there is not in the columns) and ``stop_code`` one of the STOP_* codes. A record is
    valid when its magic is MESSAGE_MAGIC_CODE, it lies within the range, every field lies
    within its size and the size is calMsgLength of its parts; with ``check_crc`` a non-empty
    body must also match BODYCRC.
    """
    return _scan(buf, base_offset, start, end, check_crc, max_records, False)


def scan_dledger_records(buf, int64_t base_pos, Py_ssize_t start=0, Py_ssize_t end=-1, bint check_crc=False,
                         Py_ssize_t max_records=-1):
    """``scan_records`` over a DLedger data file (``buf[0]`` at DLedger position ``base_pos``):
    each entry (48-byte header, its pos field equal to its position) holds one record in its
    body; ``phys_offset`` is the entry's pos + 48 and the extra column ``entry_index`` its index.
    A blank entry (magic -1) stops the walk with STOP_BLANK: the rest of the file is unused.
    With ``check_crc`` a recorded (non-zero) entry bodyCrc is checked too.
    """
    return _scan(buf, base_pos, start, end, check_crc, max_records, True)


# -- properties, hashes, consume queue ------------------------------------------------------------

cdef inline void _prop_span(const unsigned char *p, int64_t n, const unsigned char *name, Py_ssize_t name_len,
                            int64_t *val_off, int32_t *val_len) noexcept nogil:
    # string2messageProperties: items split at 0x02, name and value at the first 0x01, both
    # non-empty; a later item of the same name replaces an earlier one.
    cdef int64_t i = 0, e, s
    cdef const unsigned char *hit
    val_off[0] = -1
    val_len[0] = 0
    while i < n:
        hit = <const unsigned char *>memchr(p + i, 2, <size_t>(n - i))
        e = (hit - p) if hit != NULL else n
        hit = <const unsigned char *>memchr(p + i, 1, <size_t>(e - i))
        if hit != NULL:
            s = hit - p
            if s > i and s < e - 1 and s - i == name_len and memcmp(p + i, name, name_len) == 0:
                val_off[0] = s + 1
                val_len[0] = <int32_t>(e - s - 1)
        i = e + 1


cdef object _offsets_lengths(object offs, object lens, Py_ssize_t size, str what):
    o = np.ascontiguousarray(offs, dtype=np.int64)
    ln = np.ascontiguousarray(lens, dtype=np.int64)
    if o.ndim != 1 or ln.ndim != 1 or o.shape[0] != ln.shape[0]:
        raise ValueError(f"{what}: offsets and lengths must be 1-D of one length")
    if ln.shape[0]:
        bad = (ln < 0) | ((ln > 0) & ((o < 0) | (o > size - ln)))
        if bad.any():
            k = int(np.argmax(bad))
            raise ValueError(f"{what}: slice {k} (offset {o[k]}, length {ln[k]}) outside a buffer of {size} bytes")
    return o, ln


def property_spans(buf, props_off, props_len, bytes name):
    """Where the value of property ``name`` is in each properties string
    ``buf[props_off[k]:props_off[k] + props_len[k]]``: ``(offsets, lengths)`` (int64, int32),
    offsets into ``buf``, ``(-1, 0)`` where absent. Read as MessageDecoder's
    string2messageProperties does: an empty value counts as absent and the last item of that
    name wins."""
    cdef const unsigned char[::1] b = _ro(buf)
    cdef Py_ssize_t size = b.shape[0], k
    o_arr, l_arr = _offsets_lengths(props_off, props_len, size, "property_spans")
    cdef const int64_t[::1] o = o_arr
    cdef const int64_t[::1] ln = l_arr
    cdef Py_ssize_t count = o.shape[0]
    out_off = np.empty(count, dtype=np.int64)
    out_len = np.empty(count, dtype=np.int32)
    cdef int64_t[::1] oo = out_off
    cdef int32_t[::1] ol = out_len
    cdef const unsigned char *p = &b[0] if size else NULL
    cdef const unsigned char *nm = name
    cdef Py_ssize_t nl = len(name)
    if nl == 0:
        raise ValueError("empty property name")
    with nogil:
        for k in range(count):
            if ln[k] == 0:
                oo[k] = -1
                ol[k] = 0
                continue
            _prop_span(p + o[k], ln[k], nm, nl, &oo[k], &ol[k])
            if oo[k] >= 0:
                oo[k] += o[k]
    return out_off, out_len


def property_spans_many(buf, props_off, props_len, tuple names):
    """``property_spans`` of several names in one pass over each properties string: a list of
    ``(offsets, lengths)``, one pair per name, in the order given."""
    cdef const unsigned char[::1] b = _ro(buf)
    cdef Py_ssize_t size = b.shape[0], k, j
    o_arr, l_arr = _offsets_lengths(props_off, props_len, size, "property_spans_many")
    cdef const int64_t[::1] o = o_arr
    cdef const int64_t[::1] ln = l_arr
    cdef Py_ssize_t count = o.shape[0], m = len(names)
    if m == 0 or m > 8:
        raise ValueError("property_spans_many takes 1 to 8 names")
    cdef const unsigned char *nm[8]
    cdef Py_ssize_t nl[8]
    cdef int64_t *oo[8]
    cdef int32_t *ol[8]
    out = []
    for j in range(m):
        name = names[j]
        if not isinstance(name, bytes) or len(name) == 0:
            raise ValueError("property names must be non-empty bytes")
        nm[j] = <const unsigned char *>PyBytes_AS_STRING(name)
        nl[j] = PyBytes_GET_SIZE(name)
        pair = (np.empty(count, dtype=np.int64), np.empty(count, dtype=np.int32))
        oo[j] = <int64_t *>_ptr(pair[0])
        ol[j] = <int32_t *>_ptr(pair[1])
        out.append(pair)
    cdef const unsigned char *p = &b[0] if size else NULL
    cdef const unsigned char *q
    cdef const unsigned char *hit
    cdef int64_t i, e, sep, n
    with nogil:
        for k in range(count):
            for j in range(m):
                oo[j][k] = -1
                ol[j][k] = 0
            n = ln[k]
            if n == 0:
                continue
            q = p + o[k]
            i = 0
            # As _prop_span: items split at 0x02, name and value at the first 0x01, both
            # non-empty; a later item of the same name wins.
            while i < n:
                hit = <const unsigned char *>memchr(q + i, 2, <size_t>(n - i))
                e = (hit - q) if hit != NULL else n
                hit = <const unsigned char *>memchr(q + i, 1, <size_t>(e - i))
                if hit != NULL:
                    sep = hit - q
                    if sep > i and sep < e - 1:
                        for j in range(m):
                            if sep - i == nl[j] and memcmp(q + i, nm[j], nl[j]) == 0:
                                oo[j][k] = o[k] + sep + 1
                                ol[j][k] = <int32_t>(e - sep - 1)
                                break
                i = e + 1
    return out


def topic_ids(buf, topic_off, topic_len):
    """Number the distinct byte strings ``buf[topic_off[k]:topic_off[k] + topic_len[k]]`` in
    order of first appearance: ``(ids, firsts)``, ``ids[k]`` the number of record k's topic
    (int32) and ``firsts[i]`` the first record with topic i (int64)."""
    cdef const unsigned char[::1] b = _ro(buf)
    cdef Py_ssize_t size = b.shape[0], k, j
    o_arr, l_arr = _offsets_lengths(topic_off, topic_len, size, "topic_ids")
    cdef const int64_t[::1] o = o_arr
    cdef const int64_t[::1] ln = l_arr
    cdef Py_ssize_t count = o.shape[0]
    ids = np.empty(count, dtype=np.int32)
    firsts_arr = np.empty(max(count, 1), dtype=np.int64)
    cdef int32_t[::1] out = ids
    cdef int64_t[::1] firsts = firsts_arr
    cdef const unsigned char *p = &b[0] if size else NULL
    cdef Py_ssize_t distinct = 0, f
    cdef int32_t prev = -1
    with nogil:
        for k in range(count):
            if prev >= 0:
                f = firsts[prev]
                if ln[f] == ln[k] and memcmp(p + o[f], p + o[k], <size_t>ln[k]) == 0:
                    out[k] = prev
                    continue
            prev = -1
            for j in range(distinct):
                f = firsts[j]
                if ln[f] == ln[k] and memcmp(p + o[f], p + o[k], <size_t>ln[k]) == 0:
                    prev = <int32_t>j
                    break
            if prev < 0:
                prev = <int32_t>distinct
                firsts[distinct] = k
                distinct += 1
            out[k] = prev
    return ids, firsts_arr[:distinct]


cdef inline int32_t _index_hash(uint32_t h) noexcept nogil:
    # IndexFile.indexKeyHashMethod: abs(hashCode), 0 for Integer.MIN_VALUE.
    cdef int32_t v = <int32_t>h
    if v == -2147483648:
        return 0
    return -v if v < 0 else v


def index_key_hashes(buf, prefix_hashes, uniq_off, uniq_len, keys_off, keys_len):
    """The IndexFile key hashes IndexService.buildIndex puts for each record, in order: its
    UNIQ_KEY (``uniq_off[k] >= 0``), then every non-empty space-separated segment of its KEYS
    value, each as ``topic#key``. ``prefix_hashes[k]`` is Java's hash of record k's ``topic#``;
    the key's UTF-8 bytes continue it. Returns ``(hashes, rows)``: int32 hashes (already
    ``abs``) and the record (int64) each belongs to."""
    cdef const unsigned char[::1] b = _ro(buf)
    cdef Py_ssize_t size = b.shape[0], k
    uo_arr, ul_arr = _offsets_lengths(uniq_off, uniq_len, size, "index_key_hashes")
    ko_arr, kl_arr = _offsets_lengths(keys_off, keys_len, size, "index_key_hashes")
    cdef const int64_t[::1] uo = uo_arr
    cdef const int64_t[::1] ul = ul_arr
    cdef const int64_t[::1] ko = ko_arr
    cdef const int64_t[::1] kl = kl_arr
    cdef Py_ssize_t count = uo.shape[0]
    if ko.shape[0] != count:
        raise ValueError("index_key_hashes: columns of different lengths")
    cdef const int64_t[::1] ph = _col(prefix_hashes, count, np.int64, "prefix_hashes")
    cdef const unsigned char *p = &b[0] if size else NULL
    cdef Py_ssize_t total = 0
    cdef int64_t i, n, start
    cdef const unsigned char *q
    with nogil:
        for k in range(count):
            if uo[k] >= 0 and ul[k] > 0:
                total += 1
            if ko[k] >= 0:
                q = p + ko[k]
                n = kl[k]
                i = 0
                while i < n:
                    while i < n and q[i] == 32:
                        i += 1
                    if i < n:
                        total += 1
                    while i < n and q[i] != 32:
                        i += 1
    hashes = np.empty(total, dtype=np.int32)
    rows = np.empty(total, dtype=np.int64)
    cdef int32_t[::1] hs = hashes
    cdef int64_t[::1] rs = rows
    cdef Py_ssize_t at = 0
    cdef uint32_t prefix
    with nogil:
        for k in range(count):
            prefix = <uint32_t>ph[k]
            if uo[k] >= 0 and ul[k] > 0:
                hs[at] = _index_hash(mq_java_hash_utf8_from(prefix, p + uo[k], <size_t>ul[k]))
                rs[at] = k
                at += 1
            if ko[k] >= 0:
                q = p + ko[k]
                n = kl[k]
                i = 0
                while i < n:
                    while i < n and q[i] == 32:
                        i += 1
                    start = i
                    while i < n and q[i] != 32:
                        i += 1
                    if i > start:
                        hs[at] = _index_hash(mq_java_hash_utf8_from(prefix, q + start, <size_t>(i - start)))
                        rs[at] = k
                        at += 1
    return hashes, rows


def java_hash(str s):
    """Java ``String.hashCode`` of ``s``: over UTF-16 code units (a pair for a code point above
    U+FFFF), 32-bit signed."""
    cdef uint32_t h = 0, u
    cdef Py_UCS4 c
    for c in s:
        u = <uint32_t>c
        if u >= 0x10000:
            u -= 0x10000
            h = 31 * h + (0xD800 + (u >> 10))
            h = 31 * h + (0xDC00 + (u & 0x3FF))
        else:
            h = 31 * h + u
    return <int32_t>h


def java_hash_bytes(raw):
    """Java ``new String(raw, UTF_8).hashCode()``; ill-formed UTF-8 becomes U+FFFD as the JDK's
    decoder makes it."""
    cdef const unsigned char[::1] b = _ro(raw)
    if b.shape[0] == 0:
        return 0
    return <int32_t>mq_java_hash_utf8(&b[0], <size_t>b.shape[0])


def java_hash_many(buf, offs, lens):
    """``java_hash_bytes(buf[offs[k]:offs[k] + lens[k]])`` for every k as an int32 array (0 for
    an empty slice, whatever its offset: property_spans' ``(-1, 0)`` hashes to 0, the tagsCode
    of a message without tags). ValueError if a slice is outside ``buf``."""
    cdef const unsigned char[::1] b = _ro(buf)
    cdef Py_ssize_t size = b.shape[0], k
    o_arr, l_arr = _offsets_lengths(offs, lens, size, "java_hash_many")
    cdef const int64_t[::1] o = o_arr
    cdef const int64_t[::1] ln = l_arr
    cdef Py_ssize_t count = o.shape[0]
    out = np.empty(count, dtype=np.int32)
    cdef int32_t[::1] h = out
    cdef const unsigned char *p = &b[0] if size else NULL
    with nogil:
        for k in range(count):
            h[k] = <int32_t>mq_java_hash_utf8(p + o[k], <size_t>ln[k]) if ln[k] else 0
    return out


def consume_queue_units(phys_offsets, sizes, tags_codes):
    """ConsumeQueue units (commitLogOffset i64, size i32, tagsCode i64; big-endian) back to back."""
    po = np.ascontiguousarray(phys_offsets, dtype=np.int64)
    cdef Py_ssize_t n = po.shape[0], k
    cdef const int64_t[::1] ph = po
    cdef const int32_t[::1] sz = _col(sizes, n, np.int32, "sizes")
    cdef const int64_t[::1] tc = _col(tags_codes, n, np.int64, "tags_codes")
    cdef bytes out = PyBytes_FromStringAndSize(NULL, n * MQ_CQ_UNIT)
    cdef unsigned char *p = <unsigned char *>PyBytes_AS_STRING(out)
    with nogil:
        for k in range(n):
            dl_put64(p + k * MQ_CQ_UNIT, <uint64_t>ph[k])
            dl_put32(p + k * MQ_CQ_UNIT + 8, <uint32_t>sz[k])
            dl_put64(p + k * MQ_CQ_UNIT + 12, <uint64_t>tc[k])
    return out


# -- index file -----------------------------------------------------------------------------------

cdef int64_t _index_size(int32_t hash_slot_num, int32_t index_num, Py_ssize_t have) except -1:
    if hash_slot_num <= 0 or index_num <= 0:
        raise ValueError(f"hash_slot_num {hash_slot_num} and index_num {index_num} must be positive")
    cdef int64_t need = MQ_INDEX_HEADER + <int64_t>hash_slot_num * MQ_INDEX_SLOT + <int64_t>index_num * MQ_INDEX_ITEM
    if have < need:
        raise ValueError(f"index file of {have} bytes; {hash_slot_num} slots and {index_num} items need {need}")
    return need


def index_put_many(buf, int32_t hash_slot_num, int32_t index_num, key_hashes, phys_offsets, time_diffs):
    """IndexFile.putKey for many keys, in order, into the writable index file ``buf``: each item
    goes at ``40 + hash_slot_num*4 + indexCount*20`` chained to its slot's previous item, the
    slot takes its indexCount, and the header's hashSlotCount and indexCount (at 32 and 36)
    follow. The header timestamps and offsets are the caller's (putKey's rules: set begin
    from the first item, end from every item); ``time_diffs`` are putKey's seconds since the
    begin timestamp, already clamped. ``key_hashes`` are indexKeyHashMethod values (>= 0).
    Returns how many were put: fewer than given when the file fills (indexCount >= index_num).
    """
    cdef unsigned char[::1] b = memoryview(buf).cast("B")
    _index_size(hash_slot_num, index_num, b.shape[0])
    kh = np.ascontiguousarray(key_hashes, dtype=np.int32)
    cdef Py_ssize_t n = kh.shape[0], k
    cdef const int32_t[::1] keys = kh
    cdef const int64_t[::1] phys = _col(phys_offsets, n, np.int64, "phys_offsets")
    cdef const int32_t[::1] diffs = _col(time_diffs, n, np.int32, "time_diffs")
    if n and kh.min() < 0:
        raise ValueError("key hashes must be >= 0 (IndexFile.indexKeyHashMethod)")
    cdef unsigned char *p = &b[0]
    cdef unsigned char *slot
    cdef unsigned char *item
    cdef Py_ssize_t put = 0
    cdef int32_t count = <int32_t>dl_get32(p + 36), slots = <int32_t>dl_get32(p + 32), prev
    cdef int64_t items_at = MQ_INDEX_HEADER + <int64_t>hash_slot_num * MQ_INDEX_SLOT
    if count <= 0:
        count = 1  # IndexHeader.load
    with nogil:
        for k in range(n):
            if count >= index_num:
                break
            slot = p + MQ_INDEX_HEADER + <int64_t>(keys[k] % hash_slot_num) * MQ_INDEX_SLOT
            prev = <int32_t>dl_get32(slot)
            if prev <= 0 or prev > count:
                prev = 0
                slots += 1
            item = p + items_at + <int64_t>count * MQ_INDEX_ITEM
            dl_put32(item, <uint32_t>keys[k])
            dl_put64(item + 4, <uint64_t>phys[k])
            dl_put32(item + 12, <uint32_t>diffs[k])
            dl_put32(item + 16, <uint32_t>prev)
            dl_put32(slot, <uint32_t>count)
            count += 1
            put += 1
        if put:
            dl_put32(p + 32, <uint32_t>slots)
            dl_put32(p + 36, <uint32_t>count)
    return put


def index_lookup(buf, int32_t hash_slot_num, int32_t index_num, int32_t key_hash, Py_ssize_t max_num,
                 int64_t begin_ts, int64_t end_ts, int64_t file_begin_ts):
    """IndexFile.selectPhyOffset in one index file: the phys offsets of the items of
    ``key_hash`` (an indexKeyHashMethod value) along its slot chain, newest first, at most
    ``max_num``, whose time (``file_begin_ts`` + timeDiff seconds) is within
    ``[begin_ts, end_ts]``; the walk stops at the first item older than ``begin_ts``. Items of
    other keys sharing the slot are skipped, as in RocketMQ (the caller checks the message's
    keys). indexCount is read from the header."""
    cdef const unsigned char[::1] b = _ro(buf)
    cdef int64_t size = _index_size(hash_slot_num, index_num, b.shape[0])
    if key_hash < 0:
        raise ValueError("key hash must be >= 0 (IndexFile.indexKeyHashMethod)")
    if max_num <= 0:
        return []
    cdef const unsigned char *p = &b[0]
    cdef int32_t count = <int32_t>dl_get32(p + 36)
    if count <= 0:
        count = 1
    cdef int64_t items_at = MQ_INDEX_HEADER + <int64_t>hash_slot_num * MQ_INDEX_SLOT
    cdef int32_t nxt = <int32_t>dl_get32(p + MQ_INDEX_HEADER + <int64_t>(key_hash % hash_slot_num) * MQ_INDEX_SLOT)
    if nxt <= 0 or nxt > count or count <= 1:
        return []
    cdef int64_t *found = <int64_t *>malloc(max_num * sizeof(int64_t))
    if found == NULL:
        raise MemoryError()
    cdef Py_ssize_t got = 0, k
    cdef int32_t steps, prev, diff
    cdef int64_t at, t
    cdef const unsigned char *item
    try:
        with nogil:
            # At most indexCount steps: a chain in a damaged file cannot loop for ever.
            for steps in range(count):
                if got >= max_num:
                    break
                at = items_at + <int64_t>nxt * MQ_INDEX_ITEM
                if at + MQ_INDEX_ITEM > size:
                    break
                item = p + at
                diff = <int32_t>dl_get32(item + 12)
                if diff < 0:
                    break
                prev = <int32_t>dl_get32(item + 16)
                t = file_begin_ts + <int64_t>diff * 1000
                if <int32_t>dl_get32(item) == key_hash and t >= begin_ts and t <= end_ts:
                    found[got] = <int64_t>dl_get64(item + 4)
                    got += 1
                if prev <= 0 or prev > count or prev == nxt or t < begin_ts:
                    break
                nxt = prev
        return [found[k] for k in range(got)]
    finally:
        free(found)


include "message_service.pxi"
include "message_read.pxi"
include "message_dispatch.pxi"
include "put_lock.pxi"
include "message_put.pxi"
include "message_objects.pxi"
include "message_arrow.pxi"
include "uniq_clock.pxi"
