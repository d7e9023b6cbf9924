"""MessageStore round trips in both commit-log modes: what is put comes back by queue offset, by
physical offset, by msgId and by key, with RocketMQ's statuses."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.message import (
    RMQ_SYS_SCHEDULE_TOPIC,
    UNIQ_KEY,
    Message,
    MessageExt,
    MessageSysFlag,
    decode_properties,
    encode_properties,
    format_host,
)
from dledger.rocketmq.store.message_store import MessageStore
from dledger.rocketmq.store.records import messages_from_columns
from dledger.rocketmq.store.status import GetMessageStatus, PutMessageStatus

# DLedger mode needs MmapFileStore(body_pos_patch=...) (the AppendHook); it runs, never skips.
MODES = ["classic", "dledger"]


def quiet_hour() -> str:
    """A deleteWhen hour that is neither the wall clock's hour, the next one (a run that crosses
    it) nor noon (the tests' "not the hour" time). The stores' clean services run on the real
    clock: with the default "04" they deleted the files a test had back-dated between 04:00 and
    05:00, before the test's own call at noon could count them."""
    now = time.localtime().tm_hour
    return f"{next(h for h in (4, 16, 8) if h not in (now, (now + 1) % 24, 12)):02d}"


def small_config(mode: str, **kw: object) -> MessageStoreConfig:
    cfg = MessageStoreConfig(
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=300 * 20,
        max_hash_slot_num=64,
        max_index_num=256,
        enable_dledger_commit_log=mode == "dledger",
        store_host="192.168.0.10:10911",
        delete_when=quiet_hour(),
    )
    return cfg.replace(**kw)


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store(tmp_path: Path, mode: str):
    s = MessageStore(tmp_path / "store", small_config(mode))
    yield s
    s.close()


def test_properties_codec() -> None:
    props = {"a": "1", "KEYS": "k1 k2", "名": "值\tx"}
    text = encode_properties(props)
    assert text == "a\x011\x02KEYS\x01k1 k2\x02名\x01值\tx"
    assert decode_properties(text) == props
    # string2messageProperties skips empty names/values and short pieces; a later name wins
    assert decode_properties("\x01x\x02a\x01\x02b\x01c\x02b\x01d") == {"b": "d"}
    assert encode_properties({}) == ""


def test_host_formatting() -> None:
    assert format_host(("2001:db8::10", 10911)) == "[2001:db8:0:0:0:0:0:10]:10911"
    assert format_host(("10.1.2.3", 5)) == "10.1.2.3:5"


def test_round_trip(store: MessageStore) -> None:
    msgs = [
        Message(
            "TopicA",
            b"hello",
            queue_id=1,
            tags="TagA",
            keys=["k1", "k2"],
            born_host=("2001:db8::1", 1234),
            properties={"user": "v"},
        ),
        Message("TopicA", b"", queue_id=1),  # empty body, no user properties
        Message("主题-ü", "多字节".encode(), queue_id=0, tags="标签X", keys="订单-🚀-1"),
        Message("TopicA", b"x" * 3000, queue_id=1, flag=7, reconsume_times=2, born_timestamp=1234567),
    ]
    results = [store.put_message(m) for m in msgs]
    assert [r.status for r in results] == [PutMessageStatus.PUT_OK] * 4
    assert [r.queue_offset for r in results] == [0, 1, 0, 2]
    assert store.wait_dispatched()
    got = store.get_messages("TopicA", 1, 0, 32)
    assert got.status == GetMessageStatus.FOUND
    assert [m.queue_offset for m in got.messages] == [0, 1, 2]
    assert got.next_begin_offset == 3 and got.min_offset == 0 and got.max_offset == 3
    first, empty, big = got.messages
    assert first.body == b"hello" and first.tags == "TagA" and first.keys == "k1 k2"
    assert first.born_host == ("2001:db8::1", 1234)
    assert first.sys_flag & MessageSysFlag.BORNHOST_V6_FLAG
    assert first.properties["user"] == "v" and len(first.properties[UNIQ_KEY]) in (32, 56)
    assert first.store_host == ("192.168.0.10", 10911)
    assert first.msg_id == results[0].msg_id and len(first.msg_id) == 32
    assert empty.body == b"" and empty.tags is None
    assert big.flag == 7 and big.reconsume_times == 2 and big.born_timestamp == 1234567 and len(big.body) == 3000
    other = store.get_messages("主题-ü", 0, 0).messages[0]
    assert other.body == "多字节".encode() and other.tags == "标签X" and other.keys == "订单-🚀-1"
    # by offset, by msgId, by key
    for r, m in zip(results, msgs, strict=True):
        found = store.lookup(r.phys_offset)
        # PHYSICALOFFSET as written: the offset itself (classic) or entry pos + 48 (DLedger's AppendHook)
        assert found is not None and found.body == m.body and found.stored_phys_offset == r.phys_offset
        by_id = store.view_by_msg_id(r.msg_id)
        assert by_id is not None and by_id.phys_offset == r.phys_offset
    assert [m.phys_offset for m in store.query_by_key("TopicA", "k2")] == [results[0].phys_offset]
    assert [m.body for m in store.query_by_key("主题-ü", "订单-🚀-1")] == ["多字节".encode()]
    uniq = first.properties[UNIQ_KEY]
    assert store.query_offsets_by_key("TopicA", uniq) == [results[0].phys_offset]
    assert store.query_by_key("TopicB", "k2") == []


def test_store_timestamps_ordered_and_offset_for_timestamp(store: MessageStore) -> None:
    offsets = []
    for i in range(20):
        offsets.append(store.put_message(Message("T", b"%d" % i)).phys_offset)
        if i % 5 == 4:
            time.sleep(0.01)
    store.wait_dispatched()
    msgs = store.get_messages("T", 0, 0, 32).messages
    ts = [m.store_timestamp for m in msgs]
    assert ts == sorted(ts)
    assert store.offset_for_timestamp("T", 0, ts[0] - 10_000) == 0
    hit = store.offset_for_timestamp("T", 0, ts[10])
    assert msgs[hit].store_timestamp == ts[10]


def test_get_message_statuses(store: MessageStore) -> None:
    assert store.get_messages("none", 0, 0).status == GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    for i in range(5):
        store.put_message(Message("T", b"m%d" % i))
    store.wait_dispatched()
    assert store.get_messages("T", 0, 5).status == GetMessageStatus.OFFSET_OVERFLOW_ONE
    # Past the end: sent to the end (4.9.4's nextOffsetCorrection), never back to 0 to replay.
    res = store.get_messages("T", 0, 9)
    assert res.status == GetMessageStatus.OFFSET_OVERFLOW_BADLY and res.next_begin_offset == 5
    res = store.get_messages("T", 0, 1, max_count=2)
    assert res.status == GetMessageStatus.FOUND and [m.body for m in res.messages] == [b"m1", b"m2"]
    assert res.next_begin_offset == 3
    # max_bytes: at least one message, then stop before going over
    one = res.messages[0].size
    res = store.get_messages("T", 0, 0, max_count=5, max_bytes=one + 1)
    assert len(res.messages) == 1 and res.next_begin_offset == 1


def test_batch_put_spans_files_with_blank_records(tmp_path: Path, mode: str) -> None:
    s = MessageStore(tmp_path / "s", small_config(mode))
    try:
        bodies = [os.urandom(700 + i) for i in range(300)]  # > 200 KiB: several 64 KiB files
        res = s.put_messages([Message("B", b, queue_id=3, keys=f"key-{i}") for i, b in enumerate(bodies)])
        assert res.status == PutMessageStatus.PUT_OK and res.queue_offset == 0
        assert res.append_result is not None and res.append_result.queue_offsets is not None
        assert list(res.append_result.queue_offsets) == list(range(300))
        s.wait_dispatched()
        got = []
        off = 0
        while True:
            r = s.get_messages("B", 3, off, 32)
            if r.status != GetMessageStatus.FOUND:
                break
            got += [m.body for m in r.messages]
            off = r.next_begin_offset
        assert got == bodies
        assert [m.body for m in s.query_by_key("B", "key-250")] == [bodies[250]]
        assert [m.body for m in s.iter_messages()] == bodies
    finally:
        s.close()


def test_bad_input_writes_nothing(store: MessageStore) -> None:
    before = store.max_phys_offset
    cases = [
        Message("x" * 128, b"body"),  # topic over 127 bytes
        Message("é" * 64, b"body"),  # 128 bytes in UTF-8
        Message("bad\udc80topic", b"body"),  # not encodable as UTF-8
        Message("T", b"body", properties={"p": "v" * 40000}),  # properties over 32767
        Message("T", b"x" * (4 * 1024 * 1024)),  # over max_message_size
        Message("T", b"body", queue_id=-1),
        Message("", b"body"),
    ]
    for m in cases:
        res = store.put_message(m)
        assert res.status == PutMessageStatus.MESSAGE_ILLEGAL, m.topic[:10]
        assert res.reason
    # one bad message refuses the whole batch
    res = store.put_messages([Message("T", b"ok"), Message("x" * 200, b"bad")])
    assert res.status == PutMessageStatus.MESSAGE_ILLEGAL
    assert store.max_phys_offset == before
    assert store.get_messages("T", 0, 0).status == GetMessageStatus.NO_MATCHED_LOGIC_QUEUE


def test_numbers_java_cannot_hold_are_refused(store: MessageStore) -> None:
    """A flag, sys flag, born time... past its Java int/long has no room in the record: it was
    an UNKNOWN_ERROR with a traceback from the encoder. Refused, nothing written."""
    before = store.max_phys_offset
    for m in [
        Message("T", b"x", flag=1 << 40),
        Message("T", b"x", flag=-(1 << 31) - 1),
        Message("T", b"x", sys_flag=1 << 33),
        Message("T", b"x", reconsume_times=1 << 31),
        Message("T", b"x", born_timestamp=1 << 70),
        Message("T", b"x", prepared_offset=1 << 63),
        # Not integers: a float or a bool compared as a number and was stored truncated, a str
        # raised TypeError.
        Message("T", b"x", reconsume_times=2.5),  # type: ignore[arg-type]
        Message("T", b"x", flag=True),
        Message("T", b"x", reconsume_times="3"),  # type: ignore[arg-type]
    ]:
        for res in (store.put_message(m), store.put_messages([m]), store.put_messages([m, Message("T", b"ok")])):
            assert res.status == PutMessageStatus.MESSAGE_ILLEGAL and "int" in res.reason, m
    assert store.put_batch("T", [b"a", b"b"], flag=1 << 40).status == PutMessageStatus.MESSAGE_ILLEGAL
    assert store.put_batch("T", [b"a", b"b"], flag=2.5).status == PutMessageStatus.MESSAGE_ILLEGAL  # type: ignore[arg-type]
    assert store.max_phys_offset == before
    # Java's edges are fine.
    assert store.put_messages([Message("T", b"x", flag=(1 << 31) - 1), Message("T", b"y", flag=-(1 << 31))]).ok


def test_properties_that_would_not_read_back_are_refused(store: MessageStore) -> None:
    """An empty name or value, or a separator inside one, would come back dropped or split
    (string2messageProperties), and a lone surrogate as U+FFFD: refused, nothing written."""
    bad = [{"k": ""}, {"": "v"}, {"a\x01b": "c"}, {"k": "v\x02x=1"}, {"k": "v\udc80"}, {"\ud800": "v"}]
    for props in bad:
        res = store.put_message(Message("T", b"x", properties=props))
        assert res.status == PutMessageStatus.MESSAGE_ILLEGAL and "property" in res.reason, props
        assert store.put_batch("T", [b"a", b"b"], properties=props).status == PutMessageStatus.MESSAGE_ILLEGAL
        res = store.put_messages([Message("T", b"ok"), Message("T", b"x", properties=props)])
        assert res.status == PutMessageStatus.MESSAGE_ILLEGAL, props
    assert store.put_message(Message("T", b"x", tags="a\x02b")).status == PutMessageStatus.MESSAGE_ILLEGAL
    assert store.put_message(Message("T", b"x", keys=["k\x01"])).status == PutMessageStatus.MESSAGE_ILLEGAL
    assert store.put_batch("T", [b"a", b"b"], keys=["ok", "x\x02y"]).status == PutMessageStatus.MESSAGE_ILLEGAL
    for text in ("\udc80x", "a\ud83d"):  # lone surrogates (a pair's halves apart)
        assert store.put_message(Message("T", b"x", tags=text)).status == PutMessageStatus.MESSAGE_ILLEGAL
        assert store.put_message(Message("T", b"x", keys=[text])).status == PutMessageStatus.MESSAGE_ILLEGAL
        assert store.put_batch("T", [b"a", b"b"], keys=["ok", text]).status == PutMessageStatus.MESSAGE_ILLEGAL
        assert store.put_batch("T", [b"a"], tags=text).status == PutMessageStatus.MESSAGE_ILLEGAL
    assert store.max_phys_offset == 0
    # What does read back is taken, None values skipped as messageProperties2String skips them.
    r = store.put_message(
        Message("T", b"x", properties={"k": "v", "名": "值\tx", "한": "글", "skipped": None}, tags="🚀")  # type: ignore[dict-item]
    )
    assert r.status == PutMessageStatus.PUT_OK
    store.wait_dispatched()
    back = store.lookup(r.phys_offset)
    assert back is not None and back.properties["k"] == "v" and back.properties["名"] == "值\tx"
    assert back.properties["한"] == "글" and back.tags == "🚀"  # U+D55C starts with byte ED too
    assert "skipped" not in back.properties


# Topics that are not one directory name under consumequeue/: the store refuses them (the
# Java DefaultMessageStore would make consumequeue/../../escaped/0/).
UNSAFE_TOPICS = ["../../escaped", "a/b", ".", "..", "x\x00y", "/abs"]


def test_topics_that_are_not_one_directory_are_refused(tmp_path: Path, mode: str) -> None:
    root = tmp_path / "store"
    with MessageStore(root, small_config(mode)) as s:
        for t in UNSAFE_TOPICS:
            res = s.put_message(Message(t, b"body"))
            assert res.status == PutMessageStatus.MESSAGE_ILLEGAL and "topic" in res.reason, t
            assert s.put_batch(t, [b"a", b"b"]).status == PutMessageStatus.MESSAGE_ILLEGAL, t
        assert s.max_phys_offset == 0
        # What DefaultMessageStore takes and the broker's TopicValidator would not, as the
        # fixtures' "TopicC_longer.name-01": the store takes it too.
        taken = ["TopicC_longer.name-01", "bad topic!", "主题-ü", "%RETRY%g", "x" * 127]
        for t in taken:
            assert s.put_message(Message(t, b"body")).status == PutMessageStatus.PUT_OK, t
        assert s.wait_dispatched()
        assert sorted(s.consume_queues.topics()) == sorted(taken)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]
    assert not list(root.rglob("escaped"))


def test_unknown_queue_id_is_refused(tmp_path: Path, mode: str) -> None:
    with MessageStore(tmp_path / "s", small_config(mode, topic_queue_nums={"T": 4})) as s:
        assert s.put_message(Message("T", b"x", queue_id=4)).status == PutMessageStatus.MESSAGE_ILLEGAL
        assert s.put_message(Message("T", b"x", queue_id=3)).status == PutMessageStatus.PUT_OK


def test_delay_levels_go_to_schedule_topic(store: MessageStore) -> None:
    r1 = store.put_message(Message("TopicA", b"d1", queue_id=2, delay_level=3))
    r2 = store.put_message(Message("TopicA", b"d2", queue_id=1, delay_level=25))  # clamped to 18
    store.wait_dispatched()
    m1 = store.get_messages(RMQ_SYS_SCHEDULE_TOPIC, 2, 0).messages[0]
    assert m1.properties["REAL_TOPIC"] == "TopicA" and m1.properties["REAL_QID"] == "2"
    assert m1.properties["DELAY"] == "3"
    m2 = store.get_messages(RMQ_SYS_SCHEDULE_TOPIC, 17, 0).messages[0]
    assert m2.properties["DELAY"] == "18" and m2.phys_offset == r2.phys_offset
    # the consume-queue tagsCode of a delayed message is its delivery time
    units = [store.consume_queues.find_or_create(RMQ_SYS_SCHEDULE_TOPIC, q).get_unit(0) for q in (2, 17)]
    assert units[0] is not None and units[0][2] == m1.store_timestamp + 10_000
    assert units[1] is not None and units[1][2] == m2.store_timestamp + 2 * 3600 * 1000
    assert r1.ok and store.get_messages("TopicA", 2, 0).status == GetMessageStatus.NO_MATCHED_LOGIC_QUEUE


def test_transaction_flags(store: MessageStore) -> None:
    prepared = store.put_message(Message("T", b"half", sys_flag=MessageSysFlag.TRANSACTION_PREPARED_TYPE, keys="kp"))
    rollback = store.put_message(Message("T", b"rb", sys_flag=MessageSysFlag.TRANSACTION_ROLLBACK_TYPE, keys="kr"))
    commit = store.put_message(
        Message(
            "T", b"c", sys_flag=MessageSysFlag.TRANSACTION_COMMIT_TYPE, prepared_offset=prepared.phys_offset, keys="kc"
        )
    )
    store.wait_dispatched()
    assert prepared.queue_offset == 0 and rollback.queue_offset == 0 and commit.queue_offset == 0
    res = store.get_messages("T", 0, 0)
    assert [m.body for m in res.messages] == [b"c"]
    assert res.messages[0].prepared_offset == prepared.phys_offset
    assert store.query_offsets_by_key("T", "kp") == [prepared.phys_offset]
    assert store.query_offsets_by_key("T", "kr") == []
    assert store.query_offsets_by_key("T", "kc") == [commit.phys_offset]


def test_a_batch_over_several_queues_numbers_each_queue_from_its_own_end(tmp_path: Path, mode: str) -> None:
    # Queue offsets are per topic-queue: a batch whose messages go to different queues (or
    # topics) takes, message by message, the next offset of that message's queue, counting
    # the batch's earlier messages to the same queue.
    with MessageStore(tmp_path / "s", small_config(mode)) as s:
        assert s.put_message(Message("T", b"first", queue_id=1)).queue_offset == 0
        msgs = [Message("T", b"%d" % i, queue_id=i % 2) for i in range(6)] + [Message("U", b"u", queue_id=1)]
        assert s.put_messages(msgs).ok
        assert s.wait_dispatched()
        q0 = s.get_messages("T", 0, 0, 10).messages
        q1 = s.get_messages("T", 1, 0, 10).messages
        assert [(m.queue_offset, m.body) for m in q0] == [(0, b"0"), (1, b"2"), (2, b"4")]
        assert [(m.queue_offset, m.body) for m in q1] == [(0, b"first"), (1, b"1"), (2, b"3"), (3, b"5")]
        assert [m.queue_offset for m in s.get_messages("U", 1, 0, 10).messages] == [0]
        assert s.put_message(Message("T", b"next", queue_id=1)).queue_offset == 4


def test_a_prepared_message_in_a_batch_takes_no_queue_offset(tmp_path: Path, mode: str) -> None:
    # A half (prepared) transaction message gets queue offset 0 and does not advance its queue:
    # the batch's other messages, and the next put, number on without a gap.
    prepared = MessageSysFlag.TRANSACTION_PREPARED_TYPE
    with MessageStore(tmp_path / "s", small_config(mode)) as s:
        msgs = [Message("T", b"a"), Message("T", b"p", sys_flag=prepared), Message("T", b"b")]
        assert s.put_messages(msgs).ok
        assert s.put_message(Message("T", b"c")).queue_offset == 2
        assert s.wait_dispatched()
        got = s.get_messages("T", 0, 0, 10).messages
        assert [(m.queue_offset, m.body) for m in got] == [(0, b"a"), (1, b"b"), (2, b"c")]


def test_put_messages_refuses_a_batch_with_a_record_over_max_message_size(tmp_path: Path, mode: str) -> None:
    # The batch path's own size check (one message, and several): nothing of the batch is written.
    with MessageStore(tmp_path / "s", small_config(mode, max_message_size=2048)) as s:
        end = s.max_phys_offset
        big = Message("T", b"x" * 2048)
        assert s.put_messages([big]).status == PutMessageStatus.MESSAGE_ILLEGAL
        assert s.put_messages([Message("T", b"ok"), big]).status == PutMessageStatus.MESSAGE_ILLEGAL
        assert s.max_phys_offset == end
        assert s.put_messages([Message("T", b"x" * 1800)]).ok


def test_reopen_keeps_queue_offsets_and_consumer_offsets(tmp_path: Path, mode: str) -> None:
    root = tmp_path / "s"
    with MessageStore(root, small_config(mode)) as s:
        for i in range(10):
            s.put_message(Message("T", b"%d" % i, queue_id=i % 2))
        s.commit_offset("g1", "T", 0, 3)
        assert s.query_offset("g1", "T", 0) == 3
    assert not (root / "abort").exists()
    with MessageStore(root, small_config(mode)) as s:
        assert s.mode == mode
        assert s.max_offset_in_queue("T", 0) == 5 and s.max_offset_in_queue("T", 1) == 5
        assert s.put_message(Message("T", b"x", queue_id=1)).queue_offset == 5
        assert s.query_offset("g1", "T", 0) == 3 and s.query_offset("g1", "T", 1) == -1
    text = (root / "config" / "consumerOffset.json").read_text()
    assert '"T@g1"' in text


def test_second_writer_is_refused(tmp_path: Path) -> None:
    with MessageStore(tmp_path / "s", small_config("classic")):
        with pytest.raises(RuntimeError, match="lock"):
            MessageStore(tmp_path / "s", small_config("classic"))


def test_sync_flush(tmp_path: Path, mode: str) -> None:
    with MessageStore(tmp_path / "s", small_config(mode, flush_disk_type="SYNC_FLUSH")) as s:
        res = s.put_messages([Message("T", b"x" * 100) for _ in range(10)])
        assert res.status == PutMessageStatus.PUT_OK
        assert s.commitlog.flushed_where >= res.phys_offset + 10 * 100
        one = s.put_message(Message("T", b"y" * 100))
        assert one.ok and s.commitlog.flushed_where >= one.phys_offset + 100


def test_put_batch_across_files_with_sync_flush(tmp_path: Path, mode: str) -> None:
    """Batches that end files (the classic log writes those as columns, the rest with one
    encode): each is on disk when PUT_OK comes back, and reads back whole, in order."""
    bodies = [os.urandom(900 + i) for i in range(300)]
    with MessageStore(tmp_path / "s", small_config(mode, flush_disk_type="SYNC_FLUSH")) as s:
        ends = []
        for k in range(0, 300, 12):
            res = s.put_batch("F", bodies[k : k + 12], queue_id=1, tags="t", properties={"p": "v"})
            assert res.status == PutMessageStatus.PUT_OK and res.append_result is not None
            assert res.queue_offset == k
            wrote = res.append_result.wrote_offsets
            assert wrote is not None
            ends.append((int(wrote[-1]), s.commitlog.flushed_where))
        assert s.wait_dispatched()
        got: list[MessageExt] = []
        while len(got) < 300 and (more := s.get_messages("F", 1, len(got), 300).messages):
            got += more
        assert [m.body for m in got] == bodies
        assert [m.queue_offset for m in got] == list(range(300))
        assert len({m.properties[UNIQ_KEY] for m in got}) == 300
        assert all(m.tags == "t" and m.properties["p"] == "v" for m in got)
        size = {m.phys_offset: m.size for m in got}
        assert all(flushed >= last + size[last] for last, flushed in ends)
        files = sorted((tmp_path / "s" / "commitlog").iterdir()) if mode == "classic" else []
    if mode == "classic":
        assert len(files) > 4


def test_retention_deletes_old_files_and_what_points_into_them(tmp_path: Path, mode: str) -> None:
    root = tmp_path / "s"
    with MessageStore(root, small_config(mode)) as s:
        for i in range(40):
            s.put_messages([Message("T", os.urandom(1000), keys=f"k{i}-{j}") for j in range(10)])
        s.wait_dispatched()
        data_dir = root / "commitlog" if mode == "classic" else root / "dledger-n0" / "data"
        files = sorted(data_dir.iterdir())
        assert len(files) > 5
        old = time.time() - 100 * 3600
        for p in files[:3]:
            os.utime(p, (old, old))
        # Noon tomorrow: not a deleteWhen hour, and after every file's mtime, so only the
        # files older than fileReservedTime (72 h) may go (today's noon was before the newer
        # files' mtimes in an afternoon run, and then any reserved time would have passed).
        y, m, d = time.localtime()[:3]
        noon = time.mktime((y, m, d + 1, 12, 0, 0, 0, 0, -1))
        # not the hour to delete (deleteWhen quiet_hour()), disk not full: nothing goes
        assert s.delete_expired(now=noon, used_ratio=0.1) == 0
        # over diskMaxUsedSpaceRatio: the files older than fileReservedTime go
        assert s.delete_expired(now=noon, used_ratio=0.8) == 3
        assert not files[0].exists()
        assert s.min_phys_offset == int(files[3].name)  # the first file left (DLedger: its first entry)
        assert s.min_offset_in_queue("T", 0) > 0
        res = s.get_messages("T", 0, 0)
        assert res.status == GetMessageStatus.OFFSET_TOO_SMALL and res.next_begin_offset == s.min_offset_in_queue(
            "T", 0
        )
        first = s.get_messages("T", 0, res.next_begin_offset).messages[0]
        assert first.phys_offset >= s.min_phys_offset
        # A reader (dledger mq stats, consume) sees the same minimum: it said 0, and a consumer
        # at 0 got OFFSET_FOUND_NULL with next offset 0 for ever.
        with MessageStore(root, readonly=True) as reader:
            assert reader.min_offset_in_queue("T", 0) == s.min_offset_in_queue("T", 0)
            low = reader.get_messages("T", 0, 0)
            assert low.status == GetMessageStatus.OFFSET_TOO_SMALL and low.next_begin_offset == res.next_begin_offset


@pytest.mark.parametrize(("ratio", "used", "goes"), [(75, 0.72, False), (60, 0.65, True)])
def test_retention_follows_disk_max_used_space_ratio_in_both_modes(
    tmp_path: Path, mode: str, ratio: int, used: float, goes: bool
) -> None:
    # DLedger mode used DLedger's fixed 0.70: DLedgerCommitLog sets diskSpaceRatioToCheckExpired
    # from diskMaxUsedSpaceRatio / 100.
    root = tmp_path / "s"
    with MessageStore(root, small_config(mode, disk_max_used_space_ratio=ratio)) as s:
        for _round in range(40):
            s.put_messages([Message("T", os.urandom(1000)) for _ in range(10)])
        s.wait_dispatched()
        data_dir = root / "commitlog" if mode == "classic" else root / "dledger-n0" / "data"
        old = time.time() - 100 * 3600
        for p in sorted(data_dir.iterdir())[:3]:
            os.utime(p, (old, old))
        noon = time.mktime((*time.localtime()[:3], 12, 0, 0, 0, 0, -1))  # not a deleteWhen hour
        assert (s.delete_expired(now=noon, used_ratio=used) > 0) == goes


def test_retention_never_deletes_what_dispatch_has_still_to_read(tmp_path: Path, mode: str) -> None:
    # A forced clean deleted files dispatch had not read: acknowledged messages never reached
    # their queue, and after a reopen the store handed out queue offsets already taken.
    s = MessageStore(tmp_path / "s", small_config(mode), dispatch_thread=False)  # the owner dispatches
    try:
        for i in range(100):
            assert s.put_message(Message("T", b"%06d" % i + b"x" * 200)).ok
        s.dispatch_now()
        for i in range(100, 1000):  # acknowledged, not dispatched yet
            assert s.put_message(Message("T", b"%06d" % i + b"x" * 200)).ok
        assert s.dispatch_behind_bytes() > 3 * 64 * 1024
        s.delete_expired(force=True, used_ratio=0.99)
        s.dispatch_now()
        mn, mx = s.min_offset_in_queue("T", 0), s.max_offset_in_queue("T", 0)
        assert mx == 1000
        got = s.get_messages("T", 0, mn, 32).messages
        assert [m.queue_offset for m in got] == list(range(mn, mn + len(got))) and got
        assert all(m.body[:6] == b"%06d" % m.queue_offset for m in got)
        # Once dispatched, the old files may go.
        s.delete_expired(force=True, used_ratio=0.99)
        assert s.min_phys_offset > 0
    finally:
        s.close()


def test_reads_at_the_low_end_while_retention_deletes_files(tmp_path: Path, mode: str) -> None:
    # Pulls racing retention read a consume-queue file being destroyed: AssertionError
    # ("closed") or FileNotFoundError from get_messages, pull_columns, offset_for_timestamp.
    cfg = small_config(mode, clean_resource_interval=10**9)
    with MessageStore(tmp_path / "s", cfg) as s:
        for i in range(0, 12_000, 50):
            assert s.put_batch("T", [b"%07d" % (i + j) + b"y" * 150 for j in range(50)]).ok
        assert s.wait_dispatched()
        stop = threading.Event()
        failures: list[BaseException] = []

        def read() -> None:
            while not stop.is_set():
                try:
                    low = s.min_offset_in_queue("T", 0)
                    for m in s.get_messages("T", 0, low, 8).messages:
                        assert int(m.body[:7]) == m.queue_offset
                    s.pull_columns("T", 0, low, 64)
                    s.offset_for_timestamp("T", 0, 0)
                except BaseException as exc:  # the test reports any of them
                    failures.append(exc)
                    return

        readers = [threading.Thread(target=read) for _ in range(2)]
        for t in readers:
            t.start()
        try:
            for _ in range(200):
                if s.min_phys_offset >= s.max_phys_offset - 2 * 64 * 1024:
                    break
                s.delete_expired(force=True, used_ratio=0.99)
                time.sleep(0.005)
        finally:
            stop.set()
            for t in readers:
                t.join(30)
        assert s.min_offset_in_queue("T", 0) > 0 and not failures, failures[:1]


def test_iter_messages_in_log_order(store: MessageStore) -> None:
    for i in range(50):
        store.put_message(Message(f"T{i % 3}", b"%d" % i, queue_id=i % 2))
    msgs = list(store.iter_messages())
    assert [m.body for m in msgs] == [b"%d" % i for i in range(50)]
    assert [m.phys_offset for m in msgs] == sorted(m.phys_offset for m in msgs)


def test_uniform_batches_get_distinct_ids_and_a_born_time(store: MessageStore) -> None:
    """A batch without keys takes its UNIQ_KEYs and born time from one reading of the clock:
    every id still differs, across batches too, and the born time lies within the put."""
    before = int(time.time() * 1000)
    first = store.put_batch("TopicU", [b"a%d" % i for i in range(20)])
    second = store.put_batch("TopicU", [b"b%d" % i for i in range(20)])
    after = int(time.time() * 1000)
    assert first.status == second.status == PutMessageStatus.PUT_OK
    store.wait_dispatched()
    got = store.get_messages("TopicU", 0, 0, 64).messages
    assert len(got) == 40
    assert len({m.properties["UNIQ_KEY"] for m in got}) == 40
    assert all(before <= m.born_timestamp <= m.store_timestamp <= after for m in got)


def test_single_puts_get_distinct_ids_and_a_born_time(store: MessageStore) -> None:
    """put_message reads the clock once for its UNIQ_KEY and, when the message has none, its
    born time: ids differ from put to put, and the born time lies within the put; a born time
    the message carries is kept."""
    before = int(time.time() * 1000)
    results = [store.put_message(Message("TopicS", b"s%d" % i)) for i in range(30)]
    kept = store.put_message(Message("TopicS", b"old", born_timestamp=1_234_567))
    after = int(time.time() * 1000)
    assert all(r.status == PutMessageStatus.PUT_OK for r in [*results, kept])
    store.wait_dispatched()
    got = store.get_messages("TopicS", 0, 0, 64).messages
    assert [m.body for m in got] == [b"s%d" % i for i in range(30)] + [b"old"]
    assert len({m.properties[UNIQ_KEY] for m in got}) == 31
    assert all(before <= m.born_timestamp <= m.store_timestamp <= after for m in got[:30])
    assert got[30].born_timestamp == 1_234_567


def test_put_batch_columns(store: MessageStore) -> None:
    bodies = [b"b%d" % i for i in range(40)]
    keys = [f"k{i} shared" if i % 2 else None for i in range(40)]
    res = store.put_batch(
        "TopicC", bodies, queue_id=2, tags="TagZ", keys=keys, properties={"a": "1"}, born_host=("2001:db8::7", 99)
    )
    assert res.status == PutMessageStatus.PUT_OK and res.append_result is not None
    assert res.append_result.msg_num == 40
    assert len(set(res.append_result.msg_ids)) == 40
    store.wait_dispatched()
    got = store.get_messages("TopicC", 2, 0, 64).messages
    assert [m.body for m in got] == bodies and [m.queue_offset for m in got] == list(range(40))
    assert all(m.tags == "TagZ" and m.properties["a"] == "1" and m.born_host == ("2001:db8::7", 99) for m in got)
    assert [m.keys for m in got] == [k if k else None for k in keys]
    uniq = {m.properties[UNIQ_KEY] for m in got}
    assert len(uniq) == 40
    assert [m.body for m in store.query_by_key("TopicC", "k3")] == [b"b3"]
    assert sorted(m.body for m in store.query_by_key("TopicC", "shared")) == sorted(bodies[1::2])
    assert store.query_offsets_by_key("TopicC", got[4].properties[UNIQ_KEY]) == [got[4].phys_offset]
    assert store.put_batch("TopicC", [b"x"], properties={"DELAY": "2"}).status == PutMessageStatus.MESSAGE_ILLEGAL
    assert store.put_batch("T" * 200, [b"x"]).status == PutMessageStatus.MESSAGE_ILLEGAL


def test_put_batch_keys_take_what_message_keys_take(store: MessageStore) -> None:
    # Each body's keys: a space-separated str, a list of str (joined as Java's setKeys), or None.
    res = store.put_batch("K", [b"a", b"b", b"c"], keys=[["k1", "k2"], ("k3",), None])
    assert res.status == PutMessageStatus.PUT_OK
    store.wait_dispatched()
    assert [m.keys for m in store.get_messages("K", 0, 0, 8).messages] == ["k1 k2", "k3", None]
    assert [m.body for m in store.query_by_key("K", "k2")] == [b"a"]
    # What is not one entry per body is refused, with the reason, and nothing is written.
    end = store.max_phys_offset
    for keys in ("ab", [1, None], [["k", 2], None], ["k"]):
        res = store.put_batch("K", [b"x", b"y"], keys=keys)  # type: ignore[arg-type]
        assert res.status == PutMessageStatus.MESSAGE_ILLEGAL and "keys" in res.reason, keys
    # A shared KEYS property and each body's own: one KEYS a message, its own else the shared.
    assert store.put_batch("K", [b"own", b"shared"], keys=["mine", None], properties={"KEYS": "all"}).ok
    store.wait_dispatched()
    got = store.get_messages("K", 0, 3, 8).messages
    assert [m.keys for m in got] == ["mine", "all"]
    assert all(m.properties_string.count("KEYS\x01") == 1 for m in got)
    # A list is joined as Java's setKeys(Collection) joins it: a space after each, then trim().
    assert store.put_message(Message("K", b"t", keys=["", "x", ""])).ok
    store.wait_dispatched()
    assert store.get_messages("K", 0, 5, 1).messages[0].keys == "x"
    end = store.max_phys_offset
    for bad in (5, [["k"]], {"k"}, [None], b"k"):
        res = store.put_message(Message("K", b"x", keys=bad))  # type: ignore[arg-type]
        assert res.status == PutMessageStatus.MESSAGE_ILLEGAL and "keys" in res.reason, bad
        res = store.put_messages([Message("K", b"x"), Message("K", b"y", keys=bad)])  # type: ignore[arg-type]
        assert res.status == PutMessageStatus.MESSAGE_ILLEGAL, bad
    assert store.max_phys_offset == end


def test_pull_columns_and_arrow(store: MessageStore) -> None:
    bodies = [bytes([i % 251]) * (i % 50) for i in range(500)]
    for k in range(0, 500, 50):
        assert store.put_batch("P", bodies[k : k + 50], queue_id=1, tags="t").ok
        store.put_message(Message("Other", b"interleaved"))
    store.wait_dispatched()
    table = store.pull_arrow("P", 1, 10, 1000)
    assert table.num_rows == 490
    assert table.column("body").to_pylist() == bodies[10:]
    assert table.column("queue_offset").to_pylist() == list(range(10, 500))
    via_get = store.get_messages("P", 1, 10, 5).messages
    assert table.column("phys_offset").to_pylist()[:5] == [m.phys_offset for m in via_get]
    assert table.column("store_timestamp").to_pylist()[:5] == [m.store_timestamp for m in via_get]
    assert store.pull_arrow("P", 1, 500).num_rows == 0
    assert store.pull_arrow("none", 0, 0).num_rows == 0
    # No rows: the same columns as some (a loop that converts each pull failed on the last).
    buf, some = store.pull_columns("P", 1, 495)
    for at in (("P", 1, 500), ("none", 0, 0)):
        nbuf, none = store.pull_columns(*at)
        assert set(none) == set(some) and all(len(c) == 0 for c in none.values())
        assert messages_from_columns(nbuf, none) == []
    assert [m.body for m in messages_from_columns(buf, some)] == bodies[495:]


def test_iter_messages_in_small_windows(store: MessageStore, monkeypatch: pytest.MonkeyPatch) -> None:
    import dledger.rocketmq.store.columnar_reads as store_module

    bodies = [os.urandom(100 + i * 7) for i in range(400)]  # > 64 KiB: crosses files too
    for k in range(0, 400, 40):
        store.put_batch("W", bodies[k : k + 40])
    monkeypatch.setattr(store_module, "_WINDOW", 5000)  # windows end inside records (each < 3 KiB)
    assert [m.body for m in store.iter_messages()] == bodies
    assert store.wait_dispatched()  # get_messages reads the consume queue dispatch builds
    start = store.get_messages("W", 0, 123).messages[0].phys_offset
    assert [m.body for m in store.iter_messages(start)] == bodies[123:]


def test_non_ascii_uniq_key_is_indexed(store: MessageStore) -> None:
    r1 = store.put_message(Message("T", b"a", properties={UNIQ_KEY: "唯一-🚀-1"}))
    r2 = store.put_message(Message("T", b"b", properties={UNIQ_KEY: "plain-2"}, keys="ключ"))
    store.wait_dispatched()
    assert store.query_offsets_by_key("T", "唯一-🚀-1") == [r1.phys_offset]
    assert store.query_offsets_by_key("T", "plain-2") == [r2.phys_offset]
    assert store.query_offsets_by_key("T", "ключ") == [r2.phys_offset]


def test_empty_properties_and_body(tmp_path: Path, mode: str) -> None:
    with MessageStore(tmp_path / "s", small_config(mode, create_uniq_key=False)) as s:
        one = s.put_message(Message("E", b""))
        many = s.put_messages([Message("E", b""), Message("E", b"x")])
        cols = s.put_batch("E", [b"", b""])
        assert one.ok and many.ok and cols.ok
        s.wait_dispatched()
        got = s.get_messages("E", 0, 0).messages
        assert [m.body for m in got] == [b"", b"", b"x", b"", b""]
        assert all(m.properties_string == "" and m.properties == {} for m in got)
        assert got[0].size == 91 + 1  # calMsgLength with a 1-byte topic, no body, no properties


def test_a_new_store_opens_with_its_first_index_file(tmp_path: Path, mode: str) -> None:
    """A new store creates its first index file when it opens, not at the first dispatch; the
    first puts' keys go into it, and neither a reopen nor a store without the index adds one."""
    root = tmp_path / "s"
    with MessageStore(root, small_config(mode)) as s:
        names = sorted(p.name for p in (root / "index").iterdir())
        assert len(names) == 1 and names[0].isdigit() and len(names[0]) == 17
        assert s.put_message(Message("T", b"first", keys="k1")).status == PutMessageStatus.PUT_OK
        assert s.wait_dispatched()
        assert [m.body for m in s.query_by_key("T", "k1")] == [b"first"]
        assert sorted(p.name for p in (root / "index").iterdir()) == names
    with MessageStore(root, small_config(mode)) as again:
        assert [f.name for f in again.index_service.files] == names
        assert [m.body for m in again.query_by_key("T", "k1")] == [b"first"]
    bare = tmp_path / "bare"
    MessageStore(bare, small_config(mode, message_index_enable=False)).close()
    assert not (bare / "index").exists() or not any((bare / "index").iterdir())


def test_reader_beside_a_running_writer(tmp_path: Path, mode: str) -> None:
    root = tmp_path / "s"
    with MessageStore(root, small_config(mode)) as writer:
        for i in range(300):
            writer.put_message(Message("T", b"%d" % i, keys=f"k{i}"))
        assert writer.wait_dispatched()
        with MessageStore(root, readonly=True) as reader:
            assert reader.mode == mode
            assert [m.body for m in reader.iter_messages()] == [b"%d" % i for i in range(300)]
            assert reader.max_offset_in_queue("T", 0) == 300
            assert [m.body for m in reader.query_by_key("T", "k5")] == [b"5"]
            assert [m.body for m in reader.get_messages("T", 0, 299).messages] == [b"299"]
            # The writer's "abort" is no abnormal exit to a reader: its queues are complete
            # (`dledger mq stats` said the whole classic log was undispatched).
            assert reader.dispatch_behind_bytes() == 0
        assert (root / "abort").exists()  # the reader took nothing away from the writer
    assert not (root / "abort").exists()


def test_concurrent_producers(store: MessageStore) -> None:
    """Puts from several threads: queue offsets are unique and dense, the log holds every message
    once, and the queues and index cover it."""
    import threading

    def produce(t: int) -> None:
        for i in range(150):
            if i % 3 == 0:
                assert store.put_batch("C", [b"%d-%d-%d" % (t, i, j) for j in range(4)], queue_id=i % 2).ok
            else:
                assert store.put_message(Message("C", b"%d-%d" % (t, i), queue_id=i % 2, keys=f"t{t}-{i}")).ok

    threads = [threading.Thread(target=produce, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert store.wait_dispatched()
    total = 4 * (50 * 4 + 100)
    bodies = []
    for q in (0, 1):
        msgs = store.get_messages("C", q, 0, 10_000, max_bytes=1 << 30).messages
        assert [m.queue_offset for m in msgs] == list(range(len(msgs)))
        bodies += [m.body for m in msgs]
    assert len(bodies) == len(set(bodies)) == total
    assert sorted(m.body for m in store.iter_messages()) == sorted(bodies)
    assert [m.body for m in store.query_by_key("C", "t3-149")] == [b"3-149"]


def test_query_by_key_leaves_out_hash_collisions(store: MessageStore) -> None:
    # "Aa" and "BB" have the same Java hashCode, so "T#Aa" and "T#BB" share index items
    r = store.put_message(Message("T", b"aa", keys="Aa"))
    store.wait_dispatched()
    assert store.query_offsets_by_key("T", "BB") == [r.phys_offset]  # what the index knows
    assert store.query_by_key("T", "BB") == []
    assert [m.body for m in store.query_by_key("T", "Aa")] == [b"aa"]


def test_failed_open_releases_the_store(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore(root, small_config("classic")) as s:
        s.put_message(Message("T", b"x"))
    stray = root / "commitlog" / f"{10 * 64 * 1024:020d}"
    stray.write_bytes(b"\0" * 100)  # a file of another size: the log cannot be opened
    with pytest.raises(ValueError, match="mixed sizes"):
        MessageStore(root, small_config("classic"))
    stray.unlink()
    with MessageStore(root, small_config("classic")) as s:  # not locked by the failed open
        assert [m.body for m in s.iter_messages()] == [b"x"]


def test_a_put_of_one_message_has_the_offset_arrays_a_batch_has(store: MessageStore) -> None:
    store.put_message(Message("One", b"first"))
    for res in (
        store.put_batch("One", [b"a"]),
        store.put_batch("One", [b"b"], keys=["k"]),
        store.put_messages([Message("One", b"c")]),
        store.put_message(Message("One", b"d")),
    ):
        ar = res.append_result
        assert res.ok and ar is not None and ar.wrote_offsets is not None and ar.queue_offsets is not None
        assert list(ar.wrote_offsets) == [ar.wrote_offset] and list(ar.queue_offsets) == [ar.logics_offset]
        found = store.lookup(ar.wrote_offset)
        assert found is not None and found.queue_offset == ar.logics_offset


def test_reads_of_a_closed_store_are_refused(tmp_path: Path, mode: str) -> None:
    # They answered an empty queue (NO_MATCHED_LOGIC_QUEUE, max offset 0) or [] in one mode and
    # raised about an unmapped file in the other.
    s = MessageStore(tmp_path / "s", small_config(mode))
    r = s.put_message(Message("T", b"x", keys="k"))
    s.close()
    for read in (
        lambda: s.get_messages("T", 0, 0),
        lambda: s.max_offset_in_queue("T", 0),
        lambda: s.lookup(r.phys_offset),
        lambda: s.query_by_key("T", "k"),
        lambda: s.pull_columns("T", 0, 0),
        lambda: list(s.iter_messages()),
    ):
        with pytest.raises(ValueError, match="closed"):
            read()
    assert s.put_message(Message("T", b"y")).status == PutMessageStatus.SERVICE_NOT_AVAILABLE


def test_a_body_that_is_no_bytes_is_refused_on_every_put_path(store: MessageStore) -> None:
    # A str was a TypeError from put_message and an UNKNOWN_ERROR with a traceback from
    # put_batch; bytes(5) would have stored five zero bytes.
    before = store.max_phys_offset
    for res in (
        store.put_message(Message("T", "text")),  # type: ignore[arg-type]
        store.put_message(Message("T", 5)),  # type: ignore[arg-type]
        store.put_messages([Message("T", b"ok"), Message("T", "text")]),  # type: ignore[arg-type]
        store.put_batch("T", ["text"]),  # type: ignore[list-item]
        store.put_batch("T", [b"ok", "text"], keys=["a", "b"]),  # type: ignore[list-item]
    ):
        assert res.status == PutMessageStatus.MESSAGE_ILLEGAL and "bytes" in res.reason, res
    assert store.max_phys_offset == before
    likes: list[Any] = [bytearray(b"ok"), memoryview(b"v")]
    assert store.put_message(Message("T", likes[0])).ok and store.put_batch("T", likes[1:]).ok


def test_a_reader_opens_a_store_whose_consumer_offsets_cannot_be_read(tmp_path: Path, mode: str) -> None:
    # dump, stats and a consume by offset need no consumer offsets; a writer still refuses, as
    # the broker's ConfigManager.load does.
    root = tmp_path / "s"
    with MessageStore(root, small_config(mode)) as s:
        s.put_message(Message("T", b"x"))
    for name in ("consumerOffset.json", "consumerOffset.json.bak"):
        (root / "config" / name).write_text("garbage")
    with MessageStore(root, readonly=True) as reader:
        assert [m.body for m in reader.get_messages("T", 0, 0).messages] == [b"x"]
        assert reader.query_offset("g", "T", 0) == -1
    with pytest.raises(ValueError, match="consumer offsets"):
        MessageStore(root, small_config(mode))


def test_message_ids_stay_unique_past_what_one_uniq_key_head_names(tmp_path: Path, mode: str) -> None:
    # The counter of a UNIQ_KEY is 4 hex digits: a batch (or batches within a millisecond) of
    # more than 65,536 messages needs more than one head, or ids repeat and consumers that
    # de-duplicate by msg_id drop real messages.
    with MessageStore(tmp_path / "s", small_config(mode, mapped_file_size_commit_log=16 << 20)) as store:
        assert store.put_batch("U", [b"x"] * 70_000).ok
        assert store.put_batch("U", [b"y"] * 70_000, keys=["k"] * 70_000).ok
        assert store.put_messages([Message("U", b"z") for _ in range(70_000)]).ok
        for _ in range(2):
            assert store.put_batch("U", [b"w"] * 40_000).ok
        store.wait_dispatched()
        ids = [
            m.properties[UNIQ_KEY]
            for off in range(0, store.max_offset_in_queue("U", 0), 4096)
            for m in store.get_messages("U", 0, off, 4096, 1 << 30).messages
        ]
    assert len(ids) == 290_000 and len(set(ids)) == len(ids)


def test_single_puts_from_threads_get_unique_ids_past_one_counter_round(tmp_path: Path, mode: str) -> None:
    # A single put reserves its UNIQ_KEY counter value and head in one C call (no lock): from
    # several threads, and past the 65,536 values of the 4-digit counter, no id may repeat.
    each, threads = 24_000, 3
    with MessageStore(tmp_path / "s", small_config(mode, mapped_file_size_commit_log=16 << 20)) as store:

        def put() -> None:
            for _ in range(each):
                assert store.put_message(Message("U", b"v")).ok

        workers = [threading.Thread(target=put) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(120)
        store.wait_dispatched()
        ids = [
            m.properties[UNIQ_KEY]
            for off in range(0, store.max_offset_in_queue("U", 0), 4096)
            for m in store.get_messages("U", 0, off, 4096, 1 << 30).messages
        ]
    assert len(ids) == each * threads and len(set(ids)) == len(ids)
