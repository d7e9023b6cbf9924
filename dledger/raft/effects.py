"""What ``RaftNode.step``/``tick``/``propose`` return: messages to send and effects to apply.

The caller (the node runtime, or the simulator) must act on the list **in order**, and must
not act on anything after a ``Flush`` until the store is durable up to that point; then it
reports the flush with ``node.flushed(now, flush.token)``. Acks, votes and commit-index
announcements come after the ``Flush`` that makes the entries they speak for durable, which
is what lets Raft count them (an ack for an entry a crash can still take away would let a
"committed" entry vanish).

Two kinds of output are *early*: they may be carried out at once, ahead of any ``Flush``
still in flight (``is_early``). They are the leader's pushes (``Send.early``) and every
``AppendDone``. The leader writes to its own disk while its followers write to theirs
(Raft thesis §10.2.1): it counts its own copy of an entry only once ``flushed`` reports it
durable, so the commit index its pushes carry, and every SUCCESS it reports, already stands
on a durable majority; a push itself only offers entries, it vouches for nothing.

``flush_order.FlushOrder`` is this rule for whoever drives a node (the node runtime, the
simulator): it takes the outputs and the flushes' start and end, and says what may go.
"""

from __future__ import annotations

from dataclasses import dataclass

from dledger.raft.member_state import Role
from dledger.raft.messages import AppendEntryResponse, LeadershipTransferResponse, Message


@dataclass(slots=True)
class Send:
    """Send ``msg`` to member (or client) ``to``."""

    to: str
    msg: Message
    # May go before a Flush in flight (see the module docstring); only the leader's pushes are.
    early: bool = False


@dataclass(slots=True)
class Flush:
    """Make every store write done so far durable (``store.flush()``) before going on, then
    call ``node.flushed(now, token)``.

    ``end_index`` is the store's ledger end when the effect was made, for the caller's logs.
    """

    end_index: int
    token: int = 0


@dataclass(slots=True)
class AppendDone:
    """A local ``propose`` finished: ``response.code`` is SUCCESS (with index/pos/positions),
    or an error such as NOT_LEADER, LEADER_PENDING_FULL, WAIT_QUORUM_ACK_TIMEOUT, TERM_CHANGED.

    WAIT_QUORUM_ACK_TIMEOUT and TERM_CHANGED mean "unknown", not "failed": the entry is in the
    leader's log and may still commit, exactly as in DLedger.
    """

    handle: int
    response: AppendEntryResponse


@dataclass(slots=True)
class ReadDone:
    """A ``read_index`` request finished. On SUCCESS every entry up to ``read_index`` is
    committed and has been delivered to the state machine, and leadership was confirmed by a
    quorum after the request arrived, so a read served now is linearizable."""

    handle: int
    code: int
    read_index: int
    term: int


@dataclass(slots=True)
class TransferDone:
    """A local ``transfer_leadership`` finished (DLedger's LeadershipTransferResponse)."""

    handle: int
    response: LeadershipTransferResponse


@dataclass(slots=True)
class RoleChanged:
    """DLedger's RoleChangeHandler.handle(term, role), as data."""

    term: int
    role: Role
    leader_id: str | None


Output = Send | Flush | AppendDone | ReadDone | TransferDone | RoleChanged


def is_early(out: Output) -> bool:
    """True for an output that need not wait for a Flush in flight (module docstring)."""
    return isinstance(out, AppendDone) or (isinstance(out, Send) and out.early)
