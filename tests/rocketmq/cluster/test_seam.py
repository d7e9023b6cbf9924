"""The server's GroupApplication seam, with a toy application on a one-member group in this process:
it sees the member become leader, sees the committed index move, answers its own request code
and proposes through the GroupHandle."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

from dledger.codes import ResponseCode
from dledger.config import MEMORY, DLedgerConfig
from dledger.metrics import AppMetric
from dledger.net.transport import Response, RpcClient
from dledger.peers import split_peers
from dledger.raft.member_state import Role
from dledger.server import GroupApplication, GroupHandle, NodeServer
from dledger.store.base import DLedgerStore
from dledger.testing import free_ports, one_member_config

pytestmark = pytest.mark.timeout(60)

TOY_CODE = 7777


class Toy:
    request_codes = frozenset({TOY_CODE})

    def __init__(self) -> None:
        self.roles: list[tuple[Role, int, str | None]] = []
        self.committed: list[int] = []
        self.group: GroupHandle | None = None
        self.closed = False

    @property
    def node_store(self) -> DLedgerStore | None:
        return None

    def bind(self, group: GroupHandle) -> None:
        self.group = group

    def on_role_change(self, role: Role, term: int, leader_id: str | None) -> None:
        self.roles.append((role, term, leader_id))

    def on_committed(self, committed_index: int) -> None:
        self.committed.append(committed_index)

    def metrics(self) -> list[AppMetric]:
        return [AppMetric("toy_committed", "commits seen", "counter", (), [((), len(self.committed))])]

    async def handle(self, code: int, body: dict[str, Any], peer: str) -> Response:
        assert self.group is not None
        if not self.group.is_leader:
            return Response(ResponseCode.NOT_LEADER, {"leader": self.group.leader_id})
        r = await self.group.propose([bytes(b) for b in body["bodies"]])
        return Response(r.code, {"index": r.index, "positions": list(r.positions)})

    def close(self) -> None:
        self.closed = True


def test_an_application_sees_roles_commits_and_answers_its_codes(tmp_path: Path) -> None:
    toy = Toy()
    app: GroupApplication = toy  # the protocol is satisfied
    # The entries stay in memory; the member's term file goes under the store dir (this test's
    # own, not the default /tmp/dledgerstore, where one run's term would reach the next).
    cfg = one_member_config(tmp_path, store_type=MEMORY)
    addr = split_peers(cfg.peers)["n0"]

    async def run() -> None:
        server = NodeServer(cfg, application_factory=lambda c, addr: app)
        await server.start()
        rpc = RpcClient(timeout=5.0)
        try:
            for _ in range(200):
                if toy.roles and toy.roles[-1][0] == Role.LEADER:
                    break
                await asyncio.sleep(0.02)
            assert toy.roles[-1][0] == Role.LEADER and toy.roles[-1][2] == "n0"
            assert toy.group is not None and toy.group.self_id == "n0" and toy.group.name == "g"
            resp = await rpc.call(addr, TOY_CODE, {"bodies": [b"a", b"b", b"c"]}, group="g")
            assert resp.code == ResponseCode.SUCCESS and resp.body["index"] == 2
            assert toy.committed[-1] == 2
            assert toy.committed == sorted(toy.committed)
            # DLedger's own requests still work beside the application's.
            resp = await rpc.call(addr, 50000, {}, group="g")
            assert resp.code == ResponseCode.SUCCESS and resp.body["committed_index"] == 2
        finally:
            await rpc.close()
            await server.close()
        assert toy.closed

    asyncio.run(run())
    assert (tmp_path / "dledger-n0" / "currterm").is_file()


class _Follower:
    """A group member's appender for a store opened by MessageStore: it takes no puts itself."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def append_batch(self, bodies: Any, term: int) -> Any:
        raise AssertionError("a member of a group does not append by itself")

    @property
    def committed_pos(self) -> int:
        return int(self.store.committed_pos)


def test_a_member_reads_only_what_its_group_committed(tmp_path: Path):
    """A member's log whose checkpoint records nothing committed (killed before its first
    checkpoint) holds a tail the next leader may cut: dispatch must not read it until it commits."""
    from dledger.rocketmq.store.config import MessageStoreConfig
    from dledger.rocketmq.store.message import Message
    from dledger.rocketmq.store.message_store import MessageStore

    cfg = MessageStoreConfig(enable_dledger_commit_log=True, mapped_file_size_commit_log=1 << 20)
    with MessageStore(tmp_path / "a", cfg) as s:
        for i in range(3):
            assert s.put_message(Message("T", b"m%d" % i)).ok
    shutil.copytree(tmp_path / "a" / "dledger-n0", tmp_path / "b" / "dledger-n0")
    ckpt = tmp_path / "b" / "dledger-n0" / "checkpoint"
    ckpt.write_text(ckpt.read_text().replace("committedIndex=2", "committedIndex=-1"))
    opened: list[Any] = []

    def factory(dstore: Any) -> _Follower:
        opened.append(dstore)
        return _Follower(dstore)

    with MessageStore(tmp_path / "b", cfg, appender=factory) as s:
        assert s.committed_phys_offset == 0 and s.max_offset_in_queue("T", 0) == 0
        assert s.get_messages("T", 0, 0).messages == []
        dstore = opened[0]
        dstore.update_committed_index(dstore.ledger_end_term, 1)
        s.on_committed(dstore.committed_pos)
        assert s.wait_dispatched(10)
        assert [m.body for m in s.get_messages("T", 0, 0).messages] == [b"m0", b"m1"]


def test_a_message_member_dispatches_at_its_roles_pace(tmp_path: Path):
    """A member that is not the leader dispatches a heavy stream at FOLLOWER_HEAVY_PAUSE (its
    queues serve follower reads only); a leader at HEAVY_PAUSE, the pace long polls and its
    readiness to take puts were measured with."""
    from dledger.rocketmq.broker.message_service import MessageService
    from dledger.rocketmq.store.dispatch import FOLLOWER_HEAVY_PAUSE, HEAVY_PAUSE

    async def member(name: str, peers: int) -> tuple[Role, float]:
        """The role and the pace of n0 of a group of ``peers`` members of which only n0 runs,
        once it leads or after a few vote rounds."""
        ports = free_ports(peers)
        cfg = DLedgerConfig(
            group="g",
            self_id="n0",
            peers=";".join(f"n{k}-127.0.0.1:{p}" for k, p in enumerate(ports)),
            store_base_dir=str(tmp_path / name),
            message_store=True,
            mapped_file_size_for_entry_data=1 << 22,
        )
        apps: list[MessageService] = []

        def factory(c: DLedgerConfig, address: str) -> MessageService:
            apps.append(MessageService(c, address))
            return apps[-1]

        server = NodeServer(cfg, application_factory=factory)
        await server.start()
        try:
            (svc,) = apps
            assert svc._group is not None and svc._reput is not None
            for _ in range(100):
                if svc._group.is_leader:
                    break
                await asyncio.sleep(0.02)
            return svc._group.role, svc._reput.heavy_pause
        finally:
            await server.close()

    # Alone in a group of two, n0 can never win a vote; alone in a group of one, it leads.
    assert asyncio.run(member("two", 2)) == (Role.CANDIDATE, FOLLOWER_HEAVY_PAUSE)
    assert asyncio.run(member("one", 1)) == (Role.LEADER, HEAVY_PAUSE)
