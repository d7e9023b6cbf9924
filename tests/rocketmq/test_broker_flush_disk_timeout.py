"""A SYNC_FLUSH classic broker process whose flush cannot finish within ``syncFlushTimeout``
answers the producer FLUSH_DISK_TIMEOUT (RocketMQ's SendStatus name) and keeps the message
(CommitLog.handleDiskFlush: the status says the flush was not seen in time, not that the
message is gone).

The device is slow for real: the broker's store is on a loop-mounted ext4 whose writes the
broker's blkio cgroup throttles to 2 I/Os a second (``blkio.throttle.write_iops_device``), so
each msync of the commit log takes about 0.5 s against a 100 ms timeout. Needs root, a loop
device and the cgroup v1 blkio controller; skips without them. (The store-level test,
``test_flush_disk_timeout.py``, holds the flush lock instead.)
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from dledger.rocketmq.client.consumer import Consumer
from dledger.rocketmq.client.producer import Producer
from dledger.rocketmq.store.message import Message
from dledger.rocketmq.store.status import PutMessageStatus
from dledger.testing import ClassicBroker
from tests.rocketmq.loop_fs import small_fs

pytestmark = pytest.mark.timeout(180)

BLKIO = Path("/sys/fs/cgroup/blkio")
CONF = "flushDiskType=SYNC_FLUSH\nsyncFlushTimeout=100\n"


class WriteThrottle:
    """A blkio cgroup whose processes may write at most ``limit(iops)`` I/Os a second to one
    device (0: no limit; a new limit applies to the I/Os already waiting, too)."""

    def __init__(self, group: Path, device: int) -> None:
        self.group, self.device = group, device

    def add(self, pid: int) -> None:
        (self.group / "cgroup.procs").write_text(str(pid))

    def limit(self, iops: int) -> None:
        rule = f"{os.major(self.device)}:{os.minor(self.device)} {iops}\n"
        (self.group / "blkio.throttle.write_iops_device").write_text(rule)


@contextmanager
def write_throttle(mnt: Path) -> Iterator[WriteThrottle]:
    """A ``WriteThrottle`` for ``mnt``'s device; every process left in it goes back to the root
    cgroup at the end."""
    if not (BLKIO / "cgroup.procs").exists():
        pytest.skip("needs the cgroup v1 blkio controller")
    group = BLKIO / f"dledger-test-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    try:
        yield WriteThrottle(group, os.stat(mnt).st_dev)
    finally:
        for pid in (group / "cgroup.procs").read_text().split():
            (BLKIO / "cgroup.procs").write_text(pid)
        group.rmdir()


def test_a_broker_whose_flush_runs_past_the_timeout_answers_flush_disk_timeout_and_keeps_the_message(
    tmp_path: Path,
) -> None:
    with small_fs(tmp_path) as mnt, write_throttle(mnt) as throttle:
        broker = ClassicBroker(mnt, "b", "ASYNC_MASTER", conf=CONF).start()
        try:
            assert broker.proc is not None
            with Producer(broker.addr, timeout=20) as p:
                before = p.send(Message("Flush", b"before"), queue_id=0)
                assert before.status == "SEND_OK", before
                throttle.add(broker.proc.pid)
                throttle.limit(2)
                late = p.send(Message("Flush", b"late"), queue_id=0)
                assert late.status == PutMessageStatus.FLUSH_DISK_TIMEOUT.name, late
                # Stored: the answer carries its queue offset and record id, as Java's does.
                assert late.queue_offset == 1 and late.offset_msg_id, late
                throttle.limit(0)
                after = p.send(Message("Flush", b"after"), queue_id=0)
                assert after.status == "SEND_OK", after
            with Consumer(broker.addr, "g", "Flush") as c:
                got = c.pull(0, 0, 32, wait=10)
            # Stored all the same, in order.
            assert [(m.queue_offset, m.body) for m in got.messages] == [(0, b"before"), (1, b"late"), (2, b"after")]
            # ...and on disk: a restart reads it back from the commit log.
            assert broker.stop() == 0
            broker.start()
            with Consumer(broker.addr, "g", "Flush") as c:
                got = c.pull(0, 0, 32, wait=10)
            assert [m.body for m in got.messages] == [b"before", b"late", b"after"]
        finally:
            if broker.proc is not None:
                broker.kill()
