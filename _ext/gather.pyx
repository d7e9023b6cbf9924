# cython: language_level=3
"""Gather of entry bodies into one Arrow-ready buffer (the reader's hot path).

Bodies of consecutive entries sit between 48-byte headers, so an Arrow binary column needs
them copied together; this does it in one pass with the GIL released and returns the data
buffer and the int32 value offsets, so building the column costs no Python object per row.
"""

import numpy as np
cimport numpy as cnp
from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.string cimport memcpy

cnp.import_array()

# Arrow's binary type has int32 offsets: one column chunk holds less than 2 GiB of values.
MAX_BINARY_BYTES = 2147483647


def gather(buf, const int64_t[::1] offsets, const int32_t[::1] lengths):
    """Copy ``buf[offsets[k]:offsets[k] + lengths[k]]`` for every k into one buffer.

    Returns ``(data, value_offsets)``: a uint8 array holding the slices back to back and an
    int32 array of ``len(offsets) + 1`` starts, the two buffers of an Arrow binary array.
    Raises ValueError if a slice falls outside ``buf`` or the total exceeds 2 GiB - 1.
    """
    cdef const uint8_t[::1] b = memoryview(buf).cast("B")
    cdef Py_ssize_t n = offsets.shape[0], k
    if lengths.shape[0] != n:
        raise ValueError(f"{n} offsets but {lengths.shape[0]} lengths")
    cdef int64_t size = b.shape[0], total = 0, o
    cdef int32_t ln
    cdef Py_ssize_t bad = -1
    with nogil:
        for k in range(n):
            o = offsets[k]
            ln = lengths[k]
            if o < 0 or ln < 0 or o + ln > size:
                bad = k
                break
            total += ln
    if bad >= 0:
        raise ValueError(f"slice {bad} ({offsets[bad]}, {lengths[bad]}) outside a buffer of {size} bytes")
    if total > MAX_BINARY_BYTES:
        raise ValueError(f"{total} bytes of values exceed the 2 GiB of an Arrow binary array")
    data = np.empty(total, dtype=np.uint8)
    value_offsets = np.empty(n + 1, dtype=np.int32)
    cdef uint8_t[::1] d = data
    cdef int32_t[::1] vo = value_offsets
    cdef const uint8_t *src = &b[0] if size else NULL
    cdef uint8_t *dst = &d[0] if total else NULL
    cdef int32_t at = 0
    with nogil:
        for k in range(n):
            vo[k] = at
            ln = lengths[k]
            if ln:
                memcpy(dst + at, src + offsets[k], <size_t>ln)
            at += ln
        vo[n] = at
    return data, value_offsets
