"""ScheduleMessageService in the embedded MessageStore: a delayed message reaches its topic once,
no sooner than its time; progress survives a close in config/delayOffset.json, Java's format;
a Java-written delayOffset.json is honoured."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from dledger.rocketmq.store.config import SLAVE, MessageStoreConfig
from dledger.rocketmq.store.delay_offset import decode_delay_offsets
from dledger.rocketmq.store.message import RMQ_SYS_SCHEDULE_TOPIC, UNIQ_KEY, Message, MessageExt
from dledger.rocketmq.store.message_store import MessageStore

pytestmark = pytest.mark.timeout(120)

MODES = ["classic", "dledger"]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rocketmq-4.9"
# Short levels for speed: level 1 is 1 s, level 2 is 3 s.
LEVELS = "1s 3s"


def config(mode: str, **kw: object) -> MessageStoreConfig:
    return MessageStoreConfig(
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=6000,
        max_hash_slot_num=64,
        max_index_num=256,
        enable_dledger_commit_log=mode == "dledger",
        store_host="192.168.0.10:10911",
        message_delay_level=LEVELS,
    ).replace(**kw)


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def in_queue(s: MessageStore, topic: str, queue_id: int) -> list[MessageExt]:
    s.wait_dispatched()
    return s.get_messages(topic, queue_id, 0, 1000).messages


def test_a_delayed_message_reaches_its_topic_after_its_time_and_once(tmp_path: Path, mode: str) -> None:
    with MessageStore(tmp_path / "s", config(mode)) as s:
        r = s.put_message(Message("T", b"later", queue_id=1, tags="tg", keys="k1", delay_level=1))
        assert r.ok
        scheduled = s.lookup(r.phys_offset)
        assert scheduled is not None and scheduled.topic == RMQ_SYS_SCHEDULE_TOPIC
        time.sleep(0.3)
        assert in_queue(s, "T", 1) == []  # not before its time
        wait_for(lambda: s.max_offset_in_queue("T", 1) >= 1, 10, "the delivery")
        time.sleep(0.6)  # a few more rounds of the service: nothing more
        (m,) = in_queue(s, "T", 1)
    assert m.body == b"later" and m.tags == "tg" and m.keys_string == "k1"
    # Stored no sooner than the level's delay after the schedule-topic record.
    assert m.store_timestamp >= scheduled.store_timestamp + 1000
    # messageTimeup: the producer's msg id kept, DELAY gone, WAIT=false; REAL_* stay, as in Java.
    assert m.properties[UNIQ_KEY] == scheduled.properties[UNIQ_KEY]
    assert "DELAY" not in m.properties and m.properties["WAIT"] == "false"
    assert m.properties["REAL_TOPIC"] == "T" and m.properties["REAL_QID"] == "1"
    assert m.born_timestamp == scheduled.born_timestamp


def test_close_and_reopen_mid_delay_delivers_each_once(tmp_path: Path, mode: str) -> None:
    root = tmp_path / "s"
    with MessageStore(root, config(mode)) as s:
        assert s.put_message(Message("T", b"first", queue_id=0, delay_level=1)).ok
        wait_for(lambda: s.max_offset_in_queue("T", 0) >= 1, 10, "the first delivery")
        assert s.put_message(Message("T", b"second", queue_id=0, delay_level=1)).ok
        assert s.put_message(Message("T", b"third", queue_id=0, delay_level=2)).ok
        # Closed at once: the second and third are not due yet.
    table = decode_delay_offsets((root / "config" / "delayOffset.json").read_text())
    assert table == {1: 1}
    with MessageStore(root, config(mode)) as s:
        wait_for(lambda: s.max_offset_in_queue("T", 0) >= 3, 15, "the rest delivered")
        time.sleep(0.6)
        assert [m.body for m in in_queue(s, "T", 0)] == [b"first", b"second", b"third"]
    assert decode_delay_offsets((root / "config" / "delayOffset.json").read_text()) == {1: 2, 2: 1}


def test_progress_is_written_while_open_every_flush_interval(tmp_path: Path) -> None:
    """Not only at close: a store killed later does not deliver again what the file covers."""
    root = tmp_path / "s"
    path = root / "config" / "delayOffset.json"
    with MessageStore(root, config("classic", flush_delay_offset_interval=200)) as s:
        assert s.put_message(Message("T", b"x", queue_id=0, delay_level=1)).ok
        wait_for(lambda: path.exists() and decode_delay_offsets(path.read_text()) == {1: 1}, 10, "the file")
        assert s.max_offset_in_queue("T", 0) == 1


def test_the_file_is_in_javas_format(tmp_path: Path) -> None:
    """fastjson's pretty print, as the Java-written fixtures hold it: the same text for the same table."""
    java = (FIXTURES / "classic-3topics" / "config" / "delayOffset.json").read_text()
    root = tmp_path / "s"
    with MessageStore(root, config("classic", message_delay_level="1s 1s")) as s:
        for level, n in ((1, 12), (2, 11)):
            for i in range(n):
                assert s.put_message(Message("T", f"{level}-{i}".encode(), queue_id=0, delay_level=level)).ok
        wait_for(lambda: s.max_offset_in_queue("T", 0) == 23, 15, "all delivered")
    ours = (root / "config" / "delayOffset.json").read_text()
    assert ours == java == '{\n\t"offsetTable":{1:12,2:11\n\t}\n}'
    assert re.fullmatch(r'\{\n\t"offsetTable":\{(\d+:\d+,)*\d+:\d+\n\t\}\n\}', ours)


def fixture_config(name: str) -> MessageStoreConfig:
    """The fixtures' settings (their README), RocketMQ's default delay levels."""
    return MessageStoreConfig(
        mapped_file_size_commit_log=65536,
        mapped_file_size_consume_queue=6000,
        max_hash_slot_num=64,
        max_index_num=256,
        enable_dledger_commit_log=name.startswith("dledger"),
        dledger_group="g",
        dledger_self_id="n0",
    )


@pytest.mark.parametrize("name", ["classic-3topics", "dledger-1node"])
def test_a_java_stores_delay_offsets_are_honoured(tmp_path: Path, name: str) -> None:
    """Java delivered levels 1 and 2 (its delayOffset.json says so) and left six levels pending,
    long due now: a store opened on it delivers those once, the delivered ones never again."""
    src = FIXTURES / name
    java_table = decode_delay_offsets((src / "config" / "delayOffset.json").read_text())
    assert set(java_table) == {1, 2}
    root = tmp_path / name
    shutil.copytree(src, root, ignore=shutil.ignore_patterns("expected"))
    with MessageStore(src, readonly=True) as ro:
        levels = {q + 1: cq.max_offset for t, q, cq in ro.consume_queues if t == RMQ_SYS_SCHEDULE_TOPIC}
        pending = [
            m
            for q in ro.consume_queues.queue_ids(RMQ_SYS_SCHEDULE_TOPIC)
            if q + 1 not in java_table
            for m in ro.get_messages(RMQ_SYS_SCHEDULE_TOPIC, q, 0, 1000).messages
        ]
        before = {(t, q): cq.max_offset for t, q, cq in ro.consume_queues if t != RMQ_SYS_SCHEDULE_TOPIC}
    # Levels 1 and 2 were delivered up to their ends: nothing of them may come again.
    assert {lv: levels[lv] for lv in java_table} == java_table
    assert len(pending) == sum(n for lv, n in levels.items() if lv not in java_table) > 0

    def delivered(s: MessageStore) -> list[MessageExt]:
        s.wait_dispatched()
        out = []
        for t, q, cq in list(s.consume_queues):
            if t != RMQ_SYS_SCHEDULE_TOPIC and cq.max_offset > before.get((t, q), 0):
                out += s.get_messages(t, q, before.get((t, q), 0), 1000).messages
        return out

    with MessageStore(root, fixture_config(name)) as s:
        wait_for(lambda: len(delivered(s)) >= len(pending), 30, "the pending levels delivered")
        time.sleep(0.6)
        got = delivered(s)
    assert sorted((m.topic, m.body) for m in got) == sorted((m.properties["REAL_TOPIC"], m.body) for m in pending)
    table = decode_delay_offsets((root / "config" / "delayOffset.json").read_text())
    assert table == {lv: n for lv, n in levels.items()}


def test_a_slave_and_a_reader_deliver_nothing(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore(root, config("classic"), schedule=False) as s:  # its owner would start it
        assert s.put_message(Message("T", b"x", queue_id=0, delay_level=1)).ok
    with MessageStore(root, config("classic", broker_role=SLAVE)) as s:
        time.sleep(1.5)
        assert s.max_offset_in_queue("T", 0) == 0
        with MessageStore(root, readonly=True) as ro:
            assert ro.schedule is None
    assert not (root / "config" / "delayOffset.json").exists()


def test_a_promoted_slave_delivers_from_the_offsets_its_master_sent(tmp_path: Path) -> None:
    """SlaveSynchronize hands the master's table to the slave's service (update_offsets): the
    file is written, and once promoted the store delivers only what the master had not."""
    root = tmp_path / "s"
    with MessageStore(root, config("classic"), schedule=False) as s:
        for body in (b"delivered by the master", b"left to the slave"):
            assert s.put_message(Message("T", body, queue_id=0, delay_level=1)).ok
    with MessageStore(root, config("classic", broker_role=SLAVE)) as s:
        assert s.schedule is not None
        assert s.schedule.update_offsets({1: 1})
        assert decode_delay_offsets((root / "config" / "delayOffset.json").read_text()) == {1: 1}
        time.sleep(1.2)  # due now; a slave delivers nothing
        assert s.max_offset_in_queue("T", 0) == 0
        s.change_role("ASYNC_MASTER")
        wait_for(lambda: s.max_offset_in_queue("T", 0) >= 1, 10, "the promoted store's delivery")
        time.sleep(0.6)
        assert [m.body for m in in_queue(s, "T", 0)] == [b"left to the slave"]


def test_the_service_sleeps_until_the_next_delivery(tmp_path: Path, mode: str) -> None:
    """No polling ten times a second: an idle store's thread wakes about once per shortest
    level delay (1 s here), one with a message due in 3 s wakes for it, and a put made while it
    sleeps is still delivered on time."""
    with MessageStore(tmp_path / "s", config(mode)) as s:
        assert s.schedule is not None
        time.sleep(0.3)
        start = s.schedule.rounds
        time.sleep(2.0)
        assert s.schedule.rounds - start <= 3  # polling every 0.1 s made 20
        r = s.put_message(Message("T", b"later", queue_id=0, delay_level=2))  # 3 s
        assert r.ok
        scheduled = s.lookup(r.phys_offset)
        assert scheduled is not None
        wait_for(lambda: s.max_offset_in_queue("T", 0) >= 1, 10, "the delivery")
        (m,) = in_queue(s, "T", 0)
        assert m.store_timestamp >= scheduled.store_timestamp + 3000
        # On time: woken for it, not a polling period later (1 s of slack for a loaded machine).
        assert m.store_timestamp <= scheduled.store_timestamp + 3000 + 1000
