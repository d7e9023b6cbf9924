"""A micro-batch replayed after a restart (its offsets come from the checkpoint, with no
``latestOffset`` call in this process) reads each queue from that queue's own files, as a
planned one does: no partition opens the whole store."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

from dledger.rocketmq import read_messages
from dledger.rocketmq.store.arrow_reader import QueueFiles
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.message_store import MessageStore
from dledger.spark.rocketmq_source import RocketMQDataSource


def test_a_replayed_batch_reads_queues_from_their_own_files(tmp_path: Path) -> None:
    with MessageStore(tmp_path, MessageStoreConfig(mapped_file_size_commit_log=64 * 1024)) as s:
        for k in range(40):
            assert s.put_batch("T", [bytes([k]) * 300] * 10, queue_id=k % 3).ok
        assert s.wait_dispatched(30)
    source = RocketMQDataSource({"path": str(tmp_path), "topics": "T"})
    first = source.streamReader(source.schema())
    start = first.initialOffset()
    end = first.latestOffset(start, first.getDefaultReadLimit())
    # A restarted query: a new reader gets the checkpointed (start, end) straight away.
    replay = source.streamReader(source.schema())
    parts = replay.partitions(start, end)
    assert len(parts) == 3
    assert all(isinstance(p.file, QueueFiles) for p in parts)  # type: ignore[attr-defined]
    rows = pa.Table.from_batches([b for p in parts for b in replay.read(p)])
    want = read_messages(tmp_path, topics=["T"], columns=["queue_id", "queue_offset", "body"])
    assert rows.num_rows == want.num_rows == 400
    for name in ("queue_id", "queue_offset", "body"):
        assert rows.column(name).to_pylist() == want.column(name).to_pylist()


def test_queues_new_to_the_stream_start_at_their_earliest(tmp_path: Path) -> None:
    """A queue the offsets do not name yet starts at its earliest offset, and a trigger's limit
    is shared from there in queue order (the earliest comes from the look latestOffset took)."""
    with MessageStore(tmp_path, MessageStoreConfig(mapped_file_size_commit_log=64 * 1024)) as s:
        for qid in range(3):
            assert s.put_batch("T", [b"m"] * 100, queue_id=qid).ok
        assert s.wait_dispatched(30)
    source = RocketMQDataSource({"path": str(tmp_path), "topics": "T", "maxOffsetsPerTrigger": "130"})
    stream = source.streamReader(source.schema())
    assert stream.latestOffset({}, stream.getDefaultReadLimit()) == {"T": {"0": 100, "1": 30, "2": 0}}
    assert stream.latestOffset({"T": {"0": 100}}, stream.getDefaultReadLimit()) == {"T": {"0": 100, "1": 100, "2": 30}}
