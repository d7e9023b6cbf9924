"""The message API of a 3-member message-store group: refused input writes nothing, long
polling, consumer offsets through the log, queries, follower reads, and what a member that is
not the leader answers."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from small_group import MAX_MESSAGE, running_small_group

from dledger.client import AsyncClient, Client
from dledger.codes import ResponseCode
from dledger.errors import DLedgerError
from dledger.net.transport import Response, RpcClient
from dledger.rocketmq.broker.message_service import OFFSET_TOPIC
from dledger.rocketmq.client.consumer import Consumer, PullResult
from dledger.rocketmq.client.producer import Producer
from dledger.rocketmq.store.delay_offset import decode_delay_offsets
from dledger.rocketmq.store.message import Message
from dledger.rocketmq.store.status import GetMessageStatus, PutMessageStatus
from dledger.rocketmq.wire import MessageRequestCode, SendRequest, SendResponse
from dledger.testing import TestCluster

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestCluster]:
    with running_small_group(tmp_path_factory.mktemp("mq"), "-v") as c:
        yield c


def leader_end(c: TestCluster) -> tuple[int, int]:
    """The leader's (end index, committed index)."""
    st = c.status()
    leader = next(s for s in st.values() if s["role"] == "LEADER")
    return int(leader["end_index"]), int(leader["committed_index"])  # type: ignore[call-overload]


def raw_send(c: TestCluster, code: int, body: dict[str, Any]) -> Response:
    async def go() -> Response:
        async with AsyncClient(c.peers, c.group, timeout=10.0) as cl:
            return await cl._leader_call(code, body)  # type: ignore[arg-type]

    return asyncio.run(go())


def test_refused_input_gets_its_status_and_writes_nothing(cluster: TestCluster):
    c = cluster
    with Producer(c.peers, timeout=15.0) as p:
        assert p.send(Message("Refusals", b"first"), queue_id=0).ok
        before = leader_end(c)
        cases = {
            "oversized": Message("Refusals", b"x" * (MAX_MESSAGE + 1)),
            "topic too long": Message("T" * 128, b"x"),
            "system topic": Message(OFFSET_TOPIC, b"{}"),
        }
        for what, msg in cases.items():
            r = p.send(msg)
            assert r.status == "MESSAGE_ILLEGAL", (what, r)
            assert r.reason and r.queue_offset == -1, what
        for qid in (4, 1000, -1):
            r = p.send(Message("Refusals", b"x"), queue_id=qid)
            assert r.status == "MESSAGE_ILLEGAL" and "queue" in r.reason, r
        # Properties that would not read back as sent: refused before they go out.
        for lossy in ({"k": ""}, {"a\x01b": "c"}, {"k": "v\x02x"}):
            r = p.send(Message("Refusals", b"x", properties=lossy), queue_id=0)
            assert r.status == "MESSAGE_ILLEGAL" and "property" in r.reason, (lossy, r)
            rs = p.send_batch([Message("Refusals", b"ok"), Message("Refusals", b"x", properties=lossy)], queue_id=0)
            assert [x.status for x in rs] == ["MESSAGE_ILLEGAL"] * 2, lossy
            rs = p.send_bodies("Refusals", [b"a", b"b"], 0, properties=lossy)
            assert [x.status for x in rs] == ["MESSAGE_ILLEGAL"] * 2, lossy
        rs = p.send_bodies("Refusals", [b"a", b"b"], 0, keys=["ok", "x\x02y"])
        assert [x.status for x in rs] == ["MESSAGE_ILLEGAL"] * 2
        # Topics the Java broker refuses (TopicValidator): one message, and a packed batch.
        for topic in ("../../escaped", "a/b", "a.b", "bad topic!", "Tö", "x\x00y", "SCHEDULE_TOPIC_XXXX"):
            r = p.send(Message(topic, b"x"), queue_id=0)
            assert r.status == "MESSAGE_ILLEGAL" and "topic" in r.reason, (topic, r)
            rs = p.send_bodies(topic, [b"a", b"b"], 0)
            assert [x.status for x in rs] == ["MESSAGE_ILLEGAL"] * 2, topic
        # One bad message refuses the whole batch.
        rs = p.send_batch([Message("Refusals", b"ok"), Message("Refusals", b"y" * (MAX_MESSAGE + 1))], queue_id=0)
        assert [r.status for r in rs] == ["MESSAGE_ILLEGAL"] * 2
    # A batch over max_message_size in all is refused by a member (RocketMQ caps the batch; the
    # producer sends such a batch in pieces under it).
    req = SendRequest("Refusals", 0, [b"z" * (MAX_MESSAGE // 2)] * 3, [b""] * 3)
    resp = raw_send(c, MessageRequestCode.SEND_BATCH_MESSAGE, req.to_wire())
    assert SendResponse.from_wire(resp.body).status == PutMessageStatus.MESSAGE_ILLEGAL
    # Garbage properties, sent as a client could.
    for props in (b"\xff\xfe\x01bad utf-8", b"no separator here", b"\x01value without a name"):
        req = SendRequest("Refusals", 0, [b"body"], [props])
        resp = raw_send(c, MessageRequestCode.SEND_MESSAGE, req.to_wire())
        assert resp.code == ResponseCode.SUCCESS
        assert SendResponse.from_wire(resp.body).status == PutMessageStatus.MESSAGE_ILLEGAL, props
    # Numbers no Java int holds, and batches CommitLog.asyncPutMessages refuses (a delayed
    # message: its result would name an offset it does not have; a transaction type), sent as
    # another client could: MESSAGE_ILLEGAL, never a retry-later status.
    wide = [
        (MessageRequestCode.SEND_MESSAGE, SendRequest("Refusals", 0, [b"x"], [b""], flag=1 << 40)),
        (MessageRequestCode.SEND_BATCH_MESSAGE, SendRequest("Refusals", 0, [b"x", b"y"], [b"", b""], flag=1 << 40)),
        (MessageRequestCode.SEND_MESSAGE, SendRequest("Refusals", 0, [b"x"], [b""], sys_flag=-(1 << 33))),
        (MessageRequestCode.SEND_BATCH_MESSAGE, SendRequest("Refusals", 0, [b"x", b"y"], [b"DELAY\x012", b""])),
        (MessageRequestCode.SEND_BATCH_MESSAGE, SendRequest("Refusals", 0, [b"x", b"y"], [b"", b""], sys_flag=4)),
    ]
    for code, req in wide:
        resp = raw_send(c, code, req.to_wire())
        sent = SendResponse.from_wire(resp.body)
        assert resp.code == ResponseCode.SUCCESS and sent.status == PutMessageStatus.MESSAGE_ILLEGAL, sent
    # Malformed requests: the transport code says so, nothing is written.
    resp = raw_send(
        c,
        MessageRequestCode.SEND_MESSAGE,
        {
            "topic": "Refusals",
            "queue_id": 0,
            "raw": b"ab",
            "sizes": b"\x05\x00\x00\x00",
            "props_raw": b"",
            "props_sizes": b"\x00\x00\x00\x00",
        },
    )
    assert resp.code == ResponseCode.SUCCESS
    assert SendResponse.from_wire(resp.body).status == PutMessageStatus.MESSAGE_ILLEGAL
    assert leader_end(c) == before
    assert not list(c.root.rglob("escaped"))
    with Consumer(c.peers, "g", "Refusals") as con:
        assert con.max_offset(0) == 1
    # Raw entries would be garbage to the commit log: the group refuses them.
    with Client(c.peers, c.group, timeout=10.0) as cl, pytest.raises(DLedgerError) as err:
        cl.append(b"not a record")
    assert err.value.code == ResponseCode.UNSUPPORTED
    assert leader_end(c) == before


def test_long_poll_returns_the_message_that_arrives(cluster: TestCluster):
    c = cluster
    with Producer(c.peers) as p, Consumer(c.peers, "lp", "Polled") as con:
        start = con.max_offset(2)
        got: list[PullResult] = []
        t = threading.Thread(target=lambda: got.append(con_wait.pull(2, start, 32, wait=20.0)))
        with Consumer(c.peers, "lp", "Polled") as con_wait:
            t.start()
            time.sleep(0.3)  # the pull is held by now (if not, it returns empty and the test fails)
            r = p.send(Message("Polled", b"wake up"), queue_id=2)
            assert r.ok
            t.join(30)
        assert got and got[0].status == GetMessageStatus.FOUND
        assert [m.body for m in got[0].messages] == [b"wake up"]
        assert got[0].messages[0].queue_offset == r.queue_offset == start
        # A pull that nothing answers ends with the queue's status once its time is up.
        r2 = con.pull(2, start + 1, 32, wait=0.2)
        assert r2.status == GetMessageStatus.OFFSET_OVERFLOW_ONE and not r2.messages
        # Also when the hold is longer than the consumer's timeout (which bounds finding the
        # leader and its answer, not the hold asked for).
        with Consumer(c.peers, "lp", "Polled", timeout=1.0) as short:
            r3 = short.pull(2, start + 1, 32, wait=2.5)
            assert r3.status == GetMessageStatus.OFFSET_OVERFLOW_ONE and not r3.messages
        # A queue the topics do not have (4 here) is refused, not held: nothing can arrive there.
        for qid in (4, 1000, -1):
            with pytest.raises(DLedgerError) as err:
                con.pull(qid, 0, 32, wait=60.0)
            assert err.value.code == ResponseCode.UNEXPECTED_ARGUMENT and f"queue id {qid}" in err.value.message
        # A topic nobody has written to yet is held like an empty queue: its first message comes.
        fresh: list[PullResult] = []
        with Consumer(c.peers, "lp", "NotYetWritten") as con_new:
            t = threading.Thread(target=lambda: fresh.append(con_new.pull(0, 0, 32, wait=20.0)))
            t.start()
            time.sleep(0.3)
            assert p.send(Message("NotYetWritten", b"first"), queue_id=0).ok
            t.join(30)
        assert fresh and [m.body for m in fresh[0].messages] == [b"first"]


def test_offsets_queries_and_follower_reads(cluster: TestCluster):
    c = cluster
    with Producer(c.peers) as p:
        results = p.send_batch(
            [Message("Shop", f"order {i}".encode(), keys=[f"order-{i}"], tags="paid") for i in range(20)], queue_id=1
        )
        assert [r.queue_offset for r in results] == list(range(results[0].queue_offset, results[0].queue_offset + 20))
        assert len({r.msg_id for r in results}) == 20
    leader = c.wait_leader()
    with Consumer(c.peers, "shop-app", "Shop") as con:
        assert con.committed(1) == -1
        con.commit(1, 5)
        assert con.committed(1) == 5
        found = con.query("order-7")
        assert [m.body for m in found] == [b"order 7"]
        viewed = con.view(results[3].offset_msg_id)
        assert viewed is not None and viewed.body == b"order 3" and viewed.queue_offset == results[3].queue_offset
        # BORNHOST is the producer's end of its connection (as the Java broker's channel gives
        # it), STOREHOST the member's.
        born, store = viewed.born_host, viewed.store_host
        assert born is not None and born[0] == "127.0.0.1" and born[1] not in c.ports.values()
        assert store is not None and store[0] == "127.0.0.1" and store[1] in c.ports.values()
        got = list(con.messages(1, idle_timeout=1.0, wait=0.5, auto_commit=True))
        # From the committed offset on; the iterator commits as it goes.
        assert [x.body for x in got] == [f"order {i}".encode() for i in range(5, 20)]
        # A consumer's msg_id is the SendResult's (the UNIQ_KEY, as MessageClientExt gives it),
        # and offset_msg_id the offset id that view takes.
        assert [(x.msg_id, x.offset_msg_id) for x in got] == [(r.msg_id, r.offset_msg_id) for r in results[5:]]
        assert con.committed(1) == results[-1].queue_offset + 1
    for m in c.ids:
        with Consumer(f"{m}-127.0.0.1:{c.ports[m]}", "shop-app", "Shop", read_from="follower") as con:
            # Every member applies the offset records of the log.
            deadline = time.monotonic() + 10
            while con.committed(1) != 20 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert con.committed(1) == 20
            r = con.pull(1, 0, 100, wait=5.0)
            assert r.member == m and [x.body for x in r.messages] == [f"order {i}".encode() for i in range(20)]
    follower = next(m for m in c.ids if m != leader)

    # A follower asked for a put says it is not the leader, and who is.
    async def ask_follower() -> Response:
        rpc = RpcClient(timeout=5.0)
        try:
            req = SendRequest("Shop", 0, [b"x"], [b""])
            return await rpc.call(
                f"127.0.0.1:{c.ports[follower]}",
                MessageRequestCode.SEND_MESSAGE,
                req.to_wire(),
                group=c.group,
                timeout=5.0,
            )
        finally:
            await rpc.close()

    resp = asyncio.run(ask_follower())
    assert resp.code == ResponseCode.NOT_LEADER
    body = SendResponse.from_wire(resp.body)
    assert body.status == PutMessageStatus.SERVICE_NOT_AVAILABLE and body.leader == leader


def test_dump_reads_a_member_root_offline(cluster: TestCluster):
    """`dledger mq dump X` reads a member's store root while the member runs."""
    import subprocess
    import sys

    c = cluster
    with Producer(c.peers) as p:
        r = p.send(Message("Dumped", b"dump me"), queue_id=0)
        assert r.ok
    root = c.store_dir(c.ids[0])
    deadline = time.monotonic() + 10
    while True:
        out = subprocess.run(
            [sys.executable, "-m", "dledger.cli", "mq", "dump", str(root)], capture_output=True, text=True, timeout=60
        )
        if r.msg_id in out.stdout or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if r.msg_id in x)
    assert "\tDumped\t0\t0\t" in line and r.offset_msg_id in line


def test_async_twins(cluster: TestCluster):
    from dledger.rocketmq import AsyncConsumer, AsyncProducer

    async def go() -> None:
        async with AsyncProducer(cluster.peers) as p, AsyncConsumer(cluster.peers, "async", "Twins") as con:
            # Concurrent sends to one queue: each gets its own offset, none twice.
            rs = await asyncio.gather(*(p.send(Message("Twins", f"m{i}".encode()), 3) for i in range(20)))
            assert all(r.ok for r in rs)
            assert sorted(r.queue_offset for r in rs) == list(range(20))
            batch = await p.send_batch([Message("Twins", b"b0"), Message("Twins", b"b1")], 3)
            assert [r.queue_offset for r in batch] == [20, 21]
            got = []
            async for m in con.messages(3, 0, wait=1.0, idle_timeout=1.0, auto_commit=False):
                got.append(m)
            assert len(got) == 22
            by_offset = {m.queue_offset: m.body for m in got}
            assert all(by_offset[r.queue_offset] == f"m{i}".encode() for i, r in enumerate(rs))

    asyncio.run(go())


@pytest.mark.parametrize("kind", [bytes, bytearray])
def test_a_batch_over_the_request_cap_goes_in_pieces_each_result_its_record(cluster: TestCluster, kind: type):
    # Pieces of at most the group's max_message_size (64 KiB here): several requests (packed by
    # the kernel for bytes, joined per piece for other bytes-likes), each result naming its own
    # record.
    topic = f"Pieces{kind.__name__}"
    bodies = [kind(b"%05d" % i + b"p" * 595) for i in range(2500)]
    with Producer(cluster.peers) as p:
        rs = p.send_bodies(topic, bodies, queue_id=2)
        assert rs.ok and len(rs) == len(bodies)
        assert [r.queue_offset for r in rs] == list(range(2500))
    with Consumer(cluster.peers, "pieces", topic) as con:
        for k in (0, 1747, 1748, 2499):
            viewed = con.view(rs[k].offset_msg_id)
            assert viewed is not None and viewed.body == bytes(bodies[k]) and viewed.queue_offset == k
        got: list[bytes] = []
        while len(got) < len(bodies):
            r = con.pull(2, len(got), 1024, wait=2.0)
            assert r.messages
            got += [m.body for m in r.messages]
        assert got == [bytes(b) for b in bodies]


def test_an_offset_past_the_end_moves_to_the_end_on_the_leader_and_stays_on_a_follower(cluster: TestCluster):
    c = cluster
    with Producer(c.peers) as p:
        assert p.send_bodies("PastEnd", [b"a", b"b", b"c"], queue_id=0).ok
    leader = c.wait_leader()
    with Consumer(c.peers, "past", "PastEnd") as con:
        r = con.pull(0, 9)
        # nextOffsetCorrection on a master: the end (before 4.9 it sent the consumer back to 0)
        assert r.status == GetMessageStatus.OFFSET_OVERFLOW_BADLY and r.next_begin_offset == 3
        # ... and an iterator started past the end waits there: nothing is delivered again.
        assert list(con.messages(0, 9, wait=0.2, idle_timeout=1.0, auto_commit=False)) == []
    follower = next(m for m in c.ids if m != leader)
    with Consumer(f"{follower}-127.0.0.1:{c.ports[follower]}", "past", "PastEnd", read_from="follower") as con:
        deadline = time.monotonic() + 10
        while con.max_offset(0) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        r = con.pull(0, 9)
        # A slave may only be behind: it leaves the offset alone (offsetCheckInSlave false).
        assert r.member == follower and r.status == GetMessageStatus.OFFSET_OVERFLOW_BADLY
        assert r.next_begin_offset == 9


def test_a_pull_of_large_messages_is_capped_in_bytes_and_the_queue_stays_readable(cluster: TestCluster):
    # RocketMQ bounds a pull by maxTransferBytesOnMessageInMemory (256 KiB) as well as by count,
    # with at least one message: 32 large messages used to go in one answer, and past the
    # transport's 64 MiB frame (4 MiB messages) no pull of the queue could be answered at all.
    body = b"L" * (60 * 1024)
    with Producer(cluster.peers) as p:
        for _ in range(40):
            assert p.send(Message("Large", body), queue_id=1).ok
    with Consumer(cluster.peers, "large", "Large") as con:
        r = con.pull(1, 0, 32, wait=5.0)
        assert 1 <= len(r.messages) and sum(m.size for m in r.messages) <= 256 * 1024
        assert r.next_begin_offset == len(r.messages)
        got = list(con.messages(1, 0, wait=0.5, idle_timeout=2.0, auto_commit=False))
        assert [m.queue_offset for m in got] == list(range(40)) and all(m.body == body for m in got)


def pull_until(con: Consumer, queue_id: int, want: int, timeout: float = 60.0) -> list[Any]:
    """Long polls from offset 0 until ``want`` messages came (or ``timeout`` passed)."""
    got: list[Any] = []
    offset = 0
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        r = con.pull(queue_id, offset, 32, wait=5.0)
        got += r.messages
        offset = max(offset, r.next_begin_offset)
    return got


def test_delayed_messages_reach_their_topic_when_due_on_every_member(cluster: TestCluster):
    c = cluster
    level, delay_ms = 2, 5000  # messageDelayLevel "1s 5s ...": level 2 is 5 s
    with Producer(c.peers) as p, Consumer(c.peers, "dl", "Later") as con:
        sent = [
            p.send(Message("Later", f"late {i}".encode(), tags="T", delay_level=level), queue_id=1) for i in range(3)
        ]
        assert all(r.ok for r in sent), sent
        # Stored in SCHEDULE_TOPIC_XXXX, queue level - 1, not in their topic before their time.
        # SendResult names the queue the producer chose, as Java's.
        assert all(r.queue_id == 1 for r in sent)
        assert con.pull(1, 0, 32).messages == []
        scheduled = [con.view(r.offset_msg_id) for r in sent]
        assert all(s is not None and (s.topic, s.queue_id) == ("SCHEDULE_TOPIC_XXXX", level - 1) for s in scheduled)
        got = pull_until(con, 1, 3)
        assert [m.body for m in got] == [b"late 0", b"late 1", b"late 2"]
        assert [m.queue_offset for m in got] == [0, 1, 2]
        for m, r, s in zip(got, sent, scheduled, strict=True):
            assert s is not None and m.store_timestamp >= s.store_timestamp + delay_ms
            assert m.uniq_key == r.msg_id and m.topic == "Later" and m.queue_id == 1 and m.tags == "T"
            assert "DELAY" not in m.properties and m.properties["REAL_TOPIC"] == "Later"
        # More than one delivery takes (32), due at once: all of them, in order, once. (Sent one
        # by one: a batch cannot carry a delay level.)
        bodies = [f"batch {i}".encode() for i in range(40)]
        assert all(p.send(Message("Later", b, delay_level=1), queue_id=3).ok for b in bodies)
        assert [m.body for m in pull_until(con, 3, 40)] == bodies
    # The same messages at the same offsets on a follower; none of them twice.
    with Consumer(c.peers, "dl", "Later", read_from="follower") as fcon:
        on_follower = pull_until(fcon, 1, 3)
        assert [(m.queue_offset, m.body) for m in on_follower] == [(m.queue_offset, m.body) for m in got]
        assert [m.body for m in pull_until(fcon, 3, 40)] == bodies
        time.sleep(0.5)
        assert fcon.max_offset(1) == 3 and fcon.max_offset(3) == 40
    # Every member writes the progress it applied to delayOffset.json, Java's file (every 10 s):
    # a Java broker opened on any member's directory delivers none of them again.
    for m in c.ids:
        path = c.store_dir(m) / "config" / "delayOffset.json"

        def written(path: Path = path) -> bool:
            return path.exists() and decode_delay_offsets(path.read_text()).items() >= {1: 40, 2: 3}.items()

        c.wait_for(written, timeout=30, what=f"{m}'s delayOffset.json")
