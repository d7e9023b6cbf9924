# Included at the end of message.pyx (uses _ro, _Rec, _Cols, _parse_record, _store, _alloc, _bind,
# _ptr, _offsets_lengths, _HEX, C_OK and mq_host_len from it): the kernels of the Arrow message reader
# (dledger/rocketmq/store/arrow_reader.py). Each turns scan columns into the buffers of one
# Arrow column in one C pass, so a table of messages costs no Python object per message.


cdef void _bind_some(dict cols, _Cols *c):
    """``_bind`` for a dict holding only some scan columns: the others are NULL."""
    cdef object a
    c.phys_offset = <int64_t *>_ptr(cols["phys_offset"]) if "phys_offset" in cols else NULL
    c.size = <int32_t *>_ptr(cols["size"])
    c.body_crc = <int32_t *>_ptr(cols["body_crc"]) if "body_crc" in cols else NULL
    c.queue_id = <int32_t *>_ptr(cols["queue_id"]) if "queue_id" in cols else NULL
    c.flag = <int32_t *>_ptr(cols["flag"]) if "flag" in cols else NULL
    c.queue_offset = <int64_t *>_ptr(cols["queue_offset"]) if "queue_offset" in cols else NULL
    c.stored_phys = <int64_t *>_ptr(cols["stored_phys_offset"]) if "stored_phys_offset" in cols else NULL
    c.sys_flag = <int32_t *>_ptr(cols["sys_flag"]) if "sys_flag" in cols else NULL
    c.born_ts = <int64_t *>_ptr(cols["born_timestamp"]) if "born_timestamp" in cols else NULL
    c.born_host_off = <int64_t *>_ptr(cols["born_host_off"]) if "born_host_off" in cols else NULL
    c.store_ts = <int64_t *>_ptr(cols["store_timestamp"]) if "store_timestamp" in cols else NULL
    c.store_host_off = <int64_t *>_ptr(cols["store_host_off"]) if "store_host_off" in cols else NULL
    c.reconsume = <int32_t *>_ptr(cols["reconsume_times"]) if "reconsume_times" in cols else NULL
    c.prepared = <int64_t *>_ptr(cols["prepared_offset"]) if "prepared_offset" in cols else NULL
    c.body_off = <int64_t *>_ptr(cols["body_off"]) if "body_off" in cols else NULL
    c.body_len = <int32_t *>_ptr(cols["body_len"]) if "body_len" in cols else NULL
    c.topic_off = <int64_t *>_ptr(cols["topic_off"]) if "topic_off" in cols else NULL
    c.topic_len = <int32_t *>_ptr(cols["topic_len"]) if "topic_len" in cols else NULL
    c.props_off = <int64_t *>_ptr(cols["props_off"]) if "props_off" in cols else NULL
    c.props_len = <int32_t *>_ptr(cols["props_len"]) if "props_len" in cols else NULL
    c.entry_index = <int64_t *>_ptr(cols["entry_index"]) if "entry_index" in cols else NULL


cdef inline void _store_some(_Cols *c, Py_ssize_t k, const _Rec *r, int64_t at, int64_t phys) noexcept nogil:
    """``_store`` of the columns bound (the branches go the same way for every row)."""
    c.size[k] = r.size
    if c.phys_offset != NULL:
        c.phys_offset[k] = phys
    if c.body_crc != NULL:
        c.body_crc[k] = r.body_crc
    if c.queue_id != NULL:
        c.queue_id[k] = r.queue_id
    if c.flag != NULL:
        c.flag[k] = r.flag
    if c.queue_offset != NULL:
        c.queue_offset[k] = r.queue_offset
    if c.stored_phys != NULL:
        c.stored_phys[k] = r.phys
    if c.sys_flag != NULL:
        c.sys_flag[k] = r.sys_flag
    if c.born_ts != NULL:
        c.born_ts[k] = r.born_ts
    if c.born_host_off != NULL:
        c.born_host_off[k] = at + r.born_host_off
    if c.store_ts != NULL:
        c.store_ts[k] = r.store_ts
    if c.store_host_off != NULL:
        c.store_host_off[k] = at + r.store_host_off
    if c.reconsume != NULL:
        c.reconsume[k] = r.reconsume
    if c.prepared != NULL:
        c.prepared[k] = r.prepared
    if c.body_off != NULL:
        c.body_off[k] = at + r.body_off
        c.body_len[k] = r.body_len
    if c.topic_off != NULL:
        c.topic_off[k] = at + r.topic_off
        c.topic_len[k] = r.topic_len
    if c.props_off != NULL:
        c.props_off[k] = at + r.props_off
        c.props_len[k] = r.props_len


cdef object _exact(object arr, Py_ssize_t used):
    """``arr[:used]`` in a buffer of its own size when ``arr`` is longer: a slice keeps its
    whole allocation alive, and once the allocator hands out reused memory the unused tail is
    resident too, so a table built from over-allocated batches holds far more than its nbytes."""
    if used == arr.shape[0]:
        return arr
    return arr[:used].copy()


cdef tuple _types_of(object names, bint dledger):
    """The (name, dtype) of ``names`` among the scan columns, ``size`` always (the row count)."""
    cdef set wanted = set(names)
    wanted.add("size")
    unknown = wanted.difference(DLEDGER_COLUMNS if dledger else COLUMNS)
    if unknown:
        raise ValueError(f"unknown scan column(s) {sorted(unknown)}")
    for pair in ("body_off", "body_len"), ("topic_off", "topic_len"), ("props_off", "props_len"):
        if pair[0] in wanted or pair[1] in wanted:
            wanted.update(pair)
    types = DLEDGER_COLUMN_TYPES if dledger else COLUMN_TYPES
    return tuple((name, dt) for name, dt in types if name in wanted)


def scan_some(buf, int64_t base, Py_ssize_t start, Py_ssize_t end, Py_ssize_t max_records, bint dledger,
              names):
    """``scan_records`` (``scan_dledger_records`` when ``dledger``) filling only the scan columns
    ``names`` (and ``size``; each ``*_off`` comes with its ``*_len``): the Arrow reader asks for
    what its output columns need, so a read of four columns does not write twenty. Returns
    ``(columns, stop_offset, stop_code)`` as they do."""
    cdef const unsigned char[::1] b = _ro(buf)
    cdef Py_ssize_t n = b.shape[0]
    if end < 0 or end > n:
        end = n
    if start < 0 or start > end:
        raise ValueError(f"start {start} outside buffer of {end} bytes")
    cdef const unsigned char *p = &b[0] if n else NULL
    cdef int64_t head = DL_BODY_OFFSET if dledger else 0
    cdef int64_t smallest = head + MQ_MIN_RECORD
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
    types = _types_of(names, dledger)
    cdef dict cols = _alloc(types, cap)
    cdef _Cols c
    cdef _Rec r
    cdef Py_ssize_t off = start, count = 0
    cdef int code = C_END
    cdef bint full
    cdef const unsigned char *q
    while True:
        _bind_some(cols, &c)
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
                    _store_some(&c, count, &r, off + DL_BODY_OFFSET, base + off + DL_BODY_OFFSET)
                    if c.entry_index != NULL:
                        c.entry_index[count] = <int64_t>dl_get64(q + 8)
                    off += DL_BODY_OFFSET + r.size
                else:
                    code = _parse_record(q, end - off, False, &r)
                    if code != C_OK:
                        break
                    _store_some(&c, count, &r, off, base + off)
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
        cols = {name: _exact(a, count) for name, a in cols.items()}
    return cols, off, code


def scan_at(buf, int64_t base_offset, const int64_t[::1] offsets, const int32_t[::1] sizes, names=None):
    """``scan_records`` columns of the records at ``buf[offsets[k]:offsets[k] + sizes[k]]``
    (the units of a consume queue), in order, stopping at the first that is out of ``buf``, not
    a whole valid record or not of its unit's size. ``phys_offset`` is ``base_offset +
    offsets[k]``; the ``*_off`` columns are offsets into ``buf``. Only the columns ``names``
    (and ``size``) are filled when given (see ``scan_some``). Returns ``(columns, count)``."""
    cdef const unsigned char[::1] b = _ro(buf)
    cdef Py_ssize_t n = offsets.shape[0], k, count = 0
    if sizes.shape[0] != n:
        raise ValueError(f"{n} offsets but {sizes.shape[0]} sizes")
    cdef int64_t blen = b.shape[0], o
    cdef int32_t s
    cdef dict cols = _alloc(COLUMN_TYPES if names is None else _types_of(names, False), n)
    cdef _Cols c
    cdef _Rec r
    _bind_some(cols, &c)
    cdef const unsigned char *p = &b[0] if blen else NULL
    with nogil:
        for k in range(n):
            o = offsets[k]
            s = sizes[k]
            if o < 0 or s <= 0 or o + s > blen:
                break
            if _parse_record(p + o, s, False, &r) != C_OK or r.size != s:
                break
            _store_some(&c, k, &r, o, base_offset + o)
            count += 1
    if count < n:
        cols = {name: _exact(a, count) for name, a in cols.items()}
    return cols, count


# Two hex digits per byte value: one lookup and a 2-byte copy per byte of a message id.
cdef char _HEX_PAIRS[512]
for _b in range(256):
    _HEX_PAIRS[2 * _b] = _HEX[_b >> 4]
    _HEX_PAIRS[2 * _b + 1] = _HEX[_b & 15]


cdef inline int64_t _put_uint(unsigned char *d, uint64_t x) noexcept nogil:
    """Decimal digits of ``x`` at ``d``; returns how many."""
    cdef unsigned char tmp[24]
    cdef int k = 0, i
    if x == 0:
        d[0] = 48
        return 1
    while x:
        tmp[k] = <unsigned char>(48 + x % 10)
        x //= 10
        k += 1
    for i in range(k):
        d[i] = tmp[k - 1 - i]
    return k


cdef inline int64_t _put_int(unsigned char *d, int64_t x) noexcept nogil:
    if x < 0:
        d[0] = 45
        return 1 + _put_uint(d + 1, <uint64_t>(-x))
    return _put_uint(d, <uint64_t>x)


cdef inline int64_t _host_text(unsigned char *d, const unsigned char *h, int hl) noexcept nogil:
    """InetSocketAddress text of a raw host field (4 or 16 address bytes, then a 4-byte
    big-endian port) as format_host writes it: ``a.b.c.d:port`` or ``[x:x:x:x:x:x:x:x]:port``
    (eight uncompressed lower-case hex groups, as InetAddress.getHostAddress). Returns its length."""
    cdef int64_t at = 0
    cdef int i, alen = hl - 4, shift
    cdef uint32_t g
    cdef bint started
    if alen == 4:
        for i in range(4):
            if i:
                d[at] = 46
                at += 1
            at += _put_uint(d + at, h[i])
    else:
        d[at] = 91
        at += 1
        for i in range(8):
            if i:
                d[at] = 58
                at += 1
            g = (<uint32_t>h[2 * i] << 8) | h[2 * i + 1]
            started = False
            for shift in range(12, -4, -4):
                if (g >> shift) & 15 or started or shift == 0:
                    d[at] = <unsigned char>b"0123456789abcdef"[(g >> shift) & 15]
                    at += 1
                    started = True
        d[at] = 93
        at += 1
    d[at] = 58
    at += 1
    at += _put_int(d + at, <int32_t>dl_get32(h + alen))
    return at


def host_texts(buf, const int64_t[::1] host_off, const int32_t[::1] sys_flag, int32_t v6_flag):
    """The host fields at ``buf[host_off[k]:]`` (8 bytes, or 20 where ``sys_flag & v6_flag``)
    as the two buffers of an Arrow string array of their ``format_host`` text: ``(data,
    value_offsets)``. A row whose field equals the row before's copies its text (a run of
    records shares its hosts)."""
    cdef const unsigned char[::1] b = _ro(buf)
    cdef Py_ssize_t n = host_off.shape[0], k
    if sys_flag.shape[0] != n:
        raise ValueError("host_off and sys_flag must be of one length")
    cdef int64_t blen = b.shape[0]
    cdef int hl
    for k in range(n):
        hl = mq_host_len(sys_flag[k], v6_flag)
        if host_off[k] < 0 or host_off[k] + hl > blen:
            raise ValueError(f"row {k}: host at {host_off[k]} outside a buffer of {blen} bytes")
    # The longest text: "[" + 8 groups of 4 + 7 ":" + "]:" + an int32 (11) = 53 bytes.
    data = np.empty(56 * n, dtype=np.uint8)
    vo = np.empty(n + 1, dtype=np.int32)
    cdef unsigned char *d = <unsigned char *>cnp.PyArray_DATA(<cnp.ndarray>data)
    cdef int32_t[::1] v = vo
    cdef const unsigned char *p = &b[0] if blen else NULL
    cdef const unsigned char *h
    cdef const unsigned char *prev = NULL
    cdef int prev_len = 0
    cdef int64_t at = 0, prev_at = 0, prev_text = 0
    with nogil:
        for k in range(n):
            v[k] = <int32_t>at
            hl = mq_host_len(sys_flag[k], v6_flag)
            h = p + host_off[k]
            if prev != NULL and hl == prev_len and memcmp(h, prev, <size_t>hl) == 0:
                memcpy(d + at, d + prev_at, <size_t>prev_text)
                at += prev_text
                continue
            prev_at = at
            prev_text = _host_text(d + at, h, hl)
            at += prev_text
            prev = h
            prev_len = hl
        v[n] = <int32_t>at
    return _exact(data, at), vo


def offset_msg_ids(buf, const int64_t[::1] host_off, const int32_t[::1] sys_flag, const int64_t[::1] phys):
    """MessageDecoder.createMessageId of each row (upper-case hex of the store host field at
    ``buf[host_off[k]:]``, 8 or 20 bytes by STOREHOSTADDRESS_V6_FLAG, and the 8-byte big-endian
    ``phys[k]``) as the two buffers of an Arrow string array: ``(data, value_offsets)``."""
    cdef const unsigned char[::1] b = _ro(buf)
    cdef Py_ssize_t n = host_off.shape[0], k, i
    if sys_flag.shape[0] != n or phys.shape[0] != n:
        raise ValueError("host_off, sys_flag and phys must be of one length")
    cdef int64_t blen = b.shape[0], total = 0
    cdef int hl
    for k in range(n):
        hl = mq_host_len(sys_flag[k], MQ_STOREHOST_V6)
        if host_off[k] < 0 or host_off[k] + hl > blen:
            raise ValueError(f"row {k}: store host at {host_off[k]} outside a buffer of {blen} bytes")
        total += 2 * (hl + 8)
    data = np.empty(total, dtype=np.uint8)
    vo = np.empty(n + 1, dtype=np.int32)
    cdef unsigned char *d = <unsigned char *>cnp.PyArray_DATA(<cnp.ndarray>data)
    cdef int32_t[::1] v = vo
    cdef const unsigned char *p = &b[0] if blen else NULL
    cdef const unsigned char *h
    cdef int64_t at = 0
    cdef uint64_t x
    with nogil:
        for k in range(n):
            v[k] = <int32_t>at
            hl = mq_host_len(sys_flag[k], MQ_STOREHOST_V6)
            h = p + host_off[k]
            for i in range(hl):
                memcpy(d + at, &_HEX_PAIRS[2 * h[i]], 2)
                at += 2
            x = <uint64_t>phys[k]
            for i in range(8):
                memcpy(d + at, &_HEX_PAIRS[2 * ((x >> (56 - 8 * i)) & 0xFF)], 2)
                at += 2
        v[n] = <int32_t>at
    return data, vo


cdef inline void _put_optional(const unsigned char *src, int64_t length, unsigned char *data, int32_t *offs,
                               unsigned char *bits, Py_ssize_t k, int64_t *at) noexcept nogil:
    """Row ``k`` of an optional string column: the value at ``src`` (NULL: null)."""
    offs[k] = <int32_t>at[0]
    if src != NULL:
        memcpy(data + at[0], src, <size_t>length)
        at[0] += length
        bits[k >> 3] |= <unsigned char>(1 << (k & 7))


# -- the fused pass: every column of a record while it is in cache ------------------------------
#
# A read of all columns made them in seven passes over a batch's records (scan, topic, body,
# properties, msg_id, two hosts), each re-reading records that had left the L1/L2 cache. The
# fused kernels below parse a record and append all its values at once. Variable-length outputs
# are bounded by the record bytes a batch takes (a record holds its topic, body and properties),
# so a batch stops before the record that would pass ``budget`` bytes and nothing is re-checked
# per column. Values come from the helpers the per-column kernels use (_host_text, _HEX_PAIRS,
# _put_optional; _props_row makes property_columns' rows too), and tests/rocketmq/test_arrow_fused.py compares the two.

# Longest text of a host field ("[" + 8 groups of 4 + 7 ":" + "]:" + an int32) and of a msg_id
# (2 hex digits per byte of a 20-byte v6 host and an 8-byte offset), rounded up.
cdef int64_t _HOST_TEXT_MAX = 56
cdef int64_t _MSG_ID_MAX = 56


ctypedef struct _HostOut:
    unsigned char *data
    int32_t *offs
    int64_t at
    const unsigned char *prev
    int prev_len
    int64_t prev_at
    int64_t prev_text


cdef inline void _host_append(_HostOut *o, Py_ssize_t k, const unsigned char *h, int hl) noexcept nogil:
    """Row ``k``'s host text (a run of records shares its hosts: the text before is copied)."""
    o.offs[k] = <int32_t>o.at
    if o.prev != NULL and hl == o.prev_len and memcmp(h, o.prev, <size_t>hl) == 0:
        memcpy(o.data + o.at, o.data + o.prev_at, <size_t>o.prev_text)
        o.at += o.prev_text
        return
    o.prev_at = o.at
    o.prev_text = _host_text(o.data + o.at, h, hl)
    o.at += o.prev_text
    o.prev = h
    o.prev_len = hl


ctypedef struct _Fused:
    _Cols c                      # the fixed-width columns (the *_off ones NULL)
    unsigned char *topic_d
    int32_t *topic_o
    int64_t topic_at
    unsigned char *body_d
    int32_t *body_o
    int64_t body_at
    unsigned char *mid_d
    int32_t *mid_o
    int64_t mid_at
    bint born
    bint store
    _HostOut born_host
    _HostOut store_host
    bint want_map
    bint want_tags
    bint want_keys
    int32_t *eo
    unsigned char *kd
    int32_t *ko
    unsigned char *vd
    int32_t *vo
    int64_t kat
    int64_t vat
    int64_t m
    unsigned char *td
    int32_t *to
    unsigned char *tb
    int64_t tat
    Py_ssize_t tag_nulls
    unsigned char *yd
    int32_t *yo
    unsigned char *yb
    int64_t yat
    Py_ssize_t key_nulls
    int32_t *pk                  # one record's property items: name at, name length, value at, length
    int32_t *pkl
    int32_t *pv
    int32_t *pvl


cdef inline Py_ssize_t _split_properties(const unsigned char *q, int64_t nb, int32_t *pk, int32_t *pkl,
                                         int32_t *pv, int32_t *pvl) noexcept nogil:
    """string2messageProperties of ``q[:nb]`` into (name, value) positions; returns how many.
    Items split at 0x02, name and value at the first 0x01, both non-empty; a name given again
    replaces the earlier value in place (Java's HashMap keeps one entry per name). One pass over
    the bytes (items are short: a loop beats memchr calls)."""
    cdef Py_ssize_t np_ = 0, j
    cdef int64_t item = 0, sep = -1, i = 0
    cdef bint replaced
    while i <= nb:
        if i == nb or q[i] == 2:
            if sep > item and sep < i - 1:
                replaced = False
                for j in range(np_):
                    if pkl[j] == sep - item and memcmp(q + pk[j], q + item, <size_t>(sep - item)) == 0:
                        pv[j] = <int32_t>(sep + 1)
                        pvl[j] = <int32_t>(i - sep - 1)
                        replaced = True
                        break
                if not replaced:
                    pk[np_] = <int32_t>item
                    pkl[np_] = <int32_t>(sep - item)
                    pv[np_] = <int32_t>(sep + 1)
                    pvl[np_] = <int32_t>(i - sep - 1)
                    np_ += 1
            item = i + 1
            sep = -1
        elif q[i] == 1 and sep < 0:
            sep = i
        i += 1
    return np_


cdef inline void _props_row(_Fused *f, Py_ssize_t k, const unsigned char *q, int64_t nb) noexcept nogil:
    """Row ``k``'s ``properties`` map, ``tags`` and ``keys`` (those wanted) from the properties
    string ``q[:nb]``: the one properties loop of both the fused pass and ``property_columns``."""
    cdef Py_ssize_t np_, j
    cdef const unsigned char *tag_at
    cdef const unsigned char *key_at
    cdef int64_t tag_len = 0, key_len = 0
    np_ = _split_properties(q, nb, f.pk, f.pkl, f.pv, f.pvl)
    if f.want_map:
        f.eo[k] = <int32_t>f.m
        for j in range(np_):
            f.ko[f.m] = <int32_t>f.kat
            memcpy(f.kd + f.kat, q + f.pk[j], <size_t>f.pkl[j])
            f.kat += f.pkl[j]
            f.vo[f.m] = <int32_t>f.vat
            memcpy(f.vd + f.vat, q + f.pv[j], <size_t>f.pvl[j])
            f.vat += f.pvl[j]
            f.m += 1
    if f.want_tags or f.want_keys:
        tag_at = NULL
        key_at = NULL
        for j in range(np_):
            if f.pkl[j] == 4 and memcmp(q + f.pk[j], b"TAGS", 4) == 0:
                tag_at = q + f.pv[j]
                tag_len = f.pvl[j]
            elif f.pkl[j] == 4 and memcmp(q + f.pk[j], b"KEYS", 4) == 0:
                key_at = q + f.pv[j]
                key_len = f.pvl[j]
        if f.want_tags:
            _put_optional(tag_at, tag_len, f.td, f.to, f.tb, k, &f.tat)
            f.tag_nulls += tag_at == NULL
        if f.want_keys:
            _put_optional(key_at, key_len, f.yd, f.yo, f.yb, k, &f.yat)
            f.key_nulls += key_at == NULL


cdef inline void _fused_row(_Fused *f, Py_ssize_t k, const unsigned char *rec, const _Rec *r, int64_t phys) noexcept nogil:
    """Every wanted column of row ``k``: the record at ``rec`` (parsed as ``r``), at commit-log
    offset ``phys``."""
    cdef Py_ssize_t i
    cdef int hl
    cdef const unsigned char *h
    cdef uint64_t x
    _store_some(&f.c, k, r, 0, phys)
    if f.topic_d != NULL:
        f.topic_o[k] = <int32_t>f.topic_at
        memcpy(f.topic_d + f.topic_at, rec + r.topic_off, <size_t>r.topic_len)
        f.topic_at += r.topic_len
    if f.body_d != NULL:
        f.body_o[k] = <int32_t>f.body_at
        memcpy(f.body_d + f.body_at, rec + r.body_off, <size_t>r.body_len)
        f.body_at += r.body_len
    if f.mid_d != NULL:
        f.mid_o[k] = <int32_t>f.mid_at
        hl = mq_host_len(r.sys_flag, MQ_STOREHOST_V6)
        h = rec + r.store_host_off
        for i in range(hl):
            memcpy(f.mid_d + f.mid_at, &_HEX_PAIRS[2 * h[i]], 2)
            f.mid_at += 2
        x = <uint64_t>phys
        for i in range(8):
            memcpy(f.mid_d + f.mid_at, &_HEX_PAIRS[2 * ((x >> (56 - 8 * i)) & 0xFF)], 2)
            f.mid_at += 2
    if f.born:
        _host_append(&f.born_host, k, rec + r.born_host_off, mq_host_len(r.sys_flag, MQ_BORNHOST_V6))
    if f.store:
        _host_append(&f.store_host, k, rec + r.store_host_off, mq_host_len(r.sys_flag, MQ_STOREHOST_V6))
    if f.want_map or f.want_tags or f.want_keys:
        _props_row(f, k, rec + r.props_off, r.props_len)


# The fixed-width scan columns the fused kernels fill (the output columns named by the reader).
_FUSED_FIXED = ("phys_offset", "size", "body_crc", "queue_id", "flag", "queue_offset", "sys_flag",
                "born_timestamp", "store_timestamp", "reconsume_times", "prepared_offset")
# Properties strings are at most a short's length: an item takes at least 3 bytes.
cdef Py_ssize_t _PROPS_ITEMS_MAX = 32767 // 3 + 2


_U8 = np.dtype(np.uint8)
_I32 = np.dtype(np.int32)


cdef object _buf(dict pool, str key, Py_ssize_t n, object dtype, bint zero):
    """A buffer of at least ``n`` items: a new one, or with a ``pool`` the pool's buffer of that
    name when large enough (its pages are already faulted in), else a new one kept there."""
    if pool is None:
        return np.zeros(n, dtype) if zero else np.empty(n, dtype)
    arr = pool.get(key)
    if arr is None or arr.shape[0] < n or arr.dtype != dtype:
        arr = np.empty(n, dtype)
        pool[key] = arr
    if zero:
        memset(cnp.PyArray_DATA(<cnp.ndarray>arr), 0, <size_t>(n * arr.itemsize))
    return arr


cdef dict _fused_alloc(_Fused *f, Py_ssize_t rows, int64_t budget, object wanted, dict pool=None):
    """Buffers for ``rows`` records of at most ``budget`` bytes in all, bound into ``f`` (from
    ``pool`` when given: see ``fused_walk``)."""
    memset(f, 0, sizeof(_Fused))
    cdef dict out = {}
    fixed = {name: np.dtype(dt) for name, dt in COLUMN_TYPES}
    for name in _FUSED_FIXED:
        out[name] = _buf(pool, name, rows, fixed[name], False)
    _bind_some(out, &f.c)
    if "topic" in wanted:
        out["topic"] = [_buf(pool, "topic.data", budget, _U8, False), _buf(pool, "topic.offsets", rows + 1, _I32, False)]
        f.topic_d = <unsigned char *>_ptr(out["topic"][0])
        f.topic_o = <int32_t *>_ptr(out["topic"][1])
    if "body" in wanted:
        out["body"] = [_buf(pool, "body.data", budget, _U8, False), _buf(pool, "body.offsets", rows + 1, _I32, False)]
        f.body_d = <unsigned char *>_ptr(out["body"][0])
        f.body_o = <int32_t *>_ptr(out["body"][1])
    if "msg_id" in wanted:
        out["msg_id"] = [_buf(pool, "msg_id.data", _MSG_ID_MAX * rows, _U8, False), _buf(pool, "msg_id.offsets", rows + 1, _I32, False)]
        f.mid_d = <unsigned char *>_ptr(out["msg_id"][0])
        f.mid_o = <int32_t *>_ptr(out["msg_id"][1])
    if "born_host" in wanted:
        out["born_host"] = [_buf(pool, "born_host.data", _HOST_TEXT_MAX * rows, _U8, False), _buf(pool, "born_host.offsets", rows + 1, _I32, False)]
        f.born = True
        f.born_host.data = <unsigned char *>_ptr(out["born_host"][0])
        f.born_host.offs = <int32_t *>_ptr(out["born_host"][1])
    if "store_host" in wanted:
        out["store_host"] = [_buf(pool, "store_host.data", _HOST_TEXT_MAX * rows, _U8, False), _buf(pool, "store_host.offsets", rows + 1, _I32, False)]
        f.store = True
        f.store_host.data = <unsigned char *>_ptr(out["store_host"][0])
        f.store_host.offs = <int32_t *>_ptr(out["store_host"][1])
    cdef Py_ssize_t entries = budget // 3 + 1
    if "properties" in wanted:
        out["properties"] = [_buf(pool, "properties.entries", rows + 1, _I32, False), _buf(pool, "properties.keys", budget, _U8, False), _buf(pool, "properties.key_offsets", entries + 1, _I32, False),
                             _buf(pool, "properties.values", budget, _U8, False), _buf(pool, "properties.value_offsets", entries + 1, _I32, False)]
        f.want_map = True
        f.eo = <int32_t *>_ptr(out["properties"][0])
        f.kd = <unsigned char *>_ptr(out["properties"][1])
        f.ko = <int32_t *>_ptr(out["properties"][2])
        f.vd = <unsigned char *>_ptr(out["properties"][3])
        f.vo = <int32_t *>_ptr(out["properties"][4])
    if "tags" in wanted:
        out["tags"] = [_buf(pool, "tags.data", budget, _U8, False), _buf(pool, "tags.offsets", rows + 1, _I32, False), _buf(pool, "tags.validity", (rows + 7) // 8, _U8, True)]
        f.want_tags = True
        f.td = <unsigned char *>_ptr(out["tags"][0])
        f.to = <int32_t *>_ptr(out["tags"][1])
        f.tb = <unsigned char *>_ptr(out["tags"][2])
    if "keys" in wanted:
        out["keys"] = [_buf(pool, "keys.data", budget, _U8, False), _buf(pool, "keys.offsets", rows + 1, _I32, False), _buf(pool, "keys.validity", (rows + 7) // 8, _U8, True)]
        f.want_keys = True
        f.yd = <unsigned char *>_ptr(out["keys"][0])
        f.yo = <int32_t *>_ptr(out["keys"][1])
        f.yb = <unsigned char *>_ptr(out["keys"][2])
    return out


cdef object _shrunk(object arr, Py_ssize_t used):
    """``arr`` cut to ``used`` items in place (realloc: no copy of a large buffer, and the unused
    tail goes back to the allocator instead of being kept alive by a slice)."""
    if used < arr.shape[0]:
        arr.resize(used, refcheck=False)
    return arr


cdef object _cut(object arr, Py_ssize_t used, bint pooled):
    """``arr``'s first ``used`` items: a view of a pooled buffer (the pool reuses it once the
    view is gone), else the buffer itself shrunk (``_shrunk``)."""
    return arr[:used] if pooled else _shrunk(arr, used)


cdef dict _fused_finish(dict out, _Fused *f, Py_ssize_t count, bint pooled=False):
    """The outputs of ``count`` rows at their sizes, offsets closed: fixed columns as numpy
    arrays; ``topic``, ``body``, ``msg_id``, hosts ``(data, offsets)``; ``properties`` as
    ``property_columns`` gives its map, ``tags``/``keys`` ``(data, offsets, bitmap, nulls)``."""
    for name in _FUSED_FIXED:
        out[name] = _cut(out[name], count, pooled)
    cdef list t
    if f.topic_d != NULL:
        f.topic_o[count] = <int32_t>f.topic_at
        out["topic"] = (_cut(out["topic"][0], f.topic_at, pooled), _cut(out["topic"][1], count + 1, pooled))
    if f.body_d != NULL:
        f.body_o[count] = <int32_t>f.body_at
        out["body"] = (_cut(out["body"][0], f.body_at, pooled), _cut(out["body"][1], count + 1, pooled))
    if f.mid_d != NULL:
        f.mid_o[count] = <int32_t>f.mid_at
        out["msg_id"] = (_cut(out["msg_id"][0], f.mid_at, pooled), _cut(out["msg_id"][1], count + 1, pooled))
    if f.born:
        f.born_host.offs[count] = <int32_t>f.born_host.at
        out["born_host"] = (_cut(out["born_host"][0], f.born_host.at, pooled), _cut(out["born_host"][1], count + 1, pooled))
    if f.store:
        f.store_host.offs[count] = <int32_t>f.store_host.at
        out["store_host"] = (_cut(out["store_host"][0], f.store_host.at, pooled), _cut(out["store_host"][1], count + 1, pooled))
    if f.want_map:
        f.eo[count] = <int32_t>f.m
        f.ko[f.m] = <int32_t>f.kat
        f.vo[f.m] = <int32_t>f.vat
        t = out["properties"]
        out["properties"] = (_cut(t[0], count + 1, pooled), _cut(t[1], f.kat, pooled), _cut(t[2], f.m + 1, pooled),
                             _cut(t[3], f.vat, pooled), _cut(t[4], f.m + 1, pooled))
    if f.want_tags:
        f.to[count] = <int32_t>f.tat
        t = out["tags"]
        out["tags"] = (_cut(t[0], f.tat, pooled), _cut(t[1], count + 1, pooled), _cut(t[2], (count + 7) // 8, pooled), f.tag_nulls)
    if f.want_keys:
        f.yo[count] = <int32_t>f.yat
        t = out["keys"]
        out["keys"] = (_cut(t[0], f.yat, pooled), _cut(t[1], count + 1, pooled), _cut(t[2], (count + 7) // 8, pooled), f.key_nulls)
    return out


cdef int32_t *_props_scratch(_Fused *f) except NULL:
    cdef int32_t *pk = <int32_t *>malloc(4 * _PROPS_ITEMS_MAX * sizeof(int32_t))
    if pk == NULL:
        raise MemoryError()
    f.pk = pk
    f.pkl = pk + _PROPS_ITEMS_MAX
    f.pv = pk + 2 * _PROPS_ITEMS_MAX
    f.pvl = pk + 3 * _PROPS_ITEMS_MAX
    return pk


def property_columns(buf, props_off, props_len, bint want_map, bint want_tags, bint want_keys):
    """string2messageProperties of each properties string ``buf[props_off[k]:][:props_len[k]]``
    in one pass, straight into Arrow buffers: ``(map, tags, keys)``, each None unless asked.
    ``map`` is ``(entry_offsets, key_data, key_offsets, value_data, value_offsets)`` of a
    map<string, string>; ``tags`` and ``keys`` are ``(data, value_offsets, validity bitmap,
    null_count)`` of the TAGS and KEYS values (null where absent). Rows are made by
    ``_props_row``, as in the fused pass (see ``_split_properties`` for the rules)."""
    cdef const unsigned char[::1] b = _ro(buf)
    cdef Py_ssize_t size = b.shape[0], k
    o_arr, l_arr = _offsets_lengths(props_off, props_len, size, "property_columns")
    cdef const int64_t[::1] o = o_arr
    cdef const int64_t[::1] ln = l_arr
    cdef Py_ssize_t count = o.shape[0]
    cdef int64_t total = 0, longest = 0
    for k in range(count):
        total += ln[k]
        if ln[k] > longest:
            longest = ln[k]
    if total > 2147483647:
        raise ValueError(f"{total} bytes of properties exceed the 2 GiB of an Arrow string array in one batch")
    # Pairs of one record (an item takes at least 3 bytes with its separator).
    cdef Py_ssize_t scratch = longest // 3 + 2, cap = total // 3 + 1
    cdef _Fused f
    memset(&f, 0, sizeof(_Fused))
    cdef int32_t *pk = <int32_t *>malloc(4 * scratch * sizeof(int32_t))
    if pk == NULL:
        raise MemoryError()
    f.pk = pk
    f.pkl = pk + scratch
    f.pv = pk + 2 * scratch
    f.pvl = pk + 3 * scratch
    map_out = tags_out = keys_out = None
    if want_map:
        map_out = [np.empty(count + 1, np.int32), np.empty(total, np.uint8), np.empty(cap + 1, np.int32),
                   np.empty(total, np.uint8), np.empty(cap + 1, np.int32)]
        f.want_map = True
        f.eo = <int32_t *>_ptr(map_out[0])
        f.kd = <unsigned char *>_ptr(map_out[1])
        f.ko = <int32_t *>_ptr(map_out[2])
        f.vd = <unsigned char *>_ptr(map_out[3])
        f.vo = <int32_t *>_ptr(map_out[4])
    if want_tags:
        tags_out = [np.empty(total, np.uint8), np.empty(count + 1, np.int32), np.zeros((count + 7) // 8, np.uint8)]
        f.want_tags = True
        f.td = <unsigned char *>_ptr(tags_out[0])
        f.to = <int32_t *>_ptr(tags_out[1])
        f.tb = <unsigned char *>_ptr(tags_out[2])
    if want_keys:
        keys_out = [np.empty(total, np.uint8), np.empty(count + 1, np.int32), np.zeros((count + 7) // 8, np.uint8)]
        f.want_keys = True
        f.yd = <unsigned char *>_ptr(keys_out[0])
        f.yo = <int32_t *>_ptr(keys_out[1])
        f.yb = <unsigned char *>_ptr(keys_out[2])
    cdef const unsigned char *p = &b[0] if size else NULL
    with nogil:
        if want_map or want_tags or want_keys:
            for k in range(count):
                _props_row(&f, k, p + o[k] if ln[k] else NULL, ln[k])
        if want_map:
            f.eo[count] = <int32_t>f.m
            f.ko[f.m] = <int32_t>f.kat
            f.vo[f.m] = <int32_t>f.vat
        if want_tags:
            f.to[count] = <int32_t>f.tat
        if want_keys:
            f.yo[count] = <int32_t>f.yat
    free(pk)
    if want_map:
        map_out = (map_out[0], _exact(map_out[1], f.kat), _exact(map_out[2], f.m + 1), _exact(map_out[3], f.vat),
                   _exact(map_out[4], f.m + 1))
    if want_tags:
        tags_out = (_exact(tags_out[0], f.tat), tags_out[1], tags_out[2], f.tag_nulls)
    if want_keys:
        keys_out = (_exact(keys_out[0], f.yat), keys_out[1], keys_out[2], f.key_nulls)
    return map_out, tags_out, keys_out


def fused_walk(buf, int64_t base, Py_ssize_t start, Py_ssize_t end, Py_ssize_t max_records, bint dledger,
               int64_t budget, wanted, dict pool=None):
    """The output columns ``wanted`` (of arrow_reader's, besides the fixed-width scan columns,
    always made) of the records from ``buf[start:]``, as ``scan_some`` walks them (DLedger
    entries when ``dledger``), in one pass: at most ``max_records`` and as many whole records
    as fit in ``budget`` bytes (then the stop code is STOP_LIMIT; none fitting: a record larger
    than the budget, also STOP_LIMIT with no row). Returns ``(outputs, stop_offset, stop_code)``
    (outputs: see ``_fused_finish``). With ``pool`` (a dict this kernel fills with buffers), the
    outputs are views of the pool's buffers, which later calls with the same pool overwrite: pass
    it only once the views of the last call are gone (arrow_reader's ``_BufferPool``)."""
    cdef const unsigned char[::1] b = _ro(buf)
    cdef Py_ssize_t n = b.shape[0]
    if end < 0 or end > n:
        end = n
    if start < 0 or start > end:
        raise ValueError(f"start {start} outside buffer of {end} bytes")
    if max_records < 0:
        raise ValueError("fused_walk needs a row limit")
    if budget > 2147483647:
        budget = 2147483647  # Arrow string offsets are int32
    cdef int64_t head = DL_BODY_OFFSET if dledger else 0
    cdef Py_ssize_t rows = min(max_records, (end - start) // (head + MQ_MIN_RECORD) + 1)
    cdef _Fused f
    cdef dict out = _fused_alloc(&f, rows, budget, wanted, pool)
    _props_scratch(&f)
    cdef const unsigned char *p = &b[0] if n else NULL
    cdef const unsigned char *q
    cdef _Rec r
    cdef Py_ssize_t off = start, count = 0
    cdef int64_t used = 0
    cdef int code = C_END
    try:
        with nogil:
            while True:
                if count >= rows:
                    code = C_LIMIT if off < end else C_END
                    break
                if off >= end:
                    code = C_END
                    break
                q = p + off
                if dledger:
                    code = _parse_entry(q, off, end - off, base, False, &r)
                    if code != C_OK:
                        break
                    if used + r.size > budget:
                        code = C_LIMIT
                        break
                    _fused_row(&f, count, q + DL_BODY_OFFSET, &r, base + off + DL_BODY_OFFSET)
                    off += DL_BODY_OFFSET + r.size
                else:
                    code = _parse_record(q, end - off, False, &r)
                    if code != C_OK:
                        break
                    if used + r.size > budget:
                        code = C_LIMIT
                        break
                    _fused_row(&f, count, q, &r, base + off)
                    off += r.size
                used += r.size
                count += 1
    finally:
        free(f.pk)
    return _fused_finish(out, &f, count, pool is not None), off, code


def fused_at(buf, int64_t base_offset, const int64_t[::1] offsets, const int32_t[::1] sizes, wanted):
    """``fused_walk``'s outputs for the records at ``buf[offsets[k]:offsets[k] + sizes[k]]`` (the
    units of a consume queue), stopping as ``scan_at`` does. Returns ``(outputs, count)``."""
    cdef const unsigned char[::1] b = _ro(buf)
    cdef Py_ssize_t n = offsets.shape[0], k, count = 0
    if sizes.shape[0] != n:
        raise ValueError(f"{n} offsets but {sizes.shape[0]} sizes")
    cdef int64_t blen = b.shape[0], o, budget = 0
    cdef int32_t s
    for k in range(n):
        if sizes[k] > 0:
            budget += sizes[k]
    if budget > 2147483647:
        raise ValueError(f"{budget} bytes of records exceed the 2 GiB of an Arrow column in one batch")
    cdef _Fused f
    cdef dict out = _fused_alloc(&f, n, budget, wanted)
    _props_scratch(&f)
    cdef const unsigned char *p = &b[0] if blen else NULL
    cdef _Rec r
    try:
        with nogil:
            for k in range(n):
                o = offsets[k]
                s = sizes[k]
                if o < 0 or s <= 0 or o + s > blen:
                    break
                if _parse_record(p + o, s, False, &r) != C_OK or r.size != s:
                    break
                _fused_row(&f, k, p + o, &r, base_offset + o)
                count += 1
    finally:
        free(f.pk)
    return _fused_finish(out, &f, count), count
