# Borrowing the bytes of many bodies at C speed (included by codec.pyx and segment.pyx).
#
# A typed memoryview per body costs about a microsecond to make and again to re-acquire;
# for bytes (the common case) the pointer and length are read straight from the object,
# and anything else with the buffer protocol is copied to bytes once.

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_CheckExact
from libc.stdlib cimport free, malloc


cdef class _Bodies:
    """Pointers and lengths of a sequence of bodies, valid while this object lives."""

    cdef Py_ssize_t count
    cdef const unsigned char **ptrs
    cdef Py_ssize_t *lens
    cdef Py_ssize_t total
    cdef list keep

    def __cinit__(self, bodies):
        cdef Py_ssize_t k = 0, n
        packed = getattr(bodies, "packed", None)
        if packed is not None:
            self._borrow_packed(packed[0], packed[1])
            return
        items = bodies if isinstance(bodies, (list, tuple)) else list(bodies)
        self.count = len(items)
        self.ptrs = <const unsigned char **>malloc(max(self.count, 1) * sizeof(unsigned char *))
        self.lens = <Py_ssize_t *>malloc(max(self.count, 1) * sizeof(Py_ssize_t))
        if self.ptrs == NULL or self.lens == NULL:
            raise MemoryError()
        self.keep = []
        self.total = 0
        for body in items:
            if not PyBytes_CheckExact(body):
                body = bytes(memoryview(body).cast("B"))
                self.keep.append(body)
            n = PyBytes_GET_SIZE(body)
            self.ptrs[k] = <const unsigned char *>PyBytes_AS_STRING(body)
            self.lens[k] = n
            self.total += n
            k += 1
        self.keep.append(items)

    cdef int _borrow_packed(self, object raw, object offsets) except -1:
        """Bodies ``raw[offsets[k]:offsets[k + 1]]`` (dledger.packed.PackedBodies), in place."""
        view = memoryview(raw).cast("B")  # kept: a bytearray cannot be resized under the pointers
        cdef const unsigned char[::1] buf = view
        cdef const int64_t[::1] off = offsets
        cdef Py_ssize_t k, count = off.shape[0] - 1
        if count < 0:
            raise ValueError("packed bodies need at least one offset")
        self.count = count
        self.ptrs = <const unsigned char **>malloc(max(count, 1) * sizeof(unsigned char *))
        self.lens = <Py_ssize_t *>malloc(max(count, 1) * sizeof(Py_ssize_t))
        if self.ptrs == NULL or self.lens == NULL:
            raise MemoryError()
        self.keep = [raw, view, offsets]
        if off[0] != 0 or off[count] != buf.shape[0]:
            raise ValueError("packed body offsets do not span the buffer")
        for k in range(count):
            if off[k + 1] < off[k]:
                raise ValueError("packed body offsets go backwards")
            self.ptrs[k] = &buf[0] + off[k] if buf.shape[0] else NULL
            self.lens[k] = off[k + 1] - off[k]
        self.total = buf.shape[0]
        return 0

    def __dealloc__(self):
        free(self.ptrs)
        free(self.lens)
