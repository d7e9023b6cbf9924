# cython: language_level=3
"""mmap-backed segment files (DLedger's MmapFile / MmapFileList) and the entry log hot path.

Everything that runs once per entry (bounds checks, header encode, CRC, memcpy, index unit)
is C here, so an append makes no Python object per entry. The Python store around it
(`dledger.store.file`, the store API, `dledger.store.recovery`, which rebuilds the log from
the files at open, and `dledger.store.service`, DLedger's FlushDataService and
CleanSpaceService: flush scheduling, checkpoints, retention, prefault) does the rest.
The GIL is released around large copies, CRCs and msync.
"""

import mmap as _mmap
import os

import numpy as np
cimport numpy as cnp
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_CheckExact, PyByteArray_GET_SIZE
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

from dledger.codes import ResponseCode
from dledger.errors import DLedgerError

cnp.import_array()

include "bodies.pxi"

include "format.pxi"

cdef extern from "dl_format.h" nogil:
    void dl_put64(unsigned char *p, uint64_t v)

# MappedFile.prewrite writes DL_ZF_MAX bytes of zeros at most a hold of the write guard.
cdef extern from "dl_zero_fill.h" nogil:
    int64_t DL_ZF_MAX
    int dl_zero_fill_fd(int fd, int64_t start, int64_t end, int64_t *done)

cdef extern from "dl_wguard.h" nogil:
    void dl_wguard_lock(int *lock)
    void dl_wguard_unlock(int *lock)
    int64_t dl_load_i64(const int64_t *p)
    void dl_store_i64(int64_t *p, int64_t v)
    int dl_users_enter(int *users, const int *closing)
    void dl_users_leave(int *users)
    void dl_users_drain(int *users, int *closing)

cdef extern from "<sys/mman.h>" nogil:
    int msync(void *addr, size_t length, int flags)
    int madvise(void *addr, size_t length, int advice)
    int MS_SYNC
    int MADV_DONTNEED

cdef extern from "<fcntl.h>" nogil:
    int posix_fadvise(int fd, int64_t offset, int64_t length, int advice)
    int POSIX_FADV_DONTNEED
    int fallocate(int fd, int mode, int64_t offset, int64_t length)  # Linux (pyconfig: _GNU_SOURCE)
    int fcntl(int fd, int cmd, int arg)
    int F_DUPFD_CLOEXEC

# ALLOCATE_AHEAD: a write by the file descriptor past ``allocated_to`` first allocates the
# file's blocks up to this much past its end (fallocate, mode 0: the size does not change; the
# blocks read as zeros until written). Into a sparse file ext4 reserves blocks page by page as
# a pwrite fills them (delayed allocation: an extent-status entry and buffer heads a page);
# into allocated ones it only maps them (batch_append_1k: docs/performance.md). The file stays sparse past
# what is written but this step, so the disk usage is what it was; a filesystem without
# fallocate (EOPNOTSUPP) or a full disk (ENOSPC, which the write then reports) is left to the
# write as before.
cdef int64_t ALLOCATE_AHEAD = 8 << 20
# FOLIO_MAX: the largest page-cache folio a file's pages may come in (ext4 has had large folios
# since Linux 6.16; a PMD is 2 MiB). A store through the mapping makes the filesystem reserve
# blocks for its whole folio, holes past the store included, so a store is only safe on a full
# disk (an exception, not SIGBUS) when the blocks up to its folio's end are reserved: the marks
# that say so (prewritten_to, writable_to, allocated_to) are compared with that end (_folio_end).
cdef int64_t FOLIO_MAX = 2 << 20
FOLIO_MAX_BYTES = FOLIO_MAX  # for Python callers that round to a folio (commitlog.append_data)
# NO_MAPPED_STORES: set at the first ENOSPC any write of this process meets (a pre-write of
# zeros ahead of the writer usually meets it first); from then on appends write by the file
# descriptor (ENOSPC: DISK_FULL) instead of storing through the mappings. Once the disk is
# full, a store through the mapping died of SIGBUS even into pages pre-written with zeros
# (Linux 6.18, ext4; the reservation was there), where the pwrite answers ENOSPC.
cdef bint NO_MAPPED_STORES = False


def mapped_stores_stopped():
    """Whether appends stopped storing through the mappings (an ENOSPC was met: see
    NO_MAPPED_STORES); for tests and diagnostics."""
    return NO_MAPPED_STORES


cdef inline void _saw_errno(int err) noexcept nogil:
    global NO_MAPPED_STORES
    if err == ENOSPC:
        NO_MAPPED_STORES = True

# madvise(MADV_POPULATE_READ / _WRITE), Linux 5.14: fault pages in (read-only, or writable as
# a write would) without writing them. Older kernels answer EINVAL; populate() then reports
# False and does nothing.
cdef int MADV_POPULATE_READ_ = 22
cdef int MADV_POPULATE_WRITE_ = 23

cdef extern from "<unistd.h>" nogil:
    long sysconf(int name)
    int _SC_PAGESIZE

cdef extern from "<errno.h>":
    int errno
    int EINTR
    int ENOSPC
    int EOPNOTSUPP
    int ENOSYS

cdef extern from "<sys/uio.h>" nogil:
    struct iovec:
        void *iov_base
        size_t iov_len
    Py_ssize_t pwritev(int fd, const iovec *iov, int iovcnt, int64_t offset)

# Writes past the pre-written mark go to the data files through the file descriptor (pwritev),
# not through the mapping. A store through the mapping into a fresh (sparse) segment takes a
# page fault that reads the hole in as a zero-filled page before the copy; pwritev fills the
# page cache with the bytes directly, with no zero-fill to fault in first, and a full disk
# answers ENOSPC instead of killing the process with SIGBUS. Reads still use the mapping, which
# sees the same page cache, and msync still makes the written range durable.
# MAPPED_APPENDS: a write of less than NOGIL_COPY bytes that lies below the pre-written mark
# (MappedFile.prewrite: the store service, or the classic commit log's prefault thread, writes
# zeros ahead of the writer) is copied through the mapping instead. There the blocks are
# reserved (no SIGBUS on a full disk) and the pages are in the cache, so it costs a minor fault
# a page, where a pwrite costs a syscall (3-4 us on this VM) and the inode's lock, which the
# pre-writer holds for its own pwrites. flush unmaps such pages (MADV_DONTNEED) before it
# msyncs them: otherwise the msync write-protects each page written through the mapping, a TLB
# shootdown each while another thread of the process runs (an msync of 64 MB: 130 ms of CPU
# against 8 ms), and the put thread takes the interrupts. Both single puts and batches gained
# in alternating put loops (docs/message-store.md).
# Single entries go through the mapping in any case (see EntryLog._put), into pages the
# service populated writable: a syscall per entry would cost more.
# pwritev takes at most IOV_MAX buffers (1024 on Linux); a leader batch goes in runs of
# RUN_ENTRIES entries, two buffers (header, body) each (see _put_run).
cdef int IOV_MAX_ = 1024
cdef Py_ssize_t RUN_ENTRIES = 512
# INDEX_BLOCKS: a leader batch's index units (32 bytes an entry) are framed in a scratch and
# go to each index file in one block: by one pwrite where the blocks are allocated and the
# pages not made ahead, where a copy through the mapping took a page fault a 4 KiB page (the
# kernel zero-filling a hole page, then the copy over it; append_batch without the store
# service: batch_append_1k), else by one memcpy into the pages the store service made ahead.
# Scratch for one run's headers (and AppendHook prefixes) is at most this, so a run shrinks
# when the hook's position is far into the body.
cdef Py_ssize_t SCRATCH_BYTES = 1 << 20

# Copies at least this large drop the GIL; below it the release costs more than the copy.
# Suffix of a segment file being created (see _create_sized).
TMP_SUFFIX = ".creating"
cdef Py_ssize_t NOGIL_COPY = 65536
NOGIL_COPY_BYTES = NOGIL_COPY  # for Python callers that keep a copy under it (commitlog.append_data)
# WRITE_RELEASE: a caller may ask for the GIL to be let go around a small batch's write too
# (``MappedFile.append(release_gil=True)``, ``EntryLog.append_framed_end(release_gil=True)``).
# The message store's put thread does: its dispatch thread then runs on the other core while
# the kernel copies the batch into the page cache (a 32 x 100 B batch: ~5 us of the put's
# ~17), where it would otherwise wait for the put thread's Python to let go. Where no other
# thread wants the GIL the hand-over only costs (a lone writer: append_batch/append_framed
# benches ~8-20% slower with it), so it is not the default.
cdef int64_t PAGE = 4096
# How many lookups ahead `EntryLog.lookup` prefetches an index unit (about the misses a core
# keeps in flight).
cdef Py_ssize_t LOOKUP_AHEAD = 16


def offset_to_file_name(int64_t offset):
    """DLedger's offset2FileName: the start offset zero-padded to 20 digits."""
    return "%020d" % offset


cdef object _entry_type = tuple


def set_entry_type(cls):
    """The class ``EntryLog.read_entry`` builds; the store layer registers its Entry here, so
    a get costs one constructor call and no tuple unpacking in Python."""
    global _entry_type
    _entry_type = cls


cdef inline const unsigned char[::1] _ro(object buf):
    return memoryview(buf).cast("B")


cdef inline void _copy_iov(unsigned char *dst, const iovec *iov, int count) noexcept nogil:
    """The buffers of ``iov`` one after another from ``dst`` (a write through the mapping)."""
    cdef int i
    for i in range(count):
        memcpy(dst, iov[i].iov_base, iov[i].iov_len)
        dst += iov[i].iov_len


cdef int _pwritev_all(int fd, iovec *iov, int count, int64_t offset, Py_ssize_t *done) noexcept nogil:
    """pwritev until every buffer is written (short writes and EINTR continued); 0 or an errno.
    ``done`` counts the bytes that landed. ``iov`` is consumed."""
    cdef Py_ssize_t r
    while count > 0:
        r = pwritev(fd, iov, count if count < IOV_MAX_ else IOV_MAX_, offset + done[0])
        if r < 0:
            if errno == EINTR:
                continue
            return errno
        if r == 0:
            return ENOSPC
        done[0] += r
        while count > 0 and <size_t>r >= iov[0].iov_len:
            r -= iov[0].iov_len
            iov += 1
            count -= 1
        if count > 0 and r > 0:
            iov[0].iov_base = <char *>iov[0].iov_base + r
            iov[0].iov_len -= r
    return 0


cdef inline uint32_t _body_crc(const unsigned char *body, Py_ssize_t n, int64_t patch_at,
                               const unsigned char *stamp) noexcept nogil:
    """CRC-32 of the body as stored: with ``stamp`` in place of its bytes ``[patch_at, patch_at + 8)``
    when ``patch_at`` >= 0 (the AppendHook), computed straight through, without a patched copy."""
    if patch_at < 0:
        return dl_crc32(0, body, <size_t>n)
    cdef uint32_t crc = dl_crc32(0, body, <size_t>patch_at)
    crc = dl_crc32(crc, stamp, 8)
    return dl_crc32(crc, body + patch_at + 8, <size_t>(n - patch_at - 8))


cdef inline uint32_t _split_crc(const unsigned char *a, Py_ssize_t na, const unsigned char *b,
                                Py_ssize_t nb) noexcept nogil:
    """CRC-32 of ``a[:na]`` followed by ``b[:nb]``."""
    cdef uint32_t crc = dl_crc32(0, a, <size_t>na) if na else 0
    return dl_crc32(crc, b, <size_t>nb)


def _create_sized(str path, int64_t size):
    """Create ``path`` at its full size, atomically: it is sized under a dot-name (which
    MmapFileList.load ignores and removes) and renamed into place, so a crash at any point
    leaves either no segment or a whole one, never an empty file that would make the
    directory's sizes disagree. Returns an open descriptor. The directory is not fsynced
    here (creation may run on the event loop): MmapFileList.flush does it before it reports
    anything in the new file flushed."""
    if os.path.lexists(path):
        raise FileExistsError(path)
    directory, name = os.path.split(path)
    tmp = os.path.join(directory, "." + name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, size)
        os.rename(tmp, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


cdef class MappedFile:
    """One segment file mapped in full. Positions are relative to the file unless named absolute."""

    cdef readonly str path
    cdef readonly int64_t file_from_offset
    cdef readonly int64_t file_size
    cdef public int64_t wrote_position
    cdef public int64_t flushed_position
    cdef public int64_t start_position
    cdef public int64_t populated_to
    cdef readonly bint readonly
    # Pre-writing (``prewrite``): only a file of a guarded list is pre-written, and every write
    # to it that ends past ``prewritten_to`` takes the write guard (see _guard). Nothing below
    # ``prewritten_to`` is ever written by a pre-write again.
    cdef readonly bint guarded
    cdef readonly int64_t prewritten_to
    # Blocks are allocated below this (see ALLOCATE_AHEAD); -1: fallocate is not supported here.
    cdef readonly int64_t allocated_to
    # Pages below this were faulted in writable (populate(write=True)) or written with zeros by
    # ``_reserve``: their blocks are reserved, so a store through the mapping cannot fault for
    # want of space (see _reserve).
    cdef readonly int64_t writable_to
    cdef int _wguard
    cdef object _mm
    cdef const unsigned char[::1] _view
    cdef unsigned char *ptr
    # Appends are written through this descriptor. Opened at the first write and closed when
    # the next file is created, so a long log holds one per file list (Python's mmap keeps a
    # descriptor of its own per mapping, but before 3.13 does not expose it).
    cdef int fd
    # The file the mapping is of: a descriptor the pre-writer opens by path must be of it.
    cdef uint64_t _dev
    cdef uint64_t _ino
    # Users of the mapping and the write descriptor across a GIL release (see dl_users_enter):
    # close waits for them, and refuses newcomers, before it closes the descriptor and unmaps.
    cdef int _users
    cdef int _closing

    def __cinit__(self, str path, int64_t file_from_offset, int64_t file_size, bint create=False,
                  bint readonly=False, bint guarded=False):
        self.fd = -1
        self.guarded = guarded and not readonly
        self.path = path
        self.file_from_offset = file_from_offset
        self.file_size = file_size
        self.readonly = readonly
        if create and readonly:
            raise ValueError("cannot create a file read-only")
        fd = _create_sized(path, file_size) if create else os.open(path, os.O_RDONLY if readonly else os.O_RDWR)
        try:
            st = os.fstat(fd)
            actual = st.st_size
            self._dev = st.st_dev
            self._ino = st.st_ino
            if actual != file_size:
                raise DLedgerError(ResponseCode.DISK_ERROR,
                                   f"{path}: size {actual} differs from the segment size {file_size}")
            self._mm = _mmap.mmap(fd, file_size, access=_mmap.ACCESS_READ if readonly else _mmap.ACCESS_WRITE)
        finally:
            os.close(fd)
        self._view = self._mm
        self.ptr = <unsigned char *>&self._view[0]
        # A file we did not just create is taken as full until recovery says otherwise, as in DLedger.
        pos = 0 if create else file_size
        self.wrote_position = pos
        self.flushed_position = pos
        self.start_position = 0

    @property
    def closed(self):
        return self._mm is None

    cdef inline int _enter(self) except -1:
        """Enter as a user of the mapping and the write descriptor (see _users); pair with _leave."""
        if not dl_users_enter(&self._users, &self._closing):
            raise ValueError(f"{self.path} is closed")
        return 0

    cdef inline void _leave(self) noexcept nogil:
        dl_users_leave(&self._users)

    cdef int _own_fd(self, bint write) except -2:
        """A descriptor of this file that is the caller's own, to use without the GIL (the
        pre-writer, drop_cache): the write descriptor can be closed by its writer meanwhile (at
        a roll-over, release_fd) and its number reused by an unrelated open(). A duplicate of
        the write descriptor, made while holding the GIL (release_fd lets go of the number
        before it closes it, and fcntl here does not release the GIL), else the path opened
        (for writing, or only reading) and checked to be the mapped file; -1 if the path is
        another file now."""
        cdef int fd = self.fd
        if fd >= 0:
            fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)
            if fd < 0:
                raise OSError(errno, os.strerror(errno), self.path)
            return fd
        fd = os.open(self.path, (os.O_RDWR if write else os.O_RDONLY) | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
        except BaseException:
            os.close(fd)
            raise
        if st.st_dev != self._dev or st.st_ino != self._ino:
            os.close(fd)
            return -1
        return fd

    cdef inline void _check_open(self) except *:
        if self._mm is None:
            raise ValueError(f"{self.path} is closed")

    cdef inline void _check_writable(self) except *:
        self._check_open()
        if self.readonly:
            raise DLedgerError(ResponseCode.DISK_ERROR, f"{self.path} is opened read-only")

    @property
    def remaining(self):
        return self.file_size - self.wrote_position

    def is_full(self):
        return self.wrote_position >= self.file_size

    def append(self, data, bint release_gil=False):
        """Copy ``data`` at the write position; returns the absolute position, or -1 if it does not fit.
        With ``release_gil`` the GIL is let go for the write whatever its size (see WRITE_RELEASE)."""
        cdef const unsigned char[::1] b
        cdef const unsigned char *src
        cdef Py_ssize_t n
        # bytes (a single put's record) without a memoryview: its cast cost a put ~0.35 us.
        if PyBytes_CheckExact(data):
            src = <const unsigned char *>PyBytes_AS_STRING(data)
            n = PyBytes_GET_SIZE(data)
        else:
            b = _ro(data)
            n = b.shape[0]
            src = &b[0] if n else NULL
        self._check_writable()
        if n > self.file_size - self.wrote_position:
            return -1
        cdef int64_t at = self.wrote_position
        if n:
            self._pwrite(at, src, n, release_gil)
        self.wrote_position = at + n
        return self.file_from_offset + at

    def write_at(self, int64_t rel, data):
        cdef const unsigned char[::1] b = _ro(data)
        self._check_writable()
        cdef Py_ssize_t n = b.shape[0]
        if rel < 0 or rel + n > self.file_size:
            raise ValueError(f"write of {n} bytes at {rel} outside {self.path}")
        if n:
            self._pwrite(rel, &b[0], n)

    cdef int _pwritev(self, int64_t rel, iovec *iov, int count, Py_ssize_t total, bint release=False) except -1:
        self._enter()
        try:
            return self._pwritev_entered(rel, iov, count, total, release)
        finally:
            self._leave()

    cdef int _pwritev_entered(self, int64_t rel, iovec *iov, int count, Py_ssize_t total,
                              bint release=False) except -1:
        """Write ``count`` buffers (``total`` bytes) at ``rel`` through the file descriptor
        (see IOV_MAX_ for why not through the mapping), or, for a small write below the
        pre-written mark, through the mapping (MAPPED_APPENDS). ``iov`` is consumed. Short
        writes are continued; on failure what did land is zeroed again, so no part of it can
        read as entries, and DISK_FULL (ENOSPC) or DISK_ERROR is raised. The GIL is let go for
        a large write, or with ``release`` (see WRITE_RELEASE)."""
        self._pwrite_begin(rel, total)
        cdef int err
        cdef Py_ssize_t done = 0
        if self._mapped_write(rel, total):
            if release:
                with nogil:
                    _copy_iov(self.ptr + rel, iov, count)
            else:
                _copy_iov(self.ptr + rel, iov, count)
            return 0
        cdef bint held = self._guard(rel + total)
        if release or total >= NOGIL_COPY:
            with nogil:
                err = _pwritev_all(self.fd, iov, count, rel, &done)
        else:
            err = _pwritev_all(self.fd, iov, count, rel, &done)
        # Only what landed counts as written: a write ENOSPC cut short left a hole after it,
        # which a later store through the mapping (MAPPED_APPENDS) would fault on (SIGBUS).
        self._unguard(held, rel + done)
        return self._pwrite_end(rel, err, done)

    cdef inline bint _mapped_write(self, int64_t rel, Py_ssize_t total) noexcept nogil:
        """Whether a write of ``total`` bytes at ``rel`` goes through the mapping (MAPPED_APPENDS):
        small, and below the pre-written mark (only a guarded file is pre-written: elsewhere
        ``prewritten_to`` stays 0), where no pre-write runs and the blocks are reserved."""
        return (total < NOGIL_COPY and not NO_MAPPED_STORES
                and self._folio_end(rel + total) <= dl_load_i64(&self.prewritten_to))

    cdef inline int64_t _folio_end(self, int64_t end) noexcept nogil:
        """The end of the largest folio that can hold byte ``end - 1`` (see FOLIO_MAX)."""
        cdef int64_t e = ((end + FOLIO_MAX - 1) // FOLIO_MAX) * FOLIO_MAX
        return e if e < self.file_size else self.file_size

    cdef inline bint _guard(self, int64_t end) noexcept nogil:
        """Before a write that ends at ``end`` (relative): take the write guard when the write
        reaches past ``prewritten_to``, where a pre-write of zeros may be running. True when
        taken; pass it to ``_unguard`` after the write, which then moves ``prewritten_to`` past
        it, so that no later pre-write starts below what this one wrote."""
        if not self.guarded or end <= dl_load_i64(&self.prewritten_to):
            return False
        dl_wguard_lock(&self._wguard)
        return True

    cdef inline void _unguard(self, bint held, int64_t end) noexcept nogil:
        if held:
            if end > self.prewritten_to:
                dl_store_i64(&self.prewritten_to, end)
            dl_wguard_unlock(&self._wguard)

    cdef int _pwrite_begin(self, int64_t rel, Py_ssize_t total) except -1:
        """What a write by the file descriptor checks first (and the descriptor, opened once)."""
        self._check_writable()
        if rel < 0 or rel + total > self.file_size:
            raise ValueError(f"write of {total} bytes at {rel} outside {self.path}")
        if self.fd < 0:
            self.fd = os.open(self.path, os.O_RDWR)
        if rel + total > self.allocated_to >= 0:
            self._allocate(rel + total)
        return 0

    def skip_allocate_ahead(self):
        """From now on writes by the descriptor do not fallocate ALLOCATE_AHEAD first: ext4
        reserves the blocks page by page as they are written (delayed allocation, ENOSPC from
        the write as before) and writeback allocates them. For a writer that must not wait on
        the block allocator, whose fallocate can sleep on block-bitmap reads for hundreds of
        milliseconds on a busy disk (a slave's HA appends: docs/ha.md)."""
        self.allocated_to = -1

    cdef void _allocate(self, int64_t end) noexcept:
        """Allocate the blocks of ``[allocated_to, end + ALLOCATE_AHEAD)`` (see ALLOCATE_AHEAD)."""
        cdef int64_t lo = self.allocated_to, hi = min(end + ALLOCATE_AHEAD, self.file_size)
        cdef int rc, fd = self.fd
        with nogil:
            rc = fallocate(fd, 0, lo, hi - lo)
        if rc == 0:
            if hi > self.allocated_to >= 0:  # a pre-write on another thread may have gone further
                self.allocated_to = hi
        elif errno == EOPNOTSUPP or errno == ENOSYS:
            self.allocated_to = -1  # never again for this file
        else:
            _saw_errno(errno)
        # ENOSPC and the rest: the write that follows reports what it meets

    cdef int _reserve(self, int64_t end) except -1:
        """Before a store through the mapping that ends at ``end`` (relative): make sure the
        blocks up to it are reserved, or raise DISK_FULL (ENOSPC) / DISK_ERROR. A store into a
        hole of a sparse file makes the filesystem allocate in the page fault; on a full disk
        that fault kills the process with SIGBUS (a 4-thread batch put on a full disk did,
        in EntryLog._put_unit), where a write by the descriptor answers ENOSPC. Below the marks
        (populated writable, pre-written, fallocated) nothing is done; past them the blocks
        are fallocated ALLOCATE_AHEAD ahead, or, where that fails, the range is written with
        zeros by pwrite (past the write position only zeros are there to replace), whose
        ENOSPC is raised before a byte of the caller's is written."""
        end = self._folio_end(end)
        if (end <= self.writable_to or end <= dl_load_i64(&self.prewritten_to)
                or end <= self.allocated_to):
            return 0
        self._check_writable()
        if self.fd < 0:
            self.fd = os.open(self.path, os.O_RDWR)
        if self.allocated_to >= 0:
            self._allocate(end)
            if end <= self.allocated_to:
                return 0
        cdef int64_t start = max(self.writable_to, self.wrote_position)
        cdef int64_t done = 0
        cdef int err = 0
        cdef int fd = self.fd
        if start < end:
            with nogil:
                err = dl_zero_fill_fd(fd, start, end, &done)
            if err:
                _saw_errno(err)
                if err == ENOSPC:
                    raise DLedgerError(ResponseCode.DISK_FULL, f"write to {self.path}: {os.strerror(err)}")
                raise DLedgerError(ResponseCode.DISK_ERROR, f"write to {self.path}: {os.strerror(err)}")
        self.writable_to = end
        return 0

    cdef int _pwrite_end(self, int64_t rel, int err, Py_ssize_t done) except -1:
        """After a write by the file descriptor: raise on ``err``, zeroing the ``done`` bytes that landed."""
        if err:
            _saw_errno(err)
            if done:
                memset(self.ptr + rel, 0, done)  # those pages are in the cache: no fault to fail
            if err == ENOSPC:
                raise DLedgerError(ResponseCode.DISK_FULL, f"write to {self.path}: {os.strerror(err)}")
            raise DLedgerError(ResponseCode.DISK_ERROR, f"write to {self.path}: {os.strerror(err)}")
        return 0

    cdef int _pwrite(self, int64_t rel, const unsigned char *src, Py_ssize_t n, bint release=False) except -1:
        cdef iovec one
        one.iov_base = <void *>src
        one.iov_len = <size_t>n
        return self._pwritev(rel, &one, 1, n, release)

    def release_fd(self):
        """Close the write descriptor (reopened by the next write, if any). The number is let
        go of first: os.close releases the GIL, and a thread that read it meanwhile could
        duplicate whatever file an open() on another thread got under that number."""
        cdef int fd = self.fd
        self.fd = -1
        if fd >= 0:
            os.close(fd)

    def fill_blank(self):
        """End the file with a blank record (magic -1, length) covering what is left; mark it full."""
        self._check_writable()
        cdef int64_t left = self.file_size - self.wrote_position
        cdef unsigned char blank[8]  # DL_MIN_BLANK_LEN
        memset(blank, 0, sizeof(blank))
        if left >= DL_MIN_BLANK_LEN:
            dl_write_blank(blank, <int32_t>left)
            self._pwrite(self.wrote_position, blank, DL_MIN_BLANK_LEN)
        elif left > 0:
            self._pwrite(self.wrote_position, blank, left)
        self.wrote_position = self.file_size

    def zero_range(self, int64_t start, int64_t end):
        """Zero ``[start, end)``: what a truncation leaves behind must not look like entries."""
        self._check_writable()
        start = max(start, 0)
        end = min(end, self.file_size)
        cdef bint held
        if start < end:
            self._enter()
            with nogil:
                held = self._guard(end)
                memset(self.ptr + start, 0, end - start)
                self._unguard(held, end)
                self._leave()

    def read(self, int64_t rel, Py_ssize_t n):
        self._check_open()
        if rel < 0 or n < 0 or rel + n > self.file_size:
            raise ValueError(f"read of {n} bytes at {rel} outside {self.path}")
        return (<char *>self.ptr + rel)[:n]

    def view(self, int64_t start=0, int64_t end=-1):
        """A read-only memoryview of ``[start, end)`` of the mapping (no copy)."""
        self._check_open()
        if end < 0:
            end = self.file_size
        return memoryview(self._mm)[start:end].toreadonly()

    def flush(self, int least_pages=0):
        """msync what was written since the last flush; returns the new flushed position.

        The range's whole pages below the write position are unmapped first (MADV_DONTNEED:
        the page cache keeps them, dirty, and a read maps them again). The msync then finds no
        writable mapping of them to write-protect, which costs a TLB shootdown, an interrupt
        of the other CPUs, for each page written through the mapping (the index units, single
        entries): on this VM that was half the store service's time under 100 B batch puts."""
        self._check_open()
        if self.readonly:
            return self.flushed_position
        cdef int64_t wrote = self.wrote_position, flushed = self.flushed_position
        if wrote <= flushed:
            return flushed
        if least_pages > 0 and wrote < self.file_size and (wrote // PAGE - flushed // PAGE) < least_pages:
            return flushed
        cdef int64_t start = (flushed // PAGE) * PAGE
        cdef int64_t whole = (wrote // PAGE) * PAGE  # the page holding ``wrote`` is still written to
        cdef int rc
        self._enter()
        with nogil:
            if whole > start:
                madvise(self.ptr + start, <size_t>(whole - start), MADV_DONTNEED)
            rc = msync(self.ptr + start, <size_t>(wrote - start), MS_SYNC)
            self._leave()
        if rc != 0:
            raise DLedgerError(ResponseCode.DISK_ERROR, f"msync {self.path}: {os.strerror(errno)}")
        self.flushed_position = wrote
        return wrote

    def populate(self, int64_t start, int64_t end, bint write=True):
        """Fault the pages of ``[start, end)`` in, writable (or with ``write`` False read-only:
        allocated and zeroed for a pwrite to fill), without changing a byte, so that appends
        there take no page fault (run off the loop: see MmapFileStore's service). Returns False
        when the kernel cannot (nothing is done then)."""
        self._check_open()
        if self.readonly:
            return False
        if start < 0:
            start = 0
        if end > self.file_size:
            end = self.file_size
        start = (start // PAGE) * PAGE
        end = min(((end + PAGE - 1) // PAGE) * PAGE, self.file_size)
        if end <= start:
            return True
        cdef int rc
        self._enter()
        with nogil:
            rc = madvise(self.ptr + start, <size_t>(end - start), MADV_POPULATE_WRITE_ if write else MADV_POPULATE_READ_)
            self._leave()
        if rc != 0:
            return False
        if end > self.populated_to:
            self.populated_to = end
        if write and end > self.writable_to:
            self.writable_to = end
        return True

    def prewrite(self, int64_t start, int64_t end):
        """Make the page-cache pages of ``[start, end)`` by writing zeros there, past everything
        written (the write position and ``prewritten_to``), so that the writer's pwrites land in
        pages that are allocated, zeroed, dirty and have their blocks reserved: cheaper for both
        than a populate-read of the hole (bench/page_costs.py; docs/message-store.md). Only for
        a file of a guarded list, whose writers take the write guard past ``prewritten_to``.
        The zeros read as the hole they replace. Where the write fails (ENOSPC, EIO: nothing to
        undo, the zeros are what was there) the rest of the range is populated read-only instead
        (``populate(write=False)``); the writer's own pwrite then reports the error. Returns the
        bytes made ahead."""
        self._check_writable()
        if not self.guarded:
            raise ValueError(f"{self.path}: only a file of a guarded list is pre-written")
        cdef int64_t total = 0
        if end > self.file_size:
            end = self.file_size
        # Its own descriptor (see _own_fd): zeros through a number the writer closed at a
        # roll-over would land in whatever file took that number next.
        cdef int fd = self._own_fd(True)
        if fd < 0:
            return 0  # the path names another file now: this one is deleted
        try:
            self._enter()
            try:
                total = self._prewrite_with(fd, start, end)
            finally:
                self._leave()
        finally:
            os.close(fd)
        return total

    cdef int64_t _prewrite_with(self, int fd, int64_t start, int64_t end) except -1:
        cdef int64_t at = start, total = 0, done = 0
        cdef int err = 0
        with nogil:
            # One call writes the whole range, a chunk at a time under the write guard: a writer
            # that reaches past the mark waits for one chunk at most, and the caller needs the
            # GIL once a range, not once a chunk (a busy put thread holds it for up to the switch
            # interval, 5 ms, each time: at 1 MB a hand-over the classic log's prefault fell
            # behind 1 KiB single puts, which then took the pwrite path).
            while True:
                dl_wguard_lock(&self._wguard)
                if at < self.prewritten_to:
                    at = self.prewritten_to
                if at < self.wrote_position:
                    at = self.wrote_position
                if end <= at:
                    dl_wguard_unlock(&self._wguard)
                    break
                err = dl_zero_fill_fd(fd, at, end if end - at < DL_ZF_MAX else at + DL_ZF_MAX, &done)
                if at + done > self.prewritten_to:
                    dl_store_i64(&self.prewritten_to, at + done)
                dl_wguard_unlock(&self._wguard)
                total += done
                at += done
                if err:
                    break
        _saw_errno(err)
        if self.prewritten_to > self.populated_to:
            self.populated_to = self.prewritten_to
        if err and end > at and self.populate(at, end, False):
            return total + end - at
        return total

    def drop_cache(self, int64_t start, int64_t end):
        """Hand the page cache of the whole pages in ``[start, end)`` back to the kernel: this
        mapping's page table entries go (MADV_DONTNEED; a later read faults the bytes in again)
        and the kernel may then free the pages (POSIX_FADV_DONTNEED, clean pages only, so
        call it on flushed ranges). The bytes on disk do not change. Returns the bytes advised."""
        self._check_open()
        if start < 0:
            start = 0
        if end > self.file_size:
            end = self.file_size
        start = ((start + PAGE - 1) // PAGE) * PAGE
        end = (end // PAGE) * PAGE
        if end <= start:
            return 0
        cdef int fd = self._own_fd(False)  # see prewrite
        if fd < 0:
            return 0
        try:
            self._enter()
            with nogil:
                madvise(self.ptr + start, <size_t>(end - start), MADV_DONTNEED)
                posix_fadvise(fd, start, end - start, POSIX_FADV_DONTNEED)
                self._leave()
        finally:
            os.close(fd)
        return end - start

    def last_modified(self):
        return os.stat(self.path).st_mtime

    def close(self):
        """Close the write descriptor and unmap, once every user that entered has left (a
        write, flush or pre-write on another thread); later ones are refused."""
        with nogil:
            dl_users_drain(&self._users, &self._closing)
        self.release_fd()
        if self._mm is not None:
            self.ptr = NULL
            self._view = None
            self._mm.close()
            self._mm = None

    def destroy(self):
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def __repr__(self):
        return (f"MappedFile({self.path!r}, from={self.file_from_offset}, wrote={self.wrote_position}, "
                f"flushed={self.flushed_position}, start={self.start_position})")


cdef class MmapFileList:
    """DLedger's MmapFileList: contiguous segment files named by their 20-digit start offset."""

    cdef readonly str store_path
    cdef readonly int64_t file_size
    cdef readonly bint readonly
    cdef public list files
    cdef public int64_t flushed_where
    cdef public bint new_names  # a file was created since the last flush: fsync the directory
    # Its files may be pre-written (MappedFile.prewrite): their writes take the write guard.
    cdef readonly bint guarded
    # Called with each file last_file creates, under the creator's locks: a pre-writer's wake-up,
    # so that a new file's first pages are made ahead of its writer at once, not at its next look.
    cdef public object on_create

    def __init__(self, str store_path, int64_t file_size, bint readonly=False, bint guarded=False):
        if file_size <= 0:
            raise ValueError(f"segment size must be positive, got {file_size}")
        self.store_path = store_path
        self.file_size = file_size
        self.readonly = readonly
        self.guarded = guarded
        self.files = []
        self.flushed_where = 0

    def load(self):
        """Map every segment file of the directory, in name order. All must have the segment size."""
        if not os.path.isdir(self.store_path):
            return
        names = []
        for n in sorted(os.listdir(self.store_path)):
            if not n.startswith("."):
                names.append(n)
            elif n.endswith(TMP_SUFFIX) and not self.readonly:
                os.unlink(os.path.join(self.store_path, n))  # a creation a crash interrupted
        for name in names:
            path = os.path.join(self.store_path, name)
            if not (len(name) == 20 and name.isdigit()):
                raise DLedgerError(ResponseCode.DISK_ERROR,
                                   f"{path}: not a segment file (names are 20-digit offsets)")
            size = os.path.getsize(path)
            if size != self.file_size:
                raise DLedgerError(ResponseCode.DISK_ERROR,
                                   f"{path}: size {size} differs from the segment size {self.file_size} "
                                   "(files of mixed sizes)")
            self.files.append(MappedFile(path, int(name), self.file_size, False, self.readonly, self.guarded))

    def check_self(self):
        """Adjacent files must be exactly one segment apart."""
        cdef MappedFile prev = None, f
        for f in self.files:
            if prev is not None and f.file_from_offset - prev.file_from_offset != self.file_size:
                raise DLedgerError(ResponseCode.DISK_ERROR,
                                   f"{f.path}: starts at {f.file_from_offset}, expected "
                                   f"{prev.file_from_offset + self.file_size} after {prev.path}")
            prev = f

    @property
    def min_offset(self):
        if not self.files:
            return -1
        cdef MappedFile f = self.files[0]
        return f.file_from_offset + f.start_position

    @property
    def max_wrote_position(self):
        if not self.files:
            return 0
        cdef MappedFile f = self.files[len(self.files) - 1]
        return f.file_from_offset + f.wrote_position

    cpdef MappedFile last_file(self, int64_t start_offset, bint create):
        """getLastMappedFile: the last file, creating the next (or the first) when full or absent."""
        cdef MappedFile last = self.files[len(self.files) - 1] if self.files else None
        cdef int64_t create_at = -1
        if last is None:
            create_at = start_offset - start_offset % self.file_size
        elif last.wrote_position >= self.file_size:
            create_at = last.file_from_offset + self.file_size
        if create_at < 0 or not create:
            return last
        if self.readonly:
            raise DLedgerError(ResponseCode.DISK_ERROR, f"{self.store_path} is opened read-only")
        os.makedirs(self.store_path, exist_ok=True)
        if last is not None:
            last.release_fd()  # full: written no more
        f = MappedFile(os.path.join(self.store_path, offset_to_file_name(create_at)), create_at,
                       self.file_size, True, False, self.guarded)
        self.files.append(f)
        self.new_names = True
        if self.on_create is not None:
            self.on_create(f)
        return f

    cpdef int64_t pre_append(self, int64_t length, bint use_blank=True) except? -2:
        """Where an append of ``length`` bytes would land, ending the last file with a blank if needed."""
        cdef MappedFile f = self.last_file(0, True)
        cdef int64_t blank = DL_MIN_BLANK_LEN if use_blank else 0
        if length + blank > self.file_size:
            return -1
        if length + blank > f.file_size - f.wrote_position:
            if blank < DL_MIN_BLANK_LEN:
                return -1
            f.fill_blank()
            f = self.last_file(0, True)
        return f.file_from_offset + f.wrote_position

    def append(self, data, bint use_blank=True):
        cdef const unsigned char[::1] b = _ro(data)
        cdef int64_t pos = self.pre_append(b.shape[0], use_blank)
        if pos < 0:
            return -1
        cdef MappedFile f = self.files[len(self.files) - 1]
        return f.append(data)

    cpdef MappedFile find(self, int64_t offset):
        """findMappedFileByOffset, or None when no file holds ``offset``."""
        if not self.files:
            return None
        cdef MappedFile first = self.files[0]
        cdef Py_ssize_t k = (offset // self.file_size) - (first.file_from_offset // self.file_size)
        cdef MappedFile f
        if 0 <= k < len(self.files):
            f = self.files[k]
            if f.file_from_offset <= offset < f.file_from_offset + self.file_size:
                return f
        for f in self.files:
            if f.file_from_offset <= offset < f.file_from_offset + self.file_size:
                return f
        return None

    def truncate_offset(self, int64_t offset):
        """Cut everything at and after ``offset``: later files are deleted, the holder is rewound and zeroed."""
        cdef MappedFile f
        keep = []
        for f in self.files:
            end = f.file_from_offset + self.file_size
            if end <= offset:
                keep.append(f)
            elif f.file_from_offset <= offset:
                rel = offset - f.file_from_offset
                if not self.readonly and rel < f.wrote_position:
                    f.zero_range(rel, f.wrote_position)
                f.wrote_position = rel
                f.flushed_position = min(f.flushed_position, rel)
                keep.append(f)
            else:
                if self.readonly:
                    keep.append(f)
                else:
                    f.destroy()
        self.files = keep
        if self.flushed_where > offset:
            self.flushed_where = offset

    def reset_offset(self, int64_t offset):
        """Front trim: files wholly before ``offset`` are deleted; the holder starts at it."""
        cdef MappedFile f
        keep = []
        for f in self.files:
            if f.file_from_offset + self.file_size <= offset:
                if not self.readonly:
                    f.destroy()
            else:
                if f.file_from_offset <= offset:
                    f.start_position = offset - f.file_from_offset
                keep.append(f)
        self.files = keep

    def rebuild_with_pos(self, int64_t pos):
        """An empty list that starts at ``pos`` (follower catching up past our whole log)."""
        self.truncate_offset(-1)
        cdef MappedFile f = self.last_file(pos, True)
        f.wrote_position = pos - f.file_from_offset
        f.flushed_position = f.wrote_position
        f.start_position = f.wrote_position
        self.flushed_where = pos
        return self.max_wrote_position == pos == self.min_offset

    def flush(self, int least_pages=0):
        """Flush every file from the one holding flushed_where on; returns the new flushed_where.
        First fsyncs the directory if files were created since the last flush, so that no
        flushed byte sits in a file whose name a machine crash could still take away."""
        cdef MappedFile f
        if self.new_names and not self.readonly:
            self.new_names = False
            dfd = os.open(self.store_path, os.O_RDONLY)
            try:
                os.fsync(dfd)
            except BaseException:
                self.new_names = True
                raise
            finally:
                os.close(dfd)
        for f in self.files:
            if f.file_from_offset + f.wrote_position <= self.flushed_where and f.flushed_position >= f.wrote_position:
                continue
            f.flush(least_pages)
            self.flushed_where = f.file_from_offset + f.flushed_position
        return self.flushed_where

    def delete_expired_by_time(self, double expired_ms, double now_ms, bint clean_immediately,
                               int max_files=10, int64_t keep_from=-1):
        """Delete files (never the last) whose mtime is older than ``expired_ms``; stop at the first
        fresh one, and (``keep_from`` >= 0) at the first that holds bytes at or past ``keep_from``
        (what a reader, such as dispatch, has still to read)."""
        cdef MappedFile f
        deleted = 0
        while len(self.files) > 1 and deleted < max_files:
            f = self.files[0]
            if not clean_immediately and now_ms < f.last_modified() * 1000.0 + expired_ms:
                break
            if keep_from >= 0 and f.file_from_offset + f.file_size > keep_from:
                break
            f.destroy()
            del self.files[0]
            deleted += 1
        return deleted

    def close(self):
        cdef MappedFile f
        for f in self.files:
            f.close()

    def __len__(self):
        return len(self.files)


cdef inline const unsigned char *_mapped(MappedFile f) except NULL:
    """A file's mapping, for a reader holding the GIL: a file that retention or a truncation
    has just closed (its pointer NULL) while another thread looked it up is refused."""
    if f.ptr == NULL:
        raise DLedgerError(ResponseCode.DISK_ERROR, f"{f.path} is closed (deleted meanwhile?)")
    return f.ptr


cdef class EntryLog:
    """The data and index lists of one node directory, with the ledger counters.

    Append, read and lookup of entries: the per-entry work of the store. Recovery, truncation
    and retention decide the counters (``begin``, ``end``, ``end_term``) from Python.
    """

    cdef readonly MmapFileList data
    cdef readonly MmapFileList index
    cdef public int64_t begin
    cdef public int64_t end
    cdef public int64_t end_term
    cdef public Py_ssize_t max_body_size
    cdef public bint disk_full
    cdef public bint record_crc
    # Data bytes appended as single entries (through the mapping) and as batches (by pwritev, or
    # below the pre-written mark through the mapping) since the store service last looked: it
    # populates data pages writable while the first dominate, and pre-writes them otherwise.
    cdef public int64_t mapped_bytes
    cdef public int64_t written_bytes
    # The AppendHook (DLedgerCommitLog's): leader appends write big-endian ``pos + 48`` (the
    # entry's body offset in the log) at this byte of each body before its CRC; -1 for none.
    cdef int64_t patch_at
    # Appends and reads in progress, against close (see dl_users_enter): an append copies
    # into the mappings with the GIL let go (large bodies, WRITE_RELEASE), a read follows
    # pointers into them, and close unmaps them (and leaves their pointers NULL).
    cdef int _users
    cdef int _closing

    def __init__(self, MmapFileList data, MmapFileList index, Py_ssize_t max_body_size,
                 bint record_crc=True, body_pos_patch=None):
        if index.file_size % DL_INDEX_UNIT != 0:
            raise ValueError(f"index segment size {index.file_size} is not a multiple of 32")
        if body_pos_patch is not None and body_pos_patch < 0:
            raise ValueError(f"body_pos_patch must be >= 0, got {body_pos_patch}")
        self.patch_at = -1 if body_pos_patch is None else body_pos_patch
        self.data = data
        self.index = index
        self.begin = -1
        self.end = -1
        self.end_term = -1
        self.max_body_size = max_body_size
        self.disk_full = False
        self.record_crc = record_crc

    cdef inline int _enter(self) except -1:
        if not dl_users_enter(&self._users, &self._closing):
            raise DLedgerError(ResponseCode.DISK_ERROR,
                               f"the entry log of {self.data.store_path} is closed")
        return 0

    cdef inline void _leave(self) noexcept nogil:
        dl_users_leave(&self._users)

    def stop_access(self):
        """Refuse appends and reads from now on (DISK_ERROR), once those in progress have
        finished: what a close does first, so that its flush and checkpoint cover every
        append that returned, and no read follows a pointer into a mapping it unmaps."""
        with nogil:
            dl_users_drain(&self._users, &self._closing)

    @property
    def body_pos_patch(self):
        """Where leader appends write the body's own log offset (``pos + 48``), or None."""
        return None if self.patch_at < 0 else self.patch_at

    cdef inline void _check_body(self, Py_ssize_t n) except *:
        if n <= 0:
            raise DLedgerError(ResponseCode.REQUEST_WITH_EMPTY_BODYS, "empty body")
        if n > self.max_body_size:
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT,
                               f"body of {n} bytes is over the limit of {self.max_body_size}")
        if self.data.file_size < n + DL_BODY_OFFSET + DL_MIN_BLANK_LEN:
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT,
                               f"entry of {n + DL_BODY_OFFSET} bytes does not fit a data segment of "
                               f"{self.data.file_size}")

    cdef MappedFile _put_unit(self, MappedFile xf, int32_t magic, int64_t pos, int32_t size, int64_t index,
                              int64_t term):
        """Write one index unit at the index's end (``xf`` is its last file, replaced by the next
        one when full); returns the file it went to."""
        if xf.wrote_position >= xf.file_size:
            xf = self.index.last_file(0, True)
        # Callers reserve their units before writing their data; this is the backstop (an
        # exception, never SIGBUS: see MappedFile._reserve).
        xf._reserve(xf.wrote_position + DL_INDEX_UNIT)
        cdef unsigned char unit[32]  # DL_INDEX_UNIT
        if NO_MAPPED_STORES:
            dl_write_index(unit, magic, pos, size, index, term)
            xf._pwrite(xf.wrote_position, unit, DL_INDEX_UNIT)
        else:
            dl_write_index(xf.ptr + xf.wrote_position, magic, pos, size, index, term)
        xf.wrote_position += DL_INDEX_UNIT
        return xf

    cdef inline void _advance(self, int64_t first, int64_t last, int64_t term):
        """Entries ``first`` .. ``last`` (term ``last``'s) are written: move the ledger counters."""
        self.end = last
        self.end_term = term
        if self.begin == -1:
            self.begin = first

    cdef MappedFile _begin_run(self, int64_t first_len, int64_t index0):
        """Make room for a run's first entry (``first_len`` bytes; the data file rolls if it must)
        and its index unit; the data file the run goes to."""
        if self.data.pre_append(first_len, True) < 0:
            raise DLedgerError(ResponseCode.DISK_ERROR, "data pre-append failed")
        cdef int64_t ipos = self.index.pre_append(DL_INDEX_UNIT, False)
        if ipos != index0 * DL_INDEX_UNIT:
            raise DLedgerError(ResponseCode.DISK_ERROR,
                               f"index unit of entry {index0} would land at {ipos}, not {index0 * DL_INDEX_UNIT}")
        return self.data.files[len(self.data.files) - 1]

    cdef inline void _check_leader_append(self, int64_t term) except *:
        # What every leader append checks once its bodies passed: room on disk, no older term.
        if self.disk_full:
            raise DLedgerError(ResponseCode.DISK_FULL, "disk full: appends refused until space is freed")
        if term < self.end_term:
            raise DLedgerError(ResponseCode.INCONSISTENT_TERM,
                               f"term {term} is below the ledger end term {self.end_term}")

    cdef inline void _check_patch(self, Py_ssize_t n) except *:
        if self.patch_at >= 0 and n < self.patch_at + 8:
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT,
                               f"body of {n} bytes has no room for its position at byte {self.patch_at}")

    cdef int64_t _put(self, const unsigned char *body, Py_ssize_t n, int64_t index, int64_t term,
                      int64_t expect_pos, int32_t magic, int32_t channel, int32_t chain_crc,
                      int64_t body_crc, bint patch=False) except -2:
        """Write one entry and its index unit. ``expect_pos`` >= 0 must be where it lands;
        ``patch``: apply the AppendHook (``patch_at`` is set and the body long enough)."""
        cdef int64_t size = DL_BODY_OFFSET + n
        cdef int64_t pos = self.data.pre_append(size, True)
        if pos < 0:
            raise DLedgerError(ResponseCode.DISK_ERROR, "data pre-append failed")
        if expect_pos >= 0 and pos != expect_pos:
            raise DLedgerError(ResponseCode.DISK_ERROR,
                               f"entry {index} would land at {pos}, the leader put it at {expect_pos}")
        cdef int64_t ipos = self.index.pre_append(DL_INDEX_UNIT, False)
        if ipos != index * DL_INDEX_UNIT:
            raise DLedgerError(ResponseCode.DISK_ERROR,
                               f"index unit of entry {index} would land at {ipos}, not {index * DL_INDEX_UNIT}")
        cdef MappedFile df = self.data.files[len(self.data.files) - 1]
        cdef MappedFile xf = self.index.files[len(self.index.files) - 1]
        # The index unit's blocks first (see MappedFile._reserve), so that it cannot fail once
        # the data is written; the data's too while it goes through the mapping.
        xf._reserve(xf.wrote_position + DL_INDEX_UNIT)
        cdef bint by_pwrite = NO_MAPPED_STORES
        if not by_pwrite:
            df._reserve(df.wrote_position + size)
        cdef unsigned char *p = df.ptr + df.wrote_position
        cdef uint32_t crc
        cdef unsigned char stamp[8]
        cdef unsigned char head[48]  # DL_BODY_OFFSET
        cdef iovec iov[4]
        cdef int parts
        if patch:
            dl_put64(stamp, <uint64_t>(pos + DL_BODY_OFFSET))
        if body_crc >= 0:
            crc = <uint32_t>body_crc
        elif self.record_crc:
            if n >= NOGIL_COPY:
                with nogil:
                    crc = _body_crc(body, n, self.patch_at if patch else -1, stamp)
            else:
                crc = _body_crc(body, n, self.patch_at if patch else -1, stamp)
        else:
            crc = 0
        if by_pwrite:
            # After an ENOSPC in this process a store through the mapping can die of SIGBUS even
            # into reserved pages (see NO_MAPPED_STORES): header, body and stamp by pwritev,
            # whose ENOSPC is DISK_FULL with nothing left written.
            dl_write_header(head, magic, <int32_t>size, index, term, pos, channel, chain_crc, <int32_t>crc,
                            <int32_t>n)
            iov[0].iov_base = head
            iov[0].iov_len = DL_BODY_OFFSET
            if patch:
                iov[1].iov_base = <void *>body
                iov[1].iov_len = <size_t>self.patch_at
                iov[2].iov_base = stamp
                iov[2].iov_len = 8
                iov[3].iov_base = <void *>(body + self.patch_at + 8)
                iov[3].iov_len = <size_t>(n - self.patch_at - 8)
                parts = 4
            else:
                iov[1].iov_base = <void *>body
                iov[1].iov_len = <size_t>n
                parts = 2
            df._pwritev(df.wrote_position, iov, parts, size)
            df.wrote_position += size
            self.written_bytes += size
            self._put_unit(xf, magic, pos, <int32_t>size, index, term)
            self._advance(index, index, term)
            return pos
        # One entry goes through the mapping: a syscall per entry would cost more than the page
        # fault per 4 KiB it saves (small entries share a page), and the store service prefaults
        # the data files while most bytes arrive this way (see mapped_bytes).
        cdef bint held = df._guard(df.wrote_position + size)
        dl_write_header(p, magic, <int32_t>size, index, term, pos, channel, chain_crc, <int32_t>crc,
                        <int32_t>n)
        if n >= NOGIL_COPY:
            with nogil:
                memcpy(p + DL_BODY_OFFSET, body, n)
        else:
            memcpy(p + DL_BODY_OFFSET, body, n)
        if patch:
            memcpy(p + DL_BODY_OFFSET + self.patch_at, stamp, 8)
        df._unguard(held, df.wrote_position + size)
        df.wrote_position += size
        self.mapped_bytes += size
        self._put_unit(xf, magic, pos, <int32_t>size, index, term)
        self._advance(index, index, term)
        return pos

    cdef int64_t _append_leader(self, object body, int64_t term) except -2:
        if not PyBytes_CheckExact(body):
            body = bytes(memoryview(body).cast("B"))
        cdef Py_ssize_t n = PyBytes_GET_SIZE(body)
        self._check_body(n)
        self._check_patch(n)
        self._check_leader_append(term)
        return self._put(<const unsigned char *>PyBytes_AS_STRING(body), n, self.end + 1, term, -1,
                         DL_CURRENT_MAGIC, 0, 0, -1, self.patch_at >= 0)

    def append(self, body, int64_t term):
        """Append as leader at ``end + 1``; returns the new entry's index."""
        self._enter()
        try:
            self._append_leader(body, term)
        finally:
            self._leave()
        return self.end

    def append_with_pos(self, body, int64_t term):
        """As ``append``, returning ``(index, pos)``."""
        self._enter()
        try:
            pos = self._append_leader(body, term)
        finally:
            self._leave()
        return self.end, pos

    def append_batch(self, bodies, int64_t term):
        """Append many bodies as leader; returns ``(first_index, positions)`` (numpy int64).

        Every body is checked before anything is written, so a bad one changes nothing.
        """
        self._enter()
        try:
            return self._append_batch(bodies, term)
        finally:
            self._leave()

    cdef tuple _append_batch(self, bodies, int64_t term):
        cdef _Bodies bs = _Bodies(bodies)
        cdef Py_ssize_t count = bs.count, k
        for k in range(count):
            self._check_body(bs.lens[k])
            self._check_patch(bs.lens[k])
        self._check_leader_append(term)
        positions = np.empty(count, dtype=np.int64)
        cdef int64_t[::1] ps = positions
        cdef int64_t first = self.end + 1
        # Per entry one scratch buffer written ahead of its body: the header, and with the
        # AppendHook also the body's bytes before the stamp and the stamp (see _put_run).
        cdef Py_ssize_t stride = DL_BODY_OFFSET + (self.patch_at + 8 if self.patch_at >= 0 else 0)
        cdef Py_ssize_t run = min(RUN_ENTRIES, max(1, SCRATCH_BYTES // stride))
        cdef unsigned char *headers = <unsigned char *>malloc(run * stride)
        cdef unsigned char *units = <unsigned char *>malloc(run * DL_INDEX_UNIT)
        cdef iovec *iov = <iovec *>malloc(2 * run * sizeof(iovec))
        try:
            if headers == NULL or units == NULL or iov == NULL:
                raise MemoryError()
            k = 0
            while k < count:
                k += self._put_run(bs, k, min(count - k, run), first + k, term, headers, stride, iov, &ps[k], units)
        finally:
            free(headers)
            free(units)
            free(iov)
        return first, positions

    cdef Py_ssize_t _put_run(self, _Bodies bs, Py_ssize_t start, Py_ssize_t limit, int64_t index0,
                             int64_t term, unsigned char *headers, Py_ssize_t stride, iovec *iov,
                             int64_t *pos_out, unsigned char *units) except -1:
        """Write the leader entries ``bs[start:start + limit]`` (at most one run) that fit in the
        current data file with one pwritev, then their index units; returns how many.
        Each entry is two buffers: its scratch (``stride`` bytes: the header, and with the
        AppendHook the body's first ``patch_at`` bytes and the stamp) and the rest of its body,
        written from the caller's memory, which is never changed."""
        cdef MappedFile df = self._begin_run(DL_BODY_OFFSET + bs.lens[start], index0)
        cdef int64_t at = df.wrote_position, size, pa = self.patch_at
        cdef Py_ssize_t j = 0, n, skip = stride - DL_BODY_OFFSET
        cdef uint32_t crc
        cdef const unsigned char *body
        cdef unsigned char *head
        while j < limit:
            n = bs.lens[start + j]
            body = bs.ptrs[start + j]
            size = DL_BODY_OFFSET + n
            if j and size + DL_MIN_BLANK_LEN > df.file_size - at:
                break  # the rest starts the next file (pre_append ends this one with a blank)
            pos_out[j] = df.file_from_offset + at
            head = headers + j * stride
            if pa >= 0:
                memcpy(head + DL_BODY_OFFSET, body, pa)
                dl_put64(head + DL_BODY_OFFSET + pa, <uint64_t>(pos_out[j] + DL_BODY_OFFSET))
            if not self.record_crc:
                crc = 0
            elif n >= NOGIL_COPY:
                with nogil:
                    crc = _split_crc(head + DL_BODY_OFFSET, skip, body + skip, n - skip)
            else:
                crc = _split_crc(head + DL_BODY_OFFSET, skip, body + skip, n - skip)
            dl_write_header(head, DL_CURRENT_MAGIC, <int32_t>size, index0 + j, term, pos_out[j], 0, 0,
                            <int32_t>crc, <int32_t>n)
            iov[2 * j].iov_base = head
            iov[2 * j].iov_len = <size_t>stride
            iov[2 * j + 1].iov_base = <void *>(body + skip)
            iov[2 * j + 1].iov_len = <size_t>(n - skip)
            at += size
            j += 1
        cdef int64_t run_from = df.wrote_position
        df._pwritev(run_from, iov, <int>(2 * j), at - run_from)
        self.written_bytes += at - run_from
        df.wrote_position = at  # only now: a flush on another thread msyncs up to wrote_position
        cdef Py_ssize_t i
        for i in range(j):
            dl_write_index(units + i * DL_INDEX_UNIT, DL_CURRENT_MAGIC, pos_out[i],
                           <int32_t>(DL_BODY_OFFSET + bs.lens[start + i]), index0 + i, term)
        try:
            self._write_units(units, j)
        except BaseException:
            # The run's entries are not in the ledger (end did not move): their bytes must not
            # read as entries, nor the next run land after them. The pages were just written,
            # so the zeros take no fault; a flush that already took them writes the zeros next.
            memset(df.ptr + run_from, 0, at - run_from)
            df.wrote_position = run_from
            if df.flushed_position > run_from:
                df.flushed_position = (run_from // PAGE) * PAGE
            self.written_bytes -= at - run_from
            raise
        self._advance(index0, index0 + j - 1, term)
        return j

    cdef int _write_units(self, const unsigned char *units, Py_ssize_t count) except -1:
        """Write ``count`` index units at the index's end, each index file's share in one
        block (INDEX_BLOCKS); on failure nothing of them is left (what landed is zeroed)."""
        cdef MappedFile xf = self.index.files[len(self.index.files) - 1]
        cdef MappedFile first = None
        cdef int64_t first_from = 0, nbytes, at
        cdef Py_ssize_t k = 0, n, had = len(self.index.files)
        try:
            while k < count:
                if xf.wrote_position >= xf.file_size:
                    xf = self.index.last_file(0, True)
                if first is None:
                    first, first_from = xf, xf.wrote_position
                n = min(count - k, (xf.file_size - xf.wrote_position) // DL_INDEX_UNIT)
                nbytes = n * DL_INDEX_UNIT
                at = xf.wrote_position
                # Allocates the blocks ahead (ALLOCATE_AHEAD), else writes zeros there:
                # DISK_FULL on a full disk, where the memcpy below would die of SIGBUS.
                xf._reserve(at + nbytes)
                if not NO_MAPPED_STORES and (xf._folio_end(at + nbytes) <= xf.writable_to
                                             or at + nbytes > xf.allocated_to):
                    # Pages made ahead by the store service or reserved by _reserve's zeros.
                    memcpy(xf.ptr + at, units + k * DL_INDEX_UNIT, nbytes)
                else:
                    xf._pwrite(at, units + k * DL_INDEX_UNIT, nbytes)
                xf.wrote_position = at + nbytes
                k += n
        except BaseException:
            if first is not None and first is not xf:  # a share went to an earlier file: undo it
                memset(first.ptr + first_from, 0, first.wrote_position - first_from)
                first.wrote_position = first_from
            # A file made here holds none of them now: left in place, the next unit would be
            # put at its start, not after the earlier file's last (INCONSISTENT index).
            while len(self.index.files) > had:
                (<MappedFile>self.index.files.pop()).destroy()
            raise
        return 0

    def append_framed(self, buf, offsets, int64_t term):
        """Append as leader the entries framed in ``buf``: entry k is ``buf[offsets[k]:offsets[k + 1]]``,
        its first 48 bytes room for the header and the rest its body. The headers (with the
        AppendHook's stamp and the body CRC) are written into ``buf`` itself, which must be
        writable and is the caller's scratch, then each data file's share goes in one pwrite:
        no copy of the bodies into a second buffer. Returns ``(first_index, positions)`` as
        ``append_batch``; every body is checked before anything is written."""
        cdef int64_t end
        self._enter()
        try:
            return self._append_framed(buf, offsets, term, &end, False)
        finally:
            self._leave()

    def append_framed_end(self, buf, offsets, int64_t term, bint release_gil=False):
        """``append_framed``, returning ``(first_index, positions, end)``: ``end`` is the log
        position just past the last entry (what a single member's commit moves to). With
        ``release_gil`` the headers' CRCs and the write run without the GIL whatever the
        batch's size (see WRITE_RELEASE)."""
        cdef int64_t end = 0
        self._enter()
        try:
            first, positions = self._append_framed(buf, offsets, term, &end, release_gil)
        finally:
            self._leave()
        return first, positions, end

    cdef tuple _append_framed(self, buf, offsets, int64_t term, int64_t *end_out, bint release):
        # The usual arguments (encode_uniform's bytearray and int64 offsets) are read in place:
        # a memoryview cast and np.ascontiguousarray cost a batch of small entries ~1 us.
        cdef unsigned char *b
        cdef Py_ssize_t blen
        cdef unsigned char[::1] bview
        if PyByteArray_CheckExact(buf):
            b = <unsigned char *>PyByteArray_AS_STRING(buf)
            blen = PyByteArray_GET_SIZE(buf)
        else:
            bview = memoryview(buf).cast("B")
            blen = bview.shape[0]
            b = &bview[0] if blen else NULL
        cdef cnp.ndarray arr
        if (cnp.PyArray_CheckExact(offsets) and cnp.PyArray_TYPE(<cnp.ndarray>offsets) == cnp.NPY_INT64
                and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>offsets) and cnp.PyArray_NDIM(<cnp.ndarray>offsets) == 1):
            arr = <cnp.ndarray>offsets
        else:
            arr = np.ascontiguousarray(offsets, dtype=np.int64)
            if cnp.PyArray_NDIM(arr) != 1:
                raise ValueError("entry offsets must be one-dimensional")
        cdef const int64_t *off = <const int64_t *>cnp.PyArray_DATA(arr)
        cdef Py_ssize_t count = cnp.PyArray_DIM(arr, 0) - 1, k
        if count <= 0:
            raise DLedgerError(ResponseCode.REQUEST_WITH_EMPTY_BODYS, "no entries")
        if off[0] != 0 or off[count] != blen:
            raise ValueError("entry offsets do not span the buffer")
        for k in range(count):
            if off[k + 1] - off[k] < DL_BODY_OFFSET:
                raise ValueError(f"entry {k}: {off[k + 1] - off[k]} bytes leave no room for its header")
            self._check_body(off[k + 1] - off[k] - DL_BODY_OFFSET)
            self._check_patch(off[k + 1] - off[k] - DL_BODY_OFFSET)
        self._check_leader_append(term)
        cdef cnp.npy_intp dim = count
        positions = cnp.PyArray_EMPTY(1, &dim, cnp.NPY_INT64, 0)
        cdef int64_t *ps = <int64_t *>cnp.PyArray_DATA(<cnp.ndarray>positions)
        cdef int64_t first = self.end + 1
        k = 0
        while k < count:
            k += self._put_framed_run(b, off, k, count, first + k, term, &ps[k], release)
        end_out[0] = ps[count - 1] + off[count] - off[count - 1]
        return first, positions

    cdef Py_ssize_t _put_framed_run(self, unsigned char *buf, const int64_t *off, Py_ssize_t start,
                                    Py_ssize_t count, int64_t index0, int64_t term, int64_t *pos_out,
                                    bint release=False) except -1:
        """Write the framed entries from ``start`` that fit in the current data file: headers
        filled in place, one pwrite, then their index units; returns how many."""
        cdef MappedFile df = self._begin_run(off[start + 1] - off[start], index0)
        cdef MappedFile xf = self.index.files[len(self.index.files) - 1]
        cdef int64_t at = df.wrote_position, size, base = df.file_from_offset + df.wrote_position - off[start]
        cdef Py_ssize_t j = 0
        # A run's index units stay in one index file (the next run's _begin_run makes the next).
        cdef Py_ssize_t units = (xf.file_size - xf.wrote_position) // DL_INDEX_UNIT
        while start + j < count and j < units:
            size = off[start + j + 1] - off[start + j]
            if j and size + DL_MIN_BLANK_LEN > df.file_size - at:
                break  # the rest starts the next file (pre_append ends this one with a blank)
            at += size
            j += 1
        # The index units go through the mapping: their blocks first (DISK_FULL here, before
        # the data is written, rather than SIGBUS in _put_unit on a full disk).
        xf._reserve(xf.wrote_position + j * DL_INDEX_UNIT)
        cdef int64_t span = off[start + j] - off[start]
        cdef int err
        cdef Py_ssize_t done = 0
        cdef iovec one
        cdef bint held
        if release and df._mapped_write(df.wrote_position, span):
            df._pwrite_begin(df.wrote_position, span)
            with nogil:  # (MAPPED_APPENDS) headers and the copy without the GIL
                self._frame(buf, off, start, j, base, index0, term, pos_out)
                memcpy(df.ptr + df.wrote_position, buf + off[start], span)
        elif release or span >= NOGIL_COPY:
            # Headers and the write in one stretch without the GIL (one hand-over, not two).
            df._pwrite_begin(df.wrote_position, span)
            one.iov_base = <void *>(buf + off[start])
            one.iov_len = <size_t>span
            with nogil:
                self._frame(buf, off, start, j, base, index0, term, pos_out)
                # By pwrite, not through the mapping (see IOV_MAX_ for why).
                held = df._guard(df.wrote_position + span)
                err = _pwritev_all(df.fd, &one, 1, df.wrote_position, &done)
                df._unguard(held, df.wrote_position + done)  # what landed (see _pwritev)
            df._pwrite_end(df.wrote_position, err, done)
        else:
            self._frame(buf, off, start, j, base, index0, term, pos_out)
            df._pwrite(df.wrote_position, buf + off[start], span)
        self.written_bytes += span
        df.wrote_position = at  # only now: a flush on another thread msyncs up to wrote_position
        cdef Py_ssize_t i
        for i in range(j):
            xf = self._put_unit(xf, DL_CURRENT_MAGIC, pos_out[i], <int32_t>(off[start + i + 1] - off[start + i]),
                                index0 + i, term)
        self._advance(index0, index0 + j - 1, term)
        return j

    cdef void _frame(self, unsigned char *buf, const int64_t *off, Py_ssize_t start, Py_ssize_t j, int64_t base,
                     int64_t index0, int64_t term, int64_t *pos_out) noexcept nogil:
        """Headers of framed entries ``start .. start + j`` whose buffer offset ``o`` lands at log
        position ``base + o``: the AppendHook's stamp, then the CRC of the body as stored."""
        cdef Py_ssize_t i
        cdef int64_t pos, size
        cdef unsigned char *p
        cdef uint32_t crc
        for i in range(j):
            p = buf + off[start + i]
            size = off[start + i + 1] - off[start + i]
            pos = base + off[start + i]
            pos_out[i] = pos
            if self.patch_at >= 0:
                dl_put64(p + DL_BODY_OFFSET + self.patch_at, <uint64_t>(pos + DL_BODY_OFFSET))
            crc = dl_crc32(0, p + DL_BODY_OFFSET, <size_t>(size - DL_BODY_OFFSET)) if self.record_crc else 0
            dl_write_header(p, DL_CURRENT_MAGIC, <int32_t>size, index0 + i, term, pos, 0, 0, <int32_t>crc,
                            <int32_t>(size - DL_BODY_OFFSET))

    def append_entry(self, int64_t index, int64_t term, int64_t pos, body, int32_t magic=1,
                     int32_t channel=0, int64_t chain_crc=0, int64_t body_crc=-1):
        """Append an entry the leader made: it must be ``end + 1`` and land at ``pos``."""
        self._enter()
        try:
            return self._append_entry(index, term, pos, body, magic, channel, chain_crc, body_crc)
        finally:
            self._leave()

    cdef int64_t _append_entry(self, int64_t index, int64_t term, int64_t pos, body, int32_t magic,
                               int32_t channel, int64_t chain_crc, int64_t body_crc) except -2:
        cdef const unsigned char[::1] b = _ro(body)
        cdef Py_ssize_t n = b.shape[0]
        self._check_body(n)
        if self.disk_full:
            raise DLedgerError(ResponseCode.DISK_FULL, "disk full: appends refused until space is freed")
        if index != self.end + 1:
            raise DLedgerError(ResponseCode.INCONSISTENT_INDEX, f"expected index {self.end + 1}, got {index}")
        if term < self.end_term:
            raise DLedgerError(ResponseCode.INCONSISTENT_TERM,
                               f"term {term} is below the ledger end term {self.end_term}")
        if magic != DL_CURRENT_MAGIC:
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"unknown entry magic {magic}")
        if pos < 0:
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"negative pos {pos}")
        # The leader's bodyCrc is kept as it is (replicas stay byte-identical, 0 included); a
        # recorded one is checked, so a body damaged on the way is refused, not stored.
        if body_crc > 0 and dl_crc32(0, &b[0], n) != <uint32_t>body_crc:
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT,
                               f"entry {index}: body does not match its bodyCrc {body_crc}")
        if body_crc < 0:
            body_crc = 0 if not self.record_crc else dl_crc32(0, &b[0], n)
        # Check the landing position before writing anything: a mismatch must change nothing.
        cdef MappedFile last = self.data.last_file(0, False)
        cdef int64_t would
        if last is None or last.wrote_position >= last.file_size:
            would = -1 if last is None else last.file_from_offset + last.file_size
        elif n + DL_BODY_OFFSET + DL_MIN_BLANK_LEN > last.file_size - last.wrote_position:
            would = last.file_from_offset + last.file_size
        else:
            would = last.file_from_offset + last.wrote_position
        if would >= 0 and would != pos:
            raise DLedgerError(ResponseCode.DISK_ERROR,
                               f"entry {index} would land at {would}, the leader put it at {pos}")
        return self._put(&b[0], n, index, term, pos, magic, channel, <int32_t>chain_crc, body_crc)

    def append_raw(self, blob, int64_t first_index, int64_t first_pos):
        """Append encoded entries the leader made (its on-disk bytes of ``first_index`` on, all of
        one data file): one memcpy into one data file, then the index units in one loop.

        The headers are checked (contiguous indices from ``end + 1``, positions from
        ``first_pos``, sizes, terms) and the landing position is checked before anything is
        written, so a refused blob changes nothing. Body CRCs are the caller's (``codec.scan``).
        Returns the last index appended.
        """
        self._enter()
        try:
            return self._append_raw(blob, first_index, first_pos)
        finally:
            self._leave()

    cdef int64_t _append_raw(self, blob, int64_t first_index, int64_t first_pos) except -2:
        cdef const unsigned char[::1] b = _ro(blob)
        cdef Py_ssize_t n = b.shape[0]
        if n <= 0:
            raise DLedgerError(ResponseCode.REQUEST_WITH_EMPTY_BODYS, "empty blob")
        if self.disk_full:
            raise DLedgerError(ResponseCode.DISK_FULL, "disk full: appends refused until space is freed")
        if first_index != self.end + 1:
            raise DLedgerError(ResponseCode.INCONSISTENT_INDEX,
                               f"expected index {self.end + 1}, got {first_index}")
        if first_pos < 0:
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"negative pos {first_pos}")
        cdef const unsigned char *src = &b[0]
        cdef const unsigned char *q
        cdef Py_ssize_t off = 0
        cdef int64_t expect = first_index, prev_term = self.end_term, term
        cdef int32_t size, body_size
        while off < n:
            if n - off < DL_BODY_OFFSET:
                raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"torn entry at blob offset {off}")
            q = src + off
            size = <int32_t>dl_get32(q + 4)
            body_size = <int32_t>dl_get32(q + 44)
            term = <int64_t>dl_get64(q + 16)
            if <int32_t>dl_get32(q) != DL_CURRENT_MAGIC or body_size <= 0 or size != body_size + DL_BODY_OFFSET:
                raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"bad entry header at blob offset {off}")
            if body_size > self.max_body_size:
                raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT,
                                   f"body of {body_size} bytes is over the limit of {self.max_body_size}")
            if size > n - off:
                raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"torn entry at blob offset {off}")
            if <int64_t>dl_get64(q + 8) != expect:
                raise DLedgerError(ResponseCode.INCONSISTENT_INDEX,
                                   f"expected index {expect}, got {<int64_t>dl_get64(q + 8)}")
            if <int64_t>dl_get64(q + 24) != first_pos + off:
                raise DLedgerError(ResponseCode.DISK_ERROR, f"entry {expect}: pos is not contiguous")
            if term < prev_term:
                raise DLedgerError(ResponseCode.INCONSISTENT_TERM, f"term {term} is below {prev_term}")
            prev_term = term
            expect += 1
            off += size
        if n + DL_MIN_BLANK_LEN > self.data.file_size:
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT,
                               f"blob of {n} bytes does not fit a data segment of {self.data.file_size}")
        # Where the blob and its first index unit would land; nothing is written before both agree.
        cdef MappedFile last = self.data.last_file(0, False)
        cdef int64_t would
        if last is None:
            would = 0
        elif last.wrote_position >= last.file_size or n + DL_MIN_BLANK_LEN > last.file_size - last.wrote_position:
            would = last.file_from_offset + last.file_size
        else:
            would = last.file_from_offset + last.wrote_position
        if would != first_pos:
            raise DLedgerError(ResponseCode.DISK_ERROR,
                               f"entry {first_index} would land at {would}, the leader put it at {first_pos}")
        cdef MappedFile xf = self.index.last_file(0, False)
        cdef int64_t iwould
        if xf is None:
            iwould = 0
        elif xf.wrote_position >= xf.file_size:
            iwould = xf.file_from_offset + xf.file_size
        else:
            iwould = xf.file_from_offset + xf.wrote_position
        if iwould != first_index * DL_INDEX_UNIT:
            raise DLedgerError(ResponseCode.DISK_ERROR,
                               f"index unit of entry {first_index} would land at {iwould}, "
                               f"not {first_index * DL_INDEX_UNIT}")
        cdef int64_t pos = self.data.pre_append(n, True)
        if pos != first_pos:
            raise DLedgerError(ResponseCode.DISK_ERROR, f"data pre-append gave {pos}, expected {first_pos}")
        cdef MappedFile df = self.data.files[len(self.data.files) - 1]
        cdef Py_ssize_t count = expect - first_index, k = 0
        # The index units are framed first and their blocks in the current index file reserved
        # before the data is written (DISK_FULL then changes nothing); units that spill into a
        # next index file are reserved there by _write_units, which undoes its share on
        # failure, and the data written is then undone too (as _put_run does).
        cdef unsigned char *units = <unsigned char *>malloc(count * DL_INDEX_UNIT)
        if units == NULL:
            raise MemoryError()
        cdef int64_t run_from = df.wrote_position
        try:
            off = 0
            while off < n:
                q = src + off
                size = <int32_t>dl_get32(q + 4)
                dl_write_index(units + k * DL_INDEX_UNIT, <int32_t>dl_get32(q), first_pos + off, size,
                               <int64_t>dl_get64(q + 8), <int64_t>dl_get64(q + 16))
                off += size
                k += 1
            xf = self.index.last_file(0, True)
            xf._reserve(min(xf.wrote_position + count * DL_INDEX_UNIT, xf.file_size))
            df._pwrite(run_from, src, n)
            df.wrote_position = run_from + n
            self.written_bytes += n
            try:
                self._write_units(units, count)
            except BaseException:
                memset(df.ptr + run_from, 0, n)  # just written: in the cache, no fault
                df.wrote_position = run_from
                if df.flushed_position > run_from:
                    df.flushed_position = (run_from // PAGE) * PAGE
                self.written_bytes -= n
                raise
        finally:
            free(units)
        self._advance(first_index, expect - 1, prev_term)
        return self.end

    def read_raw_range(self, int64_t first, int64_t last, int64_t max_bytes):
        """The stored bytes of entries ``first`` .. at most ``last``, as one blob: ``(blob,
        first_pos, count)``. Stops at the end of the data file holding ``first`` (a blank record
        sits there) and before ``max_bytes`` would be passed; holds at least one entry."""
        self._enter()
        try:
            return self._read_raw_range(first, last, max_bytes)
        finally:
            self._leave()

    cdef tuple _read_raw_range(self, int64_t first, int64_t last, int64_t max_bytes):
        cdef int64_t pos0
        cdef int32_t size0
        cdef const unsigned char *p0 = self._entry(first, &pos0, &size0)
        if last > self.end:
            last = self.end
        cdef MappedFile df = self.data.find(pos0)
        cdef int64_t file_end = df.file_from_offset + df.wrote_position
        cdef int64_t nxt = pos0 + size0, total = size0, k = first + 1, off, upos
        cdef int64_t cur_from = -1, cur_end = -1
        cdef int32_t usize
        cdef const unsigned char *base = NULL
        cdef const unsigned char *u
        cdef const unsigned char *p
        cdef MappedFile f
        while k <= last:
            off = k * DL_INDEX_UNIT
            if off < cur_from or off >= cur_end:
                f = self.index.find(off)
                if f is None:
                    break
                base = _mapped(f)
                cur_from = f.file_from_offset
                cur_end = cur_from + f.file_size
            u = base + (off - cur_from)
            upos = <int64_t>dl_get64(u + 4)
            usize = <int32_t>dl_get32(u + 12)
            if upos != nxt or usize < DL_BODY_OFFSET or nxt + usize > file_end or total + usize > max_bytes:
                break
            p = df.ptr + (nxt - df.file_from_offset)
            if <int64_t>dl_get64(p + 24) != upos or <int32_t>dl_get32(p + 4) != usize:
                raise DLedgerError(ResponseCode.DISK_ERROR,
                                   f"entry {k}: data at pos {upos} does not match its index unit")
            nxt += usize
            total += usize
            k += 1
        return (<char *>p0)[:total], pos0, k - first

    cdef inline const unsigned char *_unit(self, int64_t index) except NULL:
        if index < 0:
            raise DLedgerError(ResponseCode.INDEX_OUT_OF_RANGE, f"index {index} < 0")
        if index < self.begin:
            raise DLedgerError(ResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN,
                               f"index {index} < ledger begin {self.begin}")
        if index > self.end:
            raise DLedgerError(ResponseCode.INDEX_OUT_OF_RANGE, f"index {index} > ledger end {self.end}")
        cdef int64_t off = index * DL_INDEX_UNIT
        cdef MappedFile f = self.index.find(off)
        if f is None:
            raise DLedgerError(ResponseCode.DISK_ERROR, f"no index file holds entry {index}")
        return _mapped(f) + (off - f.file_from_offset)

    cdef inline const unsigned char *_entry(self, int64_t index, int64_t *pos_out, int32_t *size_out) except NULL:
        cdef const unsigned char *u = self._unit(index)
        cdef int64_t pos = <int64_t>dl_get64(u + 4)
        cdef int32_t size = <int32_t>dl_get32(u + 12)
        cdef MappedFile f = self.data.find(pos)
        if f is None or size < DL_BODY_OFFSET or pos - f.file_from_offset + size > f.file_size:
            raise DLedgerError(ResponseCode.DISK_ERROR, f"entry {index}: no data at pos {pos} size {size}")
        cdef const unsigned char *p = _mapped(f) + (pos - f.file_from_offset)
        if <int64_t>dl_get64(p + 24) != pos or <int32_t>dl_get32(p + 4) != size:
            raise DLedgerError(ResponseCode.DISK_ERROR,
                               f"entry {index}: data at pos {pos} does not match its index unit")
        pos_out[0] = pos
        size_out[0] = size
        return p

    def read(self, int64_t index):
        """(magic, size, index, term, pos, channel, chain_crc, body_crc, body)."""
        cdef int64_t pos
        cdef int32_t size
        cdef const unsigned char *p
        self._enter()
        try:
            p = self._entry(index, &pos, &size)
            return (<int32_t>dl_get32(p), size, <int64_t>dl_get64(p + 8), <int64_t>dl_get64(p + 16), pos,
                    <int32_t>dl_get32(p + 32), dl_get32(p + 36), dl_get32(p + 40),
                    (<char *>p + DL_BODY_OFFSET)[:size - DL_BODY_OFFSET])
        finally:
            self._leave()

    def read_entry(self, int64_t index):
        """The entry as an instance of the class given to ``set_entry_type`` (positional:
        index, term, pos, body, magic, channel, chain_crc, body_crc)."""
        cdef int64_t pos
        cdef int32_t size
        cdef const unsigned char *p
        self._enter()
        try:
            p = self._entry(index, &pos, &size)
            return _entry_type(<int64_t>dl_get64(p + 8), <int64_t>dl_get64(p + 16), pos,
                               (<char *>p + DL_BODY_OFFSET)[:size - DL_BODY_OFFSET],
                               <int32_t>dl_get32(p), <int32_t>dl_get32(p + 32), dl_get32(p + 36),
                               dl_get32(p + 40))
        finally:
            self._leave()

    def read_body(self, int64_t index):
        cdef int64_t pos
        cdef int32_t size
        cdef const unsigned char *p
        self._enter()
        try:
            p = self._entry(index, &pos, &size)
            return (<char *>p + DL_BODY_OFFSET)[:size - DL_BODY_OFFSET]
        finally:
            self._leave()

    def read_raw(self, int64_t index):
        """The entry's encoded bytes (header and body), as replicated to followers."""
        cdef int64_t pos
        cdef int32_t size
        cdef const unsigned char *p
        self._enter()
        try:
            p = self._entry(index, &pos, &size)
            return (<char *>p)[:size]
        finally:
            self._leave()

    def pos_and_size(self, int64_t index):
        cdef const unsigned char *u
        self._enter()
        try:
            u = self._unit(index)
            return <int64_t>dl_get64(u + 4), <int32_t>dl_get32(u + 12)
        finally:
            self._leave()

    def term_of(self, int64_t index):
        cdef const unsigned char *u
        self._enter()
        try:
            u = self._unit(index)
            return <int64_t>dl_get64(u + 24)
        finally:
            self._leave()

    def lookup(self, indices):
        """Batch index lookup: ``(pos, size, term)`` numpy arrays for an array of indices."""
        cdef cnp.ndarray arr = np.ascontiguousarray(indices, dtype=np.int64)
        cdef const int64_t[::1] ix = arr
        cdef Py_ssize_t count = ix.shape[0], k
        pos_a = np.empty(count, dtype=np.int64)
        size_a = np.empty(count, dtype=np.int32)
        term_a = np.empty(count, dtype=np.int64)
        cdef int64_t[::1] ps = pos_a, tm = term_a
        cdef int32_t[::1] sz = size_a
        cdef const unsigned char *u
        cdef int64_t cur_from = -1, cur_end = -1, off, ahead
        cdef const unsigned char *base = NULL
        cdef MappedFile f
        self._enter()
        try:
            for k in range(count):
                # Random indices miss the cache on every unit: ask for the unit LOOKUP_AHEAD
                # lookups on now, so several misses are in flight at once (in the current file).
                if k + LOOKUP_AHEAD < count:
                    ahead = ix[k + LOOKUP_AHEAD] * DL_INDEX_UNIT
                    if cur_from <= ahead < cur_end:
                        dl_prefetch_r(base + (ahead - cur_from))
                if ix[k] < self.begin or ix[k] > self.end or ix[k] < 0:
                    raise DLedgerError(ResponseCode.INDEX_OUT_OF_RANGE,
                                       f"index {ix[k]} outside [{self.begin}, {self.end}]")
                off = ix[k] * DL_INDEX_UNIT
                if off < cur_from or off >= cur_end:
                    f = self.index.find(off)
                    if f is None:
                        raise DLedgerError(ResponseCode.DISK_ERROR, f"no index file holds entry {ix[k]}")
                    base = _mapped(f)
                    cur_from = f.file_from_offset
                    cur_end = cur_from + f.file_size
                u = base + (off - cur_from)
                ps[k] = <int64_t>dl_get64(u + 4)
                sz[k] = <int32_t>dl_get32(u + 12)
                tm[k] = <int64_t>dl_get64(u + 24)
        finally:
            self._leave()
        return pos_a, size_a, term_a

    def close(self):
        """Unmap both lists, once the appends and reads in progress have finished (``stop_access``)."""
        self.stop_access()
        self.data.close()
        self.index.close()
