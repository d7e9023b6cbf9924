"""FlushOrder: when a node's outputs may be carried out, given the flushes that run.

The rule (see ``effects``): early outputs go at once; the rest waits, in order, for a flush
that *started* after the writes they speak for, because only such a flush is sure to cover
them. This object is that rule and nothing else, sans-IO like the rest of the package: the
node runtime (``dledger.server``) and the simulator (``tests/raft/sim.py``) feed it what a
node returns and tell it when a flush starts and ends; it says what to carry out now,
whether a flush should start, and what a finished flush releases.

Group commit falls out of it: one flush covers every write made before it started, and
writes made while it runs wait for the next one, which starts as soon as it ends
(pipelined). The flushes of several groups that share a runtime may be one flush (the
server flushes every store at once); ``key`` says whose outputs a batch holds.

Usage, by the driver::

    now = order.submit(key, outputs)       # carry these out at once
    if order.flush_wanted:
        token = order.flush_started()      # at the moment the flush begins; then flush
    ...
    for ready in order.flush_done(token):  # the flush ended: carry out each batch, then
        ...                                # report ready.tokens with node.flushed(now, t)
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from dledger.raft.effects import Flush, Output, is_early

K = TypeVar("K")


@dataclass(slots=True)
class Ready(Generic[K]):
    """A batch a finished flush released: carry out ``outputs`` in order (none is a Flush),
    then report each of ``tokens`` (the batch's Flush effects, now done) to the node."""

    key: K
    outputs: list[Output] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)


class FlushOrder(Generic[K]):
    def __init__(self) -> None:
        # Batches holding a Flush, counted; a flush started when ``_written`` was n covers
        # the first n of them (and every batch queued behind them).
        self._written = 0
        self._flushed = 0
        # The ``_written`` a running flush will cover; None when none runs.
        self._running: int | None = None
        # Outputs waiting for a flush, in order: (the written count they need covered, key, outputs).
        self._waiting: deque[tuple[int, K, list[Output]]] = deque()

    @property
    def flush_wanted(self) -> bool:
        """Writes no flush covers yet wait, and no flush runs: start one."""
        return self._running is None and self._written > self._flushed

    @property
    def running(self) -> int | None:
        """The token of the flush that runs, if one does."""
        return self._running

    @property
    def waiting(self) -> int:
        """Batches held back for a flush."""
        return len(self._waiting)

    def submit(self, key: K, outputs: list[Output]) -> list[Output]:
        """Take what one call on the node returned; returns what to carry out now, in order
        (early outputs, and the rest when no write waits for a flush). Never a Flush."""
        now: list[Output] = []
        rest: list[Output] = []
        for o in outputs:
            (now if is_early(o) else rest).append(o)
        if not rest:
            return now
        if any(isinstance(o, Flush) for o in rest):
            self._written += 1
        if self._written > self._flushed:
            self._waiting.append((self._written, key, rest))
        else:
            now.extend(rest)
        return now

    def flush_started(self) -> int:
        """A flush begins now, covering every write made so far; returns its token for
        ``flush_done``/``flush_failed``."""
        if self._running is not None:
            raise RuntimeError("a flush is already running")
        self._running = self._written
        return self._written

    def flush_done(self, token: int) -> list[Ready[K]]:
        """Flush ``token`` finished: the batches it covers, in order."""
        self._end(token)
        if token > self._flushed:
            self._flushed = token
        released: list[Ready[K]] = []
        waiting = self._waiting
        while waiting and waiting[0][0] <= self._flushed:
            _, key, outputs = waiting.popleft()
            ready: Ready[K] = Ready(key)
            for o in outputs:
                if isinstance(o, Flush):
                    ready.tokens.append(o.token)
                else:
                    ready.outputs.append(o)
            released.append(ready)
        return released

    def flush_failed(self, token: int) -> None:
        """Flush ``token`` failed: nothing it covers may go; the next flush covers it again."""
        self._end(token)

    def _end(self, token: int) -> None:
        if self._running != token:
            raise RuntimeError(f"flush {token} is not the one running ({self._running})")
        self._running = None
