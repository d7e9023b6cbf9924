"""The seam between a node and the application that rides on one of its groups.

The node server (``dledger.server``) drives consensus; an application (the RocketMQ message
service is one) sees role changes and commits, answers request codes of its own and proposes
entries through a ``GroupHandle``. Whoever builds the server hands it the application (the CLI,
``dledger.testing``), so the server never imports an application and an application never
imports the server: both import this module.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from dledger.config import DLedgerConfig
from dledger.metrics import AppMetric
from dledger.net.transport import Response
from dledger.raft.member_state import Role
from dledger.raft.messages import AppendEntryResponse
from dledger.store.base import DLedgerStore


class GroupHandle(Protocol):
    """What a ``GroupApplication`` may do with its group: look at the member and propose entries."""

    @property
    def name(self) -> str: ...

    @property
    def self_id(self) -> str: ...

    @property
    def address(self) -> str: ...

    @property
    def peers(self) -> dict[str, str]: ...

    @property
    def role(self) -> Role: ...

    @property
    def term(self) -> int: ...

    @property
    def leader_id(self) -> str | None: ...

    @property
    def is_leader(self) -> bool: ...

    @property
    def store(self) -> DLedgerStore: ...

    def propose(self, bodies: Sequence[bytes]) -> asyncio.Future[AppendEntryResponse]:
        """Append ``bodies`` as one batch now (the leader writes them to its log before this
        returns, or refuses at once); the future gets the consensus answer (SUCCESS once a
        quorum holds them). Call on the loop."""
        ...


class GroupApplication(Protocol):
    """An application that rides on one group (the RocketMQ message store is one): it sees the
    member's role changes and committed-index moves, answers request codes of its own, and may
    bring the store the node keeps its log in.

    Everything is called on the server's event loop, after the consensus call whose outputs
    carried the change; ``handle`` may await.
    """

    # Request codes the application answers (they must not collide with DLedger's).
    request_codes: frozenset[int]

    @property
    def node_store(self) -> DLedgerStore | None:
        """The store the group's node must use (the application reads it too); None: the node's own."""

    def bind(self, group: GroupHandle) -> None:
        """Called once, on the loop, when the server starts."""

    def on_role_change(self, role: Role, term: int, leader_id: str | None) -> None: ...

    def on_committed(self, committed_index: int) -> None: ...

    async def handle(self, code: int, body: dict[str, Any], peer: str) -> Response:
        """A request with one of ``request_codes``; ``peer`` is the sender's address as this
        member's connection sees it (``host:port``; ``?`` when unknown)."""

    def close(self) -> None:
        """Called once, off the loop, before the node's store is closed."""

    def metrics(self) -> list[AppMetric]:
        """The application's metrics now, added to the member's (``--metrics-port``); on the loop."""


# Builds the application of a group (or None for a plain group): (config, the member's address).
ApplicationFactory = Callable[[DLedgerConfig, str], "GroupApplication | None"]
