# Included in message.pyx before message_put.pxi: the commit log's put lock (putMessageLock).

from cpython.exc cimport PyErr_CheckSignals
from cpython.pythread cimport (NOWAIT_LOCK, PY_LOCK_ACQUIRED, PyLockStatus, PyThread_acquire_lock,
                               PyThread_allocate_lock, PyThread_free_lock, PyThread_release_lock,
                               PyThread_type_lock)
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

cdef extern from "pythread.h":
    PyLockStatus PyThread_acquire_lock_timed(PyThread_type_lock lock, long long microseconds,
                                             int intr_flag) nogil

cdef extern from *:
    """
    #include <time.h>
    #ifndef CLOCK_MONOTONIC_COARSE
    #define CLOCK_MONOTONIC_COARSE CLOCK_MONOTONIC
    #endif
    """
    int CLOCK_MONOTONIC_COARSE


cdef inline long long _lock_clock_ms() noexcept nogil:
    # The begin time in lock's clock: the coarse one (a few ns, a tick of 1-10 ms), since it is
    # read at every take and only compared with osPageCacheBusyTimeOutMills (1000 ms).
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts)
    return ts.tv_sec * 1000 + ts.tv_nsec // 1000000


def put_lock_clock_ms() -> int:
    """Now on the clock of ``PutLock.begin_time_in_lock``, in ms."""
    return _lock_clock_ms()


# A waiter looks at signals (KeyboardInterrupt) at least this often.
cdef long long PUT_LOCK_WAIT_SLICE_US = 50000


cdef inline double _monotonic() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cdef class PutLock:
    """A mutex with ``threading.Lock``'s interface (acquire, release, ``with``, locked) and a
    second way to wait, ``take`` (K.SinglePut's) or ``acquire_when_free``: sleep without the GIL
    until the lock is let go, then try again with the GIL, and lose it to a thread that came
    meanwhile. ``acquire`` waits as ``threading.Lock`` does: the release hands the lock over.

    Why two (docs/message-store.md, "Puts from several threads"): a single put's hold keeps the
    GIL. A lock handed to the waiter that a release wakes is then held by a thread that waits
    for the GIL, while the thread that let it go runs on with the GIL, finds it taken at its
    next put and sleeps: single puts from four threads fell into that convoy and stayed there,
    two context switches a put. Waiting for the lock to be free and taking it with the GIL,
    the GIL holder keeps taking it until the switch interval moves the GIL, outside the hold.
    A batch's hold lets the GIL go around its write, so a waiter that only tried again would
    wake and fail at each batch, which cost 4 threads of batches CPU; it is handed the lock
    instead, as before."""

    cdef PyThread_type_lock _lock
    # Set and read with the GIL held (the lock is only held by a GIL holder, see above).
    cdef bint _held
    # CommitLog.beginTimeInLock: when the holder took the lock (put_lock_clock_ms), 0 when free.
    cdef long long _begin_ms

    def __cinit__(self) -> None:
        self._lock = PyThread_allocate_lock()
        if self._lock == NULL:
            raise MemoryError("PyThread_allocate_lock")
        self._held = False

    def __dealloc__(self) -> None:
        if self._lock != NULL:
            if self._held:
                PyThread_release_lock(self._lock)
            PyThread_free_lock(self._lock)

    cdef inline bint _try(self) noexcept:
        if PyThread_acquire_lock(self._lock, NOWAIT_LOCK):
            self._held = True
            self._begin_ms = _lock_clock_ms()
            return True
        return False

    cdef int take(self) except -1:
        """Take the lock, waiting as long as it takes (K.SinglePut's acquire)."""
        if self._try():
            return 1
        return self._wait(-1.0)

    cdef inline void give(self) noexcept:
        self._held = False
        self._begin_ms = 0
        PyThread_release_lock(self._lock)

    cdef int _wait(self, double timeout) except -1:
        """``take``'s wait: 1 once taken, 0 when ``timeout`` seconds (unless negative) went by
        first."""
        return self._sleep(timeout, False)

    cdef int _handed(self, double timeout) except -1:
        """``threading.Lock``'s wait: 1 once the lock is taken (perhaps handed over by a
        release, before this thread has the GIL again), 0 after ``timeout`` (unless negative)."""
        return self._sleep(timeout, True)

    cdef int _sleep(self, double timeout, bint handed) except -1:
        """Sleeps without the GIL in slices (signals looked at between them) until the lock is
        let go or ``timeout`` (unless negative) ran out. ``handed``: keep the lock the wait
        got; else let go of it at once and take it with the GIL (see the class's docstring)."""
        cdef double deadline = _monotonic() + timeout
        cdef double left
        cdef long long us
        cdef PyLockStatus r
        while True:
            us = PUT_LOCK_WAIT_SLICE_US
            if timeout >= 0:
                left = deadline - _monotonic()
                if left <= 0:
                    return 0
                if left * 1e6 < us:
                    us = <long long>(left * 1e6) + 1
            with nogil:
                r = PyThread_acquire_lock_timed(self._lock, us, 0)
                if r == PY_LOCK_ACQUIRED and not handed:
                    PyThread_release_lock(self._lock)
            if r == PY_LOCK_ACQUIRED and handed:
                self._held = True
                self._begin_ms = _lock_clock_ms()
                return 1
            PyErr_CheckSignals()
            if not handed and self._try():
                return 1

    def acquire(self, bint blocking=True, double timeout=-1) -> bool:
        if self._try():
            return True
        if not blocking:
            if timeout != -1:
                raise ValueError("can't specify a timeout for a non-blocking call")
            return False
        if timeout < 0 and timeout != -1:
            raise ValueError("timeout value must be a non-negative number")
        return self._handed(timeout) == 1

    def acquire_when_free(self, double timeout=-1) -> bool:
        """``take``'s wait from Python: taken only with the GIL."""
        if self._try():
            return True
        return self._wait(timeout) == 1

    def release(self) -> None:
        if not self._held:
            raise RuntimeError("release unlocked lock")
        self.give()

    def locked(self) -> bool:
        return self._held

    @property
    def begin_time_in_lock(self) -> int:
        """When the lock was taken (``put_lock_clock_ms``), 0 while it is free."""
        return self._begin_ms

    def __enter__(self) -> bool:
        if not self._try():
            self._handed(-1.0)
        return True

    def __exit__(self, *exc: object) -> None:
        self.release()
