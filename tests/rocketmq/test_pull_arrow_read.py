"""pull_arrow reads records in place (the ``pull_records`` kernel): the same table as the
records the consume queue points at, decoded one by one, over interleaved queues, commit-log
file boundaries (both logs) and a damaged record."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dledger._ext import load
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.message import Message
from dledger.rocketmq.store.message_store import MessageStore

K = load("message")


def _store(path: Path, mode: str) -> MessageStore:
    cfg = MessageStoreConfig(
        enable_dledger_commit_log=mode == "dledger", mapped_file_size_commit_log=64 * 1024, store_host="10.0.0.1:10911"
    )
    return MessageStore(path, cfg)


@pytest.mark.parametrize("mode", ["classic", "dledger"])
def test_pull_arrow_matches_get_messages(tmp_path: Path, mode: str) -> None:
    s = _store(tmp_path / mode, mode)
    try:
        bodies = [bytes([i % 251]) * (i % 300) for i in range(2000)]
        for k in range(0, 2000, 40):
            assert s.put_batch("P", bodies[k : k + 40], queue_id=3, tags="t", keys=[f"k{k}"] * 40).ok
            assert s.put_message(Message("Other", b"interleaved" * (k % 7)))
        assert s.wait_dispatched()
        assert len(s.commitlog.files.files) > 3  # the pull crosses log files
        got = []
        off = 0
        while off < 2000:
            t = s.pull_arrow("P", 3, off, 333)
            assert t.num_rows and all(c.num_chunks == 1 for c in t.columns)
            got.append(t)
            off += t.num_rows
        rows = [r for t in got for r in t.to_pylist()]
        msgs = [m for o in range(0, 2000, 32) for m in s.get_messages("P", 3, o, 32, 1 << 30).messages]
        assert len(rows) == len(msgs) == 2000
        for r, m in zip(rows, msgs, strict=True):
            assert (r["queue_offset"], r["phys_offset"], r["size"]) == (m.queue_offset, m.phys_offset, m.size)
            assert (r["store_timestamp"], r["born_timestamp"], r["sys_flag"], r["flag"]) == (
                m.store_timestamp,
                m.born_timestamp,
                m.sys_flag,
                m.flag,
            )
            assert r["body"] == m.body and r["reconsume_times"] == m.reconsume_times
    finally:
        s.close()


def test_pull_records_stops_at_a_damaged_record() -> None:
    s_buf = bytearray()
    from dledger.rocketmq.store.batch_preparer import BatchPreparer
    from dledger.rocketmq.store.encode import encode_batch

    cfg = MessageStoreConfig(store_host="10.0.0.1:10911")
    b = BatchPreparer(cfg, ("10.0.0.1", 10911)).prepare_columns("T", [b"a" * 10, b"bb", b"c" * 30])
    buf, starts = encode_batch(b, np.arange(3, dtype=np.int64), np.zeros(3, dtype=np.int64), 1)
    s_buf += bytes(buf)
    offs = np.asarray(starts[:3], dtype=np.int64)
    sizes = np.diff(np.asarray(starts, dtype=np.int64)).astype(np.int32)
    n, cols, body, bvo, _props, pvo = K.pull_records(s_buf, offs, sizes)
    assert n == 3 and bytes(body[: bvo[3]]) == b"a" * 10 + b"bb" + b"c" * 30 and len(pvo) == 4
    s_buf[int(offs[1]) + 4] ^= 0xFF  # the second record's magic
    n, cols, body, bvo, _props, pvo = K.pull_records(s_buf, offs, sizes)
    assert n == 1 and len(cols["size"]) == 1 and list(bvo) == [0, 10]
    wrong = sizes.copy()
    wrong[0] += 1  # a unit whose size is not its record's
    assert K.pull_records(bytes(buf), offs, wrong)[0] == 0


def test_an_empty_pull_has_the_schema_of_a_pull_with_rows(tmp_path: Path) -> None:
    s = _store(tmp_path / "s", "classic")
    try:
        assert s.put_batch("P", [b"x"] * 3, queue_id=0).ok
        assert s.wait_dispatched()
        assert s.pull_arrow("P", 0, 0).schema == s.pull_arrow("P", 0, 3).schema == s.pull_arrow("none", 0, 0).schema
    finally:
        s.close()


@pytest.mark.parametrize("born", [("10.1.2.3", 77), ("2001:db8::7", 99)])
def test_lookup_decodes_one_record_as_a_scan_does(tmp_path: Path, born: tuple[str, int]) -> None:
    from dledger.rocketmq.store.records import decode_record, messages_from_columns

    s = _store(tmp_path / "s", "classic")
    try:
        keys = ["k1 k2", None, "ключ"]
        assert s.put_batch("Тема", [b"", b"b" * 5, b"c" * 300], queue_id=1, tags="t", keys=keys, born_host=born).ok
        assert s.wait_dispatched()
        units = s.get_messages("Тема", 1, 0, 3, 1 << 20).messages
        assert len(units) == 3
        for m in units:
            one = s.lookup(m.phys_offset)
            data = s.commitlog.read(m.phys_offset, m.size)
            cols, _stop, _code = K.scan_records(data, m.phys_offset, 0, -1, False, 1)
            assert one == messages_from_columns(data, cols)[0] == m
            assert one is not None and one.born_host == born
            assert decode_record(data[:-1], m.phys_offset) is None  # not a whole record
            assert decode_record(b"\0" * 8 + bytes(data[8:]), m.phys_offset) is None  # no record there
    finally:
        s.close()
