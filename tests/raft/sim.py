"""A deterministic simulator for the sans-IO consensus layer.

One seed fixes everything: the network (delay, drop, duplication, reordering by jitter,
partitions), crashes and restarts, slow disks, the client workload and every node's own
random source. Time is simulated; nothing sleeps.

Durability model. Each node's store is a ``SimStore``: a MemoryStore that also keeps the
*durable* copy of the log, which a flush of that node, when it ends, sets to the log as it
was when the flush began (nothing written later). What a node returns
goes through a ``FlushOrder``, the scheduler the node runtime uses: early outputs are
carried out at once, the rest waits for a flush that started after its writes. Without
slow disks a flush ends as soon as it starts, so everything is durable between events.
With ``torn=True`` a flush ends on a later tick (with probability ``p_io`` on each), as an
fsync still in flight, and writes made meanwhile wait for the next one; a crash throws the
waiting outputs away and the node restarts from its durable log, losing the unflushed
tail. The term file (``MemoryTermStore``) is written synchronously, so it always survives.
The committed index survives as of the last flush (DLedger's checkpoint), capped at the
durable end.

Invariants, checked after every event (``Checker``):

* election safety: at most one leader per term;
* log matching, on durable entries: an (index, term) pair names one entry (same body and
  position) whose predecessor always has the same term, which by induction makes the two
  prefixes identical;
* committed entries never change or vanish: a global history of committed entries; every
  member's committed entries match it; a newly committed entry is durable on a quorum;
  no flush or truncate on any node removes or rewrites one; each new leader holds them all;
* a live node's commit index never moves back;
* acknowledged appends are in the history; successful read-index reads are not older than
  any write acknowledged before the read was issued.
"""

from __future__ import annotations

import dataclasses
import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dledger.codes import ResponseCode
from dledger.config import MEMORY, DLedgerConfig
from dledger.raft.effects import AppendDone, Output, ReadDone, RoleChanged, Send, TransferDone
from dledger.raft.flush_order import FlushOrder
from dledger.raft.member_state import MemoryTermStore, Role
from dledger.raft.messages import Message, message_from_wire
from dledger.raft.node import RaftNode
from dledger.raft.timings import RaftTimings
from dledger.store.entry import Entry
from dledger.store.memory import MemoryStore

TICK_MS = 10
# DLedger's intervals, scaled down together (x0.05) so a few thousand events hold many elections;
# no push throttling, as for any memory store.
SIM_TIMINGS = dataclasses.replace(RaftTimings().scaled(0.05), push_throttle=False)


def sim_config(node_id: str, ids: list[str], **overrides: Any) -> DLedgerConfig:
    cfg = DLedgerConfig(
        group="g",
        self_id=node_id,
        peers=";".join(f"{i}-127.0.0.1:{20911 + k}" for k, i in enumerate(ids)),
        store_type=MEMORY,
        heart_beat_time_interval_ms=100,
        max_heart_beat_leak=3,
        min_vote_interval_ms=15,
        max_vote_interval_ms=50,
        max_wait_ack_time_ms=500,
        max_push_time_out_ms=50,
        max_batch_push_size=256,
        min_take_leadership_vote_interval_ms=2,
        max_take_leadership_vote_interval_ms=5,
    )
    return cfg.replace(**overrides) if overrides else cfg


class InvariantViolation(AssertionError):
    pass


class SimStore(MemoryStore):
    """MemoryStore plus the durable image of the log (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.durable: list[Entry] = []
        self.durable_committed = -1
        self.dirty_from: int | None = None
        # What the flush that runs will make durable: (dirty_from, entries from it, committed).
        self.flushing: tuple[int | None, list[Entry], int] | None = None
        # Lowest index removed by a truncate since the checker last looked.
        self.truncated_from: int | None = None

    def _mark(self, index: int) -> None:
        if self.dirty_from is None or index < self.dirty_from:
            self.dirty_from = index

    def _put(self, entry: Entry) -> Entry:
        self._mark(entry.index)
        return super()._put(entry)

    def truncate(self, entry: Entry) -> int:
        keep = entry.same_as(self._entries.get(entry.index))
        first_removed = entry.index + 1 if keep else entry.index
        if first_removed <= self._end:
            self._mark(first_removed)
            if self.truncated_from is None or first_removed < self.truncated_from:
                self.truncated_from = first_removed
        return super().truncate(entry)

    def begin_flush(self) -> None:
        """A flush starts: it makes the log as it is now durable, and no more (what is written
        while it runs waits for the next one)."""
        start = self.dirty_from
        self.dirty_from = None
        image = [] if start is None else [self._entries[i] for i in range(start, self._end + 1)]
        self.flushing = (start, image, self._committed)

    def end_flush(self) -> tuple[int, list[Entry]]:
        """The flush begun last ends; returns (first index rewritten, durable entries replaced)."""
        assert self.flushing is not None
        start, image, committed = self.flushing
        self.flushing = None
        self.durable_committed = committed
        if start is None:
            return len(self.durable), []
        old = self.durable[start:]
        del self.durable[start:]
        self.durable.extend(image)
        return start, old

    @classmethod
    def from_durable(cls, old: SimStore) -> SimStore:
        st = cls()
        for e in old.durable:
            st._put(e)
        st.durable = list(old.durable)
        st.dirty_from = None
        committed = min(old.durable_committed, st._end)
        if committed >= 0:
            st.update_committed_index(-1, committed)
        st.durable_committed = committed
        return st


@dataclass
class SimNode:
    id: str
    node: RaftNode | None
    store: SimStore
    term_store: MemoryTermStore
    order: FlushOrder[str] = field(default_factory=FlushOrder)
    last_committed: int = -1
    was_leader_term: int = -1
    handles: dict[int, Any] = field(default_factory=dict)
    incarnation: int = 0

    @property
    def alive(self) -> bool:
        return self.node is not None


@dataclass
class SimParams:
    n: int = 3
    steps: int = 2000
    drop: float = 0.05
    dup: float = 0.03
    min_delay: int = 1
    max_delay: int = 15
    p_partition: float = 0.004
    p_heal: float = 0.01
    p_crash: float = 0.002
    p_restart: float = 0.02
    p_propose: float = 0.05
    p_read: float = 0.01
    p_transfer: float = 0.001
    # The runtime making a new connection to a peer (``RaftNode.peer_connected``): at random,
    # and from every live member to one that restarts. Drawn from a random source of its own,
    # so that a run without it is the run it always was.
    p_reconnect: float = 0.0
    torn: bool = False
    p_io: float = 0.5
    # With torn: a flush starts only on a tick (with probability p_io) and ends at once,
    # rather than at once and ending on a later tick. The regression seeds were found so.
    late_flush: bool = False
    wire: bool = False
    batch_push: bool = True
    max_down: int | None = None  # default: a minority
    calm_ms: int = 20_000


class Checker:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.quorum = sim.params.n // 2 + 1
        self.leaders_by_term: dict[int, str] = {}
        self.history: dict[int, tuple[int, bytes, int]] = {}
        self.history_max = -1
        self.entry_ids: dict[tuple[int, int], tuple[bytes, int, int]] = {}
        self.acked: dict[int, bytes] = {}
        self.acked_max = -1

    def fail(self, what: str) -> None:
        raise InvariantViolation(f"seed={self.sim.seed} t={self.sim.now} step={self.sim.step_no}: {what}")

    def after_event(self, sn: SimNode) -> None:
        node = sn.node
        if node is None:
            return
        st = sn.store
        # election safety
        if node.role == Role.LEADER:
            term = node.term
            holder = self.leaders_by_term.setdefault(term, sn.id)
            if holder != sn.id:
                self.fail(f"two leaders in term {term}: {holder} and {sn.id}")
            if sn.was_leader_term != term:
                sn.was_leader_term = term
                self._check_leader_completeness(sn)
        # commit monotonic on a live node
        c = st.committed_index
        if c < sn.last_committed:
            self.fail(f"{sn.id} commit index went back {sn.last_committed} -> {c}")
        if st.truncated_from is not None:
            if st.truncated_from <= sn.last_committed:
                self.fail(f"{sn.id} truncated from {st.truncated_from} below its commit {sn.last_committed}")
            st.truncated_from = None
        if c > sn.last_committed:
            for e in st.get_range(sn.last_committed + 1, c):
                self._record_committed(sn, e)
            sn.last_committed = c

    def _record_committed(self, sn: SimNode, e: Entry) -> None:
        h = self.history.get(e.index)
        if h is None:
            copies = 0
            for other in self.sim.nodes:
                d = other.store.durable
                if e.index < len(d) and e.same_as(d[e.index]):
                    copies += 1
            if copies < self.quorum:
                self.fail(f"{sn.id} committed index {e.index} durable on only {copies} members")
            self.history[e.index] = (e.term, e.body, e.pos)
            if e.index > self.history_max:
                self.history_max = e.index
        elif h != (e.term, e.body, e.pos):
            self.fail(f"{sn.id} committed {e.index} as term {e.term} but history has term {h[0]}")

    def _check_leader_completeness(self, sn: SimNode) -> None:
        st = sn.store
        if st.ledger_end_index < self.history_max:
            self.fail(f"leader {sn.id} ends at {st.ledger_end_index} < committed {self.history_max}")
        for i, (term, body, _) in self.history.items():
            e = st.get(i)
            if e.term != term or e.body != body:
                self.fail(f"leader {sn.id} differs from the committed history at {i}")

    def on_flush(self, sn: SimNode, start: int, old: list[Entry]) -> None:
        d = sn.store.durable
        for k, e in enumerate(old):
            i = start + k
            h = self.history.get(i)
            if h is not None and (h[0], h[1], h[2]) == (e.term, e.body, e.pos):
                if i >= len(d) or not e.same_as(d[i]):
                    self.fail(f"{sn.id} lost committed entry {i} from its durable log")
        for i in range(start, len(d)):
            e = d[i]
            prev_term = d[i - 1].term if i > 0 else -1
            ident = (e.body, e.pos, prev_term)
            seen = self.entry_ids.setdefault((e.index, e.term), ident)
            if seen != ident:
                self.fail(f"log matching: ({e.index}, {e.term}) differs on {sn.id}: {seen} vs {ident}")

    def on_ack(self, sn: SimNode, done: AppendDone, bodies: list[bytes]) -> None:
        r = done.response
        if r.code != ResponseCode.SUCCESS:
            return
        first = r.index - len(bodies) + 1
        for k, body in enumerate(bodies):
            i = first + k
            h = self.history.get(i)
            if h is None or h[1] != body:
                self.fail(f"acked append at {i} by {sn.id} is not the committed entry there")
            self.acked[i] = body
            if i > self.acked_max:
                self.acked_max = i

    def on_read(self, sn: SimNode, done: ReadDone, acked_at_issue: int) -> None:
        if done.code != ResponseCode.SUCCESS:
            return
        if done.read_index < acked_at_issue:
            self.fail(f"stale read on {sn.id}: read index {done.read_index} < acked {acked_at_issue}")


class Simulation:
    def __init__(self, seed: int, params: SimParams | None = None, **config_overrides: Any) -> None:
        self.seed = seed
        self.params = p = params or SimParams()
        self.rng = random.Random(seed)
        self.reconnect_rng = random.Random(seed * 2 + 1)
        self.ids = [f"n{i}" for i in range(p.n)]
        self.config_overrides = dict(config_overrides)
        self.config_overrides.setdefault("is_enable_batch_push", p.batch_push)
        self.now = 0
        self.step_no = 0
        self.events: list[tuple[int, int, int, Any]] = []
        self._seq = 0
        self.nodes: list[SimNode] = []
        self.by_id: dict[str, SimNode] = {}
        for nid in self.ids:
            sn = SimNode(nid, None, SimStore(), MemoryTermStore())
            self.nodes.append(sn)
            self.by_id[nid] = sn
        self.checker = Checker(self)
        self.partition: dict[str, int] | None = None
        self.drop = p.drop
        self.dup = p.dup
        self.torn = p.torn
        self.proposals = 0
        self.acks = 0
        self.reads_ok = 0
        for sn in self.nodes:
            self._start(sn)
            self._schedule(self.rng.randrange(TICK_MS), 0, sn.id)

    # --- scheduling ----------------------------------------------------------------------

    def _schedule(self, at: int, kind: int, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self.events, (at, self._seq, kind, payload))

    def _start(self, sn: SimNode) -> None:
        cfg = sim_config(sn.id, self.ids, **self.config_overrides)
        sn.incarnation += 1
        sn.node = RaftNode(
            cfg,
            sn.store,
            sn.term_store,
            random.Random(self.rng.random()),
            timings=SIM_TIMINGS,
            incarnation=sn.incarnation,
        )
        sn.last_committed = sn.store.committed_index
        sn.was_leader_term = -1
        sn.handles = {}

    def crash(self, sn: SimNode) -> None:
        sn.node = None
        sn.order = FlushOrder()
        sn.store = SimStore.from_durable(sn.store)

    def restart(self, sn: SimNode) -> None:
        self._start(sn)
        if self.params.p_reconnect:
            for other in self.nodes:
                if other is not sn and other.alive:
                    self.reconnect(other, sn.id)

    def reconnect(self, sn: SimNode, peer: str) -> None:
        assert sn.node is not None
        out = sn.node.peer_connected(self.now, peer)
        self.checker.after_event(sn)
        self._emit(sn, out)

    # --- outputs -------------------------------------------------------------------------

    def _emit(self, sn: SimNode, out: list[Output]) -> None:
        if not out:
            return
        now = sn.order.submit(sn.id, out)
        if now:
            self._carry_out(sn, now)
        self._start_flush(sn)

    def _start_flush(self, sn: SimNode) -> None:
        if not sn.order.flush_wanted:
            return
        if self.torn and self.params.late_flush:
            return  # a later tick starts it (step), or heal
        token = self._begin_flush(sn)
        if not self.torn:
            self._end_flush(sn, token)
        # else: a later tick ends it (step), or heal

    def _tick_io(self, sn: SimNode) -> None:
        """A torn disk's flush in flight ends now, or one waiting starts and ends, by chance."""
        order = sn.order
        running = order.running
        if running is not None:
            if self.rng.random() < self.params.p_io:
                self._end_flush(sn, running)
        elif order.flush_wanted and self.rng.random() < self.params.p_io:
            self._end_flush(sn, self._begin_flush(sn))

    def _begin_flush(self, sn: SimNode) -> int:
        sn.store.begin_flush()
        return sn.order.flush_started()

    def _end_flush(self, sn: SimNode, token: int) -> None:
        """The flush ``token`` of ``sn`` ends: the writes made before it began are durable."""
        start, old = sn.store.end_flush()
        self.checker.on_flush(sn, start, old)
        for ready in sn.order.flush_done(token):
            self._carry_out(sn, ready.outputs)
            for t in ready.tokens:
                if sn.node is not None:
                    # Report the flush, as the node runtime does: a leader now counts its own copy.
                    after = sn.node.flushed(self.now, t)
                    self.checker.after_event(sn)
                    self._emit(sn, after)
        self._start_flush(sn)

    def _carry_out(self, sn: SimNode, out: list[Output]) -> None:
        for o in out:
            if isinstance(o, Send):
                self._send(sn.id, o.to, o.msg)
            elif isinstance(o, AppendDone):
                bodies = sn.handles.pop(o.handle, None)
                if bodies is not None:
                    if o.response.code == ResponseCode.SUCCESS:
                        self.acks += 1
                    self.checker.on_ack(sn, o, bodies)
            elif isinstance(o, ReadDone):
                acked_at_issue = sn.handles.pop(o.handle, None)
                if acked_at_issue is not None:
                    if o.code == ResponseCode.SUCCESS:
                        self.reads_ok += 1
                    self.checker.on_read(sn, o, acked_at_issue)
            elif isinstance(o, (RoleChanged, TransferDone)):
                pass

    def _send(self, src: str, dst: str, msg: Message) -> None:
        if dst not in self.by_id:
            return
        if self.partition is not None and self.partition[src] != self.partition[dst]:
            return
        if self.rng.random() < self.drop:
            return
        copies = 2 if self.rng.random() < self.dup else 1
        for _ in range(copies):
            m = message_from_wire(msg.to_wire()) if self.params.wire else msg
            delay = self.rng.randint(self.params.min_delay, self.params.max_delay)
            self._schedule(self.now + delay, 1, (dst, m))

    # --- running -------------------------------------------------------------------------

    def leader(self) -> SimNode | None:
        best: SimNode | None = None
        for sn in self.nodes:
            if sn.node is not None and sn.node.is_leader:
                if best is None or best.node is None or sn.node.term > best.node.term:
                    best = sn
        return best

    def propose(self, sn: SimNode, bodies: list[bytes]) -> int:
        assert sn.node is not None
        h = sn.node.propose(self.now, bodies)
        sn.handles[h] = bodies
        self.proposals += 1
        out = sn.node.drain()
        self.checker.after_event(sn)
        self._emit(sn, out)
        return h

    def read(self, sn: SimNode) -> int:
        assert sn.node is not None
        h = sn.node.read_index(self.now)
        sn.handles[h] = self.checker.acked_max
        out = sn.node.drain()
        self.checker.after_event(sn)
        self._emit(sn, out)
        return h

    def step(self) -> None:
        at, _, kind, payload = heapq.heappop(self.events)
        self.now = at
        self.step_no += 1
        if kind == 0:
            sn = self.by_id[payload]
            self._schedule(at + TICK_MS, 0, payload)
            if sn.node is None:
                return
            self._tick_io(sn)
            if sn.node is None:
                return
            out = sn.node.tick(at)
        else:
            dst, msg = payload
            sn = self.by_id[dst]
            if sn.node is None:
                return
            out = sn.node.step(at, msg)
        # Check before carrying out: acks and reads in ``out`` are judged against the
        # history this very event may have extended.
        self.checker.after_event(sn)
        self._emit(sn, out)

    def chaos(self) -> None:
        p = self.params
        r = self.rng
        max_down = p.max_down if p.max_down is not None else p.n - (p.n // 2 + 1)
        if r.random() < p.p_partition:
            groups = [r.randrange(2) for _ in self.ids]
            self.partition = dict(zip(self.ids, groups, strict=True))
        if self.partition is not None and r.random() < p.p_heal:
            self.partition = None
        if r.random() < p.p_crash:
            live = [sn for sn in self.nodes if sn.alive]
            down = len(self.nodes) - len(live)
            if live and down < max_down:
                self.crash(r.choice(live))
        if r.random() < p.p_restart:
            dead = [sn for sn in self.nodes if not sn.alive]
            if dead:
                self.restart(r.choice(dead))
        if p.p_reconnect and self.reconnect_rng.random() < p.p_reconnect:
            live = [sn for sn in self.nodes if sn.alive]
            if live:
                sn = self.reconnect_rng.choice(live)
                self.reconnect(sn, self.reconnect_rng.choice([i for i in self.ids if i != sn.id]))
        if r.random() < p.p_propose:
            live = [sn for sn in self.nodes if sn.alive]
            if live:
                target = self.leader() if r.random() < 0.8 else None
                sn = target or r.choice(live)
                n = r.randint(1, 3)
                self.propose(sn, [f"{self.seed}-{self.proposals}-{k}".encode() for k in range(n)])
        if r.random() < p.p_read:
            reader = self.leader()
            if reader is not None:
                self.read(reader)
        if r.random() < p.p_transfer:
            lead = self.leader()
            if lead is not None and lead.node is not None:
                others = [i for i in self.ids if i != lead.id]
                lead.node.transfer_leadership(self.now, r.choice(others))
                self._emit(lead, lead.node.drain())

    def run_chaos(self, steps: int) -> None:
        for _ in range(steps):
            self.chaos()
            self.step()

    def heal(self) -> None:
        self.partition = None
        self.drop = 0.0
        self.dup = 0.0
        self.torn = False
        for sn in self.nodes:
            if sn.alive:
                running = sn.order.running
                if running is not None:
                    # Not torn any more: the flushes this one leads to end at once too.
                    self._end_flush(sn, running)
                elif sn.order.flush_wanted:
                    self._end_flush(sn, self._begin_flush(sn))
                self.checker.after_event(sn)
            else:
                self.restart(sn)

    def run_until(self, cond: Callable[[], bool], max_ms: int) -> bool:
        deadline = self.now + max_ms
        while self.now < deadline:
            if cond():
                return True
            self.step()
        return cond()

    def calm_liveness(self) -> int:
        """Heal, then require a leader and a committed write within ``calm_ms``; returns ms taken."""
        self.heal()
        start = self.now
        budget = self.params.calm_ms
        if not self.run_until(lambda: self.leader() is not None, budget):
            raise InvariantViolation(f"seed={self.seed}: no leader within {budget} ms after healing")
        done: list[bool] = []
        body = f"{self.seed}-calm".encode()
        while not done and self.now - start < budget:
            sn = self.leader()
            if sn is None:
                self.step()
                continue
            h = self.propose(sn, [body])

            def acked(sn: SimNode = sn, h: int = h) -> bool:
                return h not in sn.handles or not sn.alive

            self.run_until(acked, 2 * sn.node.config.max_wait_ack_time_ms if sn.node else 1000)
            if sn.alive and h not in sn.handles and body in self.checker.acked.values():
                done.append(True)
            else:
                # Refused (say, a transfer in progress) or unknown: let time pass, retry.
                target = self.now + 50

                def waited(target: int = target) -> bool:
                    return self.now >= target

                self.run_until(waited, 60)
        if not done:
            raise InvariantViolation(f"seed={self.seed}: no write committed within {budget} ms after healing")
        index = max(i for i, b in self.checker.acked.items() if b == body)

        def everyone() -> bool:
            return all(sn.store.committed_index >= index for sn in self.nodes)

        if not self.run_until(everyone, budget):
            raise InvariantViolation(f"seed={self.seed}: followers did not learn commit {index} in {budget} ms")
        return self.now - start

    def final_checks(self) -> None:
        for i, body in self.checker.acked.items():
            h = self.checker.history.get(i)
            if h is None or h[1] != body:
                raise InvariantViolation(f"seed={self.seed}: acked entry {i} is not in the committed history")


def run_seed(seed: int, params: SimParams | None = None, **overrides: Any) -> Simulation:
    sim = Simulation(seed, params, **overrides)
    sim.run_chaos(sim.params.steps)
    sim.calm_liveness()
    sim.final_checks()
    return sim
