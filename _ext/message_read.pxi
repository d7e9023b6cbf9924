# Included at the end of message.pyx (uses _ro, _Rec, _parse_record and C_OK from it): the
# read paths' kernels.
#
# The pull path's kernel: records a consume queue points at, read in place in a commit-log
# file's mapping, straight into the columns of an Arrow table. Gathering the records into
# a buffer first, scanning it into twenty columns and gathering bodies and properties out of
# it again read and wrote every byte three times; this reads each record once.

# Arrow's binary type has int32 offsets.
cdef int64_t _PULL_MAX_BINARY = 2147483647


def pull_records(buf, const int64_t[::1] offsets, const int32_t[::1] sizes):
    """Parse the record at ``buf[offsets[k]:offsets[k] + sizes[k]]`` for each k, in order,
    stopping at the first that is out of ``buf``, not a whole valid record (the checks of
    ``scan_records``) or not of its unit's size, or whose body or properties would take
    either value buffer past 2 GiB - 1.

    Returns ``(count, cols, body, body_offsets, props, props_offsets)``: how many records
    were read; ``cols`` with ``size``, ``flag``, ``sys_flag``, ``reconsume_times`` (int32),
    ``store_timestamp`` and ``born_timestamp`` (int64), ``count`` values each; and for body and
    properties the two buffers of an Arrow binary array (uint8 values, ``count + 1`` int32
    starts; the value buffer may be longer than its last start)."""
    cdef const unsigned char[::1] b = _ro(buf)
    cdef Py_ssize_t n = offsets.shape[0], k, count = 0
    if sizes.shape[0] != n:
        raise ValueError(f"{n} offsets but {sizes.shape[0]} sizes")
    cdef int64_t blen = b.shape[0], total = 0
    with nogil:
        for k in range(n):
            if sizes[k] > 0:
                total += sizes[k]
    # Bodies and properties lie inside their records: the sizes bound both value buffers.
    cdef int64_t cap = min(total, _PULL_MAX_BINARY)
    size_a = np.empty(n, dtype=np.int32)
    flag_a = np.empty(n, dtype=np.int32)
    sys_a = np.empty(n, dtype=np.int32)
    rec_a = np.empty(n, dtype=np.int32)
    sts_a = np.empty(n, dtype=np.int64)
    bts_a = np.empty(n, dtype=np.int64)
    body = np.empty(cap, dtype=np.uint8)
    props = np.empty(cap, dtype=np.uint8)
    body_vo = np.empty(n + 1, dtype=np.int32)
    props_vo = np.empty(n + 1, dtype=np.int32)
    cdef int32_t[::1] c_size = size_a, c_flag = flag_a, c_sys = sys_a, c_rec = rec_a
    cdef int32_t[::1] c_bvo = body_vo, c_pvo = props_vo
    cdef int64_t[::1] c_sts = sts_a, c_bts = bts_a
    cdef unsigned char *bd = <unsigned char *>cnp.PyArray_DATA(<cnp.ndarray>body)
    cdef unsigned char *pd = <unsigned char *>cnp.PyArray_DATA(<cnp.ndarray>props)
    cdef const unsigned char *p = &b[0] if blen else NULL
    cdef const unsigned char *q
    cdef int64_t o, bat = 0, pat = 0
    cdef int32_t s
    cdef _Rec r
    with nogil:
        for k in range(n):
            o = offsets[k]
            s = sizes[k]
            if o < 0 or s <= 0 or o + s > blen:
                break
            q = p + o
            if _parse_record(q, s, False, &r) != C_OK or r.size != s:
                break
            if bat + r.body_len > cap or pat + r.props_len > cap:
                break
            c_size[k] = r.size
            c_flag[k] = r.flag
            c_sys[k] = r.sys_flag
            c_rec[k] = r.reconsume
            c_sts[k] = r.store_ts
            c_bts[k] = r.born_ts
            c_bvo[k] = <int32_t>bat
            c_pvo[k] = <int32_t>pat
            if r.body_len:
                memcpy(bd + bat, q + r.body_off, <size_t>r.body_len)
                bat += r.body_len
            if r.props_len:
                memcpy(pd + pat, q + r.props_off, <size_t>r.props_len)
                pat += r.props_len
            count += 1
        c_bvo[count] = <int32_t>bat
        c_pvo[count] = <int32_t>pat
    cols = {
        "size": size_a[:count],
        "store_timestamp": sts_a[:count],
        "born_timestamp": bts_a[:count],
        "sys_flag": sys_a[:count],
        "flag": flag_a[:count],
        "reconsume_times": rec_a[:count],
    }
    return count, cols, body[:bat], body_vo[: count + 1], props[:pat], props_vo[: count + 1]


def record_fields(buf, Py_ssize_t start=0):
    """The fields of the one record at ``buf[start:]`` as a tuple (size, body_crc, queue_id, flag,
    queue_offset, stored_phys_offset, sys_flag, born_timestamp, born_host_off, store_timestamp,
    store_host_off, reconsume_times, prepared_offset, body_off, body_len, topic_off, topic_len,
    props_off, props_len; offsets into ``buf``), or None when no whole valid record starts
    there (the checks of ``scan_records``). For a lookup of one message, where the columns of
    a scan would cost more than the record."""
    cdef const unsigned char[::1] b = _ro(buf)
    if start < 0 or start >= b.shape[0]:
        return None
    cdef _Rec r
    if _parse_record(&b[start], b.shape[0] - start, False, &r) != C_OK:
        return None
    return (
        r.size, r.body_crc, r.queue_id, r.flag, r.queue_offset, r.phys, r.sys_flag, r.born_ts,
        start + r.born_host_off, r.store_ts, start + r.store_host_off, r.reconsume, r.prepared,
        start + r.body_off, r.body_len, start + r.topic_off, r.topic_len, start + r.props_off, r.props_len,
    )
