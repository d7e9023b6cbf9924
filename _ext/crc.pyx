# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""CRC-32 (IEEE 802.3 / zlib) kernels.

``crc32(data, value)`` returns exactly ``zlib.crc32(data, value)``, using the fastest
path this CPU offers, chosen at run time (see ``_ext/crc32_impl.h``): VPCLMULQDQ or
PCLMULQDQ folding on x86_64, the ARMv8 CRC32 instructions on aarch64, slicing-by-16 tables elsewhere.

Other Cython kernels use the same code directly with
``cdef extern from "crc32_impl.h" nogil: uint32_t dl_crc32(uint32_t, const unsigned char *, size_t)``.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_CheckBuffer, PyObject_GetBuffer
from libc.stdint cimport int64_t, uint32_t

import numpy as np

cdef extern from "Python.h":
    unsigned long PyLong_AsUnsignedLongMask(object) except? <unsigned long>-1

cdef extern from "crc32_impl.h" nogil:
    uint32_t dl_crc32(uint32_t crc, const unsigned char *buf, size_t len)
    const char *dl_crc32_impl()
    int dl_crc32_force(const char *name)
    const char *dl_crc32_usable_at(size_t i)

cdef enum:
    # Below this size the cost of releasing and re-taking the GIL outweighs the work.
    GIL_RELEASE_THRESHOLD = 4096


cdef int _get_buffer(object data, Py_buffer *view, str what) except -1:
    """Fill *view* with a contiguous byte view of *data* (any dtype/format)."""
    if not PyObject_CheckBuffer(data):
        raise TypeError(f"{what}: a bytes-like object is required, not '{type(data).__name__}'")
    try:
        PyObject_GetBuffer(data, view, PyBUF_SIMPLE)
    except (BufferError, ValueError) as exc:
        raise BufferError(
            f"{what}: data must be a C-contiguous buffer, could not get a plain byte view of "
            f"'{type(data).__name__}' ({exc}); copy non-contiguous data first, e.g. "
            f"bytes(memoryview(x)) or numpy.ascontiguousarray(x)"
        ) from exc
    return 0


def crc32(data, value=0):
    """CRC-32 of *data* continuing from *value*; identical to ``zlib.crc32(data, value)``.

    *data* is any C-contiguous buffer (bytes, bytearray, memoryview, numpy array, mmap, ...);
    *value* is taken modulo 2**32 like zlib does.  The GIL is released for buffers of
    4 KiB or more.
    """
    cdef Py_buffer view
    cdef uint32_t crc = <uint32_t>(PyLong_AsUnsignedLongMask(value) & 0xFFFFFFFFUL)
    cdef const unsigned char *p
    cdef size_t n
    _get_buffer(data, &view, "crc32")
    p = <const unsigned char *>view.buf
    n = <size_t>view.len
    try:
        if n >= GIL_RELEASE_THRESHOLD:
            with nogil:
                crc = dl_crc32(crc, p, n)
        else:
            crc = dl_crc32(crc, p, n)
    finally:
        PyBuffer_Release(&view)
    return crc


cdef object _index_array(object values, str name):
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"crc32_many: {name} must be 1-D, got shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        raise TypeError(f"crc32_many: {name} must be an integer array, got dtype {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=np.int64)


def crc32_many(buf, offsets, lengths):
    """CRC-32 (from 0) of every slice ``buf[offsets[i] : offsets[i] + lengths[i]]``.

    Returns a numpy ``uint32`` array with one value per slice, equal to
    ``zlib.crc32(buf[o:o+l])``.  *offsets* and *lengths* are 1-D integer arrays of the
    same length (converted to int64).  Every slice must lie inside *buf*, otherwise
    ``ValueError`` names the first bad one.  Runs without the GIL.
    """
    off_arr = _index_array(offsets, "offsets")
    len_arr = _index_array(lengths, "lengths")
    if off_arr.shape[0] != len_arr.shape[0]:
        raise ValueError(
            f"crc32_many: offsets and lengths differ in length ({off_arr.shape[0]} != {len_arr.shape[0]})"
        )
    cdef Py_ssize_t count = off_arr.shape[0]
    out = np.empty(count, dtype=np.uint32)
    cdef const int64_t[::1] off = off_arr
    cdef const int64_t[::1] lens = len_arr
    cdef uint32_t[::1] res = out
    cdef Py_buffer view
    cdef const unsigned char *base
    cdef int64_t size, o, ln
    cdef Py_ssize_t i, bad = -1
    _get_buffer(buf, &view, "crc32_many")
    base = <const unsigned char *>view.buf
    size = <int64_t>view.len
    try:
        with nogil:
            for i in range(count):
                o = off[i]
                ln = lens[i]
                if o < 0 or ln < 0 or o > size or ln > size - o:
                    bad = i
                    break
                res[i] = dl_crc32(0, base + o, <size_t>ln)
    finally:
        PyBuffer_Release(&view)
    if bad >= 0:
        raise ValueError(
            f"crc32_many: slice {bad} (offset={off[bad]}, length={lens[bad]}) is out of bounds "
            f"for a buffer of {size} bytes"
        )
    return out


def implementation():
    """Name of the CRC-32 path in use: ``"vpclmul"``, ``"pclmul"``, ``"armv8-crc"`` or ``"table"``."""
    return dl_crc32_impl().decode("ascii")


def implementations():
    """The CRC-32 paths this machine runs, fastest first (the last is always ``"table"``)."""
    names = []
    cdef const char *name = dl_crc32_usable_at(0)
    while name != NULL:
        names.append(name.decode("ascii"))
        name = dl_crc32_usable_at(len(names))
    return names


def _force_impl(str name):
    """TEST ONLY: select the CRC-32 path of this module.

    *name* is ``"table"``, ``"pclmul"``, ``"vpclmul"``, ``"armv8-crc"`` or ``"auto"`` (re-detect).
    Raises ``ValueError`` for an unknown name or one this CPU cannot run.  Affects this
    module only (other kernels including ``crc32_impl.h`` keep their own choice); the
    ``DLEDGER_CRC32_IMPL`` environment variable does the same for every module at its
    first CRC call.
    """
    cdef bytes b = name.encode("ascii")
    cdef int status = dl_crc32_force(b)
    if status == -1:
        raise ValueError(f"unknown CRC-32 implementation {name!r}")
    if status != 0:
        raise ValueError(f"CRC-32 implementation {name!r} is not supported on this machine")
