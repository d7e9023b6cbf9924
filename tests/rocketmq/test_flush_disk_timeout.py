"""SYNC_FLUSH past ``sync_flush_timeout``: the put answers FLUSH_DISK_TIMEOUT, and the message
stays stored (RocketMQ's CommitLog.handleDiskFlush: the status says the flush was not seen in
time, not that the message is gone; the producer may send it again, and a consumer sees it).

The flush is held up for real: the test holds the commit log's flush lock, as retention does
while it deletes files, so the flush service's msync waits past the timeout. (The classic
commit log; a DLedger commit log flushes in the put itself and never times out.)
"""

from __future__ import annotations

from pathlib import Path

from dledger.rocketmq.store.config import SYNC_FLUSH, MessageStoreConfig
from dledger.rocketmq.store.message import Message
from dledger.rocketmq.store.message_store import MessageStore
from dledger.rocketmq.store.status import PutMessageStatus


def _config() -> MessageStoreConfig:
    return MessageStoreConfig(
        mapped_file_size_commit_log=1 << 20,
        flush_disk_type=SYNC_FLUSH,
        sync_flush_timeout=50,
        flush_interval_commit_log=3_600_000,  # no timed flush: only the puts' own
        store_host="127.0.0.1:10911",
    )


def _bodies(s: MessageStore) -> list[bytes]:
    assert s.wait_dispatched(30)
    return [m.body for m in s.get_messages("T", 0, 0, 32).messages]


def test_a_flush_past_the_timeout_answers_flush_disk_timeout_and_keeps_the_message(tmp_path: Path) -> None:
    s = MessageStore(tmp_path / "s", _config(), schedule=False)
    try:
        assert s.put_message(Message("T", b"before")).status == PutMessageStatus.PUT_OK
        with s.commitlog.flush_lock:
            late = s.put_message(Message("T", b"late"))
            batch = s.put_messages([Message("T", b"late-1"), Message("T", b"late-2")])
        assert late.status == PutMessageStatus.FLUSH_DISK_TIMEOUT, late
        assert batch.status == PutMessageStatus.FLUSH_DISK_TIMEOUT, batch
        # Stored all the same, at the offsets the answers give.
        assert late.append_result is not None and late.queue_offset == 1
        assert batch.queue_offset == 2
        assert s.put_message(Message("T", b"after")).status == PutMessageStatus.PUT_OK
        assert _bodies(s) == [b"before", b"late", b"late-1", b"late-2", b"after"]
    finally:
        s.close()
    reopened = MessageStore(tmp_path / "s", _config(), readonly=True)
    try:
        assert _bodies(reopened) == [b"before", b"late", b"late-1", b"late-2", b"after"]
    finally:
        reopened.close()
