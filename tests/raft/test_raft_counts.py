"""Every count-based rule of the consensus layer, checked where it turns: who makes a majority
(commits, votes, heartbeats) at every group size from 1 to 7, and the first request each limit
refuses. The expected values come from the definitions (a majority is more than half), not
from the formulas under test, so an off-by-one in any of them fails here."""

from __future__ import annotations

import dataclasses
import random

import pytest
from raft_helpers import ids, make_node, sent
from sim import sim_config
from test_raft_replication import answer, done, leader_in_append_state, throttled_pair

from dledger.codes import ResponseCode
from dledger.raft.effects import Flush, Output, ReadDone, TransferDone
from dledger.raft.member_state import MemberState, MemoryTermStore
from dledger.raft.messages import (
    HeartBeatRequest,
    HeartBeatResponse,
    PushEntryRequest,
    PushType,
    VoteRequest,
    VoteResponse,
    VoteResult,
)
from dledger.raft.node import RaftNode
from dledger.raft.replicator import quorum_water_mark

SIZES = range(1, 8)


def majority(members: int, n: int) -> bool:
    return 2 * members > n


# --- the two formulas -------------------------------------------------------------------------


@pytest.mark.parametrize("n", SIZES)
def test_is_quorum_is_more_than_half(n: int) -> None:
    ms = MemberState(sim_config("n0", ids(n)), MemoryTermStore())
    assert [ms.is_quorum(k) for k in range(n + 1)] == [majority(k, n) for k in range(n + 1)]


@pytest.mark.parametrize("n", SIZES)
def test_quorum_water_mark_needs_a_majority_holding_the_entry(n: int) -> None:
    for holders in range(n + 1):
        marks = [9] * holders + [2] * (n - holders)
        assert quorum_water_mark(marks) == (9 if majority(holders, n) else 2), (n, holders)


@pytest.mark.parametrize("n", SIZES)
def test_quorum_water_mark_is_the_highest_index_a_majority_holds(n: int) -> None:
    rng = random.Random(n)
    for _ in range(300):
        marks = sorted((rng.randrange(-1, 6) for _ in range(n)), reverse=True)
        held = max(x for x in marks if majority(sum(m >= x for m in marks), n))
        assert quorum_water_mark(marks) == held, marks


def test_even_groups_need_more_than_half() -> None:
    assert quorum_water_mark([3, 3, 1, 1]) == 1  # two of four are not a majority
    assert quorum_water_mark([3, 3, 3, 1]) == 3
    assert quorum_water_mark([3, 1]) == 1  # a leader of two never commits alone


# --- the rules, through a node ----------------------------------------------------------------


@pytest.mark.parametrize("n", range(2, 8))
def test_leader_commits_once_a_majority_holds_the_entry(n: int) -> None:
    node, _ = leader_in_append_state(n)
    node.propose(1, [b"x"])
    out = node.drain()
    for token in [o.token for o in out if isinstance(o, Flush)]:  # the leader's own copy
        out += node.flushed(1, token)
    assert node.committed_index == 0
    pushes = [p for p in sent(out, PushEntryRequest) if p.type == PushType.APPEND]
    assert len(pushes) == n - 1
    acked_at = []
    for followers, p in enumerate(pushes, start=1):
        acks = done(answer(node, p, ResponseCode.SUCCESS, 0, p.last_index, now=1))
        holders = followers + 1
        assert node.committed_index == (1 if majority(holders, n) else 0), (n, holders)
        acked_at += [holders] * len([a for a in acks if a.response.code == ResponseCode.SUCCESS])
    assert acked_at == [n // 2 + 1]  # the client hears back exactly when a majority holds it


@pytest.mark.parametrize("n", SIZES)
def test_candidate_leads_only_with_a_majority_of_votes(n: int) -> None:
    for accepts in range(n):  # from the others; the candidate's own vote makes one more
        node = make_node(n=n)
        reqs = sent(node.tick(0), VoteRequest)
        assert len(reqs) == n - 1
        for k, req in enumerate(reqs):
            result = VoteResult.ACCEPT if k < accepts else VoteResult.REJECT_ALREADY_VOTED
            resp = VoteResponse(term=req.term, vote_result=result)
            req.base_reply(resp)
            node.step(0, resp)
        assert node.is_leader == majority(accepts + 1, n), (n, accepts)


def _read_after_heartbeats(node: RaftNode, answered: int) -> list[int]:
    """Ask for a read-index read, let ``answered`` followers answer its heartbeat round, then
    let time pass; returns how the read ended."""
    h = node.read_index(1)
    out: list[Output] = node.drain()
    for hb in sent(out, HeartBeatRequest)[:answered]:
        r = HeartBeatResponse()
        hb.base_reply(r)
        out += node.step(1, r)
    out += node.tick(2 + node.config.max_wait_ack_time_ms)
    return [o.code for o in out if isinstance(o, ReadDone) and o.handle == h]


@pytest.mark.parametrize("n", range(2, 8))
def test_read_index_needs_a_heartbeat_majority(n: int) -> None:
    # A read is linearizable only if a majority still follows this leader: fewer answers
    # may mean another leader has been elected beside us.
    for answered in range(n):
        node, _ = leader_in_append_state(n)
        codes = _read_after_heartbeats(node, answered)
        assert len(codes) == 1
        assert (codes[0] == ResponseCode.SUCCESS) == majority(answered + 1, n), (n, answered, codes)


# --- limits: the first request refused --------------------------------------------------------


def test_pending_limit_refuses_the_one_past_max_pending_requests_num() -> None:
    # DLedger refuses when the pending map already holds more than maxPendingRequestsNum.
    limit = 3
    node, _ = leader_in_append_state(max_pending_requests_num=limit)
    codes = []
    for k in range(limit + 2):
        node.propose(1, [b"%d" % k])
        codes.append([d.response.code for d in done(node.drain())])
    assert codes == [[]] * (limit + 1) + [[ResponseCode.LEADER_PENDING_FULL]]


def test_single_push_holds_at_most_dispatcher_max_pending_per_follower() -> None:
    node, _ = leader_in_append_state(is_enable_batch_push=False)
    node.core.timings = dataclasses.replace(node.core.timings, dispatcher_max_pending_size=4)
    to_n2 = []
    for k in range(8):
        node.propose(1, [b"%d" % k])
        out = node.drain()
        to_n2 += [p for p in sent(out, PushEntryRequest, to="n2") if p.type == PushType.APPEND]
    assert len(to_n2) == 4 and len(node.replicator.dispatchers["n2"].pending_map) == 4


def _leader_with_n1_behind(behind: int, **overrides: object) -> RaftNode:
    """A leader of three whose log is ``behind`` entries past n1's watermark (n1 holds 0)."""
    node, _ = leader_in_append_state(**overrides)
    node.propose(1, [b"y"] * behind)
    node.drain()
    assert node.replicator.fall_behind("n1") == behind
    return node


def test_transfer_refused_from_max_leadership_transfer_wait_index_behind() -> None:
    limit = 3
    for behind, refused in ((limit - 1, False), (limit, True)):
        node = _leader_with_n1_behind(behind, max_leadership_transfer_wait_index=limit)
        h = node.transfer_leadership(1, "n1")
        codes = [o.response.code for o in node.drain() if isinstance(o, TransferDone) and o.handle == h]
        assert (codes == [ResponseCode.FALL_BEHIND_TOO_MUCH]) == refused, (behind, codes)
        assert (node.ms.transferee == "n1") == (not refused)


def test_preferred_leader_passes_over_a_member_max_leadership_transfer_wait_index_behind() -> None:
    # Preferred n1 then n2; n2 holds everything. n1 gets leadership only while it is less
    # than the limit behind; from the limit on, the leader moves on to n2.
    limit = 3
    for behind, chosen in ((limit - 1, "n1"), (limit, "n2")):
        node = _leader_with_n1_behind(behind, max_leadership_transfer_wait_index=limit, preferred_leader_ids="n1;n2")
        node.replicator.update_peer_water_mark(node.term, "n2", node.core.store.ledger_end_index)
        node.ms.peers_live_table.update(n1=True, n2=True)
        node.tick(2 + node.core.timings.preferred_leader_check_interval_ms)
        assert node.ms.transferee == chosen, behind


def test_push_throttle_starts_more_than_dispatcher_max_pending_size_behind() -> None:
    # checkQuotaAndWait: a push of an entry at most maxPendingSize behind the end goes unpaced.
    limit = 2
    paused = {}
    for behind in (limit, limit + 1):
        node = throttled_pair(push_throttle=True, dispatcher_max_pending_size=limit)
        node.propose(1, [b"b"] * (behind + 1))  # entries 1..behind+1: the push starts at 1
        (p,) = sent(node.drain(), PushEntryRequest)
        assert (p.first_index, node.core.store.ledger_end_index - p.first_index) == (1, behind)
        paused[behind] = node.replicator.dispatchers["n1"].throttle_until > 1
    assert paused == {limit: False, limit + 1: True}
