"""Small builders for unit tests of single nodes (the simulator covers whole groups)."""

from __future__ import annotations

import random
from typing import Any, TypeVar

from sim import SIM_TIMINGS, sim_config

from dledger.raft.effects import Flush, Output, Send
from dledger.raft.member_state import MemoryTermStore
from dledger.raft.messages import HeartBeatRequest, HeartBeatResponse, Message, VoteRequest, VoteResponse, VoteResult
from dledger.raft.node import RaftNode
from dledger.raft.timings import RaftTimings
from dledger.store.memory import MemoryStore

M = TypeVar("M", bound=Message)


def ids(n: int) -> list[str]:
    return [f"n{i}" for i in range(n)]


def make_node(
    self_id: str = "n0",
    n: int = 3,
    store: MemoryStore | None = None,
    term_store: MemoryTermStore | None = None,
    timings: RaftTimings = SIM_TIMINGS,
    **overrides: Any,
) -> RaftNode:
    return RaftNode(
        sim_config(self_id, ids(n), **overrides),
        store if store is not None else MemoryStore(),
        term_store if term_store is not None else MemoryTermStore(),
        random.Random(7),
        timings=timings,
        incarnation=1,
    )


def sent(out: list[Output], cls: type[M], to: str | None = None) -> list[M]:
    return [o.msg for o in out if isinstance(o, Send) and isinstance(o.msg, cls) and (to is None or o.to == to)]


def one(out: list[Output], cls: type[M], to: str | None = None) -> M:
    msgs = sent(out, cls, to)
    assert len(msgs) == 1, f"expected one {cls.__name__}, got {msgs}"
    return msgs[0]


def to_node(node: RaftNode, msg: M, sender: str) -> M:
    msg.group = node.group
    msg.remote_id = node.self_id
    msg.local_id = sender
    return msg


def elect(node: RaftNode, now: int = 0) -> list[Output]:
    """Run one vote round for ``node`` and answer ACCEPT from every peer."""
    out = node.tick(now)
    reqs = sent(out, VoteRequest)
    assert reqs, f"{node.self_id} sent no vote requests"
    for req in reqs:
        resp = VoteResponse(term=req.term, vote_result=VoteResult.ACCEPT)
        req.base_reply(resp)
        out += node.step(now, resp)
    assert node.is_leader, node.ms
    # Answer the first heartbeat round: with lastSuccHeartBeatTime still -1, DLedger's leader
    # steps down as soon as a round misses its quorum.
    for hb in sent(out, HeartBeatRequest):
        hresp = HeartBeatResponse()
        hb.base_reply(hresp)
        out += node.step(now, hresp)
    return out


def follow(node: RaftNode, leader: str, now: int = 0) -> list[Output]:
    """Make ``node`` a follower of ``leader`` in its current term."""
    out = node.step(now, to_node(node, HeartBeatRequest(leader_id=leader, term=node.term, req_id=1), leader))
    assert node.ms.leader_id == leader, node.ms
    return out


def flush(node: RaftNode, out: list[Output], now: int = 0) -> list[Output]:
    """Carry out the Flush effects in ``out`` (the store is memory) and report them, as the
    node runtime does; returns what the node said back."""
    back: list[Output] = []
    for o in out:
        if isinstance(o, Flush):
            back += node.flushed(now, o.token)
    return back
