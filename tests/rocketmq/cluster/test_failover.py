"""A 3-member message-store group of real `dledger server --message-store` processes under
producer load: the leader killed with SIGKILL and restarted (twice), a follower cut off and
healed, the leader cut off and healed.

Afterwards every member must serve every SEND_OK message at the queue offset its SendResult
named, each queue's offsets must run from 0 without a gap, and the members' consume queues
and data files must be byte-identical up to the committed position."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dledger.rocketmq.broker.message_service import OFFSET_TOPIC
from dledger.rocketmq.client.consumer import Consumer
from dledger.rocketmq.client.producer import Producer
from dledger.rocketmq.client.send_result import SendResult
from dledger.rocketmq.store.message import RMQ_SYS_SCHEDULE_TOPIC, UNIQ_KEY, Message, MessageExt
from dledger.rocketmq.store.schedule_message_service import DELAY_OFFSET_GROUP
from dledger.testing import FAST, TestCluster

pytestmark = pytest.mark.timeout(300)

TOPIC = "Orders"
QUEUES = 8
# Small data files, so that the run crosses file boundaries (blank records, new files).
SEGMENT = 1 << 20


def mq_cluster(root: Path, *extra: str) -> TestCluster:
    return TestCluster(
        root,
        member_dirs=True,
        extra=[*FAST, "-v", "--message-store", "--mapped-file-size-for-entry-data", str(SEGMENT), *extra],
    )


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[TestCluster]:
    c = mq_cluster(tmp_path)
    try:
        c.start_all()
        yield c
    finally:
        c.close()


def member_peers(c: TestCluster, member: str) -> str:
    return f"{member}-127.0.0.1:{c.ports[member]}"


class Load:
    """A producer thread: single sends and batches, round the queues, every result kept."""

    def __init__(self, peers: str) -> None:
        self.producer = Producer(peers, timeout=30.0, request_timeout=2.0)
        self.sent: list[tuple[bytes, SendResult]] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        k = 0
        try:
            while not self.stop.is_set():
                if k % 4 == 3:
                    bodies = [f"batch {k} item {j} ".encode() + b"x" * (k % 300) for j in range(10)]
                    rs = self.producer.send_batch([Message(TOPIC, b, tags=f"t{k % 3}", keys=[f"k{k}"]) for b in bodies])
                    self.sent.extend(zip(bodies, rs, strict=True))
                else:
                    body = f"single {k} ".encode() + b"y" * (k % 500)
                    self.sent.append((body, self.producer.send(Message(TOPIC, body, keys=f"k{k}"))))
                k += 1
        except BaseException as exc:  # reported by the test
            self.error = exc

    def acked(self) -> int:
        return sum(1 for _b, r in self.sent if r.ok)

    def wait_acked(self, more: int, timeout: float = 60.0) -> None:
        target = self.acked() + more
        deadline = time.monotonic() + timeout
        while self.acked() < target:
            assert self.error is None, self.error
            assert time.monotonic() < deadline, f"{self.acked()} acked, wanted {target}"
            time.sleep(0.05)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive()
        self.producer.close()
        assert self.error is None, self.error


def caught_up(c: TestCluster) -> bool:
    with Consumer(c.peers, "check", TOPIC, timeout=5.0) as con:
        st = con.stats()
    if any("error" in s for s in st.values()):
        return False
    ends = {s["committed_phys_offset"] for s in st.values()}
    queues = {repr(sorted(map(tuple, s["queues"]))) for s in st.values()}
    return (
        len(ends) == 1
        and len(queues) == 1
        and all(s["dispatch_behind_bytes"] == 0 for s in st.values())
        and all(s["ledger_end_pos"] == s["committed_phys_offset"] for s in st.values())
    )


def read_queue(c: TestCluster, member: str, queue: int) -> list[MessageExt]:
    out: list[MessageExt] = []
    with Consumer(member_peers(c, member), "check", TOPIC, read_from="follower", timeout=10.0) as con:
        offset = 0
        while True:
            r = con.pull(queue, offset, 256)
            if not r.messages:
                break
            out.extend(r.messages)
            offset = r.next_begin_offset
    return out


def test_kill_9_leader_and_cut_follower_under_load(cluster: TestCluster):
    c = cluster
    load = Load(c.peers)
    try:
        load.wait_acked(500)
        # Twice: the second kill hits a leader that took over with a no-op of its own.
        for _round in range(2):
            leader = c.wait_leader()
            c.kill(leader)
            c.wait_leader(exclude=leader)
            load.wait_acked(500)
            c.start(leader)
            load.wait_acked(300)
        leader = c.wait_leader()
        follower = next(m for m in c.ids if m != leader)
        c.isolate(follower)
        load.wait_acked(800)
        c.heal()
        load.wait_acked(500)
        # The leader cut off: what it takes meanwhile never commits, and is cut from its log later.
        leader = c.wait_leader()
        c.isolate(leader)
        c.wait_leader(exclude=leader)
        load.wait_acked(500)
        c.heal()
        load.wait_acked(300)
    finally:
        load.finish()
    # Offsets committed through the log reach every member, and survive the leader.
    with Consumer(c.peers, "cg-1", TOPIC) as con:
        con.commit(3, 7)
        assert con.committed(3) == 7
    c.wait_for(lambda: caught_up(c), timeout=60, what="every member committed and dispatched the same log")

    acked = [(b, r) for b, r in load.sent if r.ok]
    assert len(acked) >= 4200
    # Each acknowledged (queue, offset) names one message.
    positions = [(r.queue_id, r.queue_offset) for _b, r in acked]
    assert len(set(positions)) == len(positions)
    by_member = {}
    for m in c.ids:
        queues = {q: read_queue(c, m, q) for q in range(QUEUES)}
        for q, msgs in queues.items():
            # Gap-free: the n messages of a queue are at offsets 0..n-1.
            assert [x.queue_offset for x in msgs] == list(range(len(msgs))), (m, q)
            # The AppendHook wrote each record's PHYSICALOFFSET (entry pos + 48) on the leader.
            assert all(x.stored_phys_offset == x.phys_offset for x in msgs), (m, q)
            # Everything stored was sent by the producer (a copy of an unacknowledged attempt may be
            # there too: sends are at-least-once).
        for body, r in acked:
            got = queues[r.queue_id][r.queue_offset]
            assert got.body == body and got.properties[UNIQ_KEY] == r.msg_id, (m, r)
            assert got.msg_id == r.msg_id and got.offset_msg_id == r.offset_msg_id
        by_member[m] = {q: [(x.queue_offset, x.phys_offset, x.body) for x in msgs] for q, msgs in queues.items()}
        with Consumer(member_peers(c, m), "cg-1", TOPIC, read_from="follower") as con:
            assert con.committed(3) == 7
    assert by_member[c.ids[0]] == by_member[c.ids[1]] == by_member[c.ids[2]]
    sent_bodies = {b for b, _r in load.sent}
    assert all(b in sent_bodies for _o, _p, b in (x for q in by_member[c.ids[0]].values() for x in q))

    # Stop every member cleanly and compare the files.
    for m in list(c.procs):
        assert c.stop(m) == 0
    roots = [c.store_dir(m) for m in c.ids]
    cq_files = sorted(p.relative_to(roots[0]) for p in (roots[0] / "consumequeue").rglob("*") if p.is_file())
    names = [str(p.relative_to("consumequeue")) for p in cq_files]
    assert any(n.startswith(f"{TOPIC}/") for n in names)
    assert any(n.startswith(f"{OFFSET_TOPIC}/") for n in names)
    for root in roots[1:]:
        other = sorted(p.relative_to(root) for p in (root / "consumequeue").rglob("*") if p.is_file())
        assert other == cq_files
        for rel in cq_files:
            assert (root / rel).read_bytes() == (roots[0] / rel).read_bytes(), rel
    from dledger.store.file import MmapFileStore

    ends = set()
    data: list[bytes] = []
    for m in c.ids:
        with MmapFileStore(c.node_dir(m), readonly=True) as s:
            ends.add((s.committed_index, s.committed_pos))
            files = sorted((c.node_dir(m) / "data").iterdir())
            # Nothing was deleted: the files start at position 0.
            data.append(b"".join(f.read_bytes() for f in files)[: s.committed_pos])
    assert len(ends) == 1
    assert data[0] == data[1] == data[2]


def test_followers_serve_reads_while_the_leader_is_gone(cluster: TestCluster):
    """RocketMQ's DLedger mode: consumers read from slaves while writes wait for a new leader."""
    c = cluster
    with Producer(c.peers, timeout=20.0) as p:
        rs = p.send_bodies(TOPIC, [f"r{i}".encode() for i in range(50)], queue_id=5)
        assert rs.ok
    c.wait_for(lambda: caught_up(c), timeout=30, what="every member dispatched")
    leader = c.wait_leader()
    c.kill(leader)
    for m in c.ids:
        if m == leader:
            continue
        with Consumer(member_peers(c, m), "reader", TOPIC, read_from="follower", timeout=10.0) as con:
            r = con.pull(5, 0, 100)
            assert [x.body for x in r.messages] == [f"r{i}".encode() for i in range(50)]
            assert r.member == m


def test_whole_group_killed_and_restarted(cluster: TestCluster):
    """kill -9 of every member at once, then a restart: every SEND_OK message is there, queue
    offsets go on from where they were, committed consumer offsets survive."""
    c = cluster
    acked: list[tuple[bytes, SendResult]] = []
    with Producer(c.peers, timeout=20.0) as p:
        for k in range(30):
            bodies = [f"before {k}-{j}".encode() for j in range(20)]
            acked.extend(zip(bodies, p.send_bodies(TOPIC, bodies, queue_id=k % QUEUES), strict=True))
    with Consumer(c.peers, "survivor", TOPIC) as con:
        con.commit(1, 33)
    for m in list(c.procs):
        c.kill(m)
    c.start_all()
    c.wait_leader()
    with Producer(c.peers, timeout=30.0) as p:
        for k in range(8):
            bodies = [f"after {k}-{j}".encode() for j in range(5)]
            acked.extend(zip(bodies, p.send_bodies(TOPIC, bodies, queue_id=k % QUEUES), strict=True))
    assert all(r.ok for _b, r in acked)
    c.wait_for(lambda: caught_up(c), timeout=60, what="every member committed and dispatched the same log")
    for m in c.ids:
        # Their queues were kept: cut to the log's written end, not to the committed end (0
        # until the leader spoke), which dropped and rebuilt every one.
        assert "cutting them" not in c.logs[m].read_text(), m
        queues = {q: read_queue(c, m, q) for q in range(QUEUES)}
        for q, msgs in queues.items():
            assert [x.queue_offset for x in msgs] == list(range(len(msgs))), (m, q)
        for body, r in acked:
            assert queues[r.queue_id][r.queue_offset].body == body, (m, r)
        with Consumer(member_peers(c, m), "survivor", TOPIC, read_from="follower") as con:
            assert con.committed(1) == 33


def test_a_new_leader_delivers_the_delayed_messages_the_old_one_had_not(cluster: TestCluster):
    """ScheduleMessageService's offsets go through the log: a leader killed before some delayed
    messages were due leaves them to the next, which does not deliver the earlier ones again."""
    c = cluster
    c.wait_leader()
    with Producer(c.peers, timeout=30.0) as p:
        early = [p.send(Message(TOPIC, f"early {i}".encode(), delay_level=1), queue_id=2) for i in range(2)]
        assert all(r.ok for r in early)
        with Consumer(c.peers, DELAY_OFFSET_GROUP, RMQ_SYS_SCHEDULE_TOPIC) as delays:
            # Delivered (level 1: 1 s) and its offset committed through the log.
            c.wait_for(lambda: delays.committed(0) == 2, timeout=30, what="the early ones delivered")
        late = [p.send(Message(TOPIC, f"late {i}".encode(), delay_level=2), queue_id=2) for i in range(3)]
        assert all(r.ok for r in late)
    old = c.wait_leader()
    c.kill(old)  # at once: the late ones are due in 5 s
    c.wait_leader(30, exclude=old)
    want = [b"early 0", b"early 1", b"late 0", b"late 1", b"late 2"]
    with Consumer(c.peers, "after", TOPIC, timeout=30.0) as con:
        got: list[MessageExt] = []
        offset = 0
        deadline = time.monotonic() + 60
        while len(got) < len(want) and time.monotonic() < deadline:
            r = con.pull(2, offset, 32, wait=5.0)
            got += r.messages
            offset = max(offset, r.next_begin_offset)
    assert [m.body for m in got] == want
    assert [m.uniq_key for m in got] == [r.msg_id for r in early + late]
    c.start(old)
    c.wait_for(lambda: caught_up(c), timeout=60, what="every member committed and dispatched the same log")
    for m in c.ids:
        assert [x.body for x in read_queue(c, m, 2)] == want, m
