# Included at the end of message.pyx: the dispatch path's kernels (ReputMessageService).

cdef extern from "<sys/mman.h>" nogil:
    int madvise(void *addr, size_t length, int advice)
    int MADV_WILLNEED

from libc.stdlib cimport realloc

cdef extern from "mq_format.h" nogil:
    int mq_same(const unsigned char *a, const unsigned char *b, size_t n)
    void mq_dispatch_props(const unsigned char *q, size_t n, int64_t *vo, int64_t *vl)

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

cdef extern from "dl_zero_fill.h" nogil:
    int dl_zero_fill_fd(int fd, int64_t start, int64_t end, int64_t *done)
    int dl_zero_fill_path(const char *path, int64_t start, int64_t end)


def zero_fill(int fd, int64_t start, int64_t end):
    """Zeros over ``[start, end)`` of ``fd``'s file by pwrite, without the GIL: the page cache
    of a range nothing has been written to yet, made for writes through a mapping (see
    dl_zero_fill.h; the caller keeps every writer of the range out). Returns 0 or an errno."""
    if start < 0 or end < start:
        raise ValueError(f"bad range {start}..{end}")
    cdef int err
    with nogil:
        err = dl_zero_fill_fd(fd, start, end, NULL)
    return err


def copy_into(dst, Py_ssize_t pos, src):
    """``dst[pos:pos + len(src)] = src`` without the GIL. ``dst`` is a file mapping (a consume
    queue's): the copy can take a page fault per page, and the other threads need not wait
    for them (the leader's event loop wants the GIL while dispatch writes its units)."""
    cdef unsigned char[::1] d = dst
    cdef const unsigned char[::1] s = _ro(src)
    cdef Py_ssize_t n = s.shape[0]
    if pos < 0 or pos > d.shape[0] - n:
        raise ValueError(f"{n} bytes at {pos} do not fit {d.shape[0]}")
    if n:
        with nogil:
            memcpy(&d[pos], &s[0], <size_t>n)


def copy_runs(src, list runs):
    """``dst[pos:pos + n] = src[at:at + n]`` for each ``(dst, pos, at, n)`` of ``runs``, in one
    release of the GIL: a dispatch round's consume-queue runs, one per queue, each into its
    queue's file mapping (see ``copy_into``). Every range is checked before anything is copied."""
    cdef const unsigned char[::1] s = _ro(src)
    cdef Py_ssize_t k = 0, count = len(runs), pos, at, n
    cdef unsigned char[::1] d
    if count == 0:
        return
    held = []
    cdef unsigned char **dsts = <unsigned char **>malloc(count * sizeof(unsigned char *))
    cdef const unsigned char **srcs = <const unsigned char **>malloc(count * sizeof(unsigned char *))
    cdef size_t *lens = <size_t *>malloc(count * sizeof(size_t))
    try:
        if dsts == NULL or srcs == NULL or lens == NULL:
            raise MemoryError()
        for k in range(count):
            dst, pos, at, n = runs[k]
            d = dst
            if n < 0 or pos < 0 or pos > d.shape[0] - n:
                raise ValueError(f"{n} bytes at {pos} do not fit {d.shape[0]}")
            if at < 0 or at > s.shape[0] - n:
                raise ValueError(f"{n} bytes from {at} are not in the {s.shape[0]} given")
            held.append(d)
            dsts[k] = &d[0] + pos if d.shape[0] else NULL
            srcs[k] = &s[0] + at if s.shape[0] else NULL
            lens[k] = <size_t>n
        with nogil:
            for k in range(count):
                if lens[k]:
                    memcpy(dsts[k], srcs[k], lens[k])
    finally:
        free(dsts)
        free(srcs)
        free(lens)


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


ctypedef struct _KeyState:
    # What the keys pass carries from one record to the next: where its results go (topic
    # numbers ``out``, first rows ``firsts``, tagsCodes ``tc``, index key hashes and their rows
    # ``hs``/``rs`` with room for ``hcap``; ``grow``: moved to larger ones when short, ``owned``:
    # malloc'd by the pass (else the caller's)), how many
    # hashes and topics so far, the last record's topic number and the hash of each topic's
    # "topic#" (``pre``: ``prefixes`` up to 256 topics, then a heap array of ``pre_cap``).
    int32_t *out
    int64_t *firsts
    int64_t *tc
    int32_t *hs
    int64_t *rs
    Py_ssize_t hcap
    bint grow
    bint owned
    Py_ssize_t at
    Py_ssize_t distinct
    int32_t prev
    uint32_t *pre
    uint32_t *pre_heap
    Py_ssize_t pre_cap
    uint32_t prefixes[256]
    # The last record's TAGS value and its hash: a run of records has the same tags.
    const unsigned char *tag
    int64_t tag_len
    int32_t tag_hash


cdef inline void _key_state_init(_KeyState *st) noexcept nogil:
    st.hs = NULL
    st.rs = NULL
    st.hcap = 0
    st.grow = False
    st.owned = False
    st.at = 0
    st.distinct = 0
    st.prev = -1
    st.pre = st.prefixes
    st.pre_heap = NULL
    st.pre_cap = 256
    st.tag = NULL
    st.tag_len = 0
    st.tag_hash = 0


cdef int64_t _hash_cap(const _KeyCols *kc) noexcept nogil:
    """Room for the index keys of the records from ``index_from``: at most one UNIQ_KEY and
    (len + 1) / 2 KEYS segments a record."""
    cdef int64_t cap = 0
    cdef Py_ssize_t k
    for k in range(kc.index_from, kc.count):
        cap += 1 + (kc.pl[k] + 1) // 2
    return cap


cdef inline bint _hash_room(_KeyState *st, int64_t need) noexcept nogil:
    """Room for ``need`` more hashes in a growing ``hs``/``rs`` (False when memory ran out)."""
    if st.at + need <= st.hcap:
        return True
    cdef Py_ssize_t cap = st.hcap * 2 if st.hcap * 2 >= st.at + need else st.at + need
    cdef int32_t *hs
    cdef int64_t *rs
    if not st.owned:
        # The caller's arrays: what they hold moves to malloc'd ones.
        hs = <int32_t *>malloc(cap * sizeof(int32_t))
        rs = <int64_t *>malloc(cap * sizeof(int64_t))
        if hs == NULL or rs == NULL:
            free(hs)
            free(rs)
            return False
        if st.at:
            memcpy(hs, st.hs, st.at * sizeof(int32_t))
            memcpy(rs, st.rs, st.at * sizeof(int64_t))
        st.hs = hs
        st.rs = rs
        st.owned = True
        st.hcap = cap
        return True
    hs = <int32_t *>realloc(st.hs, cap * sizeof(int32_t))
    if hs == NULL:
        return False
    st.hs = hs
    rs = <int64_t *>realloc(st.rs, cap * sizeof(int64_t))
    if rs == NULL:
        return False
    st.rs = rs
    st.hcap = cap
    return True


cdef int _key_one(_KeyState *st, const _KeyCols *kc, Py_ssize_t k, bint indexed) noexcept nogil:
    """The keys pass over record ``k`` (``dispatch_keys``): its topic number (as topic_ids),
    tagsCode and, when ``indexed`` and not ROLLBACK, its index key hashes. -1 when memory ran
    out. Run record by record right after the scan read it (the bytes still in the cache)."""
    cdef const unsigned char *tp = kc.topics
    cdef const int64_t *to = kc.to
    cdef const int32_t *tl = kc.tl
    cdef Py_ssize_t f, j
    cdef int32_t prev = st.prev
    cdef uint32_t prefix
    cdef uint32_t *grown
    cdef const unsigned char *q
    cdef int64_t i, n, start
    cdef int64_t vo[3]
    cdef int64_t vl[3]
    # The topic's number (as topic_ids) and the hash of its "topic#".
    if prev >= 0:
        f = st.firsts[prev]
        if not (tl[f] == tl[k] and mq_same(tp + to[f], tp + to[k], <size_t>tl[k])):
            prev = -1
    if prev < 0:
        for j in range(st.distinct):
            f = st.firsts[j]
            if tl[f] == tl[k] and mq_same(tp + to[f], tp + to[k], <size_t>tl[k]):
                prev = <int32_t>j
                break
    if prev < 0:
        prev = <int32_t>st.distinct
        if st.distinct == st.pre_cap:
            grown = <uint32_t *>realloc(st.pre_heap, 2 * st.pre_cap * sizeof(uint32_t))
            if grown == NULL:
                return -1
            if st.pre_heap == NULL:
                memcpy(grown, st.prefixes, 256 * sizeof(uint32_t))
            st.pre_heap = st.pre = grown
            st.pre_cap *= 2
        st.firsts[st.distinct] = k
        st.pre[st.distinct] = 31 * (mq_java_hash_utf8_from(0, tp + to[k], <size_t>tl[k]) if tl[k] else 0) + 35
        st.distinct += 1
    st.prev = prev
    st.out[k] = prev
    prefix = st.pre[prev]
    # TAGS, UNIQ_KEY and KEYS (as property_spans_many).
    q = kc.props + kc.po[k]
    mq_dispatch_props(q, <size_t>kc.pl[k], vo, vl)
    if vl[0] == 0:
        st.tc[k] = 0
    else:
        if not (vl[0] == st.tag_len and mq_same(q + vo[0], st.tag, <size_t>vl[0])):
            st.tag = q + vo[0]
            st.tag_len = vl[0]
            st.tag_hash = <int32_t>mq_java_hash_utf8(st.tag, <size_t>vl[0])
        st.tc[k] = st.tag_hash
    if not indexed or (kc.sf[k] & 0xC) == 0xC:
        return 0
    if st.grow and not _hash_room(st, 1 + (kc.pl[k] + 1) // 2):
        return -1
    # The index items (as index_key_hashes): UNIQ_KEY, then each KEYS segment.
    if vl[1] > 0:
        st.hs[st.at] = _index_hash(mq_java_hash_utf8_from(prefix, q + vo[1], <size_t>vl[1]))
        st.rs[st.at] = k
        st.at += 1
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
                st.hs[st.at] = _index_hash(mq_java_hash_utf8_from(prefix, q + start, <size_t>(i - start)))
                st.rs[st.at] = k
                st.at += 1
    return 0


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
    cdef _KeyState st
    _key_state_init(&st)
    st.out = <int32_t *>_ptr(ids)
    st.firsts = <int64_t *>_ptr(firsts_arr)
    st.tc = <int64_t *>_ptr(tags)
    st.hs = <int32_t *>_ptr(hashes)
    st.rs = <int64_t *>_ptr(rows)
    st.hcap = cap
    cdef int rc = 0
    cdef Py_ssize_t k
    with nogil:
        for k in range(count):
            rc = _key_one(&st, &kc, k, k >= index_from)
            if rc < 0:
                break
        free(st.pre_heap)
    if rc < 0:
        raise MemoryError()
    return ids, firsts_arr[:st.distinct], tags, hashes[:st.at], rows[:st.at]


cdef inline void _index_item(unsigned char *p, unsigned char *slot, int64_t items_at, int32_t key, int64_t phys,
                             int32_t diff, int32_t *count, int32_t *slots) noexcept nogil:
    """One IndexFile.putKey item, as ``index_put_many`` writes it: at ``count``, chained to the
    previous item of its ``slot``; the slot takes ``count``, which moves on."""
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
    cdef unsigned char *table = p + MQ_INDEX_HEADER
    cdef unsigned char *slot
    if count <= 0:
        count = 1  # IndexHeader.load
    cdef bint fresh = count <= 1
    cdef Py_ssize_t put = 0, i
    # (Fetching the slots of the items 8 ahead made no difference measured: 57-59 ns a message
    # either way, the 20 MB table being mostly in L3.)
    for i in range(n):
        if count >= index_num:
            break
        slot = table + <int64_t>(keys[i] % hash_slot_num) * MQ_INDEX_SLOT
        begin = ts[rows[0]] if fresh and i > 0 else begin_ts
        d = ts[rows[i]] - begin
        d = 0 if d < 0 else d // 1000
        if d > 0x7FFFFFFF:
            d = 0x7FFFFFFF
        diff = 0 if begin <= 0 else <int32_t>d
        _index_item(p, slot, items_at, keys[i], phys[rows[i]], diff, &count, &slots)
        put += 1
    if put:
        dl_put32(p + 32, <uint32_t>slots)
        dl_put32(p + 36, <uint32_t>count)
    return put


cdef void _round_rest(_Cols *c, const _KeyState *st, Py_ssize_t count, unsigned char *ip, int32_t hash_slot_num,
                      int32_t index_num, int64_t index_begin_ts, unsigned char *up, Py_ssize_t *put,
                      bint *uniform) noexcept nogil:
    """``dispatch_round`` past its scan and keys pass of ``count`` records into ``c``/``st``: the
    index puts and the units (see there)."""
    cdef Py_ssize_t k
    cdef int32_t tran
    if ip != NULL and st.at:
        put[0] = _index_put_rows(ip, hash_slot_num, index_num, index_begin_ts, st.hs, st.rs, st.at,
                                 c.phys_offset, c.store_ts)
    # One queue's run: one topic and queue, no PREPARED/ROLLBACK, queue offsets one apart.
    uniform[0] = count > 0 and st.distinct == 1
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
            dl_put64(up + k * MQ_CQ_UNIT + 12, <uint64_t>st.tc[k])


# How far ahead of the record it parses the scan has the log's lines fetched: the hardware's
# prefetch stops at each 4 KB page, and a batch's records come from memory (a few records of
# 1 KB; 6-9 ns a 100-byte message less than without).
cdef enum:
    _RECORDS_AHEAD = 2048


cdef void _zero_range(object path, Py_ssize_t start, Py_ssize_t end, size_t page, list held, const char **zp,
                      int64_t *zlo, int64_t *zhi) except *:
    """The part of a prefault range to zero-fill first: its whole pages from ``start`` (the
    page holding ``start`` may hold what was written below it) to ``end``, in the file at
    ``path`` (bytes, kept alive in ``held``); none without a path."""
    zp[0] = NULL
    zlo[0] = (<int64_t>start + <int64_t>page - 1) // <int64_t>page * <int64_t>page
    zhi[0] = end
    if path is None or zlo[0] >= zhi[0]:
        return
    if not isinstance(path, bytes):
        raise TypeError(f"prefault path must be bytes, not {type(path).__name__}")
    held.append(path)
    zp[0] = PyBytes_AS_STRING(path)


def dispatch_round(buf, int64_t base, Py_ssize_t start, Py_ssize_t end, bint dledger, Py_ssize_t max_records,
                   int64_t index_floor, index_buf=None, int32_t hash_slot_num=0, int32_t index_num=0,
                   int64_t index_begin_ts=0, cq_buf=None, Py_ssize_t cq_pos=0, Py_ssize_t cq_room=0,
                   bytes cq_topic=None, int32_t cq_queue_id=-1, int64_t cq_next=-1, int64_t cq_max_phys=-1,
                   Py_ssize_t cq_prefault_start=0, Py_ssize_t cq_prefault_end=0, prefault=(), dict arena=None,
                   bytes cq_path=None, int32_t index_limit=-1):
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
    ``hashes`` went into the index file (the rest did not fit: past ``index_num`` items, or
    past ``index_limit`` when given, the items the caller reserved blocks for).

    With ``cq_buf`` (a consume-queue file's mapping) the units of such a run of topic
    ``cq_topic``, queue ``cq_queue_id`` that continues the queue exactly (its first queue offset
    ``cq_next``, its first message ending past ``cq_max_phys``) and fits the ``cq_room`` bytes
    there are also written at ``cq_pos`` (so the page faults of the write happen without the
    GIL); ``units`` is then an empty array (its length says nothing was left to write). The
    pages of ``cq_buf[cq_prefault_start:cq_prefault_end]`` are faulted in first, writable
    (``prefault``), for this and the next rounds' writes, and so are those of each ``(mapping,
    start, end)`` in ``prefault`` (other queues' files and the index file, for the next rounds;
    the first 16). With the file's path (``cq_path``, or a fourth item ``path``) the range's
    whole pages are first written with zeros (``zero_fill``): the caller promises that nothing
    was written at or past its start and that no other thread writes the file meanwhile (this
    call writes its units and items after the prefaults).

    With ``arena`` (a dict, empty at first) the arrays of one call are kept there for the next
    calls to fill again, when large enough: what this call returns is then valid until the next
    call with the same arena. (A round's 2 MB of fresh arrays, freed at its end, had glibc give
    the heap back and fault it in again each round.)"""
    cdef const unsigned char[::1] b = _ro(buf)
    cdef Py_ssize_t n = b.shape[0]
    if end < 0 or end > n:
        end = n
    if start < 0 or start > end:
        raise ValueError(f"start {start} outside buffer of {end} bytes")
    cdef unsigned char[::1] cb
    cdef unsigned char *cqp = NULL
    cdef unsigned char *cq_base = NULL
    cdef size_t page = <size_t>sysconf(_SC_PAGESIZE)
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
    # The ranges of ``prefault``: their mappings held (exported) until the call returns.
    cdef unsigned char[::1] pv
    held = []
    cdef Py_ssize_t npf = 0, ipf, pf_start, pf_end
    # A range's mapped pages (page-aligned start), and the file range zero-filled first
    # (zf_path NULL: none). The last slot is the hinted queue's range.
    cdef size_t[17] pf_lo
    cdef size_t[17] pf_hi
    cdef int64_t[17] zf_lo
    cdef int64_t[17] zf_hi
    cdef const char *zf_path[17]
    for item in prefault:
        if npf == 16:
            break
        if len(item) == 4:
            pf_buf, pf_start, pf_end, pf_path = item
        else:
            pf_buf, pf_start, pf_end = item
            pf_path = None
        pv = memoryview(pf_buf).cast("B")
        if pf_start < 0 or pf_end > pv.shape[0] or pf_start >= pf_end:
            raise ValueError(f"prefault range {pf_start}..{pf_end} outside {pv.shape[0]} bytes")
        held.append(pv)
        pf_lo[npf] = <size_t>&pv[0] + <size_t>pf_start
        pf_lo[npf] -= pf_lo[npf] % page
        pf_hi[npf] = <size_t>&pv[0] + <size_t>pf_end
        _zero_range(pf_path, pf_start, pf_end, page, held, &zf_path[npf], &zf_lo[npf], &zf_hi[npf])
        npf += 1
    if cq_base != NULL and cq_prefault_end > cq_prefault_start:
        pf_lo[npf] = <size_t>cq_base + <size_t>cq_prefault_start
        pf_lo[npf] -= pf_lo[npf] % page
        pf_hi[npf] = <size_t>cq_base + <size_t>cq_prefault_end
        _zero_range(cq_path, cq_prefault_start, cq_prefault_end, page, held, &zf_path[npf], &zf_lo[npf],
                    &zf_hi[npf])
        npf += 1
    cdef unsigned char[::1] ib
    cdef unsigned char *ip = NULL
    if index_buf is not None:
        ib = memoryview(index_buf).cast("B")
        _index_size(hash_slot_num, index_num, ib.shape[0])
        ip = &ib[0]
    # Items go no further than the caller reserved blocks for (a store into a hole on a full
    # disk is a SIGBUS): the rest are left to IndexFile.put_hashes, which reports ENOSPC.
    cdef int32_t index_cap = index_num if index_limit < 0 or index_limit > index_num else index_limit
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
    cdef dict cols
    cdef _Cols c
    cdef _Rec r
    cdef _KeyCols kc
    cdef _KeyState st
    cdef Py_ssize_t off = start, count = 0, put = 0, at
    cdef int code = C_END
    cdef bint full, uniform = False, oom = False
    cdef const unsigned char *q
    # The columns and what the keys pass fills, sized as the columns (and grown with them).
    if arena is not None and arena.get("types") is types and arena.get("cap", -1) >= cap:
        cap = arena["cap"]
        cols = arena["cols"]
        ids = arena["ids"]
        firsts_arr = arena["firsts"]
        tags = arena["tags"]
        units = arena["units"]
    else:
        cols = _alloc(types, cap)
        ids = np.empty(cap, dtype=np.int32)
        firsts_arr = np.empty(max(cap, 1), dtype=np.int64)
        tags = np.empty(cap, dtype=np.int64)
        units = np.empty(cap * MQ_CQ_UNIT, dtype=np.uint8)
    kc.props = p
    kc.topics = p
    # The keys pass runs record by record with the scan, while the record's bytes are in the
    # cache (a pass after the scan of a batch read them back from memory). Its hashes go to
    # arrays that grow with them (the arena's first).
    _key_state_init(&st)
    st.grow = True
    hs_arr = arena.get("hs") if arena is not None else None
    rs_arr = arena.get("rs") if arena is not None else None
    if hs_arr is not None and rs_arr is not None:
        st.hs = <int32_t *>_ptr(hs_arr)
        st.rs = <int64_t *>_ptr(rs_arr)
        st.hcap = min(len(hs_arr), len(rs_arr))
    cdef unsigned char *units_p
    cdef Py_ssize_t pf_at = off
    try:
        while True:
            _bind(cols, &c)
            kc.po = c.props_off
            kc.pl = c.props_len
            kc.to = c.topic_off
            kc.tl = c.topic_len
            kc.sf = c.sys_flag
            st.out = <int32_t *>_ptr(ids)
            st.firsts = <int64_t *>_ptr(firsts_arr)
            st.tc = <int64_t *>_ptr(tags)
            units_p = <unsigned char *>_ptr(units)
            full = False
            with nogil:
                # The prefaults first (once: the columns' growth comes back here), in the same
                # release of the GIL as the rest: each taking back of the GIL waits for the
                # thread that holds it meanwhile (the putting thread, the member's loop).
                for ipf in range(npf):
                    if zf_path[ipf] != NULL:
                        dl_zero_fill_path(zf_path[ipf], zf_lo[ipf], zf_hi[ipf])  # failed: populated below
                    madvise(<void *>pf_lo[ipf], pf_hi[ipf] - pf_lo[ipf], _MADV_POPULATE_WRITE)
                npf = 0
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
                    while pf_at < off + _RECORDS_AHEAD and pf_at < end:
                        dl_prefetch_r(p + pf_at)
                        pf_at += 64
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
                    # Indexed from the first record at or past index_floor (offsets grow).
                    if _key_one(&st, &kc, count, c.phys_offset[count] >= index_floor) < 0:
                        oom = True
                        break
                    count += 1
                if not full and not oom:
                    _round_rest(&c, &st, count, ip, hash_slot_num, index_cap, index_begin_ts, units_p, &put,
                                &uniform)
                    # The run continues the queue the caller named: its units go into that file.
                    if (uniform and cqp != NULL and count * MQ_CQ_UNIT <= cq_room and c.queue_id[0] == cq_queue_id
                            and c.queue_offset[0] == cq_next and c.phys_offset[0] + c.size[0] > cq_max_phys
                            and c.topic_len[0] == cq_tl and memcmp(p + c.topic_off[0], cq_tp, <size_t>cq_tl) == 0):
                        memcpy(cqp, units_p, count * MQ_CQ_UNIT)
                        in_cq = True
            if not full or oom:
                break
            cap = min(cap * 2, upper)
            grown = _alloc(types, cap)
            for name in cols:
                grown[name][:count] = cols[name][:count]
            cols = grown
            # The keys pass's results so far move with the columns.
            ids = np.concatenate((ids[:count], np.empty(cap - count, dtype=np.int32)))
            firsts_arr = np.concatenate((firsts_arr[:st.distinct], np.empty(cap - st.distinct, dtype=np.int64)))
            tags = np.concatenate((tags[:count], np.empty(cap - count, dtype=np.int64)))
            units = np.empty(cap * MQ_CQ_UNIT, dtype=np.uint8)
        if oom:
            raise MemoryError()
        if arena is not None:
            arena.update(types=types, cap=cap, cols=cols, ids=ids, firsts=firsts_arr, tags=tags, units=units)
        at = st.at
        if st.owned or hs_arr is None or rs_arr is None:
            hs_arr = np.empty(st.hcap, dtype=np.int32)
            rs_arr = np.empty(st.hcap, dtype=np.int64)
            if at:
                memcpy(_ptr(hs_arr), st.hs, at * sizeof(int32_t))
                memcpy(_ptr(rs_arr), st.rs, at * sizeof(int64_t))
            if arena is not None:
                arena["hs"] = hs_arr
                arena["rs"] = rs_arr
        hashes = hs_arr[:at]
        rows = rs_arr[:at]
    finally:
        if st.owned:
            free(st.hs)
            free(st.rs)
        free(st.pre_heap)
    if count < cap:
        cols = {name: a[:count] for name, a in cols.items()}
    return (cols, off, code, ids[:count], firsts_arr[:st.distinct], tags[:count], hashes, rows,
            (units[:0] if in_cq else units[:count * MQ_CQ_UNIT]) if uniform else None, put)


ctypedef struct _Runs:
    # queue_runs' groups: an open-addressing table of (topic, queue) keys (``vals`` their group,
    # -1 for an empty slot; at most half full) and 8 values a group in ``info``.
    int64_t *keys
    int32_t *vals
    Py_ssize_t slots
    int64_t *info
    Py_ssize_t g
    Py_ssize_t gcap


cdef inline Py_ssize_t _run_slot(const _Runs *r, int64_t key) noexcept nogil:
    cdef Py_ssize_t h = <Py_ssize_t>((<uint64_t>key * 0x9E3779B97F4A7C15ULL) >> 32) & (r.slots - 1)
    while r.vals[h] >= 0 and r.keys[h] != key:
        h = (h + 1) & (r.slots - 1)
    return h


cdef bint _runs_grow(_Runs *r) noexcept nogil:
    """Room for one more group (False when memory ran out)."""
    cdef int64_t *info
    cdef int64_t *keys
    cdef int32_t *vals
    cdef int64_t *old_keys = r.keys
    cdef int32_t *old_vals = r.vals
    cdef Py_ssize_t old = r.slots, h, at
    if r.g == r.gcap:
        info = <int64_t *>realloc(r.info, 2 * r.gcap * 8 * sizeof(int64_t))
        if info == NULL:
            return False
        r.info = info
        r.gcap *= 2
    if 2 * (r.g + 1) > r.slots:
        keys = <int64_t *>malloc(2 * old * sizeof(int64_t))
        vals = <int32_t *>malloc(2 * old * sizeof(int32_t))
        if keys == NULL or vals == NULL:
            free(keys)
            free(vals)
            return False
        memset(vals, 0xFF, 2 * old * sizeof(int32_t))
        r.keys = keys
        r.vals = vals
        r.slots = 2 * old
        for h in range(old):
            if old_vals[h] >= 0:
                at = _run_slot(r, old_keys[h])
                vals[at] = old_vals[h]
                keys[at] = old_keys[h]
        free(old_keys)
        free(old_vals)
    return True


def queue_runs(topic_id, queue_id, queue_offset, sys_flag, phys_offset, size, tags_code, dict arena=None):
    """The consume-queue runs of a batch's records, for dispatch when they are not one queue's
    run: the records that get a unit (not PREPARED or ROLLBACK) grouped by (topic number, queue
    id), the groups in the order of their first records, a group's records in commit-log order,
    and their units encoded (``consume_queue_units``) group by group.

    Returns ``(runs, order, units)``: ``runs`` an int64 array, a row a group of (topic number,
    queue id, start, count, first queue offset, contiguous, first end, last end): its records
    are ``order[start:start + count]`` and its units ``units[20 * start:20 * (start + count)]``;
    contiguous is 1 when their queue offsets run on by one; the ends are the physical offset +
    size of its first and last record. One C pass over the columns in place of a sort and the
    numpy of each group (a batch of a few queues spent more there than in its kernel call).
    With ``arena`` (as ``dispatch_round``'s) ``order`` and ``units`` are slices of arrays kept
    there for the next call."""
    tid_arr = np.ascontiguousarray(topic_id, dtype=np.int32)
    cdef Py_ssize_t n = tid_arr.shape[0], k, h, gi = -1, m = 0
    cdef const int32_t[::1] tid = tid_arr
    cdef const int32_t[::1] qid = _col(queue_id, n, np.int32, "queue_id")
    cdef const int64_t[::1] qo = _col(queue_offset, n, np.int64, "queue_offset")
    cdef const int32_t[::1] sf = _col(sys_flag, n, np.int32, "sys_flag")
    cdef const int64_t[::1] phys = _col(phys_offset, n, np.int64, "phys_offset")
    cdef const int32_t[::1] sz = _col(size, n, np.int32, "size")
    cdef const int64_t[::1] tc = _col(tags_code, n, np.int64, "tags_code")
    cdef _Runs r
    r.slots = 32
    r.gcap = 16
    r.g = 0
    r.keys = <int64_t *>malloc(r.slots * sizeof(int64_t))
    r.vals = <int32_t *>malloc(r.slots * sizeof(int32_t))
    r.info = <int64_t *>malloc(r.gcap * 8 * sizeof(int64_t))
    cdef int32_t *grp = <int32_t *>malloc((n if n else 1) * sizeof(int32_t))
    cdef int64_t key, last_key = -1, end
    cdef int32_t tran
    cdef int64_t *row
    cdef int64_t *order_p
    cdef int64_t *out_p
    cdef unsigned char *units_p
    cdef bint oom = False
    try:
        if r.keys == NULL or r.vals == NULL or r.info == NULL or grp == NULL:
            raise MemoryError()
        with nogil:
            memset(r.vals, 0xFF, r.slots * sizeof(int32_t))
            for k in range(n):
                tran = sf[k] & 0xC
                if tran != 0 and tran != 8:
                    grp[k] = -1
                    continue
                key = (<int64_t>tid[k] << 32) | <int64_t><uint32_t>qid[k]
                if key != last_key or gi < 0:
                    h = _run_slot(&r, key)
                    if r.vals[h] < 0:
                        if not _runs_grow(&r):
                            oom = True
                            break
                        h = _run_slot(&r, key)
                        r.keys[h] = key
                        r.vals[h] = <int32_t>r.g
                        row = r.info + r.g * 8
                        row[0] = tid[k]
                        row[1] = qid[k]
                        row[3] = 0
                        row[4] = qo[k]
                        row[5] = 1
                        row[6] = phys[k] + sz[k]
                        r.g += 1
                    gi = r.vals[h]
                    last_key = key
                row = r.info + gi * 8
                if row[3] and qo[k] != row[4] + row[3]:
                    row[5] = 0
                row[3] += 1
                row[7] = phys[k] + sz[k]
                grp[k] = <int32_t>gi
                m += 1
            # Each group's start; its count is where the second pass fills it from.
            end = 0
            for h in range(r.g):
                r.info[h * 8 + 2] = end
                end += r.info[h * 8 + 3]
        if oom:
            raise MemoryError()
        order = arena.get("run_order") if arena is not None else None
        units = arena.get("run_units") if arena is not None else None
        if order is None or units is None or len(order) < m:
            order = np.empty(m, dtype=np.int64)
            units = np.empty(m * MQ_CQ_UNIT, dtype=np.uint8)
            if arena is not None:
                arena["run_order"] = order
                arena["run_units"] = units
        order = order[:m]
        units = units[:m * MQ_CQ_UNIT]
        out = np.empty((r.g, 8), dtype=np.int64)
        order_p = <int64_t *>_ptr(order)
        units_p = <unsigned char *>_ptr(units)
        out_p = <int64_t *>_ptr(out)
        with nogil:
            if r.g:
                memcpy(out_p, r.info, r.g * 8 * sizeof(int64_t))
                # The fill positions, in the table's info (its copy is out).
                for h in range(r.g):
                    r.info[h] = r.info[h * 8 + 2]
            if n:
                _queue_runs_place(n, grp, r.info, &phys[0], &sz[0], &tc[0], order_p, units_p)
    finally:
        free(r.keys)
        free(r.vals)
        free(r.info)
        free(grp)
    return out, order, units


cdef void _queue_runs_place(Py_ssize_t n, const int32_t *grp, int64_t *fill, const int64_t *phys, const int32_t *sz,
                            const int64_t *tc, int64_t *order, unsigned char *units) noexcept nogil:
    """``queue_runs``' second pass: each record with a group to its group's next place."""
    cdef Py_ssize_t k
    cdef int64_t at
    cdef unsigned char *u
    for k in range(n):
        if grp[k] < 0:
            continue
        at = fill[grp[k]]
        fill[grp[k]] = at + 1
        order[at] = k
        u = units + at * MQ_CQ_UNIT
        dl_put64(u, <uint64_t>phys[k])
        dl_put32(u + 8, <uint32_t>sz[k])
        dl_put64(u + 12, <uint64_t>tc[k])
