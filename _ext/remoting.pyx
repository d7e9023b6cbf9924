# cython: language_level=3
"""Kernels of RocketMQ's remoting protocol: the SEND_BATCH_MESSAGE body
(``MessageDecoder.encodeMessages``) split into the two packed lists the member's batch send
path takes, in two passes over the buffer with the GIL released, no object per message; the
frames of a connection's read buffer split and made into commands (no bytes object per frame:
the header is read in place, the body copied once); the answers' headers written (JSON as
fastjson writes it, or ROCKETMQ binary).
"""

import numpy as np
cimport numpy as cnp
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING

cnp.import_array()

DEF HEAD = 20  # totalSize, magicCode, bodyCRC, flag, bodyLen (int32 each)


cdef inline int64_t _i32(const uint8_t* p) noexcept nogil:
    return <int>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | <uint32_t>p[3])


cdef inline int64_t _i16(const uint8_t* p) noexcept nogil:
    return <short>((<uint32_t>p[0] << 8) | <uint32_t>p[1])


def decode_messages(buf, const uint8_t[::1] tail):
    """``(bodies, body_offsets, props, props_offsets, flag, bad)`` of an encodeMessages body:
    the bodies joined and their int64 offsets (a leading 0, one end a message: PackedBodies'
    form, so the send path makes no array of its own), the properties joined and theirs, each
    properties string followed by ``tail`` (which starts with the \\x02 separator; an empty
    string gets ``tail`` without it), the last message's flag. ``bad`` is -1, or the byte
    position of the first message whose sizes do not fit (then the rest are empty)."""
    cdef const uint8_t[::1] b = memoryview(buf).cast("B")
    cdef Py_ssize_t n = b.shape[0], pos = 0, count = 0, bad = -1
    cdef int64_t total, blen, plen, body_bytes = 0, props_bytes = 0
    cdef Py_ssize_t tl = tail.shape[0]
    cdef int flag = 0
    cdef const uint8_t* p
    with nogil:
        while pos < n:
            if n - pos < HEAD + 2:
                bad = pos
                break
            p = &b[pos]
            total = _i32(p)
            blen = _i32(p + 16)
            if total < HEAD + 2 or total > n - pos or blen < 0 or blen > total - HEAD - 2:
                bad = pos
                break
            plen = _i16(p + HEAD + blen)
            if plen < 0 or HEAD + blen + 2 + plen != total:
                bad = pos
                break
            body_bytes += blen
            props_bytes += plen + (tl if plen > 0 else tl - 1 if tl > 0 else 0)
            count += 1
            pos += total
    if bad >= 0 or count == 0:
        return b"", np.zeros(1, np.int64), b"", np.zeros(1, np.int64), 0, (bad if bad >= 0 else 0)
    bodies = np.empty(body_bytes, np.uint8)
    props = np.empty(props_bytes, np.uint8)
    boffs = np.empty(count + 1, np.int64)
    poffs = np.empty(count + 1, np.int64)
    cdef uint8_t[::1] bo = bodies
    cdef uint8_t[::1] po = props
    cdef int64_t[::1] bs = boffs
    cdef int64_t[::1] ps = poffs
    bs[0] = 0
    ps[0] = 0
    cdef Py_ssize_t k = 0, bw = 0, pw = 0, start
    cdef int64_t add
    pos = 0
    with nogil:
        while k < count:
            p = &b[pos]
            total = _i32(p)
            flag = <int>_i32(p + 12)
            blen = _i32(p + 16)
            if blen:
                memcpy(&bo[bw], p + HEAD, blen)
            bw += blen
            bs[k + 1] = bw
            plen = _i16(p + HEAD + blen)
            if plen:
                memcpy(&po[pw], p + HEAD + blen + 2, plen)
            pw += plen
            add = 0
            if tl > 0:
                start = 0 if plen > 0 else 1
                add = tl - start
                if add:
                    memcpy(&po[pw], &tail[start], add)
                pw += add
            ps[k + 1] = pw
            pos += total
            k += 1
    return bodies, boffs, props, poffs, flag, -1


cdef const char* _HEX_UPPER = b"0123456789ABCDEF"


def offset_msg_ids(bytes host_hex, const int64_t[::1] phys, int64_t add):
    """MessageDecoder.createMessageId of each ``phys[k] + add``, comma-joined (the msgId of a
    SEND_BATCH_MESSAGE answer): ``host_hex`` (the store host's upper-case hex) then the offset's
    16 upper-case hex digits, written in one string (no string a message)."""
    cdef Py_ssize_t n = phys.shape[0], h = len(host_hex), k
    cdef int j
    if n == 0:
        return ""
    out = PyBytes_FromStringAndSize(NULL, n * (h + 17) - 1)
    cdef char* o = PyBytes_AS_STRING(out)
    cdef const char* hp = host_hex
    cdef uint64_t v
    for k in range(n):
        if k:
            o[0] = 44  # ','
            o += 1
        memcpy(o, hp, h)
        o += h
        v = <uint64_t>(phys[k] + add)
        for j in range(15, -1, -1):
            o[j] = _HEX_UPPER[v & 15]
            v >>= 4
        o += 16
    return out.decode("ascii")


cdef inline str _utf8(const uint8_t* p, Py_ssize_t n):
    return (<const char*>p)[:n].decode("utf-8")


cdef tuple _BAD = (0, 0, 0, 0, 0, None, None)


cdef tuple _decode_header(const uint8_t* p, Py_ssize_t n):
    """RocketMQSerializable.rocketMQProtocolDecode of a whole binary header: ``(code, language,
    version, opaque, flag, remark, ext_fields, error)`` (see decode_header)."""
    cdef Py_ssize_t pos = 13, end
    cdef int64_t rlen, elen, klen, vlen
    if n < 21:
        return _BAD + (f"ROCKETMQ header of {n} bytes is cut short",)
    code = <short>_i16(p)
    language = <signed char>p[2]
    version = <short>_i16(p + 3)
    opaque = <int>_i32(p + 5)
    flag = <int>_i32(p + 9)
    remark = None
    ext = None
    try:
        rlen = _i32(p + pos)
        pos += 4
        if rlen:
            if rlen < 0 or rlen > n - pos:
                return _BAD + (f"remark length {rlen} past the header of {n} bytes",)
            remark = _utf8(p + pos, rlen)
            pos += rlen
        if n - pos < 4:
            return _BAD + (f"ROCKETMQ header of {n} bytes is cut short",)
        elen = _i32(p + pos)
        pos += 4
        if elen < 0 or elen > n - pos:
            return _BAD + (f"extFields length {elen} past the header of {n} bytes",)
        if elen > 0:
            ext = {}
            end = pos + elen
            while pos < end:
                if end - pos < 2:
                    return _BAD + ("extFields key length past the map",)
                klen = _i16(p + pos)
                pos += 2
                if klen < 0 or klen > end - pos:
                    return _BAD + (f"extFields key length {klen} past the map",)
                key = _utf8(p + pos, klen)
                pos += klen
                if end - pos < 4:
                    return _BAD + ("extFields value length past the map",)
                vlen = _i32(p + pos)
                pos += 4
                if vlen < 0 or vlen > end - pos:
                    return _BAD + (f"extFields value length {vlen} past the map",)
                ext[key] = _utf8(p + pos, vlen)
                pos += vlen
    except UnicodeDecodeError as exc:
        return _BAD + (f"a header string is not UTF-8: {exc}",)
    if pos != n:
        return _BAD + (f"ROCKETMQ header has {n - pos} bytes past its fields",)
    return (code, language, version, opaque, flag, remark, ext, None)


def decode_header(buf):
    """RocketMQSerializable.rocketMQProtocolDecode of a whole binary header: ``(code, language,
    version, opaque, flag, remark, ext_fields, error)``. ``error`` is None, or why the header
    does not parse (a length past the header, bytes over, a string not UTF-8); remark None and
    ext_fields None when their length is 0 (Java's null)."""
    cdef const uint8_t[::1] b = memoryview(buf).cast("B")
    if b.shape[0] == 0:
        return _decode_header(NULL, 0)
    return _decode_header(&b[0], b.shape[0])


# What the command decoder makes its commands with, set once by remoting_command (configure).
cdef object _Command = None
cdef object _json_loads = None
cdef object _java_text = None
cdef dict _lang_names = None
cdef object _lang_other = None
cdef object _json_type = None
cdef object _rocketmq_type = None
cdef object _Error = None


def configure(command, json_loads, java_text, dict lang_names, lang_other, json_type, rocketmq_type, error):
    global _Command, _json_loads, _java_text, _lang_names, _lang_other, _json_type, _rocketmq_type, _Error
    _Command, _json_loads, _java_text, _lang_names = command, json_loads, java_text, lang_names
    _lang_other, _json_type, _rocketmq_type, _Error = lang_other, json_type, rocketmq_type, error


cdef object _from_json(object obj, object body):
    """RemotingSerializable.decode's bean made into a command (fastjson's reading: missing
    fields 0/JAVA/null, any scalar extFields value as its text)."""
    if type(obj) is not dict:
        raise _Error("a JSON header must be an object")
    cdef dict d = <dict>obj
    try:
        code = int(d.get("code", 0))
        lang_v = d.get("language", "JAVA")
        lang = _lang_names.get(lang_v, _lang_other) if isinstance(lang_v, str) else int(lang_v)
        version = int(d.get("version", 0))
        opaque = int(d.get("opaque", 0))
        flag = int(d.get("flag", 0))
    except (TypeError, ValueError) as exc:
        raise _Error(f"JSON header field: {exc}") from None
    remark = d.get("remark")
    if remark is not None:
        remark = str(remark)
    ext_v = d.get("extFields")
    cdef dict ext = None
    if type(ext_v) is dict:
        ext = {}
        for k, v in (<dict>ext_v).items():
            if v is None:
                continue
            ext[k if type(k) is str else str(k)] = v if type(v) is str else _java_text(v)
    elif ext_v is not None:
        raise _Error("extFields must be an object")
    return _Command(code, ext, body, remark, opaque, flag, version, lang, _json_type)


cdef class _JsonCursor:
    cdef const uint8_t* p
    cdef Py_ssize_t pos, n


cdef object _NOT_FAST = object()


cdef object _json_str(_JsonCursor c):
    """A JSON string at the cursor (on its opening quote) without escapes or control
    characters; _NOT_FAST for any other."""
    cdef Py_ssize_t start = c.pos + 1, i = start
    cdef uint8_t ch
    while i < c.n:
        ch = c.p[i]
        if ch == 34:
            c.pos = i + 1
            return (<const char*>c.p + start)[: i - start].decode("utf-8")
        if ch == 92 or ch < 0x20:
            return _NOT_FAST
        i += 1
    return _NOT_FAST


cdef object _json_value(_JsonCursor c, bint nested):
    """A string, an integer of at most 18 digits, true/false/null, or (not ``nested``) an
    object of them; _NOT_FAST for anything else (floats, arrays, escapes, spaces...)."""
    cdef Py_ssize_t i, digits
    cdef int64_t v = 0
    cdef bint neg = False
    cdef uint8_t ch
    if c.pos >= c.n:
        return _NOT_FAST
    ch = c.p[c.pos]
    if ch == 34:
        return _json_str(c)
    if ch == 45 or 48 <= ch <= 57:
        i = c.pos
        if ch == 45:
            neg = True
            i += 1
        digits = 0
        while i < c.n and 48 <= c.p[i] <= 57:
            v = v * 10 + (c.p[i] - 48)
            digits += 1
            i += 1
            if digits > 18:
                return _NOT_FAST
        if digits == 0 or (digits > 1 and c.p[i - digits] == 48):
            return _NOT_FAST
        if i < c.n and (c.p[i] == 46 or c.p[i] == 101 or c.p[i] == 69):
            return _NOT_FAST  # a fraction or an exponent: json's float
        c.pos = i
        return -v if neg else v
    if ch == 123 and not nested:
        return _json_object(c, True)
    if c.n - c.pos >= 4 and memcmp(c.p + c.pos, b"true", 4) == 0:
        c.pos += 4
        return True
    if c.n - c.pos >= 5 and memcmp(c.p + c.pos, b"false", 5) == 0:
        c.pos += 5
        return False
    if c.n - c.pos >= 4 and memcmp(c.p + c.pos, b"null", 4) == 0:
        c.pos += 4
        return None
    return _NOT_FAST


cdef object _json_object(_JsonCursor c, bint nested):
    """A compact JSON object at the cursor (on its ``{``); _NOT_FAST when it is not in the
    fast subset."""
    cdef dict d = {}
    c.pos += 1
    if c.pos < c.n and c.p[c.pos] == 125:
        c.pos += 1
        return d
    while True:
        if c.pos >= c.n or c.p[c.pos] != 34:
            return _NOT_FAST
        key = _json_str(c)
        if key is _NOT_FAST or c.pos >= c.n or c.p[c.pos] != 58:
            return _NOT_FAST
        c.pos += 1
        value = _json_value(c, nested)
        if value is _NOT_FAST:
            return _NOT_FAST
        d[key] = value
        if c.pos >= c.n:
            return _NOT_FAST
        if c.p[c.pos] == 44:
            c.pos += 1
            continue
        if c.p[c.pos] == 125:
            c.pos += 1
            return d
        return _NOT_FAST


cdef object _json_header(const uint8_t* p, Py_ssize_t n):
    """A JSON header as json.loads reads it. What fastjson writes (compact, strings without
    escapes, integers, extFields of strings) is read here; anything else by json.loads."""
    cdef _JsonCursor c = _JsonCursor()
    c.p, c.pos, c.n = p, 0, n
    if n > 0 and p[0] == 123:
        try:
            obj = _json_object(c, False)
        except UnicodeDecodeError:
            obj = _NOT_FAST  # json.loads says why
        if obj is not _NOT_FAST and c.pos == n:
            return obj
    return _json_loads(PyBytes_FromStringAndSize(<const char*>p, n))


def json_header(buf):
    """What a command's JSON header reads as (the kernel's reading; json.loads's result)."""
    cdef const uint8_t[::1] b = memoryview(buf).cast("B")
    if b.shape[0] == 0:
        return _json_loads(b"")
    return _json_header(&b[0], b.shape[0])


cdef object _command(const uint8_t* p, Py_ssize_t n, object body_owner, Py_ssize_t body_at):
    """The command of one frame (without its length field) at ``p``; its body a bytes copy, or
    when ``body_owner`` is given a view of it from ``body_at`` on (the frame's own buffer)."""
    cdef int64_t mark, hlen
    cdef int stype
    if n < 4:
        raise _Error(f"frame of {n} bytes has no header length")
    mark = _i32(p)
    hlen = mark & 0xFFFFFF
    stype = (mark >> 24) & 0xFF
    if hlen > n - 4:
        raise _Error(f"decode error, bad header length: {hlen} in a frame of {n}")
    if body_owner is None:
        body = PyBytes_FromStringAndSize(<const char*>p + 4 + hlen, n - 4 - hlen)
    else:
        body = body_owner[body_at + 4 + hlen : body_at + n]
    if stype == 1:
        h = _decode_header(p + 4, hlen)
        if h[7] is not None:
            raise _Error(h[7])
        return _Command(h[0], h[6], body, h[5], h[3], h[4], h[2], h[1], _rocketmq_type)
    if stype != 0:
        raise _Error(f"serialize type {stype} is neither JSON (0) nor ROCKETMQ (1)")
    return _from_json(_json_header(p + 4, hlen), body)


def decode_command(buf, view=None):
    """The command of one frame without its length field; its body a view of ``view`` (the
    same memory as ``buf``) when given, else a copy. RemotingCommandException when it does not
    decode."""
    cdef const uint8_t[::1] b = memoryview(buf).cast("B")
    if b.shape[0] == 0:
        raise _Error("frame of 0 bytes has no header length")
    return _command(&b[0], b.shape[0], view, 0)


def decode_frames(buf, Py_ssize_t start, Py_ssize_t end, int64_t max_frame):
    """The frames whole in ``buf[start:end]`` (int32 length, then the frame) made into
    commands: ``(start, need, commands, error)``: where the first frame not yet whole starts,
    the bytes from there it needs (4 when its length field is not whole), the commands in
    order, and the exception that stopped the split (a length over ``max_frame`` counting the
    length field, or negative: FrameTooLong's message; a frame that does not decode) or None.
    The commands before a bad frame are returned with it, as Netty hands them on before it."""
    cdef const uint8_t[::1] b = memoryview(buf).cast("B")
    cdef int64_t length
    cdef Py_ssize_t need = 4
    cdef list out = []
    cdef const uint8_t* p
    while end - start >= 4:
        p = &b[start]
        length = _i32(p)
        if length < 0 or length + 4 > max_frame:
            if length < 0:
                return start, 4, out, f"negative frame length {length}"
            return start, 4, out, f"frame length {length} (+4): the limit is {max_frame} bytes"
        if end - start - 4 < length:
            need = 4 + length
            break
        try:
            out.append(_command(p + 4, length, None, 0))
        except Exception as exc:
            return start, 4, out, exc
        start += 4 + length
    return start, need, out, None


cdef inline Py_ssize_t _put_json_str(uint8_t* o, bytes s) noexcept:
    """``s`` (UTF-8) as a JSON string as json.dumps(ensure_ascii=False) writes it into ``o``
    (None: its length)."""
    cdef const uint8_t* p = <const uint8_t*>PyBytes_AS_STRING(s)
    cdef Py_ssize_t n = len(s), i, w = 0
    cdef uint8_t c
    if o != NULL:
        o[0] = 34
    w = 1
    for i in range(n):
        c = p[i]
        if c >= 0x20 and c != 34 and c != 92:
            if o != NULL:
                o[w] = c
            w += 1
        elif c == 34 or c == 92 or c == 8 or c == 9 or c == 10 or c == 12 or c == 13:
            if o != NULL:
                o[w] = 92
                o[w + 1] = (c if c == 34 or c == 92 else
                            98 if c == 8 else 116 if c == 9 else 110 if c == 10 else 102 if c == 12 else 114)
            w += 2
        else:
            if o != NULL:
                o[w] = 92
                o[w + 1] = 117
                o[w + 2] = 48
                o[w + 3] = 48
                o[w + 4] = b"0123456789abcdef"[c >> 4]
                o[w + 5] = b"0123456789abcdef"[c & 15]
            w += 6
    if o != NULL:
        o[w] = 34
    return w + 1


def encode_json_header(int64_t code, dict ext, int64_t flag, str language, int64_t opaque, remark, int64_t version):
    """A command's JSON header as RemotingSerializable (fastjson) writes it: the properties
    sorted, null ones left out, compact, UTF-8 unescaped; extFields in its own order, null
    values left out. The same bytes as remoting_serializable.encode_sorted of the bean."""
    cdef list parts = []
    cdef list strs = []
    cdef Py_ssize_t total = 0, w = 0, i
    head = f'{{"code":{code},'.encode()
    # extFields: the keys and values written as JSON strings (their bytes measured first, then
    # written into one buffer).
    if ext is not None:
        for k, v in ext.items():
            if type(k) is not str or type(v) is not str:
                return None  # not a map of strings: the general encoder writes it
            strs.append((<str>k).encode("utf-8"))
            strs.append((<str>v).encode("utf-8"))
    mid = f'"flag":{flag},"language":"{language}","opaque":{opaque},'.encode()
    if remark is not None:
        rb = (<str>remark).encode("utf-8")
    tail = f'"serializeTypeCurrentRPC":"JSON","version":{version}}}'.encode()
    total = len(head) + len(mid) + len(tail)
    if ext is not None:
        total += len('"extFields":{},')
        for i in range(len(strs)):
            total += _put_json_str(NULL, <bytes>strs[i]) + 1  # and its ':' or ','
        if strs:
            total -= 1
    if remark is not None:
        total += len('"remark":,') + _put_json_str(NULL, rb)
    out = PyBytes_FromStringAndSize(NULL, total)
    cdef uint8_t* o = <uint8_t*>PyBytes_AS_STRING(out)
    memcpy(o, PyBytes_AS_STRING(head), len(head))
    w = len(head)
    if ext is not None:
        memcpy(o + w, b'"extFields":{', 13)
        w += 13
        for i in range(len(strs)):
            w += _put_json_str(o + w, <bytes>strs[i])
            if i + 1 < len(strs):
                o[w] = 58 if i % 2 == 0 else 44
                w += 1
        memcpy(o + w, b"},", 2)
        w += 2
    memcpy(o + w, PyBytes_AS_STRING(mid), len(mid))
    w += len(mid)
    if remark is not None:
        memcpy(o + w, b'"remark":', 9)
        w += 9
        w += _put_json_str(o + w, rb)
        o[w] = 44
        w += 1
    memcpy(o + w, PyBytes_AS_STRING(tail), len(tail))
    w += len(tail)
    assert w == total
    return out


cdef inline void _put16(uint8_t* o, int64_t v) noexcept:
    o[0] = <uint8_t>((v >> 8) & 0xFF)
    o[1] = <uint8_t>(v & 0xFF)


cdef inline void _put32(uint8_t* o, int64_t v) noexcept:
    o[0] = <uint8_t>((v >> 24) & 0xFF)
    o[1] = <uint8_t>((v >> 16) & 0xFF)
    o[2] = <uint8_t>((v >> 8) & 0xFF)
    o[3] = <uint8_t>(v & 0xFF)


def encode_binary_header(int64_t code, int64_t language, int64_t version, int64_t opaque, int64_t flag, remark, dict ext):
    """RocketMQSerializable.rocketMQProtocolEncode: code and version int16, language a byte,
    opaque and flag int32, the remark and the extFields (null keys and values left out)."""
    if not -0x8000 <= code <= 0x7FFF:
        raise _Error(f"{code} does not fit the header's int16")
    if not -0x80 <= language <= 0x7F:
        raise _Error(f"language {language} does not fit a byte")
    if not -0x8000 <= version <= 0x7FFF:
        raise _Error(f"{version} does not fit the header's int16")
    for v in (opaque, flag):
        if not -0x80000000 <= v <= 0x7FFFFFFF:
            raise _Error(f"{v} does not fit the header's int32")
    rb = (<str>remark).encode("utf-8") if remark else b""
    cdef list strs = []
    cdef Py_ssize_t total = 13 + 4 + len(rb) + 4, i, w, ln
    if ext:
        for k, v in ext.items():
            if k is None or v is None:
                continue
            kb = (<str>k).encode("utf-8")
            if len(kb) > 0x7FFF:
                raise _Error(f"extFields key of {len(kb)} bytes: a short length holds 32767")
            vb = (<str>v).encode("utf-8")
            strs.append(kb)
            strs.append(vb)
            total += 2 + len(kb) + 4 + len(vb)
    out = PyBytes_FromStringAndSize(NULL, total)
    cdef uint8_t* o = <uint8_t*>PyBytes_AS_STRING(out)
    _put16(o, code)
    o[2] = <uint8_t>(language & 0xFF)
    _put16(o + 3, version)
    _put32(o + 5, opaque)
    _put32(o + 9, flag)
    _put32(o + 13, len(rb))
    memcpy(o + 17, PyBytes_AS_STRING(rb), len(rb))
    w = 17 + len(rb)
    _put32(o + w, total - w - 4)
    w += 4
    for i in range(0, len(strs), 2):
        ln = len(<bytes>strs[i])
        _put16(o + w, ln)
        memcpy(o + w + 2, PyBytes_AS_STRING(strs[i]), ln)
        w += 2 + ln
        ln = len(<bytes>strs[i + 1])
        _put32(o + w, ln)
        memcpy(o + w + 4, PyBytes_AS_STRING(strs[i + 1]), ln)
        w += 4 + ln
    assert w == total
    return out
