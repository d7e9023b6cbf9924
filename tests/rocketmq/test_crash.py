"""Crash tests with real processes: a producer is killed with SIGKILL in the middle of its puts.

After reopening, every acknowledged message is there, the log is a prefix of what was
produced, and consume queues and index cover it.

What these tests cannot tell: SYNC_FLUSH from ASYNC_FLUSH. A process kill keeps the page
cache, so an acknowledged write survives it whether or not it was flushed; a SYNC_FLUSH that
stopped flushing before its ack would pass here. The guard for that is the flushed position
checked at every ack: ``test_sync_flush`` and ``test_put_batch_across_files_with_sync_flush``
in tests/rocketmq/test_store.py (``commitlog.flushed_where`` past each acknowledged message)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dledger.child_process import python_code
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.message import Message
from dledger.rocketmq.store.message_store import MessageStore
from dledger.rocketmq.store.status import GetMessageStatus, PutMessageStatus

REPO = Path(__file__).resolve().parents[2]

PRODUCER = textwrap.dedent("""
    import sys
    from dledger.rocketmq.store.config import MessageStoreConfig
    from dledger.rocketmq.store.message import Message
    from dledger.rocketmq.store.message_store import MessageStore
    root, flush, mode, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    cfg = MessageStoreConfig(mapped_file_size_commit_log=256 * 1024, mapped_file_size_consume_queue=6000,
                             max_hash_slot_num=64, max_index_num=256, flush_disk_type=flush,
                             enable_dledger_commit_log=mode == "dledger")
    store = MessageStore(root, cfg)
    i = store.max_offset_in_queue("T", 0) + store.max_offset_in_queue("T", 1)
    while True:
        msgs = [Message("T", b"m%08d" % (i + j) + b"." * ((i + j) % 300), queue_id=(i + j) % 2,
                        keys="key-%d" % (i + j)) for j in range(batch)]
        res = store.put_messages(msgs) if batch > 1 else store.put_message(msgs[0])
        assert res.status == 0, res
        i += batch
        sys.stdout.write("%d\\n" % i)
        sys.stdout.flush()
""")

MODES = ["classic", "dledger"]


def run_and_kill(root: Path, flush: str, mode: str, batch: int, acks: int) -> int:
    """Start a producer, kill -9 it once it has acknowledged ``acks`` messages; returns the
    count it acknowledged."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    err_path = root.parent / f"producer-{os.getpid()}-{acks}.err"
    err = open(err_path, "wb")  # a file, not a pipe: a full pipe would stall the producer
    proc = subprocess.Popen(
        python_code(PRODUCER, str(root), flush, mode, str(batch), die_with_parent=True),
        stdout=subprocess.PIPE,
        stderr=err,
        env=env,
        cwd=str(REPO),
    )
    acked = 0
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            acked = int(line)
            if acked >= acks:
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        err.close()
    if acked < acks:
        raise AssertionError(err_path.read_text(errors="replace")[-4000:] or "producer died")
    return acked


def check_recovered(root: Path, mode: str, acked: int, put_after: bool = True) -> int:
    cfg = MessageStoreConfig(
        mapped_file_size_commit_log=256 * 1024,
        mapped_file_size_consume_queue=6000,
        max_hash_slot_num=64,
        max_index_num=256,
        enable_dledger_commit_log=mode == "dledger",
    )
    assert (root / "abort").exists()
    with MessageStore(root, cfg) as s:
        bodies = [m.body for m in s.iter_messages()]
        n = len(bodies)
        assert n >= acked
        # a prefix of what was produced, nothing torn in between
        assert [b[:9] for b in bodies] == [b"m%08d" % i for i in range(n)]
        # consume queues cover the log
        total = s.max_offset_in_queue("T", 0) + s.max_offset_in_queue("T", 1)
        assert total == n
        last = s.get_messages("T", (n - 1) % 2, (n - 1) // 2)
        assert last.status == GetMessageStatus.FOUND and last.messages[0].body == bodies[-1]
        # the index too
        assert [m.body for m in s.query_by_key("T", f"key-{n - 1}")] == [bodies[-1]]
        assert [m.body for m in s.query_by_key("T", f"key-{acked // 2}")] == [bodies[acked // 2]]
        if not put_after:
            return n
        # and the store takes writes where the log ended
        r = s.put_message(Message("T", b"after", queue_id=n % 2))
        assert r.status == PutMessageStatus.PUT_OK and r.queue_offset == n // 2
    return n


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "flush,batch", [("SYNC_FLUSH", 1), ("SYNC_FLUSH", 16), ("ASYNC_FLUSH", 1), ("ASYNC_FLUSH", 32)]
)
def test_kill_producer(tmp_path: Path, mode: str, flush: str, batch: int) -> None:
    root = tmp_path / "store"
    acked = run_and_kill(root, flush, mode, batch, 3000 if batch > 1 else 1500)
    check_recovered(root, mode, acked)


@pytest.mark.parametrize("mode", MODES)
def test_kill_twice(tmp_path: Path, mode: str) -> None:
    """A crash, a recovery by the next producer, a second crash: nothing acknowledged is lost."""
    root = tmp_path / "store"
    first = run_and_kill(root, "SYNC_FLUSH", mode, 8, 800)
    second = run_and_kill(root, "ASYNC_FLUSH", mode, 8, first + 800)
    assert second >= first + 800
    check_recovered(root, mode, second)


SPLIT_INDEX = textwrap.dedent("""
    import os, signal, sys, time
    from dledger.rocketmq.store.config import MessageStoreConfig
    from dledger.rocketmq.store.message import Message
    from dledger.rocketmq.store.message_store import MessageStore
    cfg = MessageStoreConfig(max_hash_slot_num=64, max_index_num=256, mapped_file_size_commit_log=1 << 20,
                             enable_dledger_commit_log=sys.argv[2] == "dledger")
    store = MessageStore(sys.argv[1], cfg)
    for i in range(200):
        store.put_message(Message("T", b"m%d" % i, keys=["key-%d" % i]))
        if i >= 127:
            time.sleep(0.002)  # later store times: the last index file ends past the checkpoint
    store.wait_dispatched()
    store.flush()
    os.kill(os.getpid(), signal.SIGKILL)
""")


@pytest.mark.parametrize("mode", MODES)
def test_a_message_whose_index_items_span_two_files_keeps_every_key_after_a_crash(tmp_path: Path, mode: str) -> None:
    """255 index items a file, two a message (UNIQ_KEY and one key): message 127's UNIQ_KEY is
    the last item of the first file and its key the first of the second, which recovery drops
    (the checkpoint vouches for full files only) and rebuilds. The rebuild used to start after
    message 127, and its key was never found again."""
    root = tmp_path / "s"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", SPLIT_INDEX, str(root), mode], env=env, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    cfg = MessageStoreConfig(
        max_hash_slot_num=64,
        max_index_num=256,
        mapped_file_size_commit_log=1 << 20,
        enable_dledger_commit_log=mode == "dledger",
    )
    with MessageStore(root, cfg) as store:
        store.wait_dispatched()
        for i in range(200):
            found = store.query_by_key("T", f"key-{i}")
            assert [m.body for m in found] == [b"m%d" % i], i
        # Twice in the index (its first item stayed, then it was indexed again): one message.
        m127 = store.get_messages("T", 0, 127, 1).messages[0]
        assert [m.phys_offset for m in store.query_by_key("T", m127.properties["UNIQ_KEY"])] == [m127.phys_offset]


OUT_OF_FDS = textwrap.dedent("""
    import resource, sys
    from dledger.rocketmq.store.config import MessageStoreConfig
    from dledger.rocketmq.store.message import Message
    from dledger.rocketmq.store.message_store import MessageStore
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (300, hard))  # each consume-queue file holds one
    cfg = MessageStoreConfig(mapped_file_size_commit_log=1 << 20, max_hash_slot_num=1000, max_index_num=4000)
    s = MessageStore(sys.argv[1], cfg)
    for t in range(200):
        for q in range(2):
            assert s.put_message(Message("Topic%d" % t, b"m", queue_id=q)).ok
    assert not s.wait_dispatched(3), "the limit was not reached"
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))  # descriptors to spare again
    assert s.wait_dispatched(30), s.dispatch_behind_bytes()
    missing = [(t, q) for t in range(200) for q in range(2) if s.max_offset_in_queue("Topic%d" % t, q) != 1]
    assert not missing, missing
    s.close()
""")


def test_dispatch_goes_on_once_descriptors_are_free_again(tmp_path: Path) -> None:
    # A consume-queue file whose mmap failed (EMFILE) was left on disk, and every retry of
    # dispatch then failed on it with FileExistsError until a restart.
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-c", OUT_OF_FDS, str(tmp_path / "s")], env=env, timeout=120, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


OFFSETS_THEN_KILL = textwrap.dedent("""
    import os, signal, sys, time
    from dledger.rocketmq.store.config import MessageStoreConfig
    from dledger.rocketmq.store.message_store import MessageStore
    root, mode, how = sys.argv[1], sys.argv[2], sys.argv[3]
    cfg = MessageStoreConfig(
        mapped_file_size_commit_log=64 * 1024,
        enable_dledger_commit_log=mode == "dledger",
        flush_consumer_offset_interval=200 if how == "interval" else 3_600_000,
        flush_interval_consume_queue=50,  # the service's tick, at which it looks
        clean_resource_interval=3_600_000,
    )
    s = MessageStore(root, cfg)
    for i in range(20):
        assert s.put_batch("T", [b"x" * 1000] * 10).ok
    s.commit_offset("readers", "T", 0, 42)
    if how == "interval":
        time.sleep(1.0)  # a few flushConsumerOffsetInterval periods
    else:
        s.wait_dispatched()
        if mode == "dledger":
            s.commitlog.store.delete_expired(used_ratio=1.0)  # the DLedger store's own retention
        else:
            s.delete_expired(used_ratio=0.1, force=True)
        assert s.min_phys_offset > 0
    os.kill(os.getpid(), signal.SIGKILL)
""")


@pytest.mark.parametrize("how", ["interval", "retention"])
@pytest.mark.parametrize("mode", MODES)
def test_consumer_offsets_outlive_a_crash(tmp_path: Path, mode: str, how: str) -> None:
    # They lived in memory until close: a member killed after retention had deleted the log's
    # offset records came back without them (and could become leader so). Now they are written
    # every flush_consumer_offset_interval, and before retention deletes commit-log files.
    root = tmp_path / "s"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-c", OFFSETS_THEN_KILL, str(root), mode, how], env=env, timeout=120, capture_output=True
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    cfg = MessageStoreConfig(mapped_file_size_commit_log=64 * 1024, enable_dledger_commit_log=mode == "dledger")
    with MessageStore(root, cfg) as store:
        assert store.query_offset("readers", "T", 0) == 42
