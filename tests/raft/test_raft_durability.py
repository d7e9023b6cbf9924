"""Every write to the log is followed by a Flush that comes before what speaks for it.

An ack or a SUCCESS sent before its entries are durable lets Raft count a copy a crash can
take away. The consensus layer writes through ``Core``'s methods, which mark the store
dirty; these tests drive each write path and check the Flush is there, and that nothing
in ``dledger/raft/`` writes to the store another way.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import pytest
from raft_helpers import elect, follow, make_node, one, to_node

import dledger.raft
from dledger.codes import ResponseCode
from dledger.raft.effects import Flush, Output, is_early
from dledger.raft.messages import PushEntryRequest, PushEntryResponse, PushType
from dledger.raft.node import RaftNode
from dledger.store.entry import Entry
from dledger.store.memory import MemoryStore

# The DLedgerStore methods that change the log.
WRITES = {"append_as_leader", "append_batch_as_leader", "append_as_follower", "append_raw_as_follower", "truncate"}


def entries(n: int, body: bytes = b"x", term: int = 0) -> list[Entry]:
    st = MemoryStore()
    return [st.append_as_leader(body + bytes([i]), term) for i in range(n)]


def follower(held: list[Entry] | None = None, committed: int = -1) -> RaftNode:
    store = MemoryStore()
    for e in held or []:
        store.append_as_follower(e)
    if committed >= 0:
        store.update_committed_index(0, committed)
    node = make_node("n1", store=store)
    follow(node, "n0")
    return node


def push(node: RaftNode, req: PushEntryRequest) -> list[Output]:
    req.term, req.leader_id = 0, "n0"
    return node.step(0, to_node(node, req, "n0"))


def assert_flushed_first(out: list[Output]) -> None:
    """A Flush comes before every output that is not early (acks, votes, answers)."""
    late = [i for i, o in enumerate(out) if not is_early(o)]
    assert late, out
    assert isinstance(out[late[0]], Flush), out


def leader_propose(bodies: list[bytes]) -> list[Output]:
    node = make_node()
    elect(node)
    node.propose(0, bodies)
    return node.drain()


def raw_append() -> list[Output]:
    es = entries(2)
    st = MemoryStore()
    for e in es:
        st.append_as_follower(e)
    blob, pos, count = st.get_raw_range(0, 1, 1 << 20)
    node = follower()
    out = push(
        node, PushEntryRequest(type=PushType.APPEND, raw=blob, raw_index=0, raw_pos=pos, raw_count=count, req_id=10)
    )
    assert node.store.ledger_end_index == 1
    return out


def overlapping_append() -> list[Output]:
    es = entries(3)
    node = follower(es[:1])
    # A resent batch that overlaps what we hold: written entry by entry.
    out = push(node, PushEntryRequest(type=PushType.APPEND, entries=es, req_id=10))
    assert node.store.ledger_end_index == 2
    return out


def truncate() -> list[Output]:
    node = follower(entries(3))
    ours = entries(2, body=b"L")
    out = push(node, PushEntryRequest(type=PushType.TRUNCATE, entries=ours[1:], req_id=10))
    assert node.store.ledger_end_index == 1 and node.store.get(1).same_as(ours[1])
    return out


def truncate_keeping_committed() -> list[Output]:
    es = entries(3)
    node = follower(es, committed=1)
    out = push(node, PushEntryRequest(type=PushType.TRUNCATE, entries=es[:1], req_id=10))
    assert node.store.ledger_end_index == 1
    return out


@pytest.mark.parametrize(
    "write",
    [
        pytest.param(lambda: leader_propose([b"a"]), id="leader-append"),
        pytest.param(lambda: leader_propose([b"a", b"b"]), id="leader-batch-append"),
        pytest.param(raw_append, id="follower-raw-append"),
        pytest.param(overlapping_append, id="follower-entry-append"),
        pytest.param(truncate, id="follower-truncate"),
        pytest.param(truncate_keeping_committed, id="follower-truncate-to-committed"),
    ],
)
def test_every_write_path_flushes_before_it_speaks(write: Callable[[], list[Output]]) -> None:
    out = write()
    assert_flushed_first(out)


def test_the_follower_acks_only_after_the_flush() -> None:
    out = raw_append()
    r = one(out, PushEntryResponse)
    assert r.code == ResponseCode.SUCCESS
    flush_at = next(i for i, o in enumerate(out) if isinstance(o, Flush))
    ack_at = next(i for i, o in enumerate(out) if getattr(o, "msg", None) is r)
    assert flush_at < ack_at


def _store_writes_outside_core(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in WRITES:
            target = node.func.value
            # ``<anything>.store.<write>(...)`` or ``store.<write>(...)``
            name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
            if name == "store":
                found.append(f"{path.name}:{node.lineno} {ast.unparse(node.func)}")
    return found


def test_only_the_core_writes_to_the_store() -> None:
    package = Path(dledger.raft.__file__).parent
    found = [hit for p in sorted(package.glob("*.py")) if p.name != "core.py" for hit in _store_writes_outside_core(p)]
    assert not found, f"write through Core's methods (they mark the store dirty): {found}"


def test_a_truncate_whose_entry_starts_elsewhere_than_our_log_is_refused_and_changes_nothing() -> None:
    # A leader whose compare was wrong sends TRUNCATE at its entry 2, whose position is not
    # where our entry 1 ends (its bodies are longer): cutting there would cut our log
    # mid-entry (a file store's recovery then refuses it). The follower answers
    # INCONSISTENT_STATE, so the leader compares again, and keeps its log as it was.
    held = entries(3)
    node = follower(held)
    theirs = entries(3, body=b"L" * 30, term=0)
    assert theirs[2].pos != held[1].pos + held[1].size
    out = push(node, PushEntryRequest(type=PushType.TRUNCATE, entries=theirs[2:], req_id=10))
    assert one(out, PushEntryResponse).code == ResponseCode.INCONSISTENT_STATE
    assert node.store.ledger_end_index == 2
    assert all(node.store.get(i).same_as(e) for i, e in enumerate(held))
