"""Warnings that repeat (a misconfigured client reconnecting every few seconds, a follower that
does not answer pushes): logged once per interval for each source, with the number held back in
between."""

from __future__ import annotations

import time

DEFAULT_INTERVAL_S = 60.0


class RepeatLimiter:
    """Says whether a warning from ``source`` is logged now; bounded memory of sources."""

    def __init__(self, interval: float = DEFAULT_INTERVAL_S, max_sources: int = 1024) -> None:
        self.interval = interval
        self.max_sources = max_sources
        self._seen: dict[str, tuple[float, int]] = {}  # source -> (last logged, held back since)

    def allow(self, source: str, now: float | None = None) -> int | None:
        """None: hold this one back. Otherwise log it, with the returned number of warnings from
        ``source`` held back since the last one logged. ``now``: the caller's clock in seconds
        (a Raft core's, simulated in tests); default time.monotonic()."""
        if now is None:
            now = time.monotonic()
        last = self._seen.get(source)
        if last is not None and now - last[0] < self.interval:
            self._seen[source] = (last[0], last[1] + 1)
            return None
        if last is None and len(self._seen) >= self.max_sources:
            self._seen.clear()  # many sources at once: forget them rather than grow
        self._seen[source] = (now, 0)
        return 0 if last is None else last[1]


def held_back(count: int) -> str:
    """The suffix of a logged warning saying how many like it were held back."""
    return f" ({count} more since the last such warning)" if count else ""
