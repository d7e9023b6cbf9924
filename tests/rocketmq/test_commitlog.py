"""A store written here has the layout RocketMQ expects: file names and sizes, records field by
field (the struct oracle), END_OF_FILE blank records, consume-queue units and index files; and
the classic commit log recovers as CommitLog.recoverNormally/recoverAbnormally do."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
import record_oracle as oracle

from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.message import Message, MessageSysFlag
from dledger.rocketmq.store.message_store import MessageStore
from dledger.rocketmq.store.status import GetMessageStatus, PutMessageStatus

FILE = 64 * 1024
CQ_FILE = 300 * 20


def config(**kw: object) -> MessageStoreConfig:
    return MessageStoreConfig(
        mapped_file_size_commit_log=FILE,
        mapped_file_size_consume_queue=CQ_FILE,
        max_hash_slot_num=64,
        max_index_num=256,
        store_host="[2001:db8::10]:10911",
    ).replace(**kw)


def write_store(root: Path) -> list[Message]:
    msgs = []
    rnd = __import__("random").Random(7)
    for i in range(900):
        tags = rnd.choice([None, "TagA", "标签X", "*x"])
        msgs.append(
            Message(
                rnd.choice(["TopicA", "TopicB", "主题"]),
                os.urandom(rnd.randrange(0, 400)),
                queue_id=rnd.randrange(3),
                tags=tags,
                keys=f"k{i}",
                born_host=rnd.choice([("10.0.0.1", 4000), ("2001:db8::5", 5000)]),
                sys_flag=rnd.choice([0] * 20 + [MessageSysFlag.TRANSACTION_PREPARED_TYPE]),
            )
        )
    with MessageStore(root, config()) as s:
        for k in range(0, len(msgs), 7):
            if k % 2:
                assert s.put_messages(msgs[k : k + 7]).status == PutMessageStatus.PUT_OK
            else:
                for m in msgs[k : k + 7]:
                    assert s.put_message(m).status == PutMessageStatus.PUT_OK
    return msgs


def test_layout_matches_rocketmq(tmp_path: Path) -> None:
    root = tmp_path / "store"
    msgs = write_store(root)
    files = sorted((root / "commitlog").iterdir())
    assert len(files) > 3
    records = []
    for k, p in enumerate(files):
        assert p.name == f"{k * FILE:020d}"
        assert p.stat().st_size == FILE
        buf = p.read_bytes()
        recs, stop, code = oracle.scan_records(buf, k * FILE, check_crc=True)
        for r in recs:
            # PHYSICALOFFSET is the record's own offset; hosts agree with the v6 bits
            assert r["stored_phys_offset"] == r["phys_offset"]
            assert len(r["store_host"]) == 20 and r["sys_flag"] & MessageSysFlag.STOREHOSTADDRESS_V6_FLAG
        records += recs
        if k < len(files) - 1:
            # END_OF_FILE: {maxBlank, BLANK_MAGIC_CODE}, and the next record did not fit with 8 bytes to spare
            assert code == oracle.STOP_BLANK
            assert buf[stop : stop + 8] == oracle.encode_blank(FILE - stop)
            nxt = oracle.decode_record(files[k + 1].read_bytes(), 0)
            assert nxt["size"] + oracle.END_FILE_MIN_BLANK_LENGTH > FILE - stop
        else:
            assert code == oracle.STOP_ZERO
    assert len(records) == len(msgs)
    # queue offsets: consecutive per topic-queue, PREPARED at 0 without a unit
    expected_units: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
    for m, r in zip(msgs, records, strict=True):
        assert r["body"] == m.body
        key = (m.topic, m.queue_id)
        if m.sys_flag & 0xC == MessageSysFlag.TRANSACTION_PREPARED_TYPE:
            assert r["queue_offset"] == 0
            continue
        units = expected_units.setdefault(key, [])
        assert r["queue_offset"] == len(units)
        tags_code = oracle.java_hash(m.tags) if m.tags else 0
        units.append((r["phys_offset"], r["size"], tags_code))
    # consume queues: consumequeue/<topic>/<qid>/<20-digit>, 6000-byte files of 20-byte big-endian units
    for (topic, qid), units in expected_units.items():
        qdir = root / "consumequeue" / topic / str(qid)
        cq_files = sorted(qdir.iterdir())
        raw = b"".join(p.read_bytes() for p in cq_files)
        for j, p in enumerate(cq_files):
            assert p.name == f"{j * CQ_FILE:020d}" and p.stat().st_size == CQ_FILE
        got = [struct.unpack_from(">qiq", raw, i * 20) for i in range(len(units))]
        assert got == units
        assert raw[len(units) * 20 : len(units) * 20 + 20] == bytes(20)
    # index: yyyyMMddHHmmssSSS files of 40 + 64*4 + 256*20 bytes
    index_files = sorted((root / "index").iterdir())
    assert index_files and all(len(p.name) == 17 and p.name.isdigit() for p in index_files)
    assert all(p.stat().st_size == 40 + 64 * 4 + 256 * 20 for p in index_files)
    # checkpoint: one page with three timestamps; no abort file after a clean close
    ck = (root / "checkpoint").read_bytes()
    assert len(ck) == 4096
    phys_ts, logic_ts, _index_ts = struct.unpack_from(">qqq", ck)
    assert phys_ts == records[-1]["store_timestamp"] and logic_ts > 0
    assert not (root / "abort").exists()


def test_normal_recovery_cuts_a_torn_tail(tmp_path: Path) -> None:
    root = tmp_path / "store"
    msgs = write_store(root)
    last = sorted((root / "commitlog").iterdir())[-1]
    buf = bytearray(last.read_bytes())
    _recs, end, _code = oracle.scan_records(bytes(buf), 0)
    # half a record after the end, as a crash in the middle of a write leaves it
    torn = oracle.encode_record(b"x" * 500, b"TopicA")
    buf[end : end + 100] = torn[:100]
    last.write_bytes(bytes(buf))
    (root / "abort").touch()
    with MessageStore(root, config()) as s:
        assert s.max_phys_offset == int(last.name) + end
        assert sum(1 for _ in s.iter_messages()) == len(msgs)
        r = s.put_message(Message("TopicA", b"after", queue_id=0))
        assert r.phys_offset == int(last.name) + end
        s.wait_dispatched()
        after = s.lookup(r.phys_offset)
        assert after is not None and after.body == b"after"
    with MessageStore(root, config()) as s:
        assert [m.body for m in s.iter_messages()][-1] == b"after"


def test_recovery_ends_at_a_body_crc_mismatch_and_what_followed_stays_gone(tmp_path: Path) -> None:
    # checkCRCOnRecover (on by default): a record whose body no longer matches its CRC ends the
    # log. The records after it are dropped for good: a put of the same length lands exactly
    # on the bad record, and the next recovery must not walk on into the stale ones behind it.
    root = tmp_path / "store"
    bodies = [b"%03d" % i * 30 for i in range(20)]
    with MessageStore(root, config()) as s:
        for b in bodies:
            assert s.put_message(Message("TopicA", b, queue_id=0)).status == PutMessageStatus.PUT_OK
        starts = [m.phys_offset for m in s.iter_messages()]
    assert len(starts) == 20 and starts[-1] < FILE
    first = root / "commitlog" / "00000000000000000000"
    buf = bytearray(first.read_bytes())
    at = buf.find(bodies[10])
    assert starts[10] < at < starts[11]
    buf[at] ^= 0x01
    first.write_bytes(bytes(buf))
    with MessageStore(root, config()) as s:
        assert s.max_phys_offset == starts[10]
        assert [m.body for m in s.iter_messages()] == bodies[:10]
        r = s.put_message(Message("TopicA", b"new" * 30, queue_id=0))
        assert r.phys_offset == starts[10]
    with MessageStore(root, config()) as s:
        assert s.max_phys_offset == starts[11]
        assert [m.body for m in s.iter_messages()] == [*bodies[:10], b"new" * 30]
        assert s.get_messages("TopicA", 0, 0, 100).status == GetMessageStatus.FOUND
        assert [m.body for m in s.get_messages("TopicA", 0, 0, 100).messages] == [*bodies[:10], b"new" * 30]
    # With the check off the same record is taken as it is (RocketMQ's checkCRCOnRecover=false).
    buf = bytearray(first.read_bytes())
    buf[buf.find(b"new" * 30)] ^= 0x01
    first.write_bytes(bytes(buf))
    with MessageStore(root, config(check_crc_on_recover=False)) as s:
        assert s.max_phys_offset == starts[11]


def test_abnormal_recovery_redispatches_from_the_file_the_checkpoint_vouches_for(tmp_path: Path) -> None:
    # After a crash the consume queues may have lost units the commit log kept (the queues are
    # flushed on their own schedule). recoverAbnormally starts at the last file whose first
    # message is older than the checkpoint's time less 3 s, not at the last file, and
    # dispatch redoes everything from there: here queue TopicB lost all its units, while
    # TopicA's queue still reaches the end of the log. (Without the key index: after a crash
    # it redoes dispatch from where its own files end, which would hide what this checks.)
    root = tmp_path / "store"
    cfg = config(message_index_enable=False)
    with MessageStore(root, cfg) as s:
        for i in range(20):
            assert s.put_message(Message("TopicB", b"b%02d" % i, queue_id=0)).ok
        while s.max_phys_offset < 3 * FILE:
            assert s.put_messages([Message("TopicA", b"a" * 1000, queue_id=0) for _ in range(10)]).ok
    assert len(list((root / "commitlog").iterdir())) == 4
    for p in sorted((root / "consumequeue" / "TopicB").rglob("*"), reverse=True):
        p.unlink() if p.is_file() else p.rmdir()
    (root / "abort").touch()
    with MessageStore(root, cfg) as s:
        assert s.wait_dispatched()
        got = s.get_messages("TopicB", 0, 0, 100)
        assert [m.body for m in got.messages] == [b"b%02d" % i for i in range(20)]


def test_consume_queue_ahead_of_commit_log_is_cut(tmp_path: Path) -> None:
    root = tmp_path / "store"
    write_store(root)
    files = sorted((root / "commitlog").iterdir())
    # lose the last commit-log file: the consume queues now point past the end
    cut = int(files[-1].name)
    files[-1].unlink()
    with MessageStore(root, config()) as s:
        assert s.max_phys_offset <= cut
        for topic, qid, cq in s.consume_queues:
            assert cq.max_physic_offset <= s.max_phys_offset
            n = cq.max_offset
            if n:
                res = s.get_messages(topic, qid, n - 1)
                assert res.status == GetMessageStatus.FOUND and res.messages[0].phys_offset < cut
        # the topic-queue table follows the queues: the next put takes the next offset
        before = s.max_offset_in_queue("TopicA", 0)
        assert s.put_message(Message("TopicA", b"x", queue_id=0)).queue_offset == before


def test_missing_consume_queue_and_index_are_rebuilt(tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "store"
    msgs = write_store(root)
    with MessageStore(root, config(), readonly=True) as s:
        before = {(t, q): list(cq.iter_units()) for t, q, cq in s.consume_queues}
        key_hits = s.query_offsets_by_key("TopicB", "k899") + s.query_offsets_by_key(msgs[5].topic, "k5")
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index")
    with MessageStore(root, config()) as s:
        after = {(t, q): list(cq.iter_units()) for t, q, cq in s.consume_queues}
        assert after == before
        assert s.query_offsets_by_key("TopicB", "k899") + s.query_offsets_by_key(msgs[5].topic, "k5") == key_hits


def test_readonly_open_changes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "store"
    write_store(root)
    (root / "abort").touch()  # even after an unclean exit
    before = {str(p): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    with MessageStore(root, config(), readonly=True) as s:
        assert sum(1 for _ in s.iter_messages()) == 900
    after = {str(p): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert after == before


def test_lost_last_index_file_is_rebuilt(tmp_path: Path) -> None:
    root = tmp_path / "store"
    msgs = write_store(root)
    files = sorted((root / "index").iterdir())
    assert len(files) > 2
    files[-1].unlink()
    with MessageStore(root, config()) as s:
        for i in (899, 850, 10):
            got = s.query_by_key(msgs[i].topic, f"k{i}")
            assert [m.body for m in got] == [msgs[i].body], i


def test_a_last_index_file_cut_short_by_a_crash_is_rebuilt_else_named(tmp_path: Path) -> None:
    root = tmp_path / "store"
    msgs = write_store(root)
    last = sorted((root / "index").iterdir())[-1]
    with open(last, "r+b") as f:
        f.truncate(100)
    # After a clean close such a file is damage: refused, naming the file and the remedy.
    with pytest.raises(ValueError, match=rf"{last.name} is 100 bytes.*index/ directory is deleted"):
        MessageStore(root, config())
    # After a crash (abort left behind) it is what a crash can leave: dropped and rebuilt.
    (root / "abort").touch()
    with MessageStore(root, config()) as s:
        for i in (899, 850, 10):
            got = s.query_by_key(msgs[i].topic, f"k{i}")
            assert [m.body for m in got] == [msgs[i].body], i


def test_records_of_a_topic_that_is_not_one_directory_get_no_unit_and_dispatch_goes_on(tmp_path: Path) -> None:
    """A log written before the puts refused such topics (or by another writer): dispatch must
    neither make consumequeue/../../escaped/ nor stop at the record for ever."""
    root = tmp_path / "store"
    (root / "commitlog").mkdir(parents=True)
    topics = [b"TopicA", b"../../escaped", b"TopicA", b"x\x00y", b"a/b", b"TopicA"]
    buf = bytearray()
    ts = 1_700_000_000_000
    good = 0
    for i, topic in enumerate(topics):
        props = f"UNIQ_KEY\x01{i:032X}\x02KEYS\x01key-{i}".encode()
        offset = good if topic == b"TopicA" else 0
        buf += oracle.encode_record(
            f"body {i}".encode(), topic, props, queue_offset=offset, phys_offset=len(buf), store_timestamp=ts + i
        )
        good += topic == b"TopicA"
    (root / "commitlog" / f"{0:020d}").write_bytes(bytes(buf) + bytes(FILE - len(buf)))
    with MessageStore(root, config()) as s:
        assert s.wait_dispatched()
        assert s.dispatch_behind_bytes() == 0
        got = s.get_messages("TopicA", 0, 0)
        assert [m.body for m in got.messages] == [b"body 0", b"body 2", b"body 5"]
        assert s.consume_queues.topics() == ["TopicA"]
        # The others stay in the log and the index.
        assert [m.body for m in s.query_by_key("../../escaped", "key-1")] == [b"body 1"]
        # And a put after them is dispatched.
        r = s.put_message(Message("TopicA", b"after", queue_id=0))
        assert r.status == PutMessageStatus.PUT_OK
        assert s.wait_dispatched()
        assert [m.body for m in s.get_messages("TopicA", 0, 3).messages] == [b"after"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]
    assert not list(tmp_path.rglob("escaped"))
