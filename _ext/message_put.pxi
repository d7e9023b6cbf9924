# Included at the end of message.pyx: the single-put path's kernels (putMessage of one message).

from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.long cimport PyLong_AsLongLongAndOverflow

cdef class PutTemplate:
    """What every put of one (topic, queue, properties, sys flag, born host) shares, checked once
    by the store: the record less its body, flag, born time, reconsume times, prepared offset and
    what the lock assigns. The properties are ``props_head``, then (with ``uniq``) the UNIQ_KEY
    value (the generator's head and 4 hex digits of its counter), then ``props_tail``."""

    cdef readonly bytes topic
    cdef readonly bytes props_head
    cdef readonly bytes props_tail
    cdef readonly bytes born_host
    cdef readonly bytes store_host
    cdef readonly int32_t queue_id
    cdef readonly int32_t sys_flag
    cdef readonly bint uniq
    cdef readonly Py_ssize_t uniq_len
    # calMsgLength less the body.
    cdef readonly int64_t fixed_len
    # "topic-queueId" (the topic-queue table's key), whether the put takes a queue offset, and
    # whether it waits for the flush (the store's, read from Python).
    cdef public object queue_key
    cdef public bint advances
    cdef public bint wait_store
    # A keyed template's properties before its KEYS value (``props_head`` then is what follows
    # the value): ``with_keys`` makes the template of each put. None for the others.
    cdef readonly object keys_before

    def __init__(self, bytes topic, bytes props_head, bytes props_tail, bint uniq, Py_ssize_t uniq_head_len,
                 int32_t queue_id, int32_t sys_flag, bytes born_host, bytes store_host, object queue_key,
                 bint advances, bint wait_store, bytes keys_before=None):
        if len(topic) > MQ_MAX_TOPIC:
            raise ValueError(f"topic of {len(topic)} bytes is over {MQ_MAX_TOPIC}")
        if len(born_host) != mq_host_len(sys_flag, MQ_BORNHOST_V6):
            raise ValueError(f"born host of {len(born_host)} bytes disagrees with sys_flag {sys_flag:#x}")
        if len(store_host) != mq_host_len(sys_flag, MQ_STOREHOST_V6):
            raise ValueError(f"store host of {len(store_host)} bytes disagrees with sys_flag {sys_flag:#x}")
        self.uniq_len = uniq_head_len + 4 if uniq else 0
        cdef Py_ssize_t plen = len(props_head) + self.uniq_len + len(props_tail)
        if keys_before is not None:
            plen += len(keys_before)
        if plen > MQ_MAX_PROPS:
            raise ValueError(f"properties of {plen} bytes are over {MQ_MAX_PROPS}")
        self.topic = topic
        self.props_head = props_head
        self.props_tail = props_tail
        self.uniq = uniq
        self.queue_id = queue_id
        self.sys_flag = sys_flag
        self.born_host = born_host
        self.store_host = store_host
        self.fixed_len = mq_record_length(sys_flag, 0, len(topic), plen)
        self.queue_key = queue_key
        self.advances = advances
        self.wait_store = wait_store
        self.keys_before = keys_before

    def with_keys(self, keys):
        """The template of one put of this keyed template with KEYS value ``keys`` (a non-empty
        str): its properties are ``keys_before``, the key's UTF-8, then this template's. None
        when the key would not read back as it is (a lone surrogate, a separator) or makes the
        properties too long: the caller's general path then says why. What a put's own key
        costs, without a template made in Python for each (they differ only here)."""
        cdef Py_ssize_t kl = 0, bl
        cdef const char *kp = _clean_key(keys, &kl)
        if kp == NULL or kl == 0 or self.keys_before is None:
            return None
        cdef bytes before = <bytes>self.keys_before
        bl = PyBytes_GET_SIZE(before)
        cdef Py_ssize_t hl = PyBytes_GET_SIZE(self.props_head)
        if bl + kl + hl + self.uniq_len + PyBytes_GET_SIZE(self.props_tail) > MQ_MAX_PROPS:
            return None
        cdef bytes head = PyBytes_FromStringAndSize(NULL, bl + kl + hl)
        cdef char *h = PyBytes_AS_STRING(head)
        memcpy(h, PyBytes_AS_STRING(before), bl)
        memcpy(h + bl, kp, kl)
        memcpy(h + bl + kl, PyBytes_AS_STRING(self.props_head), hl)
        cdef PutTemplate t = PutTemplate.__new__(PutTemplate)
        t.topic = self.topic
        t.props_head = head
        t.props_tail = self.props_tail
        t.born_host = self.born_host
        t.store_host = self.store_host
        t.queue_id = self.queue_id
        t.sys_flag = self.sys_flag
        t.uniq = self.uniq
        t.uniq_len = self.uniq_len
        t.fixed_len = self.fixed_len + kl
        t.queue_key = self.queue_key
        t.advances = self.advances
        t.wait_store = self.wait_store
        t.keys_before = None
        return t

    @property
    def props_len(self):
        return len(self.props_head) + self.uniq_len + len(self.props_tail)


def encode_put(PutTemplate t, bytes body, bytes uniq_head, int64_t counter, int32_t flag, int64_t born_ts,
               int32_t reconsume, int64_t prepared, int64_t queue_offset, int64_t phys_offset,
               int64_t store_ts):
    """The record of one message of template ``t`` (``encode_records`` of one, byte for byte):
    BODYCRC computed here, UNIQ_KEY ``uniq_head`` + 4 hex digits of ``counter`` when ``t.uniq``."""
    cdef Py_ssize_t body_len = len(body)
    cdef Py_ssize_t hl = len(t.props_head), tl = len(t.props_tail), ul = 0
    if t.uniq:
        ul = len(uniq_head)
        if ul + 4 != t.uniq_len:
            raise ValueError(f"UNIQ_KEY head of {ul} bytes; the template was made for {t.uniq_len - 4}")
    cdef int64_t size = t.fixed_len + body_len
    cdef Py_ssize_t plen = hl + t.uniq_len + tl
    cdef bytes out = PyBytes_FromStringAndSize(NULL, size)
    cdef unsigned char *p = <unsigned char *>PyBytes_AS_STRING(out)
    cdef const unsigned char *bh = <const unsigned char *>PyBytes_AS_STRING(t.born_host)
    cdef const unsigned char *sh = <const unsigned char *>PyBytes_AS_STRING(t.store_host)
    cdef const unsigned char *hp = <const unsigned char *>PyBytes_AS_STRING(t.props_head)
    cdef const unsigned char *tp = <const unsigned char *>PyBytes_AS_STRING(t.props_tail)
    cdef const unsigned char *up = <const unsigned char *>PyBytes_AS_STRING(uniq_head) if ul else NULL
    cdef uint32_t c = <uint32_t>(counter & 0xFFFF)
    # The record with empty properties, then its properties field (the last) written over.
    _write_record(p, size, <const unsigned char *>PyBytes_AS_STRING(body), body_len,
                  <const unsigned char *>PyBytes_AS_STRING(t.topic), len(t.topic), NULL, 0, t.queue_id, flag,
                  queue_offset, phys_offset, t.sys_flag, born_ts, bh, len(t.born_host), store_ts, sh,
                  len(t.store_host), reconsume, prepared)
    cdef unsigned char *q = p + size - plen
    mq_put16(q - 2, <uint16_t>plen)
    if hl:
        memcpy(q, hp, hl)
    q += hl
    if t.uniq:
        if ul:
            memcpy(q, up, ul)
        q += ul
        q[0] = _HEX[(c >> 12) & 0xF]
        q[1] = _HEX[(c >> 8) & 0xF]
        q[2] = _HEX[(c >> 4) & 0xF]
        q[3] = _HEX[c & 0xF]
        q += 4
    if tl:
        memcpy(q, tp, tl)
    return out


cdef Py_ssize_t _body_len(object b) except -1:
    if PyBytes_CheckExact(b):
        return PyBytes_GET_SIZE(b)
    if isinstance(b, str):
        raise TypeError("a message body is a str: give bytes (text.encode())")
    return len(b)


def longest_body(bodies):
    """``max(map(len, bodies))`` (0 for none): what a batch's size check needs, without a Python
    call per body (``max(map(len, ...))`` costs a batch of 32 small bodies ~0.9 us). TypeError
    for a str body (its len is no byte count, and nothing can encode it)."""
    cdef Py_ssize_t best = 0, n, k, count
    cdef object b
    if type(bodies) is list:
        count = PyList_GET_SIZE(bodies)
        for k in range(count):
            b = <object>PyList_GET_ITEM(bodies, k)
            n = _body_len(b)
            if n > best:
                best = n
        return best
    for b in bodies:
        n = _body_len(b)
        if n > best:
            best = n
    return best


def keyed_longest(bodies, keys, Py_ssize_t prefix_len):
    """For a batch whose record k has the properties of the batch then, when ``keys[k]`` is a
    non-empty str, ``prefix_len`` bytes and that key's UTF-8: ``(longest body + key part,
    longest key part)``, what the size checks need. None when ``keys`` is not a list of one
    str or None per body, or a key would not read back as it is (a lone surrogate, a
    ``\x01``/``\x02``): the caller's general path then says why. TypeError for a str body."""
    if type(bodies) is not list or type(keys) is not list or PyList_GET_SIZE(keys) != PyList_GET_SIZE(bodies):
        return None
    cdef _Keys ks = _Keys(keys)
    if not ks.clean:
        return None
    cdef Py_ssize_t k, part, rec, best = 0, best_part = 0
    for k in range(ks.count):
        part = prefix_len + ks.lens[k] if ks.lens[k] else 0
        rec = _body_len(<object>PyList_GET_ITEM(bodies, k)) + part
        if rec > best:
            best = rec
        if part > best_part:
            best_part = part
    return best, best_part


cdef inline bint _whole_in(object v, long long lo, long long hi):
    """``v`` is an int (not a bool, a float or a numpy scalar, which would be stored truncated
    or not at all) within ``lo..hi``."""
    cdef int overflow = 0
    cdef long long x
    if type(v) is not int:
        return False
    x = PyLong_AsLongLongAndOverflow(v, &overflow)
    return not overflow and lo <= x <= hi


def message_ints_ok(m):
    """``message.java_ranges_ok`` in C (every number of a message fits its record field's Java
    type; a single put asks for each message, where the Python test cost ~0.3 us)."""
    return (
        _whole_in(m.flag, -0x80000000, 0x7FFFFFFF)
        and _whole_in(m.sys_flag, -0x80000000, 0x7FFFFFFF)
        and _whole_in(m.reconsume_times, -0x80000000, 0x7FFFFFFF)
        and _whole_in(m.born_timestamp, -0x7FFFFFFFFFFFFFFF, 0x7FFFFFFFFFFFFFFF)
        and _whole_in(m.prepared_offset, -0x7FFFFFFFFFFFFFFF, 0x7FFFFFFFFFFFFFFF)
    )


from cpython.dict cimport PyDict_GetItem, PyDict_Next, PyDict_SetItem
from cpython.object cimport PyObject
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from cpython.ref cimport Py_INCREF

cdef object _PROP_UNIQ = "UNIQ_KEY"
cdef object _PROP_KEYS = "KEYS"


cdef bytes _encode_single(PutTemplate t, const char *kp, Py_ssize_t kl, bytes body, bytes uniq_head,
                          int64_t counter, int32_t flag, int64_t born_ts, int32_t reconsume, int64_t prepared,
                          int64_t queue_offset, int64_t phys_offset, int64_t store_ts):
    """``encode_put`` of a keyed template's put with KEYS value ``kp`` (``kl`` bytes; the
    template's ``keys_before`` then the key precede ``props_head``), or of an unkeyed one
    (``kp`` NULL): the record ``with_keys`` then ``encode_put`` would make, with no template
    made for the put."""
    cdef Py_ssize_t body_len = PyBytes_GET_SIZE(body)
    cdef Py_ssize_t bl = 0, hl = PyBytes_GET_SIZE(t.props_head), tl = PyBytes_GET_SIZE(t.props_tail)
    cdef Py_ssize_t ul = PyBytes_GET_SIZE(uniq_head) if t.uniq else 0
    if kp != NULL:
        bl = PyBytes_GET_SIZE(<bytes>t.keys_before)
    cdef int64_t size = t.fixed_len + kl + body_len
    cdef Py_ssize_t plen = bl + kl + hl + t.uniq_len + tl
    cdef bytes out = PyBytes_FromStringAndSize(NULL, size)
    cdef unsigned char *p = <unsigned char *>PyBytes_AS_STRING(out)
    cdef uint32_t c = <uint32_t>(counter & 0xFFFF)
    _write_record(p, size, <const unsigned char *>PyBytes_AS_STRING(body), body_len,
                  <const unsigned char *>PyBytes_AS_STRING(t.topic), PyBytes_GET_SIZE(t.topic), NULL, 0,
                  t.queue_id, flag, queue_offset, phys_offset, t.sys_flag, born_ts,
                  <const unsigned char *>PyBytes_AS_STRING(t.born_host), PyBytes_GET_SIZE(t.born_host), store_ts,
                  <const unsigned char *>PyBytes_AS_STRING(t.store_host), PyBytes_GET_SIZE(t.store_host),
                  reconsume, prepared)
    cdef unsigned char *q = p + size - plen
    mq_put16(q - 2, <uint16_t>plen)
    if bl:
        memcpy(q, PyBytes_AS_STRING(<bytes>t.keys_before), bl)
        q += bl
    if kl:
        memcpy(q, kp, kl)
        q += kl
    if hl:
        memcpy(q, PyBytes_AS_STRING(t.props_head), hl)
        q += hl
    if t.uniq:
        if ul:
            memcpy(q, PyBytes_AS_STRING(uniq_head), ul)
            q += ul
        q[0] = _HEX[(c >> 12) & 0xF]
        q[1] = _HEX[(c >> 8) & 0xF]
        q[2] = _HEX[(c >> 4) & 0xF]
        q[3] = _HEX[c & 0xF]
        q += 4
    if tl:
        memcpy(q, PyBytes_AS_STRING(t.props_tail), tl)
    return out


cdef inline int64_t _now_ms() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000


cdef extern from "structmember.h":
    ctypedef struct PyMemberDef:
        Py_ssize_t offset
        int type

cdef extern from "Python.h":
    ctypedef struct PyMemberDescrObject:
        PyMemberDef *d_member

# The fields of a Message a single put reads, in the order of SinglePut's offsets.
_PUT_FIELDS = ("topic", "body", "queue_id", "flag", "tags", "keys", "properties", "delay_level", "sys_flag",
               "born_timestamp", "born_host", "reconsume_times", "prepared_offset")
cdef enum:
    _N_PUT_FIELDS = 13
    _T_OBJECT_EX = 16  # structmember.h's T_OBJECT_EX: an object slot, AttributeError when unset

# A slot never set (getattr would raise AttributeError).
cdef object _UNSET = object()
# A field of Message's C type that was deleted (its getattr raises AttributeError too).
from dledger._ext.message_fields import DELETED as _FIELD_DELETED_OBJ
cdef object _FIELD_DELETED = _FIELD_DELETED_OBJ


cdef int _c_field_offsets(Py_ssize_t *out) except -1:
    """The offsets of MessageFields' (Message's C type's) fields in its instances, in
    _PUT_FIELDS' order: each field set to an object of its own, then looked for in the
    instance's memory (Cython lays the struct out; its field names are not C-visible here)."""
    from dledger._ext.message_fields import MESSAGE_FIELDS, MessageFields

    if tuple(MESSAGE_FIELDS) != _PUT_FIELDS:
        return False
    probes = [object() for _ in range(_N_PUT_FIELDS)]
    m = MessageFields(*probes)
    cdef PyObject **words = <PyObject **><PyObject *>m
    cdef Py_ssize_t k, j, n = MessageFields.__basicsize__ // sizeof(PyObject *)
    for k in range(_N_PUT_FIELDS):
        out[k] = -1
        for j in range(n):
            if words[j] == <PyObject *>probes[k]:
                out[k] = j * <Py_ssize_t>sizeof(PyObject *)
                break
        if out[k] < 0:
            return False
    return True


cdef int _slot_offsets(object cls, Py_ssize_t *out) except -1:
    """The instance offsets of ``cls``'s fields named in _PUT_FIELDS (each a slot of a slots
    dataclass, or a field of Message's C type not shadowed by a subclass), or False when one
    is anything else (a property, a plain attribute): the put then reads them by getattr."""
    from dledger._ext.message_fields import MessageFields

    cdef Py_ssize_t k
    cdef Py_ssize_t c_offs[_N_PUT_FIELDS]
    cdef bint c_ok = _c_field_offsets(c_offs)
    cdef PyMemberDescrObject *d
    for k, name in enumerate(_PUT_FIELDS):
        descr = None
        for base in cls.__mro__:
            if name in base.__dict__:
                descr = base.__dict__[name]
                break
        if descr is None:
            return False
        if c_ok and descr is MessageFields.__dict__.get(name):
            out[k] = c_offs[k]
            continue
        if type(descr).__name__ != "member_descriptor":
            return False
        d = <PyMemberDescrObject *>descr
        if d.d_member.type != _T_OBJECT_EX:
            return False
        out[k] = d.d_member.offset
    return True


cdef inline object _slot(object m, Py_ssize_t off):
    """The object in ``m``'s slot at ``off`` (a new reference), ``_UNSET`` when never set."""
    cdef PyObject *v = (<PyObject **>((<char *><PyObject *>m) + off))[0]
    if v == NULL or v == <PyObject *>_FIELD_DELETED:
        return _UNSET
    return <object>v


cdef class SinglePut:
    """``MessageStore.put_message`` of one message in one call (issue 40): its cached template
    (the preparer's, by the same key), its KEYS value, its UNIQ_KEY, then under the commit
    log's put lock the store time, the queue offset, the record and its append, and the
    ``PutMessageResult`` (PUT_OK, its ``AppendMessageResult``). ``put`` returns None, having done nothing, for whatever is not
    the common case (no cached template yet, a number out of range, a key that would not
    read back, a message over the size limit, a put that waits for the flush, a DLedger log
    that takes no writes now): the caller's general path then puts it, or says why not.

    What it reads of the commit log it reads on each put (the topic-queue table, the files,
    the last store time), as ``put_one`` did: recovery and role changes replace them."""

    cdef dict templates
    cdef object prep
    cdef object gen
    cdef UniqClock uniq
    cdef object config
    cdef object log
    cdef PutLock lock
    cdef object put_ok
    cdef object append_ok
    cdef int64_t max_size
    cdef int64_t file_size
    cdef int64_t end_min_blank
    cdef bint sync
    cdef bint dledger
    cdef int64_t body_offset
    # The message types whose fields the put reads from their slots (Message, MessageExt; any
    # other type by getattr), and those slots' offsets (the same in both: MessageExt adds its own
    # after Message's).
    cdef readonly object slot_types
    cdef Py_ssize_t offs[_N_PUT_FIELDS]

    def __init__(self, prep, config, log, put_ok, append_ok, int64_t max_size, bint sync,
                 int64_t end_min_blank, int64_t body_offset, tuple message_types=()):
        self.prep = prep
        self.templates = prep._put_templates
        self.gen = prep.uniq
        self.uniq = prep.uniq._clock
        self.config = config
        self.log = log
        self.lock = log.put_lock
        self.put_ok = put_ok
        self.append_ok = append_ok
        self.max_size = max_size
        self.sync = sync
        self.dledger = bool(log.dledger)
        self.file_size = 0 if self.dledger else log.file_size
        self.end_min_blank = end_min_blank
        self.body_offset = body_offset
        cdef Py_ssize_t ext[_N_PUT_FIELDS]
        ok = []
        for cls in message_types:
            if not ok:
                if _slot_offsets(cls, self.offs):
                    ok.append(cls)
            elif _slot_offsets(cls, ext) and memcmp(ext, self.offs, sizeof(ext)) == 0:
                ok.append(cls)
        self.slot_types = tuple(ok)

    def put(self, m):
        cdef object topic, body, queue_id, flag, tags, keys, props, delay, sys_flag, born, born_host
        cdef object reconsume, prepared
        cdef bint slots = type(m) in self.slot_types
        if slots:
            # Its slots read directly: thirteen getattrs cost a put ~0.3 us (issue 40).
            topic = _slot(m, self.offs[0])
            body = _slot(m, self.offs[1])
            queue_id = _slot(m, self.offs[2])
            flag = _slot(m, self.offs[3])
            tags = _slot(m, self.offs[4])
            keys = _slot(m, self.offs[5])
            props = _slot(m, self.offs[6])
            delay = _slot(m, self.offs[7])
            sys_flag = _slot(m, self.offs[8])
            born = _slot(m, self.offs[9])
            born_host = _slot(m, self.offs[10])
            reconsume = _slot(m, self.offs[11])
            prepared = _slot(m, self.offs[12])
            if (topic is _UNSET or body is _UNSET or queue_id is _UNSET or flag is _UNSET or tags is _UNSET
                    or keys is _UNSET or props is _UNSET or delay is _UNSET or sys_flag is _UNSET or born is _UNSET
                    or born_host is _UNSET or reconsume is _UNSET or prepared is _UNSET):
                slots = False  # a field deleted: getattr raises as it always did
        if not slots:
            topic, body, queue_id, flag, tags, keys = m.topic, m.body, m.queue_id, m.flag, m.tags, m.keys
            props, delay, sys_flag, born, born_host = m.properties, m.delay_level, m.sys_flag, m.born_timestamp, m.born_host
            reconsume, prepared = m.reconsume_times, m.prepared_offset
        cdef Py_ssize_t pos_ = 0, k = 0, n
        cdef PyObject *pk
        cdef PyObject *pv
        cdef tuple pkey, item, key
        if type(props) is not dict:
            return None
        n = len(<dict>props)
        pkey = PyTuple_New(n)
        while PyDict_Next(props, &pos_, &pk, &pv):
            if k >= n:
                return None
            if <object>pk == _PROP_UNIQ or <object>pk == _PROP_KEYS:
                return None
            item = (<object>pk, <object>pv)
            Py_INCREF(item)
            PyTuple_SET_ITEM(pkey, k, item)
            k += 1
        if k != n:
            return None
        cdef bint keyed
        if keys is None:
            keyed = False
        elif type(keys) is str:
            keyed = len(<str>keys) > 0
        else:
            return None  # a list of keys: the general path joins and checks it
        key = (topic, queue_id, tags, pkey, keyed, delay, sys_flag, born_host)
        cdef PyObject *found = PyDict_GetItem(self.templates, key)
        if found == NULL:
            return None
        cdef PutTemplate t = <PutTemplate>found
        if self.config.topic_queue_nums:
            return None  # the queue is checked again on each put (the general path)
        if self.prep.uniq is not self.gen:
            return None  # another UNIQ_KEY generator put in place (tests do)
        if not (_whole_in(flag, -0x80000000, 0x7FFFFFFF) and _whole_in(reconsume, -0x80000000, 0x7FFFFFFF)
                and _whole_in(born, -0x7FFFFFFFFFFFFFFF, 0x7FFFFFFFFFFFFFFF)
                and _whole_in(prepared, -0x7FFFFFFFFFFFFFFF, 0x7FFFFFFFFFFFFFFF)):
            return None
        if type(body) is not bytes:
            return None
        cdef const char *kp = NULL
        cdef Py_ssize_t kl = 0
        if keyed:
            kp = _clean_key(keys, &kl)
            if kp == NULL or t.keys_before is None:
                return None
            if (PyBytes_GET_SIZE(<bytes>t.keys_before) + kl + PyBytes_GET_SIZE(t.props_head) + t.uniq_len
                    + PyBytes_GET_SIZE(t.props_tail)) > MQ_MAX_PROPS:
                return None
        elif t.keys_before is not None:
            return None
        cdef int64_t length = t.fixed_len + kl + PyBytes_GET_SIZE(<bytes>body)
        if length > self.max_size or (not self.dledger and length + self.end_min_blank > self.file_size):
            return None
        if self.sync and t.wait_store:
            return None
        log = self.log
        if self.dledger and (not log.writable or log.appender is None or log._embedded is None):
            return None
        # From here on the put happens (or raises, with the lock let go).
        cdef int64_t now = _now_ms()
        cdef int64_t counter = self.uniq._take(1, now)
        cdef bytes head = b""
        if t.uniq:
            if self.uniq.ms == self.uniq.head_ms:
                head = self.uniq.head_raw
            else:
                ms = self.uniq.ms
                cached = self.uniq.heads(ms)
                self.uniq.head_ms, self.uniq.head_raw = ms, cached[2]
                head = cached[2]
            if PyBytes_GET_SIZE(head) + 4 != t.uniq_len:
                raise ValueError(f"UNIQ_KEY head of {len(head)} bytes; the template was made for {t.uniq_len - 4}")
        cdef int64_t born_ts = <int64_t>born
        if born_ts == 0:
            born_ts = now
        cdef int64_t queue_offset = 0, pos, wp, last
        cdef bytes rec
        cdef object qkey = t.queue_key
        self.lock.take()
        try:
            # CommitLog.putMessage's beginTimeInLock: never behind the last put's.
            now = _now_ms()
            last = log.last_store_timestamp
            if now < last:
                now = last
            table = log.topic_queue_table
            if t.advances:
                found = PyDict_GetItem(table, qkey)
                if found != NULL:
                    queue_offset = <object>found
            if self.dledger:
                rec = _encode_single(t, kp, kl, <bytes>body, head, counter, <int32_t>flag, born_ts,
                                     <int32_t>reconsume, <int64_t>prepared, queue_offset, 0, now)
                # The single member's append, committed as appended; ``on_committed`` inline, as
                # ``_put_framed`` does it (two Python calls fewer in the locked section).
                embedded = log._embedded
                try:
                    epos = embedded.append_one_committed(rec, log.term)
                except Exception as exc:
                    log._append_refused(exc)  # a DLedgerError raised as its PutRefused
                    raise
                pos = <int64_t>epos + self.body_offset
                end = pos + PyBytes_GET_SIZE(rec)
                if end > <int64_t>log._committed_pos:
                    log._committed_pos = end
                    wake = log.wakeup
                    if wake is not None:
                        wake()
            else:
                files = log.files
                f = files.last_file(0, True)
                wp = f.wrote_position
                if wp + length + self.end_min_blank > f.file_size:
                    log._end_file(f)
                    f = files.last_file(0, True)
                    wp = f.wrote_position
                pos = f.file_from_offset + wp
                rec = _encode_single(t, kp, kl, <bytes>body, head, counter, <int32_t>flag, born_ts,
                                     <int32_t>reconsume, <int64_t>prepared, queue_offset, pos, now)
                if f.append(rec) < 0:
                    raise OSError(f"{f.path}: the record did not fit where it was placed")
            if t.advances:
                PyDict_SetItem(table, qkey, queue_offset + 1)
            log.last_store_timestamp = now
        finally:
            self.lock.give()
        return _put_ok(self.put_ok, self.append_ok, pos, length, now, queue_offset, t.store_host)
