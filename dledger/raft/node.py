"""RaftNode: one DLedger member as a sans-IO object.

Entry points take the caller's clock (``now_ms``) and never block::

    node = RaftNode(config, store, term_store, random.Random(seed))
    out = node.tick(now)            # every ~10 ms (DLedger's state loop)
    out = node.step(now, message)   # for every message from a peer
    h = node.propose(now, [b"x"])   # local append; its outputs come with the next call
    out = node.drain()              # ...or right away

Every call returns the outputs accumulated since the previous one (see ``effects``): act on
them in order, finish a ``Flush`` before anything after it and report it with
``node.flushed(now, flush.token)``; early outputs may go at once (see ``effects``).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dledger.codes import ResponseCode
from dledger.config import DLedgerConfig
from dledger.errors import DLedgerError
from dledger.raft.core import NEVER, Core, elapsed
from dledger.raft.effects import AppendDone, Output, ReadDone, RoleChanged, Send, TransferDone
from dledger.raft.elector import Elector
from dledger.raft.handler import EntryHandler
from dledger.raft.member_state import MemberState, Role, TermStore
from dledger.raft.messages import (
    AppendEntryResponse,
    HeartBeatRequest,
    HeartBeatResponse,
    LeadershipTransferRequest,
    LeadershipTransferResponse,
    Message,
    PushEntryRequest,
    PushEntryResponse,
    VoteRequest,
    VoteResponse,
    VoteResult,
)
from dledger.raft.replicator import Replicator
from dledger.raft.timings import RaftTimings
from dledger.store.base import DLedgerStore
from dledger.store.entry import Entry

log = logging.getLogger(__name__)

_RESPONSE_FOR: dict[type[Message], type[Message]] = {
    VoteRequest: VoteResponse,
    HeartBeatRequest: HeartBeatResponse,
    PushEntryRequest: PushEntryResponse,
    LeadershipTransferRequest: LeadershipTransferResponse,
}


def error_response(req: Message, code: ResponseCode, term: int = -1, leader_id: str | None = None) -> Message | None:
    """The response a request of ``req``'s type gets when it fails with ``code`` before
    reaching the consensus logic (bad group or member); None for a response message."""
    cls = _RESPONSE_FOR.get(type(req))
    if cls is None:
        return None
    resp = cls(code=code, term=term, leader_id=leader_id)
    if isinstance(resp, VoteResponse):
        resp.vote_result = VoteResult.UNKNOWN
    return req.base_reply(resp)


@dataclass(slots=True)
class _Read:
    handle: int
    read_index: int
    term: int
    seq: int
    deadline_ms: int


@dataclass(slots=True)
class _Transfer:
    req_id: int
    waiter: Any
    term: int
    deadline_ms: int
    transferee: str
    # False while we wait for the transferee to hold our whole log in this term.
    asked: bool = False


def _code_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return "UNKNOWN"


class RaftNode:
    def __init__(
        self,
        config: DLedgerConfig,
        store: DLedgerStore,
        term_store: TermStore,
        rng: random.Random | None = None,
        *,
        timings: RaftTimings | None = None,
        apply: Callable[[Entry], None] | None = None,
        applied_index: int | None = None,
        incarnation: int | None = None,
    ) -> None:
        """``apply`` receives every committed entry once, in index order, starting after
        ``applied_index`` (default: from the first entry of the store).

        ``incarnation`` must grow with every restart of this member (request ids start at
        ``incarnation << 20``). The default is the ``now_ms`` of the first call, which is
        right when ``now_ms`` is wall-clock milliseconds that do not move back across restarts.
        """
        self.config = config
        self.store = store
        self.ms = MemberState(config, term_store)
        self.core = Core(config, store, self.ms, rng or random.Random(), timings or RaftTimings())
        self.elector = Elector(self.core)
        self.handler = EntryHandler(self.core)
        self.replicator = Replicator(self.core, self._on_append_done)
        self.core.on_role_change = self._on_role_change
        self._apply = apply
        # An empty store has begin -1; entries before a non-zero begin were deleted and
        # cannot be delivered any more.
        floor = max(store.ledger_begin_index, 0) - 1
        self.applied_index = max(floor, floor if applied_index is None else applied_index)
        self._next_handle = 0
        self._reads: list[_Read] = []
        self._transfer: _Transfer | None = None
        self._last_preferred_check_ms = NEVER
        self._leader_start_end = 0
        self._outbox: list[Output] = []
        self._incarnation = incarnation
        if incarnation is not None:
            self.core.start_incarnation(incarnation)

    # --- read-only views -----------------------------------------------------------------

    @property
    def self_id(self) -> str:
        return self.ms.self_id

    @property
    def group(self) -> str:
        return self.ms.group

    @property
    def role(self) -> Role:
        return self.ms.role

    @property
    def term(self) -> int:
        return self.ms.curr_term

    @property
    def leader_id(self) -> str | None:
        return self.ms.leader_id

    @property
    def is_leader(self) -> bool:
        return self.ms.is_leader()

    @property
    def committed_index(self) -> int:
        return self.store.committed_index

    # --- entry points ----------------------------------------------------------------------

    def tick(self, now_ms: int) -> list[Output]:
        """Run the state loop once: elections, heartbeats, pushes, timeouts."""
        self._begin(now_ms)
        self.elector.tick()
        self.replicator.pump()
        self.handler.do_work()
        self._advance_transfer()
        self._check_transfer_timeout()
        self.elector.check_take_leadership_wait()
        self._check_preferred_leader()
        return self._finish()

    def step(self, now_ms: int, msg: Message) -> list[Output]:
        """Handle one message from a peer."""
        self._begin(now_ms)
        self._dispatch(msg)
        return self._finish()

    def peer_connected(self, now_ms: int, peer: str) -> list[Output]:
        """The runtime made a connection to ``peer`` (a first one, or one after a failed or
        lost one): what was sent before may be lost, so a leader with anything in flight to
        that follower resynchronises it at once rather than after its push timeouts."""
        self._begin(now_ms)
        if self.replicator.on_peer_connected(peer):
            # A follower back from a restart serves the COMPARE once a heartbeat has told it
            # who leads: send one now rather than at the next interval.
            self.elector.request_heartbeat_round()
        return self._finish()

    def drain(self) -> list[Output]:
        """Outputs accumulated by ``propose``/``read_index``/``transfer_leadership``."""
        return self._finish()

    def flushed(self, now_ms: int, token: int) -> list[Output]:
        """The ``Flush`` effect ``token`` was carried out: the log is durable as far as it
        reached. A leader now counts its own copy of those entries toward the quorum."""
        self._begin(now_ms)
        self.core.flushed(token)
        self.replicator.on_flushed()
        return self._finish()

    def propose(self, now_ms: int, bodies: Sequence[bytes]) -> int:
        """Append ``bodies`` as one batch; returns a handle later reported by ``AppendDone``."""
        self._begin(now_ms)
        handle = self._new_handle()
        # Not copied into a list: a PackedBodies batch is stored from its buffer, body by body
        # objects never made.
        self._append(bodies, handle)
        return handle

    def read_index(self, now_ms: int) -> int:
        """Start a linearizable read; returns a handle later reported by ``ReadDone``."""
        self._begin(now_ms)
        handle = self._new_handle()
        ms = self.ms
        store = self.store
        if not ms.is_leader():
            self._outbox.append(ReadDone(handle, ResponseCode.NOT_LEADER, -1, ms.curr_term))
            return handle
        committed = store.committed_index
        if committed < self._leader_start_end:
            # Every entry committed before this leadership is in our log, at or below where
            # it ended when we took over, but our commit index may lag behind it (Raft paper §8).
            # Raft appends a no-op to get there; DLedger has none, so refuse until a write
            # commits. "An entry of our term is committed" is not enough here: DLedger can
            # re-elect a restarted leader in the same term with a stale checkpointed index.
            self._outbox.append(ReadDone(handle, ResponseCode.LEADER_NOT_READY, -1, ms.curr_term))
            return handle
        seq = self.elector.request_heartbeat_round()
        self._reads.append(_Read(handle, committed, ms.curr_term, seq, now_ms + self.config.max_wait_ack_time_ms))
        return handle

    def transfer_leadership(self, now_ms: int, transferee_id: str) -> int:
        """Hand leadership to ``transferee_id``; returns a handle reported by ``TransferDone``."""
        self._begin(now_ms)
        handle = self._new_handle()
        req = LeadershipTransferRequest(
            group=self.ms.group,
            remote_id=self.ms.self_id,
            local_id=self.ms.self_id,
            term=self.ms.curr_term,
            transfer_id=self.ms.self_id,
            transferee_id=transferee_id,
        )
        self._handle_leadership_transfer(req, ("local", handle))
        return handle

    # --- plumbing --------------------------------------------------------------------------

    def _begin(self, now_ms: int) -> None:
        if self._incarnation is None:
            self._incarnation = now_ms
            self.core.start_incarnation(now_ms)
        self.core.now = now_ms
        self.core.out = self._outbox

    def _new_handle(self) -> int:
        self._next_handle += 1
        return self._next_handle

    def _finish(self) -> list[Output]:
        self._deliver_committed()
        self._check_reads()
        out = self._outbox
        self._outbox = []
        self.core.out = self._outbox
        if self.core.dirty:
            self.core.dirty = False
            # Everything below may speak for the entries just written: flush them first.
            out.insert(0, self.core.new_flush())
        return out

    def _deliver_committed(self) -> None:
        committed = self.store.committed_index
        if self.applied_index >= committed:
            return
        if self._apply is not None:
            for entry in self.store.get_range(self.applied_index + 1, committed):
                self._apply(entry)
        self.applied_index = committed

    def _dispatch(self, msg: Message) -> None:
        ms = self.ms
        core = self.core
        if msg.group != ms.group:
            self._reject(msg, ResponseCode.UNKNOWN_GROUP)
            return
        if msg.remote_id != ms.self_id:
            self._reject(msg, ResponseCode.UNKNOWN_MEMBER)
            return
        if isinstance(msg, PushEntryRequest):
            self.handler.handle_push(msg)
        elif isinstance(msg, PushEntryResponse):
            self.replicator.on_push_response(msg)
            if self._transfer is not None:
                self._advance_transfer()
        elif isinstance(msg, HeartBeatRequest):
            core.out.append(Send(msg.local_id, self.elector.handle_heartbeat(msg)))
            self.handler.do_work()
        elif isinstance(msg, HeartBeatResponse):
            self.elector.handle_heartbeat_response(msg)
        elif isinstance(msg, VoteRequest):
            core.out.append(Send(msg.local_id, self.elector.handle_vote(msg)))
        elif isinstance(msg, VoteResponse):
            self.elector.handle_vote_response(msg)
        elif isinstance(msg, LeadershipTransferRequest):
            self._on_transfer_request(msg)
        elif isinstance(msg, LeadershipTransferResponse):
            self._on_transfer_response(msg)
        else:
            log.warning("[%s] unexpected message %s", ms.self_id, type(msg).__name__)

    def _on_transfer_request(self, msg: LeadershipTransferRequest) -> None:
        """The leader is asked to hand over (transfer_id), or the transferee to take over."""
        if msg.transfer_id == self.ms.self_id:
            self._handle_leadership_transfer(msg, ("wire", msg))
        elif msg.transferee_id == self.ms.self_id:
            refusal = self.elector.handle_take_leadership(msg)
            if refusal is not None:
                self.core.out.append(Send(msg.local_id, refusal))
        else:
            self._reject(msg, ResponseCode.UNKNOWN_MEMBER)

    def _reject(self, msg: Message, code: ResponseCode) -> None:
        resp = error_response(msg, code, self.ms.curr_term, self.ms.leader_id)
        if resp is not None:
            self.core.out.append(Send(resp.remote_id, resp))

    # --- role changes ------------------------------------------------------------------------

    def _on_role_change(self, term: int, role: Role) -> None:
        self.replicator.on_role_change(term, role)
        if role != Role.LEADER:
            for r in self._reads:
                self._outbox.append(ReadDone(r.handle, ResponseCode.NOT_LEADER, -1, r.term))
            self._reads.clear()
        if role == Role.LEADER:
            # A leader never serves the follower queues; drop what an older leader left.
            self.handler.clear()
            self._leader_start_end = self.store.ledger_end_index
            # Start pushing (COMPARE) and heartbeating at once rather than on the next tick.
            self.elector.tick()
            self.replicator.pump()
        self._outbox.append(RoleChanged(term, role, self.ms.leader_id))

    # --- appends (DLedgerServer.handleAppend) ------------------------------------------------

    def _append(self, bodies: Sequence[bytes], handle: int) -> None:
        ms = self.ms
        term = ms.curr_term
        try:
            if not ms.is_leader():
                raise DLedgerError(ResponseCode.NOT_LEADER, f"{ms.self_id} is {ms.role.name}")
            if ms.transferee is not None:
                raise DLedgerError(ResponseCode.LEADER_TRANSFERRING, f"transferring to {ms.transferee}")
            if self.replicator.is_pending_full(term):
                raise DLedgerError(ResponseCode.LEADER_PENDING_FULL, "pending full")
            if not bodies:
                raise DLedgerError(ResponseCode.REQUEST_WITH_EMPTY_BODYS, "BatchAppendEntryRequest with empty bodys")
            first, positions = self.core.append_as_leader(bodies, term)
        except DLedgerError as e:
            self._on_append_done(
                handle, AppendEntryResponse(group=ms.group, code=e.code, term=term, leader_id=ms.leader_id)
            )
            return
        last = first + len(bodies) - 1
        self.replicator.wait_ack(last, term, int(positions[-1]), positions, handle)
        self.replicator.pump()

    def _on_append_done(self, handle: Any, resp: AppendEntryResponse) -> None:
        self._outbox.append(AppendDone(handle, resp))

    # --- reads ----------------------------------------------------------------------------

    def _check_reads(self) -> None:
        if not self._reads:
            return
        el = self.elector
        now = self.core.now
        keep: list[_Read] = []
        for r in self._reads:
            if self.ms.curr_term != r.term or not self.ms.is_leader():
                self._outbox.append(ReadDone(r.handle, ResponseCode.NOT_LEADER, -1, r.term))
            elif el.confirmed_hb_term == r.term and el.confirmed_hb_seq >= r.seq and self.applied_index >= r.read_index:
                self._outbox.append(ReadDone(r.handle, ResponseCode.SUCCESS, r.read_index, r.term))
            elif now >= r.deadline_ms:
                self._outbox.append(ReadDone(r.handle, ResponseCode.TIMEOUT, -1, r.term))
            else:
                keep.append(r)
        self._reads = keep

    # --- leadership transfer, leader side --------------------------------------------------

    def _handle_leadership_transfer(self, req: LeadershipTransferRequest, waiter: Any) -> None:
        ms = self.ms

        def fail(code: ResponseCode, reason: str = "") -> None:
            resp = LeadershipTransferResponse(term=ms.curr_term, code=code, reason=reason)
            self._complete_transfer(waiter, resp)

        # DLedger's order (membership, term, leadership), so that a member asked to hand over
        # to itself while another leads says NOT_LEADER and the caller follows the redirect.
        if not ms.is_peer_member(req.transferee_id):
            fail(ResponseCode.UNKNOWN_MEMBER, f"{req.transferee_id!r} is not a member of group {ms.group!r}")
            return
        if req.term != ms.curr_term:
            fail(ResponseCode.INCONSISTENT_TERM, f"request term {req.term} != current term {ms.curr_term}")
            return
        if not ms.is_leader():
            fail(ResponseCode.NOT_LEADER, f"{ms.self_id} is {ms.role.name}; the leader is {ms.leader_id}")
            return
        if req.transferee_id == ms.self_id:
            # Nothing to hand over: the wanted member already leads.
            fail(ResponseCode.SUCCESS, f"{ms.self_id} already leads term {ms.curr_term}")
            return
        behind = self.replicator.fall_behind(req.transferee_id)
        if behind >= self.config.max_leadership_transfer_wait_index:
            fail(
                ResponseCode.FALL_BEHIND_TOO_MUCH,
                f"{req.transferee_id} is {behind} entries behind (limit max_leadership_transfer_wait_index "
                f"{self.config.max_leadership_transfer_wait_index})",
            )
            return
        if ms.transferee is not None:
            fail(ResponseCode.LEADER_TRANSFERRING, f"a transfer to {ms.transferee} is in progress")
            return
        log.info(
            "[%s] transferring leadership of term %d to %s (%d entries behind)",
            ms.self_id,
            ms.curr_term,
            req.transferee_id,
            behind,
        )
        # Appends stop here; the transferee is asked once it holds all of our log and follows
        # us in this term (a member that has not yet heard of this term refuses the request
        # with INCONSISTENT_TERM, and one with a shorter log cannot win the vote).
        ms.transferee = req.transferee_id
        self._transfer = _Transfer(
            0, waiter, req.term, self.core.now + self.core.timings.transfer_wait_ms, req.transferee_id
        )
        self._advance_transfer()

    def _transferee_match(self, t: _Transfer) -> int:
        rep = self.replicator
        return rep.water_marks.get(t.transferee, -1) if rep.water_mark_term == t.term else -1

    def _advance_transfer(self) -> None:
        """Ask the transferee to take leadership once it has caught up."""
        t = self._transfer
        ms = self.ms
        if t is None or t.asked or not ms.is_leader() or ms.curr_term != t.term:
            return
        end = self.store.ledger_end_index
        if self._transferee_match(t) < end:
            return
        t.asked = True
        t.req_id = self.core.new_req_id()
        # The answer gets a wait of its own (DLedger's RPC timeout): the catch-up before it may
        # have used most of the first, and the transferee still has to win a vote round.
        t.deadline_ms = self.core.now + self.core.timings.transfer_wait_ms
        self.core.send(
            t.transferee,
            LeadershipTransferRequest(
                leader_id=ms.leader_id,
                term=t.term,
                transfer_id=ms.self_id,
                transferee_id=t.transferee,
                take_leadership_ledger_index=end,
                req_id=t.req_id,
            ),
        )

    def _on_transfer_response(self, resp: LeadershipTransferResponse) -> None:
        t = self._transfer
        if t is None or resp.req_id != t.req_id:
            return
        self._transfer = None
        ms = self.ms
        code = resp.code
        reason = resp.reason
        if code == ResponseCode.SUCCESS and ms.curr_term == t.term and ms.transferee is not None:
            # DLedger's check: still leading the term we handed over is a failure, whatever was said.
            code = ResponseCode.TAKE_LEADERSHIP_FAILED
            reason = f"{t.transferee} answered SUCCESS but {ms.self_id} still leads term {t.term}"
        if code != ResponseCode.SUCCESS:
            log.warning(
                "[%s] leadership transfer to %s failed: %s(%d): %s; transferee cleared",
                ms.self_id,
                t.transferee,
                _code_name(code),
                code,
                reason or "no reason given",
            )
            if ms.curr_term == t.term:
                ms.transferee = None
        else:
            log.info("[%s] leadership transferred to %s in term %d", ms.self_id, t.transferee, resp.term)
        out = LeadershipTransferResponse(term=resp.term, code=code, reason=reason)
        self._complete_transfer(t.waiter, out, resp.leader_id if code == ResponseCode.SUCCESS else None)

    def _check_transfer_timeout(self) -> None:
        t = self._transfer
        if t is None:
            return
        ms = self.ms
        wait = self.core.timings.transfer_wait_ms
        if not t.asked and (not ms.is_leader() or ms.curr_term != t.term):
            code = ResponseCode.NOT_LEADER
            reason = f"{ms.self_id} lost leadership of term {t.term} while {t.transferee} caught up"
        elif self.core.now < t.deadline_ms:
            return
        elif not t.asked:
            code = ResponseCode.TIMEOUT
            match = self._transferee_match(t)
            if match < 0 and self.store.ledger_end_index >= 0:
                reason = (
                    f"{t.transferee} did not catch up within {wait} ms: it has not acknowledged any "
                    f"entry of term {t.term} (down, cut off, or still joining the term?)"
                )
            else:
                reason = (
                    f"{t.transferee} did not catch up within {wait} ms (it holds up to index {match} of "
                    f"{self.store.ledger_end_index} in term {t.term})"
                )
        else:
            code = ResponseCode.TIMEOUT
            reason = f"no answer from {t.transferee} within {wait} ms"
        self._transfer = None
        if ms.curr_term == t.term:
            ms.transferee = None
        log.warning(
            "[%s] leadership transfer to %s failed: %s; transferee cleared", self.ms.self_id, t.transferee, reason
        )
        resp = LeadershipTransferResponse(term=ms.curr_term, code=code, reason=reason)
        self._complete_transfer(t.waiter, resp)

    def _complete_transfer(self, waiter: Any, resp: LeadershipTransferResponse, leader_id: str | None = None) -> None:
        if waiter is None:
            return
        kind, target = waiter
        resp.group = self.ms.group
        # The new leader names itself in its answer; the old one may not have heard of it yet.
        resp.leader_id = leader_id or self.ms.leader_id
        if kind == "local":
            self._outbox.append(TransferDone(target, resp))
        else:
            req: LeadershipTransferRequest = target
            req.base_reply(resp)
            self._outbox.append(Send(resp.remote_id, resp))

    def _check_preferred_leader(self) -> None:
        """DLedgerServer.checkPreferredLeader, on the tick instead of a scheduled executor."""
        cfg = self.config
        ms = self.ms
        now = self.core.now
        if cfg.preferred_leader_ids is None or not ms.is_leader():
            return
        if elapsed(now, self._last_preferred_check_ms) < self.core.timings.preferred_leader_check_interval_ms:
            return
        self._last_preferred_check_ms = now
        preferred = [p for p in cfg.preferred_leader_ids.split(";") if p]
        if ms.transferee is not None or ms.self_id in preferred or self._transfer is not None:
            return
        for peer in preferred:
            if not ms.is_peer_member(peer) or not ms.peers_live_table.get(peer, False):
                continue
            if self.replicator.fall_behind(peer) >= cfg.max_leadership_transfer_wait_index:
                continue
            log.info("preferred leader %s is ready, transferring leadership", peer)
            req = LeadershipTransferRequest(term=ms.curr_term, transfer_id=ms.self_id, transferee_id=peer)
            self._handle_leadership_transfer(req, None)
            return
