"""RocketMQ's smooth upgrade from the classic commit log to DLedger (seed-spec §7.4): a classic
store opened in DLedger mode keeps its old files below ``dividedCommitlogOffset`` and goes on
from there; what was listed before reads back identically, byte for byte, after."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shutil
import signal
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from dledger.rocketmq.cli import main as mq_main
from dledger.rocketmq.cli import store_config
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.listing import consume_queue_lines, message_lines
from dledger.rocketmq.store.message import Message
from dledger.rocketmq.store.message_store import MessageStore
from dledger.rocketmq.store.status import GetMessageStatus, PutMessageStatus

FILE = 64 * 1024
CFG = MessageStoreConfig(
    mapped_file_size_commit_log=FILE,
    mapped_file_size_consume_queue=6000,
    max_hash_slot_num=64,
    max_index_num=256,
)
DCFG = CFG.replace(enable_dledger_commit_log=True, dledger_self_id="n0", dledger_peers="n0-127.0.0.1:40911")
BLANK_MAGIC = -875286124  # CommitLog.BLANK_MAGIC_CODE (0xCBD43194)
QUEUES = [("TopicA", 0), ("TopicA", 1), ("TopicB", 0)]


def write_classic(root: Path, n: int = 400) -> None:
    """A classic store of ``n`` messages over several files, the last one not full."""
    with MessageStore(root, CFG) as store:
        for i in range(n):
            topic, qid = QUEUES[i % len(QUEUES)]
            msg = Message(topic, b"old-%05d-" % i + b"x" * (i * 7 % 500), queue_id=qid, tags=f"t{i % 3}", keys=f"k{i}")
            assert store.put_message(msg).status == PutMessageStatus.PUT_OK
        store.commit_offset("cg", "TopicA", 0, 17)
        store.commit_offset("cg", "TopicB", 0, 33)


def picture(store: MessageStore, keys: list[tuple[str, str]]) -> dict[str, Any]:
    """Everything a user reads of a store: the listings, every queue's messages, lookups by
    offset and message id, key queries, consumer offsets."""
    out: dict[str, Any] = {
        "messages": list(message_lines(store.iter_messages())),
        "queues": list(consume_queue_lines(store.consume_queues)),
        "offsets": {(t, q): store.query_offset("cg", t, q) for t, q in QUEUES},
    }
    pulled: dict[tuple[str, int], list[tuple[int, int, str, bytes]]] = {}
    for topic, qid, cq in store.consume_queues:
        res = store.get_messages(topic, qid, int(cq.min_offset), 100_000, 1 << 30)
        pulled[(topic, qid)] = [(m.phys_offset, m.queue_offset, m.msg_id, m.body) for m in res.messages]
        for phys, _qo, msg_id, body in pulled[(topic, qid)]:
            looked = store.lookup(phys)
            assert looked is not None and looked.body == body
            by_id = store.view_by_msg_id(msg_id)
            assert by_id is not None and by_id.phys_offset == phys
    out["pulled"] = pulled
    out["keys"] = {k: [m.phys_offset for m in store.query_by_key(*k)] for k in keys}
    return out


def old_end_of(root: Path) -> tuple[int, int]:
    """``(old records' end, end of the last old file)`` of a classic root."""
    files = sorted((root / "commitlog").iterdir())
    last = files[-1]
    with MessageStore(root, CFG, readonly=True) as store:
        end = store.max_phys_offset
    return end, int(last.name) + last.stat().st_size


def test_an_upgraded_store_reads_back_what_it_held_and_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "store"
    write_classic(root)
    keys = [("TopicA", "k0"), ("TopicB", "k2"), ("TopicA", "k397")]
    with MessageStore(root, CFG, readonly=True) as store:
        before = picture(store, keys)
        next_offsets = {(t, q): store.max_offset_in_queue(t, q) for t, q in QUEUES}
    old_end, divided = old_end_of(root)
    assert old_end < divided  # the last old file is not full

    with caplog.at_level(logging.INFO):
        store = MessageStore(root, DCFG)
    try:
        upgraded = [r for r in caplog.records if "upgraded the classic commit log" in r.getMessage()]
        assert len(upgraded) == 1
        assert store.mode == "dledger"
        assert store.commitlog.divided == divided
        assert (root / "dledger-n0" / "data" / f"{divided:020d}").is_file()
        assert picture(store, keys) == before
        # New puts: queue offsets go on, offsets above the divide, keys found old and new.
        res = store.put_messages([Message("TopicA", b"new-a0", queue_id=0, keys="k0 fresh")])
        assert res.status == PutMessageStatus.PUT_OK
        assert res.queue_offset == next_offsets[("TopicA", 0)]
        assert res.phys_offset == divided + 48  # the first entry's pos is the divide
        res_b = store.put_message(Message("TopicB", b"new-b0", queue_id=0, keys="k2"))
        assert res_b.queue_offset == next_offsets[("TopicB", 0)]
        assert store.wait_dispatched()
        got = store.get_messages("TopicA", 0, next_offsets[("TopicA", 0)] - 2, 10)
        assert [m.body[:6] for m in got.messages][-1] == b"new-a0"
        assert [m.queue_offset for m in got.messages] == list(
            range(next_offsets[("TopicA", 0)] - 2, next_offsets[("TopicA", 0)] + 1)
        )
        assert got.messages[0].phys_offset < divided < got.messages[-1].phys_offset
        table = store.pull_arrow("TopicA", 0, next_offsets[("TopicA", 0)] - 2, 10)
        assert table.column("phys_offset").to_pylist() == [m.phys_offset for m in got.messages]
        k0 = store.query_by_key("TopicA", "k0")
        assert {m.body[:6] for m in k0} == {b"old-00", b"new-a0"}
        assert {m.body[:6] for m in store.query_by_key("TopicB", "k2")} == {b"old-00", b"new-b0"}
        after_put = list(message_lines(store.iter_messages()))
    finally:
        store.close()
    assert after_put[: len(before["messages"])] == before["messages"]
    assert len(after_put) == len(before["messages"]) + 2
    # The blank at the old end, as Java writes it: {remaining, BLANK_MAGIC_CODE}.
    last_old = sorted((root / "commitlog").iterdir())[-1]
    rel = old_end - int(last_old.name)
    assert struct.unpack(">ii", last_old.read_bytes()[rel : rel + 8]) == (FILE - rel, BLANK_MAGIC)

    # Every later start: the divide from the first DLedger file, no upgrade again.
    caplog.clear()
    with caplog.at_level(logging.INFO):
        store = MessageStore(root, DCFG)
    try:
        assert not [r for r in caplog.records if "upgraded" in r.getMessage()]
        assert store.commitlog.divided == divided
        assert list(message_lines(store.iter_messages())) == after_put
        res = store.put_message(Message("TopicA", b"newer", queue_id=0))
        assert res.queue_offset == next_offsets[("TopicA", 0)] + 1
    finally:
        store.close()
    # A reader sees it as a DLedger store with its old files, nothing left to dispatch.
    with MessageStore(root, CFG, readonly=True) as ro:
        assert ro.mode == "dledger"
        assert ro.dispatch_behind_bytes() == 0
        assert list(message_lines(ro.iter_messages()))[: len(after_put)] == after_put


def test_the_java_classic_fixture_upgrades_to_what_java_listed(tmp_path: Path, fixtures_mq: Path) -> None:
    root = tmp_path / "classic"
    shutil.copytree(fixtures_mq / "classic-3topics", root)
    expected = root / "expected"
    cfg = store_config(root, "classic", None).replace(
        enable_dledger_commit_log=True, dledger_self_id="n0", dledger_peers="n0-127.0.0.1:40911"
    )
    # schedule=False: the pending delayed messages of the fixture (long due) would otherwise be
    # delivered while the listings are compared (test_schedule_message_service covers that).
    with MessageStore(root, cfg, schedule=False) as store:
        assert store.commitlog.upgraded is not None
        divided = store.commitlog.divided
        assert divided == 1114112 + 65536  # the end of the last of 18 files
        assert list(message_lines(store.iter_messages())) == expected.joinpath("messages.tsv").read_text().splitlines()
        assert (
            list(consume_queue_lines(store.consume_queues))
            == expected.joinpath("consumequeue.tsv").read_text().splitlines()
        )
        for line in expected.joinpath("index.tsv").read_text().splitlines()[1:]:
            key, topic, offsets = line.split("\t")
            if "\\" in key or "\\" in topic:
                continue  # escaped text: test_fixtures_rocketmq covers it
            assert ",".join(map(str, sorted(store.query_offsets_by_key(topic, key, 64)))) == offsets, line
        next_b1 = store.max_offset_in_queue("TopicB", 1)
        res = store.put_message(Message("TopicB", b"after the upgrade", queue_id=1, keys="k54"))
        assert res.status == PutMessageStatus.PUT_OK
        assert res.queue_offset == next_b1
        assert res.phys_offset == divided + 48
        assert store.wait_dispatched()
        assert res.phys_offset in store.query_offsets_by_key("TopicB", "k54")
    # The dump through the CLI: Java's listing, then the new message in the same columns.
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert mq_main(["dump", str(root), "--messages"]) == 0
    lines = buf.getvalue().splitlines()
    want = expected.joinpath("messages.tsv").read_text().splitlines()
    assert lines[: len(want)] == want
    new = lines[len(want) :]
    assert len(new) == 1
    cols = new[0].split("\t")
    assert len(cols) == len(want[0].split("\t")) == 20
    assert cols[0] == str(divided + 48) and cols[2] == "TopicB" and cols[4] == str(next_b1)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert mq_main(["dump", str(root), "--consume-queues"]) == 0
    cq_lines = buf.getvalue().splitlines()
    assert f"TopicB\t1\t{next_b1}\t{divided + 48}\t{cols[1]}\t" in "\n".join(cq_lines)
    want_cq = expected.joinpath("consumequeue.tsv").read_text().splitlines()
    assert [ln for ln in cq_lines if not ln.startswith(f"TopicB\t1\t{next_b1}\t")] == want_cq


# -- kill -9 during the upgrade -------------------------------------------------------------

UPGRADER = textwrap.dedent("""
    import sys
    from dledger.rocketmq.store.config import MessageStoreConfig
    from dledger.rocketmq.store.message_store import MessageStore
    cfg = MessageStoreConfig(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=6000,
                             max_hash_slot_num=64, max_index_num=256, enable_dledger_commit_log=True)
    MessageStore(sys.argv[1], cfg).close()
""")


@pytest.mark.parametrize("point", ["upgrade-blank-written", "upgrade-blank-flushed", "upgrade-dledger-created"])
def test_kill_9_during_the_upgrade_then_a_restart_completes_it(tmp_path: Path, point: str) -> None:
    root = tmp_path / "store"
    write_classic(root, 300)
    keys = [("TopicA", "k0"), ("TopicA", "k297")]
    with MessageStore(root, CFG, readonly=True) as store:
        before = picture(store, keys)
    old_end, divided = old_end_of(root)
    old_files = sorted(p.name for p in (root / "commitlog").iterdir())
    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, DLEDGER_CRASH_AT=point, PYTHONPATH=str(repo))
    proc = subprocess.run(
        [sys.executable, "-c", UPGRADER, str(root)], env=env, cwd=tmp_path, timeout=120, capture_output=True
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    data = root / "dledger-n0" / "data"
    created = sorted(p.name for p in data.iterdir()) if data.is_dir() else []
    assert created == ([f"{divided:020d}"] if point == "upgrade-dledger-created" else [])
    if created:
        with MessageStore(root, CFG, readonly=True) as ro:  # a reader sees the upgraded store
            assert list(message_lines(ro.iter_messages())) == before["messages"]
            assert ro.dispatch_behind_bytes() == 0  # the blank at the old end is no lag
    else:
        with pytest.raises(ValueError, match="did not finish"):
            MessageStore(root, CFG, readonly=True)
    store = MessageStore(root, DCFG)
    try:
        assert store.commitlog.divided == divided
        assert sorted(p.name for p in (root / "commitlog").iterdir()) == old_files
        assert picture(store, keys) == before  # nothing lost, nothing twice
        res = store.put_message(Message("TopicA", b"after", queue_id=0, keys="k0"))
        assert res.phys_offset == divided + 48
        assert store.wait_dispatched()
        assert len(store.query_by_key("TopicA", "k0")) == 2
    finally:
        store.close()
    last_old = root / "commitlog" / old_files[-1]
    rel = old_end - int(old_files[-1])
    assert struct.unpack(">ii", last_old.read_bytes()[rel : rel + 8]) == (FILE - rel, BLANK_MAGIC)
    assert sorted(p.name for p in data.iterdir()) == [f"{divided:020d}"]


# -- retention ------------------------------------------------------------------------------


def test_retention_takes_the_old_files_first_then_dledger_files(tmp_path: Path) -> None:
    root = tmp_path / "store"
    write_classic(root, 400)
    _old_end, divided = old_end_of(root)
    n_old = len(list((root / "commitlog").iterdir()))
    assert n_old == 3
    cfg = DCFG.replace(file_reserved_time=0)
    with MessageStore(root, cfg) as store:
        cl = store.commitlog
        for i in range(300):  # several DLedger files
            assert store.put_message(Message("TopicA", b"n%05d" % i + b"y" * 400, queue_id=0)).status == 0
        assert store.wait_dispatched()
        dfiles = len(cl.store.data_files)
        assert dfiles >= 3
        # While old files remain, DLedger deletes nothing, whatever its own settings say (its
        # own service thread asks it too): forced clean off, files kept 10 years.
        assert cl.store.delete_expired(now=time.time() + 30 * 86400, used_ratio=0.99) == 0
        assert cl.store.config.file_reserved_hours == 24 * 365 * 10
        assert not cl.store.config.enable_disk_force_clean
        deleted = store.delete_expired(force=True)
        assert deleted >= 1 and len(cl.store.data_files) == dfiles
        assert store.min_phys_offset > 0
        # A read below the new start: gone (as any expired record), not another record.
        assert store.lookup(0) is None
        for _ in range(n_old):
            if cl.old_files:
                store.delete_expired(force=True)
        assert not cl.old_files
        assert store.min_phys_offset == divided
        assert len(cl.store.data_files) == dfiles
        # Restored: DLedger's own retention (file_reserved_time + 1 hours) from now on.
        assert cl.store.config.file_reserved_hours == 1
        assert store.delete_expired(force=True) >= 1
        assert len(cl.store.data_files) < dfiles
        assert store.get_messages("TopicA", 0, store.min_offset_in_queue("TopicA", 0), 5).status == (
            GetMessageStatus.FOUND
        )
    # A restart over an empty commitlog/: a plain DLedger store, its retention its own.
    with MessageStore(root, cfg) as store:
        assert store.commitlog.old is None
        assert store.commitlog.store.config.file_reserved_hours == 1


# -- dledger mq upgrade ---------------------------------------------------------------------


def test_mq_upgrade_dry_run_writes_nothing_and_yes_upgrades(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "store"
    write_classic(root, 200)
    old_end, divided = old_end_of(root)

    def snapshot() -> dict[str, bytes]:
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}

    before = snapshot()
    assert mq_main(["upgrade", str(root)]) == 0
    out = capsys.readouterr().out
    assert f"[0, {old_end})" in out and f"dividedCommitlogOffset\t{divided}" in out and "dry run" in out
    assert snapshot() == before
    assert not (root / "dledger-n0").exists()

    assert mq_main(["upgrade", str(root), "--yes"]) == 0
    out = capsys.readouterr().out
    assert f"upgraded: dledger-n0/ starts at {divided}" in out
    assert (root / "dledger-n0" / "data" / f"{divided:020d}").is_file()
    assert mq_main(["upgrade", str(root)]) == 1
    assert "already upgraded" in capsys.readouterr().err
    with MessageStore(root, CFG, readonly=True) as store:
        assert store.mode == "dledger" and store.commitlog.divided == divided


def test_a_classic_store_killed_mid_put_upgrades_with_every_acknowledged_message(tmp_path: Path) -> None:
    """The upgrade after an abnormal exit: the old log recovered (its torn tail cut) before the
    blank goes at its end; dispatch redoes what the queues and the index lacked."""
    from test_crash import check_recovered, run_and_kill

    root = tmp_path / "store"
    acked = run_and_kill(root, "ASYNC_FLUSH", "classic", 16, 2000)
    assert not (root / "dledger-n0").exists()
    n = check_recovered(root, "dledger", acked)  # opened in DLedger mode: upgraded, then a put
    data = sorted((root / "dledger-n0" / "data").iterdir())
    assert len(data) == 1 and int(data[0].name) == sum(p.stat().st_size for p in (root / "commitlog").iterdir())
    with MessageStore(root, CFG.replace(mapped_file_size_commit_log=256 * 1024), readonly=True) as ro:
        assert ro.commitlog.divided == int(data[0].name)
        assert sum(1 for _ in ro.iter_messages()) == n + 1
