# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Classic HA's data path, both sides, without the GIL.

``send_file_frames`` sends a run of commit log as RocketMQ 4.9.4's frames, each a 12-byte header
``{phyOffset int64, size int32}`` (big-endian) and ``size`` bytes sent by ``sendfile`` from the
commit-log file's descriptor, in one call that lets go of the GIL once. It reads the page cache
through a descriptor, not the mapping: it needs none of the log's locks, so the write side never
waits behind dispatch or the prefault (which hold the read lock for a batch at a time), and a
file retention deletes meanwhile stays readable through the descriptor.

``push_file`` is the write side's loop over it: it sends what the master's ``LogFeed`` says is
written, then waits on the feed's eventfd for more, all without the GIL, and comes back to
Python only at the end of the file, when idle for ``idle_s``, or on an error. A put wakes it
with ``LogFeed.publish``, a store and a write to the eventfd under the GIL (no hand-over).

``recv_frames`` is the slave's (HAClient's) read side: it sends the slave's report, then reads
into the client's buffer until at least one whole frame is there, checking every 12-byte header
on the way (the offset must be the slave's end, the size must fit the buffer), and comes back
with where the whole frames end. ``join_frames`` then moves their bytes together, without the
headers between them, so that Python appends the read's frames in one call a commit-log file
rather than one a frame.
"""

from libc.errno cimport EAGAIN, EINTR, EIO, ETIMEDOUT, errno
from libc.string cimport memmove
import os

from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec
from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

cdef extern from * nogil:
    """
    static inline long long dl_atomic_load64(long long *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
    static inline void dl_atomic_store64(long long *p, long long v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
    static inline int dl_atomic_max64(long long *p, long long v) {
        long long seen = __atomic_load_n(p, __ATOMIC_ACQUIRE);
        while (v > seen) {
            if (__atomic_compare_exchange_n(p, &seen, v, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return 1;
        }
        return 0;
    }
    """
    long long dl_atomic_load64(long long *p)
    void dl_atomic_store64(long long *p, long long v)
    int dl_atomic_max64(long long *p, long long v)

cdef extern from "<unistd.h>" nogil:
    ssize_t read(int fd, void *buf, size_t n)
    ssize_t write(int fd, const void *buf, size_t n)
    int close(int fd)

cdef extern from "<sys/eventfd.h>" nogil:
    int eventfd(unsigned int initval, int flags)
    int EFD_NONBLOCK
    int EFD_CLOEXEC

cdef extern from "<sys/socket.h>" nogil:
    ssize_t send(int fd, const void *buf, size_t n, int flags)
    ssize_t recv(int fd, void *buf, size_t n, int flags)
    int MSG_MORE
    int MSG_NOSIGNAL

cdef extern from "<sys/sendfile.h>" nogil:
    ssize_t sendfile(int out_fd, int in_fd, long *offset, size_t count)

cdef extern from "<poll.h>" nogil:
    struct pollfd:
        int fd
        short events
        short revents
    int poll(pollfd *fds, unsigned long nfds, int timeout)
    short POLLOUT
    short POLLIN

# What _send_frames returns for a socket that took nothing in time (errors are -errno).
DEF TIMED_OUT = 1


cdef int _wait_writable(int fd, int timeout_ms) noexcept nogil:
    """0 when ``fd`` takes bytes, TIMED_OUT after ``timeout_ms``, -errno on error."""
    cdef pollfd p
    cdef int rc
    p.fd = fd
    p.events = POLLOUT
    p.revents = 0
    while True:
        rc = poll(&p, 1, timeout_ms)
        if rc > 0:
            return 0
        if rc == 0:
            return TIMED_OUT
        if errno != EINTR:
            return -errno


cdef int _send_all(int fd, const uint8_t *p, int n, int flags, int timeout_ms) noexcept nogil:
    """Send ``n`` bytes whole (waiting while the socket is full): 0, or -errno."""
    cdef ssize_t r
    cdef int rc
    while n > 0:
        r = send(fd, p, n, flags | MSG_NOSIGNAL)
        if r > 0:
            p += r
            n -= r
        elif r < 0 and errno == EAGAIN:
            rc = _wait_writable(fd, timeout_ms)
            if rc:
                return rc
        elif r < 0 and errno == EINTR:
            continue
        else:
            return -errno if r < 0 else -EIO
    return 0


cdef int _send_frames(int sock_fd, int file_fd, int64_t log_offset, int64_t file_pos, int64_t total,
                      int64_t batch, int timeout_ms) noexcept nogil:
    cdef uint8_t header[12]
    cdef int64_t at = 0, n, v
    cdef long pos
    cdef ssize_t r
    cdef int i, rc
    while at < total:
        n = total - at
        if n > batch:
            n = batch
        v = log_offset + at
        for i in range(8):
            header[i] = <uint8_t>((v >> (56 - 8 * i)) & 0xFF)
        for i in range(4):
            header[8 + i] = <uint8_t>((n >> (24 - 8 * i)) & 0xFF)
        # MSG_MORE: the header waits for its bytes, one segment on the wire rather than two.
        rc = _send_all(sock_fd, header, 12, MSG_MORE, timeout_ms)
        if rc:
            return rc
        pos = file_pos + at
        while pos < file_pos + at + n:
            r = sendfile(sock_fd, file_fd, &pos, <size_t>(file_pos + at + n - pos))
            if r > 0:
                continue
            if r < 0 and errno == EAGAIN:
                rc = _wait_writable(sock_fd, timeout_ms)
                if rc:
                    return rc
            elif r < 0 and errno == EINTR:
                continue
            else:
                # r == 0: the file ends before its written position said (truncated)
                return -errno if r < 0 else -EIO
        at += n
    return 0


def send_file_frames(int sock_fd, int file_fd, int64_t log_offset, int64_t file_pos, int64_t total,
                     int64_t batch, double timeout_s):
    """Send ``total`` bytes of ``file_fd`` from ``file_pos`` (log position ``log_offset``) to the
    socket ``sock_fd`` as frames of at most ``batch`` bytes. A socket that takes nothing for
    ``timeout_s`` raises TimeoutError (the link is then broken: a frame may be half sent);
    a failed send raises OSError. The socket may be non-blocking (Python's with a timeout)."""
    if batch <= 0 or total < 0 or file_pos < 0:
        raise ValueError(f"send_file_frames: batch {batch}, total {total}, file_pos {file_pos}")
    cdef int rc
    cdef int timeout_ms = <int>(timeout_s * 1000)
    with nogil:
        rc = _send_frames(sock_fd, file_fd, log_offset, file_pos, total, batch, timeout_ms)
    if rc == TIMED_OUT:
        raise TimeoutError(f"the slave took nothing for {timeout_s} s")
    if rc:
        raise OSError(-rc, os.strerror(-rc))
    return total


# -- the write side's loop -----------------------------------------------------------------------

cdef int64_t _now_ms() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000


cdef class LogFeed:
    """Where the master's commit log ends, as its puts publish it, and an eventfd that wakes
    the write side waiting in ``push_file``. ``publish`` never moves the end back (a put that
    read an older end publishes after a newer one); ``stop`` ends a waiting ``push_file``."""

    cdef long long _end
    cdef long long _stopped
    cdef int _efd

    def __cinit__(self):
        self._end = 0
        self._stopped = 0
        self._efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)
        if self._efd < 0:
            raise OSError(errno, os.strerror(errno))

    def __dealloc__(self):
        if self._efd >= 0:
            close(self._efd)

    @property
    def end(self):
        return dl_atomic_load64(&self._end)

    def publish(self, int64_t end):
        """The log holds everything below ``end``: the write side may send it (and is woken)."""
        dl_atomic_max64(&self._end, end)
        self._wake()

    def stop(self):
        dl_atomic_store64(&self._stopped, 1)
        self._wake()

    cdef void _wake(self) noexcept:
        # A write to a non-blocking eventfd, with the GIL held: a put hands nothing over.
        cdef uint64_t one = 1
        write(self._efd, &one, 8)


cdef int64_t _push(LogFeed feed, int sock_fd, int file_fd, int64_t next, int64_t file_base, int64_t file_limit,
                   int64_t batch, int idle_ms, int timeout_ms, int *err) noexcept nogil:
    cdef int64_t end, idle_until = _now_ms() + idle_ms, left
    cdef pollfd p
    cdef uint64_t drained
    cdef int rc
    err[0] = 0
    while next < file_limit and not dl_atomic_load64(&feed._stopped):
        end = dl_atomic_load64(&feed._end)
        if end > file_limit:
            end = file_limit
        if end > next:
            rc = _send_frames(sock_fd, file_fd, next, next - file_base, end - next, batch, timeout_ms)
            if rc:
                err[0] = rc
                return next
            next = end
            idle_until = _now_ms() + idle_ms
            continue
        left = idle_until - _now_ms()
        if left <= 0:
            break
        p.fd = feed._efd
        p.events = POLLIN
        p.revents = 0
        rc = poll(&p, 1, <int>left)
        if rc > 0:
            read(feed._efd, &drained, 8)
        elif rc < 0 and errno != EINTR:
            err[0] = -errno
            return next
    return next


def push_file(LogFeed feed, int sock_fd, int file_fd, int64_t next, int64_t file_base, int64_t file_limit,
              int64_t batch, double idle_s, double timeout_s):
    """The write side's loop over one commit-log file (its descriptor ``file_fd``, its first
    offset ``file_base``): send, as frames of at most ``batch``, the log from ``next`` up to the
    feed's end (never past ``file_limit``, the file's end), wait on the feed for more, and so on,
    without the GIL. Returns where it got to: at ``file_limit``, after ``idle_s`` with nothing
    to send, or once the feed is stopped. Raises TimeoutError / OSError as ``send_file_frames``
    (the link is then broken)."""
    if batch <= 0 or next < file_base or file_limit < next:
        raise ValueError(f"push_file: batch {batch}, next {next}, file {file_base}-{file_limit}")
    cdef int err = 0
    cdef int idle_ms = <int>(idle_s * 1000)
    cdef int timeout_ms = <int>(timeout_s * 1000)
    with nogil:
        next = _push(feed, sock_fd, file_fd, next, file_base, file_limit, batch, idle_ms, timeout_ms, &err)
    if err == TIMED_OUT:
        raise TimeoutError(f"the slave took nothing for {timeout_s} s")
    if err:
        raise OSError(-err, os.strerror(-err))
    return next


# -- the slave's read side ----------------------------------------------------------------------

# recv_frames' status: whole frames are in the buffer; none came within the timeout; the master
# closed the link; a header named another offset than the slave's end; a frame too large.
cdef enum:
    ST_FRAMES = 0
    ST_IDLE = 1
    ST_CLOSED = 2
    ST_WRONG_OFFSET = 3
    ST_BAD_SIZE = 4
    HEADER_SIZE = 12

FRAMES = ST_FRAMES
IDLE = ST_IDLE
CLOSED = ST_CLOSED
WRONG_OFFSET = ST_WRONG_OFFSET
BAD_SIZE = ST_BAD_SIZE



cdef int _recv_frames(int fd, uint8_t *buf, int64_t cap, int64_t *filled, int64_t *pos, int64_t *whole,
                      int64_t expected, int64_t report, int timeout_ms) noexcept nogil:
    cdef uint8_t rep[8]
    cdef int64_t scan, off, size, need, deadline, left
    cdef ssize_t r
    cdef pollfd p
    cdef int i, rc
    if report >= 0:
        for i in range(8):
            rep[i] = <uint8_t>((report >> (56 - 8 * i)) & 0xFF)
        rc = _send_all(fd, rep, 8, 0, timeout_ms)
        if rc:
            return -ETIMEDOUT if rc == TIMED_OUT else rc
    deadline = _now_ms() + timeout_ms
    scan = pos[0]
    while True:
        # Check every whole header from the first unprocessed byte.
        need = HEADER_SIZE
        while filled[0] - scan >= HEADER_SIZE:
            off = 0
            for i in range(8):
                off = (off << 8) | buf[scan + i]
            size = <int32_t>((<uint32_t>buf[scan + 8] << 24) | (<uint32_t>buf[scan + 9] << 16)
                             | (<uint32_t>buf[scan + 10] << 8) | <uint32_t>buf[scan + 11])
            if expected != 0 and off != expected:
                whole[0] = scan
                return ST_WRONG_OFFSET
            if size < 0 or size > cap - HEADER_SIZE:
                whole[0] = scan
                return ST_BAD_SIZE
            if filled[0] - scan < HEADER_SIZE + size:
                need = HEADER_SIZE + size
                break
            if size:
                expected = off + size
            scan += HEADER_SIZE + size
        if scan > pos[0]:
            whole[0] = scan
            return ST_FRAMES
        # No whole frame: make room for the partial one, then read more.
        if pos[0] > 0 and pos[0] + need > cap:
            memmove(buf, buf + pos[0], filled[0] - pos[0])
            filled[0] -= pos[0]
            pos[0] = 0
            scan = 0
        r = recv(fd, buf + filled[0], cap - filled[0], 0)
        if r > 0:
            filled[0] += r
            continue
        if r == 0:
            whole[0] = scan
            return ST_CLOSED
        if errno == EINTR:
            continue
        if errno != EAGAIN:
            return -errno
        left = deadline - _now_ms()
        if left <= 0:
            whole[0] = scan
            return ST_IDLE
        p.fd = fd
        p.events = POLLIN
        p.revents = 0
        rc = poll(&p, 1, <int>left)
        if rc < 0 and errno != EINTR:
            return -errno


def recv_frames(int sock_fd, object buf, int64_t filled, int64_t pos, int64_t expected, int64_t report,
                double timeout_s):
    """HAClient's read: send ``report`` (the slave's max offset, 8 bytes big-endian; none when
    negative), then read into ``buf`` (bytes ``pos:filled`` are unprocessed) until whole frames
    are there, without the GIL. Every header read must name ``expected`` (the slave's end, then
    the end of the frames before it; any offset while it is 0) and a size the buffer holds.
    Returns ``(status, filled, pos, whole)``: the frames in ``buf[pos:whole]`` are whole and
    checked (with WRONG_OFFSET or BAD_SIZE the one at ``whole`` is not); ``pos`` and ``filled``
    move when the partial frame was moved to the front to make room. OSError on a failed socket."""
    cdef Py_buffer view
    cdef int64_t whole = pos
    cdef int status
    cdef int timeout_ms = <int>(timeout_s * 1000)
    PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE)
    try:
        if not (0 <= pos <= filled <= view.len):
            raise ValueError(f"recv_frames: pos {pos}, filled {filled}, buffer {view.len}")
        with nogil:
            status = _recv_frames(sock_fd, <uint8_t *>view.buf, view.len, &filled, &pos, &whole, expected, report,
                                  timeout_ms)
    finally:
        PyBuffer_Release(&view)
    if status < 0:
        raise OSError(-status, os.strerror(-status))
    return status, filled, pos, whole



def join_frames(object buf, int64_t pos, int64_t whole):
    """The whole frames ``recv_frames`` returned in ``buf[pos:whole]``, their data moved together
    to ``buf[pos:]`` without the headers (heartbeats add nothing). Each frame with data must
    start where the one before it ends (``recv_frames`` checked it; checked again here, as a
    slip would append bytes at the wrong offset). Returns ``(offset, end, frames)``: the data are
    the log from ``offset`` (-1 when there are none) in ``buf[pos:end]``, from ``frames`` frames."""
    cdef Py_buffer view
    cdef uint8_t *b
    cdef int64_t scan = pos, dst = pos, off, size, first = -1, expected = -1, frames = 0
    cdef int i
    PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE)
    try:
        if not (0 <= pos <= whole <= view.len):
            raise ValueError(f"join_frames: pos {pos}, whole {whole}, buffer {view.len}")
        b = <uint8_t *>view.buf
        with nogil:
            while whole - scan >= HEADER_SIZE:
                off = 0
                for i in range(8):
                    off = (off << 8) | b[scan + i]
                size = <int32_t>((<uint32_t>b[scan + 8] << 24) | (<uint32_t>b[scan + 9] << 16)
                                 | (<uint32_t>b[scan + 10] << 8) | <uint32_t>b[scan + 11])
                if size < 0 or size > whole - scan - HEADER_SIZE:
                    break
                if size:
                    if first < 0:
                        first = off
                    elif off != expected:
                        break
                    expected = off + size
                    memmove(b + dst, b + scan + HEADER_SIZE, size)
                    dst += size
                    frames += 1
                scan += HEADER_SIZE + size
    finally:
        PyBuffer_Release(&view)
    if scan != whole:
        raise ValueError(f"join_frames: the frames in {pos}-{whole} are not whole and contiguous (stopped at {scan})")
    return first, dst, frames
