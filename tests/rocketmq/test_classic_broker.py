"""Classic brokers as processes (``dledger mq broker``): a master and slaves under producer load,
byte-identical commit logs, a slave killed and restarted, SYNC_MASTER's answers, a slave
promoted after its sync master is killed."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dledger.rocketmq.client.consumer import Consumer
from dledger.rocketmq.client.producer import Producer
from dledger.rocketmq.client.send_result import SendResult
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.delay_offset import decode_delay_offsets
from dledger.rocketmq.store.message import Message
from dledger.rocketmq.store.message_store import MessageStore
from dledger.testing import ClassicBroker, Proxy, consecutive_free_ports

FILE = 256 * 1024
Broker = ClassicBroker


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[Callable[..., Broker]]:
    made: list[Broker] = []

    def make(name: str, role: str, master_ha: str | None = None, conf: str = "", master: str | None = None) -> Broker:
        b = Broker(tmp_path, name, role, master_ha, conf, FILE, master)
        made.append(b)
        return b.start()

    yield make
    for b in made:
        if b.proc is not None:
            b.kill()


def sigstop(pid: int) -> None:
    """SIGSTOP, returning once every thread of the process is stopped (a thread still on a CPU
    when the signal comes runs on until it is kicked off it)."""
    os.kill(pid, signal.SIGSTOP)

    def all_stopped() -> bool:
        for task in Path(f"/proc/{pid}/task").iterdir():
            stat = (task / "stat").read_text()
            if stat[stat.rindex(")") + 2] not in "Tt":
                return False
        return True

    wait_for(all_stopped, 10)


def stats(peer: str) -> dict:
    with Consumer(peer, "probe", "", read_from="follower", timeout=5) as c:
        return next(iter(c.stats().values()))


def wait_for(cond: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.05)


def produce(peers: str, n: int, tag: str) -> list[SendResult]:
    out: list[SendResult] = []
    with Producer(peers, timeout=20) as p:
        for k in range(0, n, 50):
            res = p.send_batch(
                [Message("TopicHA", f"{tag}-{i}".encode() * 20) for i in range(k, k + 50)], queue_id=k // 50 % 4
            )
            out.extend(res)
    return out


def caught_up(master: Broker, slave: Broker) -> Callable[[], bool]:
    def check() -> bool:
        m, s = stats(master.addr), stats(slave.addr)
        return m["committed_phys_offset"] == s["committed_phys_offset"] == m["ha_push2slave_max_offset"]

    return check


def test_master_and_slaves_under_load_replicate_byte_for_byte(brokers: Callable[..., Broker]) -> None:
    master = brokers("m", "ASYNC_MASTER")
    s1 = brokers("s1", "SLAVE", master.ha)
    s2 = brokers("s2", "SLAVE", master.ha)
    peers = f"{master.addr};{s1.addr};{s2.addr}"
    sent = produce(peers, 3000, "a")
    assert all(r.ok for r in sent)
    wait_for(caught_up(master, s1))
    wait_for(caught_up(master, s2))
    end = stats(master.addr)["committed_phys_offset"]
    assert end > 2 * FILE
    # A slave serves reads, and refuses puts.
    with Consumer(s1.addr, "g", "TopicHA", read_from="follower") as c:
        got = c.pull(0, 0, 32, wait=10)
        assert [m.body for m in got.messages][:2] == [b"a-0" * 20, b"a-1" * 20]
    with Producer(s1.addr, timeout=1.5) as p:
        refused = p.send(Message("TopicHA", b"no"))
    assert not refused.ok and "SERVICE_NOT_AVAILABLE" in (refused.status + refused.reason)
    for b in (s1, s2, master):
        assert b.stop() == 0
        assert not (b.dir / "abort").exists()
    m_bytes = master.log_bytes(0, end)
    assert s1.log_bytes(0, end) == m_bytes
    assert s2.log_bytes(0, end) == m_bytes

    # The records of the producer's packed batches say where they are, as RocketMQ's do:
    # QUEUEOFFSET (at 20) and PHYSICALOFFSET (at 28) match the consume queue's units.
    # The slaves built their consume queues from the same records: the same files, byte for byte.
    def queues(root: Path) -> dict[str, bytes]:
        return {str(f.relative_to(root)): f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file()}

    m_queues = queues(master.dir / "consumequeue")
    assert m_queues and queues(s1.dir / "consumequeue") == m_queues == queues(s2.dir / "consumequeue")
    small = MessageStoreConfig(mapped_file_size_consume_queue=6000, max_hash_slot_num=64, max_index_num=4096)
    with MessageStore(s2.dir, small, readonly=True) as ro:
        n = 0
        for q in range(4):
            for m in ro.get_messages("TopicHA", q, 0, 10_000, 1 << 30).messages:
                qo, phys = struct.unpack_from(">qq", m_bytes, m.phys_offset + 20)
                assert (qo, phys) == (m.queue_offset, m.phys_offset)
                n += 1
        assert n == 3000


def test_a_killed_slave_resumes_from_its_own_max_offset(brokers: Callable[..., Broker]) -> None:
    master = brokers("m", "ASYNC_MASTER")
    slave = brokers("s", "SLAVE", master.ha)
    produce(master.addr, 1000, "a")
    wait_for(caught_up(master, slave))
    had = stats(slave.addr)["committed_phys_offset"]
    slave.kill()
    produce(master.addr, 1000, "b")
    slave.start()
    wait_for(caught_up(master, slave))
    end = stats(master.addr)["committed_phys_offset"]
    assert end > had
    # The restarted slave asked for the transfer to start where its own log ends.
    assert f"requests offset {had}" in (master.root / "m.log").read_text()
    slave.stop()
    master.stop()
    assert slave.log_bytes(0, end) == master.log_bytes(0, end)


def test_sync_master_answers_as_its_slaves_allow(brokers: Callable[..., Broker]) -> None:
    master = brokers("m", "SYNC_MASTER", conf="syncFlushTimeout=1000\n")
    with Producer(master.addr, timeout=10) as p:
        # No slave: SLAVE_NOT_AVAILABLE at once (the message is in the master's log all the same).
        alone = p.send(Message("TopicHA", b"alone"))
        assert alone.status == "SLAVE_NOT_AVAILABLE"
        # ...so its answer carries its queue offset and record id, as Java's (sendOK).
        assert alone.queue_offset == 0 and alone.offset_msg_id, alone
        slave = brokers("s", "SLAVE", master.ha)
        wait_for(lambda: stats(master.addr)["ha_slaves"] == 1)
        ok = p.send_batch([Message("TopicHA", b"x%d" % i) for i in range(20)], queue_id=1)
        assert all(r.ok for r in ok)
        # Every message a SYNC_MASTER answered SEND_OK for is on the slave when the answer comes.
        assert stats(slave.addr)["committed_phys_offset"] >= stats(master.addr)["committed_phys_offset"]
        # A slave that stops acknowledging (stopped, its link still open): FLUSH_SLAVE_TIMEOUT
        # after syncFlushTimeout.
        assert slave.proc is not None
        sigstop(slave.proc.pid)
        try:
            late = p.send(Message("TopicHA", b"late"))
        finally:
            os.kill(slave.proc.pid, signal.SIGCONT)
        assert late.status == "FLUSH_SLAVE_TIMEOUT"
        assert late.queue_offset >= 0 and late.offset_msg_id, late


def test_promoted_slave_of_a_killed_sync_master_has_every_acknowledged_message(
    brokers: Callable[..., Broker],
) -> None:
    master = brokers("m", "SYNC_MASTER", conf="syncFlushTimeout=500\n")
    slave = brokers("s", "SLAVE", master.ha)
    wait_for(lambda: stats(master.addr)["ha_slaves"] == 1)
    acked: list[str] = []
    answers: list[str] = []
    assert slave.proc is not None
    with Producer(master.addr, timeout=10) as p:
        for k in range(24):
            if k == 20:
                # The slave stops acknowledging: what the master writes now is on it alone, and
                # it must not answer SEND_OK for it.
                sigstop(slave.proc.pid)
            for r in p.send_batch([Message("TopicHA", b"m%d-%d" % (k, i)) for i in range(25)], queue_id=k % 4):
                answers.append(r.status)
                if r.ok:
                    acked.append(r.msg_id)
        master.kill()
    os.kill(slave.proc.pid, signal.SIGCONT)
    assert len(acked) == 500
    assert answers[500:] == ["FLUSH_SLAVE_TIMEOUT"] * 100
    # Promotion by restart: the slave's store opened as a master.
    assert slave.stop() == 0
    slave.role = "ASYNC_MASTER"
    slave.master_ha = None
    slave.start()
    seen: set[str] = set()
    with Consumer(slave.addr, "g", "TopicHA") as c:
        for q in range(4):
            off = 0
            while True:
                got = c.pull(q, off, 256)
                if not got.messages:
                    break
                seen.update(m.msg_id for m in got.messages)
                off = got.next_begin_offset
    assert set(acked) <= seen
    # It takes puts now, after the last acknowledged ones.
    with Producer(slave.addr, timeout=10) as p:
        assert p.send(Message("TopicHA", b"after"), queue_id=0).ok


def test_role_switch_without_restart(brokers: Callable[..., Broker]) -> None:
    """The slave becomes the master and takes puts after the last message it holds; the old
    master becomes its slave and follows it."""
    master = brokers("m", "ASYNC_MASTER")
    slave = brokers("s", "SLAVE", master.ha)
    produce(master.addr, 500, "a")
    wait_for(caught_up(master, slave))
    before = stats(slave.addr)
    assert before["role"] == "FOLLOWER"
    out = subprocess.run(
        [sys.executable, "-m", "dledger.cli", "mq", "role", "--peers", slave.addr, "--to", "master"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=slave.root,
    )
    assert out.returncode == 0, out.stderr
    assert "ASYNC_MASTER" in out.stdout
    from dledger.rocketmq.client.mq_admin import update_broker_role

    assert update_broker_role(master.addr, "SLAVE", slave.ha)["role"] == "FOLLOWER"
    with Producer(f"{master.addr};{slave.addr}", timeout=20) as p:
        res = p.send_batch([Message("TopicHA", b"b%d" % i) for i in range(10)], queue_id=0)
    assert all(r.ok for r in res)
    # Queue offsets go on from the last message the new master held (rebuilt from its queues).
    assert res[0].queue_offset == 150  # queue 0 had batches 0, 4 and 8 of 50
    wait_for(caught_up(slave, master))
    end = stats(slave.addr)["committed_phys_offset"]
    slave.stop()
    master.stop()
    assert master.log_bytes(0, end) == slave.log_bytes(0, end)


def test_a_cut_link_resumes_when_restored(brokers: Callable[..., Broker]) -> None:
    master = brokers("m", "ASYNC_MASTER")
    proxy = Proxy(master.ha_port)
    try:
        slave = brokers("s", "SLAVE", f"127.0.0.1:{proxy.port}")
        produce(master.addr, 500, "a")
        wait_for(caught_up(master, slave))
        proxy.block()
        wait_for(lambda: not stats(slave.addr)["ha_connected"])
        produce(master.addr, 500, "b")
        assert stats(slave.addr)["committed_phys_offset"] < stats(master.addr)["committed_phys_offset"]
        proxy.unblock()
        wait_for(caught_up(master, slave))
        end = stats(master.addr)["committed_phys_offset"]
        slave.stop()
        master.stop()
        assert slave.log_bytes(0, end) == master.log_bytes(0, end)
    finally:
        proxy.close()


def test_consumer_reads_from_the_slave_while_the_master_is_down(brokers: Callable[..., Broker]) -> None:
    master = brokers("m", "ASYNC_MASTER")
    slave = brokers("s", "SLAVE", master.ha)
    produce(master.addr, 100, "a")
    wait_for(caught_up(master, slave))
    with Consumer(f"{master.addr};{slave.addr}", "g", "TopicHA", timeout=20) as c:
        assert c.pull(0, 0, 10, wait=10).member == master.addr  # the master, while it is up
        master.kill()
        got = c.pull(0, 0, 10, wait=10)
    assert got.member == slave.addr
    assert [m.body for m in got.messages][:1] == [b"a-0" * 20]


def test_slave_copies_the_masters_consumer_offsets(brokers: Callable[..., Broker]) -> None:
    master = brokers("m", "ASYNC_MASTER")
    slave = brokers("s", "SLAVE", master.ha, master=master.addr)
    produce(master.addr, 100, "a")
    with Consumer(master.addr, "groupA", "TopicHA") as c:
        c.commit(1, 17)
    # Within SlaveSynchronize's first round (3 s) or the next (10 s later).
    with Consumer(slave.addr, "groupA", "TopicHA", read_from="follower") as c:
        wait_for(lambda: c.committed(1) == 17, 30)
    # The table is taken in memory, then written: the file follows a moment later.
    path = slave.dir / "config" / "consumerOffset.json"
    wait_for(path.exists, 10)
    text = path.read_text()
    assert '"TopicHA@groupA":{1:17' in text.replace("\n", "").replace("\t", "").replace(" ", "")
    slave.stop()
    master.stop()
    # The master's file, written at its clean stop, says the same, byte for byte.
    assert (master.dir / "config" / "consumerOffset.json").read_text() == text


def test_a_retry_past_max_reconsume_times_goes_to_the_dead_letter_queue(brokers: Callable[..., Broker]) -> None:
    master = brokers("m", "ASYNC_MASTER")
    with Producer(master.addr, timeout=10) as p:
        again = p.send(Message("%RETRY%groupA", b"try 16", reconsume_times=15), queue_id=0)
        dead = p.send(Message("%RETRY%groupA", b"try 17", reconsume_times=16, delay_level=3), queue_id=0)
    assert again.ok and dead.ok
    with Consumer(master.addr, "groupA", "%RETRY%groupA") as c:
        assert [m.body for m in c.pull(0, 0, 10, wait=10).messages] == [b"try 16"]
    with Consumer(master.addr, "groupA", "%DLQ%groupA") as c:
        got = c.pull(0, 0, 10, wait=5).messages  # no delay: the level is dropped
    assert [(m.body, m.reconsume_times) for m in got] == [(b"try 17", 16)]


def _queue_total(peer: str) -> int:
    """Messages in every queue but the schedule topic's (the broker's stats)."""
    return sum(hi for topic, _q, _lo, hi in stats(peer)["queues"] if topic != "SCHEDULE_TOPIC_XXXX")


def test_master_delivers_delayed_messages_and_writes_delay_offset_json(brokers: Callable[..., Broker]) -> None:
    master = brokers("m", "ASYNC_MASTER")
    with Producer(master.addr, timeout=10) as p:
        assert p.send(Message("TopicD", b"later", delay_level=1), queue_id=2).ok
    with Consumer(master.addr, "g", "TopicD") as c:
        wait_for(lambda: c.max_offset(2) == 1, 20)
        (m,) = c.pull(2, 0, 10).messages
    assert m.body == b"later"
    master.stop()
    assert (master.dir / "config" / "delayOffset.json").read_text() == '{\n\t"offsetTable":{1:1\n\t}\n}'


def test_a_java_stores_delay_offsets_are_kept(tmp_path: Path, brokers: Callable[..., Broker]) -> None:
    """The Java broker delivered levels 1 and 2 (its delayOffset.json says so) and left six levels
    pending: a master opened on its store delivers the pending ones once and those twice never."""
    src = Path(__file__).parent.parent / "fixtures" / "rocketmq-4.9" / "classic-3topics"
    shutil.copytree(src, tmp_path / "m", ignore=shutil.ignore_patterns("expected"))
    with MessageStore(tmp_path / "m", readonly=True) as ro:
        pending = {
            q + 1: ro.max_offset_in_queue("SCHEDULE_TOPIC_XXXX", q)
            for _t, q, _cq in ro.consume_queues
            if _t == "SCHEDULE_TOPIC_XXXX" and q not in (0, 1)
        }
    assert len(pending) == 6
    master = brokers("m", "ASYNC_MASTER", conf="maxIndexNum=256\nmappedFileSizeCommitLog=65536\n")
    want = sum(pending.values())
    # What was there before the broker delivered anything is the Java store's own count.
    with MessageStore(src, readonly=True) as ro:
        before = sum(cq.max_offset for t, _q, cq in ro.consume_queues if t != "SCHEDULE_TOPIC_XXXX")
    wait_for(lambda: _queue_total(master.addr) >= before + want, 30)
    time.sleep(1.0)  # a few more rounds: nothing more
    assert _queue_total(master.addr) == before + want
    master.stop()
    table = decode_delay_offsets((master.dir / "config" / "delayOffset.json").read_text())
    assert table == {1: 12, 2: 11, **pending}


def _topic_json(name: str, queues: int) -> dict:
    """A TopicConfig as the Java broker writes it into topics.json (a read-write topic)."""
    return {
        "order": False,
        "perm": 6,
        "readQueueNums": queues,
        "topicFilterType": "SINGLE_TAG",
        "topicName": name,
        "topicSysFlag": 0,
        "writeQueueNums": queues,
    }


def test_a_put_on_listen_keeps_its_topic_in_topics_json_without_remoting(brokers: Callable[..., Broker]) -> None:
    """A broker without remoting writes the topic a put on its own protocol made into
    config/topics.json (Java's text, its built-in topics, the broker's queue count), and reads
    the file back at a restart: a topic only the file knows survives the next write."""
    master = brokers("m", "ASYNC_MASTER", conf="defaultTopicQueueNums=6\n")
    with Producer(master.addr, timeout=10) as p:
        assert p.send(Message("TopicNew", b"x"), queue_id=5).ok
    path = master.dir / "config" / "topics.json"
    assert master.stop() == 0
    text = path.read_text()
    assert text.startswith('{\n\t"dataVersion":{\n\t\t"counter":')  # fastjson's pretty text
    data = json.loads(text)
    table = data["topicConfigTable"]
    assert table["TopicNew"] == _topic_json("TopicNew", 6)
    assert {"TBW102", "DefaultCluster", "broker-a"} <= set(table)
    assert table["TBW102"]["perm"] == 7  # the auto-create key inherits
    # A topic only the file holds (a Java broker made it; no messages): kept after a restart.
    table["TopicJava"] = _topic_json("TopicJava", 8)
    path.write_text(json.dumps(data))
    master.start()
    with Producer(master.addr, timeout=10) as p:
        assert p.send(Message("TopicTwo", b"y"), queue_id=0).ok
    assert master.stop() == 0
    again = json.loads(path.read_text())
    assert again["topicConfigTable"]["TopicJava"] == _topic_json("TopicJava", 8)
    assert again["topicConfigTable"]["TopicNew"] == _topic_json("TopicNew", 6)
    assert again["topicConfigTable"]["TopicTwo"] == _topic_json("TopicTwo", 6)
    assert again["dataVersion"]["counter"] > data["dataVersion"]["counter"]


# MixAll's groups SubscriptionGroupManager.init puts in every subscriptionGroup.json.
JAVA_GROUPS = {
    "TOOLS_CONSUMER",
    "FILTERSRV_CONSUMER",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PULL",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
}


def group_json(name: str) -> dict:
    """A SubscriptionGroupConfig as the Java broker writes it (an auto-created group)."""
    return {
        "brokerId": 0,
        "consumeBroadcastEnable": True,
        "consumeEnable": True,
        "consumeFromMinEnable": True,
        "groupName": name,
        "notifyConsumerIdsChangedEnable": True,
        "retryMaxTimes": 16,
        "retryQueueNums": 1,
        "whichBrokerWhenConsumeSlowly": 1,
    }


def test_an_offset_commit_on_listen_keeps_its_group_in_subscription_group_json_without_remoting(
    brokers: Callable[..., Broker],
) -> None:
    """A broker without remoting writes the group a consumer of its own protocol committed for
    into config/subscriptionGroup.json (Java's text and seven built-in groups), and reads the
    file back at a restart: a group only the file knows survives the next write."""
    master = brokers("m", "ASYNC_MASTER")
    with Producer(master.addr, timeout=10) as p:
        assert p.send(Message("TopicG", b"x"), queue_id=0).ok
    with Consumer(master.addr, "GroupNew", "TopicG", timeout=10) as c:
        c.commit(0, 1)
    path = master.dir / "config" / "subscriptionGroup.json"
    assert master.stop() == 0
    text = path.read_text()
    assert text.startswith('{\n\t"dataVersion":{\n\t\t"counter":')  # fastjson's pretty text
    data = json.loads(text)
    table = data["subscriptionGroupTable"]
    assert set(table) == JAVA_GROUPS | {"GroupNew"}
    assert table["GroupNew"] == group_json("GroupNew")
    assert all(table[g] == group_json(g) for g in JAVA_GROUPS)
    table["GroupJava"] = {**group_json("GroupJava"), "retryMaxTimes": 3}  # a Java broker's, no offsets
    path.write_text(json.dumps(data))
    master.start()
    with Consumer(master.addr, "GroupTwo", "TopicG", timeout=10) as c:
        assert c.committed(0) == -1
        c.commit(0, 1)
    assert master.stop() == 0
    again = json.loads(path.read_text())["subscriptionGroupTable"]
    assert set(again) == JAVA_GROUPS | {"GroupNew", "GroupJava", "GroupTwo"}
    assert again["GroupJava"]["retryMaxTimes"] == 3
    assert json.loads(path.read_text())["dataVersion"]["counter"] > data["dataVersion"]["counter"]


def test_mq_cluster_classic_starts_a_pair_and_stops_it_cleanly(tmp_path: Path) -> None:
    port = consecutive_free_ports(12)
    cmd = [sys.executable, "-m", "dledger.cli", "mq", "cluster", "--classic", "--slaves", "1"]
    proc = subprocess.Popen(
        [*cmd, "--dir", str(tmp_path / "st"), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=tmp_path,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if "classic brokers running" in line or not line:
                break
        assert sum(1 for x in lines if x.startswith("sent ")) == 3, lines
        peers = f"127.0.0.1:{port};127.0.0.1:{port + 10}"
        assert peers in lines[-1]
        first = next(x for x in lines if x.startswith("sent ")).split()
        queue, offset = int(first[first.index("queue") + 1]), int(first[first.index("offset") + 1])
        with Consumer(peers, "g", "TopicTest") as c:
            # (the master's dispatch may not have reached it yet: the pull waits for it)
            assert [m.body for m in c.pull(queue, offset, 1, wait=10).messages] == [b"hello 0"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
    finally:
        # The whole session it started: a failure before the SIGINT must not leave its brokers.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    for k in (0, 1):
        assert (tmp_path / "st" / f"broker-{k}" / "commitlog").is_dir()
        assert not (tmp_path / "st" / f"broker-{k}" / "abort").exists()


def test_a_broker_whose_port_is_taken_says_so_and_leaves_its_store_clean(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "dledger.cli",
                "mq",
                "broker",
                "--store-dir",
                str(tmp_path / "b"),
                "--listen",
                f"127.0.0.1:{port}",
                "--ha-port",
                "0",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
    assert out.returncode == 1
    assert "address already in use" in out.stderr.lower(), out.stderr
    assert (tmp_path / "b" / "commitlog").is_dir() and not (tmp_path / "b" / "abort").exists()
