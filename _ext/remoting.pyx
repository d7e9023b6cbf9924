# cython: language_level=3
"""Kernels of RocketMQ's remoting protocol: the SEND_BATCH_MESSAGE body
(``MessageDecoder.encodeMessages``) split into the two packed lists the member's batch send
path takes, in two passes over the buffer with the GIL released, no object per message.
"""

import numpy as np
cimport numpy as cnp
from libc.stdint cimport int64_t, uint8_t, uint32_t
from libc.string cimport memcpy

cnp.import_array()

DEF HEAD = 20  # totalSize, magicCode, bodyCRC, flag, bodyLen (int32 each)


cdef inline int64_t _i32(const uint8_t* p) noexcept nogil:
    return <int>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | <uint32_t>p[3])


cdef inline int64_t _i16(const uint8_t* p) noexcept nogil:
    return <short>((<uint32_t>p[0] << 8) | <uint32_t>p[1])


def decode_messages(buf, const uint8_t[::1] tail):
    """``(bodies, body_sizes, props, props_sizes, flag, bad)`` of an encodeMessages body:
    the bodies joined and their uint32 sizes, the properties joined and their sizes, each
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
        return b"", np.zeros(0, np.uint32), b"", np.zeros(0, np.uint32), 0, (bad if bad >= 0 else 0)
    bodies = np.empty(body_bytes, np.uint8)
    props = np.empty(props_bytes, np.uint8)
    bsizes = np.empty(count, np.uint32)
    psizes = np.empty(count, np.uint32)
    cdef uint8_t[::1] bo = bodies
    cdef uint8_t[::1] po = props
    cdef uint32_t[::1] bs = bsizes
    cdef uint32_t[::1] ps = psizes
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
            bs[k] = <uint32_t>blen
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
            ps[k] = <uint32_t>(plen + add)
            pos += total
            k += 1
    return bodies, bsizes, props, psizes, flag, -1


cdef inline str _utf8(const uint8_t* p, Py_ssize_t n):
    return (<const char*>p)[:n].decode("utf-8")


def decode_header(buf):
    """RocketMQSerializable.rocketMQProtocolDecode of a whole binary header: ``(code, language,
    version, opaque, flag, remark, ext_fields, error)``. ``error`` is None, or why the header
    does not parse (a length past the header, bytes over, a string not UTF-8); remark None and
    ext_fields None when their length is 0 (Java's null)."""
    cdef const uint8_t[::1] b = memoryview(buf).cast("B")
    cdef Py_ssize_t n = b.shape[0], pos = 13, end
    cdef int64_t rlen, elen, klen, vlen
    cdef const uint8_t* p
    if n < 21:
        return 0, 0, 0, 0, 0, None, None, f"ROCKETMQ header of {n} bytes is cut short"
    p = &b[0]
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
                return 0, 0, 0, 0, 0, None, None, f"remark length {rlen} past the header of {n} bytes"
            remark = _utf8(p + pos, rlen)
            pos += rlen
        if n - pos < 4:
            return 0, 0, 0, 0, 0, None, None, f"ROCKETMQ header of {n} bytes is cut short"
        elen = _i32(p + pos)
        pos += 4
        if elen < 0 or elen > n - pos:
            return 0, 0, 0, 0, 0, None, None, f"extFields length {elen} past the header of {n} bytes"
        if elen > 0:
            ext = {}
            end = pos + elen
            while pos < end:
                if end - pos < 2:
                    return 0, 0, 0, 0, 0, None, None, "extFields key length past the map"
                klen = _i16(p + pos)
                pos += 2
                if klen < 0 or klen > end - pos:
                    return 0, 0, 0, 0, 0, None, None, f"extFields key length {klen} past the map"
                key = _utf8(p + pos, klen)
                pos += klen
                if end - pos < 4:
                    return 0, 0, 0, 0, 0, None, None, "extFields value length past the map"
                vlen = _i32(p + pos)
                pos += 4
                if vlen < 0 or vlen > end - pos:
                    return 0, 0, 0, 0, 0, None, None, f"extFields value length {vlen} past the map"
                ext[key] = _utf8(p + pos, vlen)
                pos += vlen
    except UnicodeDecodeError as exc:
        return 0, 0, 0, 0, 0, None, None, f"a header string is not UTF-8: {exc}"
    if pos != n:
        return 0, 0, 0, 0, 0, None, None, f"ROCKETMQ header has {n - pos} bytes past its fields"
    return code, language, version, opaque, flag, remark, ext, None
