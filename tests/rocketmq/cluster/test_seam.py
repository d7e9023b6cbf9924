"""The server's GroupApplication seam, with a toy application on a one-member group in this process:
it sees the member become leader, sees the committed index move, answers its own request code
and proposes through the GroupHandle."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from dledger.codes import ResponseCode
from dledger.config import MEMORY, DLedgerConfig
from dledger.net.transport import Response, RpcClient
from dledger.raft.member_state import Role
from dledger.server import GroupApplication, GroupHandle, NodeServer
from dledger.store.base import DLedgerStore
from dledger.testing import free_ports

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

    async def handle(self, code: int, body: dict[str, Any]) -> Response:
        assert self.group is not None
        if not self.group.is_leader:
            return Response(ResponseCode.NOT_LEADER, {"leader": self.group.leader_id})
        r = await self.group.propose([bytes(b) for b in body["bodies"]])
        return Response(r.code, {"index": r.index, "positions": list(r.positions)})

    def close(self) -> None:
        self.closed = True


def test_an_application_sees_roles_commits_and_answers_its_codes():
    toy = Toy()
    app: GroupApplication = toy  # the protocol is satisfied
    port = free_ports(1)[0]
    cfg = DLedgerConfig(group="g", self_id="n0", peers=f"n0-127.0.0.1:{port}", store_type=MEMORY)

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
            resp = await rpc.call(f"127.0.0.1:{port}", TOY_CODE, {"bodies": [b"a", b"b", b"c"]}, group="g")
            assert resp.code == ResponseCode.SUCCESS and resp.body["index"] == 2
            assert toy.committed[-1] == 2
            assert toy.committed == sorted(toy.committed)
            # DLedger's own requests still work beside the application's.
            resp = await rpc.call(f"127.0.0.1:{port}", 50000, {}, group="g")
            assert resp.code == ResponseCode.SUCCESS and resp.body["committed_index"] == 2
        finally:
            await rpc.close()
            await server.close()
        assert toy.closed

    asyncio.run(run())
