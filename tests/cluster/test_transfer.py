"""Leadership transfer (DLedgerLeaderElector.handleTakeLeadership): three `dledger server`
processes with default timings, driven by the CLI and the client as an operator would; then
the transferee's wait for the entries it lacks, on sans-IO nodes."""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dledger.codes import ResponseCode
from dledger.config import DLedgerConfig
from dledger.raft.effects import Flush, Output, Send, TransferDone
from dledger.raft.member_state import MemoryTermStore, Role
from dledger.raft.messages import (
    HeartBeatRequest,
    HeartBeatResponse,
    LeadershipTransferRequest,
    LeadershipTransferResponse,
    Message,
    PushEntryRequest,
    PushType,
)
from dledger.raft.node import RaftNode
from dledger.store.file import MmapFileStore
from dledger.store.memory import MemoryStore
from dledger.testing import TestCluster

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[TestCluster]:
    # Default timings (no FAST flags), direct links, and a group that is not "default" so
    # the CLI has to find it.
    c = TestCluster(tmp_path, extra=[], group="g", proxied=False)
    try:
        c.start_all()
        yield c
    finally:
        c.close()


def dledger(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dledger.cli", *args], capture_output=True, text=True, timeout=60)


def transfer(cluster: TestCluster, to: str) -> subprocess.CompletedProcess[str]:
    return dledger("transfer-leader", "--peers", cluster.peers, "--to", to)


def roles(cluster: TestCluster) -> dict[str, object]:
    return {m: s["role"] for m, s in cluster.status().items()}


def test_transfer_to_the_first_member_while_another_leads(cluster: TestCluster) -> None:
    leader = cluster.wait_leader()
    if leader == "n0":
        res = transfer(cluster, "n1")
        assert res.returncode == 0, res.stderr
        leader = cluster.wait_leader()
    assert leader != "n0"
    # The CLI asks n0 first (it is first in --peers); n0 is a follower and must send it on
    # to the leader rather than refuse a transfer to itself.
    res = transfer(cluster, "n0")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("n0 leads group g in term ")
    assert roles(cluster)["n0"] == "LEADER"


def test_transfer_to_the_current_leader_succeeds_and_says_so(cluster: TestCluster) -> None:
    leader = cluster.wait_leader()
    term = cluster.status()[leader]["term"]
    res = transfer(cluster, leader)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"{leader} already leads group g in term {term}"
    st = cluster.status()
    assert st[leader]["role"] == "LEADER" and st[leader]["term"] == term


def test_transfer_to_a_follower_right_after_appends(cluster: TestCluster) -> None:
    leader = cluster.wait_leader()
    acked: dict[int, bytes] = {}
    with cluster.client() as c:
        for round_ in range(5):
            for target in [m for m in cluster.ids if m != leader]:
                bodies = [f"r{round_}-{target}-{i}".encode() for i in range(200)]
                acked.update(zip(c.append_batch(bodies).indexes(), bodies, strict=True))
                # At once: the followers may still be writing the last entries.
                result = c.transfer(target)
                assert result.leader == target, result
                st = cluster.status()
                assert st[target]["role"] == "LEADER", st
                leader = target
        # Writes go on under the new leader, and every acknowledged entry reads back.
        more = c.append_batch([b"after"] * 10)
        acked.update(zip(more.indexes(), [b"after"] * 10, strict=True))
        # Each answer named indexes of its own. A batch whose first answer was late is stored
        # twice (appends are at-least-once), so the log may hold more than ``acked``.
        assert len(acked) == 5 * 2 * 200 + 10
        got: dict[int, bytes] = {}
        while len(got) <= max(acked):
            got.update((e.index, e.body) for e in c.get_range(len(got), max(acked) + 1 - len(got)))
        assert {i: got[i] for i in acked} == acked
    last = max(acked)
    cluster.wait_for(
        lambda: all(s["committed_index"] == last for s in cluster.status().values()),
        what="every member committed the last entry",
    )
    cluster.close()
    for m in cluster.ids:
        with MmapFileStore(cluster.node_dir(m), readonly=True) as s:
            assert {e.index: e.body for e in s.iter_entries()} == got, m


def test_transfer_with_a_member_down_and_to_a_dead_member(cluster: TestCluster) -> None:
    leader = cluster.wait_leader()
    live, dead = [m for m in cluster.ids if m != leader]
    with cluster.client() as c:
        # Batches of 100: even with every batch stored twice (a late answer, sent again) the
        # leader's log stays under max_leadership_transfer_wait_index (1,000), the distance at
        # which a transfer is refused as FALL_BEHIND_TOO_MUCH rather than tried.
        end = c.append_batch([b"before"] * 100)[-1].index
        cluster.wait_for(lambda: cluster.status()[dead]["end_index"] == end, what="every member has the entries")
        cluster.kill(dead)
        # Two of three members: still a majority, and the transfer goes both ways.
        for target in (live, leader, live):
            end = c.append_batch([b"x"] * 100)[-1].index
            assert c.transfer(target).leader == target
        # A member that is down cannot take over: the error says so, the leader leads on.
        res = transfer(cluster, dead)
        assert res.returncode == 2
        assert "TIMEOUT(300)" in res.stderr and f"{dead} did not catch up" in res.stderr
        assert "it has not acknowledged any entry of term" in res.stderr
        assert roles(cluster)[live] == "LEADER"
        r = c.append(b"after")
        assert r.index > end and c.get(r.index).body == b"after"


def test_cli_transfer_to_an_unknown_member(cluster: TestCluster) -> None:
    cluster.wait_leader()
    res = transfer(cluster, "n9")
    assert res.returncode == 2
    assert "UNKNOWN_MEMBER" in res.stderr and "n9" in res.stderr


# --- the transferee's catch-up, on sans-IO nodes ---------------------------------------------


class Group:
    """Three RaftNodes on a perfect network, one tick each per 10 ms; ``hold`` keeps the
    leader's entries (APPEND pushes) from one member (a follower that lags)."""

    def __init__(self, **overrides: object) -> None:
        ids = ["n0", "n1", "n2"]
        peers = ";".join(f"{i}-127.0.0.1:{20911 + k}" for k, i in enumerate(ids))
        self.nodes = {
            i: RaftNode(
                DLedgerConfig(self_id=i, peers=peers, store_type="MEMORY", **overrides),  # type: ignore[arg-type]
                MemoryStore(),
                MemoryTermStore(),
                random.Random(k),
                incarnation=k + 1,
            )
            for k, i in enumerate(ids)
        }
        self.now = 0
        self.hold: str | None = None
        self.done: list[TransferDone] = []

    def carry_out(self, member: str, outs: list[Output]) -> None:
        queue = [(member, o) for o in outs]
        while queue:
            at, o = queue.pop(0)
            node = self.nodes[at]
            if isinstance(o, Flush):
                queue.extend((at, x) for x in node.flushed(self.now, o.token))
            elif isinstance(o, Send):
                msg: Message = o.msg
                if self.hold == o.to and isinstance(msg, PushEntryRequest) and msg.type == PushType.APPEND:
                    continue
                queue.extend((o.to, x) for x in self.nodes[o.to].step(self.now, msg))
            elif isinstance(o, TransferDone):
                self.done.append(o)

    def run(self, ms: int) -> None:
        for _ in range(ms // 10):
            self.now += 10
            for member, node in self.nodes.items():
                self.carry_out(member, node.tick(self.now))

    def leader(self) -> str | None:
        leaders = [m for m, n in self.nodes.items() if n.role == Role.LEADER]
        return leaders[0] if len(leaders) == 1 else None

    def transfer_to_a_lagging_member(self) -> tuple[str, str]:
        """Elect a leader, hold a member's traffic while 50 entries go out, and ask the leader
        to hand over to that member; (leader, member)."""
        self.run(5_000)
        leader = self.leader()
        assert leader is not None
        target = next(m for m in self.nodes if m != leader)
        self.hold = target
        node = self.nodes[leader]
        node.propose(self.now, [b"x"] * 50)
        self.carry_out(leader, node.drain())
        self.run(100)
        assert self.nodes[target].store.ledger_end_index < node.store.ledger_end_index
        node.transfer_leadership(self.now, target)
        self.carry_out(leader, node.drain())
        return leader, target


def test_a_lagging_transferee_catches_up_first_then_takes_leadership() -> None:
    g = Group(leadership_transfer_wait_timeout=2_500)
    _leader, target = g.transfer_to_a_lagging_member()
    g.run(100)
    # It waits for the entries it lacks instead of standing with a shorter log.
    assert g.nodes[target].role == Role.FOLLOWER and not g.done
    g.hold = None  # the leader resends what was lost after max_push_time_out_ms
    g.run(2_000)
    assert [d.response.code for d in g.done] == [ResponseCode.SUCCESS]
    assert g.leader() == target


def test_a_transferee_that_cannot_catch_up_is_not_asked_and_the_error_says_why() -> None:
    g = Group()
    leader, target = g.transfer_to_a_lagging_member()
    node = g.nodes[leader]
    g.run(node.core.timings.transfer_wait_ms + 100)
    (d,) = g.done
    assert d.response.code == ResponseCode.TIMEOUT
    assert f"{target} did not catch up" in d.response.reason and "of 49 in term" in d.response.reason
    # The leader leads on and takes appends again; the transferee never stood.
    assert g.leader() == leader and node.ms.transferee is None
    assert g.nodes[target].role == Role.FOLLOWER


def test_the_transferee_waits_for_the_leaders_entries_and_refuses_past_its_timeout() -> None:
    # DLedgerServer's own check on the transferee side: asked to take over while it lacks
    # entries the leader had, it waits leadership_transfer_wait_timeout for them.
    g = Group(leadership_transfer_wait_timeout=300)
    g.run(5_000)
    leader = g.leader()
    assert leader is not None
    target = next(m for m in g.nodes if m != leader)
    t = g.nodes[target]
    ask = LeadershipTransferRequest(
        group="default",
        remote_id=target,
        local_id=leader,
        leader_id=leader,
        term=t.term,
        transfer_id=leader,
        transferee_id=target,
        take_leadership_ledger_index=t.store.ledger_end_index + 5,
        req_id=77,
    )
    answers: list[Message] = []
    assert not [o for o in t.step(g.now, ask) if isinstance(o, Send)]
    for _ in range(40):
        g.now += 10
        answers += [o.msg for o in t.tick(g.now) if isinstance(o, Send) and o.msg.req_id == 77]
    (a,) = answers
    assert isinstance(a, LeadershipTransferResponse) and a.code == ResponseCode.TAKE_LEADERSHIP_FAILED
    assert "5 entries behind" in a.reason and "leadership_transfer_wait_timeout" in a.reason
    assert t.role == Role.FOLLOWER


def test_a_heartbeat_of_the_old_term_does_not_stop_the_transferee_standing() -> None:
    # The transferee becomes a candidate when asked and moves to the next term at its next
    # step; a heartbeat its leader sent before that must not turn it back into a follower.
    g = Group()
    g.run(5_000)
    leader = g.leader()
    assert leader is not None
    target = next(m for m in g.nodes if m != leader)
    t, lead = g.nodes[target], g.nodes[leader]
    term = t.term
    ask = LeadershipTransferRequest(
        group="default",
        remote_id=target,
        local_id=leader,
        leader_id=leader,
        term=term,
        transfer_id=leader,
        transferee_id=target,
        take_leadership_ledger_index=t.store.ledger_end_index,
        req_id=78,
    )
    g.carry_out(target, t.step(g.now, ask))
    assert t.role == Role.CANDIDATE and t.term == term
    beat = HeartBeatRequest(group="default", remote_id=target, local_id=leader, leader_id=leader, term=term)
    outs = t.step(g.now, beat)
    answers = [o.msg for o in outs if isinstance(o, Send) and isinstance(o.msg, HeartBeatResponse)]
    assert [a.code for a in answers] == [ResponseCode.SUCCESS]
    assert t.role == Role.CANDIDATE
    g.carry_out(target, outs)
    g.run(1_000)
    assert g.leader() == target and t.term == term + 1
    assert lead.role == Role.FOLLOWER
