"""The classic commit log's prefault thread faults pages in ahead of the writes and changes no byte."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dledger.rocketmq.store import commitlog as cl_mod
from dledger.rocketmq.store.checkpoint import StoreCheckpoint
from dledger.rocketmq.store.commitlog import CommitLog
from dledger.rocketmq.store.config import MessageStoreConfig


def test_prefault_runs_ahead_of_the_writes_and_keeps_the_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    size = 1 << 22
    monkeypatch.setattr(cl_mod, "PREFAULT_AHEAD", 1 << 20)
    monkeypatch.setattr(cl_mod, "PREFAULT_STEP", 1 << 18)
    cfg = MessageStoreConfig(store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=size)
    log = CommitLog(cfg, StoreCheckpoint(tmp_path / "checkpoint"))
    log.recover(True)
    log.start()  # the thread runs beside the explicit steps below
    written = bytearray()
    f = log.files.last_file(0, True)
    for k in range(64):
        chunk = os.urandom(1000 + 997 * k)
        assert f.append(chunk) >= 0
        written += chunk
        while log._prefault_step():
            pass
        base, done = log._prefaulted
        assert base == 0 and done >= min(len(written) + (1 << 20) - (1 << 17), size)
    log.close()
    data = (tmp_path / "commitlog" / f"{0:020d}").read_bytes()
    assert data == bytes(written) + bytes(size - len(written))
