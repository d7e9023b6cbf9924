# Included at the end of message.pyx (uses _ro, _Rec, _parse_record, C_OK, _HEX and mq_host_len
# from it): stored records to MessageExt objects, as MessageDecoder.decode makes them. Every
# read through the Python API (get_messages, lookup, query_by_key, the Consumer) makes one a
# message, and building them in Python was most of a read (docs/message-store.md).

import ipaddress

# MessageExt's fields in the order its constructor takes them (records.py checks this against
# the dataclass at import).
MESSAGE_EXT_FIELDS = (
    "topic", "body", "queue_id", "flag", "tags", "keys", "properties", "delay_level", "sys_flag",
    "born_timestamp", "born_host", "reconsume_times", "prepared_offset", "queue_offset", "phys_offset",
    "size", "store_timestamp", "store_host", "body_crc", "msg_id", "properties_string", "stored_phys_offset",
    "offset_msg_id",
)

# decode_host's answers by the stored host field (a broker sees few hosts).
cdef dict _HOSTS = {}
cdef Py_ssize_t _HOSTS_MAX = 4096


cdef object _utf8(const unsigned char *p, Py_ssize_t n):
    """``bytes(p[:n]).decode("utf-8", "replace")``."""
    return PyUnicode_DecodeUTF8(<const char *>p, n, "replace")


cdef object _host(const unsigned char *p, Py_ssize_t n):
    """decode_host of the 8 (IPv4) or 20 (IPv6) bytes at ``p``: ``(address, port)``."""
    key = PyBytes_FromStringAndSize(<const char *>p, n)
    found = _HOSTS.get(key)
    if found is not None:
        return found
    port = <int32_t>dl_get32(p + (n - 4))
    if n == 8:
        addr = f"{<int>p[0]}.{<int>p[1]}.{<int>p[2]}.{<int>p[3]}"
    else:
        addr = str(ipaddress.ip_address(key[: n - 4]))
    found = (addr, port)
    if len(_HOSTS) < _HOSTS_MAX:
        _HOSTS[key] = found
    return found


cdef object _msg_id(const unsigned char *host, Py_ssize_t n, int64_t phys):
    """MessageDecoder.createMessageId: upper-case hex of the store host field and the 8-byte
    big-endian offset."""
    cdef char out[56]
    cdef Py_ssize_t i
    cdef uint64_t v = <uint64_t>phys
    cdef unsigned char c
    for i in range(n):
        out[2 * i] = <char>_HEX[host[i] >> 4]
        out[2 * i + 1] = <char>_HEX[host[i] & 15]
    for i in range(8):
        c = <unsigned char>((v >> (56 - 8 * i)) & 0xFF)
        out[2 * (n + i)] = <char>_HEX[c >> 4]
        out[2 * (n + i) + 1] = <char>_HEX[c & 15]
    return PyUnicode_DecodeASCII(out, 2 * (n + 8), NULL)


cdef dict _properties(const unsigned char *p, Py_ssize_t n):
    """string2messageProperties of the stored properties: pieces split on 0x02, each a name and
    a value split on its first 0x01, both non-empty (a later name wins). The separators are
    ASCII, so splitting the bytes and decoding the pieces gives what decoding first gives."""
    cdef dict out = {}
    cdef Py_ssize_t i = 0, j, s
    while i < n:
        j = i
        while j < n and p[j] != 2:
            j += 1
        s = i
        while s < j and p[s] != 1:
            s += 1
        if i < s < j - 1:
            out[_utf8(p + i, s - i)] = _utf8(p + s + 1, j - s - 1)
        i = j + 1
    return out


cdef class _Topics:
    # The last topic decoded, reused while records repeat its bytes (a batch is mostly one).
    cdef bytes raw
    cdef object text

    cdef object get(self, const unsigned char *p, Py_ssize_t n):
        if self.raw is not None and len(self.raw) == n and memcmp(<const char *>self.raw, p, n) == 0:
            return self.text
        self.raw = PyBytes_FromStringAndSize(<const char *>p, n)
        self.text = _utf8(p, n)
        return self.text


cdef object _message(object cls, _Topics topics, const unsigned char *p, Py_ssize_t plen, int32_t size,
                     int32_t body_crc, int32_t queue_id, int32_t flag, int64_t queue_offset, int64_t stored_phys,
                     int32_t sys_flag, int64_t born_ts, int64_t bo, int64_t store_ts, int64_t so, int32_t reconsume,
                     int64_t prepared, int64_t body_off, int64_t body_len, int64_t topic_off, int64_t topic_len,
                     int64_t props_off, int64_t props_len, int64_t phys, bint client):
    """The MessageExt of one record whose fields lie at these offsets of ``p[:plen]`` (``topics``:
    the topic decoded last, for a batch; None for one record). ``client``: its ``msg_id`` is the
    UNIQ_KEY when it has one, as MessageClientExt.getMsgId gives a consumer; else the offset id."""
    cdef Py_ssize_t bh = mq_host_len(sys_flag, MQ_BORNHOST_V6), sh = mq_host_len(sys_flag, MQ_STOREHOST_V6)
    if (bo < 0 or bo + bh > plen or so < 0 or so + sh > plen or body_off < 0 or body_len < 0
            or body_off + body_len > plen or topic_off < 0 or topic_len < 0 or topic_off + topic_len > plen
            or props_off < 0 or props_len < 0 or props_off + props_len > plen):
        raise ValueError("a record's fields lie outside its buffer")
    props_string = _utf8(p + props_off, props_len)
    props = _properties(p + props_off, props_len)
    delay = props.get("DELAY")
    offset_id = _msg_id(p + so, sh, phys)
    uniq = props.get("UNIQ_KEY") if client else None
    return cls(
        topics.get(p + topic_off, topic_len) if topics is not None else _utf8(p + topic_off, topic_len),
        PyBytes_FromStringAndSize(<const char *>p + body_off, body_len),
        queue_id,
        flag,
        props.get("TAGS"),
        props.get("KEYS"),
        props,
        int(delay) if delay and delay.isdigit() else 0,
        sys_flag,
        born_ts,
        _host(p + bo, bh),
        reconsume,
        prepared,
        queue_offset,
        phys,
        size,
        store_ts,
        _host(p + so, sh),
        body_crc,
        uniq if uniq is not None else offset_id,
        props_string,
        stored_phys,
        offset_id,
    )


def message_ext(buf, int64_t phys_offset, cls, bint client=False):
    """``cls`` (MessageExt) of the record at the start of ``buf``, its ``phys_offset`` the given
    one; None when no whole valid record starts there (the checks of ``scan_records``)."""
    cdef const unsigned char[::1] b = _ro(buf)
    cdef Py_ssize_t n = b.shape[0]
    cdef _Rec r
    if n == 0 or _parse_record(&b[0], n, False, &r) != C_OK:
        return None
    return _message(cls, None, &b[0], n, r.size, r.body_crc, r.queue_id, r.flag, r.queue_offset, r.phys,
                    r.sys_flag, r.born_ts, r.born_host_off, r.store_ts, r.store_host_off, r.reconsume, r.prepared,
                    r.body_off, r.body_len, r.topic_off, r.topic_len, r.props_off, r.props_len, phys_offset, client)


def message_exts(buf, dict cols, rows, cls, bint client=False):
    """``cls`` (MessageExt) of each scanned record (``cols`` as ``scan_records`` makes them, over
    ``buf``), for the rows ``rows`` (None: all) in their order."""
    cdef const unsigned char[::1] b = _ro(buf)
    cdef Py_ssize_t blen = b.shape[0]
    cdef const unsigned char *p = &b[0] if blen else NULL
    cdef Py_ssize_t count = len(cols["size"]), k, i
    # The columns checked (dtype, length, contiguous) and bound as the scan binds its own.
    checked = {name: _col(cols[name], count, np.dtype(t), name) for name, t in COLUMN_TYPES}
    cdef _Cols c
    _bind(checked, &c)
    cdef const int64_t[::1] pick
    if rows is None:
        pick = np.arange(count, dtype=np.int64)
    else:
        pick = np.ascontiguousarray(rows, dtype=np.int64)
    cdef _Topics topics = _Topics()
    out = []
    for i in range(pick.shape[0]):
        k = pick[i]
        if k < 0 or k >= count:
            raise IndexError(f"row {k} of {count}")
        out.append(_message(cls, topics, p, blen, c.size[k], c.body_crc[k], c.queue_id[k], c.flag[k],
                            c.queue_offset[k], c.stored_phys[k], c.sys_flag[k], c.born_ts[k], c.born_host_off[k],
                            c.store_ts[k], c.store_host_off[k], c.reconsume[k], c.prepared[k], c.body_off[k],
                            c.body_len[k], c.topic_off[k], c.topic_len[k], c.props_off[k], c.props_len[k],
                            c.phys_offset[k], client))
    return out


# -- put results (status.py re-exports them) ---------------------------------------------------
# C types, not Python classes: a single put makes one of each, and as Python objects (a slots
# class with an __init__ of twelve arguments, a slots dataclass) they cost it ~0.4 us of ~3
# (issue 40, docs/message-store.md); ``SinglePut`` fills them in C.


cdef class AppendMessageResult:
    """Where a put landed. For a batch, ``wrote_offset``/``logics_offset`` are the first
    message's and ``wrote_offsets``/``queue_offsets`` hold every message's (one message's
    too, put alone or as a batch of one).

    A batch put may leave both arrays to be built on first read (most callers read neither, and
    two numpy arrays cost a batch of small messages more than its result does): ``_positions``
    with ``_delta`` gives ``wrote_offsets = _positions + _delta``, and ``_advances`` (not None)
    gives ``queue_offsets``: ``logics_offset`` on by one per message, or zeros when False."""

    cdef public object status
    cdef public object wrote_offset
    cdef public object wrote_bytes
    cdef public object store_timestamp
    cdef public object logics_offset
    cdef public object msg_num
    cdef public object store_host
    cdef object _wrote_offsets
    cdef object _queue_offsets
    cdef object _positions
    cdef object _delta
    cdef object _advances
    cdef object _msg_ids

    def __init__(self, status, wrote_offset=0, wrote_bytes=0, store_timestamp=0, logics_offset=0, msg_num=1,
                 store_host=b"", wrote_offsets=None, queue_offsets=None, _positions=None, _delta=0,
                 _advances=None):
        self.status = status
        self.wrote_offset = wrote_offset
        self.wrote_bytes = wrote_bytes
        self.store_timestamp = store_timestamp
        self.logics_offset = logics_offset
        self.msg_num = msg_num
        self.store_host = store_host
        self._wrote_offsets = wrote_offsets
        self._queue_offsets = queue_offsets
        self._positions = _positions
        self._delta = _delta
        self._advances = _advances
        # The message ids are built on first use: a batch put does not pay for strings nobody reads.
        self._msg_ids = None

    cdef bint _one_ok(self):
        # One message, put alone or as a batch of one (AppendMessageStatus.PUT_OK is 0).
        return self.msg_num == 1 and self.status == 0

    @property
    def wrote_offsets(self):
        if self._wrote_offsets is None:
            if self._positions is not None:
                self._wrote_offsets = self._positions + self._delta
                self._positions = None
            elif self._one_ok():
                self._wrote_offsets = np.array([self.wrote_offset], dtype=np.int64)
        return self._wrote_offsets

    @wrote_offsets.setter
    def wrote_offsets(self, value):
        self._wrote_offsets, self._positions = value, None

    @property
    def queue_offsets(self):
        if self._queue_offsets is None and self._advances is not None:
            q0, n = self.logics_offset, self.msg_num
            self._queue_offsets = (
                np.arange(q0, q0 + n, dtype=np.int64) if self._advances else np.zeros(n, dtype=np.int64)
            )
            self._advances = None
        elif self._queue_offsets is None and self._one_ok():
            self._queue_offsets = np.array([self.logics_offset], dtype=np.int64)
        return self._queue_offsets

    @queue_offsets.setter
    def queue_offsets(self, value):
        self._queue_offsets, self._advances = value, None

    def __repr__(self):
        return (
            f"AppendMessageResult(status={self.status!r}, wrote_offset={self.wrote_offset}, "
            f"wrote_bytes={self.wrote_bytes}, store_timestamp={self.store_timestamp}, "
            f"logics_offset={self.logics_offset}, msg_num={self.msg_num}, store_host={self.store_host!r}, "
            f"wrote_offsets={self.wrote_offsets!r}, queue_offsets={self.queue_offsets!r})"
        )

    @property
    def msg_ids(self):
        """The offset message id of each message (MessageDecoder.createMessageId)."""
        cdef bytes host
        if self._msg_ids is None:
            wrote = self.wrote_offsets
            offsets = wrote.tolist() if wrote is not None else [self.wrote_offset]
            if not isinstance(self.store_host, (bytes, bytearray)):
                from dledger.rocketmq.store.message import create_message_id

                self._msg_ids = [create_message_id(self.store_host, o) for o in offsets]
                return self._msg_ids
            host = bytes(self.store_host)
            self._msg_ids = [
                _msg_id(<const unsigned char *>PyBytes_AS_STRING(host), PyBytes_GET_SIZE(host), o) for o in offsets
            ]
        return self._msg_ids

    @property
    def msg_id(self):
        """The offset message id (a batch: the ids joined by commas, as RocketMQ does)."""
        return ",".join(self.msg_ids)


cdef class PutMessageResult:
    """A put's outcome (org.apache.rocketmq.store.PutMessageResult); ``reason`` says why a put
    was refused, for the caller's logs (not a RocketMQ field)."""

    cdef public object status
    cdef public object append_result
    cdef public object reason

    __match_args__ = ("status", "append_result", "reason")

    def __init__(self, status, append_result=None, reason=""):
        self.status = status
        self.append_result = append_result
        self.reason = reason

    def __repr__(self):
        return f"PutMessageResult(status={self.status!r}, append_result={self.append_result!r}, reason={self.reason!r})"

    def __eq__(self, other):
        if type(other) is not PutMessageResult:
            return NotImplemented
        o = <PutMessageResult>other
        return (self.status, self.append_result, self.reason) == (o.status, o.append_result, o.reason)

    __hash__ = None

    @property
    def ok(self):
        return self.status == 0  # PutMessageStatus.PUT_OK

    def is_ok(self):
        return self.ok

    @property
    def msg_id(self):
        return self.append_result.msg_id if self.append_result else ""

    @property
    def phys_offset(self):
        return self.append_result.wrote_offset if self.append_result else -1

    @property
    def queue_offset(self):
        return self.append_result.logics_offset if self.append_result else -1


cdef inline PutMessageResult _put_ok(object put_ok, object append_ok, int64_t pos, int64_t length, int64_t now,
                                     int64_t queue_offset, object store_host):
    """``PutMessageResult(put_ok, AppendMessageResult(append_ok, pos, length, now, queue_offset,
    1, store_host))`` without a Python call."""
    cdef AppendMessageResult a = AppendMessageResult.__new__(AppendMessageResult)
    a.status = append_ok
    a.wrote_offset = pos
    a.wrote_bytes = length
    a.store_timestamp = now
    a.logics_offset = queue_offset
    a.msg_num = 1
    a.store_host = store_host
    a._delta = 0
    cdef PutMessageResult r = PutMessageResult.__new__(PutMessageResult)
    r.status = put_ok
    r.append_result = a
    r.reason = ""
    return r
