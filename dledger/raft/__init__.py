"""The consensus layer: DLedger's election and replication rules as sans-IO objects.

See ``node.RaftNode`` for the entry points and ``effects`` for what they return.
"""

from dledger.raft.effects import AppendDone, Flush, Output, ReadDone, RoleChanged, Send, TransferDone, is_early
from dledger.raft.member_state import MemberState, MemoryTermStore, Role, TermStore
from dledger.raft.messages import (
    AppendEntryResponse,
    HeartBeatRequest,
    HeartBeatResponse,
    LeadershipTransferRequest,
    LeadershipTransferResponse,
    Message,
    ParseResult,
    PushEntryRequest,
    PushEntryResponse,
    PushType,
    VoteRequest,
    VoteResponse,
    VoteResult,
    message_from_wire,
)
from dledger.raft.node import RaftNode, error_response
from dledger.raft.timings import RaftTimings

__all__ = [
    "AppendDone",
    "AppendEntryResponse",
    "Flush",
    "HeartBeatRequest",
    "HeartBeatResponse",
    "LeadershipTransferRequest",
    "LeadershipTransferResponse",
    "MemberState",
    "MemoryTermStore",
    "Message",
    "Output",
    "ParseResult",
    "PushEntryRequest",
    "PushEntryResponse",
    "PushType",
    "RaftNode",
    "RaftTimings",
    "ReadDone",
    "Role",
    "RoleChanged",
    "Send",
    "TermStore",
    "TransferDone",
    "VoteRequest",
    "VoteResponse",
    "VoteResult",
    "error_response",
    "is_early",
    "message_from_wire",
]
