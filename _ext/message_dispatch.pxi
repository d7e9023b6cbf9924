# Included at the end of message.pyx: the dispatch path's kernels (ReputMessageService).

cdef extern from "<sys/mman.h>" nogil:
    int madvise(void *addr, size_t length, int advice)
    int MADV_WILLNEED

cdef extern from "<errno.h>" nogil:
    int errno

cdef extern from "<unistd.h>" nogil:
    long sysconf(int name)
    int _SC_PAGESIZE

# Linux 5.14's populate advices, spelt out: older headers lack them.
cdef int _MADV_POPULATE_READ = 22
cdef int _MADV_POPULATE_WRITE = 23

PREFAULT_READ = 0
PREFAULT_WRITE = 1
PREFAULT_WILLNEED = 2


def prefault(buf, Py_ssize_t start=0, Py_ssize_t end=-1, int how=PREFAULT_READ):
    """Fault in the pages of ``buf[start:end]`` (a mapping) without the GIL, so the thread that
    then reads or writes them does not take a fault per page: PREFAULT_READ / PREFAULT_WRITE map
    them (MADV_POPULATE_READ / _WRITE, the write one also makes file pages writable),
    PREFAULT_WILLNEED only starts their readahead. Changes no byte. Returns 0, or the errno of
    a kernel that refused (then the WILLNEED readahead was asked for instead)."""
    cdef const unsigned char[::1] b = _ro(buf)
    cdef Py_ssize_t n = b.shape[0]
    if end < 0 or end > n:
        end = n
    if start < 0:
        start = 0
    if start >= end:
        return 0
    cdef size_t page = <size_t>sysconf(_SC_PAGESIZE)
    cdef size_t lo = <size_t>&b[start]
    cdef size_t hi = <size_t>&b[0] + <size_t>end
    lo -= lo % page  # madvise wants a page-aligned start; the page holding buf[start] is ours too
    cdef int advice = MADV_WILLNEED
    if how == PREFAULT_READ:
        advice = _MADV_POPULATE_READ
    elif how == PREFAULT_WRITE:
        advice = _MADV_POPULATE_WRITE
    cdef int rc = 0, err = 0
    with nogil:
        rc = madvise(<void *>lo, hi - lo, advice)
        if rc != 0:
            err = errno
            if advice != MADV_WILLNEED:
                madvise(<void *>lo, hi - lo, MADV_WILLNEED)
    return err
