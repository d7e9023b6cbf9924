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

    def __dealloc__(self):
        free(self.ptrs)
        free(self.lens)
