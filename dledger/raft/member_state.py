"""DLedger's MemberState: who we are, who the peers are, role, term and vote.

Term and vote go through a ``TermStore`` and are saved before the in-memory values change,
so nothing that depends on them (a granted vote, a new term) can be observed before it is
durable (Raft paper, Figure 2: persistent state is updated on stable storage before
responding to RPCs).
"""

from __future__ import annotations

import logging
from enum import IntEnum
from typing import Protocol

from dledger.codes import ResponseCode
from dledger.config import DLedgerConfig
from dledger.errors import check
from dledger.peers import split_peers

log = logging.getLogger(__name__)


class Role(IntEnum):
    """MemberState.Role, in DLedger's enum order."""

    UNKNOWN = 0
    CANDIDATE = 1
    LEADER = 2
    FOLLOWER = 3


class TermStore(Protocol):
    """Durable home of ``currTerm`` and ``voteLeader``."""

    def load(self) -> tuple[int, str | None]:
        """The saved (term, voted-for); (0, None) when nothing was saved yet."""
        ...

    def save(self, term: int, vote_for: str | None) -> None:
        """Durably replace the saved pair; must not return before it is durable."""
        ...


class MemoryTermStore:
    """A TermStore in memory. The simulator keeps it across a simulated crash."""

    def __init__(self, term: int = 0, vote_for: str | None = None) -> None:
        self.term = term
        self.vote_for = vote_for
        self.saves = 0

    def load(self) -> tuple[int, str | None]:
        return self.term, self.vote_for

    def save(self, term: int, vote_for: str | None) -> None:
        self.term = term
        self.vote_for = vote_for
        self.saves += 1


class MemberState:
    def __init__(self, config: DLedgerConfig, term_store: TermStore) -> None:
        self.group = config.group
        self.self_id = config.self_id
        self.peer_map = split_peers(config.peers)
        if self.self_id not in self.peer_map:
            raise ValueError(f"self id {self.self_id!r} is not in peers {config.peers!r}")
        self.term_store = term_store
        # DLedger starts every member as a candidate.
        self.role = Role.CANDIDATE
        self.leader_id: str | None = None
        self.curr_term, self.curr_vote_for = term_store.load()
        self.known_max_term_in_group = -1
        self.transferee: str | None = None
        self.term_to_take_leadership = -1
        self.peers_live_table: dict[str, bool] = {}

    # --- queries -------------------------------------------------------------------------

    def peer_size(self) -> int:
        return len(self.peer_map)

    def is_quorum(self, num: int) -> bool:
        return num >= self.peer_size() // 2 + 1

    def is_peer_member(self, peer_id: str | None) -> bool:
        return peer_id is not None and peer_id in self.peer_map

    def is_leader(self) -> bool:
        return self.role == Role.LEADER

    def is_follower(self) -> bool:
        return self.role == Role.FOLLOWER

    def is_candidate(self) -> bool:
        return self.role == Role.CANDIDATE

    def others(self) -> list[str]:
        return [p for p in self.peer_map if p != self.self_id]

    # --- transitions (MemberState's synchronized methods) ----------------------------------

    def next_term(self) -> int:
        """Only a candidate moves its term: to the largest known term, or one past its own."""
        check(self.role == Role.CANDIDATE, ResponseCode.ILLEGAL_MEMBER_STATE, f"{self.role.name} != CANDIDATE")
        term = self.known_max_term_in_group if self.known_max_term_in_group > self.curr_term else self.curr_term + 1
        self.term_store.save(term, None)
        self.curr_term, self.curr_vote_for = term, None
        return term

    def set_curr_vote_for(self, vote_for: str | None) -> None:
        # Saved first: a vote must survive a crash before anyone hears it was granted.
        self.term_store.save(self.curr_term, vote_for)
        self.curr_vote_for = vote_for

    def change_to_leader(self, term: int) -> None:
        check(self.curr_term == term, ResponseCode.ILLEGAL_MEMBER_STATE, f"{self.curr_term} != {term}")
        self.role = Role.LEADER
        self.leader_id = self.self_id
        self.peers_live_table.clear()

    def change_to_follower(self, term: int, leader_id: str) -> None:
        check(self.curr_term == term, ResponseCode.ILLEGAL_MEMBER_STATE, f"{self.curr_term} != {term}")
        self.role = Role.FOLLOWER
        self.leader_id = leader_id
        self.transferee = None

    def change_to_candidate(self, term: int) -> None:
        check(term >= self.curr_term, ResponseCode.ILLEGAL_MEMBER_STATE, f"{term} < {self.curr_term}")
        if term > self.known_max_term_in_group:
            self.known_max_term_in_group = term
        # currTerm itself moves only in next_term, so a step-down never skips persisting it.
        self.role = Role.CANDIDATE
        self.leader_id = None
        self.transferee = None

    def __repr__(self) -> str:
        return (
            f"MemberState({self.self_id} {self.role.name} term={self.curr_term} "
            f"vote={self.curr_vote_for} leader={self.leader_id})"
        )
