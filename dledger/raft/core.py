"""State shared by the elector, the replicator and the handler of one node.

Each public call on ``RaftNode`` sets ``now`` and a fresh ``out`` list here; the parts append
what they want sent or done, and the node returns the list. That is the sans-IO contract:
no part reads a clock or touches a socket.

Every write to the log goes through the ``Core`` methods below (never ``store.append_*`` or
``store.truncate`` directly): they set ``dirty``, so the node puts a ``Flush`` before the
outputs that speak for the write, and a truncate also caps what flushes in flight report
(``log_cut``). A write that skipped them would be acknowledged before it is durable.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Sequence

from dledger.config import DLedgerConfig
from dledger.raft.effects import Flush, Output, Send
from dledger.raft.member_state import MemberState, Role
from dledger.raft.messages import Message
from dledger.raft.timings import RaftTimings
from dledger.store.base import DLedgerStore
from dledger.store.entry import Entry

NEVER = -1


def elapsed(now: int, since: int) -> int:
    """DLedgerUtils.elapsed, with -1 meaning "never" (DLedger gets the same effect from
    wall-clock epoch millis, where now - (-1) is huge)."""
    if since < 0:
        return 1 << 62
    return now - since


class Core:
    def __init__(
        self,
        config: DLedgerConfig,
        store: DLedgerStore,
        ms: MemberState,
        rng: random.Random,
        timings: RaftTimings,
    ) -> None:
        self.config = config
        self.store = store
        self.ms = ms
        self.rng = rng
        self.timings = timings
        self.now = 0
        self.out: list[Output] = []
        # Set when the store was written since the last Flush effect.
        self.dirty = False
        # How far our own log is known durable (and unchanged since): the leader counts its
        # own copy only this far. Flush effects not yet reported: (token, end index).
        self.durable_index = store.ledger_end_index
        self.unflushed: deque[tuple[int, int]] = deque()
        self._next_flush_token = 0
        self._next_req_id = 0
        # The node's reaction to a role change (reset replication, fail waiters, notify).
        self.on_role_change: Callable[[int, Role], None] = lambda term, role: None

    def start_incarnation(self, incarnation: int) -> None:
        """Request ids of this incarnation start above every id of the earlier ones.

        Followers use them to spot replayed pushes (handler._fenced) and we match answers
        by them, so a restarted leader must not reuse its predecessor's ids.
        """
        self._next_req_id = incarnation << 20

    def new_req_id(self) -> int:
        self._next_req_id += 1
        return self._next_req_id

    def send(self, to: str, msg: Message, early: bool = False) -> None:
        msg.group = self.ms.group
        msg.local_id = self.ms.self_id
        msg.remote_id = to
        self.out.append(Send(to, msg, early))

    # --- writes to the log: each marks the store dirty, even when it fails part way --------

    def append_as_leader(self, bodies: Sequence[bytes], term: int) -> tuple[int, Sequence[int]]:
        """Append ``bodies`` in ``term``; returns (first index, each body's position)."""
        try:
            if len(bodies) == 1:
                entry = self.store.append_as_leader(bodies[0], term)
                return entry.index, [entry.pos]
            return self.store.append_batch_as_leader(bodies, term)
        finally:
            self.dirty = True

    def append_raw_as_follower(self, raw: bytes | memoryview, first_index: int, first_pos: int, count: int) -> int:
        """Store the leader's entry bytes as they are; returns the last index written."""
        try:
            return self.store.append_raw_as_follower(raw, first_index, first_pos, count)
        finally:
            self.dirty = True

    def append_as_follower(self, entry: Entry) -> Entry:
        try:
            return self.store.append_as_follower(entry)
        finally:
            self.dirty = True

    def truncate(self, entry: Entry) -> int:
        """Cut the log after ``entry`` (replacing what holds its index if it differs)."""
        try:
            return self.store.truncate(entry)
        finally:
            self.log_cut()
            self.dirty = True

    # --- flushes ----------------------------------------------------------------------------

    def new_flush(self) -> Flush:
        """The Flush effect for the writes made so far; ``flushed`` reports it done."""
        self._next_flush_token += 1
        end = self.store.ledger_end_index
        self.unflushed.append((self._next_flush_token, end))
        return Flush(end, self._next_flush_token)

    def flushed(self, token: int) -> None:
        """Flush ``token`` (and every earlier one) is done: move ``durable_index`` up."""
        q = self.unflushed
        while q and q[0][0] <= token:
            _, end = q.popleft()
            if end > self.durable_index:
                self.durable_index = end

    def log_cut(self) -> None:
        """The log was truncated: what a flush in flight reports must not reach past the cut
        (those indexes now name other, newer entries that a later flush covers)."""
        end = self.store.ledger_end_index
        self.durable_index = min(self.durable_index, end)
        self.unflushed = deque((t, min(e, end)) for t, e in self.unflushed)

    def reply(self, req: Message, resp: Message) -> None:
        req.base_reply(resp)
        self.out.append(Send(resp.remote_id, resp))
