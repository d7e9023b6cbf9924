"""``K.SinglePut``, the single put in one kernel call (issue 40): once a message's template is
cached, ``put_message`` writes through it the bytes the general path writes, takes queue offsets
and UNIQ_KEYs as it does, and hands whatever is not the common case back to it."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest
import record_oracle as oracle

from dledger._ext import message as K
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.message import Message, MessageExt
from dledger.rocketmq.store.message_store import MessageStore
from dledger.rocketmq.store.status import PutMessageStatus

PROPS = {"CLUSTER": "DefaultCluster"}
BORN = ("10.0.0.1", 50000)
UNIQ = re.compile(rb"UNIQ_KEY\x01([0-9A-F]+)")


def config(mode: str, file_size: int = 4096) -> MessageStoreConfig:
    return MessageStoreConfig(
        enable_dledger_commit_log=mode == "dledger", mapped_file_size_commit_log=file_size, store_host="10.0.0.1:10911"
    )


def workload_message(seq: int, body: bytes = b"x" * 100, keys: str | list[str] | None = None) -> Message:
    return Message(
        "BenchTopic",
        body,
        queue_id=seq % 3,
        tags="TagA",
        keys=f"key-0-{seq}" if keys is None else keys,
        properties=dict(PROPS),
        born_host=BORN,
    )


def read_record(s: MessageStore, phys: int) -> tuple[bytes, dict]:
    size = s.commitlog.record_size_at(phys)
    data = s.commitlog.read(phys, size)
    assert data is not None
    return data, oracle.decode_record(data, 0, check_crc=True)


@pytest.mark.parametrize("mode", ["classic", "dledger"])
def test_the_kernel_put_writes_the_general_paths_bytes(tmp_path: Path, mode: str) -> None:
    """Messages put through the kernel (4 KiB files: puts cross file ends) read back as the
    general path's encoder writes them with the same offsets, times and UNIQ_KEY, CRC checked;
    each queue's offsets run 0, 1, 2, ... and every UNIQ_KEY is unique."""
    with MessageStore(tmp_path / "s", config(mode)) as s:
        # The first put of each queue caches its template; the kernel puts the rest.
        warm = [s.put_message(workload_message(seq)) for seq in range(3)]
        r = s._single_put.put(workload_message(3))
        assert r is not None and r.status.name == "PUT_OK"  # None would be the general path's turn
        results = [s.put_message(workload_message(seq)) for seq in range(4, 200)]
        assert all(x.status == PutMessageStatus.PUT_OK for x in warm + results)
        phys = [x.phys_offset for x in warm] + [r.phys_offset] + [x.phys_offset for x in results]
        queue_offsets = [x.queue_offset for x in warm] + [r.queue_offset] + [x.queue_offset for x in results]
        prep = s.preparer
        uniq = []
        for seq, p, qo in zip(range(200), phys, queue_offsets, strict=True):
            m = workload_message(seq)
            data, rec = read_record(s, p)
            assert rec["queue_offset"] == qo
            value = UNIQ.search(rec["properties"])
            assert value is not None
            uniq.append(value.group(1))
            head, counter = value.group(1)[:-4], int(value.group(1)[-4:], 16)
            want = K.encode_put(
                prep.put_template(m),
                m.body,
                head,
                counter,
                m.flag,
                rec["born_timestamp"],
                m.reconsume_times,
                m.prepared_offset,
                qo,
                rec["stored_phys_offset"],
                rec["store_timestamp"],
            )
            assert data == bytes(want)
            assert f"KEYS\x01key-0-{seq}\x02".encode() in rec["properties"]
        for q in range(3):
            assert [qo for seq, qo in enumerate(queue_offsets) if seq % 3 == q] == list(range(67 if q < 2 else 66))
        assert len(set(uniq)) == len(uniq)
        assert s.commitlog.topic_queue_table == {"BenchTopic-0": 67, "BenchTopic-1": 67, "BenchTopic-2": 66}
        assert s.wait_dispatched(30)
        for q in range(3):
            got = s.get_messages("BenchTopic", q, 0, 1000).messages
            assert [m.queue_offset for m in got] == list(range(len(got)))
        assert [m.keys for m in s.query_by_key("BenchTopic", "key-0-150", 4)] == ["key-0-150"]


def record_as_encoded(s: MessageStore, m: Message, phys: int) -> tuple[bytes, bytes]:
    """The record at ``phys`` and what the general path's encoder makes of ``m`` with the
    record's own UNIQ_KEY, offsets and times (the template from ``put_template``)."""
    data, rec = read_record(s, phys)
    value = UNIQ.search(rec["properties"])
    assert value is not None
    want = K.encode_put(
        s.preparer.put_template(m),
        m.body,
        value.group(1)[:-4],
        int(value.group(1)[-4:], 16),
        m.flag,
        rec["born_timestamp"],
        m.reconsume_times,
        m.prepared_offset,
        rec["queue_offset"],
        rec["stored_phys_offset"],
        rec["store_timestamp"],
    )
    return data, bytes(want)


@pytest.mark.parametrize("mode", ["classic", "dledger"])
def test_puts_to_one_queue_that_differ_in_one_field_each_write_their_own_template(tmp_path: Path, mode: str) -> None:
    """The kernel remembers each queue's last template: puts to one queue (and to queue 16,
    which shares its place) that differ from the one before in one field only (topic, tags,
    a property's value, the properties' order, keyed or not, born host; each put after the
    base message and the base after each) write the record of their own fields, three turns."""
    two = {"CLUSTER": "DefaultCluster", "A": "1"}

    def msg(
        topic: str = "BenchTopic",
        queue_id: int = 0,
        tags: str | None = "TagA",
        props: dict | None = None,
        keys: str | None = "k",
        born: tuple[str, int] = BORN,
    ) -> Message:
        return Message(
            topic,
            b"b" * 20,
            queue_id=queue_id,
            tags=tags,
            keys=keys,
            properties=dict(two if props is None else props),
            born_host=born,
        )

    variants = [
        msg(),
        msg(topic="OtherTopic"),
        msg(tags="TagB"),
        msg(tags=None),
        msg(props={"A": "1", "CLUSTER": "DefaultCluster"}),
        msg(props={"CLUSTER": "DefaultCluster", "A": "2"}),
        msg(props={"CLUSTER": "DefaultCluster"}),
        msg(keys=None),
        msg(born=("10.0.0.2", 50000)),
        msg(queue_id=16),
    ]
    with MessageStore(tmp_path / "s", config(mode, 1 << 20)) as s:
        put = []
        for turn in range(3):
            for m in [x for v in variants[1:] for x in (variants[0], v)]:  # each after the base
                r = s.put_message(m) if turn == 0 else s._single_put.put(m)
                assert r is not None and r.status == PutMessageStatus.PUT_OK  # after the first turn, the kernel's
                put.append((m, r.phys_offset))
        for m, phys in put:
            got, want = record_as_encoded(s, m, phys)
            assert got == want, (m, phys)


@pytest.mark.parametrize("mode", ["classic", "dledger"])
def test_kernel_puts_and_batches_share_the_queue_offsets(tmp_path: Path, mode: str) -> None:
    """Kernel single puts, batches and ``put_messages`` of one queue, interleaved: the queue's
    offsets run on without a gap or a repeat."""
    with MessageStore(tmp_path / "s", config(mode, 64 * 1024)) as s:
        seen: list[int] = []
        for i in range(30):
            seen.append(s.put_message(workload_message(3 * i)).queue_offset)
            r = s.put_batch("BenchTopic", [b"b"] * 5, queue_id=0, tags="TagA", properties=PROPS, born_host=BORN)
            assert r.append_result is not None and r.append_result.queue_offsets is not None
            seen.extend(int(x) for x in r.append_result.queue_offsets)
            seen.append(s.put_messages([workload_message(3 * i)]).queue_offset)
        assert seen == list(range(len(seen)))


@pytest.mark.parametrize("mode", ["classic", "dledger"])
def test_threads_of_kernel_puts_take_distinct_offsets(tmp_path: Path, mode: str) -> None:
    """4 threads of kernel puts to one queue: every queue offset and UNIQ_KEY taken once, and
    the records of the queue in the commit log in queue-offset order."""
    with MessageStore(tmp_path / "s", config(mode, 1 << 20)) as s:
        s.put_message(workload_message(0))
        out: list[list[tuple[int, int]]] = [[] for _ in range(4)]

        def run(t: int) -> None:
            for i in range(300):
                r = s.put_message(workload_message(0, keys=f"key-{t}-{i}"))
                assert r.status == PutMessageStatus.PUT_OK
                out[t].append((r.queue_offset, r.phys_offset))

        threads = [threading.Thread(target=run, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        pairs = sorted(p for o in out for p in o)
        assert [qo for qo, _ in pairs] == list(range(1, 1201))
        assert [p for _, p in pairs] == sorted(p for _, p in pairs)
        uniq = {UNIQ.search(read_record(s, p)[1]["properties"]).group(1) for _, p in pairs}  # type: ignore[union-attr]
        assert len(uniq) == 1200


@pytest.mark.parametrize("mode", ["classic", "dledger"])
def test_what_the_kernel_leaves_the_general_path_still_refuses(tmp_path: Path, mode: str) -> None:
    """A key that would not read back, an oversized body, a number out of range: MESSAGE_ILLEGAL
    with nothing written, after kernel puts of the same template; a list of keys is put."""
    cfg = config(mode, 1 << 20)
    cfg.max_message_size = 2048
    with MessageStore(tmp_path / "s", cfg) as s:
        for seq in range(3):
            assert s.put_message(workload_message(seq)).status == PutMessageStatus.PUT_OK
        end = s.max_phys_offset
        bad = [
            workload_message(0, keys="a\x01b"),
            workload_message(0, body=b"x" * 3000),
            Message("BenchTopic", b"x", tags="TagA", keys="k", properties=dict(PROPS), born_host=BORN, flag=2**31),
        ]
        for m in bad:
            assert s.put_message(m).status == PutMessageStatus.MESSAGE_ILLEGAL
        assert s.max_phys_offset == end
        r = s.put_message(workload_message(3, keys=["k1", "k2"]))
        assert r.status == PutMessageStatus.PUT_OK
        assert b"KEYS\x01k1 k2\x02" in read_record(s, r.phys_offset)[1]["properties"]


@pytest.mark.parametrize("mode", ["classic", "dledger"])
def test_a_message_ext_is_put_from_its_message_fields(tmp_path: Path, mode: str) -> None:
    """A MessageExt put again (as the schedule and transaction services do) goes through the
    kernel, which reads its Message fields from their slots: its record is the one a Message of
    the same fields gets, and what it holds of an earlier put (offsets, times, ids) is not stored."""
    with MessageStore(tmp_path / "s", config(mode, 1 << 20)) as s:
        for seq in range(3):
            s.put_message(workload_message(seq))
        ext = MessageExt(
            "BenchTopic",
            b"e" * 50,
            queue_id=1,
            flag=7,
            tags="TagA",
            keys="key-ext",
            properties=dict(PROPS),
            born_timestamp=1234,
            born_host=BORN,
            reconsume_times=2,
            queue_offset=99,
            phys_offset=12345,
            store_timestamp=5,
            msg_id="X",
        )
        r = s._single_put.put(ext)
        assert r is not None and r.status == PutMessageStatus.PUT_OK  # the kernel's, not the general path's
        plain = Message(
            "BenchTopic",
            b"e" * 50,
            queue_id=1,
            flag=7,
            tags="TagA",
            keys="key-ext",
            properties=dict(PROPS),
            born_timestamp=1234,
            born_host=BORN,
            reconsume_times=2,
        )
        q = s.put_message(plain)
        assert (r.queue_offset, q.queue_offset) == (1, 2)
        got, want = read_record(s, r.phys_offset)[1], read_record(s, q.phys_offset)[1]
        for name in ("topic", "body", "queue_id", "flag", "born_timestamp", "reconsume_times", "sys_flag"):
            assert got[name] == want[name], name
        strip = re.compile(rb"UNIQ_KEY\x01[0-9A-F]+")
        assert strip.sub(b"", got["properties"]) == strip.sub(b"", want["properties"])
        assert b"KEYS\x01key-ext" in got["properties"]


@pytest.mark.parametrize("mode", ["classic", "dledger"])
def test_a_message_missing_a_field_is_refused_with_nothing_written(tmp_path: Path, mode: str) -> None:
    """A Message whose field was deleted (its slot empty) is UNKNOWN_ERROR with nothing
    written, as when the kernel read it by getattr, also after kernel puts of its template."""
    with MessageStore(tmp_path / "s", config(mode, 1 << 20)) as s:
        for seq in range(3):
            assert s.put_message(workload_message(seq)).status == PutMessageStatus.PUT_OK
        end = s.max_phys_offset
        for name in ("tags", "body", "prepared_offset"):
            m = workload_message(0)
            delattr(m, name)
            assert s.put_message(m).status == PutMessageStatus.UNKNOWN_ERROR, name
        assert s.max_phys_offset == end


def test_a_dledger_kernel_put_moves_the_committed_end_and_wakes_dispatch(tmp_path: Path) -> None:
    """On the single member a kernel put is committed as appended: the log's committed end
    moves to its record's end and dispatch is woken with it (an idle dispatch waits for that),
    once per put."""
    with MessageStore(tmp_path / "s", config("dledger", 1 << 20)) as s:
        for seq in range(3):
            s.put_message(workload_message(seq))
        log = s.commitlog
        woken: list[int] = []
        dispatch_wakeup = log.wakeup
        assert dispatch_wakeup is not None

        def wakeup() -> None:
            woken.append(log._committed_pos)
            dispatch_wakeup()

        log.wakeup = wakeup
        ends = []
        for seq in range(3, 8):
            r = s._single_put.put(workload_message(seq))
            assert r is not None and r.status == PutMessageStatus.PUT_OK  # the kernel's
            ends.append(r.phys_offset + r.append_result.wrote_bytes)
            assert log._committed_pos == ends[-1]
        assert woken == ends
        assert s.wait_dispatched(30)
        assert s.get_messages("BenchTopic", 7 % 3, 0, 100).messages[-1].keys == "key-0-7"
