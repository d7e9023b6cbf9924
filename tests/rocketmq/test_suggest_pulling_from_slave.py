"""getMessage's suggestPullingFromSlave on a real store: a pull whose last message lies further
behind the commit log's end than accessMessageInMemoryMaxRatio % of the machine's memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from dledger.rocketmq.store import message_store
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.message import Message
from dledger.rocketmq.store.message_store import MessageStore
from dledger.rocketmq.store.store_util import TOTAL_PHYSICAL_MEMORY_SIZE


def _store(tmp_path: Path, ratio: int) -> MessageStore:
    cfg = MessageStoreConfig(mapped_file_size_commit_log=1024 * 1024, access_message_in_memory_max_ratio=ratio)
    return MessageStore(tmp_path / f"store-{ratio}", cfg)


def test_the_machines_memory_is_known() -> None:
    assert TOTAL_PHYSICAL_MEMORY_SIZE >= 256 * 1024 * 1024


def test_far_behind_is_more_than_the_ratio_of_memory_behind_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A machine of 100 000 bytes, so that 1 % (1000 bytes) is a few messages.
    monkeypatch.setattr(message_store, "TOTAL_PHYSICAL_MEMORY_SIZE", 100_000)
    store = _store(tmp_path, 1)
    try:
        phys = [store.put_message(Message("T", b"x" * 400)).phys_offset for _ in range(6)]
        end = store.max_phys_offset
        assert [store.suggest_pulling_from_slave(p) for p in phys] == [end - p > 1000 for p in phys]
        assert store.suggest_pulling_from_slave(phys[0]) and not store.suggest_pulling_from_slave(phys[-1])
        # Exactly the memory behind is not beyond it (Java's diff > memory).
        assert not store.suggest_pulling_from_slave(end - 1000) and store.suggest_pulling_from_slave(end - 1001)
    finally:
        store.close()


def test_java_default_ratio_keeps_a_small_backlog_on_the_master_and_ratio_zero_does_not(tmp_path: Path) -> None:
    for ratio, behind in ((40, False), (0, True)):
        store = _store(tmp_path, ratio)
        try:
            first = store.put_message(Message("T", b"first")).phys_offset
            store.put_message(Message("T", b"second"))
            assert store.suggest_pulling_from_slave(first) is behind
            assert not store.suggest_pulling_from_slave(store.max_phys_offset)
        finally:
            store.close()
