"""A DLedger group member's restart after kill -9: time to its first served read (the last
message of a queue), with the consume queues kept (cut to the log's written end, as Java's
recovery does) beside the rule it replaced (cut to the committed end, 0 until the leader speaks:
every queue rebuilt from the start of the log), in the same run.

    DLEDGER_BENCH_RESTART_MESSAGES=1000000 pytest bench/test_bench_mq_restart.py -p no:cacheprovider -s

The member: a ``MessageStore`` over the DLedger log with the group's appender (the member's
``_NodeAppender``: puts go through the group, the committed position is the node store's),
whose checkpoint names no committed index (a member killed before its store wrote one). The
kill: the store is closed, then its DLedger checkpoint is rewritten without ``committedIndex``.
``before``: the replaced rule, reproduced as it acted (every consume-queue unit dropped before
the open), then the leader's first commit (``on_committed`` at the log's end) and dispatch to the
read. ``after``: the open, then the read.

With the index on, both pay for the last index file, which an abnormal exit drops and dispatch
rebuilds during the open (RocketMQ's rule: the checkpoint vouches only for full index files, and
one holds 20M items): that is most of a restart's cost at any size below 20M messages. Without
the index, the figures are the consume queues' alone.
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import pytest

from dledger.rocketmq.broker.message_service import _NodeAppender
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.message_store import MessageStore
from dledger.rocketmq.store.status import GetMessageStatus
from dledger.store.layout import read_checkpoint, write_checkpoint

MESSAGES = int(os.environ.get("DLEDGER_BENCH_RESTART_MESSAGES", 1_000_000))
ROUNDS = int(os.environ.get("DLEDGER_BENCH_RESTART_ROUNDS", 3))
QUEUES = 8
BATCH = 1000
CFG = MessageStoreConfig(enable_dledger_commit_log=True, mapped_file_size_commit_log=256 << 20)


def _killed(root: Path) -> None:
    """What kill -9 before the first checkpoint leaves: no committed index on record."""
    node = root / "dledger-n0"
    ckpt = read_checkpoint(node)
    assert ckpt is not None and ckpt.end_index is not None
    write_checkpoint(node, ckpt.end_index, -1)


def _first_read(root: Path, cfg: MessageStoreConfig, rebuild: bool) -> float:
    t = time.perf_counter()
    store = MessageStore(root, cfg, appender=lambda st: _NodeAppender(st), dispatch_thread=False)
    try:
        if rebuild:
            # The leader speaks: everything is committed; dispatch rebuilds the queues.
            store.on_committed(int(store.commitlog.ledger_end_pos))
            store.dispatch_now()
        q = QUEUES - 1
        res = store.get_messages("T", q, store.max_offset_in_queue("T", q) - 1, 1)
        took = time.perf_counter() - t
        assert res.status == GetMessageStatus.FOUND, res.status
        assert store.max_offset_in_queue("T", q) == MESSAGES // QUEUES
        return took
    finally:
        store.close()


@pytest.mark.parametrize("index", [True, False], ids=["index", "no-index"])
def test_time_to_first_read_after_a_restart(benchmark: Any, tmp_path: Path, index: bool) -> None:
    root = tmp_path / "member"
    cfg = CFG.replace(message_index_enable=index)
    with MessageStore(root, cfg) as store:
        body = b"r" * 100
        for i in range(MESSAGES // BATCH):
            assert store.put_batch("T", [body] * BATCH, queue_id=i % QUEUES).ok
        assert store.wait_dispatched(600)
    before: list[float] = []
    after: list[float] = []
    for _ in range(ROUNDS):
        _killed(root)
        shutil.rmtree(root / "consumequeue")  # the replaced rule: every unit cut
        (root / "abort").touch()
        before.append(_first_read(root, cfg, rebuild=True))
        _killed(root)
        (root / "abort").touch()
        after.append(_first_read(root, cfg, rebuild=False))
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    benchmark.extra_info.update(messages=MESSAGES, index=index, before_s=before, after_s=after)
    print(
        f"\n{MESSAGES} messages of 100 B in {QUEUES} queues, index {'on' if index else 'off'}: first read after "
        "restart, queues rebuilt "
        f"(before) median {statistics.median(before):.3f} s (min {min(before):.3f}, max {max(before):.3f}); "
        f"queues kept (after) median {statistics.median(after):.3f} s (min {min(after):.3f}, max {max(after):.3f})"
    )
