"""Messages on the wire, MemberState, the currterm file, and RaftNode's node-level features."""

from __future__ import annotations

import os
import random
from pathlib import Path

import msgpack
import pytest
from raft_helpers import elect, flush, follow, make_node, sent, to_node
from sim import SIM_TIMINGS, SimParams, Simulation, sim_config

from dledger.codes import ResponseCode
from dledger.errors import DLedgerError
from dledger.raft.effects import ReadDone, RoleChanged, Send, TransferDone
from dledger.raft.member_state import MemberState, MemoryTermStore, Role
from dledger.raft.messages import (
    MESSAGE_TYPES,
    AppendEntryResponse,
    HeartBeatRequest,
    HeartBeatResponse,
    LeadershipTransferRequest,
    PushEntryRequest,
    PushType,
    VoteRequest,
    VoteResponse,
    VoteResult,
    message_from_wire,
)
from dledger.raft.node import RaftNode
from dledger.store.entry import Entry
from dledger.store.memory import MemoryStore
from dledger.term_file import FileTermStore

# --- messages ---------------------------------------------------------------------------------


def test_every_message_round_trips_through_msgpack() -> None:
    samples = {
        "PushEntryRequest": PushEntryRequest(
            group="g",
            remote_id="n1",
            local_id="n0",
            leader_id="n0",
            term=3,
            req_id=9,
            type=PushType.TRUNCATE,
            commit_index=4,
            entries=[Entry(index=5, term=3, pos=100, body=b"\x00\xff", body_crc=7)],
        ),
        "VoteResponse": VoteResponse(term=2, vote_result=VoteResult.REJECT_TAKING_LEADERSHIP),
        "AppendEntryResponse": AppendEntryResponse(index=3, pos=10, positions=[0, 10]),
    }
    for name, cls in MESSAGE_TYPES.items():
        msg = samples.get(name, cls(group="g", term=1, req_id=2, code=ResponseCode.EXPIRED_TERM))
        wire = msgpack.unpackb(msgpack.packb(msg.to_wire(), use_bin_type=True), raw=False)
        back = message_from_wire(wire)
        assert back == msg, name
        assert type(back) is cls


def test_unknown_wire_type_is_refused() -> None:
    with pytest.raises(ValueError):
        message_from_wire({"_type": "Nope"})


def test_enums_keep_dledger_order() -> None:
    assert [v.name for v in PushType] == ["APPEND", "COMMIT", "COMPARE", "TRUNCATE"]
    assert VoteResult.REJECT_TAKING_LEADERSHIP == 11 and VoteResult.UNKNOWN == 0


# --- member state -----------------------------------------------------------------------------


def test_quorum_and_next_term() -> None:
    ts = MemoryTermStore(4, "n1")
    ms = MemberState(sim_config("n0", ["n0", "n1", "n2", "n3"]), ts)
    assert (ms.curr_term, ms.curr_vote_for, ms.role) == (4, "n1", Role.CANDIDATE)
    assert not ms.is_quorum(2) and ms.is_quorum(3)
    assert ms.next_term() == 5 and (ts.term, ts.vote_for) == (5, None)
    ms.change_to_candidate(9)
    assert ms.curr_term == 5 and ms.next_term() == 9
    ms.change_to_follower(9, "n2")
    with pytest.raises(DLedgerError) as e:
        ms.next_term()
    assert e.value.code == ResponseCode.ILLEGAL_MEMBER_STATE


def test_self_must_be_a_peer() -> None:
    with pytest.raises(ValueError):
        MemberState(sim_config("n5", ["n0", "n1"]), MemoryTermStore())


# --- currterm file ----------------------------------------------------------------------------


def test_term_file_round_trip_and_format(tmp_path: Path) -> None:
    ts = FileTermStore(tmp_path)
    assert ts.load() == (0, None)
    ts.save(7, "n2")
    assert (tmp_path / "currterm").read_text() == "currTerm=7\nvoteLeader=n2\n"
    assert FileTermStore(tmp_path).load() == (7, "n2")
    ts.save(8, None)
    assert FileTermStore(tmp_path).load() == (8, None)
    assert os.listdir(tmp_path) == ["currterm"]


def test_term_file_reads_java_properties(tmp_path: Path) -> None:
    (tmp_path / "currterm").write_text("#Tue Jan 02 10:00:00 CST 2024\ncurrTerm=12\nvoteLeader=\n")
    assert FileTermStore(tmp_path).load() == (12, None)


def test_node_restarts_with_its_vote(tmp_path: Path) -> None:
    node = RaftNode(sim_config("n0", ["n0", "n1", "n2"]), MemoryStore(), FileTermStore(tmp_path), random.Random(1))
    node.tick(0)  # votes for itself in term 0
    again = RaftNode(sim_config("n0", ["n0", "n1", "n2"]), MemoryStore(), FileTermStore(tmp_path), random.Random(1))
    assert (again.term, again.ms.curr_vote_for) == (0, "n0")


# --- node -------------------------------------------------------------------------------------


def test_apply_delivers_committed_entries_in_order() -> None:
    seen: list[int] = []
    node = RaftNode(
        sim_config("n0", ["n0"]),
        MemoryStore(),
        MemoryTermStore(),
        random.Random(1),
        timings=SIM_TIMINGS,
        apply=lambda e: seen.append(e.index),
    )
    node.tick(0)
    node.propose(1, [b"a", b"b"])
    node.propose(2, [b"c"])
    flush(node, node.drain(), 2)
    assert seen == [0, 1, 2] and node.applied_index == 2


def answer_round(node: RaftNode, out: list, now: int) -> list:
    res = []
    for hb in sent(out, HeartBeatRequest):
        r = HeartBeatResponse()
        hb.base_reply(r)
        res += node.step(now, r)
    return res


def test_read_index() -> None:
    node = make_node()
    h = node.read_index(0)
    assert [o.code for o in node.drain() if isinstance(o, ReadDone) and o.handle == h] == [ResponseCode.NOT_LEADER]
    elect(node)
    node.propose(0, [b"a"])
    flush(node, node.drain())
    node.replicator.water_marks.update({"n1": 0})
    node.replicator.check_quorum()
    assert node.committed_index == 0
    h = node.read_index(1)
    out = node.drain()
    assert not [o for o in out if isinstance(o, ReadDone)]  # waits for a fresh heartbeat quorum
    done = [o for o in answer_round(node, out, 2) if isinstance(o, ReadDone)]
    assert [(d.handle, d.code, d.read_index) for d in done] == [(h, ResponseCode.SUCCESS, 0)]


def test_read_index_before_a_commit_of_this_leadership() -> None:
    node = make_node(store=_store(3))
    elect(node)
    h = node.read_index(1)
    (d,) = [o for o in node.drain() if isinstance(o, ReadDone)]
    assert (d.handle, d.code) == (h, ResponseCode.LEADER_NOT_READY)


def _store(n: int) -> MemoryStore:
    st = MemoryStore()
    for _ in range(n):
        st.append_as_leader(b"x", 0)
    return st


def test_bad_routing() -> None:
    """DLedgerServer's checks: a message for another group or member is answered so."""
    node = make_node()
    bad = to_node(node, VoteRequest(term=5, ledger_end_index=-1, ledger_end_term=-1, req_id=3), "n1")
    bad.group = "nope"
    (out,) = node.step(0, bad)
    assert isinstance(out, Send) and out.msg.code == ResponseCode.UNKNOWN_GROUP and out.msg.req_id == 3
    bad = to_node(node, VoteRequest(term=5, ledger_end_index=-1, ledger_end_term=-1, req_id=4), "n1")
    bad.remote_id = "n7"
    (out,) = node.step(0, bad)
    assert isinstance(out, Send) and out.msg.code == ResponseCode.UNKNOWN_MEMBER and out.msg.req_id == 4
    assert node.term == 0 and node.ms.curr_vote_for is None


def test_leadership_transfer_in_a_calm_group() -> None:
    sim = Simulation(5, SimParams(n=3, steps=0, drop=0, dup=0))

    def settled() -> bool:
        ld = sim.leader()
        return ld is not None and all(sn.node is not None and sn.node.leader_id == ld.id for sn in sim.nodes)

    # The transferee checks that the request comes from its own leader.
    assert sim.run_until(settled, 5_000)
    leader = sim.leader()
    assert leader is not None and leader.node is not None
    target = next(i for i in sim.ids if i != leader.id)
    results: list[TransferDone] = []
    h = leader.node.transfer_leadership(sim.now, target)
    orig = sim._carry_out

    def carry(sn, out):
        results.extend(o for o in out if isinstance(o, TransferDone) and o.handle == h)
        orig(sn, out)

    sim._carry_out = carry
    sim._emit(leader, leader.node.drain())
    assert sim.run_until(lambda: bool(results), 5_000)
    assert results[0].response.code == ResponseCode.SUCCESS
    new = sim.leader()
    assert new is not None and new.id == target


def test_transfer_refusals() -> None:
    node = make_node()
    node.transfer_leadership(0, "n1")
    (d,) = [o for o in node.drain() if isinstance(o, TransferDone)]
    assert d.response.code == ResponseCode.NOT_LEADER
    elect(node)
    node.transfer_leadership(0, "n9")
    node.transfer_leadership(0, "n1")
    node.transfer_leadership(0, "n2")
    codes = [o.response.code for o in node.drain() if isinstance(o, TransferDone)]
    assert codes == [ResponseCode.UNKNOWN_MEMBER, ResponseCode.LEADER_TRANSFERRING]
    assert node.ms.transferee == "n1"
    node.tick(node.core.timings.transfer_wait_ms + 1)
    assert node.ms.transferee is None


def test_take_leadership_refusals() -> None:
    node = make_node()
    follow(node, "n1")
    req = to_node(node, LeadershipTransferRequest(term=5, transfer_id="n1", transferee_id="n0", leader_id="n1"), "n1")
    assert sent(node.step(0, req), object)[0].code == ResponseCode.INCONSISTENT_TERM
    req = to_node(node, LeadershipTransferRequest(term=0, transfer_id="n2", transferee_id="n0", leader_id="n2"), "n2")
    assert sent(node.step(0, req), object)[0].code == ResponseCode.INCONSISTENT_LEADER


def test_role_changes_are_reported() -> None:
    node = make_node()
    out = elect(node)
    assert [(o.term, o.role) for o in out if isinstance(o, RoleChanged)] == [(0, Role.LEADER)]


@pytest.mark.parametrize(("voted_for", "stands_in"), [("n0", 6), ("n1", 5), (None, 5)])
def test_a_restarted_member_does_not_stand_again_in_a_term_it_voted_for_itself(
    voted_for: str | None, stands_in: int
) -> None:
    # It may have led term 5 and lost unflushed entries its pushes had already spread:
    # leading term 5 again could give one (index, term) two different entries.
    node = make_node(term_store=MemoryTermStore(5, voted_for))
    reqs: list[VoteRequest] = []
    for now in range(0, 2000, 10):
        reqs = sent(node.tick(now), VoteRequest)
        if reqs:
            break
    assert reqs and {r.term for r in reqs} == {stands_in}
