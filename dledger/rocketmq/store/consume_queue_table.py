"""DefaultMessageStore's consumeQueueTable: every consume queue of a store, by topic and queue id."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike

from dledger.rocketmq.store.consume_queue import DEFAULT_FILE_SIZE, ConsumeQueue
from dledger.rocketmq.store.topic_validator import store_topic_problem


class IllegalTopic(ValueError):
    """A topic that is not one directory name, where a consume queue would be made for it."""


class ConsumeQueueTable:
    """DefaultMessageStore's consumeQueueTable: topic -> queue id -> ConsumeQueue.

    ``root`` is the store root (queues live under ``root/consumequeue``). Iterating yields
    ``(topic, queue_id, queue)`` sorted by topic, then queue id.
    """

    def __init__(
        self,
        root: Path | str,
        file_size: int = DEFAULT_FILE_SIZE,
        readonly: bool = False,
        *,
        store_path: Path | str | None = None,
    ) -> None:
        self.root = Path(root)
        self.dir = Path(store_path) if store_path is not None else self.root / "consumequeue"
        self.file_size = file_size
        self.readonly = readonly
        self.table: dict[str, dict[int, ConsumeQueue]] = {}

    def load(self) -> None:
        """Open every ``<topic>/<queueId>`` directory (loadConsumeQueue; each queue recovers its end)."""
        if not self.dir.is_dir():
            return
        for topic_dir in sorted(self.dir.iterdir()):
            if not topic_dir.is_dir() or topic_dir.name.startswith("."):
                continue
            for qdir in sorted(topic_dir.iterdir()):
                if not qdir.is_dir() or not qdir.name.lstrip("-").isdigit():
                    continue
                self._open(topic_dir.name, int(qdir.name))

    def _open(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = ConsumeQueue(
            self.root, topic, queue_id, self.file_size, self.readonly, queue_dir=self.dir / topic / str(queue_id)
        )
        self.table.setdefault(topic, {})[queue_id] = cq
        return cq

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        """findConsumeQueue: the queue, created (no file until its first unit) if unknown.
        Raises IllegalTopic for a name that is not one directory (``../x``, ``a/b``), which
        the puts refuse first."""
        cq = self.table.get(topic, {}).get(queue_id)
        if cq is not None:
            return cq
        why = store_topic_problem(topic)
        if why is not None:
            raise IllegalTopic(why)
        return self._open(topic, queue_id)

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.table.get(topic, {}).get(queue_id)

    def topics(self) -> list[str]:
        return sorted(self.table)

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(self.table.get(topic, {}))

    def __iter__(self) -> Iterator[tuple[str, int, ConsumeQueue]]:
        for topic in sorted(self.table):
            queues = self.table[topic]
            for qid in sorted(queues):
                yield topic, qid, queues[qid]

    def __len__(self) -> int:
        return sum(len(q) for q in self.table.values())

    def put_batch(
        self,
        topics: Sequence[str],
        queue_ids: ArrayLike,
        cq_offsets: ArrayLike,
        phys_offsets: ArrayLike,
        sizes: ArrayLike,
        tags_codes: ArrayLike,
    ) -> int:
        """Dispatch units of many queues (in commit-log order); returns how many were written."""
        qids = np.asarray(queue_ids, dtype=np.int64)
        cq = np.asarray(cq_offsets, dtype=np.int64)
        phys = np.asarray(phys_offsets, dtype=np.int64)
        size = np.asarray(sizes, dtype=np.int32)
        tags = np.asarray(tags_codes, dtype=np.int64)
        groups: dict[tuple[str, int], list[int]] = {}
        for i, topic in enumerate(topics):
            groups.setdefault((topic, int(qids[i])), []).append(i)
        written = 0
        for (topic, qid), rows in groups.items():
            idx = np.asarray(rows, dtype=np.int64)
            written += self.find_or_create(topic, qid).put_units(cq[idx], phys[idx], size[idx], tags[idx])
        return written

    def recover(self) -> None:
        for _, _, cq in self:
            cq.recover()

    def max_physic_offset(self) -> int:
        """getMaxPhyOffsetInConsumeQueue: the largest end of a message any queue points at (-1 if none)."""
        return max((cq.max_physic_offset for _, _, cq in self), default=-1)

    def truncate_dirty(self, phys_offset: int) -> None:
        for _, _, cq in self:
            cq.truncate_dirty(phys_offset)

    def correct_min_offset(self, min_phys_offset: int) -> None:
        for _, _, cq in self:
            cq.correct_min_offset(min_phys_offset)

    def flush(self) -> None:
        for job in self.flush_jobs():
            job()

    def flush_jobs(self) -> list[Callable[[], None]]:
        return [job for _, _, cq in self for job in cq.flush_jobs()]

    def close(self) -> None:
        for _, _, cq in self:
            cq.close()
        self.table.clear()
