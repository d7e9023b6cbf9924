"""DLedgerLeaderElector (DLedger 0.2.3), sans-IO.

DLedger runs this as a thread that loops every 10 ms and blocks on a latch while votes or
heartbeats are out. Here a vote round and a heartbeat round are records: the responses
update their counters, the latch condition is checked after every response, and ``tick``
plays the latch timeout. The decisions, counters, codes and their order are DLedger's.

One addition: a member that restarts in a term it voted for itself in first stands in the
next term (``no_candidacy_term``), because a leader's pushes may carry entries it had not
flushed when it crashed (see ``effects``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from dledger.codes import ResponseCode
from dledger.raft.core import NEVER, Core, elapsed
from dledger.raft.member_state import Role
from dledger.raft.messages import (
    HeartBeatRequest,
    HeartBeatResponse,
    LeadershipTransferRequest,
    LeadershipTransferResponse,
    ParseResult,
    VoteRequest,
    VoteResponse,
    VoteResult,
)

log = logging.getLogger(__name__)


@dataclass(slots=True)
class VoteRound:
    term: int
    req_id: int
    start_ms: int
    deadline_ms: int
    known_max_term_in_group: int
    responded: set[str] = field(default_factory=set)
    all_num: int = 0
    valid_num: int = 0
    accepted_num: int = 0
    not_ready_term_num: int = 0
    bigger_ledger_num: int = 0
    already_has_leader: bool = False
    latched: bool = False


@dataclass(slots=True)
class HeartbeatRound:
    term: int
    req_id: int
    seq: int
    start_ms: int
    deadline_ms: int
    responded: set[str] = field(default_factory=set)
    # self counts, as in sendHeartbeats
    all_num: int = 1
    succ_num: int = 1
    not_ready_num: int = 0
    max_term: int = -1
    inconsist_leader: bool = False
    latched: bool = False


@dataclass(slots=True)
class TakeLeadershipTask:
    """The transferee's pending answer to the leader's take-leadership request."""

    request: LeadershipTransferRequest


class Elector:
    def __init__(self, core: Core) -> None:
        self.core = core
        cfg = core.config
        self.heart_beat_time_interval_ms = cfg.heart_beat_time_interval_ms
        self.max_heart_beat_leak = cfg.max_heart_beat_leak
        self.min_vote_interval_ms = cfg.min_vote_interval_ms
        self.max_vote_interval_ms = cfg.max_vote_interval_ms
        self.last_leader_heart_beat_time = NEVER
        self.last_send_heart_beat_time = NEVER
        self.last_succ_heart_beat_time = NEVER
        self.next_time_to_request_vote = NEVER
        self.need_increase_term_immediately = False
        self.last_parse_result = ParseResult.WAIT_TO_REVOTE
        self.last_vote_cost = 0
        self.vote_round: VoteRound | None = None
        self.hb_round: HeartbeatRound | None = None
        # Read-index support: rounds are numbered; a read needs a round that started after it.
        self.next_hb_seq = 1
        self.confirmed_hb_seq = 0
        self.confirmed_hb_term = -1
        self.take_leadership_task: TakeLeadershipTask | None = None
        # A take-leadership request waiting for us to catch up: (request, deadline).
        self.take_leadership_wait: tuple[LeadershipTransferRequest, int] | None = None
        # The last vote round's counts, for a failed transfer's reason.
        self.last_vote_summary = ""
        # A member that voted for itself in the term it restarts in may have led that term,
        # and its pushes go out before its own flush (effects.py): entries a crash took from
        # it may live on at followers. Leading that term again could put a different entry
        # at the same (index, term). So it never stands again in that term.
        self.no_candidacy_term = core.ms.curr_term if core.ms.curr_vote_for == core.ms.self_id else -1

    # --- role changes (DLedgerLeaderElector.changeRoleTo*) --------------------------------

    def change_role_to_leader(self, term: int) -> None:
        ms = self.core.ms
        if ms.curr_term == term:
            ms.change_to_leader(term)
            self.last_send_heart_beat_time = NEVER
            log.info("[%s] [ChangeRoleToLeader] term=%d", ms.self_id, term)
            self._handle_role_change(term, Role.LEADER)
        else:
            log.warning("[%s] skip to be the leader in term %d, currTerm %d", ms.self_id, term, ms.curr_term)

    def change_role_to_candidate(self, term: int) -> None:
        ms = self.core.ms
        if term >= ms.curr_term:
            ms.change_to_candidate(term)
            log.info("[%s] [ChangeRoleToCandidate] term=%d currTerm=%d", ms.self_id, term, ms.curr_term)
            self._handle_role_change(term, Role.CANDIDATE)
        else:
            log.info("[%s] skip to be candidate in term %d, currTerm %d", ms.self_id, term, ms.curr_term)

    def change_role_to_follower(self, term: int, leader_id: str) -> None:
        ms = self.core.ms
        self.last_parse_result = ParseResult.WAIT_TO_REVOTE
        ms.change_to_follower(term, leader_id)
        self.last_leader_heart_beat_time = self.core.now
        log.info("[%s] [ChangeRoleToFollower] term=%d leader=%s", ms.self_id, term, leader_id)
        self._handle_role_change(term, Role.FOLLOWER)

    def _handle_role_change(self, term: int, role: Role) -> None:
        self._check_take_leadership(term, role)
        # A heartbeat round belongs to one leadership; a stale one must not confirm reads.
        if role != Role.LEADER:
            self.hb_round = None
        self.core.on_role_change(term, role)

    # --- the state maintainer --------------------------------------------------------------

    def tick(self) -> None:
        if not self.core.config.enable_leader_elector:
            return
        ms = self.core.ms
        if ms.is_leader():
            self._maintain_as_leader()
        elif ms.is_follower():
            self._maintain_as_follower()
        else:
            self._maintain_as_candidate()
        # A vote round outlives a role change in DLedger (the thread is parked on the
        # latch), so its timeout is checked whatever the role is now.
        vr = self.vote_round
        if vr is not None and self.core.now >= vr.deadline_ms:
            self._parse_vote_result()

    def _maintain_as_leader(self) -> None:
        now = self.core.now
        hb = self.hb_round
        if hb is not None:
            if now >= hb.deadline_ms:
                self._decide_heartbeats()
            return
        if elapsed(now, self.last_send_heart_beat_time) > self.heart_beat_time_interval_ms:
            self._send_heartbeats()

    def request_heartbeat_round(self) -> int:
        """Ask for a heartbeat round that starts now or right after the open one ends;
        returns the sequence number the caller must see confirmed."""
        if self.hb_round is None:
            self.last_send_heart_beat_time = NEVER
            if self.core.ms.is_leader():
                self._send_heartbeats()
                return self.next_hb_seq - 1
        else:
            # The open round started before the caller; the next one is what counts.
            self.last_send_heart_beat_time = NEVER
        return self.next_hb_seq

    def _send_heartbeats(self) -> None:
        core = self.core
        ms = core.ms
        if not ms.is_leader():
            return
        term, leader_id = ms.curr_term, ms.leader_id
        self.last_send_heart_beat_time = core.now
        req_id = core.new_req_id()
        self.hb_round = HeartbeatRound(
            term=term,
            req_id=req_id,
            seq=self.next_hb_seq,
            start_ms=core.now,
            deadline_ms=core.now + self.heart_beat_time_interval_ms,
        )
        self.next_hb_seq += 1
        for peer in ms.others():
            core.send(peer, HeartBeatRequest(leader_id=leader_id, term=term, req_id=req_id))
        self._check_heartbeat_latch()

    def handle_heartbeat_response(self, resp: HeartBeatResponse) -> None:
        ms = self.core.ms
        if (
            resp.code == ResponseCode.EXPIRED_TERM
            and resp.local_id == ms.transferee
            and resp.term == ms.curr_term + 1
            and ms.is_leader()
        ):
            # The member we hand leadership to has moved to the next term to stand in it. We
            # lead on (appends stay blocked) until its vote request reaches us: stepping down
            # now would make us a candidate of that term too, and our own vote round could
            # win it before the transferee asks (TAKE_LEADERSHIP_FAILED).
            hb = self.hb_round
            if hb is not None and resp.req_id == hb.req_id and resp.local_id not in hb.responded:
                hb.responded.add(resp.local_id)
                hb.all_num += 1
                ms.peers_live_table[resp.local_id] = True
                self._check_heartbeat_latch()
            return
        if resp.code == ResponseCode.EXPIRED_TERM and resp.term > ms.curr_term and ms.is_leader():
            # Not DLedger: it steps down only when the round also misses a quorum, so a member
            # that came back from a partition with a larger term (and a log too short to win)
            # stays a candidate forever: its votes are refused on the ledger checks before
            # anyone looks at its term, and it refuses our heartbeats (simulation seed 18).
            # As in Raft, a larger term ends our leadership; the next election runs at once
            # and in that term, so the others catch up and the member can follow again.
            log.info("[%s] %s has term %d > %d, stepping down", ms.self_id, resp.local_id, resp.term, ms.curr_term)
            self.change_role_to_candidate(resp.term)
            self.need_increase_term_immediately = True
            return
        hb = self.hb_round
        if hb is None or resp.req_id != hb.req_id or resp.local_id in hb.responded:
            return
        hb.responded.add(resp.local_id)
        code = resp.code
        if code == ResponseCode.SUCCESS:
            hb.succ_num += 1
        elif code == ResponseCode.EXPIRED_TERM:
            hb.max_term = resp.term
        elif code == ResponseCode.INCONSISTENT_LEADER:
            hb.inconsist_leader = True
        elif code == ResponseCode.TERM_NOT_READY:
            hb.not_ready_num += 1
        self.core.ms.peers_live_table[resp.local_id] = code != ResponseCode.NETWORK_ERROR
        hb.all_num += 1
        self._check_heartbeat_latch()

    def _check_heartbeat_latch(self) -> None:
        hb = self.hb_round
        assert hb is not None
        ms = self.core.ms
        if ms.is_quorum(hb.succ_num) or ms.is_quorum(hb.succ_num + hb.not_ready_num) or hb.all_num == ms.peer_size():
            self._decide_heartbeats()

    def _decide_heartbeats(self) -> None:
        hb = self.hb_round
        assert hb is not None
        self.hb_round = None
        core = self.core
        ms = core.ms
        for peer in ms.others():
            if peer not in hb.responded:
                # DLedger marks a peer dead when its heartbeat future fails.
                ms.peers_live_table[peer] = False
        if ms.is_quorum(hb.succ_num):
            self.last_succ_heart_beat_time = core.now
            if ms.is_leader() and ms.curr_term == hb.term:
                self.confirmed_hb_seq = hb.seq
                self.confirmed_hb_term = hb.term
            return
        log.info(
            "[%s] Parse heartbeat responses term=%d allNum=%d succNum=%d notReadyNum=%d inconsistLeader=%s "
            "maxTerm=%d peerSize=%d",
            ms.self_id,
            hb.term,
            hb.all_num,
            hb.succ_num,
            hb.not_ready_num,
            hb.inconsist_leader,
            hb.max_term,
            ms.peer_size(),
        )
        if ms.is_quorum(hb.succ_num + hb.not_ready_num):
            self.last_send_heart_beat_time = NEVER
        elif hb.max_term > hb.term:
            self.change_role_to_candidate(hb.max_term)
        elif hb.inconsist_leader:
            self.change_role_to_candidate(hb.term)
        elif (
            elapsed(core.now, self.last_succ_heart_beat_time)
            > self.max_heart_beat_leak * self.heart_beat_time_interval_ms
        ):
            self.change_role_to_candidate(hb.term)

    def _maintain_as_follower(self) -> None:
        now = self.core.now
        if elapsed(now, self.last_leader_heart_beat_time) > 2 * self.heart_beat_time_interval_ms:
            ms = self.core.ms
            if ms.is_follower() and elapsed(now, self.last_leader_heart_beat_time) > (
                self.max_heart_beat_leak * self.heart_beat_time_interval_ms
            ):
                log.info("[%s][HeartBeatTimeOut] lastLeader=%s", ms.self_id, ms.leader_id)
                self.change_role_to_candidate(ms.curr_term)

    def _is_taking_leadership(self) -> bool:
        """Standing in the term our leader asked us to take. DLedger also requires that we are
        in ``preferred_leader_ids``; here an explicit transfer (``dledger transfer-leader``)
        counts the same, so the transferee votes within 30-100 ms and does not give its vote
        away in that term. Otherwise its first vote round waits 300-1000 ms with appends
        blocked on the old leader, and any member that stands first in the term wins it."""
        ms = self.core.ms
        return ms.term_to_take_leadership != -1 and ms.term_to_take_leadership == ms.curr_term

    def _get_next_time_to_request_vote(self) -> int:
        rng = self.core.rng
        now = self.core.now
        if self._is_taking_leadership():
            cfg = self.core.config
            lo, hi = cfg.min_take_leadership_vote_interval_ms, cfg.max_take_leadership_vote_interval_ms
            return now + lo + rng.randrange(max(1, hi - lo))
        return (
            now
            + self.min_vote_interval_ms
            + rng.randrange(max(1, self.max_vote_interval_ms - self.min_vote_interval_ms))
        )

    def _maintain_as_candidate(self) -> None:
        core = self.core
        ms = core.ms
        if self.vote_round is not None:
            # The DLedger thread is still parked on the vote latch.
            return
        if core.now < self.next_time_to_request_vote and not self.need_increase_term_immediately:
            return
        if not ms.is_candidate():
            return
        if (
            self.last_parse_result == ParseResult.WAIT_TO_VOTE_NEXT
            or self.need_increase_term_immediately
            or ms.curr_term == self.no_candidacy_term
        ):
            prev = ms.curr_term
            term = ms.next_term()
            log.info("%s_[INCREASE_TERM] from %d to %d", ms.self_id, prev, term)
            self.last_parse_result = ParseResult.WAIT_TO_REVOTE
        else:
            term = ms.curr_term
        ledger_end_index = core.store.ledger_end_index
        ledger_end_term = core.store.ledger_end_term
        if self.need_increase_term_immediately:
            # The vote happens on a later loop, in the new term.
            self.next_time_to_request_vote = self._get_next_time_to_request_vote()
            self.need_increase_term_immediately = False
            return
        req_id = core.new_req_id()
        wait = self.core.timings.vote_wait_base_ms + core.rng.randrange(max(1, self.max_vote_interval_ms))
        vr = VoteRound(
            term=term,
            req_id=req_id,
            start_ms=core.now,
            deadline_ms=core.now + wait,
            known_max_term_in_group=term,
        )
        self.vote_round = vr
        for peer in ms.peer_map:
            req = VoteRequest(
                leader_id=ms.self_id,
                term=term,
                ledger_end_index=ledger_end_index,
                ledger_end_term=ledger_end_term,
                req_id=req_id,
            )
            if peer == ms.self_id:
                req.group, req.local_id, req.remote_id = ms.group, ms.self_id, ms.self_id
                self._count_vote(vr, ms.self_id, self.handle_vote(req, self_vote=True))
            else:
                core.send(peer, req)
            if self.vote_round is not vr:
                # A single-member group decides on its own vote.
                return

    def handle_vote_response(self, resp: VoteResponse) -> None:
        vr = self.vote_round
        if vr is None or resp.req_id != vr.req_id or resp.local_id in vr.responded:
            return
        self._count_vote(vr, resp.local_id, resp)

    def _count_vote(self, vr: VoteRound, peer: str, resp: VoteResponse) -> None:
        vr.responded.add(peer)
        result = resp.vote_result
        if result != VoteResult.UNKNOWN:
            vr.valid_num += 1
        if result == VoteResult.ACCEPT:
            vr.accepted_num += 1
        elif result in (VoteResult.REJECT_ALREADY_VOTED, VoteResult.REJECT_TAKING_LEADERSHIP):
            pass
        elif result == VoteResult.REJECT_ALREADY_HAS_LEADER:
            vr.already_has_leader = True
        elif result in (VoteResult.REJECT_TERM_SMALL_THAN_LEDGER, VoteResult.REJECT_EXPIRED_VOTE_TERM):
            if resp.term > vr.known_max_term_in_group:
                vr.known_max_term_in_group = resp.term
        elif result in (VoteResult.REJECT_EXPIRED_LEDGER_TERM, VoteResult.REJECT_SMALL_LEDGER_END_INDEX):
            vr.bigger_ledger_num += 1
        elif result == VoteResult.REJECT_TERM_NOT_READY:
            vr.not_ready_term_num += 1
        vr.all_num += 1
        ms = self.core.ms
        if (
            vr.already_has_leader
            or ms.is_quorum(vr.accepted_num)
            or ms.is_quorum(vr.accepted_num + vr.not_ready_term_num)
            or vr.all_num == ms.peer_size()
        ):
            self._parse_vote_result()

    def _parse_vote_result(self) -> None:
        vr = self.vote_round
        assert vr is not None
        self.vote_round = None
        core = self.core
        ms = core.ms
        self.last_vote_cost = core.now - vr.start_ms
        term = vr.term
        if vr.known_max_term_in_group > term:
            result = ParseResult.WAIT_TO_VOTE_NEXT
            self.next_time_to_request_vote = self._get_next_time_to_request_vote()
            self.change_role_to_candidate(vr.known_max_term_in_group)
        elif vr.already_has_leader:
            result = ParseResult.WAIT_TO_REVOTE
            self.next_time_to_request_vote = (
                self._get_next_time_to_request_vote() + self.heart_beat_time_interval_ms * self.max_heart_beat_leak
            )
        elif not ms.is_quorum(vr.valid_num):
            result = ParseResult.WAIT_TO_REVOTE
            self.next_time_to_request_vote = self._get_next_time_to_request_vote()
        elif not ms.is_quorum(vr.valid_num - vr.bigger_ledger_num):
            result = ParseResult.WAIT_TO_REVOTE
            self.next_time_to_request_vote = self._get_next_time_to_request_vote() + self.max_vote_interval_ms
        elif ms.is_quorum(vr.accepted_num):
            result = ParseResult.PASSED
        elif ms.is_quorum(vr.accepted_num + vr.not_ready_term_num):
            # nextTimeToRequestVote unchanged: re-vote on the next loop, same term.
            result = ParseResult.REVOTE_IMMEDIATELY
        else:
            result = ParseResult.WAIT_TO_VOTE_NEXT
            self.next_time_to_request_vote = self._get_next_time_to_request_vote()
        self.last_parse_result = result
        self.last_vote_summary = (
            f"term {term} accepted {vr.accepted_num}/{ms.peer_size()}, not ready {vr.not_ready_term_num}, "
            f"bigger ledger {vr.bigger_ledger_num}, already has leader {vr.already_has_leader}: {result.name}"
        )
        log.info(
            "[%s] [PARSE_VOTE_RESULT] cost=%d term=%d memberNum=%d allNum=%d acceptedNum=%d "
            "notReadyTermNum=%d biggerLedgerNum=%d alreadyHasLeader=%s maxTerm=%d result=%s",
            ms.self_id,
            self.last_vote_cost,
            term,
            ms.peer_size(),
            vr.all_num,
            vr.accepted_num,
            vr.not_ready_term_num,
            vr.bigger_ledger_num,
            vr.already_has_leader,
            vr.known_max_term_in_group,
            result.name,
        )
        if result == ParseResult.PASSED:
            log.info("[%s] [VOTE_RESULT] has been elected to be the leader in term %d", ms.self_id, term)
            # DLedger checks only currTerm == term; a member that has meanwhile become a
            # follower cannot have done so in this term (a quorum voted for us in it).
            self.change_role_to_leader(term)

    # --- request handlers ------------------------------------------------------------------

    def handle_vote(self, req: VoteRequest, self_vote: bool = False) -> VoteResponse:
        """handleVote, 0.2.3 order: membership, ledger, term, ledger-term, taking-leadership."""
        ms = self.core.ms
        store = self.core.store

        def resp(result: VoteResult, term: int | None = None) -> VoteResponse:
            r = VoteResponse(term=ms.curr_term if term is None else term, vote_result=result, leader_id=ms.leader_id)
            req.base_reply(r)
            return r

        if not ms.is_peer_member(req.leader_id):
            log.warning("[BUG] [HandleVote] remoteId=%s is an unknown member", req.leader_id)
            return resp(VoteResult.REJECT_UNKNOWN_LEADER)
        if not self_vote and ms.self_id == req.leader_id:
            log.warning("[BUG] [HandleVote] selfId=%s but remoteId=%s", ms.self_id, req.leader_id)
            return resp(VoteResult.REJECT_UNEXPECTED_LEADER)
        own_end_term = store.ledger_end_term
        own_end_index = store.ledger_end_index
        if req.ledger_end_term < own_end_term:
            return resp(VoteResult.REJECT_EXPIRED_LEDGER_TERM)
        if req.ledger_end_term == own_end_term and req.ledger_end_index < own_end_index:
            return resp(VoteResult.REJECT_SMALL_LEDGER_END_INDEX)
        if req.term < ms.curr_term:
            return resp(VoteResult.REJECT_EXPIRED_VOTE_TERM)
        if req.term == ms.curr_term:
            if ms.curr_vote_for is not None and ms.curr_vote_for != req.leader_id:
                if ms.leader_id is not None:
                    return resp(VoteResult.REJECT_ALREADY_HAS_LEADER)
                return resp(VoteResult.REJECT_ALREADY_VOTED)
        else:
            # Stepped down by a larger term; votes are only given once terms agree.
            self.change_role_to_candidate(req.term)
            self.need_increase_term_immediately = True
            return resp(VoteResult.REJECT_TERM_NOT_READY)
        if req.term < own_end_term:
            return resp(VoteResult.REJECT_TERM_SMALL_THAN_LEDGER, term=own_end_term)
        if (
            not self_vote
            and self._is_taking_leadership()
            and req.ledger_end_term == own_end_term
            and own_end_index >= req.ledger_end_index
        ):
            return resp(VoteResult.REJECT_TAKING_LEADERSHIP)
        ms.set_curr_vote_for(req.leader_id)
        return resp(VoteResult.ACCEPT)

    def handle_heartbeat(self, req: HeartBeatRequest) -> HeartBeatResponse:
        ms = self.core.ms

        def resp(code: ResponseCode, term: int | None = None) -> HeartBeatResponse:
            r = HeartBeatResponse(code=code, term=ms.curr_term if term is None else term, leader_id=ms.leader_id)
            req.base_reply(r)
            return r

        if not ms.is_peer_member(req.leader_id):
            log.warning("[BUG] [HandleHeartBeat] remoteId=%s is an unknown member", req.leader_id)
            return resp(ResponseCode.UNKNOWN_MEMBER)
        if ms.self_id == req.leader_id:
            log.warning("[BUG] [HandleHeartBeat] selfId=%s but remoteId=%s", ms.self_id, req.leader_id)
            return resp(ResponseCode.UNEXPECTED_MEMBER)
        assert req.leader_id is not None
        if req.term < ms.curr_term:
            return resp(ResponseCode.EXPIRED_TERM)
        if req.term == ms.curr_term:
            if ms.leader_id is None:
                task = self.take_leadership_task
                if (
                    task is not None
                    and ms.term_to_take_leadership == req.term + 1
                    and task.request.transfer_id == req.leader_id
                ):
                    # Asked by this leader to take over, we stand in the next term at our next
                    # step; its heartbeat of the old term must not make us its follower first, or
                    # the transfer fails on that race (DLedger has the same window).
                    return resp(ResponseCode.SUCCESS)
                self.change_role_to_follower(req.term, req.leader_id)
                return resp(ResponseCode.SUCCESS)
            if req.leader_id == ms.leader_id:
                self.last_leader_heart_beat_time = self.core.now
                return resp(ResponseCode.SUCCESS)
            log.error(
                "[%s][BUG] currTerm %d has leader %s, but received leader %s",
                ms.self_id,
                ms.curr_term,
                ms.leader_id,
                req.leader_id,
            )
            return resp(ResponseCode.INCONSISTENT_LEADER)
        # "To make it simple, for larger term, do not change to follower immediately."
        self.change_role_to_candidate(req.term)
        self.need_increase_term_immediately = True
        return resp(ResponseCode.TERM_NOT_READY)

    # --- leadership transfer, transferee side (handleTakeLeadership) -----------------------

    def handle_take_leadership(self, req: LeadershipTransferRequest) -> LeadershipTransferResponse | None:
        """Returns an immediate refusal, or None: the answer follows a later role change."""
        ms = self.core.ms
        if ms.curr_term != req.term:
            r = LeadershipTransferResponse(
                term=ms.curr_term,
                code=ResponseCode.INCONSISTENT_TERM,
                reason=f"{ms.self_id} is in term {ms.curr_term}, not {req.term}",
            )
            req.base_reply(r)
            return r
        if req.transfer_id != ms.leader_id:
            r = LeadershipTransferResponse(
                term=ms.curr_term,
                code=ResponseCode.INCONSISTENT_LEADER,
                reason=f"{ms.self_id} follows {ms.leader_id}, not {req.transfer_id}",
            )
            req.base_reply(r)
            return r
        behind = req.take_leadership_ledger_index - self.core.store.ledger_end_index
        if behind > 0:
            # DLedgerServer.handleLeadershipTransfer: wait until we hold every entry the leader
            # had when it asked; standing without them, our vote would be refused on the
            # ledger checks (REJECT_SMALL_LEDGER_END_INDEX). The leader blocks appends meanwhile.
            log.info(
                "[%s] transferee %d entries behind; waiting up to %d ms to catch up",
                ms.self_id,
                behind,
                self.core.config.leadership_transfer_wait_timeout,
            )
            self.take_leadership_wait = (req, self.core.now + self.core.config.leadership_transfer_wait_timeout)
            return None
        self._take_leadership(req)
        return None

    def _take_leadership(self, req: LeadershipTransferRequest) -> None:
        ms = self.core.ms
        target = req.term + 1
        log.info("[%s] taking leadership from %s: standing in term %d", ms.self_id, req.transfer_id, target)
        ms.term_to_take_leadership = target
        self.take_leadership_task = TakeLeadershipTask(req)
        self.change_role_to_candidate(target)
        self.need_increase_term_immediately = True

    def check_take_leadership_wait(self) -> None:
        """A transferee waiting to catch up: stand once it holds the leader's entries; refuse
        when its leader or term changed, or the wait timed out."""
        waiting = self.take_leadership_wait
        if waiting is None:
            return
        req, deadline = waiting
        core = self.core
        ms = core.ms
        behind = req.take_leadership_ledger_index - core.store.ledger_end_index
        code: ResponseCode | None = None
        if ms.curr_term != req.term or ms.leader_id != req.transfer_id:
            code = ResponseCode.INCONSISTENT_TERM if ms.curr_term != req.term else ResponseCode.INCONSISTENT_LEADER
            reason = f"while catching up, {ms.self_id} moved to term {ms.curr_term} with leader {ms.leader_id}"
        elif behind <= 0:
            self.take_leadership_wait = None
            self._take_leadership(req)
            return
        elif core.now >= deadline:
            code = ResponseCode.TAKE_LEADERSHIP_FAILED
            reason = (
                f"{ms.self_id} still {behind} entries behind the leader's {req.take_leadership_ledger_index} "
                f"after {core.config.leadership_transfer_wait_timeout} ms (leadership_transfer_wait_timeout)"
            )
        if code is None:
            return
        self.take_leadership_wait = None
        log.warning("[%s] not taking leadership: %s", ms.self_id, reason)
        core.reply(req, LeadershipTransferResponse(term=ms.curr_term, code=code, reason=reason, leader_id=ms.leader_id))

    def _check_take_leadership(self, term: int, role: Role) -> None:
        ms = self.core.ms
        task = self.take_leadership_task
        if ms.term_to_take_leadership == -1 or task is None:
            return
        target = ms.term_to_take_leadership
        votes = self.last_vote_summary or "no vote round finished"
        if term > target:
            code = ResponseCode.EXPIRED_TERM
            reason = f"{ms.self_id} moved on to term {term} > {target} ({role.name}); last vote round: {votes}"
        elif term == target:
            if role == Role.LEADER:
                code = ResponseCode.SUCCESS
                reason = f"{ms.self_id} leads term {term}"
            elif role == Role.FOLLOWER:
                code = ResponseCode.TAKE_LEADERSHIP_FAILED
                reason = f"{ms.leader_id} won term {term} first; {ms.self_id}'s last vote round: {votes}"
            else:
                return
        else:
            # A heartbeat may make it a follower before its term has moved.
            code = ResponseCode.TAKE_LEADERSHIP_FAILED if role == Role.FOLLOWER else ResponseCode.INTERNAL_ERROR
            reason = f"{ms.self_id} became {role.name} in term {term} before standing in term {target}"
        resp = LeadershipTransferResponse(term=term, code=code, leader_id=ms.leader_id, reason=reason)
        self.core.reply(task.request, resp)
        log.log(
            logging.INFO if code == ResponseCode.SUCCESS else logging.WARNING,
            "[%s] TakeLeadershipTask finished code=%s term=%d role=%s: %s",
            ms.self_id,
            code.name,
            term,
            role.name,
            reason,
        )
        ms.term_to_take_leadership = -1
        self.take_leadership_task = None
