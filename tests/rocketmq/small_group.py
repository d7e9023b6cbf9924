"""The 3-member message-store group that several cluster test modules share the shape of:
64 KiB messages, 4 queues a topic, 1 MiB data files (importable by name, as record_oracle)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dledger.testing import FAST, TestCluster

MAX_MESSAGE = 64 * 1024
QUEUES = 4


@contextmanager
def running_small_group(root: Path, *more: str) -> Iterator[TestCluster]:
    """The group started in ``root`` with a leader, stopped (by its members' PIDs) after."""
    group = TestCluster(
        root,
        member_dirs=True,
        extra=[
            *FAST,
            *more,
            "--message-store",
            "--max-message-size",
            str(MAX_MESSAGE),
            "--default-topic-queue-nums",
            str(QUEUES),
            "--mapped-file-size-for-entry-data",
            str(1 << 20),
        ],
    )
    with group.running() as c:
        yield c
