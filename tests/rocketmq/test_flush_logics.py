"""FlushConsumeQueueService's flush (MessageStore.flush_logics) beside dispatch: the consume
queues and index are written out without dispatch's lock held, so dispatch (and a long poll
waiting on it) is not held up for the msyncs; what a flush takes is written out, and what is
dirtied meanwhile is left for the next flush."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.message_store import MessageStore


@pytest.mark.parametrize("dledger", [False, True])
def test_flush_writes_out_without_holding_dispatchs_lock(tmp_path: Path, dledger: bool) -> None:
    cfg = MessageStoreConfig(enable_dledger_commit_log=dledger, mapped_file_size_commit_log=1 << 20)
    store = MessageStore(tmp_path, cfg)
    try:
        store.reput.stop()  # dispatch runs here, when the test says
        assert store.put_batch("TopicA", [b"x" * 50] * 10, queue_id=1, keys=["k"] * 10).ok
        store.reput.dispatch_now()
        cqs, index = store.consume_queues, store.index_service
        taken: list[int] = []
        held_by_flush: list[bool] = []
        dispatched_meanwhile: list[int] = []

        def probe() -> None:
            # Run as the flush's last job: can another thread take dispatch's lock and dispatch?
            def other() -> None:
                got = store.reput._lock.acquire(timeout=5)
                held_by_flush.append(not got)
                if got:
                    try:
                        assert store.put_batch("TopicA", [b"y" * 50] * 3, queue_id=1).ok
                        dispatched_meanwhile.append(store.reput.dispatch_now())
                    finally:
                        store.reput._lock.release()

            t = threading.Thread(target=other)
            t.start()
            t.join(10)

        real = cqs.flush_jobs

        def jobs() -> list:
            got = real()
            taken.append(len(got))
            return [*got, probe]

        cqs.flush_jobs = jobs  # type: ignore[method-assign]
        store.flush_logics()
        assert taken and taken[0] > 0  # the queue's file (and its new directories) had work
        assert held_by_flush == [False]
        assert dispatched_meanwhile == [3]
        cq = cqs.get("TopicA", 1)
        assert cq is not None and int(cq.max_offset) == 13
        # What was dispatched during the flush is dirty still: the next flush writes it out.
        assert cq.flush_jobs()
        cqs.flush_jobs = real  # type: ignore[method-assign]
        store.flush_logics()
        assert cqs.flush_jobs() == [] and index.flush_jobs(partial=False) == []
        # The index file being filled is not written out by the periodic flush (RocketMQ writes
        # a file out once full; a crash drops and rebuilds it), but its header is current in
        # the file for readers (a read-only store finds every key).
        last = index.files[-1]
        assert not last.is_write_full() and len(index.flush_jobs()) == 1
        ro = MessageStore(tmp_path, cfg, readonly=True)
        try:
            assert [m.queue_offset for m in ro.query_by_key("TopicA", "k", 64)] == list(range(9, -1, -1))
        finally:
            ro.close()
    finally:
        store.close()
