# Included at the end of message.pyx (uses _ro, _Rec, _Cols, _parse_record, _store, _alloc, _bind,
# _HEX, C_OK and mq_host_len from it): the kernels of the Arrow message reader
# (dledger/rocketmq/store/arrow_reader.py). Each turns scan columns into the buffers of one
# Arrow column in one C pass, so a table of messages costs no Python object per message.


def scan_at(buf, int64_t base_offset, const int64_t[::1] offsets, const int32_t[::1] sizes):
    """``scan_records`` columns of the records at ``buf[offsets[k]:offsets[k] + sizes[k]]``
    (the units of a consume queue), in order, stopping at the first that is out of ``buf``, not
    a whole valid record or not of its unit's size. ``phys_offset`` is ``base_offset +
    offsets[k]``; the ``*_off`` columns are offsets into ``buf``. Returns ``(columns, count)``."""
    cdef const unsigned char[::1] b = _ro(buf)
    cdef Py_ssize_t n = offsets.shape[0], k, count = 0
    if sizes.shape[0] != n:
        raise ValueError(f"{n} offsets but {sizes.shape[0]} sizes")
    cdef int64_t blen = b.shape[0], o
    cdef int32_t s
    cdef dict cols = _alloc(COLUMN_TYPES, n)
    cdef _Cols c
    cdef _Rec r
    _bind(cols, &c)
    cdef const unsigned char *p = &b[0] if blen else NULL
    with nogil:
        for k in range(n):
            o = offsets[k]
            s = sizes[k]
            if o < 0 or s <= 0 or o + s > blen:
                break
            if _parse_record(p + o, s, False, &r) != C_OK or r.size != s:
                break
            _store(&c, k, &r, o, base_offset + o)
            count += 1
    if count < n:
        cols = {name: a[:count] for name, a in cols.items()}
    return cols, count


def offset_msg_ids(buf, const int64_t[::1] host_off, const int32_t[::1] sys_flag, const int64_t[::1] phys):
    """MessageDecoder.createMessageId of each row (upper-case hex of the store host field at
    ``buf[host_off[k]:]``, 8 or 20 bytes by STOREHOSTADDRESS_V6_FLAG, and the 8-byte big-endian
    ``phys[k]``) as the two buffers of an Arrow string array: ``(data, value_offsets)``."""
    cdef const unsigned char[::1] b = _ro(buf)
    cdef Py_ssize_t n = host_off.shape[0], k, i
    if sys_flag.shape[0] != n or phys.shape[0] != n:
        raise ValueError("host_off, sys_flag and phys must be of one length")
    cdef int64_t blen = b.shape[0]
    cdef int hl
    for k in range(n):
        hl = mq_host_len(sys_flag[k], MQ_STOREHOST_V6)
        if host_off[k] < 0 or host_off[k] + hl > blen:
            raise ValueError(f"row {k}: store host at {host_off[k]} outside a buffer of {blen} bytes")
    data = np.empty(56 * n, dtype=np.uint8)
    vo = np.empty(n + 1, dtype=np.int32)
    cdef unsigned char *d = <unsigned char *>cnp.PyArray_DATA(<cnp.ndarray>data)
    cdef int32_t[::1] v = vo
    cdef const unsigned char *p = &b[0] if blen else NULL
    cdef const unsigned char *h
    cdef int64_t at = 0
    cdef uint64_t x
    cdef unsigned char ch
    with nogil:
        for k in range(n):
            v[k] = <int32_t>at
            hl = mq_host_len(sys_flag[k], MQ_STOREHOST_V6)
            h = p + host_off[k]
            for i in range(hl):
                d[at] = <unsigned char>_HEX[h[i] >> 4]
                d[at + 1] = <unsigned char>_HEX[h[i] & 15]
                at += 2
            x = <uint64_t>phys[k]
            for i in range(8):
                ch = <unsigned char>((x >> (56 - 8 * i)) & 0xFF)
                d[at] = <unsigned char>_HEX[ch >> 4]
                d[at + 1] = <unsigned char>_HEX[ch & 15]
                at += 2
        v[n] = <int32_t>at
    return data[:at], vo


def host_codes(buf, const int64_t[::1] host_off, const int32_t[::1] sys_flag, int32_t v6_flag):
    """The host fields at ``buf[host_off[k]:]`` (8 bytes, or 20 where ``sys_flag & v6_flag``) as
    dictionary codes: ``(codes int32, fields)``, ``fields`` the distinct raw fields in order of
    first sight (a log holds few hosts: one bytes object per distinct host, none per row)."""
    cdef const unsigned char[::1] b = _ro(buf)
    cdef Py_ssize_t n = host_off.shape[0], k
    if sys_flag.shape[0] != n:
        raise ValueError("host_off and sys_flag must be of one length")
    cdef int64_t blen = b.shape[0]
    codes = np.empty(n, dtype=np.int32)
    cdef int32_t[::1] cd = codes
    cdef const unsigned char *p = &b[0] if blen else NULL
    cdef const unsigned char *h
    cdef const unsigned char *prev = NULL
    cdef int hl, prev_len = 0
    cdef int32_t prev_code = -1
    cdef dict seen = {}
    cdef list fields = []
    for k in range(n):
        hl = mq_host_len(sys_flag[k], v6_flag)
        if host_off[k] < 0 or host_off[k] + hl > blen:
            raise ValueError(f"row {k}: host at {host_off[k]} outside a buffer of {blen} bytes")
        h = p + host_off[k]
        # Rows in a run share their host (one producer's connection, one broker): compare with
        # the row before before looking the field up.
        if prev != NULL and hl == prev_len and memcmp(h, prev, hl) == 0:
            cd[k] = prev_code
            continue
        key = PyBytes_FromStringAndSize(<const char *>h, hl)
        code = seen.get(key)
        if code is None:
            code = len(fields)
            seen[key] = code
            fields.append(key)
        prev_code = <int32_t>code
        prev = h
        prev_len = hl
        cd[k] = prev_code
    return codes, fields


def property_pairs(buf, props_off, props_len):
    """string2messageProperties of each properties string ``buf[props_off[k]:][:props_len[k]]``
    as the buffers of an Arrow map: ``(entry_offsets int32[n + 1], key_off int64, key_len int32,
    val_off int64, val_len int32)``, offsets into ``buf``. Items split at 0x02, name and value
    at the first 0x01, both non-empty; a name given again replaces the earlier value in place
    (Java's HashMap keeps one entry per name)."""
    cdef const unsigned char[::1] b = _ro(buf)
    cdef Py_ssize_t size = b.shape[0], k
    o_arr, l_arr = _offsets_lengths(props_off, props_len, size, "property_pairs")
    cdef const int64_t[::1] o = o_arr
    cdef const int64_t[::1] ln = l_arr
    cdef Py_ssize_t count = o.shape[0]
    cdef int64_t total_bytes = 0
    for k in range(count):
        total_bytes += ln[k]
    # An item takes at least 4 bytes with its separator (3 for the last): this bounds the pairs.
    cdef Py_ssize_t cap = total_bytes // 3 + 1
    entry_offsets = np.empty(count + 1, dtype=np.int32)
    key_off = np.empty(cap, dtype=np.int64)
    key_len = np.empty(cap, dtype=np.int32)
    val_off = np.empty(cap, dtype=np.int64)
    val_len = np.empty(cap, dtype=np.int32)
    cdef int32_t[::1] eo = entry_offsets
    cdef int64_t[::1] ko = key_off
    cdef int32_t[::1] kl = key_len
    cdef int64_t[::1] vo = val_off
    cdef int32_t[::1] vl = val_len
    cdef const unsigned char *p = &b[0] if size else NULL
    cdef const unsigned char *q
    cdef const unsigned char *hit
    cdef int64_t i, e, sep, nb, first
    cdef Py_ssize_t m = 0, j
    cdef bint replaced
    with nogil:
        for k in range(count):
            eo[k] = <int32_t>m
            first = m
            nb = ln[k]
            q = p + o[k] if nb else NULL
            i = 0
            while i < nb:
                hit = <const unsigned char *>memchr(q + i, 2, <size_t>(nb - i))
                e = (hit - q) if hit != NULL else nb
                hit = <const unsigned char *>memchr(q + i, 1, <size_t>(e - i))
                if hit != NULL:
                    sep = hit - q
                    if sep > i and sep < e - 1:
                        replaced = False
                        for j in range(first, m):
                            if kl[j] == sep - i and memcmp(p + ko[j], q + i, <size_t>(sep - i)) == 0:
                                vo[j] = o[k] + sep + 1
                                vl[j] = <int32_t>(e - sep - 1)
                                replaced = True
                                break
                        if not replaced:
                            ko[m] = o[k] + i
                            kl[m] = <int32_t>(sep - i)
                            vo[m] = o[k] + sep + 1
                            vl[m] = <int32_t>(e - sep - 1)
                            m += 1
                i = e + 1
        eo[count] = <int32_t>m
    return entry_offsets, key_off[:m], key_len[:m], val_off[:m], val_len[:m]
