# MessageClientIDSetter's counter and the millisecond a UNIQ_KEY head names (UniqIdGenerator's
# reservation), in C: a single put took a Python lock and three Python frames for it (~0.35 us).


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

    def __cinit__(self):
        self.counter = 0
        self.ms = -1
        self.ms_first = 0

    def take(self, int64_t n, int64_t now):
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
        return first, self.ms
