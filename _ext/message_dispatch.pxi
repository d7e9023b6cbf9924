# Included at the end of message.pyx: the dispatch path's kernels (ReputMessageService).

cdef extern from "<sys/mman.h>" nogil:
    int madvise(void *addr, size_t length, int advice)
    int MADV_WILLNEED

# errno is declared once for the module, in message_service.pxi (included before this file).

cdef extern from "<unistd.h>" nogil:
    long sysconf(int name)
    int _SC_PAGESIZE

# Linux 5.14's populate advices, spelt out: older headers lack them.
cdef int _MADV_POPULATE_READ = 22
cdef int _MADV_POPULATE_WRITE = 23

PREFAULT_READ = 0
PREFAULT_WRITE = 1
PREFAULT_WILLNEED = 2


def prefault(buf, Py_ssize_t start=0, Py_ssize_t end=-1, int how=PREFAULT_READ):
    """Fault in the pages of ``buf[start:end]`` (a mapping) without the GIL, so the thread that
    then reads or writes them does not take a fault per page: PREFAULT_READ / PREFAULT_WRITE map
    them (MADV_POPULATE_READ / _WRITE, the write one also makes file pages writable),
    PREFAULT_WILLNEED only starts their readahead. Changes no byte. Returns 0, or the errno of
    a kernel that refused (then the WILLNEED readahead was asked for instead)."""
    cdef const unsigned char[::1] b = _ro(buf)
    cdef Py_ssize_t n = b.shape[0]
    if end < 0 or end > n:
        end = n
    if start < 0:
        start = 0
    if start >= end:
        return 0
    cdef size_t page = <size_t>sysconf(_SC_PAGESIZE)
    cdef size_t lo = <size_t>&b[start]
    cdef size_t hi = <size_t>&b[0] + <size_t>end
    lo -= lo % page  # madvise wants a page-aligned start; the page holding buf[start] is ours too
    cdef int advice = MADV_WILLNEED
    if how == PREFAULT_READ:
        advice = _MADV_POPULATE_READ
    elif how == PREFAULT_WRITE:
        advice = _MADV_POPULATE_WRITE
    cdef int rc = 0, err = 0
    with nogil:
        rc = madvise(<void *>lo, hi - lo, advice)
        if rc != 0:
            err = errno
            if advice != MADV_WILLNEED:
                madvise(<void *>lo, hi - lo, MADV_WILLNEED)
    return err


def dispatch_keys(buf, topic_buf, props_off, props_len, topic_off, topic_len, sys_flag, Py_ssize_t index_from=0):
    """What dispatch needs of a batch of records besides their columns, in one pass without the
    GIL: ``(topic_id, firsts, tags_code, hashes, rows)``.

    ``topic_id``/``firsts`` are ``topic_ids(topic_buf, topic_off, topic_len)``; ``tags_code``
    (int64) is Java's hash of each record's TAGS value (0 without), the tagsCode of its unit;
    ``hashes``/``rows`` are ``index_key_hashes`` of the records from ``index_from`` on that are
    not ROLLBACK (sys_flag & 0xC == 0xC), each key ``topic#key`` (the properties in ``buf``,
    TAGS, UNIQ_KEY and KEYS read as ``property_spans_many`` reads them)."""
    cdef const unsigned char[::1] b = _ro(buf)
    cdef const unsigned char[::1] tb = _ro(topic_buf)
    cdef Py_ssize_t size = b.shape[0], tsize = tb.shape[0], k, j
    po_arr, pl_arr = _offsets_lengths(props_off, props_len, size, "dispatch_keys")
    to_arr, tl_arr = _offsets_lengths(topic_off, topic_len, tsize, "dispatch_keys")
    cdef const int64_t[::1] po = po_arr
    cdef const int64_t[::1] pl = pl_arr
    cdef const int64_t[::1] to = to_arr
    cdef const int64_t[::1] tl = tl_arr
    cdef Py_ssize_t count = po.shape[0]
    if to.shape[0] != count:
        raise ValueError("dispatch_keys: columns of different lengths")
    cdef const int32_t[::1] sf = _col(sys_flag, count, np.int32, "sys_flag")
    if index_from < 0:
        index_from = 0
    ids = np.empty(count, dtype=np.int32)
    firsts_arr = np.empty(max(count, 1), dtype=np.int64)
    tags = np.empty(count, dtype=np.int64)
    # At most one UNIQ_KEY and (len + 1) / 2 KEYS segments a record: sized from the lengths,
    # trimmed at the end.
    cdef int64_t cap = 0
    for k in range(index_from, count):
        cap += 1 + (pl[k] + 1) // 2
    hashes = np.empty(cap, dtype=np.int32)
    rows = np.empty(cap, dtype=np.int64)
    cdef int32_t[::1] out = ids
    cdef int64_t[::1] firsts = firsts_arr
    cdef int64_t[::1] tc = tags
    cdef int32_t[::1] hs = hashes
    cdef int64_t[::1] rs = rows
    cdef const unsigned char *p = &b[0] if size else NULL
    cdef const unsigned char *tp = &tb[0] if tsize else NULL
    cdef Py_ssize_t distinct = 0, f, at = 0
    cdef int32_t prev = -1
    cdef uint32_t prefix = 0
    cdef uint32_t[256] prefixes
    cdef const unsigned char *q
    cdef const unsigned char *hit
    cdef int64_t i, e, sep, n, start
    cdef int64_t vo[3]
    cdef int64_t vl[3]
    cdef const char *names[3]
    names[0] = b"TAGS"
    names[1] = b"UNIQ_KEY"
    names[2] = b"KEYS"
    cdef int64_t nlen[3]
    nlen[0] = 4
    nlen[1] = 8
    nlen[2] = 4
    cdef uint32_t *pre = prefixes
    cdef uint32_t *pre_heap = NULL
    try:
        with nogil:
            for k in range(count):
                # The topic's number (as topic_ids) and the hash of its "topic#".
                if prev >= 0:
                    f = firsts[prev]
                    if not (tl[f] == tl[k] and memcmp(tp + to[f], tp + to[k], <size_t>tl[k]) == 0):
                        prev = -1
                if prev < 0:
                    for j in range(distinct):
                        f = firsts[j]
                        if tl[f] == tl[k] and memcmp(tp + to[f], tp + to[k], <size_t>tl[k]) == 0:
                            prev = <int32_t>j
                            break
                if prev < 0:
                    prev = <int32_t>distinct
                    if distinct == 256 and pre_heap == NULL:
                        pre_heap = <uint32_t *>malloc(count * sizeof(uint32_t))
                        if pre_heap == NULL:
                            with gil:
                                raise MemoryError()
                        memcpy(pre_heap, prefixes, 256 * sizeof(uint32_t))
                        pre = pre_heap
                    firsts[distinct] = k
                    pre[distinct] = 31 * (mq_java_hash_utf8_from(0, tp + to[k], <size_t>tl[k]) if tl[k] else 0) + 35
                    distinct += 1
                out[k] = prev
                prefix = pre[prev]
                # TAGS, UNIQ_KEY and KEYS (as property_spans_many).
                vo[0] = vo[1] = vo[2] = -1
                vl[0] = vl[1] = vl[2] = 0
                n = pl[k]
                q = p + po[k]
                i = 0
                while i < n:
                    hit = <const unsigned char *>memchr(q + i, 2, <size_t>(n - i))
                    e = (hit - q) if hit != NULL else n
                    hit = <const unsigned char *>memchr(q + i, 1, <size_t>(e - i))
                    if hit != NULL:
                        sep = hit - q
                        if sep > i and sep < e - 1:
                            for j in range(3):
                                if sep - i == nlen[j] and memcmp(q + i, names[j], <size_t>nlen[j]) == 0:
                                    vo[j] = sep + 1
                                    vl[j] = e - sep - 1
                                    break
                    i = e + 1
                tc[k] = <int64_t>(<int32_t>mq_java_hash_utf8(q + vo[0], <size_t>vl[0])) if vl[0] else 0
                if k < index_from or (sf[k] & 0xC) == 0xC:
                    continue
                # The index items (as index_key_hashes): UNIQ_KEY, then each KEYS segment.
                if vl[1] > 0:
                    hs[at] = _index_hash(mq_java_hash_utf8_from(prefix, q + vo[1], <size_t>vl[1]))
                    rs[at] = k
                    at += 1
                if vo[2] >= 0:
                    i = vo[2]
                    n = vo[2] + vl[2]
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
    finally:
        free(pre_heap)
    return ids, firsts_arr[:distinct], tags, hashes[:at], rows[:at]
