"""A DLedger group member restarted after kill -9 keeps its consume queues: they are cut to the
log's written end (as Java's DLedgerCommitLog.recover), not to the committed end, which is 0
until the leader speaks (every queue was dropped and rebuilt from the start of the log)."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import pytest

from dledger.rocketmq.broker.message_service import _NodeAppender
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.message_store import MessageStore
from dledger.rocketmq.store.status import GetMessageStatus
from dledger.store.layout import BODY_OFFSET, read_checkpoint, write_checkpoint

CFG = MessageStoreConfig(
    mapped_file_size_commit_log=64 * 1024,
    mapped_file_size_consume_queue=6000,
    max_hash_slot_num=64,
    max_index_num=256,
    enable_dledger_commit_log=True,
)
N = 600


def queue_files(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((root / "consumequeue").rglob("*"))
        if p.is_file()
    }


def killed_member(tmp_path: Path, end_index_back: int = 0) -> Path:
    """A member's root as kill -9 leaves it before its store wrote a checkpoint with a
    committed index: ``abort`` there, ``committedIndex`` -1 (``end_index_back`` entries fewer
    vouched for by ``endIndex``)."""
    root = tmp_path / "member"
    with MessageStore(root, CFG) as store:
        for i in range(N):
            assert store.put_batch("T", [b"m%05d" % i + b"." * (i % 200)], queue_id=i % 3).ok
        assert store.wait_dispatched()
    node = root / "dledger-n0"
    ckpt = read_checkpoint(node)
    assert ckpt is not None and ckpt.end_index == N - 1
    write_checkpoint(node, N - 1 - end_index_back, -1)
    (root / "abort").touch()
    return root


def test_a_restarted_member_keeps_its_consume_queues(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = killed_member(tmp_path)
    before = queue_files(root)
    with caplog.at_level(logging.WARNING):
        store = MessageStore(root, CFG, appender=lambda st: _NodeAppender(st), dispatch_thread=False)
    try:
        assert not [r for r in caplog.records if "cutting them" in r.getMessage()]
        assert queue_files(root) == before
        # Served at once, before the leader has said anything and without a dispatch round.
        for q in range(3):
            last = store.max_offset_in_queue("T", q) - 1
            assert last == (N - 1 - q) // 3
            res = store.get_messages("T", q, last, 1)
            assert res.status == GetMessageStatus.FOUND
            assert res.messages[0].body.startswith(b"m%05d" % (last * 3 + q))
        # What the member's loop dispatches next (the last index file, which an abnormal exit
        # drops) adds no unit: the queues were whole.
        store.dispatch_now()
        assert store.reput.reput_from == store.commitlog.ledger_end_pos
        assert [store.max_offset_in_queue("T", q) for q in range(3)] == [len(range(q, N, 3)) for q in range(3)]
        uniq = store.get_messages("T", 0, 0, 1).messages[0].properties["UNIQ_KEY"]
        assert len(store.query_by_key("T", uniq)) == 1
    finally:
        store.close()
    assert queue_files(root) == before


def test_queues_past_the_written_end_are_cut_there(tmp_path: Path) -> None:
    root = killed_member(tmp_path, end_index_back=1)
    # The last entry never reached the disk: its header is gone (a torn tail).
    with MessageStore(root, CFG, readonly=True) as ro:
        last_phys = ro.get_messages("T", (N - 1) % 3, ro.max_offset_in_queue("T", (N - 1) % 3) - 1, 1).messages[0]
    pos = last_phys.phys_offset - BODY_OFFSET
    data = root / "dledger-n0" / "data"
    f = max((p for p in data.iterdir() if int(p.name) <= pos), key=lambda p: int(p.name))
    with open(f, "r+b") as fh:
        fh.seek(pos - int(f.name))
        fh.write(b"\0" * BODY_OFFSET)
    with MessageStore(root, CFG, appender=lambda st: _NodeAppender(st), dispatch_thread=False) as store:
        assert store.commitlog.ledger_end_pos == pos
        q = (N - 1) % 3
        assert store.max_offset_in_queue("T", q) == (N - 1) // 3  # the lost one's unit only
        for other in {0, 1, 2} - {q}:
            assert store.max_offset_in_queue("T", other) == len(range(other, N, 3))
        res = store.get_messages("T", q, store.max_offset_in_queue("T", q) - 1, 1)
        assert res.status == GetMessageStatus.FOUND
