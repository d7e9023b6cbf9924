"""The DLedger commit log: records as DLedger entries (phys offset = entry pos + 48, written by
the AppendHook), readers limited to the committed position, the appender seam, DLedger codes
mapped to put statuses, and the leader's wait before it takes writes."""

from __future__ import annotations

import inspect
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import record_oracle as oracle

from dledger.codes import ResponseCode
from dledger.errors import DLedgerError
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.dispatch import IDLE_WAIT
from dledger.rocketmq.store.dledger_commitlog import LEADER, status_of_dledger_code
from dledger.rocketmq.store.message import Message
from dledger.rocketmq.store.message_store import MessageStore
from dledger.rocketmq.store.status import GetMessageStatus, PutMessageStatus
from dledger.store.file import MmapFileStore

FILE = 64 * 1024


def test_the_store_has_the_append_hook() -> None:
    # Every DLedger-mode test needs it; they once skipped without it, so a rename went unseen.
    assert "body_pos_patch" in inspect.signature(MmapFileStore.__init__).parameters


def config(**kw: Any) -> MessageStoreConfig:
    return MessageStoreConfig(
        mapped_file_size_commit_log=FILE,
        mapped_file_size_consume_queue=6000,
        max_hash_slot_num=64,
        max_index_num=256,
        enable_dledger_commit_log=True,
        dledger_self_id="n0",
        store_host="192.168.0.10:10911",
    ).replace(**kw)


class ManualAppender:
    """A member whose appends are committed only when the test says so (as a quorum would)."""

    def __init__(self, store: MmapFileStore) -> None:
        self.store = store
        self.fail_with: ResponseCode | None = None

    def append_batch(self, bodies: Sequence[Any], term: int) -> tuple[int, np.ndarray]:
        if self.fail_with is not None:
            raise DLedgerError(self.fail_with, "refused")
        return self.store.append_batch(bodies, term)

    @property
    def committed_pos(self) -> int:
        return self.store.committed_pos

    def commit_all(self) -> int:
        self.store.update_committed_index(0, self.store.ledger_end_index)
        return self.store.committed_pos


def wait_writable(store: MessageStore) -> None:
    deadline = time.monotonic() + 10
    while not store.commitlog.writable:
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_entries_layout(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore(root, config()) as s:
        assert s.mode == "dledger"
        results = [
            s.put_messages([Message("T", b"x" * (i % 700), queue_id=i % 3) for i in range(k, k + 10)])
            for k in range(0, 400, 10)
        ]
        assert all(r.ok for r in results)
    data = sorted((root / "dledger-n0" / "data").iterdir())
    assert len(data) > 2 and all(p.stat().st_size == FILE for p in data)
    assert (root / "dledger-n0" / "index").is_dir() and not (root / "commitlog").exists()
    recs = []
    for k, p in enumerate(data):
        buf = p.read_bytes()
        got, _stop, code = oracle.scan_dledger_records(buf, k * FILE, check_crc=True)
        assert code in (oracle.STOP_BLANK, oracle.STOP_ZERO)
        recs += got
    assert len(recs) == 400
    assert [r["entry_index"] for r in recs] == list(range(400))
    for r in recs:
        assert r["stored_phys_offset"] == r["phys_offset"]  # entry pos + 48, by the AppendHook
    per_queue: dict[int, int] = {}
    for i, r in enumerate(recs):
        assert r["queue_id"] == i % 3 and r["queue_offset"] == per_queue.get(i % 3, 0)
        per_queue[i % 3] = r["queue_offset"] + 1
    offs = [int(o) for res in results for o in res.append_result.wrote_offsets]  # type: ignore[union-attr]
    assert offs == [r["phys_offset"] for r in recs]


def test_readers_see_only_committed(tmp_path: Path) -> None:
    root = tmp_path / "s"
    holder: dict[str, ManualAppender] = {}

    def factory(store: MmapFileStore) -> ManualAppender:
        holder["a"] = ManualAppender(store)
        return holder["a"]

    with MessageStore(root, config(), appender=factory) as s:
        app = holder["a"]
        # a follower (or a leader not yet caught up) takes no writes
        assert s.put_message(Message("T", b"x")).status == PutMessageStatus.SERVICE_NOT_AVAILABLE
        s.on_role_change(LEADER, 0)
        wait_writable(s)
        r = s.put_messages([Message("T", b"m%d" % i) for i in range(5)])
        assert r.ok
        s.dispatch_now()
        assert s.get_messages("T", 0, 0).status == GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
        assert s.lookup(r.phys_offset) is None and list(s.iter_messages()) == []
        assert s.max_phys_offset == 0
        s.on_committed(app.commit_all())
        assert s.wait_dispatched()
        assert [m.body for m in s.get_messages("T", 0, 0).messages] == [b"m%d" % i for i in range(5)]
        first = s.lookup(r.phys_offset)
        assert first is not None and first.body == b"m0"
        # DLedger codes -> put statuses (DLedgerCommitLog's mapping)
        app.fail_with = ResponseCode.NOT_LEADER
        assert s.put_message(Message("T", b"x")).status == PutMessageStatus.SERVICE_NOT_AVAILABLE
        app.fail_with = ResponseCode.WAIT_QUORUM_ACK_TIMEOUT
        assert s.put_message(Message("T", b"x")).status == PutMessageStatus.OS_PAGECACHE_BUSY
        app.fail_with = ResponseCode.INTERNAL_ERROR
        assert s.put_message(Message("T", b"x")).status == PutMessageStatus.UNKNOWN_ERROR
        app.fail_with = None
        # a refused put takes no queue offset
        assert s.put_message(Message("T", b"m5")).queue_offset == 5


def test_a_record_reads_only_from_its_start_and_only_once_committed(tmp_path: Path) -> None:
    holder: dict[str, ManualAppender] = {}

    def factory(store: MmapFileStore) -> ManualAppender:
        holder["a"] = ManualAppender(store)
        return holder["a"]

    with MessageStore(tmp_path / "s", config(), appender=factory) as s:
        cl = s.commitlog
        s.on_role_change(LEADER, 0)
        wait_writable(s)
        first = s.put_messages([Message("T", b"a%d" % i) for i in range(2)])
        s.on_committed(holder["a"].commit_all())
        later = s.put_messages([Message("T", b"b%d" % i) for i in range(2)])  # appended, not committed
        a0, b0 = int(first.phys_offset), int(later.phys_offset)
        size = cl.record_size_at(a0)
        data = cl.read(a0, size)
        assert data is not None and len(data) == size == int.from_bytes(data[:4], "big")
        msg = s.lookup(a0)
        assert msg is not None and msg.body == b"a0" and msg.phys_offset == a0
        # the entry's own header is no record; neither is what is not committed
        assert a0 == 48 and all(cl.record_size_at(p) == -1 for p in (0, 8, 40))
        assert cl.read(0, 16) is None and s.lookup(0) is None
        assert cl.record_size_at(b0) == -1 and cl.read(b0, 8) is None and s.lookup(b0) is None
        # the readers' lock is the store's unmap lock, taken again inside (dispatch does)
        with cl.reading(), cl.reading():
            assert s.lookup(a0) is not None
        s.on_committed(holder["a"].commit_all())
        later_msg = s.lookup(b0)
        assert later_msg is not None and later_msg.body == b"b0"
    assert cl.record_size_at(a0) == -1 and cl.read(a0, size) is None  # closed


def test_new_leader_rebuilds_queue_offsets(tmp_path: Path) -> None:
    """Entries that came from the old leader (appended here, committed, dispatched) give the
    queue offsets the new leader continues from."""
    root = tmp_path / "s"
    with MessageStore(root, config()) as s:
        for i in range(7):
            s.put_message(Message("T", b"%d" % i, queue_id=1))
    holder: dict[str, ManualAppender] = {}

    def factory(store: MmapFileStore) -> ManualAppender:
        holder["a"] = ManualAppender(store)
        return holder["a"]

    with MessageStore(root, config(), appender=factory) as s:
        s.commitlog.topic_queue_table.clear()  # as a follower that never put anything itself
        s.on_role_change(LEADER, 1)
        wait_writable(s)
        assert s.commitlog.topic_queue_table["T-1"] == 7
        r = s.put_message(Message("T", b"7", queue_id=1))
        assert r.ok and r.queue_offset == 7


def test_dispatch_sleeps_until_a_commit_wakes_it(tmp_path: Path) -> None:
    """In DLedger mode every commit wakes dispatch, so an idle store runs no rounds that find
    nothing (each would take the GIL from the thread serving the group), and a commit is still
    dispatched without a poll."""
    holder: dict[str, ManualAppender] = {}

    def factory(store: MmapFileStore) -> ManualAppender:
        holder["a"] = ManualAppender(store)
        return holder["a"]

    with MessageStore(tmp_path / "s", config(), appender=factory) as s:
        s.on_role_change(LEADER, 0)
        wait_writable(s)
        rounds = [0]
        dispatch_now = s.reput.dispatch_now

        def counted(*args: Any, **kw: Any) -> int:
            rounds[0] += 1
            return dispatch_now(*args, **kw)

        s.reput.dispatch_now = counted  # type: ignore[method-assign]
        time.sleep(0.5)
        # A poll every 1 ms would have made ~500 rounds; a sleep of IDLE_WAIT between safety
        # rounds makes about ten.
        assert rounds[0] <= 0.5 / IDLE_WAIT + 3
        r = s.put_messages([Message("T", b"m%d" % i) for i in range(3)])
        assert r.ok
        s.on_committed(holder["a"].commit_all())
        deadline = time.monotonic() + 10
        while s.get_messages("T", 0, 0).status != GetMessageStatus.FOUND:
            assert time.monotonic() < deadline
            time.sleep(0.001)
        assert [m.body for m in s.get_messages("T", 0, 0).messages] == [b"m0", b"m1", b"m2"]


def test_code_mapping() -> None:
    assert status_of_dledger_code(ResponseCode.SUCCESS) == PutMessageStatus.PUT_OK
    for code in (
        ResponseCode.INCONSISTENT_LEADER,
        ResponseCode.NOT_LEADER,
        ResponseCode.LEADER_NOT_READY,
        ResponseCode.DISK_FULL,
    ):
        assert status_of_dledger_code(code) == PutMessageStatus.SERVICE_NOT_AVAILABLE
    for code in (ResponseCode.WAIT_QUORUM_ACK_TIMEOUT, ResponseCode.LEADER_PENDING_FULL):
        assert status_of_dledger_code(code) == PutMessageStatus.OS_PAGECACHE_BUSY
    assert status_of_dledger_code(ResponseCode.UNKNOWN) == PutMessageStatus.UNKNOWN_ERROR


def test_dledger_store_reopens_fixture_copy_and_appends(tmp_path: Path) -> None:
    import shutil

    src = Path(__file__).resolve().parents[1] / "fixtures" / "rocketmq-4.9" / "dledger-1node"
    root = tmp_path / "d"
    shutil.copytree(src, root)
    # schedule=False: the fixture's overdue delayed messages would otherwise be delivered at
    # open, racing this put for the first position after the fixture's last record.
    with MessageStore(root, config(), schedule=False) as s:
        before = s.max_offset_in_queue("TopicA", 0)
        r = s.put_message(Message("TopicA", b"new", queue_id=0, keys="fresh"))
        assert r.ok and r.queue_offset == before and r.phys_offset == 625407 + 48
        s.wait_dispatched()
        assert [m.body for m in s.query_by_key("TopicA", "fresh")] == [b"new"]
    data = sorted((root / "dledger-n0" / "data").iterdir())
    got, _stop, _code = oracle.scan_dledger_records(data[-1].read_bytes(), int(data[-1].name))
    assert got[-1]["body"] == b"new" and got[-1]["entry_index"] == 803 and got[-1]["stored_phys_offset"] == 625455
