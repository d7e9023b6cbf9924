# cython: language_level=3
"""Entry/index encode and decode, batch encode and batch scan (DLedger's DLedgerEntryCoder).

The scan walks a segment buffer without creating a Python object per entry: one pass over
the headers with the GIL released, validating each and filling numpy arrays.
"""

import numpy as np
cimport numpy as cnp
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memcpy

from cpython.bytes cimport PyBytes_FromStringAndSize

cnp.import_array()

include "bodies.pxi"

include "format.pxi"

# The layout constants of dl_format.h, for Python (dledger.store.layout takes them from here,
# so the C kernels and the Python code cannot disagree).
MAGIC_1 = DL_MAGIC_1
CURRENT_MAGIC = DL_CURRENT_MAGIC
BLANK_MAGIC_CODE = DL_BLANK_MAGIC
POS_OFFSET = DL_POS_OFFSET
HEADER_SIZE = DL_HEADER_SIZE
BODY_OFFSET = DL_BODY_OFFSET
INDEX_UNIT_SIZE = DL_INDEX_UNIT
MIN_BLANK_LEN = DL_MIN_BLANK_LEN

# Why a scan stopped. The entry at the stop offset is not in the result.
cdef enum:
    C_END = 0       # reached the end of the range
    C_BLANK = 1     # blank record (magic -1): the rest of the file is padding
    C_ZERO = 2      # magic 0: space never written
    C_BAD = 3       # structurally invalid header (torn or corrupt)
    C_CRC = 4       # bodyCrc recorded and the body does not match it
    C_LIMIT = 5     # max_entries reached

SCAN_END = C_END
SCAN_BLANK = C_BLANK
SCAN_ZERO = C_ZERO
SCAN_BAD = C_BAD
SCAN_CRC = C_CRC
SCAN_LIMIT = C_LIMIT

STOP_NAMES = {0: "end", 1: "blank", 2: "unwritten", 3: "bad header", 4: "crc mismatch", 5: "limit"}

COLUMNS = ("index", "term", "pos", "size", "magic", "body_offset", "body_len", "body_crc")


cdef inline const unsigned char[::1] _ro(object buf):
    return memoryview(buf).cast("B")


def encode_entry(int64_t index, int64_t term, int64_t pos, body, int32_t magic=1,
                 int32_t channel=0, int64_t chain_crc=0, body_crc=None):
    """One entry as bytes. ``body_crc=None`` computes CRC32 of the body; pass 0 to leave it unrecorded."""
    cdef const unsigned char[::1] b = _ro(body)
    cdef Py_ssize_t n = b.shape[0]
    cdef bytearray out = bytearray(DL_BODY_OFFSET + n)
    cdef unsigned char *p = out
    cdef uint32_t crc
    if body_crc is None:
        crc = dl_crc32(0, &b[0], n) if n else 0
    else:
        crc = <uint32_t>(<int64_t>body_crc & 0xFFFFFFFF)
    dl_write_header(p, magic, <int32_t>(DL_BODY_OFFSET + n), index, term, pos, channel, <int32_t>chain_crc,
                    <int32_t>crc, <int32_t>n)
    if n:
        memcpy(p + DL_BODY_OFFSET, &b[0], n)
    return bytes(out)


def decode_header(buf, Py_ssize_t offset=0):
    """(magic, size, index, term, pos, channel, chain_crc, body_crc, body_size); CRCs unsigned."""
    cdef const unsigned char[::1] b = _ro(buf)
    if offset < 0 or offset + DL_BODY_OFFSET > b.shape[0]:
        raise ValueError(f"need 48 header bytes at offset {offset}, buffer has {b.shape[0]}")
    cdef const unsigned char *p = &b[offset]
    return (<int32_t>dl_get32(p), <int32_t>dl_get32(p + 4), <int64_t>dl_get64(p + 8),
            <int64_t>dl_get64(p + 16), <int64_t>dl_get64(p + 24), <int32_t>dl_get32(p + 32),
            dl_get32(p + 36), dl_get32(p + 40), <int32_t>dl_get32(p + 44))


def encode_index(int32_t magic, int64_t pos, int32_t size, int64_t index, int64_t term):
    cdef unsigned char out[32]
    dl_write_index(out, magic, pos, size, index, term)
    return (<char *>out)[:32]


def decode_index(buf, Py_ssize_t offset=0):
    """(magic, pos, size, index, term)."""
    cdef const unsigned char[::1] b = _ro(buf)
    if offset < 0 or offset + DL_INDEX_UNIT > b.shape[0]:
        raise ValueError(f"need 32 index bytes at offset {offset}, buffer has {b.shape[0]}")
    cdef const unsigned char *p = &b[offset]
    return (<int32_t>dl_get32(p), <int64_t>dl_get64(p + 4), <int32_t>dl_get32(p + 12),
            <int64_t>dl_get64(p + 16), <int64_t>dl_get64(p + 24))


def encode_batch(bodies, int64_t first_index, int64_t term, int64_t first_pos, int32_t magic=1,
                 bint with_crc=True):
    """Many bodies into one contiguous buffer of entries; entry k gets index first_index+k and
    pos first_pos + its offset. Returns (bytes, numpy int64 offsets of each entry)."""
    cdef _Bodies bs = _Bodies(bodies)
    cdef Py_ssize_t count = bs.count, k, n
    for k in range(count):
        if bs.lens[k] == 0:
            raise ValueError(f"empty body at position {k}")
    cdef Py_ssize_t total = bs.total + count * DL_BODY_OFFSET
    cdef bytes out = PyBytes_FromStringAndSize(NULL, total)
    cdef unsigned char *p = <unsigned char *>PyBytes_AS_STRING(out)
    offsets = np.empty(count, dtype=np.int64)
    cdef int64_t[::1] offs = offsets
    cdef Py_ssize_t at = 0
    cdef uint32_t crc
    with nogil:
        for k in range(count):
            n = bs.lens[k]
            crc = dl_crc32(0, bs.ptrs[k], n) if with_crc else 0
            dl_write_header(p + at, magic, <int32_t>(DL_BODY_OFFSET + n), first_index + k, term,
                            first_pos + at, 0, 0, <int32_t>crc, <int32_t>n)
            memcpy(p + at + DL_BODY_OFFSET, bs.ptrs[k], n)
            offs[k] = at
            at += DL_BODY_OFFSET + n
    return out, offsets


def _grown(a, Py_ssize_t cap):
    out = np.empty(cap, dtype=a.dtype)
    out[:len(a)] = a
    return out


cdef inline int _check_entry(const unsigned char *p, Py_ssize_t off, Py_ssize_t end, int64_t base_pos,
                             int64_t expect_index, int64_t prev_term, bint check_crc,
                             int64_t *out_size) noexcept nogil:
    """0 if the entry at p is valid, else a SCAN_* stop code."""
    cdef int32_t magic, size, body_size
    cdef int64_t index, term, pos
    cdef uint32_t body_crc
    if end - off < 4:
        return C_END if end == off else C_BAD
    magic = <int32_t>dl_get32(p)
    if magic == DL_BLANK_MAGIC:
        return C_BLANK
    if magic == 0:
        return C_ZERO
    if end - off < DL_BODY_OFFSET:
        return C_BAD
    size = <int32_t>dl_get32(p + 4)
    index = <int64_t>dl_get64(p + 8)
    term = <int64_t>dl_get64(p + 16)
    pos = <int64_t>dl_get64(p + 24)
    body_size = <int32_t>dl_get32(p + 44)
    if magic < DL_MAGIC_1 or magic > DL_CURRENT_MAGIC:
        return C_BAD
    if size <= DL_HEADER_SIZE or body_size < 0 or body_size + DL_BODY_OFFSET != size:
        return C_BAD
    if size > end - off:
        return C_BAD
    if pos != base_pos + off:
        return C_BAD
    if expect_index >= 0 and index != expect_index:
        return C_BAD
    if index < 0 or term < prev_term:
        return C_BAD
    if check_crc:
        body_crc = dl_get32(p + 40)
        if body_crc != 0 and dl_crc32(0, p + DL_BODY_OFFSET, <size_t>body_size) != body_crc:
            return C_CRC
    out_size[0] = size
    return 0


def scan(buf, int64_t base_pos, Py_ssize_t start=0, Py_ssize_t end=-1, int64_t expect_index=-1,
         int64_t prev_term=-1, bint check_crc=False, Py_ssize_t max_entries=-1):
    """Walk entries in ``buf[start:end]`` (``buf[0]`` sits at absolute position ``base_pos``).

    Returns ``(columns, stop_offset, stop_code)``: ``columns`` maps each name of COLUMNS to a
    numpy array (``body_offset`` is relative to ``buf``); ``stop_offset`` is where the walk
    ended; ``stop_code`` is one of the SCAN_* codes. Each entry is checked as DLedger's
    recovery does: magic, size and bodySize agree, pos is its absolute position, indices are
    contiguous (from ``expect_index`` when given), terms never decrease; with ``check_crc``
    a recorded bodyCrc must match.
    """
    cdef const unsigned char[::1] b = _ro(buf)
    cdef Py_ssize_t n = b.shape[0]
    if end < 0 or end > n:
        end = n
    if start < 0 or start > end:
        raise ValueError(f"start {start} outside buffer of {end} bytes")
    cdef const unsigned char *p = &b[0] if n else NULL
    # One pass over the headers, filling arrays sized from the first entry's size (entries of
    # a log tend to be alike); they grow if the guess was short, and are returned as views
    # trimmed to the count. A second walk (a cache miss per header on a large buffer) and a
    # worst-case allocation (every entry 49 bytes) both cost more than this.
    cdef Py_ssize_t upper = (end - start) // (DL_BODY_OFFSET + 1) + 1
    cdef int64_t first_size = DL_BODY_OFFSET + 1
    if end - start >= 8:
        first_size = <int32_t>dl_get32(p + start + 4)
        if first_size <= DL_BODY_OFFSET or first_size > end - start:
            first_size = DL_BODY_OFFSET + 1
    cdef Py_ssize_t cap = (end - start) // first_size + (end - start) // (first_size * 8) + 16
    if cap > upper:
        cap = upper
    if max_entries >= 0 and max_entries < cap:
        cap = max_entries
    index_a = np.empty(cap, dtype=np.int64)
    term_a = np.empty(cap, dtype=np.int64)
    pos_a = np.empty(cap, dtype=np.int64)
    size_a = np.empty(cap, dtype=np.int32)
    magic_a = np.empty(cap, dtype=np.int32)
    boff_a = np.empty(cap, dtype=np.int64)
    blen_a = np.empty(cap, dtype=np.int32)
    bcrc_a = np.empty(cap, dtype=np.uint32)
    cdef int64_t[::1] ix, tm, ps, bo
    cdef int32_t[::1] sz, mg, bl
    cdef uint32_t[::1] bc
    cdef Py_ssize_t off = start, count = 0
    cdef int64_t size = 0, expect = expect_index, prev = prev_term
    cdef int code = C_END
    cdef bint full
    cdef const unsigned char *q
    while True:
        ix, tm, ps, bo = index_a, term_a, pos_a, boff_a
        sz, mg, bl, bc = size_a, magic_a, blen_a, bcrc_a
        full = False
        with nogil:
            while True:
                if max_entries >= 0 and count >= max_entries:
                    code = C_LIMIT
                    break
                if off >= end:
                    code = C_END
                    break
                if count >= cap:
                    full = True
                    break
                q = p + off
                code = _check_entry(q, off, end, base_pos, expect, prev, check_crc, &size)
                if code != 0:
                    break
                mg[count] = <int32_t>dl_get32(q)
                sz[count] = <int32_t>size
                ix[count] = <int64_t>dl_get64(q + 8)
                tm[count] = prev = <int64_t>dl_get64(q + 16)
                ps[count] = <int64_t>dl_get64(q + 24)
                bc[count] = dl_get32(q + 40)
                bl[count] = <int32_t>(size - DL_BODY_OFFSET)
                bo[count] = off + DL_BODY_OFFSET
                expect = ix[count] + 1
                off += size
                count += 1
        if not full:
            break
        cap = min(cap * 2, upper)
        index_a, term_a, pos_a, boff_a = (_grown(a, cap) for a in (index_a, term_a, pos_a, boff_a))
        size_a, magic_a, blen_a, bcrc_a = (_grown(a, cap) for a in (size_a, magic_a, blen_a, bcrc_a))
    cdef Py_ssize_t stop = off
    if count < cap:
        index_a, term_a, pos_a, size_a = index_a[:count], term_a[:count], pos_a[:count], size_a[:count]
        magic_a, boff_a, blen_a, bcrc_a = magic_a[:count], boff_a[:count], blen_a[:count], bcrc_a[:count]
    cols = {"index": index_a, "term": term_a, "pos": pos_a, "size": size_a, "magic": magic_a,
            "body_offset": boff_a, "body_len": blen_a, "body_crc": bcrc_a}
    return cols, stop, code


def check_run(buf, int64_t base_pos, int64_t expect_index=-1, int64_t prev_term=-1, bint check_crc=False):
    """``scan`` of all of ``buf`` without the columns, for a follower checking a pushed batch:
    the same checks, and only the verdict. Returns ``(count, stop_offset, stop_code,
    min_body_len, max_body_len)`` (the lengths are -1 when no entry passed).

    A push of a few entries would otherwise spend more on allocating eight arrays than on
    the walk itself.
    """
    cdef const unsigned char[::1] b = _ro(buf)
    cdef Py_ssize_t end = b.shape[0], off = 0, count = 0
    cdef const unsigned char *p = &b[0] if end else NULL
    cdef const unsigned char *q
    cdef int64_t size = 0, expect = expect_index, prev = prev_term, blen, lo = -1, hi = -1
    cdef int code = C_END
    with nogil:
        while True:
            if off >= end:
                code = C_END
                break
            q = p + off
            code = _check_entry(q, off, end, base_pos, expect, prev, check_crc, &size)
            if code != 0:
                break
            prev = <int64_t>dl_get64(q + 16)
            expect = <int64_t>dl_get64(q + 8) + 1
            blen = size - DL_BODY_OFFSET
            if lo < 0 or blen < lo:
                lo = blen
            if blen > hi:
                hi = blen
            off += size
            count += 1
    return count, off, code, lo, hi


def decode_index_units(buf, Py_ssize_t start=0, Py_ssize_t count=-1):
    """Decode ``count`` consecutive 32-byte index units into numpy arrays (magic, pos, size, index, term)."""
    cdef const unsigned char[::1] b = _ro(buf)
    cdef Py_ssize_t avail = (b.shape[0] - start) // DL_INDEX_UNIT if b.shape[0] > start else 0
    if start < 0:
        raise ValueError("negative start")
    if count < 0 or count > avail:
        count = avail
    magic_a = np.empty(count, dtype=np.int32)
    pos_a = np.empty(count, dtype=np.int64)
    size_a = np.empty(count, dtype=np.int32)
    index_a = np.empty(count, dtype=np.int64)
    term_a = np.empty(count, dtype=np.int64)
    cdef int32_t[::1] mg = magic_a, sz = size_a
    cdef int64_t[::1] ps = pos_a, ix = index_a, tm = term_a
    cdef Py_ssize_t k
    cdef const unsigned char *q
    with nogil:
        for k in range(count):
            q = &b[start + k * DL_INDEX_UNIT]
            mg[k] = <int32_t>dl_get32(q)
            ps[k] = <int64_t>dl_get64(q + 4)
            sz[k] = <int32_t>dl_get32(q + 12)
            ix[k] = <int64_t>dl_get64(q + 16)
            tm[k] = <int64_t>dl_get64(q + 24)
    return {"magic": magic_a, "pos": pos_a, "size": size_a, "index": index_a, "term": term_a}
