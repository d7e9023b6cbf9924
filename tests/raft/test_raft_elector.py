"""Election rules of DLedgerLeaderElector: handleVote's reject codes and order, heartbeats, parse results."""

from __future__ import annotations

import pytest
from raft_helpers import elect, follow, make_node, one, sent, to_node

from dledger.codes import ResponseCode
from dledger.raft.core import NEVER
from dledger.raft.member_state import MemoryTermStore, Role
from dledger.raft.messages import (
    HeartBeatRequest,
    HeartBeatResponse,
    ParseResult,
    VoteRequest,
    VoteResponse,
    VoteResult,
)
from dledger.raft.node import RaftNode
from dledger.store.memory import MemoryStore


def vote(node: RaftNode, leader: str = "n1", term: int = 0, end_index: int = -1, end_term: int = -1) -> VoteResponse:
    req = to_node(
        node,
        VoteRequest(leader_id=leader, term=term, ledger_end_index=end_index, ledger_end_term=end_term, req_id=5),
        leader,
    )
    resp = one(node.step(0, req), VoteResponse)
    assert resp.req_id == 5 and resp.remote_id == leader
    return resp


def store_with(terms: list[int]) -> MemoryStore:
    st = MemoryStore()
    for t in terms:
        st.append_as_leader(b"x", t)
    return st


# --- handleVote -------------------------------------------------------------------------------


def test_accept_persists_vote_before_answering() -> None:
    ts = MemoryTermStore()
    node = make_node(term_store=ts)
    r = vote(node, "n1", 0)
    assert r.vote_result == VoteResult.ACCEPT and r.term == 0
    assert (ts.term, ts.vote_for) == (0, "n1")
    assert vote(node, "n1", 0).vote_result == VoteResult.ACCEPT  # a repeat is let through


def test_reject_unknown_leader() -> None:
    assert vote(make_node(), "n9").vote_result == VoteResult.REJECT_UNKNOWN_LEADER


def test_reject_unexpected_leader() -> None:
    assert vote(make_node(), "n0").vote_result == VoteResult.REJECT_UNEXPECTED_LEADER


def test_reject_expired_ledger_term() -> None:
    node = make_node(store=store_with([0, 2]), term_store=MemoryTermStore(3))
    assert vote(node, "n1", 3, end_index=5, end_term=1).vote_result == VoteResult.REJECT_EXPIRED_LEDGER_TERM


def test_reject_small_ledger_end_index() -> None:
    node = make_node(store=store_with([0, 2, 2]), term_store=MemoryTermStore(3))
    assert vote(node, "n1", 3, end_index=1, end_term=2).vote_result == VoteResult.REJECT_SMALL_LEDGER_END_INDEX


def test_ledger_checks_come_before_term_checks() -> None:
    # 0.2.3 order: a stale ledger is refused even with a larger term, and the term is not taken.
    node = make_node(store=store_with([0, 2]), term_store=MemoryTermStore(2))
    assert vote(node, "n1", 9, end_index=0, end_term=0).vote_result == VoteResult.REJECT_EXPIRED_LEDGER_TERM
    assert node.ms.known_max_term_in_group < 9


def test_reject_expired_vote_term() -> None:
    node = make_node(term_store=MemoryTermStore(4))
    r = vote(node, "n1", 3)
    assert r.vote_result == VoteResult.REJECT_EXPIRED_VOTE_TERM and r.term == 4


def test_reject_already_voted() -> None:
    node = make_node(term_store=MemoryTermStore(2, "n2"))
    assert vote(node, "n1", 2).vote_result == VoteResult.REJECT_ALREADY_VOTED


def test_reject_already_has_leader() -> None:
    node = make_node(term_store=MemoryTermStore(0, "n2"))
    follow(node, "n2")
    assert vote(node, "n1", 0).vote_result == VoteResult.REJECT_ALREADY_HAS_LEADER


def test_reject_term_not_ready_steps_down_and_raises_term_next() -> None:
    node = make_node()
    follow(node, "n2")
    r = vote(node, "n1", 5)
    assert r.vote_result == VoteResult.REJECT_TERM_NOT_READY
    assert node.role == Role.CANDIDATE and node.ms.known_max_term_in_group == 5
    assert node.elector.need_increase_term_immediately
    node.tick(10)  # nextTerm jumps to the known max and the vote waits for a later loop
    assert node.term == 5 and not node.elector.need_increase_term_immediately
    assert vote(node, "n1", 5).vote_result == VoteResult.ACCEPT


def test_reject_term_small_than_ledger_reports_ledger_term() -> None:
    node = make_node(store=store_with([0, 6]), term_store=MemoryTermStore(3))
    r = vote(node, "n1", 3, end_index=1, end_term=6)
    assert r.vote_result == VoteResult.REJECT_TERM_SMALL_THAN_LEDGER and r.term == 6


def test_reject_taking_leadership() -> None:
    node = make_node(preferred_leader_ids="n0")
    node.ms.term_to_take_leadership = node.term
    assert vote(node, "n1", 0).vote_result == VoteResult.REJECT_TAKING_LEADERSHIP
    # a longer ledger still wins
    assert vote(node, "n1", 0, end_index=3, end_term=0).vote_result == VoteResult.ACCEPT


def test_wrong_group_and_member_are_refused_before_the_elector() -> None:
    node = make_node()
    req = to_node(node, VoteRequest(leader_id="n1", term=0), "n1")
    req.group = "other"
    assert one(node.step(0, req), VoteResponse).code == ResponseCode.UNKNOWN_GROUP
    req = to_node(node, VoteRequest(leader_id="n1", term=0), "n1")
    req.remote_id = "n2"
    assert one(node.step(0, req), VoteResponse).code == ResponseCode.UNKNOWN_MEMBER
    assert node.ms.curr_vote_for is None


# --- candidate loop and parse results ---------------------------------------------------------


def candidate_round(node: RaftNode, results: list[VoteResult], term_of: int | None = None) -> None:
    out = node.tick(node.core.now + 10_000)
    reqs = sent(out, VoteRequest)
    assert reqs and node.elector.vote_round is not None
    for req, res in zip(reqs, results, strict=False):
        resp = VoteResponse(term=req.term if term_of is None else term_of, vote_result=res)
        req.base_reply(resp)
        node.step(node.core.now, resp)


def test_passed_makes_leader_and_sends_heartbeats() -> None:
    node = make_node()
    out = elect(node)
    assert node.elector.last_parse_result == ParseResult.PASSED
    assert len(sent(out, HeartBeatRequest)) == 2


def test_revote_immediately_on_not_ready_quorum() -> None:
    node = make_node(n=5)
    candidate_round(node, [VoteResult.REJECT_TERM_NOT_READY, VoteResult.REJECT_TERM_NOT_READY])
    assert node.elector.last_parse_result == ParseResult.REVOTE_IMMEDIATELY
    term = node.term
    assert sent(node.tick(node.core.now + 10), VoteRequest)  # next loop, same term
    assert node.term == term


def test_wait_to_vote_next_increases_term() -> None:
    node = make_node()
    candidate_round(node, [VoteResult.REJECT_ALREADY_VOTED, VoteResult.REJECT_ALREADY_VOTED])
    assert node.elector.last_parse_result == ParseResult.WAIT_TO_VOTE_NEXT
    term = node.term
    node.tick(node.elector.next_time_to_request_vote)
    assert node.term == term + 1


def test_already_has_leader_waits_to_revote_longer() -> None:
    node = make_node()
    now = node.core.now
    candidate_round(node, [VoteResult.REJECT_ALREADY_HAS_LEADER])
    assert node.elector.last_parse_result == ParseResult.WAIT_TO_REVOTE
    hb = node.config.heart_beat_time_interval_ms * node.config.max_heart_beat_leak
    assert node.elector.next_time_to_request_vote >= now + 10_000 + hb


def test_bigger_ledger_waits_to_revote() -> None:
    node = make_node()
    candidate_round(node, [VoteResult.REJECT_SMALL_LEDGER_END_INDEX, VoteResult.REJECT_EXPIRED_LEDGER_TERM])
    assert node.elector.last_parse_result == ParseResult.WAIT_TO_REVOTE


def test_known_max_term_moves_candidate_up() -> None:
    node = make_node()
    candidate_round(node, [VoteResult.REJECT_EXPIRED_VOTE_TERM, VoteResult.REJECT_EXPIRED_VOTE_TERM], term_of=9)
    assert node.elector.last_parse_result == ParseResult.WAIT_TO_VOTE_NEXT
    assert node.ms.known_max_term_in_group == 9
    node.tick(node.elector.next_time_to_request_vote)
    assert node.term == 9


def test_vote_round_times_out_without_quorum() -> None:
    node = make_node()
    node.tick(10_000)
    vr = node.elector.vote_round
    assert vr is not None
    node.tick(vr.deadline_ms)
    assert node.elector.vote_round is None
    assert node.elector.last_parse_result == ParseResult.WAIT_TO_REVOTE  # only its own vote was valid


def test_single_member_group_elects_itself() -> None:
    node = make_node(n=1)
    node.tick(0)
    assert node.is_leader


# --- heartbeats --------------------------------------------------------------------------------


def heartbeat(node: RaftNode, leader: str, term: int, now: int = 0) -> HeartBeatResponse:
    return one(
        node.step(now, to_node(node, HeartBeatRequest(leader_id=leader, term=term, req_id=3), leader)),
        HeartBeatResponse,
    )


@pytest.mark.parametrize(
    ("leader", "term", "code"),
    [
        ("n9", 0, ResponseCode.UNKNOWN_MEMBER),
        ("n0", 0, ResponseCode.UNEXPECTED_MEMBER),
        ("n1", 7, ResponseCode.TERM_NOT_READY),
    ],
)
def test_heartbeat_codes(leader: str, term: int, code: ResponseCode) -> None:
    assert heartbeat(make_node(), leader, term).code == code


def test_heartbeat_expired_term() -> None:
    r = heartbeat(make_node(term_store=MemoryTermStore(3)), "n1", 2)
    assert r.code == ResponseCode.EXPIRED_TERM and r.term == 3


def test_heartbeat_makes_candidate_follower_and_refreshes() -> None:
    node = make_node()
    assert heartbeat(node, "n1", 0, now=5).code == ResponseCode.SUCCESS
    assert node.role == Role.FOLLOWER and node.leader_id == "n1"
    assert heartbeat(node, "n1", 0, now=50).code == ResponseCode.SUCCESS
    assert node.elector.last_leader_heart_beat_time == 50
    assert heartbeat(node, "n2", 0).code == ResponseCode.INCONSISTENT_LEADER


def test_follower_times_out_after_leak() -> None:
    node = make_node()
    follow(node, "n1", now=0)
    hb = node.config.heart_beat_time_interval_ms
    node.tick(hb * node.config.max_heart_beat_leak)
    assert node.role == Role.FOLLOWER
    node.tick(hb * node.config.max_heart_beat_leak + 1)
    assert node.role == Role.CANDIDATE


def answer_heartbeats(node: RaftNode, now: int, codes: list[ResponseCode], term: int | None = None) -> None:
    out = node.tick(now)
    reqs = sent(out, HeartBeatRequest)
    assert reqs
    for req, code in zip(reqs, codes, strict=False):
        resp = HeartBeatResponse(code=code, term=req.term if term is None else term)
        req.base_reply(resp)
        node.step(now, resp)


def test_leader_keeps_role_with_quorum_of_heartbeats() -> None:
    node = make_node()
    elect(node)
    hb = node.config.heart_beat_time_interval_ms
    answer_heartbeats(node, 10 * hb, [ResponseCode.SUCCESS])
    assert node.is_leader and node.elector.last_succ_heart_beat_time == 10 * hb


def test_leader_steps_down_after_leak_without_quorum() -> None:
    node = make_node()
    elect(node)
    hb = node.config.heart_beat_time_interval_ms
    now = 0
    while node.is_leader and now < 20 * hb:
        now += hb + 1
        out = node.tick(now)
        for req in sent(out, HeartBeatRequest):
            resp = HeartBeatResponse(code=ResponseCode.NETWORK_ERROR)
            req.base_reply(resp)
            node.step(now, resp)
    assert node.role == Role.CANDIDATE
    assert now > node.config.max_heart_beat_leak * hb


def test_leader_steps_down_on_inconsistent_leader() -> None:
    node = make_node()
    elect(node)
    answer_heartbeats(node, 1000, [ResponseCode.INCONSISTENT_LEADER, ResponseCode.INCONSISTENT_LEADER])
    assert node.role == Role.CANDIDATE


def test_not_ready_quorum_resends_at_once() -> None:
    node = make_node()
    elect(node)
    answer_heartbeats(node, 1000, [ResponseCode.TERM_NOT_READY, ResponseCode.NETWORK_ERROR])
    assert node.is_leader and node.elector.last_send_heart_beat_time == NEVER


def test_larger_term_in_heartbeat_answer_ends_leadership() -> None:
    node = make_node()
    elect(node)
    answer_heartbeats(node, 1000, [ResponseCode.EXPIRED_TERM, ResponseCode.SUCCESS], term=6)
    assert node.role == Role.CANDIDATE and node.ms.known_max_term_in_group == 6
    node.tick(1010)
    assert node.term == 6
