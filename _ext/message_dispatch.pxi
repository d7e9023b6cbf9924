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


ctypedef struct _KeyCols:
    # The columns dispatch reads of a batch of records: properties in ``props``, topics in
    # ``topics`` (the same buffer when the records are read in place).
    const unsigned char *props
    const unsigned char *topics
    const int64_t *po
    const int32_t *pl
    const int64_t *to
    const int32_t *tl
    const int32_t *sf
    Py_ssize_t count
    Py_ssize_t index_from


cdef int64_t _hash_cap(const _KeyCols *kc) noexcept nogil:
    """Room for the index keys of the records from ``index_from``: at most one UNIQ_KEY and
    (len + 1) / 2 KEYS segments a record."""
    cdef int64_t cap = 0
    cdef Py_ssize_t k
    for k in range(kc.index_from, kc.count):
        cap += 1 + (kc.pl[k] + 1) // 2
    return cap


cdef Py_ssize_t _keys_pass(const _KeyCols *kc, int32_t *out, int64_t *firsts, int64_t *tc, int32_t *hs,
                           int64_t *rs, Py_ssize_t *distinct_out) noexcept nogil:
    """``dispatch_keys``' pass: topic numbers into ``out`` (first rows into ``firsts``), tagsCodes
    into ``tc``, index key hashes and their rows into ``hs``/``rs`` (room for ``_hash_cap``).
    Returns how many hashes, or -1 when memory ran out."""
    cdef const unsigned char *p = kc.props
    cdef const unsigned char *tp = kc.topics
    cdef const int64_t *po = kc.po
    cdef const int32_t *pl = kc.pl
    cdef const int64_t *to = kc.to
    cdef const int32_t *tl = kc.tl
    cdef Py_ssize_t count = kc.count, index_from = kc.index_from, k, j
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
                    return -1
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
        if k < index_from or (kc.sf[k] & 0xC) == 0xC:
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
    free(pre_heap)
    distinct_out[0] = distinct
    return at


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
    cdef Py_ssize_t size = b.shape[0], tsize = tb.shape[0]
    po_arr, pl_arr = _offsets_lengths(props_off, props_len, size, "dispatch_keys")
    to_arr, tl_arr = _offsets_lengths(topic_off, topic_len, tsize, "dispatch_keys")
    cdef Py_ssize_t count = po_arr.shape[0]
    if to_arr.shape[0] != count:
        raise ValueError("dispatch_keys: columns of different lengths")
    if count and (int(pl_arr.max()) > 0x7FFFFFFF or int(tl_arr.max()) > 0x7FFFFFFF):
        raise ValueError("dispatch_keys: a length over 2^31 - 1")
    po = po_arr
    to = to_arr
    pl = pl_arr.astype(np.int32)
    tl = tl_arr.astype(np.int32)
    sf = np.ascontiguousarray(_col(sys_flag, count, np.int32, "sys_flag"))
    if index_from < 0:
        index_from = 0
    ids = np.empty(count, dtype=np.int32)
    firsts_arr = np.empty(max(count, 1), dtype=np.int64)
    tags = np.empty(count, dtype=np.int64)
    cdef _KeyCols kc
    kc.props = &b[0] if size else NULL
    kc.topics = &tb[0] if tsize else NULL
    kc.po = <const int64_t *>_ptr(po)
    kc.pl = <const int32_t *>_ptr(pl)
    kc.to = <const int64_t *>_ptr(to)
    kc.tl = <const int32_t *>_ptr(tl)
    kc.sf = <const int32_t *>_ptr(sf)
    kc.count = count
    kc.index_from = index_from
    # At most one UNIQ_KEY and (len + 1) / 2 KEYS segments a record: sized from the lengths,
    # trimmed at the end.
    cdef int64_t cap = _hash_cap(&kc)
    hashes = np.empty(cap, dtype=np.int32)
    rows = np.empty(cap, dtype=np.int64)
    cdef Py_ssize_t distinct = 0, at
    cdef int32_t *ids_p = <int32_t *>_ptr(ids)
    cdef int64_t *firsts_p = <int64_t *>_ptr(firsts_arr)
    cdef int64_t *tags_p = <int64_t *>_ptr(tags)
    cdef int32_t *hs_p = <int32_t *>_ptr(hashes)
    cdef int64_t *rs_p = <int64_t *>_ptr(rows)
    with nogil:
        at = _keys_pass(&kc, ids_p, firsts_p, tags_p, hs_p, rs_p, &distinct)
    if at < 0:
        raise MemoryError()
    return ids, firsts_arr[:distinct], tags, hashes[:at], rows[:at]


cdef inline void _index_item(unsigned char *p, int32_t hash_slot_num, int64_t items_at, int32_t key, int64_t phys,
                             int32_t diff, int32_t *count, int32_t *slots) noexcept nogil:
    """One IndexFile.putKey item, as ``index_put_many`` writes it: at ``count``, chained to its
    slot's previous item; the slot takes ``count``, which moves on."""
    cdef unsigned char *slot = p + MQ_INDEX_HEADER + <int64_t>(key % hash_slot_num) * MQ_INDEX_SLOT
    cdef int32_t prev = <int32_t>dl_get32(slot)
    if prev <= 0 or prev > count[0]:
        prev = 0
        slots[0] += 1
    cdef unsigned char *item = p + items_at + <int64_t>count[0] * MQ_INDEX_ITEM
    dl_put32(item, <uint32_t>key)
    dl_put64(item + 4, <uint64_t>phys)
    dl_put32(item + 12, <uint32_t>diff)
    dl_put32(item + 16, <uint32_t>prev)
    dl_put32(slot, <uint32_t>count[0])
    count[0] += 1


cdef Py_ssize_t _index_put_rows(unsigned char *p, int32_t hash_slot_num, int32_t index_num, int64_t begin_ts,
                                const int32_t *keys, const int64_t *rows, Py_ssize_t n, const int64_t *phys,
                                const int64_t *ts) noexcept nogil:
    """``index_put_many`` of items ``keys[i]`` for records ``rows[i]`` (their physical offsets and
    store times in ``phys``/``ts``), with IndexFile.putKey's timeDiff against ``begin_ts`` (the
    header's beginTimestamp; a fresh file's first item moves it to its own time for the rest).
    Returns how many fitted; the header's counts follow."""
    cdef int32_t count = <int32_t>dl_get32(p + 36), slots = <int32_t>dl_get32(p + 32), diff
    cdef int64_t items_at = MQ_INDEX_HEADER + <int64_t>hash_slot_num * MQ_INDEX_SLOT, begin, d
    if count <= 0:
        count = 1  # IndexHeader.load
    cdef bint fresh = count <= 1
    cdef Py_ssize_t put = 0, i
    for i in range(n):
        if count >= index_num:
            break
        begin = ts[rows[0]] if fresh and i > 0 else begin_ts
        d = ts[rows[i]] - begin
        d = 0 if d < 0 else d // 1000
        if d > 0x7FFFFFFF:
            d = 0x7FFFFFFF
        diff = 0 if begin <= 0 else <int32_t>d
        _index_item(p, hash_slot_num, items_at, keys[i], phys[rows[i]], diff, &count, &slots)
        put += 1
    if put:
        dl_put32(p + 32, <uint32_t>slots)
        dl_put32(p + 36, <uint32_t>count)
    return put


cdef void _round_keys(_Cols *c, _KeyCols *kc, Py_ssize_t count, int64_t index_floor, unsigned char *ip,
                      int32_t hash_slot_num, int32_t index_num, int64_t index_begin_ts, int32_t *ids,
                      int64_t *firsts, int64_t *tags, unsigned char *up, int32_t **hs, int64_t **rs,
                      Py_ssize_t *at, Py_ssize_t *distinct, Py_ssize_t *put, bint *uniform,
                      bint *oom) noexcept nogil:
    """``dispatch_round`` past its scan of ``count`` records into ``c``: the keys pass, the index
    puts and the units (see there). ``hs``/``rs`` are malloc'd here, for the caller to free."""
    cdef Py_ssize_t k = count
    cdef int32_t tran
    kc.po = c.props_off
    kc.pl = c.props_len
    kc.to = c.topic_off
    kc.tl = c.topic_len
    kc.sf = c.sys_flag
    kc.count = count
    # The index keys of the records from the first at or past index_floor (offsets grow).
    while k > 0 and c.phys_offset[k - 1] >= index_floor:
        k -= 1
    kc.index_from = k
    cdef int64_t hcap = _hash_cap(kc)
    if hcap:
        hs[0] = <int32_t *>malloc(hcap * sizeof(int32_t))
        rs[0] = <int64_t *>malloc(hcap * sizeof(int64_t))
        if hs[0] == NULL or rs[0] == NULL:
            oom[0] = True
            return
    at[0] = _keys_pass(kc, ids, firsts, tags, hs[0], rs[0], distinct)
    if at[0] < 0:
        oom[0] = True
        return
    if ip != NULL and at[0]:
        put[0] = _index_put_rows(ip, hash_slot_num, index_num, index_begin_ts, hs[0], rs[0], at[0],
                                 c.phys_offset, c.store_ts)
    # One queue's run: one topic and queue, no PREPARED/ROLLBACK, queue offsets one apart.
    uniform[0] = count > 0 and distinct[0] == 1
    for k in range(count):
        if not uniform[0]:
            break
        tran = c.sys_flag[k] & 0xC
        uniform[0] = ((tran == 0 or tran == 8) and c.queue_id[k] == c.queue_id[0]
                      and c.queue_offset[k] == c.queue_offset[0] + k)
    if uniform[0]:
        for k in range(count):
            dl_put64(up + k * MQ_CQ_UNIT, <uint64_t>c.phys_offset[k])
            dl_put32(up + k * MQ_CQ_UNIT + 8, <uint32_t>c.size[k])
            dl_put64(up + k * MQ_CQ_UNIT + 12, <uint64_t>tags[k])


def dispatch_round(buf, int64_t base, Py_ssize_t start, Py_ssize_t end, bint dledger, Py_ssize_t max_records,
                   int64_t index_floor, index_buf=None, int32_t hash_slot_num=0, int32_t index_num=0,
                   int64_t index_begin_ts=0, cq_buf=None, Py_ssize_t cq_pos=0, Py_ssize_t cq_room=0,
                   bytes cq_topic=None, int32_t cq_queue_id=-1, int64_t cq_next=-1, int64_t cq_max_phys=-1,
                   Py_ssize_t cq_prefault_start=0, Py_ssize_t cq_prefault_end=0):
    """One dispatch round over ``buf[start:end]`` in one pass without the GIL: the scan
    (``scan_records``, or ``scan_dledger_records`` with ``dledger``), ``dispatch_keys`` of what it
    found with the index keys of the records whose physical offset is ``index_floor`` or more,
    those keys put into the index file ``index_buf`` (when given; ``index_put_many`` with putKey's
    timeDiff against ``index_begin_ts``) until it fills, and the consume-queue units of the
    records when they are one queue's run. A dispatch thread that waits for the GIL once per
    kernel call gets it once per round this way, rather than once per step.

    Returns ``(columns, stop, code, topic_id, firsts, tags_code, hashes, rows, units, put)``:
    the scan's three, ``dispatch_keys``' five, ``units`` (``consume_queue_units`` of every
    record, a uint8 array) when the records share one topic and queue id, none is PREPARED or
    ROLLBACK and their queue offsets run on by one, else None, and ``put``, how many of
    ``hashes`` went into the index file (the rest did not fit).

    With ``cq_buf`` (a consume-queue file's mapping) the units of such a run of topic
    ``cq_topic``, queue ``cq_queue_id`` that continues the queue exactly (its first queue offset
    ``cq_next``, its first message ending past ``cq_max_phys``) and fits the ``cq_room`` bytes
    there are also written at ``cq_pos`` (so the page faults of the write happen without the
    GIL); ``units`` is then an empty array (its length says nothing was left to write). The
    pages of ``cq_buf[cq_prefault_start:cq_prefault_end]`` are then faulted in, writable
    (``prefault``), for the next rounds' writes."""
    cdef const unsigned char[::1] b = _ro(buf)
    cdef Py_ssize_t n = b.shape[0]
    if end < 0 or end > n:
        end = n
    if start < 0 or start > end:
        raise ValueError(f"start {start} outside buffer of {end} bytes")
    cdef unsigned char[::1] cb
    cdef unsigned char *cqp = NULL
    cdef unsigned char *cq_base = NULL
    cdef size_t page = <size_t>sysconf(_SC_PAGESIZE), lo, hi
    cdef Py_ssize_t cq_tl = 0
    cdef const unsigned char *cq_tp = NULL
    if cq_buf is not None:
        cb = memoryview(cq_buf).cast("B")
        if cq_pos < 0 or cq_room < 0 or cq_pos + cq_room > cb.shape[0]:
            raise ValueError(f"consume-queue range {cq_pos}+{cq_room} outside its {cb.shape[0]} bytes")
        if cq_topic is None:
            raise ValueError("cq_buf without cq_topic")
        if cq_prefault_start < 0 or cq_prefault_end > cb.shape[0]:
            raise ValueError(f"prefault range {cq_prefault_start}..{cq_prefault_end} outside {cb.shape[0]} bytes")
        cqp = &cb[0] + cq_pos
        cq_base = &cb[0]
        cq_tl = len(cq_topic)
        cq_tp = <const unsigned char *>PyBytes_AS_STRING(cq_topic)
    cdef bint in_cq = False
    cdef unsigned char[::1] ib
    cdef unsigned char *ip = NULL
    if index_buf is not None:
        ib = memoryview(index_buf).cast("B")
        _index_size(hash_slot_num, index_num, ib.shape[0])
        ip = &ib[0]
    cdef const unsigned char *p = &b[0] if n else NULL
    cdef int64_t head = DL_BODY_OFFSET if dledger else 0
    cdef int64_t smallest = head + MQ_MIN_RECORD
    # Arrays sized as _scan sizes them (from the first record), grown when that was short.
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
    cdef _KeyCols kc
    cdef Py_ssize_t off = start, count = 0, distinct = 0, at = 0, put = 0
    cdef int code = C_END
    cdef bint full, uniform = False, oom = False
    cdef const unsigned char *q
    cdef int32_t *hs = NULL
    cdef int64_t *rs = NULL
    # What the keys pass fills, sized as the columns (and grown with them).
    ids = np.empty(cap, dtype=np.int32)
    firsts_arr = np.empty(max(cap, 1), dtype=np.int64)
    tags = np.empty(cap, dtype=np.int64)
    units = np.empty(cap * MQ_CQ_UNIT, dtype=np.uint8)
    kc.props = p
    kc.topics = p
    cdef int32_t *ids_p
    cdef int64_t *firsts_p
    cdef int64_t *tags_p
    cdef unsigned char *units_p
    while True:
        _bind(cols, &c)
        ids_p = <int32_t *>_ptr(ids)
        firsts_p = <int64_t *>_ptr(firsts_arr)
        tags_p = <int64_t *>_ptr(tags)
        units_p = <unsigned char *>_ptr(units)
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
                    code = _parse_entry(q, off, end - off, base, False, &r)
                    if code != C_OK:
                        break
                    _store(&c, count, &r, off + DL_BODY_OFFSET, base + off + DL_BODY_OFFSET)
                    c.entry_index[count] = <int64_t>dl_get64(q + 8)
                    off += DL_BODY_OFFSET + r.size
                else:
                    code = _parse_record(q, end - off, False, &r)
                    if code != C_OK:
                        break
                    _store(&c, count, &r, off, base + off)
                    off += r.size
                count += 1
            if not full:
                _round_keys(&c, &kc, count, index_floor, ip, hash_slot_num, index_num, index_begin_ts,
                            ids_p, firsts_p, tags_p, units_p, &hs, &rs, &at, &distinct, &put, &uniform, &oom)
                # The run continues the queue the caller named: its units go into that file.
                if (uniform and cqp != NULL and count * MQ_CQ_UNIT <= cq_room and c.queue_id[0] == cq_queue_id
                        and c.queue_offset[0] == cq_next and c.phys_offset[0] + c.size[0] > cq_max_phys
                        and c.topic_len[0] == cq_tl and memcmp(p + c.topic_off[0], cq_tp, <size_t>cq_tl) == 0):
                    memcpy(cqp, units_p, count * MQ_CQ_UNIT)
                    in_cq = True
            if not full and cq_base != NULL and cq_prefault_end > cq_prefault_start:
                lo = <size_t>cq_base + <size_t>cq_prefault_start
                lo -= lo % page
                hi = <size_t>cq_base + <size_t>cq_prefault_end
                madvise(<void *>lo, hi - lo, _MADV_POPULATE_WRITE)
        if not full:
            break
        cap = min(cap * 2, upper)
        grown = _alloc(types, cap)
        for name in cols:
            grown[name][:count] = cols[name][:count]
        cols = grown
        ids = np.empty(cap, dtype=np.int32)
        firsts_arr = np.empty(cap, dtype=np.int64)
        tags = np.empty(cap, dtype=np.int64)
        units = np.empty(cap * MQ_CQ_UNIT, dtype=np.uint8)
    try:
        if oom:
            raise MemoryError()
        hashes = np.empty(at, dtype=np.int32)
        rows = np.empty(at, dtype=np.int64)
        if at:
            memcpy(_ptr(hashes), hs, at * sizeof(int32_t))
            memcpy(_ptr(rows), rs, at * sizeof(int64_t))
    finally:
        free(hs)
        free(rs)
    if count < cap:
        cols = {name: a[:count] for name, a in cols.items()}
    return (cols, off, code, ids[:count], firsts_arr[:distinct], tags[:count], hashes, rows,
            (units[:0] if in_cq else units[:count * MQ_CQ_UNIT]) if uniform else None, put)
