"""Replication rules of DLedgerEntryPusher: push types on both sides, quorum median, client completions."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import pytest
from raft_helpers import elect, flush, follow, make_node, one, sent, to_node
from sim import SIM_TIMINGS

from dledger.codes import ResponseCode
from dledger.raft.effects import AppendDone, Flush, Output, Send, TransferDone, is_early
from dledger.raft.member_state import MemoryTermStore, Role
from dledger.raft.messages import (
    HeartBeatRequest,
    HeartBeatResponse,
    LeadershipTransferRequest,
    PushEntryRequest,
    PushEntryResponse,
    PushType,
    VoteRequest,
)
from dledger.raft.node import RaftNode
from dledger.raft.replicator import Quota
from dledger.store.entry import Entry
from dledger.store.memory import MemoryStore


def entries(terms: list[int], body: bytes = b"x") -> list[Entry]:
    st = MemoryStore()
    return [st.append_as_leader(body + bytes([i]), t) for i, t in enumerate(terms)]


def store_with(es: list[Entry]) -> MemoryStore:
    st = MemoryStore()
    for e in es:
        st.append_as_follower(e)
    return st


def answer(
    node: RaftNode, req: PushEntryRequest, code: ResponseCode, begin: int, end: int, now: int = 0
) -> list[Output]:
    resp = PushEntryResponse(code=code, term=req.term, index=req.last_index, begin_index=begin, end_index=end)
    req.base_reply(resp)
    return node.step(now, resp)


def done(out: list[Output]) -> list[AppendDone]:
    return [o for o in out if isinstance(o, AppendDone)]


# --- leader side ------------------------------------------------------------------------------


def leader_in_append_state(n: int = 3, **overrides: object) -> tuple[RaftNode, list[Output]]:
    """A leader of an empty log whose followers are matched at index 0 after one append."""
    node = make_node(n=n, **overrides)
    elect(node)
    node.propose(0, [b"a"])
    out = node.drain()
    compares = sent(out, PushEntryRequest)
    assert {c.type for c in compares} == {PushType.COMPARE} and len(compares) == n - 1
    for c in compares:
        out2 = answer(node, c, ResponseCode.INCONSISTENT_STATE, -1, -1)
        t = one(out2, PushEntryRequest)
        assert t.type == PushType.TRUNCATE and t.first_index == 0
        out += out2 + answer(node, t, ResponseCode.SUCCESS, 0, 0)
    return node, out


def test_compare_truncate_append_commits_first_entry() -> None:
    node, out = leader_in_append_state()
    (d,) = done(out)
    assert d.response.code == ResponseCode.SUCCESS and d.response.index == 0 and d.response.pos == 0
    assert node.committed_index == 0
    for d_ in node.replicator.dispatchers.values():
        assert d_.type == PushType.APPEND and d_.write_index == 1


def test_batch_push_sends_entries_in_one_request() -> None:
    node, _ = leader_in_append_state()
    node.propose(1, [b"b", b"c", b"d"])
    pushes = sent(node.drain(), PushEntryRequest, to="n1")
    assert len(pushes) == 1 and [e.index for e in pushes[0].entry_list()] == [1, 2, 3]
    assert pushes[0].commit_index == 0


def test_single_push_mode_sends_one_entry_per_request() -> None:
    node, _ = leader_in_append_state(is_enable_batch_push=False)
    node.propose(1, [b"b", b"c"])
    pushes = sent(node.drain(), PushEntryRequest, to="n1")
    assert [p.first_index for p in pushes] == [1, 2]


def test_ack_advances_watermark_and_completes_append() -> None:
    node, _ = leader_in_append_state()
    h = node.propose(1, [b"b", b"c"])
    written = node.drain()
    push = one(written, PushEntryRequest, to="n1")
    out = answer(node, push, ResponseCode.SUCCESS, 0, 2, now=2)
    # One follower's durable copy is not a majority of three: the leader's own copy counts
    # only once its flush is reported.
    assert not done(out) and node.committed_index == 0
    (d,) = done(flush(node, written, now=3))
    assert d.handle == h and d.response.code == ResponseCode.SUCCESS
    assert d.response.index == 2 and len(d.response.positions) == 2
    assert node.replicator.water_marks["n1"] == 2 and node.committed_index == 2


def test_pushes_go_before_the_leaders_flush_and_acks_after_the_followers() -> None:
    node, _ = leader_in_append_state()
    node.propose(1, [b"b"])
    written = node.drain()
    assert isinstance(written[0], Flush)
    pushes = [o for o in written if isinstance(o, Send) and isinstance(o.msg, PushEntryRequest)]
    assert len(pushes) == 2 and all(o.early and is_early(o) for o in pushes)
    # Both followers durable: a majority without the leader's copy, so the append is done
    # before the leader's own flush is.
    out = []
    for p in pushes:
        assert isinstance(p.msg, PushEntryRequest)
        out += answer(node, p.msg, ResponseCode.SUCCESS, 0, 1, now=2)
    (d,) = done(out)
    assert d.response.code == ResponseCode.SUCCESS and node.committed_index == 1 and is_early(d)
    # A follower's answer speaks for its flush: it waits for it.
    f = follower()
    acked = push(f, PushType.APPEND, entries([0]))
    assert isinstance(acked[0], Flush)
    assert not [o for o in acked if is_early(o)]


def test_a_flush_reports_no_further_than_a_truncate_left_the_log() -> None:
    f = follower([0, 0, 0])
    flush_before = f.core.new_flush()  # a flush in flight covering entries 0..2
    push(f, PushType.TRUNCATE, entries([0, 0])[1:])  # the leader cuts us back to entry 1
    assert f.store.ledger_end_index == 1
    f.flushed(1, flush_before.token)
    assert f.core.durable_index <= 1


def test_unacked_push_is_retried_after_max_push_timeout() -> None:
    node, _ = leader_in_append_state()
    node.propose(1, [b"b"])
    first = one(node.drain(), PushEntryRequest, to="n1")

    def appends(out: list[Output]) -> list[PushEntryRequest]:
        return [p for p in sent(out, PushEntryRequest, to="n1") if p.type == PushType.APPEND]

    assert not appends(node.tick(1 + node.config.max_push_time_out_ms))
    (retry,) = appends(node.tick(2 + node.config.max_push_time_out_ms))
    assert retry.first_index == first.first_index
    assert retry.req_id != first.req_id


def test_reconnect_with_a_push_in_flight_compares_at_once() -> None:
    # A follower restarted: the push sent to it before is lost. On the new connection the
    # leader compares now (and says who leads, so a restarted member serves the compare),
    # instead of waiting out max_push_time_out_ms to resend.
    node, _ = leader_in_append_state()
    node.propose(1, [b"b"])
    one(node.drain(), PushEntryRequest, to="n1")
    out = node.peer_connected(2, "n1")
    compare = one(out, PushEntryRequest, to="n1")
    assert compare.type == PushType.COMPARE and compare.first_index == 1
    assert sent(out, HeartBeatRequest, to="n1")
    assert not sent(out, PushEntryRequest, to="n2")
    # Its answer resumes the appends from where the follower's log stands.
    out = answer(node, compare, ResponseCode.INCONSISTENT_STATE, 0, 0, now=3)
    compare = one(out, PushEntryRequest, to="n1")
    assert compare.type == PushType.COMPARE and compare.first_index == 0
    out = answer(node, compare, ResponseCode.SUCCESS, 0, 0, now=4)
    push = one(out, PushEntryRequest, to="n1")
    assert push.type == PushType.APPEND and push.first_index == 1


def test_reconnect_resends_a_lost_compare_at_once() -> None:
    node = make_node(n=3)
    elect(node)
    node.propose(0, [b"a"])
    lost = one(node.drain(), PushEntryRequest, to="n1")
    assert lost.type == PushType.COMPARE
    # Without the reconnect it would wait compare_wait_ms (3 s) for the answer.
    again = one(node.peer_connected(1, "n1"), PushEntryRequest, to="n1")
    assert again.type == PushType.COMPARE and again.req_id != lost.req_id


def test_reconnect_with_nothing_in_flight_changes_nothing() -> None:
    node, _ = leader_in_append_state()
    out = node.peer_connected(1, "n1")
    assert not sent(out, PushEntryRequest) and not sent(out, HeartBeatRequest)
    assert node.replicator.dispatchers["n1"].type == PushType.APPEND
    # Nor on a follower.
    f = make_node(n=3, self_id="n1")
    assert f.peer_connected(1, "n0") == []


def test_inconsistent_append_goes_back_to_compare() -> None:
    node, _ = leader_in_append_state()
    node.propose(1, [b"b"])
    push = one(node.drain(), PushEntryRequest, to="n1")
    out = answer(node, push, ResponseCode.INCONSISTENT_STATE, 0, 0, now=1)
    compare = one(out, PushEntryRequest, to="n1")
    assert compare.type == PushType.COMPARE and compare.first_index == 1
    assert node.replicator.dispatchers["n1"].type == PushType.COMPARE


def test_compare_search_walks_down_then_appends() -> None:
    # Leader holds 0..3 of term 0 (re-elected in term 1); the follower matches up to 1.
    es = entries([0, 0, 0, 0])
    node = make_node(store=store_with(es), term_store=MemoryTermStore(1))
    out = elect(node)
    c = one(out, PushEntryRequest, to="n1")
    assert (c.type, c.first_index) == (PushType.COMPARE, 3)
    c = one(answer(node, c, ResponseCode.INCONSISTENT_STATE, 0, 1), PushEntryRequest, to="n1")
    assert c.first_index == 1  # beyond the follower's end: jump to it
    out = answer(node, c, ResponseCode.SUCCESS, 0, 1)
    d = node.replicator.dispatchers["n1"]
    assert d.type == PushType.APPEND and node.replicator.water_marks["n1"] == 1
    push = one(out, PushEntryRequest, to="n1")
    assert push.type == PushType.APPEND and [e.index for e in push.entry_list()] == [2, 3]


def test_compare_never_truncates_below_a_match() -> None:
    # The follower matched at 1 but now reports end 3 (our pushes landed meanwhile): search up.
    es = entries([0, 0, 0, 0])
    node = make_node(store=store_with(es), term_store=MemoryTermStore(1))
    c = one(elect(node), PushEntryRequest, to="n1")
    c = one(answer(node, c, ResponseCode.INCONSISTENT_STATE, 0, 1), PushEntryRequest, to="n1")
    c = one(answer(node, c, ResponseCode.SUCCESS, 0, 3), PushEntryRequest, to="n1")
    assert c.type == PushType.COMPARE and c.first_index > 1


def test_mismatch_leads_to_truncate_at_last_match() -> None:
    es = entries([0, 0, 0])
    node = make_node(store=store_with(es), term_store=MemoryTermStore(1))
    c = one(elect(node), PushEntryRequest, to="n1")
    assert c.first_index == 2
    c = one(answer(node, c, ResponseCode.INCONSISTENT_STATE, 0, 2), PushEntryRequest, to="n1")
    assert (c.type, c.first_index) == (PushType.COMPARE, 1)
    t = one(answer(node, c, ResponseCode.SUCCESS, 0, 2), PushEntryRequest, to="n1")
    assert (t.type, t.first_index) == (PushType.TRUNCATE, 1)
    answer(node, t, ResponseCode.SUCCESS, 0, 1)
    assert node.replicator.dispatchers["n1"].type == PushType.APPEND


def test_commit_push_when_idle() -> None:
    node, _ = leader_in_append_state()
    interval = (
        node.timings.commit_push_interval_ms if hasattr(node, "timings") else node.core.timings.commit_push_interval_ms
    )
    pushes = sent(node.tick(interval + 1), PushEntryRequest, to="n1")
    assert [p.type for p in pushes] == [PushType.COMMIT] and pushes[0].commit_index == 0 and not pushes[0].entries


def test_wait_quorum_ack_timeout() -> None:
    node, _ = leader_in_append_state()
    h = node.propose(1, [b"b"])
    node.drain()
    wait = node.config.max_wait_ack_time_ms
    assert not done(node.tick(wait))
    (d,) = done(node.tick(1 + wait))
    assert d.handle == h and d.response.code == ResponseCode.WAIT_QUORUM_ACK_TIMEOUT and d.response.index == 1


def test_term_changed_on_step_down() -> None:
    node, _ = leader_in_append_state()
    h = node.propose(1, [b"b"])
    node.drain()
    vote = to_node(node, VoteRequest(leader_id="n1", term=9, ledger_end_index=5, ledger_end_term=5), "n1")
    out = node.step(2, vote)
    assert node.role == Role.CANDIDATE
    (d,) = done(out)
    assert d.handle == h and d.response.code == ResponseCode.TERM_CHANGED


def test_append_refusals() -> None:
    follower = make_node()
    h = follower.propose(0, [b"x"])
    assert done(follower.drain())[0].response.code == ResponseCode.NOT_LEADER and h
    node, _ = leader_in_append_state(max_pending_requests_num=0)
    node.propose(1, [b"b"])
    node.drain()
    node.propose(1, [b"c"])
    assert done(node.drain())[0].response.code == ResponseCode.LEADER_PENDING_FULL
    node, _ = leader_in_append_state()
    node.propose(1, [])
    assert done(node.drain())[0].response.code == ResponseCode.REQUEST_WITH_EMPTY_BODYS
    node.ms.transferee = "n1"
    node.propose(1, [b"b"])
    assert done(node.drain())[0].response.code == ResponseCode.LEADER_TRANSFERRING


# --- quorum ack checker -----------------------------------------------------------------------


def test_quorum_index_is_the_median_including_the_leader() -> None:
    # QuorumAckChecker's example: watermarks [3, 3, 2, 1, 1] commit index 2.
    node = make_node(n=5)
    elect(node)
    node.propose(0, [b"a", b"b", b"c", b"d"])
    node.drain()
    rep = node.replicator
    rep.water_marks.update({"n0": 3, "n1": 3, "n2": 2, "n3": 1, "n4": 1})
    rep.check_quorum()
    assert node.committed_index == 2


def test_old_term_entries_need_current_term_or_every_member() -> None:
    # Raft Figure 8: the leader of term 4 must not commit an entry of term 2 by counting.
    es = entries([1, 2])
    node = make_node(store=store_with(es), term_store=MemoryTermStore(4))
    elect(node)
    rep = node.replicator
    rep.water_marks.update({"n0": 1, "n1": 1, "n2": -1})
    rep.check_quorum()
    assert node.committed_index == -1
    rep.water_marks["n2"] = 1  # every member holds it: nothing can replace it
    rep.check_quorum()
    assert node.committed_index == 1
    node.propose(0, [b"new"])
    node.drain()
    rep.water_marks.update({"n0": 2, "n1": 2})
    rep.check_quorum()
    assert node.committed_index == 2


def test_quota() -> None:
    q = Quota(100)
    q.sample(60, 1_000)
    assert not q.validate_now(1_500)
    q.sample(60, 1_900)
    assert q.validate_now(1_999)
    assert Quota.left_now(1_900) == 100
    assert not q.validate_now(2_000)  # a new second, a new bucket
    q.sample(10, 6_000)  # the same bucket five seconds later starts over
    assert not q.validate_now(6_000)


def throttled_pair(**timings: Any) -> RaftNode:
    """The leader of two, its follower matched at entry 0, pushes paced by a one-byte quota
    from the first byte (``timings`` replace SIM_TIMINGS')."""
    node = make_node(
        n=2, timings=dataclasses.replace(SIM_TIMINGS, **timings), peer_push_throttle_point=1, peer_push_quota=1
    )
    elect(node)
    node.propose(0, [b"a"])
    (c,) = sent(node.drain(), PushEntryRequest)
    (t,) = sent(answer(node, c, ResponseCode.INCONSISTENT_STATE, -1, -1), PushEntryRequest)
    answer(node, t, ResponseCode.SUCCESS, 0, 0)
    return node


def test_push_throttle_is_a_timing_switch() -> None:
    """checkQuotaAndWait paces pushes to a follower far behind (in entries and in bytes) by
    the quota; the timings can turn it off, as the node runtime does for a memory store."""
    paused = {}
    for on in (True, False):
        node = throttled_pair(push_throttle=on, dispatcher_max_pending_size=1)
        node.propose(1, [b"b", b"c", b"d"])
        assert [p.type for p in sent(node.drain(), PushEntryRequest)] == [PushType.APPEND]
        paused[on] = node.replicator.dispatchers["n1"].throttle_until > 1
    assert paused == {True: True, False: False}


# --- follower side ----------------------------------------------------------------------------


def follower(terms_held: list[int] | None = None, leader: str = "n0") -> RaftNode:
    store = store_with(entries(terms_held)) if terms_held else MemoryStore()
    node = make_node("n1", store=store)
    follow(node, leader)
    return node


def push(
    node: RaftNode,
    type_: PushType,
    es: list[Entry],
    commit: int = -1,
    term: int = 0,
    leader: str = "n0",
    req_id: int = 10,
    now: int = 0,
) -> list[Output]:
    req = PushEntryRequest(type=type_, entries=es, commit_index=commit, term=term, leader_id=leader, req_id=req_id)
    return node.step(now, to_node(node, req, leader))


def test_append_at_end_plus_one_then_commit() -> None:
    node = follower()
    es = entries([0, 0])
    out = push(node, PushType.APPEND, es[:1], commit=0)
    assert isinstance(out[0], Flush)
    r = one(out, PushEntryResponse)
    assert (r.code, r.index, r.end_index) == (ResponseCode.SUCCESS, 0, 0)
    assert node.committed_index == 0


def test_out_of_order_appends_are_buffered() -> None:
    node = follower()
    es = entries([0, 0, 0])
    assert not sent(push(node, PushType.APPEND, es[1:], req_id=11), PushEntryResponse)
    out = push(node, PushType.APPEND, es[:1], req_id=12)
    assert [r.index for r in sent(out, PushEntryResponse)] == [0, 2]
    assert node.store.ledger_end_index == 2


def test_repeated_push() -> None:
    node = follower()
    es = entries([0, 0, 0])
    push(node, PushType.APPEND, es[2:], req_id=11)
    r = one(push(node, PushType.APPEND, es[2:], req_id=12), PushEntryResponse)
    assert r.code == ResponseCode.REPEATED_PUSH


def test_a_leader_repeating_a_buffered_push_is_warned_of_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    # A push ahead of a gap stays buffered (until the fast-forward check answers it); a resend
    # of it meanwhile answers REPEATED_PUSH, and the "[MONITOR]... has already existed" warning
    # came once per resend.
    node = follower()
    caplog.set_level(logging.WARNING, logger="dledger.raft.handler")
    es = entries([0, 0, 0])
    repeated_at: list[int] = []
    for k, now in enumerate(range(0, 100_000, 50)):
        out = follow(node, "n0", now)
        out += push(node, PushType.APPEND, es[2:], req_id=20 + 2 * k, now=now)
        out += push(node, PushType.APPEND, es[2:], req_id=21 + 2 * k, now=now)  # the resend
        repeated_at += [now for r in sent(out, PushEntryResponse) if r.code == ResponseCode.REPEATED_PUSH]
    assert len(repeated_at) > 1000
    warned = [r.getMessage() for r in caplog.records if "has already existed" in r.getMessage()]
    assert len(warned) == 2, warned[:3]
    assert "more since the last such warning" not in warned[0]
    held = int(warned[1].split("(")[1].split()[0])
    first = repeated_at[0]
    assert held == sum(1 for t in repeated_at if first < t < first + 60_000)


def test_compare() -> None:
    es = entries([0, 0])
    node = follower([0, 0])
    assert one(push(node, PushType.COMPARE, es[1:]), PushEntryResponse).code == ResponseCode.SUCCESS
    other = entries([0, 0], body=b"y")
    r = one(push(node, PushType.COMPARE, other[1:], req_id=11), PushEntryResponse)
    assert (r.code, r.begin_index, r.end_index) == (ResponseCode.INCONSISTENT_STATE, 0, 1)
    more = entries([0, 0, 0, 0])
    assert (
        one(push(node, PushType.COMPARE, more[3:], req_id=12), PushEntryResponse).code
        == ResponseCode.INCONSISTENT_STATE
    )


def test_compare_clears_buffered_appends() -> None:
    node = follower([0])
    es = entries([0, 0, 0])
    push(node, PushType.APPEND, es[2:], req_id=11)
    assert node.handler.write_request_map
    push(node, PushType.COMPARE, es[:1], req_id=12)
    assert not node.handler.write_request_map


def test_truncate_replaces_stale_tail() -> None:
    node = follower([0, 0, 0])
    ours = entries([0, 1], body=b"L")
    r = one(push(node, PushType.TRUNCATE, ours[1:], commit=1, term=0), PushEntryResponse)
    assert (r.code, r.end_index) == (ResponseCode.SUCCESS, 1)
    assert node.store.get(1).same_as(ours[1]) and node.committed_index == 1


def test_truncate_keeps_committed_entries() -> None:
    es = entries([0, 0, 0])
    node = follower([0, 0, 0])
    node.store.update_committed_index(0, 2)
    r = one(push(node, PushType.TRUNCATE, es[1:2]), PushEntryResponse)
    assert r.code == ResponseCode.SUCCESS and node.store.ledger_end_index == 2


def test_replayed_truncate_is_fenced() -> None:
    node = follower()
    es = entries([0, 0, 0])
    push(node, PushType.TRUNCATE, es[:1], req_id=20)
    push(node, PushType.APPEND, es[1:], req_id=21)
    r = one(push(node, PushType.TRUNCATE, es[:1], req_id=20), PushEntryResponse)
    assert r.code == ResponseCode.INCONSISTENT_STATE and node.store.ledger_end_index == 2


def test_stale_append_after_compare_is_fenced() -> None:
    node = follower([0])
    es = entries([0, 0])
    push(node, PushType.COMPARE, es[:1], req_id=30)
    r = one(push(node, PushType.APPEND, es[1:], req_id=29), PushEntryResponse)
    assert r.code == ResponseCode.INCONSISTENT_STATE and node.store.ledger_end_index == 0


def test_commit_push() -> None:
    node = follower([0, 0])
    r = one(push(node, PushType.COMMIT, [], commit=1), PushEntryResponse)
    assert r.code == ResponseCode.SUCCESS and r.index == -1 and node.committed_index == 1


def test_pushes_from_another_leader_or_term_are_refused() -> None:
    node = follower()
    es = entries([0])
    r = one(push(node, PushType.APPEND, es, term=3), PushEntryResponse)
    assert r.code == ResponseCode.INCONSISTENT_STATE and node.store.ledger_end_index == -1
    r = one(push(node, PushType.COMPARE, es, leader="n2", req_id=11), PushEntryResponse)
    assert r.code == ResponseCode.INCONSISTENT_LEADER
    r = one(push(node, PushType.COMMIT, [], commit=0, leader="n2", req_id=12), PushEntryResponse)
    assert r.code == ResponseCode.UNKNOWN


def test_fast_forward_fails_a_stuck_push() -> None:
    node = follower()
    es = entries([0, 0, 0, 0])
    push(node, PushType.APPEND, es[3:], req_id=11, now=0)
    timings = node.core.timings
    assert not sent(node.tick(timings.push_future_timeout_ms - 1), PushEntryResponse)
    r = one(node.tick(timings.push_future_timeout_ms + timings.fast_forward_check_interval_ms), PushEntryResponse)
    assert (r.code, r.index) == (ResponseCode.INCONSISTENT_STATE, 3)


def test_fall_behind_push_is_acked() -> None:
    node = follower()
    es = entries([0])
    push(node, PushType.APPEND, es, req_id=11)
    push(node, PushType.APPEND, es, req_id=12, now=1)  # the leader missed our ack
    r = one(node.tick(1 + node.core.timings.fast_forward_check_interval_ms), PushEntryResponse)
    assert (r.code, r.index) == (ResponseCode.SUCCESS, 0)


def test_a_silent_follower_holds_at_most_max_pending_and_its_acks_free_the_front() -> None:
    node, _ = leader_in_append_state()
    node.core.timings = dataclasses.replace(node.core.timings, dispatcher_max_pending_size=4)

    def appends(out: list[Output], to: str) -> list[PushEntryRequest]:
        return [p for p in sent(out, PushEntryRequest, to=to) if p.type == PushType.APPEND]

    to_n2: list[PushEntryRequest] = []
    for k in range(8):
        node.propose(1, [b"%d" % k])
        out = node.drain()
        flush(node, out, now=1)
        to_n2 += appends(out, "n2")
        for p in appends(out, "n1"):
            answer(node, p, ResponseCode.SUCCESS, 0, p.last_index, now=1)
    d2 = node.replicator.dispatchers["n2"]
    assert len(to_n2) == 4 and len(d2.batch_pending_map) == 4  # stopped at the limit
    assert node.committed_index == 8  # n1 and the leader carry on
    # n2 answers its first two pushes: they leave the front of its map and pushes resume.
    out = []
    for p in to_n2[:2]:
        out += answer(node, p, ResponseCode.SUCCESS, 0, p.last_index, now=2)
    node.propose(2, [b"more"])
    out += node.drain()
    resumed = appends(out, "n2")
    assert resumed and resumed[0].first_index == to_n2[-1].last_index + 1
    assert to_n2[0].first_index not in d2.batch_pending_map and len(d2.batch_pending_map) <= 4


def test_transfer_answer_gets_its_own_wait_after_a_slow_catch_up() -> None:
    # The transferee caught up just before the leader's wait ran out: its answer (a vote round
    # away) still gets a whole wait, rather than the few ms left of the catch-up's.
    node, _ = leader_in_append_state()
    wait = node.core.timings.transfer_wait_ms
    node.propose(1, [b"b"])
    push = one(node.drain(), PushEntryRequest, to="n1")
    node.transfer_leadership(1, "n1")
    assert not sent(node.drain(), LeadershipTransferRequest)
    caught_up = wait - 10
    asked = sent(answer(node, push, ResponseCode.SUCCESS, 1, 1, now=caught_up), LeadershipTransferRequest, to="n1")
    assert len(asked) == 1
    late = [o for o in node.tick(wait + 10) if isinstance(o, TransferDone)]
    assert late == [] and node.ms.transferee == "n1"
    (d,) = [o for o in node.tick(caught_up + wait + 1) if isinstance(o, TransferDone)]
    assert d.response.code == ResponseCode.TIMEOUT
    assert "no answer from n1" in (d.response.reason or "")
    assert node.ms.transferee is None


# --- repeated conditions are logged once, with a count ------------------------------------------


def test_retries_to_silent_followers_are_warned_of_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    # Followers that answer heartbeats, never pushes: the leader retries every max_push_time_out_ms.
    node, _ = leader_in_append_state()
    caplog.set_level(logging.WARNING, logger="dledger.raft.replicator")
    node.propose(1, [b"b"])
    node.drain()
    now, retries = 1, 0
    while now < 90_000:
        now += node.config.max_push_time_out_ms + 1
        out = node.tick(now)
        retries += sum(p.type == PushType.APPEND for p in sent(out, PushEntryRequest))
        for hb in sent(out, HeartBeatRequest):
            resp = HeartBeatResponse(term=hb.term)
            hb.base_reply(resp)
            node.step(now, resp)
    assert node.is_leader and retries > 1000
    warned = [r.getMessage() for r in caplog.records if "Retry to push" in r.getMessage()]
    for peer in ("n1", "n2"):
        mine = [w for w in warned if w.startswith(f"[Push-{peer}]")]
        # At 0 s, 60 s: the second says how many were held back in between.
        assert len(mine) == 2, warned
        assert "more since the last such warning" not in mine[0]
        held = int(mine[1].split("(")[1].split()[0])
        assert 500 < held < retries


def test_a_leader_resending_what_we_hold_is_warned_of_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    node = follower([0, 0, 0])
    caplog.set_level(logging.WARNING, logger="dledger.raft.handler")
    es = entries([0, 0, 0])
    step = node.core.timings.fast_forward_check_interval_ms + 1
    answered_at: list[int] = []  # when each resend was acknowledged
    for k, now in enumerate(range(step, 100_000, step)):  # a resend of index 1 each check: its acks lost
        out = follow(node, "n0", now)  # the leader's heartbeat
        out += push(node, PushType.APPEND, es[1:2], req_id=20 + k, now=now)
        answers = sent(out, PushEntryResponse)
        assert all(a.code == ResponseCode.SUCCESS and a.index == 1 for a in answers), answers
        answered_at += [now] * len(answers)
    assert len(answered_at) > 1000
    warned = [r.getMessage() for r in caplog.records if "[PushFallBehind]" in r.getMessage()]
    assert len(warned) == 2, warned
    held = int(warned[1].split("(")[1].split()[0])
    first = answered_at[0]
    assert held == sum(1 for t in answered_at if first < t < first + 60_000)  # those in between
