# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Classic HA's data path (HAConnection's write side), without the GIL.

``send_file_frames`` sends a run of commit log as RocketMQ 4.9.4's frames, each a 12-byte header
``{phyOffset int64, size int32}`` (big-endian) and ``size`` bytes sent by ``sendfile`` from the
commit-log file's descriptor, in one call that lets go of the GIL once. It reads the page cache
through a descriptor, not the mapping: it needs none of the log's locks, so the write side never
waits behind dispatch or the prefault (which hold the read lock for a batch at a time), and a
file retention deletes meanwhile stays readable through the descriptor.
"""

from libc.errno cimport EAGAIN, EINTR, EIO, errno
import os

from libc.stdint cimport int64_t, uint8_t

cdef extern from "<sys/socket.h>" nogil:
    ssize_t send(int fd, const void *buf, size_t n, int flags)
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


cdef int _send_frames(int sock_fd, int file_fd, int64_t log_offset, int64_t file_pos, int64_t total,
                      int64_t batch, int timeout_ms) noexcept nogil:
    cdef uint8_t header[12]
    cdef int64_t at = 0, n, v
    cdef long pos
    cdef ssize_t r
    cdef int hsent, i, rc
    while at < total:
        n = total - at
        if n > batch:
            n = batch
        v = log_offset + at
        for i in range(8):
            header[i] = <uint8_t>((v >> (56 - 8 * i)) & 0xFF)
        for i in range(4):
            header[8 + i] = <uint8_t>((n >> (24 - 8 * i)) & 0xFF)
        hsent = 0
        while hsent < 12:
            # MSG_MORE: the header waits for its bytes, one segment on the wire rather than two.
            r = send(sock_fd, header + hsent, 12 - hsent, MSG_MORE | MSG_NOSIGNAL)
            if r > 0:
                hsent += r
            elif r < 0 and errno == EAGAIN:
                rc = _wait_writable(sock_fd, timeout_ms)
                if rc:
                    return rc
            elif r < 0 and errno == EINTR:
                continue
            else:
                return -errno if r < 0 else -EIO
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
