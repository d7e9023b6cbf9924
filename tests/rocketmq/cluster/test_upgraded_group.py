"""A replicated group whose first member was a classic store (seed-spec §7.4): the upgraded member
leads (preferred leader), the members started empty get the DLedger entries only, at the
upgraded member's positions; reads of the old offsets are answered by the leader. Three real
members in this process."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from dledger.config import DLedgerConfig
from dledger.rocketmq.broker.message_service import MessageService, _NodeAppender, message_service_factory
from dledger.rocketmq.client.consumer import AsyncConsumer
from dledger.rocketmq.client.producer import AsyncProducer
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.message import Message
from dledger.rocketmq.store.message_store import MessageStore
from dledger.rocketmq.store.status import GetMessageStatus
from dledger.server import NodeServer
from dledger.store.file import MmapFileStore
from dledger.testing import free_ports

pytestmark = pytest.mark.timeout(120)

FILE = 1 << 20
OLD = 120


def member_appender(store: MmapFileStore) -> _NodeAppender:
    return _NodeAppender(store)


def write_classic(root: Path) -> int:
    """A classic store of OLD messages in T/0 over two files; returns the end of its last file."""
    cfg = MessageStoreConfig(mapped_file_size_commit_log=FILE)
    with MessageStore(root, cfg) as store:
        for i in range(OLD):
            assert store.put_message(Message("T", b"old-%04d" % i + b"." * 12_000, queue_id=0, keys=f"k{i}")).ok
        files = sorted((root / "commitlog").iterdir())
        assert len(files) == 2
        return int(files[-1].name) + FILE


def test_the_upgraded_member_leads_and_the_empty_ones_get_the_new_entries(tmp_path: Path) -> None:
    divided = write_classic(tmp_path / "n0")
    ports = free_ports(3)
    peers = ";".join(f"n{k}-127.0.0.1:{p}" for k, p in enumerate(ports))

    def config(k: int) -> DLedgerConfig:
        return DLedgerConfig(
            group="g",
            self_id=f"n{k}",
            peers=peers,
            store_base_dir=str(tmp_path / f"n{k}"),
            message_store=True,
            mapped_file_size_for_entry_data=FILE,
            preferred_leader_ids="n0",
        )

    async def run() -> None:
        servers = [NodeServer(config(k), application_factory=message_service_factory) for k in range(3)]
        for s in servers:
            await s.start()
        try:
            apps = [s.groups["g"].app for s in servers]
            assert all(isinstance(a, MessageService) for a in apps)
            svc = [a for a in apps if isinstance(a, MessageService)]
            assert svc[0].commitlog.divided == divided and svc[0].commitlog.upgraded is not None
            async with AsyncProducer(peers, "g") as producer:
                for i in range(20):
                    res = await producer.send(Message("T", b"new-%04d" % i, keys=f"k{i}"), queue_id=0)
                    assert res.ok, res
            deadline = time.monotonic() + 30
            # Every member dispatches the new entries; the empty ones hold no old record.
            while not all(s.store.max_offset_in_queue("T", 0) == OLD + 20 for s in svc):
                assert time.monotonic() < deadline, [s.store.max_offset_in_queue("T", 0) for s in svc]
                await asyncio.sleep(0.05)
            assert svc[0].commitlog.role == "LEADER"
            first = [s.node_store.get(0) for s in svc]
            assert {e.pos for e in first} == {divided}  # the same position on every member
            assert len({bytes(e.body) for e in first}) == 1
            for follower in svc[1:]:
                assert follower.store.commitlog.old is None
                assert follower.store.min_offset_in_queue("T", 0) == OLD
                # An old offset on a follower: below its log, as an expired one.
                assert follower.store.get_messages("T", 0, 0, 1).status == GetMessageStatus.OFFSET_TOO_SMALL
                assert follower.store.lookup(0) is None
            # The client's reads go to the leader, the upgraded member: old and new alike.
            async with AsyncConsumer(peers, "cg", "T", dledger_group="g") as consumer:
                got = await consumer.pull(0, OLD - 2, 4)
                assert [m.body[:8] for m in got.messages] == [b"old-0118", b"old-0119", b"new-0000", b"new-0001"]
                assert [m.queue_offset for m in got.messages] == [OLD - 2, OLD - 1, OLD, OLD + 1]
                found = await consumer.query("k3")
                assert sorted(m.body[:8] for m in found) == [b"new-0003", b"old-0003"]
        finally:
            for s in servers:
                await s.close()

    asyncio.run(run())

    # Leadership: a member without the old files takes no writes (it would number the old
    # queues from 0 again), the upgraded member does.
    for k, may_write in ((1, False), (0, True)):
        cfg = MessageStoreConfig(
            enable_dledger_commit_log=True,
            dledger_self_id=f"n{k}",
            dledger_peers=peers,
            preferred_leader_id="n0",
            mapped_file_size_commit_log=FILE,
        )
        with MessageStore(tmp_path / f"n{k}", cfg, appender=member_appender, dispatch_thread=False) as store:
            store.commitlog.on_role_change("LEADER", 99, lambda: True)
            time.sleep(0.3)
            assert store.commitlog.writable is may_write
            if not may_write:
                res = store.put_message(Message("T", b"x", queue_id=0))
                assert not res.ok and "classic commit log this member does not hold" in res.reason
