# MessageClientIDSetter's counter and the millisecond a UNIQ_KEY head names (UniqIdGenerator's
# reservation), in C: a single put took a Python lock and four Python frames for it (~0.4 us).

from posix.time cimport CLOCK_REALTIME, clock_gettime, timespec


cdef class UniqClock:
    """``take(n, now_ms)`` reserves ``n`` counter values: ``(first, the millisecond the head
    names)``. The counter has 4 hex digits, so ids made under one head repeat past 65,536 of
    them, which batches reach within a millisecond: the head then names the next millisecond (a
    logical clock; it never goes back either, should the wall clock).

    No lock: ``take`` holds the GIL from start to end and runs no Python code, so calls from
    several threads cannot interleave (this build needs the GIL; a free-threaded one would need
    a lock here)."""

    cdef int64_t counter
    cdef int64_t ms
    cdef int64_t ms_first
    # reserve_raw's head: ``heads(ms)`` gives ``(ms, head, head as bytes)`` (the generator's, made
    # once per millisecond); the bytes of the last one asked for are kept here.
    cdef object heads
    cdef int64_t head_ms
    cdef bytes head_raw

    def __cinit__(self, heads=None):
        self.counter = 0
        self.ms = -1
        self.ms_first = 0
        self.heads = heads
        self.head_ms = -1
        self.head_raw = b""

    def take(self, int64_t n, int64_t now):
        return self._take(n, now), self.ms

    def reserve_raw(self, int64_t n):
        """``(head as bytes, first, now_ms)``: ``n`` ids from one reading of the clock (the
        generator's ``reserve_raw``, what a single put's encoder takes)."""
        cdef timespec ts
        clock_gettime(CLOCK_REALTIME, &ts)
        cdef int64_t now = <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000
        cdef int64_t first = self._take(n, now)
        cdef int64_t ms = self.ms
        if ms == self.head_ms:
            return self.head_raw, first, now
        # Python runs here, after the reservation: another thread may take ids meanwhile, and
        # the head returned is this reservation's all the same.
        cached = self.heads(ms)
        self.head_ms, self.head_raw = ms, cached[2]
        return cached[2], first, now

    cdef int64_t _take(self, int64_t n, int64_t now) except? -1:
        if n > 0x10000:
            raise ValueError(f"{n} ids under one head: at most {0x10000} (reserve_chunks)")
        cdef int64_t first = self.counter
        # As itertools.count: even a reservation of none moves the counter on by one.
        self.counter = first + (n if n > 1 else 1)
        if now > self.ms:
            self.ms = now
            self.ms_first = first
        elif first + n - self.ms_first > 0x10000:
            self.ms += 1
            self.ms_first = first
        return first
