"""The producer's rules on a 3-member message-store group: what RocketMQ's client refuses is
refused before anything is written (batches MessageBatch cannot make, empty bodies, numbers
Java cannot hold), and a batch whose messages each fit the group's max_message_size arrives
whole and in order however big it is."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from small_group import MAX_MESSAGE, running_small_group

from dledger.codes import ResponseCode
from dledger.errors import DLedgerError
from dledger.rocketmq.client.consumer import Consumer
from dledger.rocketmq.client.producer import Producer
from dledger.rocketmq.client.send_result import SendResults
from dledger.rocketmq.store.message import Message, MessageExt
from dledger.testing import FAST, TestCluster

pytestmark = pytest.mark.timeout(240)

ILLEGAL = "MESSAGE_ILLEGAL"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestCluster]:
    with running_small_group(tmp_path_factory.mktemp("mq-rules")) as c:
        yield c


def pull_all(con: Consumer, queue_id: int, n: int, timeout: float = 60.0) -> list[MessageExt]:
    """The first ``n`` messages of a queue (fewer if they do not come in ``timeout``)."""
    got: list[MessageExt] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got += con.pull(queue_id, len(got), 32, wait=1.0).messages
    return got


def all_refused(rs: SendResults, *words: str) -> bool:
    return (
        len(rs) > 0
        and all(r.status == ILLEGAL and r.queue_offset == -1 for r in rs)
        and all(w in rs[0].reason for w in words)
    )


def test_batches_rocketmq_cannot_make_raise_and_write_nothing(cluster: TestCluster) -> None:
    topic = "RulesBatch"
    with Producer(cluster.peers) as p, Consumer(cluster.peers, "rules", topic) as con:
        assert p.send(Message(topic, b"first"), queue_id=0).ok
        # No WAIT is WAIT=true (Message.isWaitStoreMsgOK): the same, so a batch.
        assert p.send_batch([Message(topic, b"a"), Message(topic, b"b", properties={"WAIT": "true"})], 0).ok
        before = con.max_offset(0)
        batches = [
            ([Message(topic, b"now"), Message(topic, b"later", delay_level=2)], "TimeDelayLevel"),
            ([Message(topic, b"later", delay_level=2), Message(topic, b"now")], "TimeDelayLevel"),
            ([Message(topic, b, delay_level=1) for b in (b"x", b"y")], "TimeDelayLevel"),
            ([Message(topic, b, properties={"DELAY": "3"}) for b in (b"x", b"y")], "TimeDelayLevel"),
            ([Message(topic, b"a"), Message(topic, b"b", properties={"WAIT": "false"})], "waitStoreMsgOK"),
            ([Message("%RETRY%rules", b) for b in (b"x", b"y")], "Retry Group"),
        ]
        for batch, words in batches:
            with pytest.raises(DLedgerError) as err:
                p.send_batch(batch, queue_id=0)
            assert err.value.code == ResponseCode.UNEXPECTED_ARGUMENT and words in err.value.message, batch
        for topic_, props in ((topic, {"DELAY": "2"}), ("%RETRY%rules", {})):
            with pytest.raises(DLedgerError) as err:
                p.send_bodies(topic_, [b"x", b"y"], 0, properties=props)
            assert err.value.code == ResponseCode.UNEXPECTED_ARGUMENT
        assert con.max_offset(0) == before
        # A batch of one delayed message is that message sent alone: delivered when due.
        rs = p.send_batch([Message(topic, b"later", delay_level=1)], queue_id=1)
        assert rs.ok and len(rs) == 1
        assert con.pull(1, 0).messages == []
        assert [m.body for m in pull_all(con, 1, 1)] == [b"later"]


def test_an_empty_body_is_refused_and_nothing_of_its_batch_is_written(cluster: TestCluster) -> None:
    topic = "RulesEmpty"
    with Producer(cluster.peers) as p, Consumer(cluster.peers, "rules", topic) as con:
        assert p.send(Message(topic, b"first"), queue_id=2).ok
        before = con.max_offset(2)
        r = p.send(Message(topic, b""), queue_id=2)
        assert r.status == ILLEGAL and "body length is zero" in r.reason
        # Uniform messages (the columnar path) and messages of their own properties.
        for batch in (
            [Message(topic, b"a"), Message(topic, b"")],
            [Message(topic, b"a"), Message(topic, b"", tags="t")],
        ):
            assert all_refused(p.send_batch(batch, queue_id=2), "message 1", "body length is zero")
        assert all_refused(p.send_bodies(topic, [b"a", b"", b"c"], 2), "message 1", "body length is zero")
        # Bodies that are not bytes (their sizes taken one by one).
        likes: list[Any] = [bytearray(b"a"), bytearray()]
        assert all_refused(p.send_bodies(topic, likes, 2), "body length is zero")
        assert all_refused(p.send_bodies(topic, [b""], 2), "body length is zero")
        # A str body (len() counts characters, and nothing can send it): refused as well.
        text: Any = "text"
        assert p.send(Message(topic, text), queue_id=2).status == ILLEGAL
        assert all_refused(p.send_batch([Message(topic, b"a"), Message(topic, text)], queue_id=2), "str")
        assert all_refused(p.send_bodies(topic, [b"a", text], 2), "str")
        assert con.max_offset(2) == before


def test_keys_are_what_message_keys_take_and_anything_else_is_refused(cluster: TestCluster) -> None:
    topic = "RulesKeys"
    with Producer(cluster.peers) as p, Consumer(cluster.peers, "rules", topic) as con:
        assert p.send_bodies(topic, [b"a", b"b", b"c"], 1, keys=[["k1", "k2"], ("k3",), None]).ok
        assert p.send(Message(topic, b"d", keys=["k4", "k5"]), queue_id=1).ok
        got = pull_all(con, 1, 4)
        assert [(m.body, m.keys) for m in got] == [(b"a", "k1 k2"), (b"b", "k3"), (b"c", None), (b"d", "k4 k5")]
        before = con.max_offset(1)
        bad: Any
        for bad in ("ab", [1, None], [["k", 2], None]):
            assert all_refused(p.send_bodies(topic, [b"x", b"y"], 1, keys=bad), "keys"), bad
        for bad in (5, [["k"]], {"k"}):
            assert p.send(Message(topic, b"x", keys=bad), queue_id=1).status == ILLEGAL, bad
            assert all_refused(p.send_batch([Message(topic, b"x"), Message(topic, b"y", keys=bad)], 1), "keys")
            assert all_refused(p.send_batch([Message(topic, b"x", tags="t"), Message(topic, b"y", keys=bad)], 1))
        assert con.max_offset(1) == before


def test_a_message_keeps_its_reconsume_count(cluster: TestCluster) -> None:
    # What a consumer that sends a message back for another try relies on: the count comes back,
    # so that it can stop (RocketMQ moves it to the DLQ past maxReconsumeTimes).
    topic = "RulesReconsume"
    with Producer(cluster.peers) as p, Consumer(cluster.peers, "rules", topic) as con:
        assert p.send(Message(topic, b"again", reconsume_times=3), queue_id=0).ok
        batch = [Message(topic, b"a"), Message(topic, b"b", reconsume_times=2), Message(topic, b"c", reconsume_times=2)]
        assert p.send_batch(batch, queue_id=0).ok
        got = pull_all(con, 0, 4)
        assert [(m.body, m.reconsume_times) for m in got] == [(b"again", 3), (b"a", 0), (b"b", 2), (b"c", 2)]
        r = p.send(Message(topic, b"x", reconsume_times=1 << 31), queue_id=0)
        assert r.status == ILLEGAL and "reconsume_times" in r.reason
        assert con.max_offset(0) == 4


def test_a_batch_that_would_go_in_pieces_is_refused_whole_for_one_bad_message(cluster: TestCluster) -> None:
    # Three records of ~30 KB go as three requests (64 KiB a request): the middle message's
    # properties are over 32767 bytes. Sent piece by piece, the first and last were stored and
    # the queue had a hole where the middle one was to be.
    topic = "RulesPieces"
    with Producer(cluster.peers) as p, Consumer(cluster.peers, "rules", topic) as con:
        assert p.send(Message(topic, b"first"), queue_id=3).ok
        before = con.max_offset(3)
        batch = [Message(topic, b"A" * 30000), Message(topic, b"B" * 30000, keys="k" * 33000), Message(topic, b"C")]
        assert all_refused(p.send_batch(batch, queue_id=3), "message 1", "properties")
        long_keys = [None, "k" * 33000, None]
        assert all_refused(p.send_bodies(topic, [b"A" * 30000, b"B" * 30000, b"C"], 3, keys=long_keys), "message 1")
        prepared = Message(topic, b"p", sys_flag=4)  # TRANSACTION_PREPARED_TYPE
        with pytest.raises(DLedgerError, match="transaction"):
            p.send_batch([Message(topic, b"a"), prepared], queue_id=3)
        assert con.max_offset(3) == before
        # A shared KEYS and each body's own: one KEYS a message, its own else the shared one.
        assert p.send_bodies(topic, [b"own", b"shared"], 3, keys=["mine", None], properties={"KEYS": "all"}).ok
        shared = [Message(topic, b"x", keys="", properties={"KEYS": "all"}) for _ in range(2)]
        assert p.send_batch(shared, queue_id=3).ok
        got = pull_all(con, 3, before + 4)[before:]
        assert [m.keys for m in got] == ["mine", "all", "all", "all"]
        assert all(m.properties_string.count("KEYS\x01") == 1 for m in got)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("flag", 1 << 40),
        ("flag", -(1 << 31) - 1),
        ("sys_flag", 1 << 33),
        ("born_timestamp", 1 << 64),
        ("born_timestamp", -(1 << 63) - 1),
    ],
)
def test_numbers_java_cannot_hold_are_refused_naming_the_field(cluster: TestCluster, field: str, value: int) -> None:
    topic = "RulesNumbers"
    with Producer(cluster.peers) as p, Consumer(cluster.peers, "rules", topic) as con:
        assert p.send(Message(topic, b"first"), queue_id=3).ok
        before = con.max_offset(3)

        def bad(body: bytes) -> Message:
            msg = Message(topic, body)
            setattr(msg, field, value)
            return msg

        r = p.send(bad(b"x"), queue_id=3)
        assert r.status == ILLEGAL and field in r.reason, r
        # All messages alike (the columnar path), and one differing from the others.
        same = [bad(b"a"), bad(b"b")]
        assert all_refused(p.send_batch(same, queue_id=3), field)
        mixed = [Message(topic, b"a"), bad(b"b")]
        assert all_refused(p.send_batch(mixed, queue_id=3), "message 1", field)
        if field == "flag":
            assert all_refused(p.send_bodies(topic, [b"a", b"b"], 3, flag=value), field)
        assert con.max_offset(3) == before
        # Java's own edges go.
        assert p.send(Message(topic, b"edge", flag=(1 << 31) - 1), queue_id=3).ok
        assert p.send_bodies(topic, [b"a", b"b"], 3, flag=-(1 << 31)).ok


def test_a_batch_of_large_properties_goes_in_pieces_by_record_size(cluster: TestCluster) -> None:
    # Tiny bodies, ~20 KB of properties each (2.4 MB of records): pieces of at most 64 KiB of
    # records, not of bodies; every message arrives with its properties, in order.
    topic = "RulesProps"
    n = 120
    pads = [f"{i:04d}" + "p" * 20000 for i in range(n)]
    msgs = [Message(topic, f"m{i}".encode(), properties={"pad": pads[i]}) for i in range(n)]
    with Producer(cluster.peers) as p, Consumer(cluster.peers, "rules", topic) as con:
        rs = p.send_batch(msgs, queue_id=0)
        assert rs.ok, rs[-1]
        assert [r.queue_offset for r in rs] == list(range(n))
        got = pull_all(con, 0, n)
        assert [m.body for m in got] == [m.body for m in msgs]
        assert [m.properties["pad"] for m in got] == pads
        assert [m.uniq_key for m in got] == [r.msg_id for r in rs]


@pytest.mark.parametrize("keyed", [False, True])
def test_a_batch_of_messages_near_the_limit_goes_in_pieces_under_it(cluster: TestCluster, keyed: bool) -> None:
    # 40 bodies of 60 KiB on a group of 64 KiB max_message_size: once refused in 1 MiB pieces.
    topic = f"RulesLarge{int(keyed)}"
    bodies = [b"%03d" % i + b"L" * (60 * 1024 - 3) for i in range(40)]
    keys = [f"k{i}" for i in range(40)] if keyed else None
    with Producer(cluster.peers) as p, Consumer(cluster.peers, "rules", topic) as con:
        rs = p.send_bodies(topic, bodies, 1, keys=keys)
        assert rs.ok, rs[-1]
        assert [r.queue_offset for r in rs] == list(range(40))
        got = pull_all(con, 1, 40)
        assert [m.body for m in got] == bodies
        if keys is not None:
            assert [m.keys_string for m in got] == keys
        # The same as Message objects (differing only in body: the columnar path too).
        rs = p.send_batch([Message(topic, b) for b in bodies], queue_id=1)
        assert rs.ok and [r.queue_offset for r in rs] == list(range(40, 80))
        assert [m.body for m in pull_all(con, 1, 80)[40:]] == bodies


def test_a_batch_with_a_message_no_request_can_hold_is_refused_whole(cluster: TestCluster) -> None:
    # Split, the pieces before it would be stored: the whole batch is refused instead.
    topic = "RulesTooBig"
    big = b"y" * (MAX_MESSAGE + 1)
    with Producer(cluster.peers) as p, Consumer(cluster.peers, "rules", topic) as con:
        assert p.send(Message(topic, b"first"), queue_id=0).ok
        before = con.max_offset(0)
        fits = [b"f" * (40 * 1024)] * 4
        assert all_refused(p.send_bodies(topic, [*fits, big], 0), "message 4", "max_message_size")
        msgs = [Message(topic, b, properties={"i": str(i)}) for i, b in enumerate([*fits, big])]
        assert all_refused(p.send_batch(msgs, queue_id=0), "message 4", "max_message_size")
        assert con.max_offset(0) == before


def test_each_message_of_a_batch_keeps_its_own_flag_and_born_time(cluster: TestCluster) -> None:
    # A request carries one flag, sys flag and born time; a batch whose messages differ used
    # to store the first message's for all of them.
    msgs = [
        Message("Flags", b"a", flag=1),
        Message("Flags", b"b", flag=1),
        Message("Flags", b"c", flag=7, born_timestamp=1_700_000_000_000),
        Message("Flags", b"d", flag=1),
    ]
    with Producer(cluster.peers) as p, Consumer(cluster.peers, "flags", "Flags") as con:
        rs = p.send_batch(msgs, queue_id=0)
        assert rs.ok and [r.queue_offset for r in rs] == [0, 1, 2, 3]
        got = pull_all(con, 0, 4)
    assert [(m.body, m.flag) for m in got] == [(m.body, m.flag) for m in msgs]
    assert got[2].born_timestamp == 1_700_000_000_000 and got[3].born_timestamp != 1_700_000_000_000


def test_a_producer_started_before_its_group_waits_for_it(tmp_path: Path) -> None:
    # Without a group name the producer asks the members which group they serve: asked while
    # none listens (a group restarting) it failed at once, whatever its timeout.
    c = TestCluster(tmp_path, member_dirs=True, extra=[*FAST, "--message-store"])
    starter = threading.Timer(1.0, c.start_all)
    try:
        starter.start()
        with Producer(c.peers, timeout=30.0) as p:
            r = p.send(Message("Early", b"x"), queue_id=0)
        assert r.ok, r
    finally:
        starter.cancel()
        starter.join()
        c.close()


def test_follower_reads_go_to_a_follower_when_the_leader_is_listed_first(cluster: TestCluster) -> None:
    # A consumer that only reads never asks for the leader; the pulls name it, and reads go on
    # to another member.
    c = cluster
    with Producer(c.peers) as p:
        assert p.send(Message("Followers", b"x"), queue_id=0).ok
    leader = c.wait_leader()
    first = ";".join(f"{m}-127.0.0.1:{c.ports[m]}" for m in [leader, *(m for m in c.ids if m != leader)])
    with Consumer(first, "f", "Followers", read_from="follower") as con:
        members = [con.pull(0, 0, 1, wait=5.0).member for _ in range(4)]
    assert leader not in members[1:], members
